"""fd_mtp.cuda version of the target-side verify op (spec §5.7, generated from the schema:
fd_mtp/schema/verify.py) and the device Philox generator."""

from __future__ import annotations

from ._common import _cupy, _ptr, _stream, define_launchers, load

__all__ = [*define_launchers(globals(), "verify"), "philox4x32_10"]


def philox4x32_10(counter, key):
    """Philox4x32-10 on the GPU: counter [n, 4] and key [n, 2] uint32 (host or device) -> [n, 4]
    uint32 host array (the device side of the Random123 known-answer test)."""
    cp = _cupy()
    m = load()
    inp = cp.ascontiguousarray(
        cp.concatenate(
            [
                cp.asarray(counter, cp.uint32).reshape(-1, 4),
                cp.asarray(key, cp.uint32).reshape(-1, 2),
            ],
            axis=1,
        )
    )
    out = cp.zeros((inp.shape[0], 4), dtype=cp.uint32)
    m.philox4x32_10(_ptr(inp), _ptr(out), inp.shape[0], _stream())
    return cp.asnumpy(out)
