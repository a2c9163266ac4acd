"""Tensor parallelism across processes: one engine front driving N workers (design §9).

`TPEngineClient` (the front, in the user's process) starts N worker processes with
``paddle.distributed.spawn`` (gloo on CPU, NCCL on GPU; 127.0.0.1). Each worker joins the group
(``init_parallel_env``), loads its shard of the checkpoint
(``load_checkpoint(..., tp=TensorParallel(rank, N))``), and builds the engine `fd_mtp.LLM` builds
over it (`build_engine`): the scheduler, the runner and the sampler run on every rank, in
lockstep (SPMD), and the model's
collectives (`fd_mtp.model.parallel`) keep them in step. The MTP drafter runs at the target's
degree; its drafted tokens are broadcast from rank 0 through the proposer's ``tp_broadcast`` hook
before they are used, so every rank verifies rank 0's drafts.

The front forwards every engine call (``add_request``, ``step``, ``abort_request``, ...) to all
ranks over one command queue per rank and returns rank 0's answer; attribute reads
(``engine.running``, ``spec_metrics``, ...) are answered by rank 0 alone. Every wait is bounded
(``timeout``); a worker that raises or dies makes the call raise `WorkerError` and the front stops
the others. `close` (also at interpreter exit) stops and reaps the workers.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import traceback
import weakref
from pathlib import Path

from ._reap import reap

__all__ = ["TPEngineClient", "WorkerError"]

#: how long a worker may take to load its shard and answer the first call (seconds)
START_TIMEOUT = 300.0
#: how long one engine call may take on the workers (seconds)
CALL_TIMEOUT = 600.0


class WorkerError(RuntimeError):
    """A tensor-parallel worker raised, died or did not answer in time."""


def _broadcast_hook(tp):
    def hook(next_tokens):
        tp.broadcast(next_tokens, src=0)

    return hook


def _tokenizer(path: Path):
    """The checkpoint's tokenizer (as `fd_mtp.LLM` loads it), or None."""
    names = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json")
    if not any((path / n).exists() for n in names):
        return None
    try:
        from ..model.loader import load_tokenizer

        return load_tokenizer(path)
    except ImportError:
        return None


def build_engine(model, mtp, spec, scheduler, cache, *, tokenizer=None, seed=0, tp=None):
    """This rank's engine over its model shard: the runner `fd_mtp.LLM` builds (plain, or
    speculative with the drafts broadcast from rank 0 through the proposer's ``tp_broadcast``
    hook) and an `LLMEngine`. ``scheduler`` / ``cache`` resolved by the front."""
    from ..engine.engine import LLMEngine
    from ..engine.runner import ModelRunner

    if spec is None:
        runner = ModelRunner(model, scheduler_config=scheduler, cache_config=cache)
    else:
        from ..engine.spec_runner import SpeculativeModelRunner

        options = {}
        if spec.method == "mtp" and tp is not None and tp.active:
            options["tp_broadcast"] = _broadcast_hook(tp)
        runner = SpeculativeModelRunner(
            model,
            spec,
            scheduler_config=scheduler,
            cache_config=cache,
            mtp_model=mtp,
            seed=seed,
            proposer_options=options,
        )
    return LLMEngine(runner, tokenizer=tokenizer, seed=seed)


def _worker_main(model_path, setup, device, commands, results):
    """Body of one worker process (``paddle.distributed.spawn`` target). ``setup``: the front's
    resolved ``spec`` / ``scheduler`` / ``cache`` configs, ``dtype``, ``seed`` and ``tokenizer``."""
    import paddle
    import paddle.distributed as dist

    rank = -1
    try:
        dist.init_parallel_env()
        rank, world = dist.get_rank(), dist.get_world_size()
        # GPU: the card spawn gave this rank (not gpu:0 for every rank)
        paddle.set_device(device if device == "cpu" else f"gpu:{dist.ParallelEnv().device_id}")
        from ..model.loader import load_checkpoint
        from ..model.parallel import TensorParallel

        tp = TensorParallel(rank, world)
        model, mtp, _ = load_checkpoint(model_path, dtype=setup["dtype"], tp=tp)
        tokenizer = setup.get("tokenizer") or _tokenizer(Path(model_path))
        engine = build_engine(
            model,
            mtp,
            setup["spec"],
            setup["scheduler"],
            setup["cache"],
            tokenizer=tokenizer,
            seed=setup["seed"],
            tp=tp,
        )
        results.put((rank, "ready", None))
    except BaseException:  # noqa: BLE001 - reported to the front, then the process ends
        results.put((rank, "error", traceback.format_exc()))
        return
    inbox = commands[rank]
    while True:
        try:
            op, name, args, kwargs = inbox.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() == 1:  # the front is gone (orphaned): stop
                return
            continue
        if op == "stop":
            results.put((rank, "ok", None))
            return
        try:
            if op == "call":
                value = getattr(engine, name)(*args, **kwargs)
            elif op == "get":  # dotted path from the engine, e.g. "runner.proposer.stats"
                value = engine
                for part in name.split("."):
                    value = getattr(value, part)
            elif op == "request":
                value = engine.requests.get(args[0])
            else:
                raise ValueError(f"unknown worker command {op!r}")
            results.put((rank, "ok", value if rank == 0 else None))
        except Exception as exc:  # noqa: BLE001 - e.g. add_request's ValueError: every rank
            # raises the same (same state, same call); the front re-raises rank 0's
            try:
                results.put((rank, "raised", exc))
            except Exception:  # noqa: BLE001 - an exception that does not pickle
                results.put((rank, "raised", RuntimeError(traceback.format_exc())))
        except BaseException:  # noqa: BLE001
            results.put((rank, "error", traceback.format_exc()))
            return


class _Requests:
    """``engine.requests`` of rank 0: ``get`` / ``[]`` / ``in`` (copies)."""

    def __init__(self, client):
        self._client = client

    def get(self, request_id, default=None):
        value = self._client._request("request", "", (request_id,), {}, ranks="all")
        return default if value is None else value

    def __getitem__(self, request_id):
        value = self.get(request_id)
        if value is None:
            raise KeyError(request_id)
        return value

    def __contains__(self, request_id):
        return self.get(request_id) is not None


class TPEngineClient:
    """The front of N tensor-parallel workers, with the `LLMEngine` methods the `LLM` and the
    server call (forwarded to every rank; rank 0 answers) and its attributes (read on rank 0).

    Args:
        model_path: the checkpoint directory (each worker loads its shard).
        world_size: N >= 2.
        setup: what every worker builds its engine from (`build_engine`): ``spec`` (a
            `SpeculativeConfig` or None), ``scheduler`` / ``cache`` (resolved `SchedulerConfig` /
            `CacheConfig`), ``dtype``, ``seed``, ``tokenizer`` (None: the checkpoint's).
        device: "cpu" (gloo) or "gpu" (NCCL, one card per rank).
        timeout: seconds one call may take (``START_TIMEOUT`` for start-up).
    """

    def __init__(
        self,
        model_path,
        world_size: int,
        setup: dict,
        *,
        device: str = "cpu",
        timeout: float = CALL_TIMEOUT,
    ):
        import multiprocessing

        import paddle.distributed as dist

        self.world_size = int(world_size)
        self.timeout = float(timeout)
        self._closed = False
        self._lock = threading.RLock()
        ctx = multiprocessing.get_context("spawn")
        self._commands = [ctx.Queue() for _ in range(self.world_size)]
        self._results = ctx.Queue()
        options = {"backend": "gloo" if device == "cpu" else "nccl", "ips": "127.0.0.1"}
        self._context = dist.spawn(
            _worker_main,
            args=(str(model_path), dict(setup), device, self._commands, self._results),
            nprocs=self.world_size,
            join=False,
            daemon=True,
            **options,
        )
        self.processes = list(self._context.processes)
        self._finalizer = weakref.finalize(self, _reap, self.processes, self._commands)
        atexit.register(self._finalizer)
        try:
            self._collect("ready", START_TIMEOUT)
        except BaseException:
            self.close()
            raise
        self.requests = _Requests(self)

    # -- transport -----------------------------------------------------------------------------
    def _collect(self, what: str, timeout: float):
        """Wait for one answer per rank; rank 0's value. WorkerError (and every worker stopped)
        when a rank raised, died or the deadline passed."""
        deadline = time.monotonic() + timeout
        answers: dict[int, object] = {}
        while len(answers) < self.world_size:
            try:
                rank, status, value = self._results.get(timeout=0.5)
            except queue.Empty:
                dead = [i for i, p in enumerate(self.processes) if not p.is_alive()]
                if dead:
                    self.close()
                    raise WorkerError(
                        f"tensor-parallel worker(s) {dead} exited "
                        f"(exit codes {[self.processes[i].exitcode for i in dead]}) during {what}"
                    ) from None
                if time.monotonic() > deadline:
                    self.close()
                    raise WorkerError(
                        f"tensor-parallel workers did not answer {what} within {timeout:.0f} s"
                    ) from None
                continue
            if status == "error":
                self.close()
                raise WorkerError(f"tensor-parallel worker {rank} failed during {what}:\n{value}")
            answers[rank] = (status, value)
        status, value = answers[0]
        if status == "raised":
            raise value
        return value

    def _request(self, op, name, args, kwargs, ranks="all"):
        # one call at a time: a server reads attributes (num_running, kv_cache_usage) from its
        # event loop while its engine thread steps
        with self._lock:
            if self._closed:
                raise WorkerError("the tensor-parallel workers are stopped (TPEngineClient.close)")
            for q in self._commands:
                q.put((op, name, args, kwargs))
            return self._collect(f"{op} {name}".strip(), self.timeout)

    def call(self, name: str, *args, **kwargs):
        """``engine.<name>(*args, **kwargs)`` on every rank; rank 0's result."""
        return self._request("call", name, args, kwargs)

    def get(self, path: str):
        """The attribute at ``path`` of rank 0's engine (e.g. ``"runner.proposer.stats"``)."""
        return self._request("get", path, (), {})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        from ..engine.engine import LLMEngine

        member = getattr(LLMEngine, name, None)
        if callable(member) and not isinstance(member, property):
            return lambda *a, **k: self.call(name, *a, **k)
        return self.get(name)

    def is_alive(self) -> bool:
        """Every worker process runs and `close` has not been called (no call to the workers:
        a server's health check reads it while its engine thread steps)."""
        return not self._closed and all(p.is_alive() for p in self.processes)

    def close(self) -> None:
        """Stop the workers (bounded) and reap them; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()


def _reap(processes, commands, grace: float = 10.0) -> None:
    reap(processes, commands, ("stop", "", (), {}), grace)
