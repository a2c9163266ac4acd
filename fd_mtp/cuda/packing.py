"""fd_mtp.cuda versions of the packed-layout ops (spec §5.1-§5.4) on CuPy arrays."""

from __future__ import annotations

import numpy as np

from ._common import (
    _INT32_MAX,
    _cupy,
    _device_array,
    _dtype,
    _fail,
    _out_array,
    _ptr,
    _stream,
    _workspace,
    define_launchers,
    launch,
    load,
)


def pre_process(
    input_ids,
    seq_lens_this_time,
    speculative_decoding,
    draft_tokens=None,
    seq_lens_encoder=None,
    seq_lens_decoder=None,
    *,
    token_capacity=None,
    out=None,
):
    """fd_mtp.ops.pre_process on CuPy arrays (the same glue: cumsums on the device, counts read on the host).

    ``token_capacity`` (keyword, fd_mtp.cuda only) selects the fixed-capacity variant: nothing is
    read on the host. The packed outputs (``ids_remove_padding``, ``batch_id_per_token`` and, for
    the speculative layout, ``output_padding_offset``) have ``token_capacity`` entries; the real
    token count stays on the device (``cu_seqlens_q[bsz]``), entries past it are 0, and a batch
    with more tokens than the capacity is the kernel's error on ``token_num`` (deferred like any
    other, docs/gpu_errors.md). The speculative output rows are at most the tokens, so the same
    capacity holds them. Its cumsums run in one small kernel each (``packed_cum_offsets``), its
    intermediates live in per-stream workspaces, and ``out`` (keyword, with ``token_capacity``
    only) names persistent output arrays to write instead of new ones: the six outputs in order
    (ids_remove_padding int64 [N], batch_id_per_token int32 [N], cu_seqlens_q and cu_seqlens_k
    int32 [bsz + 1], output_cum_offsets int32 [bsz], output_padding_offset int32 [N]; the last two
    None without speculative_decoding). Then the step allocates nothing: what a captured CUDA
    graph needs (fd_mtp/cuda/graph.py)."""
    from .packing import (  # generated from the schema (define_launchers, below)
        speculate_get_output_padding_offset,
        speculate_get_padding_offset,
        speculate_get_seq_lens_output,
    )

    cp = _cupy()
    _dtype("pre_process", "seq_lens_this_time", seq_lens_this_time, np.int32)
    max_len = input_ids.shape[1]
    if token_capacity is not None:
        return _pre_process_padded(
            input_ids,
            seq_lens_this_time,
            speculative_decoding,
            draft_tokens,
            seq_lens_encoder,
            seq_lens_decoder,
            token_capacity,
            out,
        )
    if out is not None:
        _fail("pre_process", "out", "needs token_capacity (the fixed-capacity variant)")
    this_time, enc = _host_counts(seq_lens_this_time, seq_lens_encoder, speculative_decoding)
    token_num = int(this_time.sum())
    cum_offsets_now = cp.cumsum(max_len - seq_lens_this_time.reshape(-1), dtype=cp.int32)
    if not speculative_decoding:
        ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
            input_ids, input_ids, cum_offsets_now, token_num, seq_lens_this_time, seq_lens_this_time
        )
        return ids, batch_id, cu_q, cu_k, None, None
    _require_speculative(draft_tokens, seq_lens_encoder, seq_lens_decoder)
    ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
        input_ids, draft_tokens, cum_offsets_now, token_num, seq_lens_this_time, seq_lens_encoder
    )
    seq_lens_output = speculate_get_seq_lens_output(
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder
    )
    if enc is not None:
        one = (this_time == 1) | (enc != 0)
        out_token_num = int(np.where(this_time == 0, 0, np.where(one, 1, this_time)).sum())
    else:
        out_token_num = int(seq_lens_output.sum(dtype=cp.int64))
    out_cum_tmp = cp.cumsum(max_len - seq_lens_output, dtype=cp.int32)
    padding, out_cum = speculate_get_output_padding_offset(
        out_cum_tmp, out_token_num, seq_lens_output, max_len
    )
    return ids, batch_id, cu_q, cu_k, out_cum, padding


def _host_counts(seq_lens_this_time, seq_lens_encoder, speculative_decoding):
    """``(this_time, enc)`` on the host, read in one wait (docs/gpu_errors.md): this_time and, for
    the speculative layout, seq_lens_encoder (None when absent or too short: the op will refuse
    it), back to back before anything is launched; the output token count is then
    seq_lens_output's sum (spec §5.2) computed on the host."""
    cp = _cupy()
    this_time = cp.asnumpy(seq_lens_this_time).reshape(-1).astype(np.int64)
    enc = None
    if speculative_decoding and seq_lens_encoder is not None:
        enc = cp.asnumpy(seq_lens_encoder).reshape(-1)
        enc = enc[: this_time.size] if enc.size >= this_time.size else None
    return this_time, enc


def _require_speculative(draft_tokens, seq_lens_encoder, seq_lens_decoder):
    """pre_process's speculative-only arguments are given, else ValueError naming the first."""
    for name, value in (
        ("draft_tokens", draft_tokens),
        ("seq_lens_encoder", seq_lens_encoder),
        ("seq_lens_decoder", seq_lens_decoder),
    ):
        if value is None:
            _fail("pre_process", name, "is required when speculative_decoding is True")


def _pre_process_padded(
    input_ids,
    seq_lens_this_time,
    speculative_decoding,
    draft_tokens,
    seq_lens_encoder,
    seq_lens_decoder,
    capacity,
    out,
):
    """pre_process with fixed-capacity outputs and no host read (see pre_process)."""
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        _fail("pre_process", "token_capacity", f"must be an int, got {type(capacity).__name__}")
    capacity = int(capacity)
    if not 0 <= capacity <= _INT32_MAX:
        _fail("pre_process", "token_capacity", f"is {capacity}; it must be in [0, {_INT32_MAX}]")
    _device_array("pre_process", "input_ids", input_ids)
    if input_ids.ndim != 2:
        _fail("pre_process", "input_ids", f"must be 2-D, got shape {list(input_ids.shape)}")
    max_len = input_ids.shape[1]
    bsz = seq_lens_this_time.shape[0]
    if speculative_decoding:
        _require_speculative(draft_tokens, seq_lens_encoder, seq_lens_decoder)
    outs = _pre_process_outs(out, capacity, bsz, bool(speculative_decoding))
    cum_offsets_now = _cum_offsets("pre_process_cum_offsets", seq_lens_this_time, bsz, max_len)
    # without speculation the prompt rows are the only tokens: input_ids stands for the drafts
    # and every scheduled token is a prefill token
    ids, batch_id, cu_q, cu_k = launch(
        "speculate_get_padding_offset",
        dict(
            input_ids=input_ids,
            draft_tokens=draft_tokens if speculative_decoding else input_ids,
            cum_offsets=cum_offsets_now,
            token_num=capacity,
            seq_len=seq_lens_this_time,
            seq_lens_encoder=seq_lens_encoder if speculative_decoding else seq_lens_this_time,
        ),
        out=outs and outs[:4],
    )
    if not speculative_decoding:
        return ids, batch_id, cu_q, cu_k, None, None
    (seq_lens_output,) = launch(
        "speculate_get_seq_lens_output",
        dict(
            seq_lens_this_time=seq_lens_this_time,
            seq_lens_encoder=seq_lens_encoder,
            seq_lens_decoder=seq_lens_decoder,
        ),
        out=[_workspace("pre_process_seq_lens_output", (bsz,), np.int32)],
    )
    out_cum_tmp = _cum_offsets("pre_process_output_cum_offsets_tmp", seq_lens_output, bsz, max_len)
    padding, out_cum = launch(
        "speculate_get_output_padding_offset",
        dict(
            output_cum_offsets_tmp=out_cum_tmp,
            out_token_num=capacity,
            seq_lens_output=seq_lens_output,
            max_seq_len=max_len,
        ),
        out=outs and (outs[5], outs[4]),
    )
    return ids, batch_id, cu_q, cu_k, out_cum, padding


def _cum_offsets(key, lens, bsz, width):
    """cumsum(width - lens) as int32 [bsz] in the per-stream workspace ``key``, on the device."""
    _dtype("pre_process", "seq_lens_this_time", lens, np.int32)
    buf = _workspace(key, (bsz,), np.int32)
    load().packed_cum_offsets(_ptr(lens), bsz, width, _ptr(buf), _stream())
    return buf


_PRE_PROCESS_OUTS = (
    ("ids_remove_padding", np.int64, "N"),
    ("batch_id_per_token", np.int32, "N"),
    ("cu_seqlens_q", np.int32, "B1"),
    ("cu_seqlens_k", np.int32, "B1"),
    ("output_cum_offsets", np.int32, "B"),
    ("output_padding_offset", np.int32, "N"),
)


def _pre_process_outs(out, capacity, bsz, speculative):
    """``out`` of the fixed-capacity pre_process checked (None when absent): six entries, the
    last two None unless ``speculative``."""
    if out is None:
        return None
    if not isinstance(out, (list, tuple)) or len(out) != 6:
        _fail("pre_process", "out", "must be a list of the 6 output arrays (see pre_process)")
    sizes = {"N": capacity, "B1": bsz + 1, "B": bsz}
    for i, ((name, dt, size), a) in enumerate(zip(_PRE_PROCESS_OUTS, out)):
        if i >= 4 and not speculative:
            if a is not None:
                _fail("pre_process", f"out[{i}]", f"({name}) must be None without speculation")
            continue
        _out_array("pre_process", f"out[{i}] ({name})", a, (sizes[size],), dt)
    return list(out)


# The packing ops not written above are generated from fd_mtp/schema/packing.py.
__all__ = sorted({"pre_process", *define_launchers(globals(), "packing")})
