"""fd_mtp.cuda versions of the n-gram drafting ops (spec §5.17 ngram_match, §6.7 hybrid_mtp_ngram).

``ngram_match`` / ``hybrid_mtp_ngram`` run the CUDA kernels on CuPy arrays (no host copies of the
token rows). ``ngram_match_host`` / ``hybrid_mtp_ngram_host`` run the same C++ CPU driver as the
Paddle op's CPU branch on numpy arrays, through the fd_mtp_cuda module: the CPU op where paddle
is absent (the GPU test machine), used to compare and time both paths.

Checks, Params fill and status messages come from the ops' schema (fd_mtp/schema/ngram.py), as in
the Paddle binding; `_apply` mirrors the hand-written part of custom_ops/paddle/ngram.cc.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    _fail,
    _ptr,
    _scratch,
    _stream,
    _workspace,
    load,
    prepare,
    raise_status,
)

__all__ = [
    "ngram_match",
    "hybrid_mtp_ngram",
    "ngram_match_host",
    "hybrid_mtp_ngram_host",
]


def _prepare_host(op_name, values):
    """`prepare` for host (numpy) arrays: the same checks, attribute defaults and Params fill."""
    from .. import schema
    from ..schema import arrays

    op = schema.get(op_name)
    values = dict(values)
    for t in op.tensors:
        x = values[t.name]
        if x is not None and not isinstance(x, np.ndarray):
            _fail(op.name, t.name, f"must be a host numpy array, got {type(x).__name__}")
    dims = arrays.check_arrays(op, values, lambda x: isinstance(x, np.ndarray), None)
    for a in op.attrs:
        values[a.name] = arrays.convert_attr(
            op, a, schema.resolve_kw(op_name, a.name, values[a.name])
        )
    p = getattr(load(), op.params)()
    arrays.fill_params(op, p, values, dims, lambda x: x.ctypes.data)
    return op, values, dims, p


def _apply(op, v, p):
    """What custom_ops/paddle/ngram.cc's ngram_match_apply / hybrid_mtp_ngram_apply add."""
    if op.name == "hybrid_mtp_ngram":
        if v["min_ngram_size"] > v["max_ngram_size"]:
            _fail(
                op.name,
                "min_ngram_size",
                f"must be <= max_ngram_size ({v['max_ngram_size']}), got {v['min_ngram_size']}",
            )
        p.hybrid = True
    else:
        p.min_ngram_size = 1
        p.hybrid = False


def _run_device(op_name, values):
    op, v, _, p = prepare(op_name, values)
    _apply(op, v, p)
    hits = _workspace("ngram_hits", (max(p.bsz, 1),), np.int64)  # persistent per stream
    status = _scratch()
    raise_status(op, load().ngram(p, _ptr(hits), _ptr(status), _stream()))


def _run_host(op_name, values):
    op, v, _, p = _prepare_host(op_name, values)
    _apply(op, v, p)
    raise_status(op, load().ngram_host(p))


def ngram_match(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """fd_mtp.ops.ngram_match on CuPy arrays (CUDA kernels)."""
    _run_device("ngram_match", locals())


def hybrid_mtp_ngram(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    min_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """fd_mtp.ops.hybrid_mtp_ngram on CuPy arrays (CUDA kernels); draft_token_num is unused."""
    _run_device("hybrid_mtp_ngram", locals())


def ngram_match_host(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """The Paddle op's CPU driver on numpy arrays (no paddle needed)."""
    _run_host("ngram_match", locals())


def hybrid_mtp_ngram_host(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    min_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """The Paddle op's CPU driver on numpy arrays (no paddle needed)."""
    _run_host("hybrid_mtp_ngram", locals())
