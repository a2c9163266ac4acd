"""The engine: model runners (plain and speculative: ``insert_tasks_v1``, ``execute_model``, their
per-slot state in a `fd_mtp.batch.InputBatch` whose tensors are ``share_inputs``), KV block
manager, sampler, scheduler with chunked prefill and preemption, incremental detokenizer,
requests and outputs.

Layer: below ``fd_mtp.llm``; above ``fd_mtp.proposer`` (the speculative runner calls
`fd_mtp.proposer.make_proposer`) and ``fd_mtp.batch`` (the types runners and proposers share).
Inside, the runner-level modules (runner, spec_runner, sampler, sampling_params, block_manager)
do not import the scheduler-level ones (engine, request, detokenizer); tests/test_layers.py checks.

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
    "StepOutput": "runner",
    "Task": "runner",
    "TaskKind": "runner",
    "IncrementalDetokenizer": "detokenizer",
    "SpeculativeModelRunner": "spec_runner",
    "LLMEngine": "engine",
    "StepStats": "engine",
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
