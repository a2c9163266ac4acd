"""Beyond one process (design §9): tensor parallelism over ``paddle.distributed``
(`fd_mtp.distributed.tp`) and prefill / decode disaggregation (`fd_mtp.distributed.pd`).

Nothing here is imported by ``import fd_mtp``; the `fd_mtp.LLM` imports `TPEngineClient` when
``tensor_parallel_size > 1``, ``fd-mtp serve --pd`` `PDEngineClient`.
"""

from __future__ import annotations

__all__ = ["TPEngineClient", "WorkerError", "PDCluster", "PDEngineClient", "PDError"]


def __getattr__(name):
    if name in ("TPEngineClient", "WorkerError"):
        from . import tp

        return getattr(tp, name)
    if name in ("PDCluster", "PDEngineClient", "PDError"):
        from . import pd

        return getattr(pd, name)
    raise AttributeError(name)
