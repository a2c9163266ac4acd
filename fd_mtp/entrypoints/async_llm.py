"""`AsyncLLM`: an asyncio front over `fd_mtp.LLM`'s engine, for servers.

The engine steps in its own thread (``fd-mtp-engine``) and never blocks the event loop:

* the event loop hands requests and aborts to the thread through a command list (under one lock);
  the thread applies them *between* steps, so requests join and leave the running batch at step
  boundaries, as continuous batching wants;
* every step's `StreamDelta`s go back to the event loop (``loop.call_soon_threadsafe``) into one
  `asyncio.Queue` per request, which `RequestStream` iterates as `RequestEvent`s;
* all tokenizer and engine work (prompt encoding and validation, detokenization) happens in the
  engine thread, so the engine and its tokenizer are never used from two threads at once.

A request whose consumer goes away (an HTTP client that disconnects: its `RequestStream` is closed
or its task cancelled) is aborted at the next step boundary: its slot and KV blocks are freed.
At most ``max_waiting_requests`` requests wait for a slot (queued commands plus the engine's
waiting list); `AsyncLLM.add_requests` raises `QueueFullError` beyond that (a server answers 503).
`AsyncLLM.shutdown` drains: it refuses new requests, lets the running ones finish, then stops the
thread.

>>> import asyncio, fd_mtp                                                       # doctest: +SKIP
>>> front = AsyncLLM(fd_mtp.LLM(max_num_seqs=4)); front.start()                 # doctest: +SKIP
>>> async def main():                                                           # doctest: +SKIP
...     [stream] = await front.add_requests([("r0", "def f(", fd_mtp.SamplingParams(max_tokens=8))])
...     async for event in stream:
...         print(event.token_ids, event.finished)
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from ..engine.request import RequestOutput, SpeculativeMetrics, StreamDelta
from ..engine.sampling_params import SamplingParams


class QueueFullError(RuntimeError):
    """The waiting queue is full (``max_waiting_requests``); a server answers 503."""


class EngineDeadError(RuntimeError):
    """The engine thread has stopped: shut down, or failed with an exception (named here)."""


@dataclass
class RequestEvent:
    """What one engine step produced for one request.

    ``token_ids`` / ``text``: only what this step added (text may lag tokens by a partial
    character or a possible stop-string prefix; it catches up later). ``finished`` is True on the
    last event only, which carries the whole `RequestOutput` in ``output`` (token ids, text,
    finish reason, prompt token ids, metrics with the speculative draft statistics).
    """

    request_id: str
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None = None
    output: RequestOutput | None = None


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
        llm: the `fd_mtp.LLM` (its ``engine`` is used from the engine thread only, once started).
        max_waiting_requests: requests that may wait for a slot at once (>= 1); more raise
            `QueueFullError`.
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
        self.stats = stats if stats is not None else StatsListener()
        self._cond = threading.Condition()
        self._commands: list = []
        self._num_queued = 0  # _Add commands not yet applied
        self._streams: dict[str, RequestStream] = {}
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
        """Requests without a slot: queued commands plus the engine's waiting list."""
        return self._num_queued + len(self.engine.waiting)

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
        """The engine thread is alive and accepting requests."""
        return (
            self._thread is not None
            and self._thread.is_alive()
            and not self._stopping
            and self._error is None
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
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- requests (event loop) ----------------------------------------------------------------------
    async def add_requests(self, requests) -> list[RequestStream]:
        """Queue ``[(request_id, prompt, SamplingParams), ...]`` together and wait until the engine
        thread accepted them all. ``prompt``: text or token ids.

        Raises:
            QueueFullError: fewer than ``len(requests)`` waiting places are free (nothing queued).
            EngineDeadError: the engine thread is not running (shut down, or failed).
            ValueError: the engine refused one request (the others are aborted); the message is the
                engine's (it names the prompt, max_tokens, ...). Its ``index`` attribute is the
                position of the refused request.
        """
        loop = asyncio.get_running_loop()
        streams = [RequestStream(self, rid, loop) for rid, _, _ in requests]
        with self._cond:
            self._check_alive()
            if self._num_queued + len(self.engine.waiting) + len(requests) > (
                self.max_waiting_requests
            ):
                raise QueueFullError(
                    f"the waiting queue is full ({self.max_waiting_requests} requests wait for a "
                    "slot); retry later"
                )
            for (rid, prompt, params), stream in zip(requests, streams):
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
        else:
            req = engine.requests.get(cmd.request_id)
            stream = self._streams.pop(cmd.request_id, None)
            if req is None:
                return
            if not req.finished:
                engine.abort_request(cmd.request_id)
                self.stats.request_finished(cmd.request_id, "abort", now)
            output = engine.pop_output(cmd.request_id)
            if stream is not None:
                stream._post(
                    RequestEvent(cmd.request_id, [], "", True, output.finish_reason, output)
                )

    def _dispatch(self, deltas: list[StreamDelta]) -> None:
        """Hand one step's deltas to their streams; report statistics (engine thread)."""
        engine = self.engine
        now = time.perf_counter()
        stats = self.stats
        if self._spec_seen is not None:
            total = engine.spec_metrics
            step = SpeculativeMetrics(
                total.num_speculative_tokens,
                total.num_steps - self._spec_seen.num_steps,
                total.num_drafted - self._spec_seen.num_drafted,
                total.num_accepted - self._spec_seen.num_accepted,
                total.num_emitted - self._spec_seen.num_emitted,
                [
                    a - b
                    for a, b in zip(
                        total.drafted_per_position, self._spec_seen.drafted_per_position
                    )
                ],
                [
                    a - b
                    for a, b in zip(
                        total.accepted_per_position, self._spec_seen.accepted_per_position
                    )
                ],
            )
            self._spec_seen.add(step)
            stats.speculative_step(step)
        stats.step(engine.num_preemptions - self._preemptions_seen)
        self._preemptions_seen = engine.num_preemptions
        for d in deltas:
            if d.new_token_ids:
                stats.tokens(d.request_id, len(d.new_token_ids), now)
            output = None
            if d.finished:
                stats.request_finished(d.request_id, d.finish_reason, now)
                output = engine.pop_output(d.request_id)
                with self._cond:
                    stream = self._streams.pop(d.request_id, None)
            else:
                stream = self._streams.get(d.request_id)
            if stream is not None:
                stream._post(
                    RequestEvent(
                        d.request_id,
                        list(d.new_token_ids),
                        d.new_text,
                        d.finished,
                        d.finish_reason,
                        output,
                    )
                )
