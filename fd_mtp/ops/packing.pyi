# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""Packed ("padding removed") token layout of a step: spec ../shared/spec/ops.md §1.3, §5.1-§5.4."""

import paddle

__all__ = [
    "pre_process",
    "rebuild_padding",
    "speculate_get_output_padding_offset",
    "speculate_get_padding_offset",
    "speculate_get_seq_lens_output",
]

def pre_process(
    input_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    speculative_decoding: bool,
    draft_tokens: paddle.Tensor | None = None,
    seq_lens_encoder: paddle.Tensor | None = None,
    seq_lens_decoder: paddle.Tensor | None = None,
) -> tuple[
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor | None,
    paddle.Tensor | None,
]:
    """FastDeploy's ``pre_process`` glue (spec §5.3): pack the step's tokens and build the offsets.

    Speculative (``speculative_decoding=True``; needs draft_tokens, seq_lens_encoder,
    seq_lens_decoder): ``token_num = sum(seq_lens_this_time)``, ``cum_offsets = cumsum(L_in -
    seq_lens_this_time)`` with ``L_in = input_ids.shape[1]``, then
    ``speculate_get_padding_offset``, ``speculate_get_seq_lens_output``, ``cumsum(L_in -
    seq_lens_output)`` and ``speculate_get_output_padding_offset(..., L_in)``.

    Not speculative: every request's tokens come from ``input_ids`` (FastDeploy's
    ``get_padding_offset``): this passes ``input_ids`` as ``draft_tokens`` too, and
    ``seq_lens_this_time`` as ``seq_lens_encoder``, so token i of request b is ``input_ids[b, i]``
    whichever branch the kernel takes. The output offsets are not built and returned as None, as
    in FastDeploy's non-speculative branch.

    Args:
        input_ids: ``[>=bsz, L_in]`` int64, read (prefill chunks).
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.
        speculative_decoding (bool).
        draft_tokens: ``[>=bsz, K + 1]`` int64, read (decode tokens).
        seq_lens_encoder, seq_lens_decoder: ``[>=bsz]`` int32, read.

    Returns:
        ``(ids_remove_padding [T] int64, batch_id_per_token [T] int32, cu_seqlens_q [bsz + 1] int32,
        cu_seqlens_k [bsz + 1] int32, output_cum_offsets [bsz] int32 | None,
        output_padding_offset [To] int32 | None)``. Raises ValueError naming the argument as the
        ops do (e.g. a request with more tokens than its source row).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> ids = paddle.to_tensor([[5, 6, 7, 0], [9, 0, 0, 0]], dtype="int64")
        >>> drafts = paddle.to_tensor([[0, 0], [8, 4]], dtype="int64")
        >>> q = paddle.to_tensor([3, 2], dtype="int32")
        >>> enc = paddle.to_tensor([3, 0], dtype="int32")
        >>> dec = paddle.to_tensor([0, 9], dtype="int32")
        >>> out = ops.pre_process(ids, q, True, drafts, enc, dec)
        >>> [t.tolist() for t in out]
        [[5, 6, 7, 8, 4], [0, 0, 0, 1, 1], [0, 3, 5], [0, 3, 5], [0, 3], [0, 3, 3]]
    """
    ...

def rebuild_padding(
    tmp_out: paddle.Tensor,
    cu_seqlens_q: paddle.Tensor,
    seq_len_this_time: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    output_padding_offset: paddle.Tensor | None,
    first_token_out: paddle.Tensor | None,
    max_input_length: int,
    enable_logprob: bool,
    *,
    use_output_padding_offset: bool | None = None,
) -> paddle.Tensor:
    """Select the hidden rows that get logits from the packed model output (spec §5.4).

    ``bsz = cu_seqlens_q.shape[0] - 1``. A request with ``seq_len_this_time == 0``, or with
    ``seq_lens_decoder == seq_lens_encoder == 0``, gives zero rows; otherwise a row copies
    ``tmp_out[cu_seqlens_q[b] + local + s]`` with ``s = seq_lens_encoder[b] - 1`` when prefilling
    (the chunk's last token) and 0 when decoding.

    * Speculative branch (``output_padding_offset`` given): ``R = T - sum over b with
      seq_lens_encoder[b] > 0 of (seq_lens_encoder[b] - 1)`` rows (upstream computes R on the
      host from ``seq_lens_encoder``; here the kernel counts it and the host reads the count back:
      one synchronisation on a GPU, as upstream's copy); row r belongs to request
      ``b = p // max_input_length`` with ``p = r + output_padding_offset[r]`` and
      ``local = p - b * max_input_length``: one row per prefilling request, every token of a
      decoding one.
    * Plain branch (``output_padding_offset`` None): one row per request (``local = 0``), ``[bsz, H]``.

    Args:
        tmp_out: ``[T, H]`` float32, float16 or bfloat16, read. Any H (16-byte vector copies on
            the GPU when a row is a multiple of 16 bytes, narrower ones otherwise; upstream needs
            H to be a multiple of 8 for 2-byte types).
        cu_seqlens_q: ``[bsz + 1]`` int32, read; defines bsz.
        seq_len_this_time, seq_lens_decoder: ``[>=bsz]`` int32, read.
        seq_lens_encoder: ``[>=bsz]`` int32, read.
        output_padding_offset: ``[>=R]`` int32 or None, read.
        first_token_out: tensor or None; no effect (as upstream in this version).
        max_input_length (int): the width ``L_in`` the offsets were built with.
        enable_logprob (bool): no effect (as upstream in this version).
        use_output_padding_offset (bool, keyword-only): the speculative branch. Default: None,
            meaning ``output_padding_offset is not None`` (what the compiled op's attribute of
            that name receives; paddle hands a zero-size tensor to an optional input as "none",
            so the branch cannot be read off the tensor). True with ``output_padding_offset``
            None is the speculative branch with zero offsets.

    Returns:
        A new ``[R, H]`` (speculative) or ``[bsz, H]`` (plain) tensor of tmp_out's dtype.

    Pitfall (upstream's, kept): R assumes ``seq_len_this_time == seq_lens_encoder`` for every
    prefilling request. When a prefill's ``this_time`` is larger (e.g. a non-truncating draft
    model feeding ``enc + 1`` tokens), R exceeds the logits rows of ``pre_process``: upstream then
    reads ``output_padding_offset`` past its end; here that raises ValueError naming
    ``output_padding_offset``. When it is smaller, R is smaller too and the trailing rows are not
    produced, as upstream. Rows whose request ``(r + output_padding_offset[r]) //
    max_input_length`` lies outside the batch, or whose source row lies outside ``tmp_out``,
    raise ValueError (``output_padding_offset`` / ``cu_seqlens_q``) instead of reading out of
    bounds.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> h = paddle.arange(10, dtype="float32").reshape([5, 2])   # 3 prefill + 2 decode tokens
        >>> cu = paddle.to_tensor([0, 3, 5], dtype="int32")
        >>> q = paddle.to_tensor([3, 2], dtype="int32")
        >>> enc = paddle.to_tensor([3, 0], dtype="int32")
        >>> dec = paddle.to_tensor([0, 9], dtype="int32")
        >>> opo = paddle.to_tensor([0, 3, 3], dtype="int32")  # from pre_process with L_in = 4
        >>> ops.rebuild_padding(h, cu, q, dec, enc, opo, None, 4, False).tolist()
        [[4.0, 5.0], [6.0, 7.0], [8.0, 9.0]]
        >>> ops.rebuild_padding(h, cu, q, dec, enc, None, None, 4, False).tolist()
        [[4.0, 5.0], [6.0, 7.0]]

    NaN / inf: a pure copy; the values of ``tmp_out`` are never inspected, so NaN and inf pass
    through bit for bit (rows the op leaves at zero stay zero), as in the numpy reference.
    """
    ...

def speculate_get_output_padding_offset(
    output_cum_offsets_tmp: paddle.Tensor,
    out_token_num: paddle.Tensor,
    seq_lens_output: paddle.Tensor,
    max_seq_len: int,
) -> list[paddle.Tensor]:
    """Offsets of the packed logits rows (spec §5.3).

    ``bsz = output_cum_offsets_tmp.shape[0]``, ``To = out_token_num``. With ``ce =
    output_cum_offsets_tmp[b - 1]`` (0 for b = 0): ``output_cum_offsets[b] = ce`` and the rows of
    request b, ``output_padding_offset[b * max_seq_len - ce + i]`` for i < ``seq_lens_output[b]``,
    hold ``ce``; so ``(r + output_padding_offset[r]) // max_seq_len`` is the request of row r.

    Args:
        output_cum_offsets_tmp: ``[bsz]`` int32, read: inclusive ``cumsum(max_seq_len -
            seq_lens_output)``; defines bsz.
        out_token_num: one-element int64 (or int32) tensor on any device, read on the host:
            ``sum(seq_lens_output)``.
        seq_lens_output: ``[>=bsz]`` int32, read.
        max_seq_len (int): the width ``L_in`` (``input_ids.shape[1]``) the offsets are built with.

    Returns:
        ``[output_padding_offset [To] int32, output_cum_offsets [bsz] int32]``.

    Differences from upstream: ValueError naming the argument (nothing computed) when
    ``seq_lens_output`` is negative or above ``max_seq_len``, when requests' rows would overlap
    (``output_cum_offsets_tmp[b] > output_cum_offsets_tmp[b - 1] + max_seq_len -
    seq_lens_output[b]``) or the layout would pass the end (``bsz * max_seq_len -
    output_cum_offsets_tmp[bsz - 1] > out_token_num``); upstream writes wherever the offsets
    point. Smaller offsets (gaps between requests) are accepted, as upstream; gap rows hold 0.
    No batch-size limit.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> o = paddle.to_tensor([1, 0, 3], dtype="int32")
        >>> tmp = paddle.cumsum(8 - o, dtype="int32")
        >>> pad, cum = ops.speculate_get_output_padding_offset(tmp, paddle.sum(o), o, 8)
        >>> pad.tolist(), cum.tolist()
        ([0, 15, 15, 15], [0, 7, 15])
    """
    ...

def speculate_get_padding_offset(
    input_ids: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    cum_offsets: paddle.Tensor,
    token_num: paddle.Tensor,
    seq_len: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
) -> list[paddle.Tensor]:
    """Pack the step's tokens (spec §5.1).

    ``bsz = seq_len.shape[0]``, ``L_in = input_ids.shape[1]``, ``T = token_num``. Token i of request
    b goes to packed index ``b * L_in - cum_offsets[b - 1] + i`` (``cum_offsets[-1]`` read as 0),
    i.e. ``sum(seq_len[:b]) + i``. It is ``input_ids[b, i]`` when ``seq_lens_encoder[b] > 0``
    (prefill chunk) and ``draft_tokens[b, i]`` otherwise (decode: last accepted token + drafts).

    Args:
        input_ids: ``[>=bsz, L_in]`` int64, read.
        draft_tokens: ``[>=bsz, Kd]`` int64, read.
        cum_offsets: ``[>=bsz]`` int32, read: inclusive ``cumsum(L_in - seq_len)`` (or smaller
            steps: gaps).
        token_num: one-element int64 (or int32) tensor on any device, read on the host:
            ``sum(seq_len)`` (at least the end of the layout).
        seq_len: ``[bsz]`` or ``[bsz, 1]`` int32, read (``seq_lens_this_time``); defines bsz.
        seq_lens_encoder: ``[>=bsz]`` int32, read.

    Returns:
        ``[x_remove_padding [T] int64, batch_id_per_token [T] int32, cu_seqlens_q [bsz + 1] int32,
        cu_seqlens_k [bsz + 1] int32]``: the packed ids, the request of each packed token, and
        ``cu_seqlens_q = cu_seqlens_k = [0, q0, q0 + q1, ...]`` (computed as
        ``(b + 1) * L_in - cum_offsets[b]``). ``T == 0`` gives empty ids and zero cu_seqlens.

    Differences from upstream (which reads ``draft_tokens`` flat at ``b * Kd + i`` without a bounds
    check and trusts ``cum_offsets``): before anything is computed, ValueError naming the argument
    when ``seq_len`` is negative, when a prefilling request has more tokens than ``input_ids``
    has columns or a decoding one more than ``draft_tokens`` has, when requests would overlap
    (``cum_offsets[b] > cum_offsets[b - 1] + L_in - seq_len[b]``) or the layout would pass the
    end (``bsz * L_in - cum_offsets[bsz - 1] > token_num``). Offsets smaller than the prefix
    sum are accepted, as upstream: they leave gaps between requests (FastDeploy's own tests
    pass such offsets); gap entries of ``x_remove_padding`` / ``batch_id_per_token`` are 0 and
    ``cu_seqlens_q[b + 1]`` is where request b + 1 starts. No batch-size limit.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> ids = paddle.to_tensor([[5, 6, 7, 0], [9, 0, 0, 0]], dtype="int64")
        >>> drafts = paddle.to_tensor([[0, 0], [8, 4]], dtype="int64")
        >>> q = paddle.to_tensor([3, 2], dtype="int32")
        >>> enc = paddle.to_tensor([3, 0], dtype="int32")
        >>> cum = paddle.cumsum(4 - q, dtype="int32")
        >>> x, bid, cu_q, cu_k = ops.speculate_get_padding_offset(ids, drafts, cum, paddle.sum(q), q, enc)
        >>> x.tolist(), bid.tolist(), cu_q.tolist()
        ([5, 6, 7, 8, 4], [0, 0, 0, 1, 1], [0, 3, 5])
    """
    ...

def speculate_get_seq_lens_output(
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
) -> paddle.Tensor:
    """Logits rows per request (spec §5.2).

    For each b < ``bsz = seq_lens_this_time.shape[0]``: ``this_time == 0`` -> 0; ``this_time == 1``
    -> 1; ``seq_lens_encoder[b] != 0`` -> 1 (a prefill chunk: its last token); else ``this_time``
    (a speculative decode: every token).

    Args:
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read.
        seq_lens_encoder: ``[>=bsz]`` int32, read.
        seq_lens_decoder: unused (kept for the signature; any dtype and shape).

    Returns:
        ``seq_lens_output`` ``[bsz]`` int32 (a tensor: FastDeploy's import wrapper unwraps the
        pybind op's one-element list). A negative count passes through as upstream; the next op,
        ``speculate_get_output_padding_offset``, refuses it.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> q = paddle.to_tensor([0, 1, 4, 3], dtype="int32")
        >>> enc = paddle.to_tensor([0, 0, 4, 0], dtype="int32")
        >>> ops.speculate_get_seq_lens_output(q, enc, enc).tolist()
        [0, 1, 1, 3]
    """
    ...
