"""Exact array comparison with a readable report (style.md §9): dtype, shape, then the first
differing indices with both values. Pure numpy: the GPU parity tests (tests/gpu) and the
reference traces (tests/ops/test_reference_traces.py) share it."""

from __future__ import annotations

import numpy as np

__all__ = ["assert_exact"]


def assert_exact(actual, expected, name: str = "array") -> None:
    """``actual`` equals ``expected`` element for element, in dtype and shape (NaN equals
    nothing: integers and written floats compare bit for bit in value)."""
    assert actual.dtype == expected.dtype, (
        f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    )
    assert actual.shape == expected.shape, (
        f"{name}: shape {actual.shape}, expected {expected.shape}"
    )
    differing = np.argwhere(actual != expected)
    if differing.size:
        lines = []
        for idx in map(tuple, differing[:5]):
            at = tuple(int(i) for i in idx)
            lines.append(
                f"  at {at}: got {actual[idx].item()!r}, expected {expected[idx].item()!r}"
            )
        raise AssertionError(
            f"{name}: {len(differing)} of {actual.size} elements differ\n"
            + "\n".join(lines)
            + f"\ngot:\n{actual}\nexpected:\n{expected}"
        )
