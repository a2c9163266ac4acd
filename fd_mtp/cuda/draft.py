"""fd_mtp.cuda versions of the draft-model ops (spec §6). The standard-dispatch wrappers are
generated from the schema (fd_mtp/schema/draft.py); written here: the eagle row gathers
(host-side planning and workspaces)."""

from __future__ import annotations

from ._common import (
    _cupy,
    _dtype,
    _fail,
    _ptr,
    _scratch,
    _stream,
    _workspace,
    define_launchers,
    load,
    prepare,
    raise_status,
)


def _gather(op, plan_fn, p, input):
    cp = _cupy()
    in_rows, hidden = input.shape
    src = _workspace("eagle_src_rows", (max(in_rows, 1),), cp.int64)
    status, counter = _scratch(), _scratch(1)
    stream = _stream()
    st, out_rows = plan_fn(p, in_rows, _ptr(src), _ptr(status), _ptr(counter), stream)
    raise_status(op, st)
    out = cp.empty((out_rows, hidden), dtype=input.dtype)
    if out.size:
        load().row_gather_copy(
            _ptr(input), _ptr(out), _ptr(src), out_rows, hidden * input.itemsize, stream
        )
    return out


def _gather_padded(op, padded_fn, p, input, out):
    """The fixed-capacity gather: no host read; the output has the input's rows, those past the
    plan's count (kept on the device) are zero. ``out``: a persistent output array, or None."""
    cp = _cupy()
    in_rows, hidden = input.shape
    src = _workspace("eagle_src_rows", (max(in_rows, 1),), cp.int64)
    live_rows = _workspace("eagle_live_rows", (1,), cp.int64)
    if out is None:
        out = cp.empty((in_rows, hidden), dtype=input.dtype)
    else:
        _dtype(op.name, "out", out, input.dtype)
        if tuple(out.shape) != (in_rows, hidden):
            _fail(op.name, "out", f"must have shape {[in_rows, hidden]}, got {list(out.shape)}")
    st = padded_fn(
        p,
        in_rows,
        _ptr(src),
        _ptr(_scratch()),
        _ptr(live_rows),
        _ptr(input) if input.size else 0,
        _ptr(out) if out.size else 0,
        hidden * input.itemsize,
        _stream(),
    )
    raise_status(op, st)
    return out


_PADDED_DOC = """

    ``padded=True`` (keyword, fd_mtp.cuda only) selects the fixed-capacity variant: nothing is
    read on the host; the output has the input's rows (the gathered rows never outnumber them),
    the gathered ones first and zero rows after them; the count stays on the device. ``out``
    (keyword, with ``padded=True`` only): a persistent array of the input's shape and dtype
    written instead of a new one (what a captured CUDA graph needs, fd_mtp/cuda/graph.py)."""


def eagle_get_hidden_states(
    input,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    stop_flags,
    accept_nums,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    actual_draft_token_num,
    *,
    padded=False,
    out=None,
):
    op, _, _, p = prepare(
        "eagle_get_hidden_states",
        {k: v for k, v in locals().items() if k not in ("padded", "out")},
    )
    if padded:
        return _gather_padded(op, load().eagle_get_hidden_states_padded, p, input, out)
    if out is not None:
        _fail(op.name, "out", "needs padded=True (the fixed-capacity variant)")
    return _gather(op, load().eagle_get_hidden_states_plan, p, input)


def eagle_get_self_hidden_states(
    input, last_seq_lens_this_time, seq_lens_this_time, step_idx, *, padded=False, out=None
):
    op, _, _, p = prepare(
        "eagle_get_self_hidden_states",
        {k: v for k, v in locals().items() if k not in ("padded", "out")},
    )
    if padded:
        return _gather_padded(op, load().eagle_get_self_hidden_states_padded, p, input, out)
    if out is not None:
        _fail(op.name, "out", "needs padded=True (the fixed-capacity variant)")
    return _gather(op, load().eagle_get_self_hidden_states_plan, p, input)


eagle_get_hidden_states.__doc__ = (
    "fd_mtp.ops.eagle_get_hidden_states on CuPy arrays; returns a new CuPy array." + _PADDED_DOC
)
eagle_get_self_hidden_states.__doc__ = (
    "fd_mtp.ops.eagle_get_self_hidden_states on CuPy arrays; returns a new CuPy array."
    + _PADDED_DOC
)


__all__ = define_launchers(globals(), "draft")
