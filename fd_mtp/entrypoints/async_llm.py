"""`AsyncLLM`: an asyncio front over `fd_mtp.LLM`'s engine, for servers.

The engine steps in its own thread (``fd-mtp-engine``) and never blocks the event loop:

* the event loop hands requests and aborts to the thread through a command list (under one lock);
  the thread applies them *between* steps, so requests join and leave the running batch at step
  boundaries, as continuous batching wants;
* every step's `StreamDelta`s go back to the event loop (``loop.call_soon_threadsafe``) into one
  `asyncio.Queue` per request, which `RequestStream` iterates as `RequestEvent`s (with the new
  tokens' log-probabilities when the request asked for them);
* prompt tokenization (and any other front work a server hands to `AsyncLLM.offload`, e.g. chat
  template rendering) runs in a small thread pool (``fd-mtp-front``), never in the engine thread,
  so a multi-megabyte prompt does not stall the running batch. The pool uses the front's own copy
  of the tokenizer (``copy.deepcopy(llm.tokenizer)``): the engine's tokenizer object stays the
  engine thread's, which keeps detokenizing incrementally (a window of a few tokens per step).
  SentencePiece releases the GIL while it encodes, so the engine thread keeps stepping. A prompt
  of ``max_model_len`` tokens or more is refused here, before the engine sees it.

A request whose consumer goes away (an HTTP client that disconnects: its `RequestStream` is closed
or its task cancelled) is aborted at the next step boundary: its slot and KV blocks are freed.

Admission (exact): a request is *in flight* from `AsyncLLM.add_requests` until its last event;
the first ``max_num_seqs`` in-flight requests have (or are about to get) a slot, the rest wait,
so ``queue_depth = max(0, in_flight - max_num_seqs)``. `add_requests` of n requests raises
`QueueFullError` when ``in_flight + n - max_num_seqs > max_waiting_requests`` (nothing queued);
the error carries ``retry_after``, a whole number of seconds (see `QueueFullError`). A batch of
more than ``max_num_seqs + max_waiting_requests`` requests can never be admitted (ValueError).

`AsyncLLM.shutdown` drains: it refuses new requests, lets the running ones finish, then stops the
thread. `AsyncLLM.abort_all` ends every in-flight request now (a server's shutdown timeout): each
stream gets a last event with ``finish_reason="abort"`` and ``error`` set.

>>> import asyncio, fd_mtp                                                       # doctest: +SKIP
>>> front = AsyncLLM(fd_mtp.LLM(max_num_seqs=4)); front.start()                 # doctest: +SKIP
>>> async def main():                                                           # doctest: +SKIP
...     [stream] = await front.add_requests([("r0", "def f(", fd_mtp.SamplingParams(max_tokens=8))])
...     async for event in stream:
...         print(event.token_ids, event.finished)
"""

from __future__ import annotations

import asyncio
import collections
import copy
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..engine.request import RequestOutput, SpeculativeMetrics, StreamDelta
from ..engine.sampling_params import SamplingParams
from ..model.tokenizer import encode_prompt

#: threads of the front's pool (tokenization, chat templates): one huge prompt occupies one, the
#: others keep serving small requests
FRONT_THREADS = 4
#: finished requests whose time in flight `QueueFullError.retry_after` averages
RETRY_WINDOW = 64
#: bounds of ``retry_after`` (seconds)
RETRY_AFTER_MIN_S, RETRY_AFTER_MAX_S = 1, 60


class QueueFullError(RuntimeError):
    """The waiting queue is full (``max_waiting_requests``); a server answers 503.

    ``retry_after``: whole seconds after which the places may be free:
    ``ceil(missing * mean_time_in_flight / max_num_seqs)`` clamped to [1, 60], where ``missing``
    is how many waiting places the request lacks and ``mean_time_in_flight`` the mean time from
    `AsyncLLM.add_requests` to the last event of the last 64 finished requests (1 s before any
    finished): with every slot busy, a place frees about every ``mean / max_num_seqs`` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class EngineDeadError(RuntimeError):
    """The engine thread has stopped: shut down, or failed with an exception (named here)."""


@dataclass
class RequestEvent:
    """What one engine step produced for one request.

    ``token_ids`` / ``text``: only what this step added (text may lag tokens by a partial
    character or a possible stop-string prefix; it catches up later). ``logprobs``: None unless
    the request's ``SamplingParams.logprobs`` is set; then one ``{token id: Logprob}`` per entry
    of ``token_ids`` (`fd_mtp.RequestOutput.logprobs`' entries). ``finished`` is True on the last
    event only, which carries the whole `RequestOutput` in ``output`` (token ids, text, finish
    reason, prompt token ids, metrics with the speculative draft statistics). ``error``: why the
    request was ended by `AsyncLLM.abort_all` (``finish_reason`` "abort"), else None.
    ``prompt_token_ids`` / ``prompt_logprobs``: None unless the request's
    ``SamplingParams.prompt_logprobs`` is set; then, on the request's first event only, its
    prompt and `fd_mtp.RequestOutput.prompt_logprobs` (the first entry None).
    """

    request_id: str
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None = None
    output: RequestOutput | None = None
    logprobs: list | None = None
    error: str | None = None
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list | None = None


class StatsListener:
    """What `AsyncLLM` reports as it runs (a server's Prometheus metrics implement it). Every
    method is called from the engine thread; ``now`` is ``time.perf_counter()``."""

    def request_added(self, request_id: str, num_prompt_tokens: int, now: float) -> None:
        """A request joined the engine's waiting queue."""

    def tokens(self, request_id: str, num_tokens: int, now: float) -> None:
        """A step emitted ``num_tokens`` (>= 1) tokens for the request."""

    def request_finished(self, request_id: str, finish_reason: str, now: float) -> None:
        """The request finished ("stop", "length" or "abort")."""

    def speculative_step(self, delta: SpeculativeMetrics) -> None:
        """Draft statistics of one engine step, summed over its decoding requests."""

    def step(self, num_preemptions: int) -> None:
        """One engine step ran; ``num_preemptions`` preemptions happened in it."""


@dataclass
class _Add:
    request_id: str
    prompt: object
    params: SamplingParams
    stream: RequestStream


@dataclass
class _Abort:
    request_id: str


@dataclass
class _AbortAll:
    reason: str


def _own_copy(tokenizer):
    """A copy of ``tokenizer`` for the front's threads (the engine thread keeps the original);
    the tokenizer itself when it cannot be copied (then both threads use one object, which
    SentencePiece and Hugging Face's fast tokenizers allow for encode / decode)."""
    if tokenizer is None:
        return None
    try:
        return copy.deepcopy(tokenizer)
    except Exception:  # noqa: BLE001 - an object that does not deep-copy: share it
        return tokenizer


class RequestStream:
    """The events of one request, in step order, on the event loop. Iterate it (``async for``);
    `started` resolves when the engine thread queued the request (with ValueError when it refused
    it: bad prompt, too long for ``max_model_len``, more KV blocks than the cache has, ...).
    Leaving the iteration early, `close`, or cancelling the task that iterates aborts the request
    (its slot and KV blocks are freed at the next step boundary)."""

    def __init__(self, front: AsyncLLM, request_id: str, loop: asyncio.AbstractEventLoop):
        self.front = front
        self.request_id = request_id
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.started: asyncio.Future = loop.create_future()
        self.finished = False
        self.added_time = time.perf_counter()
        self.wants_logprobs = False  # SamplingParams.logprobs is set
        self.wants_prompt_logprobs = False  # SamplingParams.prompt_logprobs is set (until sent)
        self.num_prompt_tokens = 0  # known once the prompt is token ids (0 until then)
        self.logprobs_sent = 0  # engine thread: log-probability entries already posted

    # -- engine thread side -----------------------------------------------------------------------
    def _post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass

    def _resolve(self, exc: BaseException | None) -> None:
        def set_result():
            if not self.started.done():
                if exc is None:
                    self.started.set_result(self.request_id)
                else:
                    self.started.set_exception(exc)

        try:
            self.loop.call_soon_threadsafe(set_result)
        except RuntimeError:
            pass

    # -- event loop side --------------------------------------------------------------------------
    def __aiter__(self):
        return self._iterate()

    async def _iterate(self):
        try:
            while True:
                item = await self.queue.get()
                if isinstance(item, BaseException):
                    self.finished = True
                    raise item
                if item.finished:
                    self.finished = True
                yield item
                if item.finished:
                    return
        finally:
            self.close()

    def close(self) -> None:
        """Abort the request unless it finished (idempotent)."""
        if not self.finished:
            self.finished = True
            self.front._abort(self.request_id)


class AsyncLLM:
    """Runs an `fd_mtp.LLM`'s engine in a thread and serves requests to asyncio code.

    Args:
        llm: the `fd_mtp.LLM` (its ``engine`` is used from the engine thread only, once started),
            or an object with the same attributes, e.g. `fd_mtp.distributed.pd.PDEngineClient`
            (``fd-mtp serve --pd``).
        max_waiting_requests: in-flight requests beyond ``max_num_seqs`` (>= 1); more raise
            `QueueFullError` (see the module docstring).
        stats: a `StatsListener` (e.g. the server's Prometheus metrics), or None.
    """

    def __init__(self, llm, *, max_waiting_requests: int = 256, stats: StatsListener | None = None):
        if not isinstance(max_waiting_requests, int) or max_waiting_requests < 1:
            raise ValueError(
                f"max_waiting_requests must be an int >= 1, got {max_waiting_requests!r}"
            )
        self.llm = llm
        self.engine = llm.engine
        self.max_waiting_requests = max_waiting_requests
        self.max_num_seqs = int(llm.scheduler_config.max_num_seqs)
        self.stats = stats if stats is not None else StatsListener()
        #: the front's tokenizer (a copy of the LLM's, used by the front's threads only), or None
        self.tokenizer = _own_copy(llm.tokenizer)
        model = getattr(llm, "model", None)
        #: the model's vocabulary size (token ids are in [0, vocab_size)); None when unknown
        self.vocab_size = (
            int(model.config.vocab_size)
            if model is not None
            else getattr(llm, "vocab_size", None)  # a front without the model in this process
        )
        self._pool = ThreadPoolExecutor(FRONT_THREADS, thread_name_prefix="fd-mtp-front")
        self._cond = threading.Condition()
        self._commands: list = []
        self._num_queued = 0  # _Add commands not yet applied
        self._streams: dict[str, RequestStream] = {}  # in flight: added, last event not posted
        self._times_in_flight: collections.deque = collections.deque(maxlen=RETRY_WINDOW)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._error: BaseException | None = None
        self._spec_seen = (
            SpeculativeMetrics(self.engine.spec_metrics.num_speculative_tokens)
            if self.engine.spec_metrics is not None
            else None
        )
        self._preemptions_seen = self.engine.num_preemptions

    # -- state (safe to read from any thread: ints and list lengths) --------------------------------
    @property
    def max_model_len(self) -> int:
        return self.llm.max_model_len

    @property
    def num_running(self) -> int:
        return len(self.engine.running)

    @property
    def num_waiting(self) -> int:
        """Requests without a slot in the engine: queued commands plus the engine's waiting list
        (what the ``num_requests_waiting`` gauge shows; admission counts `queue_depth`)."""
        return self._num_queued + len(self.engine.waiting)

    @property
    def num_in_flight(self) -> int:
        """Requests added and not finished (holding a slot, about to get one, or waiting)."""
        return len(self._streams)

    @property
    def queue_depth(self) -> int:
        """In-flight requests that cannot get a slot: ``max(0, in_flight - max_num_seqs)``; what
        ``max_waiting_requests`` bounds."""
        return max(0, len(self._streams) - self.max_num_seqs)

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use, in [0, 1]."""
        bm = self.engine.block_manager
        return 1.0 - bm.num_free / bm.num_blocks

    @property
    def started(self) -> bool:
        """`start` was called."""
        return self._thread is not None

    @property
    def is_running(self) -> bool:
        """The engine thread is alive and accepting requests, and the engine's processes (a
        multi-process front's) run."""
        return (
            self._thread is not None
            and self._thread.is_alive()
            and not self._stopping
            and self._error is None
            and self.engine.is_alive()
        )

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread (once)."""
        if self._thread is not None:
            raise RuntimeError("AsyncLLM.start: already started")
        self._thread = threading.Thread(target=self._loop, name="fd-mtp-engine", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float | None = None) -> bool:
        """Refuse new requests, let queued and running ones finish, stop the thread. Returns
        whether the thread stopped within ``timeout`` seconds (None: wait as long as it takes)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abort_all(self, reason: str) -> int:
        """Refuse new requests and end every in-flight request at the next step boundary: each
        stream's last event has ``finish_reason="abort"`` and ``error=reason``. Callable from any
        thread; returns the number of requests in flight when called."""
        with self._cond:
            self._stopping = True
            n = len(self._streams)
            self._commands.append(_AbortAll(reason))
            self._cond.notify()
        return n

    # -- front work (event loop) --------------------------------------------------------------------
    async def offload(self, fn, *args):
        """``fn(*args)`` in the front's thread pool (not the engine thread), awaited."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def encode(self, text: str, add_special_tokens: bool | None = None) -> list[int]:
        """`encode_prompt` with the front's tokenizer, in the front's thread pool."""
        return await self.offload(encode_prompt, self.tokenizer, text, add_special_tokens)

    def check_capacity(self, n: int) -> None:
        """Raise ValueError when a batch of ``n`` requests can never be admitted (more than
        ``max_num_seqs + max_waiting_requests``), `QueueFullError` when it cannot be now (a
        server checks this before tokenizing; `add_requests` checks again, exactly)."""
        limit = self.max_num_seqs + self.max_waiting_requests
        if n > limit:
            raise ValueError(
                f"{n} requests in one call can never be admitted: at most {limit} requests are "
                f"in flight at once ({self.max_num_seqs} slots + {self.max_waiting_requests} "
                "waiting places)"
            )
        missing = len(self._streams) + n - self.max_num_seqs - self.max_waiting_requests
        if missing > 0:
            times = list(self._times_in_flight)
            mean = sum(times) / len(times) if times else 1.0
            retry = math.ceil(missing * mean / self.max_num_seqs)
            raise QueueFullError(
                f"the waiting queue is full ({self.max_waiting_requests} requests wait for a "
                f"slot, {self.max_num_seqs} run); retry later",
                min(RETRY_AFTER_MAX_S, max(RETRY_AFTER_MIN_S, retry)),
            )

    # -- requests (event loop) ----------------------------------------------------------------------
    async def add_requests(self, requests) -> list[RequestStream]:
        """Queue ``[(request_id, prompt, SamplingParams), ...]`` together and wait until the engine
        thread accepted them all. ``prompt``: text (tokenized in the front's thread pool first)
        or token ids.

        Raises:
            QueueFullError: fewer than ``len(requests)`` places are free (nothing queued).
            EngineDeadError: the engine thread is not running (shut down, or failed).
            ValueError: a request is refused (the others are aborted): a batch that can never be
                admitted, a prompt of ``max_model_len`` tokens or more, or the engine's refusal;
                the message names the prompt, max_tokens, ... Its ``index`` attribute is the
                position of the refused request (None for the batch).
        """
        loop = asyncio.get_running_loop()
        self._check_alive()
        try:
            self.check_capacity(len(requests))
        except ValueError as exc:
            exc.index = None
            raise
        prompts = [p for _, p, _ in requests]
        if any(isinstance(p, str) for p in prompts) and self.tokenizer is not None:
            prompts = await self.offload(self._encode_all, prompts)
        for i, p in enumerate(prompts):
            if not isinstance(p, str) and hasattr(p, "__len__") and len(p) >= self.max_model_len:
                # the engine's check and message, here so that a huge prompt costs the engine
                # thread nothing
                exc = ValueError(
                    f"the prompt has {len(p)} tokens; max_model_len is {self.max_model_len} "
                    "(prompt + at least one generated token must fit)"
                )
                exc.index = i
                raise exc
        streams = [RequestStream(self, rid, loop) for rid, _, _ in requests]
        with self._cond:
            self._check_alive()
            self.check_capacity(len(requests))
            for (rid, _, params), prompt, stream in zip(requests, prompts, streams):
                stream.wants_logprobs = getattr(params, "logprobs", None) is not None
                stream.wants_prompt_logprobs = getattr(params, "prompt_logprobs", None) is not None
                stream.num_prompt_tokens = 0 if isinstance(prompt, str) else len(prompt)
                self._streams[rid] = stream
                self._commands.append(_Add(rid, prompt, params, stream))
            self._num_queued += len(requests)
            self._cond.notify()
        try:
            for i, stream in enumerate(streams):
                try:
                    await stream.started
                except ValueError as exc:
                    exc.index = i
                    raise
        except BaseException:
            for stream in streams:
                stream.close()
            raise
        return streams

    def _encode_all(self, prompts) -> list:
        out = []
        for i, p in enumerate(prompts):
            try:
                out.append(encode_prompt(self.tokenizer, p) if isinstance(p, str) else p)
            except ValueError as exc:
                exc.index = i
                raise
        return out

    def _abort(self, request_id: str) -> None:
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                self._commands.append(_Abort(request_id))
                self._cond.notify()

    def _check_alive(self) -> None:
        if self._error is not None:
            raise EngineDeadError(
                f"the engine thread failed: {type(self._error).__name__}: {self._error}"
            )
        if self._thread is None or not self._thread.is_alive() or self._stopping:
            raise EngineDeadError("the engine is shutting down or not started")
        if not self.engine.is_alive():
            raise EngineDeadError("a process of the engine has exited")

    # -- engine thread ------------------------------------------------------------------------------
    def _loop(self) -> None:
        engine = self.engine
        try:
            while True:
                with self._cond:
                    while not self._commands and not engine.has_unfinished():
                        if self._stopping:
                            return
                        self._cond.wait()
                    commands, self._commands = self._commands, []
                    for cmd in commands:
                        self._apply(cmd)
                if engine.has_unfinished():
                    deltas = engine.step()
                    self._dispatch(deltas)
        except BaseException as exc:  # a bug in the engine: fail every request, stay answerable
            self._error = exc
            with self._cond:
                self._commands = []
                self._num_queued = 0
                streams = list(self._streams.values())
                self._streams.clear()
            for stream in streams:
                stream._resolve(EngineDeadError(f"the engine failed: {type(exc).__name__}: {exc}"))
                stream._post(EngineDeadError(f"the engine failed: {type(exc).__name__}: {exc}"))

    def _finished(self, stream: RequestStream, now: float) -> None:
        """Bookkeeping of a stream whose last event is posted (engine thread, under the lock)."""
        self._times_in_flight.append(now - stream.added_time)

    def _apply(self, cmd) -> None:
        """Apply one command (engine thread, under the lock)."""
        engine = self.engine
        now = time.perf_counter()
        if isinstance(cmd, _Add):
            self._num_queued -= 1
            if cmd.request_id not in self._streams:  # aborted before it was queued
                return
            try:
                engine.add_request(cmd.prompt, cmd.params, request_id=cmd.request_id)
            except ValueError as exc:
                self._streams.pop(cmd.request_id, None)
                cmd.stream._resolve(exc)
                return
            self.stats.request_added(
                cmd.request_id, len(engine.requests[cmd.request_id].prompt_token_ids), now
            )
            cmd.stream._resolve(None)
        elif isinstance(cmd, _AbortAll):
            for rid in list(self._streams):
                self._end(rid, now, cmd.reason)
        else:
            self._end(cmd.request_id, now, None)

    def _end(self, request_id: str, now: float, error: str | None) -> None:
        """Abort one request (engine thread, under the lock); its stream gets its last event."""
        engine = self.engine
        req = engine.requests.get(request_id)
        stream = self._streams.pop(request_id, None)
        if req is None:
            if stream is not None and error is not None:
                self._finished(stream, now)
                stream._post(RequestEvent(request_id, [], "", True, "abort", None, None, error))
            return
        if not req.finished:
            engine.abort_request(request_id)
            self.stats.request_finished(request_id, "abort", now)
        output = engine.pop_output(request_id)
        if stream is not None:
            self._finished(stream, now)
            reason = "abort" if error is not None else output.finish_reason
            stream._post(RequestEvent(request_id, [], "", True, reason, output, None, error))

    def _dispatch(self, deltas: list[StreamDelta]) -> None:
        """Hand one step's deltas to their streams; report statistics (engine thread)."""
        engine = self.engine
        now = time.perf_counter()
        stats = self.stats
        if self._spec_seen is not None:
            step = engine.spec_metrics.since(self._spec_seen)
            self._spec_seen.add(step)
            stats.speculative_step(step)
        stats.step(engine.num_preemptions - self._preemptions_seen)
        self._preemptions_seen = engine.num_preemptions
        for d in deltas:
            if d.new_token_ids:
                stats.tokens(d.request_id, len(d.new_token_ids), now)
            output = None
            logprobs = None
            if d.finished:
                stats.request_finished(d.request_id, d.finish_reason, now)
                output = engine.pop_output(d.request_id)
                with self._cond:
                    stream = self._streams.pop(d.request_id, None)
                    if stream is not None:
                        self._finished(stream, now)
                if stream is not None and output.logprobs is not None:
                    logprobs = output.logprobs[stream.logprobs_sent :]
            else:
                stream = self._streams.get(d.request_id)
                if stream is not None and stream.wants_logprobs and d.new_token_ids:
                    req = engine.requests.get(d.request_id)
                    if req is not None and req.logprobs is not None:
                        start = stream.logprobs_sent
                        logprobs = req.logprobs[start : start + len(d.new_token_ids)]
            if stream is not None:
                if logprobs is not None:
                    stream.logprobs_sent += len(logprobs)
                event = RequestEvent(
                    d.request_id,
                    list(d.new_token_ids),
                    d.new_text,
                    d.finished,
                    d.finish_reason,
                    output,
                    logprobs,
                )
                if stream.wants_prompt_logprobs:
                    # the first event: every prefill chunk has run (its entries are complete)
                    stream.wants_prompt_logprobs = False
                    src = output if output is not None else engine.requests.get(d.request_id)
                    if src is not None and src.prompt_logprobs is not None:
                        event.prompt_token_ids = list(src.prompt_token_ids)
                        event.prompt_logprobs = list(src.prompt_logprobs)
                stream._post(event)
