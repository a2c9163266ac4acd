"""Prefill / decode disaggregation in two processes (design §9; spec §4.2, §6.8, §7).

`PDCluster` (the front, in the user's process) starts a **prefill** instance and a **decode**
instance, each a process with its own copy of the model, its own KV cache and an engine of its
role (`fd_mtp.engine.pd`). A request goes:

1. front -> prefill (a multiprocessing queue): the prompt and its `SamplingParams`;
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
5. finished outputs go to the front (a multiprocessing queue) from whichever instance ended the
   request (the prefill side for a request whose first token ends it).

When the decode process dies, the prefill side sees the pipe close: it removes every segment it
still publishes, empties the first-token queue before each step, answers the requests it can no
longer hand over with ``finish_reason "error"``, and keeps serving; the front reports the requests
that were on the decode side as errors, and empties the queue too while the decode process is
dead: a prefill step that reached ``msgsnd`` on a full queue before the death was seen waits
there holding its process's GIL, so only another process can free it. Every wait is bounded;
`close` stops and reaps both processes and removes the SysV queue. Tensor parallelism inside an
instance is not offered with PD (`fd_mtp.config.ParallelConfig` refuses the combination).
"""

from __future__ import annotations

import atexit
import collections
import itertools
import os
import queue
import time
import traceback
import weakref
from pathlib import Path

from ._reap import reap

__all__ = ["PDCluster", "PDError", "SEGMENT_PREFIX"]

#: POSIX names of the KV hand-off segments: ``/fdmtp_pd.<prefill pid>.<n>``
SEGMENT_PREFIX = "/fdmtp_pd"
START_TIMEOUT = 300.0
CALL_TIMEOUT = 600.0
#: how long the decode side waits for a step's first-token messages once their record arrived
MESSAGE_TIMEOUT = 30.0


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
    model, mtp, config = load_checkpoint(model_path, dtype=setup.get("dtype"))
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


def _prefill_main(model_path, setup, msg_queue_id, commands, results, link, alive):
    """Body of the prefill process."""
    import threading

    from ..engine.pd import gather_kv

    pubs = _Publications()
    try:
        engine = _build(model_path, setup, "prefill", msg_queue_id)
    except BaseException:  # noqa: BLE001 - reported to the front
        results.put(("failed", "prefill", traceback.format_exc()))
        return
    results.put(("ready", "prefill", os.getpid()))
    decode_alive = True
    dead = threading.Event()
    threading.Thread(target=_watch_decode, args=(alive, dead), daemon=True).start()

    def decode_gone():
        nonlocal decode_alive
        if decode_alive:
            decode_alive = False
            pubs.release_all()

    try:
        while True:
            idle = not engine.has_unfinished()
            try:
                cmd = commands.get(timeout=0.2) if idle else commands.get_nowait()
            except queue.Empty:
                cmd = None
            while cmd is not None:
                if cmd[0] == "stop":
                    return
                _, rid, prompt, params = cmd
                try:
                    engine.add_request(prompt, params, request_id=rid)
                except ValueError as exc:
                    results.put(("rejected", rid, str(exc)))
                try:
                    cmd = commands.get_nowait()
                except queue.Empty:
                    cmd = None
            if dead.is_set():
                decode_gone()
                # nobody reads the first-token queue any more: empty it before the step sends,
                # so the proposer's blocking msgsnd finds room (it holds this process's GIL while
                # it waits, so no thread here could empty it then: the front does, see _pump)
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
                if decode_alive and (records or engine.messages_sent):
                    try:
                        link.send(("handoff", records, engine.messages_sent))
                    except (BrokenPipeError, EOFError, OSError):
                        decode_gone()
                for d in deltas:
                    if not d.finished:
                        continue
                    out = engine.pop_output(d.request_id)
                    if d.request_id not in handed:
                        results.put(("done", d.request_id, out))
                    elif not decode_alive:
                        out.finish_reason, out.error = "error", "the decode instance is gone"
                        results.put(("done", d.request_id, out))
                    else:
                        results.put(("handed", d.request_id, None))
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

    # ``alive`` is held (never used) until this process ends: the prefill side then reads EOF
    try:
        engine = _build(model_path, setup, "decode", msg_queue_id)
    except BaseException:  # noqa: BLE001
        results.put(("failed", "decode", traceback.format_exc()))
        return
    results.put(("ready", "decode", os.getpid()))
    messages: collections.deque = collections.deque()
    pending: collections.deque = collections.deque()  # (handoff, kv, draft) not yet inserted
    try:
        while True:
            try:
                if commands.get_nowait()[0] == "stop":
                    return
            except queue.Empty:
                pass
            _drain_messages(msg_queue_id, messages)
            busy = engine.has_unfinished() or pending
            if link.poll(0 if busy else 0.2):
                _, records, n_messages = link.recv()
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
            while pending:
                h, kv, draft, cost, attach_s = pending[0]
                t0 = time.perf_counter()
                if not engine.add_prefilled(h, kv, draft):
                    break
                pending.popleft()
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
                for d in engine.step():
                    if d.finished:
                        results.put(("done", d.request_id, engine.pop_output(d.request_id)))
    except (EOFError, BrokenPipeError):
        return  # the prefill side is gone
    except BaseException:  # noqa: BLE001
        results.put(("failed", "decode", traceback.format_exc()))
    finally:
        alive.close()


# --------------------------------------------------------------------------- front
class PDCluster:
    """A prefill process and a decode process serving greedy / sampled requests together.

    Args:
        model: checkpoint directory (both instances load it; None: the demo model).
        speculative_config: None (plain) or MTP (`SpeculativeConfig` or its dict).
        max_num_seqs, max_model_len, block_size, num_gpu_blocks, max_num_batched_tokens, seed,
        dtype, device: as `fd_mtp.LLM`, for both instances.
        msg_queue_id: the SysV queue of the first-token messages (default: derived from this
            process's pid); removed by `close`.
        timeout: seconds `generate` may take.
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
        seed: int = 0,
        dtype: str | None = None,
        device: str = "cpu",
        msg_queue_id: int | None = None,
        timeout: float = CALL_TIMEOUT,
    ):
        import multiprocessing

        from ..config import CacheConfig, SchedulerConfig, SpeculativeConfig

        spec = SpeculativeConfig.from_value(speculative_config)
        if spec is not None and spec.method != "mtp":
            raise ValueError(
                f"PDCluster: speculative method {spec.method!r} is not offered with prefill / "
                "decode disaggregation (plain or 'mtp')"
            )
        SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_model_len)  # checks
        CacheConfig(block_size, num_gpu_blocks)
        if model is None:
            from ..assets import default_model_path

            model = default_model_path()
        self.model_path = Path(model)
        self.msg_queue_id = (
            int(msg_queue_id) if msg_queue_id is not None else 0x5000 + os.getpid() % 0x4000
        )
        self.timeout = float(timeout)
        setup = dict(
            spec=spec,
            scheduler=dict(
                max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens,
                max_model_len=max_model_len,
            ),
            cache=dict(block_size=block_size, num_gpu_blocks=num_gpu_blocks),
            seed=seed,
            dtype=dtype,
            device=device,
        )
        from ..sysv_queue import remove_queue

        remove_queue(self.msg_queue_id)  # start empty
        ctx = multiprocessing.get_context("spawn")
        self._commands = {"prefill": ctx.Queue(), "decode": ctx.Queue()}
        self._results = ctx.Queue()
        link_p, link_d = ctx.Pipe(duplex=True)
        alive_p, alive_d = ctx.Pipe(duplex=False)  # alive_p reads EOF once the decode process ends
        path = str(self.model_path)
        self.prefill = ctx.Process(
            target=_prefill_main,
            args=(
                path,
                setup,
                self.msg_queue_id,
                self._commands["prefill"],
                self._results,
                link_p,
                alive_p,
            ),
            daemon=True,
        )
        self.decode = ctx.Process(
            target=_decode_main,
            args=(
                path,
                setup,
                self.msg_queue_id,
                self._commands["decode"],
                self._results,
                link_d,
                alive_d,
            ),
            daemon=True,
        )
        self.prefill.start()
        self.decode.start()
        for end in (link_p, link_d, alive_p, alive_d):
            end.close()  # the instances hold the only ends: a dead one closes its pipes
        self._closed = False
        self._finalizer = weakref.finalize(
            self, _stop, [self.prefill, self.decode], self._commands, self.msg_queue_id
        )
        atexit.register(self._finalizer)
        self._ids = itertools.count()
        self._at_decode: set[str] = set()
        self._returned: set[str] = set()
        self._done: dict[str, object] = {}
        self.pids: dict[str, int] = {}
        #: per handed-off request: ``prefill_s`` (gather the blocks + publish), ``bytes`` (KV
        #: moved), ``decode_s`` (attach + copy + insert), ``prompt_len``
        self.handoff_costs: list[dict] = []
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while len(self.pids) < 2:
                self._pump(deadline, "start-up")
        except BaseException:
            self.close()
            raise

    def _pump(self, deadline: float, what: str) -> None:
        """Handle one message from the instances (or check they live)."""
        try:
            kind, key, value = self._results.get(timeout=0.2)
        except queue.Empty:
            if not self.prefill.is_alive():
                self.close()
                raise PDError(
                    f"the prefill instance exited (code {self.prefill.exitcode}) during {what}"
                ) from None
            if not self.decode.is_alive():
                # A prefill step may be blocked in msgsnd on the full first-token queue that the
                # decode side no longer reads (it died before the prefill side saw it): this
                # process is the one that can empty it.
                try:
                    _drain_messages(self.msg_queue_id)
                except OSError:
                    pass
                for rid in self._at_decode:
                    self._done[rid] = ("error", "the decode instance died")
                self._at_decode.clear()
            if time.monotonic() > deadline:
                raise PDError(f"no answer from the instances within the deadline ({what})")
            return
        if kind == "ready":
            self.pids[key] = value
        elif kind == "failed":
            self.close()
            raise PDError(f"the {key} instance failed during {what}:\n{value}")
        elif kind == "handed":
            # the two instances' messages share one queue, each with its own feeder thread: the
            # decode side's "done" may come first
            if key not in self._done and key not in self._returned:
                self._at_decode.add(key)
        elif kind == "done":
            self._at_decode.discard(key)
            self._done[key] = ("ok", value)
        elif kind == "rejected":
            self._done[key] = ("rejected", value)
        elif kind == "cost":
            self.handoff_costs.append(value)

    def generate(self, prompts, sampling_params=None) -> list:
        """One `RequestOutput` per prompt (token ids or text), in order. A request the decode
        instance lost (it died) comes back with ``finish_reason "error"`` and ``error`` set."""
        from ..engine.request import RequestOutput
        from ..engine.sampling_params import SamplingParams

        if self._closed:
            raise PDError("PDCluster is closed")
        params = SamplingParams() if sampling_params is None else sampling_params
        rids = []
        for p in prompts:
            rid = f"pd-{next(self._ids)}"
            rids.append(rid)
            self._commands["prefill"].put(("add", rid, p, params))
        deadline = time.monotonic() + self.timeout
        while not all(r in self._done for r in rids):
            self._pump(deadline, "generate")
        outs = []
        for rid, prompt in zip(rids, prompts):
            status, value = self._done.pop(rid)
            self._returned.add(rid)
            if status == "ok":
                outs.append(value)
                continue
            ids = prompt if isinstance(prompt, list) else []
            outs.append(RequestOutput.rejected(rid, prompt, ids, value))
        return outs

    def close(self) -> None:
        """Stop both instances (bounded), reap them, remove the SysV queue; idempotent."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._finalizer()


def _stop(processes, commands, msg_queue_id, grace: float = 10.0) -> None:
    from ..sysv_queue import remove_queue

    reap(processes, commands.values(), ("stop",), grace)
    try:
        remove_queue(msg_queue_id)
    except OSError:
        pass
