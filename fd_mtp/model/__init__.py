"""ERNIE-4.5 reference model (dense and MoE), its MTP block and the paged attention backend.

Importing this package is cheap: ``ErnieConfig`` needs only the standard library, and the Paddle
modules (``ernie``, ``attention``) are imported on first attribute access.
"""

import importlib

from .config import ErnieConfig

_LAZY = {
    "Ernie4_5ForCausalLM": "ernie",
    "Ernie4_5MTP": "ernie",
    "state_dict_names": "ernie",
    "ForwardMeta": "attention",
    "AttentionBackend": "attention",
    "PagedAttentionCPU": "attention",
    "kv_cache_shape": "attention",
    "allocate_kv_caches": "attention",
    "load_checkpoint": "loader",
    "load_weights": "loader",
    "load_tokenizer": "loader",
}

__all__ = ["ErnieConfig", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
