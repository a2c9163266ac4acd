"""The engine: model runners (plain and speculative (``share_inputs``, ``insert_tasks_v1``), KV block manager,
sampler, scheduler with chunked prefill and preemption, requests and outputs.

Submodules are imported on demand; ``fd_mtp.engine.sampling_params`` and ``request`` need no paddle.
"""

_LAZY = {
    "SamplingParams": "sampling_params",
    "Request": "request",
    "RequestOutput": "request",
    "RequestMetrics": "request",
    "StreamDelta": "request",
    "SpeculativeMetrics": "request",
    "BlockManager": "block_manager",
    "Sampler": "sampler",
    "ModelRunner": "runner",
    "Task": "runner",
    "TaskKind": "runner",
    "SpeculativeModelRunner": "spec_runner",
    "LLMEngine": "engine",
}

__all__ = list(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
