"""The prefill and decode instances of `fd_mtp.distributed.pd` (each runs in its own process):
the engine of its role built from the front's setup, the per-step deltas and counters it sends
the front, the KV hand-off (a CPU shared-memory segment per request, published by the prefill
side, attached and copied by the decode side) and the first-token messages on the SysV queue.
The front, the request flow and the failure rules are described in `fd_mtp.distributed.pd`.

The hand-off of one request (steps 2 and 3 of the front's account), in detail:

* the prefill engine runs its prefill and one step (MTP: the proposer drafts once, role
   "prefill") and sends ``[first token, first draft]`` with ``mtp_save_first_token`` on the SysV
   queue ``msg_queue_id`` (FastDeploy's wire format, spec §6.8);
* it copies the request's KV blocks (every target layer and the MTP layer) into a CPU
   shared-memory tensor (``shared_empty``), publishes it with ``set_data_ipc`` under
   ``/fdmtp_pd.<prefill pid>.<n>``, and sends the request's record (prompt, params, seed, first
   token, its slot in the message, the segment name) on a pipe to the decode instance;
* the decode instance reads the first-token message(s) of that step from the SysV queue (it
   drains the queue continuously: a Linux queue holds two such messages by default), attaches
   to the segment (``share_external_data``), copies the KV into blocks of its own, answers
   ``ack`` (the prefill side then ``unset_data_ipc(..., unlink_shm=True)`` and frees the copy),
   inserts the request with the decode-role fields and decodes it to the end.
"""

from __future__ import annotations

import collections
import copy
import glob
import itertools
import os
import queue
import signal
import time
import traceback
from pathlib import Path

#: POSIX names of the KV hand-off segments: ``/fdmtp_pd.<prefill pid>.<n>``
SEGMENT_PREFIX = "/fdmtp_pd"


class PDError(RuntimeError):
    """An instance failed, died or did not answer in time."""


#: how long the decode side waits for a step's first-token messages once their record arrived
MESSAGE_TIMEOUT = 30.0


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
    front = _instance_setup("prefill")
    try:
        engine = _build(model_path, setup, "prefill", msg_queue_id)
    except BaseException:  # noqa: BLE001 - reported to the front
        results.put(("failed", "prefill", traceback.format_exc()))
        return
    results.put(
        ("ready", "prefill", dict(pid=os.getpid(), limits=_limits(engine), stats=_snapshot(engine)))
    )
    _PrefillInstance(engine, msg_queue_id, commands, results, link, alive).run(front)


class _PrefillInstance:
    """The prefill process's loop: commands from the front, engine steps, the KV hand-offs to
    the decode instance over ``link`` and their acks."""

    def __init__(self, engine, msg_queue_id, commands, results, link, alive):
        import threading

        self.engine, self.msg_queue_id = engine, msg_queue_id
        self.commands, self.results, self.link = commands, results, link
        self.pubs = _Publications()
        self.decode_alive = True
        self.dead = threading.Event()
        threading.Thread(target=_watch_decode, args=(alive, self.dead), daemon=True).start()

    def decode_gone(self) -> None:
        if self.decode_alive:
            self.decode_alive = False
            self.pubs.release_all()

    def to_decode(self, message) -> bool:
        if self.decode_alive:
            try:
                self.link.send(message)
                return True
            except (BrokenPipeError, EOFError, OSError):
                self.decode_gone()
        return False

    def run(self, front: int) -> None:
        from ..sysv_queue import remove_queue

        engine = self.engine
        try:
            while True:
                cmd = _next(self.commands, 0.2 if not engine.has_unfinished() else 0)
                if cmd is None and os.getppid() != front:  # the front is gone, and its queue's user
                    remove_queue(self.msg_queue_id)
                    return
                while cmd is not None:
                    if cmd[0] == "stop":
                        return
                    self.command(cmd)
                    cmd = _next(self.commands, 0)
                if self.dead.is_set():
                    self.decode_gone()
                    # nobody reads the first-token queue any more: empty it before the step
                    # sends, so the proposer's blocking msgsnd finds room (it holds this
                    # process's GIL while it waits, so no thread here could empty it then: the
                    # front does, see PDEngineClient._check_instances)
                    _drain_messages(self.msg_queue_id)
                if engine.has_unfinished():
                    self.step()
                self.read_acks()
        except BaseException:  # noqa: BLE001
            self.results.put(("failed", "prefill", traceback.format_exc()))
        finally:
            self.pubs.release_all()

    def command(self, cmd) -> None:
        """An "add" or "abort" from the front."""
        engine = self.engine
        if cmd[0] == "add":
            _, rid, prompt, params = cmd
            try:
                engine.add_request(prompt, params, request_id=rid)
            except ValueError as exc:
                self.results.put(("rejected", rid, str(exc)))
        elif cmd[0] == "abort":
            rid = cmd[1]
            if rid in engine.requests:
                engine.abort_request(rid)
                engine.pop_output(rid)
                self.results.put(("aborted", "prefill", (rid, _snapshot(engine))))
            elif not self.to_decode(("abort", rid)):
                # handed over (or finished) and nobody on the decode side: nothing to free
                self.results.put(("aborted", "prefill", (rid, _snapshot(engine))))

    def step(self) -> None:
        """One engine step; its hand-offs published and announced to the decode side, its
        deltas sent to the front."""
        from ..engine.pd import gather_kv

        engine = self.engine
        deltas = engine.step()
        handed = {h.request_id for h in engine.handoffs}
        records = []
        for h in engine.handoffs:
            if not self.decode_alive:
                continue
            t0 = time.perf_counter()
            kv = gather_kv(engine.runner, h.block_ids)
            name = self.pubs.publish(kv)
            cost = (time.perf_counter() - t0, int(kv.numel()) * kv.element_size())
            records.append((h, name, list(kv.shape), str(kv.dtype).replace("paddle.", ""), cost))
        if records or engine.messages_sent:
            self.to_decode(("handoff", records, engine.messages_sent))
        items = []
        for d in deltas:
            if not d.finished:
                items.append((d, "stream", None))
                continue
            out = engine.pop_output(d.request_id)
            if d.request_id not in handed:
                items.append((d, "done", out))
            elif not self.decode_alive:
                d.finish_reason = out.finish_reason = "error"
                d.error = out.error = "the decode instance is gone"
                items.append((d, "done", out))
            else:
                items.append((d, "handed", out))
        self.results.put(("step", "prefill", (items, _snapshot(engine))))

    def read_acks(self) -> None:
        """The decode side's acks: each frees its published copy."""
        while self.decode_alive:
            try:
                if not self.link.poll(0):
                    break
                kind, name = self.link.recv()
            except (EOFError, OSError):
                self.decode_gone()
                break
            if kind == "ack":
                self.pubs.release(name)


def _decode_main(model_path, setup, msg_queue_id, commands, results, link, alive):
    """Body of the decode process."""
    # ``alive`` is held (never used) until this process ends: the prefill side then reads EOF
    front = _instance_setup("decode")
    try:
        engine = _build(model_path, setup, "decode", msg_queue_id)
    except BaseException:  # noqa: BLE001
        results.put(("failed", "decode", traceback.format_exc()))
        alive.close()
        return
    results.put(
        ("ready", "decode", dict(pid=os.getpid(), limits=_limits(engine), stats=_snapshot(engine)))
    )
    try:
        _DecodeInstance(engine, msg_queue_id, commands, results, link).run(front)
    finally:
        alive.close()


class _DecodeInstance:
    """The decode process's loop: the prefill side's hand-offs (first-token messages, KV
    copies) inserted into its engine, then decoded to the end."""

    def __init__(self, engine, msg_queue_id, commands, results, link):
        self.engine, self.msg_queue_id = engine, msg_queue_id
        self.commands, self.results, self.link = commands, results, link
        self.messages: collections.deque = collections.deque()
        self.pending: collections.deque = collections.deque()  # hand-offs not yet inserted

    def run(self, front: int) -> None:
        from ..sysv_queue import remove_queue

        engine = self.engine
        try:
            while True:
                cmd = _next(self.commands, 0)
                if cmd is not None and cmd[0] == "stop":
                    return
                if os.getppid() != front:  # the front is gone; this side's drains recreate the
                    remove_queue(self.msg_queue_id)  # queue the prefill side removes: remove it
                    return
                _drain_messages(self.msg_queue_id, self.messages)
                timeout = 0 if engine.has_unfinished() or self.pending else 0.2
                while self.link.poll(timeout):
                    timeout = 0
                    self.receive(self.link.recv())
                inserted = self.insert_pending()
                if engine.has_unfinished():
                    items = []
                    for d in engine.step():
                        if d.finished:
                            items.append((d, "done", engine.pop_output(d.request_id)))
                        else:
                            items.append((d, "stream", None))
                    self.results.put(("step", "decode", (items, self.snapshot())))
                elif inserted:
                    self.results.put(("step", "decode", ([], self.snapshot())))
        except (EOFError, BrokenPipeError):
            return  # the prefill side is gone
        except BaseException:  # noqa: BLE001
            self.results.put(("failed", "decode", traceback.format_exc()))

    def snapshot(self) -> dict:
        return _snapshot(self.engine, len(self.pending))

    def receive(self, message) -> None:
        """One message of the prefill side: a step's hand-offs, or an abort."""
        engine = self.engine
        if message[0] == "abort":
            rid = message[1]
            kept = collections.deque(p for p in self.pending if p[0].request_id != rid)
            if len(kept) == len(self.pending) and rid in engine.requests:
                engine.abort_request(rid)
                engine.pop_output(rid)
            self.pending = kept
            self.results.put(("aborted", "decode", (rid, self.snapshot())))
            return
        _, records, n_messages = message
        step_messages = self.step_messages(n_messages)
        for record in records:
            self.attach(record, step_messages)

    def step_messages(self, n_messages: int) -> list:
        """The ``n_messages`` first-token messages of one prefill step, waited for (bounded)."""
        deadline = time.monotonic() + MESSAGE_TIMEOUT
        while len(self.messages) < n_messages:
            if time.monotonic() > deadline:
                raise PDError(
                    f"decode: {n_messages} first-token message(s) announced, "
                    f"{len(self.messages)} arrived on queue {self.msg_queue_id}"
                )
            time.sleep(0.002)
            _drain_messages(self.msg_queue_id, self.messages)
        return [self.messages.popleft() for _ in range(n_messages)]

    def attach(self, record, step_messages) -> None:
        """One hand-off: its first token checked against the step's messages, its KV copied
        out of the published segment (then acked), queued for insertion."""
        import paddle

        from .. import ops
        from ..engine.pd import first_tokens

        h, name, shape, dtype, cost = record
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
        self.link.send(("ack", name))
        self.pending.append((h, kv, draft, cost, time.perf_counter() - t0))

    def insert_pending(self) -> bool:
        """Insert the queued hand-offs in order while the engine has room; whether any was."""
        inserted = False
        while self.pending:
            h, kv, draft, cost, attach_s = self.pending[0]
            t0 = time.perf_counter()
            if not self.engine.add_prefilled(h, kv, draft):
                break
            self.pending.popleft()
            inserted = True
            cost = dict(
                prefill_s=cost[0],
                bytes=cost[1],
                decode_s=attach_s + time.perf_counter() - t0,
                prompt_len=len(h.prompt_token_ids),
            )
            self.results.put(("cost", h.request_id, cost))
        return inserted


def _checkpoint_config(name: str, model, spec):
    """``(path, ErnieConfig)`` of checkpoint directory ``model`` (None: the demo model), checked
    against ``spec`` (MTP needs an MTP block)."""
    from ..model.config import ErnieConfig
    from ..model.loader import CONFIG_FILE

    if model is None:
        from ..assets import default_model_path

        model = default_model_path()
    path = Path(model)
    if not (path / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{path}: no {CONFIG_FILE}")
    config = ErnieConfig.from_file(path / CONFIG_FILE)
    if spec is not None and config.num_nextn_predict_layers < 1:
        raise ValueError(
            f"{name}: speculative_config method 'mtp' needs an MTP block, and the checkpoint "
            "has none (num_nextn_predict_layers = 0)"
        )
    return path, config


def _stop(processes, commands, msg_queue_id, pids, grace: float = 10.0) -> None:
    """Stop and reap both instance processes (bounded), remove the SysV queue and the
    hand-off segments an instance killed before releasing them left in /dev/shm."""
    from ..sysv_queue import remove_queue
    from ._reap import reap

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
