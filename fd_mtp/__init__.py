"""fd_mtp: PaddlePaddle custom ops for MTP (multi-token-prediction) speculative decoding.

Importing this package is cheap: paddle and the compiled extension are loaded on
first use of an op (`fd_mtp.ops`), the numpy references (`fd_mtp.reference`)
need only numpy, and the raw CUDA module (`fd_mtp.cuda`) needs no paddle.
`fd_mtp.LLM` and `fd_mtp.SamplingParams` (the Python API, `fd_mtp.llm`) are
imported on first access.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "LLM", "SamplingParams", "RequestOutput", "SpeculativeConfig"]

_LAZY = {
    "LLM": ("fd_mtp.llm", "LLM"),
    "SamplingParams": ("fd_mtp.engine.sampling_params", "SamplingParams"),
    "RequestOutput": ("fd_mtp.engine.request", "RequestOutput"),
    "SpeculativeConfig": ("fd_mtp.config", "SpeculativeConfig"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fd_mtp' has no attribute {name!r}")
