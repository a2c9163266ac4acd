"""Numpy references of the fd_mtp ops, written from the spec (spec/ops.md); numpy only, no paddle.

One module per schema family (fd_mtp/schema/<family>.py; ipc has none: those ops move no data);
this package offers every name in each module's ``__all__`` (tests/ops/test_schema.py checks
that every op has its reference with the schema's signature)."""

from . import (
    attention,
    blocks,
    draft,
    logprobs,
    msgqueue,
    ngram,
    packing,
    sampling,
    update,
    verify,
)

__all__ = []
for _module in (
    attention,
    blocks,
    draft,
    logprobs,
    msgqueue,
    ngram,
    packing,
    sampling,
    update,
    verify,
):
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _module, _name
