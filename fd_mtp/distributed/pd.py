"""Prefill / decode disaggregation in two processes (design §9; spec §4.2, §6.8, §7).

`PDEngineClient` (the front, in the user's process) starts a **prefill** instance and a **decode**
instance, each a process with its own copy of the model, its own KV cache and an engine of its
role (`fd_mtp.engine.pd`). A request goes:

1. front -> prefill (a multiprocessing queue): the prompt's token ids and its `SamplingParams`
   (the front validates them first, with the engine's own checks: a bad request raises
   ValueError at `PDEngineClient.add_request`, nothing sent);
2. the prefill instance prefills it, sends the first token (and with MTP the first draft) on the
   SysV queue ``msg_queue_id`` and hands the request's KV blocks to the decode instance through a
   CPU shared-memory segment (`fd_mtp.distributed.pd_instance` has the details);
3. the decode instance copies the KV into blocks of its own and decodes the request to the end;
4. after every step each instance sends the front that step's `StreamDelta`s (new token ids and
   text, finish) with the outputs of the requests it finished, and its counters (running,
   waiting, KV blocks, preemptions, draft statistics, prefix cache). The prefill side's delta of
   a handed-off request carries the first token; its text comes with the decode side's deltas
   (the decode engine detokenizes the whole output, first token included, and holds back partial
   characters and possible stop strings itself). The two instances' messages share one queue,
   each process with its own feeder: the front holds a request's decode-side deltas until its
   prefill-side one arrived, so a stream is always in order.

`PDEngineClient` offers the `LLMEngine` calls `fd_mtp.entrypoints.async_llm.AsyncLLM` makes
(``add_request``, ``step``, ``abort_request``, ``pop_output``, ``has_unfinished``, ``requests``,
``running`` / ``waiting`` (sized), ``block_manager``, ``spec_metrics``, ``num_preemptions``, the
prefix cache counters) and the `fd_mtp.LLM` attributes it reads (``engine``, ``tokenizer``,
``scheduler_config``, ``max_model_len``, ``speculative_config``, ``vocab_size``): ``fd-mtp serve
--pd`` serves it. ``abort_request`` goes to the prefill instance; when that no longer holds the
request it forwards the abort on the pipe to the decode instance, behind the hand-off record, so
the request is dropped wherever it is (waiting, prefilling, in transit, decoding) and its slot
and blocks freed; every abort is answered, and `has_unfinished` stays True until it is, so the
counters the front shows settle. `PDCluster` is the same front with a blocking ``generate``.

When the decode process dies, the prefill side sees the pipe close: it removes every segment it
still publishes, empties the first-token queue before each step, answers the requests it can no
longer hand over with ``finish_reason "error"``, and keeps serving; the front reports the requests
that were on the decode side as errors (``fail_fast=False``, `PDCluster`), or raises `PDError`
from `step` (``fail_fast=True``, the server: its engine thread then ends every stream with an
error event). Either way it empties the queue while the decode process is dead: a prefill step
that reached ``msgsnd`` on a full queue before the death was seen waits there holding its
process's GIL, so only another process can free it. A dead prefill process makes `step` raise
`PDError`. Every wait is bounded (no message for ``timeout`` seconds while requests are in flight
raises `PDError`); the instances ignore SIGINT (the front handles Ctrl-C) and exit when the front
is gone. `close` stops and reaps both processes, removes the SysV queue and any segment left
behind. Tensor parallelism inside an instance is not offered with PD
(`fd_mtp.config.ParallelConfig` refuses the combination).
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import os
import queue
import time
import weakref
from types import SimpleNamespace

from .pd_instance import (
    SEGMENT_PREFIX,
    PDError,
    _checkpoint_config,
    _decode_main,
    _drain_messages,
    _prefill_main,
    _stop,
)

__all__ = ["PDCluster", "PDEngineClient", "PDError", "SEGMENT_PREFIX"]

START_TIMEOUT = 300.0
CALL_TIMEOUT = 600.0
#: how long one `PDEngineClient.step` waits for the instances' next message (seconds): the
#: longest an add or abort waits in a server's engine thread while nothing arrives
POLL_S = 0.005
#: the speculative methods offered with PD (None: plain decoding)
PD_METHODS = ("mtp",)


# --------------------------------------------------------------------------- front
@dataclasses.dataclass
class _Live:
    """The front's record of a request (``PDEngineClient.requests``): what it streamed so far."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    sampling_params: object
    output_token_ids: list[int] = dataclasses.field(default_factory=list)
    text: str = ""
    where: str = "prefill"  # "prefill", then "decode" once its first token was handed over
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    logprobs: list | None = None  # never set: PD refuses SamplingParams.logprobs
    prefill_output: object = None  # the prefill side's RequestOutput of a handed-off request
    early: list = dataclasses.field(default_factory=list)  # decode items before the hand-off's


class _Sized:
    """``len()`` of an instance's list (``PDEngineClient.running`` / ``waiting``)."""

    def __init__(self, n: int):
        self._n = n

    def __len__(self) -> int:
        return self._n


class PDEngineClient:
    """A prefill process and a decode process behind one engine-like front (module docstring).

    Args:
        model: checkpoint directory (both instances load it; None: the demo model).
        speculative_config: None (plain) or MTP (`SpeculativeConfig` or its dict); other methods
            are refused (ValueError naming the method).
        max_num_seqs, max_model_len, block_size, num_gpu_blocks, max_num_batched_tokens,
        enable_prefix_caching, seed, dtype, device, forward, cpu_threads: as `fd_mtp.LLM`, for
            both instances.
        msg_queue_id: the SysV queue of the first-token messages, emptied first (default: the
            first free one from an id derived from this process's pid, claimed); removed by
            `close`.
        timeout: seconds without a message from the instances while requests are in flight after
            which `step` raises `PDError`.
        fail_fast: when the decode instance dies, `step` raises `PDError` (True: a server fails
            its streams) or reports the requests it held as ``finish_reason "error"`` while the
            prefill instance keeps serving (False).
    """

    def __init__(
        self,
        model=None,
        *,
        speculative_config=None,
        max_num_seqs: int = 8,
        max_model_len: int | None = None,
        block_size: int = 64,
        num_gpu_blocks: int | None = None,
        max_num_batched_tokens: int = 2048,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        dtype: str | None = None,
        device: str = "cpu",
        forward: str = "native",
        cpu_threads: int | None = None,
        msg_queue_id: int | None = None,
        timeout: float = CALL_TIMEOUT,
        fail_fast: bool = False,
    ):
        from ..config import CacheConfig, SchedulerConfig, SpeculativeConfig, check_run_options
        from .tp import _tokenizer

        name = type(self).__name__
        spec = SpeculativeConfig.from_value(speculative_config)
        if spec is not None and spec.method not in PD_METHODS:
            raise ValueError(
                f"{name}: speculative method {spec.method!r} is not offered with prefill / "
                "decode disaggregation (plain or 'mtp')"
            )
        device, dtype = check_run_options(
            name, device=device, dtype=dtype, seed=seed, forward=forward, cpu_threads=cpu_threads
        )
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"{name}: timeout must be a number > 0, got {timeout!r}")
        scheduler = SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_model_len)
        CacheConfig(block_size, num_gpu_blocks, enable_prefix_caching=enable_prefix_caching)
        self.model_path, config = _checkpoint_config(name, model, spec)
        # what fd_mtp.LLM exposes (AsyncLLM reads these)
        self.scheduler_config = scheduler.resolve(config.max_position_embeddings)
        self.max_model_len = self.scheduler_config.max_model_len
        self.speculative_config = spec
        self.vocab_size = int(config.vocab_size)
        self.tokenizer = _tokenizer(self.model_path)
        self.model = None
        self.timeout = float(timeout)
        self.fail_fast = bool(fail_fast)
        setup = dict(
            spec=spec,
            scheduler=dict(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                max_model_len=max_model_len,
            ),
            cache=dict(
                block_size=block_size,
                num_gpu_blocks=num_gpu_blocks,
                enable_prefix_caching=enable_prefix_caching,
            ),
            seed=seed,
            dtype=dtype,
            device=device,
            forward=forward,
            cpu_threads=cpu_threads,
        )
        self._start_instances(setup, msg_queue_id)
        self._checker = self._make_checker()

    def _start_instances(self, setup: dict, msg_queue_id: int | None) -> None:
        """Claim (or empty) the first-token queue, start the prefill and decode processes with
        their pipes, and wait for both to report ready (`close` and re-raise on failure)."""
        import multiprocessing

        from ..sysv_queue import claim_queue_id, remove_queue

        if msg_queue_id is None:
            self.msg_queue_id = claim_queue_id(0x5000 + os.getpid() % 0x4000)
        else:
            self.msg_queue_id = int(msg_queue_id)
            remove_queue(self.msg_queue_id)  # start empty
        ctx = multiprocessing.get_context("spawn")
        self._commands = {"prefill": ctx.Queue(), "decode": ctx.Queue()}
        self._results = ctx.Queue()
        link_p, link_d = ctx.Pipe(duplex=True)
        alive_p, alive_d = ctx.Pipe(duplex=False)  # alive_p reads EOF once the decode process ends
        path = str(self.model_path)
        self.prefill, self.decode = (
            ctx.Process(
                target=main,
                args=(path, setup, self.msg_queue_id, self._commands[role], self._results) + ends,
                name=f"fd-mtp-pd-{role}",
                daemon=True,
            )
            for role, main, ends in (
                ("prefill", _prefill_main, (link_p, alive_p)),
                ("decode", _decode_main, (link_d, alive_d)),
            )
        )
        self._closed = False
        self.pids: dict[str, int] = {}
        self.prefill.start()
        self.decode.start()
        self._finalizer = weakref.finalize(
            self, _stop, [self.prefill, self.decode], self._commands, self.msg_queue_id, self.pids
        )
        atexit.register(self._finalizer)
        for end in (link_p, link_d, alive_p, alive_d):
            end.close()  # the instances hold the only ends: a dead one closes its pipes
        self._init_requests()
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while len(self.pids) < 2:
                if time.monotonic() > deadline:
                    raise PDError(f"the instances did not start within {START_TIMEOUT:.0f} s")
                self._receive(0.2, [], "start-up")
        except BaseException:
            self.close()
            raise

    def _make_checker(self):
        """What `LLMEngine.validate_prompt` reads, from the limits the instances reported: the
        front checks each request with the engine's own code before sending it."""
        from ..engine.engine import LLMEngine

        lim = self._limits
        runner = SimpleNamespace(**{k: lim[k] for k in lim if k not in ("num_blocks", "ops_stop")})
        checker = SimpleNamespace(
            tokenizer=self.tokenizer,
            runner=runner,
            ops_stop=lim["ops_stop"],
            block_manager=SimpleNamespace(num_blocks=lim["num_blocks"]),
        )
        # (not ``self`` in the lambda: the finalizer must see the front die)
        checker.encode = lambda text: LLMEngine.encode(checker, text)
        return checker

    def _init_requests(self) -> None:
        """The front's request bookkeeping, empty."""
        self.engine = self  # AsyncLLM drives ``llm.engine``
        self.requests: dict[str, _Live] = {}
        self._ids = itertools.count()
        self._unfinished: set[str] = set()  # added, not finished (nor aborted)
        self._aborting: set[str] = set()  # aborted, not yet answered by an instance
        self._at_decode: set[str] = set()  # handed over, not finished
        self._outputs: dict[str, object] = {}  # finished: the instance's RequestOutput
        self._stats: dict[str, dict] = {}
        self._limits: dict = {}
        self._last_heard = time.monotonic()
        #: per handed-off request: ``prefill_s`` (gather the blocks + publish), ``bytes`` (KV
        #: moved), ``decode_s`` (attach + copy + insert), ``prompt_len``
        self.handoff_costs: list[dict] = []

    # -- the LLMEngine surface -------------------------------------------------------------------
    def validate_prompt(self, prompt, params) -> list[int]:
        """`LLMEngine.validate_prompt` against the instances' limits (their model, max_model_len,
        KV cache), in the front; then what PD does not offer: ValueError naming it."""
        from ..engine.engine import LLMEngine

        ids = LLMEngine.validate_prompt(self._checker, prompt, params)
        for field in ("logprobs", "prompt_logprobs"):
            if getattr(params, field, None) is not None:
                raise ValueError(
                    f"SamplingParams.{field} is not offered with prefill / decode "
                    "disaggregation (the first token's log-probabilities stay on the prefill "
                    "instance)"
                )
        return ids

    def add_request(self, prompt, params=None, request_id=None) -> str:
        """Validate and send a request to the prefill instance; its id. ValueError (nothing
        sent) as `LLMEngine.add_request`, or for what PD does not offer."""
        from ..engine.sampling_params import SamplingParams

        self._check_open()
        params = SamplingParams() if params is None else params
        ids = self.validate_prompt(prompt, params)
        rid = f"pd-{next(self._ids)}" if request_id is None else str(request_id)
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in use")
        if not self._unfinished and not self._aborting:
            self._last_heard = time.monotonic()  # the watchdog counts from the first request
        self.requests[rid] = _Live(rid, prompt if isinstance(prompt, str) else None, ids, params)
        self._unfinished.add(rid)
        self._commands["prefill"].put(("add", rid, ids, params))
        return rid

    def abort_request(self, request_id: str) -> None:
        """Finish a request now (``finish_reason "abort"``); the instance holding it frees its
        slot and blocks (answered asynchronously: `has_unfinished` is True until then)."""
        live = self.requests[request_id]
        if live.finished:
            return
        self._finish(live, "abort")
        self._aborting.add(request_id)
        self._commands["prefill"].put(("abort", request_id))

    def is_alive(self) -> bool:
        """Both instances' processes run and `close` has not been called: False as soon as one
        died, even with nothing in flight (a server's /health then answers 503)."""
        return not self._closed and self.prefill.is_alive() and self.decode.is_alive()

    def has_unfinished(self) -> bool:
        return bool(self._unfinished or self._aborting)

    def pop_output(self, request_id: str):
        """The output of a finished request, forgetting the request."""
        from ..engine.request import RequestMetrics, RequestOutput

        live = self.requests[request_id]
        if not live.finished:
            raise ValueError(f"request {request_id!r} is not finished")
        del self.requests[request_id]
        out = self._outputs.pop(request_id, None)
        if out is None:  # aborted, or lost with the decode instance: what streamed so far
            now = time.perf_counter()
            out = RequestOutput(
                request_id,
                live.prompt,
                list(live.prompt_token_ids),
                list(live.output_token_ids),
                live.text,
                True,
                live.finish_reason,
                live.error,
                RequestMetrics(
                    arrival_time=now,
                    finished_time=now,
                    num_prompt_tokens=len(live.prompt_token_ids),
                    num_generated_tokens=len(live.output_token_ids),
                ),
            )
        return out

    def step(self) -> list:
        """The `StreamDelta`s that arrived from the instances (waits up to `POLL_S` for the
        first). PDError when an instance failed or died (``fail_fast``, or the prefill one), or
        nothing arrived for ``timeout`` seconds with requests in flight."""
        self._check_open()
        deltas: list = []
        self._receive(POLL_S, deltas, "a step")
        while self._receive(0, deltas, "a step"):
            pass
        return deltas

    # counters (the instances' latest: each sends them with every step and answered abort)
    def _sum(self, key) -> int:
        return sum(s[key] for s in self._stats.values())

    @property
    def running(self) -> _Sized:
        return _Sized(self._sum("running"))

    @property
    def waiting(self) -> _Sized:
        return _Sized(self._sum("waiting"))

    @property
    def block_manager(self) -> SimpleNamespace:
        """Both instances' KV blocks: ``num_free`` / ``num_blocks``."""
        return SimpleNamespace(num_free=self._sum("num_free"), num_blocks=self._sum("num_blocks"))

    @property
    def num_preemptions(self) -> int:
        return self._sum("preemptions")

    @property
    def spec_metrics(self):
        """The decode instance's draft statistics (where drafts are verified); None: plain."""
        stats = self._stats.get("decode")
        return None if stats is None else stats["spec"]

    @property
    def prefix_cache_queries(self) -> int:
        return self._sum("prefix_queries")

    @property
    def prefix_cache_hits(self) -> int:
        return self._sum("prefix_hits")

    # -- messages from the instances ---------------------------------------------------------------
    def _receive(self, timeout: float, deltas: list, what: str) -> bool:
        """Handle one message (waiting up to ``timeout``), appending the deltas it makes; False
        when none came (then the instances' health and the watchdog are checked)."""
        try:
            kind, key, value = (
                self._results.get(timeout=timeout) if timeout else self._results.get_nowait()
            )
        except queue.Empty:
            self._check_instances(deltas, what)
            return False
        self._last_heard = time.monotonic()
        if kind == "ready":
            self.pids[key] = value["pid"]
            self._stats[key] = value["stats"]
            lim = value["limits"]
            if self._limits:  # the stricter of the two instances
                lim = dict(lim, num_blocks=min(lim["num_blocks"], self._limits["num_blocks"]))
            self._limits = lim
        elif kind == "failed":
            self.close()
            raise PDError(f"the {key} instance failed during {what}:\n{value}")
        elif kind == "step":
            items, self._stats[key] = value
            for d, status, out in items:
                live = self.requests.get(d.request_id)
                if live is None or live.finished:
                    continue  # aborted: the front already ended it
                if key == "decode" and live.where == "prefill":
                    live.early.append((d, status, out))  # its hand-off delta is still on its way
                    continue
                self._apply(live, d, status, out, deltas)
        elif kind == "aborted":
            rid, self._stats[key] = value
            self._aborting.discard(rid)
        elif kind == "rejected":  # the prefill engine refused what the front let through
            from ..engine.request import RequestOutput

            live = self.requests.get(key)
            if live is not None and not live.finished:
                self._outputs[key] = RequestOutput.rejected(
                    key, live.prompt, live.prompt_token_ids, value
                )
                self._end(live, "error", value, deltas)
        elif kind == "cost":
            self.handoff_costs.append(value)
        return True

    def _apply(self, live: _Live, d, status: str, out, deltas: list) -> None:
        from ..engine.request import StreamDelta

        rid = live.request_id
        live.output_token_ids.extend(d.new_token_ids)
        if status == "handed":
            # the first token streams now; its text comes with the decode side's deltas
            live.where = "decode"
            live.prefill_output = out
            self._at_decode.add(rid)
            deltas.append(StreamDelta(rid, -1, list(d.new_token_ids), "", False))
            early, live.early = live.early, []
            for item in early:
                if not live.finished:
                    self._apply(live, *item, deltas)
            return
        live.text += d.new_text
        if status == "done":
            self._outputs[rid] = self._merged(live, out)
            self._finish(live, d.finish_reason, d.error)
        deltas.append(d)

    def _merged(self, live: _Live, out):
        """The finishing instance's output, with what the prefill side measured."""
        out.prompt = live.prompt
        pre = live.prefill_output
        if pre is not None:
            m, p = out.metrics, pre.metrics
            m.arrival_time = p.arrival_time
            m.first_scheduled_time = p.first_scheduled_time
            m.first_token_time = p.first_token_time
            m.num_cached_tokens = p.num_cached_tokens
            m.num_preemptions += p.num_preemptions
            m.num_steps += p.num_steps
        return out

    def _finish(self, live: _Live, reason: str | None, error: str | None = None) -> None:
        live.finished, live.finish_reason, live.error = True, reason, error
        live.early = []
        self._unfinished.discard(live.request_id)
        self._at_decode.discard(live.request_id)

    def _end(self, live: _Live, reason: str, error: str, deltas: list) -> None:
        """End a request the instances cannot finish: a last delta with ``error``."""
        from ..engine.request import StreamDelta

        self._finish(live, reason, error)
        deltas.append(StreamDelta(live.request_id, -1, [], "", True, reason, error))

    def _check_instances(self, deltas: list, what: str) -> None:
        if not self.prefill.is_alive():
            code = self.prefill.exitcode
            self.close()
            raise PDError(f"the prefill instance exited (code {code}) during {what}")
        if not self.decode.is_alive():
            # A prefill step may be blocked in msgsnd on the full first-token queue that the
            # decode side no longer reads (it died before the prefill side saw it): this process
            # is the one that can empty it.
            try:
                _drain_messages(self.msg_queue_id)
            except OSError:
                pass
            if self.fail_fast or len(self.pids) < 2:
                code = self.decode.exitcode
                self.close()
                raise PDError(f"the decode instance exited (code {code}) during {what}")
            for rid in list(self._at_decode):
                self._end(self.requests[rid], "error", "the decode instance died", deltas)
            self._aborting.clear()  # no answer will come from the decode side
        busy = self._unfinished or self._aborting
        if busy and time.monotonic() - self._last_heard > self.timeout:
            self.close()
            raise PDError(
                f"no answer from the instances for {self.timeout:g} s with {len(busy)} "
                f"request(s) in flight (during {what})"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise PDError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Stop both instances (bounded), reap them, remove the SysV queue and any hand-off
        segment left; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._finalizer()


class PDCluster(PDEngineClient):
    """`PDEngineClient` with a blocking ``generate`` (the decode instance's death ends the
    requests it held with ``finish_reason "error"``; the prefill instance keeps serving).
    Arguments as `PDEngineClient` (``timeout``: seconds `generate` may take)."""

    def __init__(self, model=None, **kwargs):
        kwargs.setdefault("fail_fast", False)
        super().__init__(model, **kwargs)

    def generate(self, prompts, sampling_params=None) -> list:
        """One `RequestOutput` per prompt (token ids or text), in order. A request refused comes
        back with ``finish_reason "error"`` and ``error`` set, as one the decode instance lost
        (it died)."""
        from ..engine.request import RequestOutput
        from ..engine.sampling_params import SamplingParams

        self._check_open()
        params = SamplingParams() if sampling_params is None else sampling_params
        outs: list = [None] * len(prompts)
        todo: dict[str, int] = {}
        for i, p in enumerate(prompts):
            try:
                todo[self.add_request(p, params)] = i
            except ValueError as exc:
                ids = p if isinstance(p, list) else []
                outs[i] = RequestOutput.rejected(f"pd-refused-{i}", p, ids, str(exc))
        deadline = time.monotonic() + self.timeout
        while todo:
            if time.monotonic() > deadline:
                raise PDError(f"generate did not finish within {self.timeout:g} s")
            for d in self.step():
                if d.finished and d.request_id in todo:
                    outs[todo.pop(d.request_id)] = self.pop_output(d.request_id)
        return outs
