"""What differs between the paddle versions fd_mtp runs on (3.x, the CPU build of ``.venv``; 2.6,
the CUDA build ``paddlepaddle-gpu==2.6.2`` that ``make test`` builds the GPU branch against), in
one place. The C++ side of the same differences: custom_ops/paddle/paddle_compat.h.

* the generic custom-op runner: ``paddle._C_ops._run_custom_op`` (3.x) or
  ``paddle.base.core.eager._run_custom_op`` (2.6);
* (outputs without storage: paddle 2.6 allocates nothing for a zero-size tensor and returns it to
  Python as None; the C++ side gives every zero-row output storage, compat::empty);
* reductions of empty tensors: paddle 2.6's ``paddle.sum`` refuses an empty input; `sum_int64`
  (the packing wrappers' token counts) gives 0 for one, under every version;
* features only 3.x has (``paddle.uint16``, the bit views of bfloat16): `has_uint16`, and the
  test helper tests/ops/util.py builds on it.
"""

from __future__ import annotations

import functools


@functools.cache
def custom_op_runner():
    """paddle's generic runner of registered custom ops: ``runner(name, *inputs, *attrs)``."""
    from paddle import _C_ops

    runner = getattr(_C_ops, "_run_custom_op", None)
    if runner is None:  # paddle 2.6
        from paddle.base import core

        runner = core.eager._run_custom_op
    return runner


@functools.cache
def version() -> tuple[int, int]:
    """The installed paddle's (major, minor); (0, 0) for a development build."""
    import paddle

    parts = paddle.__version__.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return 0, 0


def has_uint16() -> bool:
    """Whether paddle has ``paddle.uint16`` (3.x), the dtype of bfloat16 bit views."""
    import paddle

    return hasattr(paddle, "uint16")


def sum_int64(t):
    """``paddle.sum(t, dtype="int64")``, and a 0-D int64 zero for an empty ``t`` (paddle 2.6
    raises on an empty reduction). The shape is known on the host: nothing is read back."""
    import paddle

    if 0 in t.shape:
        return paddle.zeros([], dtype="int64")
    return paddle.sum(t, dtype="int64")
