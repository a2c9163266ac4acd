"""Array helpers shared by the reference modules."""

import numpy as np


def _flat(a):
    """A flat view of ``a``; writes through it land in ``a``."""
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _on_copies(args, written, apply):
    """Run ``apply(work)`` on copies ``work`` of ``args[n]`` (the op's arguments by name) for each
    ``n`` in ``written``, then write them back into the caller's arrays: an error raised by
    ``apply`` leaves every argument unchanged."""
    work = {n: args[n].copy() for n in written}
    apply(work)
    for n in written:
        args[n][...] = work[n]


def _views(args, **flat):
    """A namespace of an op's arguments ``args`` (a dict by name, e.g. the function's
    ``locals()``) plus flat views (`_flat`) of some of them: ``flat`` maps a short name to the
    argument's name."""
    views = _Namespace()
    views.__dict__.update(args)
    views.__dict__.update({short: _flat(args[name]) for short, name in flat.items()})
    return views


class _Namespace:
    """Attributes by name (the reference modules import numpy only, not types.SimpleNamespace)."""
