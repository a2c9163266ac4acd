"""Beyond one process (design §9): tensor parallelism over ``paddle.distributed``
(`fd_mtp.distributed.tp`) and prefill / decode disaggregation (`fd_mtp.distributed.pd`).

Nothing here is imported by ``import fd_mtp``; the `fd_mtp.LLM` imports `TPEngineClient` when
``tensor_parallel_size > 1``.
"""

from __future__ import annotations

__all__ = ["TPEngineClient", "WorkerError"]


def __getattr__(name):
    if name in __all__:
        from . import tp

        return getattr(tp, name)
    raise AttributeError(name)
