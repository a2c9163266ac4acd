"""Prefill / decode disaggregation in two processes (design §9; spec §4.2, §6.8, §7).

`PDEngineClient` (the front, in the user's process) starts a **prefill** instance and a **decode**
instance, each a process with its own copy of the model, its own KV cache and an engine of its
role (`fd_mtp.engine.pd`). A request goes:

1. front -> prefill (a multiprocessing queue): the prompt's token ids and its `SamplingParams`
   (the front validates them first, with the engine's own checks: a bad request raises
   ValueError at `PDEngineClient.add_request`, nothing sent);
2. the prefill engine runs its prefill and one step (MTP: the proposer drafts once, role
   "prefill") and sends ``[first token, first draft]`` with ``mtp_save_first_token`` on the SysV
   queue ``msg_queue_id`` (FastDeploy's wire format, spec §6.8);
3. it copies the request's KV blocks (every target layer and the MTP layer) into a CPU
   shared-memory tensor (``shared_empty``), publishes it with ``set_data_ipc`` under
   ``/fdmtp_pd.<prefill pid>.<n>``, and sends the request's record (prompt, params, seed, first
   token, its slot in the message, the segment name) on a pipe to the decode instance;
4. the decode instance reads the first-token message(s) of that step from the SysV queue (it
   drains the queue continuously: a Linux queue holds two such messages by default), attaches
   to the segment (``share_external_data``), copies the KV into blocks of its own, answers
   ``ack`` (the prefill side then ``unset_data_ipc(..., unlink_shm=True)`` and frees the copy),
   inserts the request with the decode-role fields and decodes it to the end;
5. after every step each instance sends the front that step's `StreamDelta`s (new token ids and
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
import collections
import copy
import dataclasses
import glob
import itertools
import os
import queue
import signal
import time
import traceback
import weakref
from pathlib import Path
from types import SimpleNamespace

from ._reap import reap

__all__ = ["PDCluster", "PDEngineClient", "PDError", "SEGMENT_PREFIX"]

#: POSIX names of the KV hand-off segments: ``/fdmtp_pd.<prefill pid>.<n>``
SEGMENT_PREFIX = "/fdmtp_pd"
START_TIMEOUT = 300.0
CALL_TIMEOUT = 600.0
#: how long the decode side waits for a step's first-token messages once their record arrived
MESSAGE_TIMEOUT = 30.0
#: how long one `PDEngineClient.step` waits for the instances' next message (seconds): the
#: longest an add or abort waits in a server's engine thread while nothing arrives
POLL_S = 0.005
#: the speculative methods offered with PD (None: plain decoding)
PD_METHODS = ("mtp",)


class PDError(RuntimeError):
    """An instance failed, died or did not answer in time."""


# --------------------------------------------------------------------------- instances
def _build(model_path, setup, role, msg_queue_id):
    import paddle

    from ..config import CacheConfig, SchedulerConfig
    from ..engine.pd import DecodeEngine, PrefillEngine
    from ..engine.runner import ModelRunner
    from ..model.loader import load_checkpoint
    from .tp import _tokenizer

    paddle.set_device(setup.get("device", "cpu"))
    cpu_threads = setup.get("cpu_threads")
    if cpu_threads is not None:
        paddle.base.core.set_num_threads(int(cpu_threads))
    model, mtp, config = load_checkpoint(model_path, dtype=setup.get("dtype"))
    forward = setup.get("forward", "native")
    for m in (model, mtp):  # as fd_mtp.LLM prepares its models
        if m is None:
            continue
        m.eval()
        if forward == "native":
            m.native_forward().threads = 1 if cpu_threads is None else int(cpu_threads)
        elif forward == "static":
            m.compile_forward()
    spec = setup.get("spec")
    scheduler = SchedulerConfig(**setup["scheduler"]).resolve(config.max_position_embeddings)
    cache = CacheConfig(**setup["cache"]).resolve(
        scheduler, 0 if spec is None else spec.extra_positions
    )
    tokenizer = _tokenizer(Path(model_path))
    seed = setup.get("seed", 0)
    if spec is None:
        runner = ModelRunner(model, scheduler_config=scheduler, cache_config=cache)
    else:
        from ..engine.spec_runner import SpeculativeModelRunner

        options = {"role": role}
        if role == "prefill":
            options["msg_queue_id"] = msg_queue_id
        runner = SpeculativeModelRunner(
            model,
            spec,
            scheduler_config=scheduler,
            cache_config=cache,
            mtp_model=mtp,
            seed=seed,
            proposer_options=options,
        )
    if role == "prefill":
        return PrefillEngine(runner, tokenizer=tokenizer, seed=seed, msg_queue_id=msg_queue_id)
    return DecodeEngine(runner, tokenizer=tokenizer, seed=seed)


def _limits(engine) -> dict:
    """What the front needs to validate requests as this engine's ``validate_prompt`` does."""
    r = engine.runner
    return dict(
        vocab_size=r.vocab_size,
        max_model_len=r.max_model_len,
        max_extra_positions=r.max_extra_positions,
        block_size=r.block_size,
        num_blocks=engine.block_manager.num_blocks,
        ops_stop=engine.ops_stop,
        spec_config=r.spec_config,
    )


def _snapshot(engine, pending: int = 0) -> dict:
    """The engine's counters, as the front reports them (``pending``: hand-offs received, not
    yet inserted: they wait)."""
    bm = engine.block_manager
    return dict(
        running=len(engine.running),
        waiting=len(engine.waiting) + pending,
        num_free=bm.num_free,
        num_blocks=bm.num_blocks,
        preemptions=engine.num_preemptions,
        spec=copy.deepcopy(engine.spec_metrics),  # pickled later, by the queue's feeder thread
        prefix_queries=engine.prefix_cache_queries,
        prefix_hits=engine.prefix_cache_hits,
    )


def _claim_queue_id(start: int) -> int:
    """The first queue id from ``start`` on whose SysV key has no queue; its queue is created
    (``IPC_CREAT | IPC_EXCL``: claimed atomically, so two fronts never share one). ftok keeps
    8 bits of the id: 256 keys per ftok path. PDError when every one is in use."""
    import ctypes
    import errno

    from ..sysv_queue import _libc, queue_key

    libc = _libc()
    libc.msgget.restype = ctypes.c_int
    libc.msgget.argtypes = (ctypes.c_int, ctypes.c_int)
    for i in range(256):
        qid = start + i
        if libc.msgget(queue_key(qid), 0o1000 | 0o2000 | 0o666) != -1:
            return qid
        err = ctypes.get_errno()
        if err != errno.EEXIST:
            raise OSError(err, f"msgget of queue id {qid}: {os.strerror(err)}")
    raise PDError(
        f"the 256 SysV queue keys from msg_queue_id {start} on are all in use: remove stale "
        "queues (ipcs -q / ipcrm) or pass msg_queue_id"
    )


def _drain_messages(msg_queue_id, into=None) -> int:
    from ..sysv_queue import receive_message

    n = 0
    while True:
        m = receive_message(msg_queue_id)
        if m is None:
            return n
        n += 1
        if into is not None:
            into.append(m)


class _Publications:
    """The prefill side's published KV copies: name -> tensor, removed on ack or at the end."""

    def __init__(self):
        self.live: dict[str, object] = {}
        self.bytes_published = 0
        self._n = itertools.count()

    def publish(self, kv) -> str:
        from .. import ops

        staging = ops.shared_empty(list(kv.shape), kv.dtype)
        staging.copy_(kv, False)
        name = f"{SEGMENT_PREFIX}.{os.getpid()}.{next(self._n)}"
        ops.set_data_ipc(staging, name)
        self.live[name] = staging
        self.bytes_published += int(kv.numel()) * kv.element_size()
        return name

    def release(self, name: str) -> None:
        from .. import ops

        staging = self.live.pop(name, None)
        if staging is not None:
            ops.unset_data_ipc(staging, name, False, True)

    def release_all(self) -> None:
        for name in list(self.live):
            self.release(name)


def _watch_decode(alive, dead) -> None:
    """Prefill-side thread: ``alive`` (a pipe end the decode process holds the other end of)
    reads EOF when that process ends, however it ends; then ``dead`` is set."""
    try:
        alive.recv()
    except (EOFError, OSError):
        pass
    dead.set()


def _instance_setup(role: str) -> int:
    """Common start of both instances: the process is named ``fd-mtp-<role>`` (``ps``, ``top``);
    Ctrl-C is the front's to handle (a terminal sends SIGINT to the whole process group);
    returns the front's pid (the instance exits once it changes)."""
    try:
        Path("/proc/self/comm").write_text(f"fd-mtp-{role}")
    except OSError:  # not Linux: the name is cosmetic
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return os.getppid()


def _next(commands, timeout):
    try:
        return commands.get(timeout=timeout) if timeout else commands.get_nowait()
    except queue.Empty:
        return None


def _prefill_main(model_path, setup, msg_queue_id, commands, results, link, alive):
    """Body of the prefill process."""
    import threading

    from ..engine.pd import gather_kv
    from ..sysv_queue import remove_queue

    front = _instance_setup("prefill")
    pubs = _Publications()
    try:
        engine = _build(model_path, setup, "prefill", msg_queue_id)
    except BaseException:  # noqa: BLE001 - reported to the front
        results.put(("failed", "prefill", traceback.format_exc()))
        return
    results.put(
        ("ready", "prefill", dict(pid=os.getpid(), limits=_limits(engine), stats=_snapshot(engine)))
    )
    decode_alive = True
    dead = threading.Event()
    threading.Thread(target=_watch_decode, args=(alive, dead), daemon=True).start()

    def decode_gone():
        nonlocal decode_alive
        if decode_alive:
            decode_alive = False
            pubs.release_all()

    def to_decode(message) -> bool:
        if decode_alive:
            try:
                link.send(message)
                return True
            except (BrokenPipeError, EOFError, OSError):
                decode_gone()
        return False

    try:
        while True:
            cmd = _next(commands, 0.2 if not engine.has_unfinished() else 0)
            if cmd is None and os.getppid() != front:  # the front is gone: so is its queue's user
                remove_queue(msg_queue_id)
                return
            while cmd is not None:
                if cmd[0] == "stop":
                    return
                if cmd[0] == "add":
                    _, rid, prompt, params = cmd
                    try:
                        engine.add_request(prompt, params, request_id=rid)
                    except ValueError as exc:
                        results.put(("rejected", rid, str(exc)))
                elif cmd[0] == "abort":
                    rid = cmd[1]
                    if rid in engine.requests:
                        engine.abort_request(rid)
                        engine.pop_output(rid)
                        results.put(("aborted", "prefill", (rid, _snapshot(engine))))
                    elif not to_decode(("abort", rid)):
                        # handed over (or finished) and nobody on the decode side: nothing to free
                        results.put(("aborted", "prefill", (rid, _snapshot(engine))))
                cmd = _next(commands, 0)
            if dead.is_set():
                decode_gone()
                # nobody reads the first-token queue any more: empty it before the step sends,
                # so the proposer's blocking msgsnd finds room (it holds this process's GIL while
                # it waits, so no thread here could empty it then: the front does, see
                # PDEngineClient._check_instances)
                _drain_messages(msg_queue_id)
            if engine.has_unfinished():
                deltas = engine.step()
                handed = {h.request_id for h in engine.handoffs}
                records = []
                for h in engine.handoffs:
                    if not decode_alive:
                        continue
                    t0 = time.perf_counter()
                    kv = gather_kv(engine.runner, h.block_ids)
                    name = pubs.publish(kv)
                    cost = (time.perf_counter() - t0, int(kv.numel()) * kv.element_size())
                    records.append(
                        (h, name, list(kv.shape), str(kv.dtype).replace("paddle.", ""), cost)
                    )
                if records or engine.messages_sent:
                    to_decode(("handoff", records, engine.messages_sent))
                items = []
                for d in deltas:
                    if not d.finished:
                        items.append((d, "stream", None))
                        continue
                    out = engine.pop_output(d.request_id)
                    if d.request_id not in handed:
                        items.append((d, "done", out))
                    elif not decode_alive:
                        d.finish_reason = out.finish_reason = "error"
                        d.error = out.error = "the decode instance is gone"
                        items.append((d, "done", out))
                    else:
                        items.append((d, "handed", out))
                results.put(("step", "prefill", (items, _snapshot(engine))))
            while decode_alive:
                try:
                    if not link.poll(0):
                        break
                    kind, name = link.recv()
                except (EOFError, OSError):
                    decode_gone()
                    break
                if kind == "ack":
                    pubs.release(name)
    except BaseException:  # noqa: BLE001
        results.put(("failed", "prefill", traceback.format_exc()))
    finally:
        pubs.release_all()


def _decode_main(model_path, setup, msg_queue_id, commands, results, link, alive):
    """Body of the decode process."""
    import paddle

    from .. import ops
    from ..engine.pd import first_tokens
    from ..sysv_queue import remove_queue

    # ``alive`` is held (never used) until this process ends: the prefill side then reads EOF
    front = _instance_setup("decode")
    try:
        engine = _build(model_path, setup, "decode", msg_queue_id)
    except BaseException:  # noqa: BLE001
        results.put(("failed", "decode", traceback.format_exc()))
        return
    results.put(
        ("ready", "decode", dict(pid=os.getpid(), limits=_limits(engine), stats=_snapshot(engine)))
    )
    messages: collections.deque = collections.deque()
    pending: collections.deque = collections.deque()  # (handoff, kv, draft) not yet inserted

    def receive(message) -> None:
        """One message of the prefill side: a step's hand-offs, or an abort."""
        nonlocal pending
        if message[0] == "abort":
            rid = message[1]
            kept = collections.deque(p for p in pending if p[0].request_id != rid)
            if len(kept) == len(pending) and rid in engine.requests:
                engine.abort_request(rid)
                engine.pop_output(rid)
            pending = kept
            results.put(("aborted", "decode", (rid, _snapshot(engine, len(pending)))))
            return
        _, records, n_messages = message
        deadline = time.monotonic() + MESSAGE_TIMEOUT
        while len(messages) < n_messages:
            if time.monotonic() > deadline:
                raise PDError(
                    f"decode: {n_messages} first-token message(s) announced, "
                    f"{len(messages)} arrived on queue {msg_queue_id}"
                )
            time.sleep(0.002)
            _drain_messages(msg_queue_id, messages)
        step_messages = [messages.popleft() for _ in range(n_messages)]
        for h, name, shape, dtype, cost in records:
            firsts = {}
            for m in step_messages:
                for slot, pair in first_tokens(m, [h.slot]).items():
                    firsts.setdefault(slot, pair)
            token, draft = firsts.get(h.slot, (h.first_token, -1))
            if token != h.first_token:
                raise PDError(
                    f"decode: request {h.request_id}: the message says first token "
                    f"{token}, the record {h.first_token}"
                )
            t0 = time.perf_counter()
            view = ops.share_external_data(paddle.empty([0], dtype), name, shape)
            kv = view.clone()
            del view
            link.send(("ack", name))
            pending.append((h, kv, draft, cost, time.perf_counter() - t0))

    try:
        while True:
            cmd = _next(commands, 0)
            if cmd is not None and cmd[0] == "stop":
                return
            if os.getppid() != front:  # the front is gone; this side's drains recreate the
                remove_queue(msg_queue_id)  # queue the prefill side removes: remove it too
                return
            _drain_messages(msg_queue_id, messages)
            timeout = 0 if engine.has_unfinished() or pending else 0.2
            while link.poll(timeout):
                timeout = 0
                receive(link.recv())
            inserted = False
            while pending:
                h, kv, draft, cost, attach_s = pending[0]
                t0 = time.perf_counter()
                if not engine.add_prefilled(h, kv, draft):
                    break
                pending.popleft()
                inserted = True
                results.put(
                    (
                        "cost",
                        h.request_id,
                        dict(
                            prefill_s=cost[0],
                            bytes=cost[1],
                            decode_s=attach_s + time.perf_counter() - t0,
                            prompt_len=len(h.prompt_token_ids),
                        ),
                    )
                )
            if engine.has_unfinished():
                items = []
                for d in engine.step():
                    if d.finished:
                        items.append((d, "done", engine.pop_output(d.request_id)))
                    else:
                        items.append((d, "stream", None))
                results.put(("step", "decode", (items, _snapshot(engine, len(pending)))))
            elif inserted:
                results.put(("step", "decode", ([], _snapshot(engine, len(pending)))))
    except (EOFError, BrokenPipeError):
        return  # the prefill side is gone
    except BaseException:  # noqa: BLE001
        results.put(("failed", "decode", traceback.format_exc()))
    finally:
        alive.close()


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
        import multiprocessing

        from ..config import CacheConfig, SchedulerConfig, SpeculativeConfig
        from ..engine.engine import LLMEngine
        from ..engine.sampling_params import SEED_MODULUS
        from ..llm import DTYPES, FORWARDS, check_device
        from ..model.config import ErnieConfig
        from ..model.loader import CONFIG_FILE
        from .tp import _tokenizer

        name = type(self).__name__
        spec = SpeculativeConfig.from_value(speculative_config)
        if spec is not None and spec.method not in PD_METHODS:
            raise ValueError(
                f"{name}: speculative method {spec.method!r} is not offered with prefill / "
                "decode disaggregation (plain or 'mtp')"
            )
        device = check_device(device)
        if dtype is not None:
            dtype = str(dtype).replace("paddle.", "")
            if dtype not in DTYPES:
                raise ValueError(
                    f"{name}: dtype must be None or one of {list(DTYPES)}, got {dtype!r}"
                )
            if dtype != "float32" and device == "cpu":
                raise ValueError(
                    f"{name}: dtype={dtype!r} is not supported on device 'cpu' (Paddle's CPU build "
                    "has no half-precision matmul): use 'float32' or None, or device 'gpu'"
                )
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEED_MODULUS:
            raise ValueError(f"{name}: seed must be an int in [0, {SEED_MODULUS}), got {seed!r}")
        if forward not in FORWARDS:
            raise ValueError(f"{name}: forward must be one of {list(FORWARDS)}, got {forward!r}")
        if cpu_threads is not None and (not isinstance(cpu_threads, int) or cpu_threads < 1):
            raise ValueError(
                f"{name}: cpu_threads must be None or an int >= 1, got {cpu_threads!r}"
            )
        if not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"{name}: timeout must be a number > 0, got {timeout!r}")
        scheduler = SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_model_len)
        CacheConfig(block_size, num_gpu_blocks, enable_prefix_caching=enable_prefix_caching)
        if model is None:
            from ..assets import default_model_path

            model = default_model_path()
        self.model_path = Path(model)
        if not (self.model_path / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{self.model_path}: no {CONFIG_FILE}")
        config = ErnieConfig.from_file(self.model_path / CONFIG_FILE)
        if spec is not None and config.num_nextn_predict_layers < 1:
            raise ValueError(
                f"{name}: speculative_config method 'mtp' needs an MTP block, and the checkpoint "
                "has none (num_nextn_predict_layers = 0)"
            )
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
        from ..sysv_queue import remove_queue

        if msg_queue_id is None:
            self.msg_queue_id = _claim_queue_id(0x5000 + os.getpid() % 0x4000)
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
        lim = self._limits
        runner = SimpleNamespace(**{k: lim[k] for k in lim if k not in ("num_blocks", "ops_stop")})
        self._checker = SimpleNamespace(
            tokenizer=self.tokenizer,
            runner=runner,
            ops_stop=lim["ops_stop"],
            block_manager=SimpleNamespace(num_blocks=lim["num_blocks"]),
        )
        checker = self._checker  # (not ``self``: the finalizer must see this object die)
        checker.encode = lambda text: LLMEngine.encode(checker, text)

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


def _stop(processes, commands, msg_queue_id, pids, grace: float = 10.0) -> None:
    from ..sysv_queue import remove_queue

    reap(processes, commands.values(), ("stop",), grace)
    try:
        remove_queue(msg_queue_id)
    except OSError:
        pass
    # segments of an instance that did not get to release them (killed): the prefill side's
    # published copies and its staging tensors
    for pid in pids.values():
        for path in glob.glob(f"/dev/shm{SEGMENT_PREFIX}.{pid}.*") + glob.glob(
            f"/dev/shm/fd_mtp.{pid}.*"
        ):
            try:
                os.unlink(path)
            except OSError:
                pass
