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
