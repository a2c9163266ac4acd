"""Numpy references of the packed token layout ops, written from the spec (spec/ops.md §1.3, §5.1-§5.4).

Executable specs: plain loops in the order the spec describes, no attempt at speed. These ops write
none of their arguments; they return new arrays (lists where the op returns several tensors).

Layout (§1.3): with ``L_in = input_ids.shape[1]`` and per-request query lengths ``q_b``, token i of
request b is packed at ``b * L_in - cum_excl[b] + i`` where ``cum_excl[b] = cum_offsets[b - 1]``
(0 for b = 0) and ``cum_offsets`` is the inclusive prefix sum of ``L_in - q``; i.e. at
``sum(q[:b]) + i``. Logits ("output") rows use the same scheme with ``seq_lens_output``.

Where upstream reads or writes outside its buffers on bad input, these raise ValueError naming the
argument, exactly where the fd_mtp ops do (same checks, same order):

* ``speculate_get_padding_offset``: negative ``seq_len``; a prefilling request (``seq_lens_encoder >
  0``) with more tokens than ``input_ids`` has columns, a decoding one with more than
  ``draft_tokens`` has; ``cum_offsets[b] != cum_offsets[b - 1] + L_in - seq_len[b]`` (so the
  requests tile ``[0, T)`` exactly and every packed index is written once); ``token_num !=
  sum(seq_len)``. The per-request checks run for b = 0, 1, ... and the first failure is raised;
  the token_num check comes last.
* ``speculate_get_output_padding_offset``: the same for ``seq_lens_output`` /
  ``output_cum_offsets_tmp`` / ``out_token_num``, plus ``seq_lens_output[b] <= max_seq_len``.
* ``rebuild_padding``: a row mapped to a request outside ``[0, bsz)``, a source row outside
  ``tmp_out``, ``output_padding_offset`` shorter than the row count R, R < 0.
"""

import numpy as np

__all__ = [
    "speculate_get_padding_offset",
    "speculate_get_seq_lens_output",
    "speculate_get_output_padding_offset",
    "pre_process",
    "rebuild_padding",
]

_INT32_MAX = np.iinfo(np.int32).max


def _flat(a):
    return np.asarray(a).reshape(-1)


def _count(op, arg, value):
    """A token count given as an int or a one-element integer array (read on the host)."""
    a = np.asarray(value)
    if a.size != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{op}: {arg} must hold exactly one integer, got {a.dtype}{list(a.shape)}")
    v = int(a.reshape(-1)[0])
    if not 0 <= v <= _INT32_MAX:
        raise ValueError(f"{op}: {arg} is {v}; it must be in [0, {_INT32_MAX}]")
    return v


def _check_layout(op, cum, lens, width, b, len_arg, cum_arg, width_name):
    """The shared layout check of §1.3: lens[b] >= 0, and request b's slot [start(b),
    start(b + 1)) holds its lens[b] items, start(b) = b * width - cum[b - 1]: cum[b] is at most
    cum[b - 1] + width - lens[b] (the inclusive prefix sum of width - lens when there is no gap;
    smaller values leave gaps between requests, which FastDeploy's own tests do)."""
    n = int(lens[b])
    if n < 0:
        raise ValueError(f"{op}: {len_arg} (request {b}) is {n}; counts must be >= 0")
    most = (0 if b == 0 else int(cum[b - 1])) + width - n
    if int(cum[b]) > most:
        raise ValueError(
            f"{op}: {cum_arg} (request {b}) is {int(cum[b])}; requests would overlap: it must be "
            f"at most {most} (the inclusive prefix sum of {width_name} - {len_arg} or less)"
        )


def _layout_end(cum, width, bsz):
    """One past the last packed index the layout reserves: bsz * width - cum[bsz - 1]."""
    return 0 if bsz == 0 else bsz * width - int(cum[bsz - 1])


# --------------------------------------------------------------------------------------------
# §5.1 speculate_get_padding_offset
# --------------------------------------------------------------------------------------------
def speculate_get_padding_offset(
    input_ids, draft_tokens, cum_offsets, token_num, seq_len, seq_lens_encoder
):
    """Pack the step's tokens (spec §5.1).

    Returns ``[x_remove_padding [T] int64, batch_id_per_token [T] int32, cu_seqlens_q [bsz+1] int32,
    cu_seqlens_k [bsz+1] int32]`` with ``bsz = seq_len.shape[0]``, ``T = token_num``. Token i of
    request b goes to packed index ``b * L_in - cum_excl[b] + i``; it is ``input_ids[b, i]`` when
    ``seq_lens_encoder[b] > 0`` (prefill) and ``draft_tokens[b, i]`` otherwise (decode);
    ``batch_id_per_token`` there is b. ``cu_seqlens_q[b + 1] = cu_seqlens_k[b + 1] = (b + 1) * L_in
    - cum_offsets[b]``; index 0 is 0.
    """
    op = "speculate_get_padding_offset"
    lens = _flat(seq_len)
    cum = _flat(cum_offsets)
    enc = _flat(seq_lens_encoder)
    bsz = lens.size
    l_in = input_ids.shape[1]
    kd = draft_tokens.shape[1]
    t = _count(op, "token_num", token_num)

    for b in range(bsz):
        _check_layout(op, cum, lens, l_in, b, "seq_len", "cum_offsets", "input_ids.shape[1]")
        n = int(lens[b])
        if enc[b] > 0 and n > l_in:
            raise ValueError(
                f"{op}: seq_len (request {b}) is {n} for a prefilling request but its "
                f"input_ids row has {l_in} columns"
            )
        if enc[b] <= 0 and n > kd:
            raise ValueError(
                f"{op}: seq_len (request {b}) is {n} for a decoding request but its "
                f"draft_tokens row has {kd} columns"
            )
    end = _layout_end(cum, l_in, bsz)
    if end > t:
        raise ValueError(f"{op}: token_num is {t} but the layout of cum_offsets ends at {end}")

    x = np.zeros(t, np.int64)
    batch_id = np.zeros(t, np.int32)
    cu_q = np.zeros(bsz + 1, np.int32)
    cu_k = np.zeros(bsz + 1, np.int32)
    if t == 0:
        return [x, batch_id, cu_q, cu_k]
    for b in range(bsz):
        ce = 0 if b == 0 else int(cum[b - 1])
        for i in range(int(lens[b])):
            batch_id[b * l_in - ce + i] = b
        cu_q[b + 1] = cu_k[b + 1] = (b + 1) * l_in - int(cum[b])
    for b in range(bsz):
        ce = 0 if b == 0 else int(cum[b - 1])
        for i in range(int(lens[b])):
            x[b * l_in - ce + i] = input_ids[b, i] if enc[b] > 0 else draft_tokens[b, i]
    return [x, batch_id, cu_q, cu_k]


# --------------------------------------------------------------------------------------------
# §5.2 speculate_get_seq_lens_output
# --------------------------------------------------------------------------------------------
def speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder):
    """Logits rows per request (spec §5.2). Returns ``seq_lens_output`` [bsz] int32 (an array, like the op,
    whose pybind form returns a one-element list that FastDeploy's import wrapper unwraps).

    ``this_time == 0`` -> 0; ``this_time == 1`` -> 1; ``seq_lens_encoder != 0`` -> 1 (a prefill chunk
    has one output row, its last token); otherwise ``this_time`` (a speculative decode verifies
    every token). ``bsz = seq_lens_this_time.shape[0]``; seq_lens_decoder is unused.
    """
    this_time = _flat(seq_lens_this_time)
    enc = _flat(seq_lens_encoder)
    out = np.zeros(this_time.size, np.int32)
    for b in range(this_time.size):
        if this_time[b] == 0:
            out[b] = 0
        elif this_time[b] == 1:
            out[b] = 1
        elif enc[b] != 0:
            out[b] = 1
        else:
            out[b] = this_time[b]
    return out


# --------------------------------------------------------------------------------------------
# §5.3 speculate_get_output_padding_offset
# --------------------------------------------------------------------------------------------
def speculate_get_output_padding_offset(
    output_cum_offsets_tmp, out_token_num, seq_lens_output, max_seq_len
):
    """Offsets of the packed logits rows (spec §5.3).

    Returns ``[output_padding_offset [To] int32, output_cum_offsets [bsz] int32]`` with ``bsz =
    output_cum_offsets_tmp.shape[0]``, ``To = out_token_num``: for each b, ``ce =
    output_cum_offsets_tmp[b - 1]`` (0 for b = 0), ``output_cum_offsets[b] = ce`` and
    ``output_padding_offset[b * max_seq_len - ce + i] = ce`` for i < seq_lens_output[b].
    """
    op = "speculate_get_output_padding_offset"
    cum = _flat(output_cum_offsets_tmp)
    lens = _flat(seq_lens_output)
    bsz = cum.size
    max_seq_len = int(max_seq_len)
    if max_seq_len < 1:
        raise ValueError(f"{op}: max_seq_len must be >= 1, got {max_seq_len}")
    to = _count(op, "out_token_num", out_token_num)
    for b in range(bsz):
        _check_layout(
            op,
            cum,
            lens,
            max_seq_len,
            b,
            "seq_lens_output",
            "output_cum_offsets_tmp",
            "max_seq_len",
        )
        if lens[b] > max_seq_len:
            raise ValueError(
                f"{op}: seq_lens_output (request {b}) is {int(lens[b])}; it must be <= "
                f"max_seq_len = {max_seq_len}"
            )
    end = _layout_end(cum, max_seq_len, bsz)
    if end > to:
        raise ValueError(
            f"{op}: out_token_num is {to} but the layout of output_cum_offsets_tmp ends at {end}"
        )

    padding = np.zeros(to, np.int32)
    out_cum = np.zeros(bsz, np.int32)
    for b in range(bsz):
        ce = 0 if b == 0 else int(cum[b - 1])
        out_cum[b] = ce
        for i in range(int(lens[b])):
            padding[b * max_seq_len - ce + i] = ce
    return [padding, out_cum]


# --------------------------------------------------------------------------------------------
# §5.3 pre_process (FastDeploy's Python glue)
# --------------------------------------------------------------------------------------------
def pre_process(
    input_ids,
    seq_lens_this_time,
    speculative_decoding,
    draft_tokens=None,
    seq_lens_encoder=None,
    seq_lens_decoder=None,
):
    """FastDeploy's ``pre_process`` (spec §5.3 glue) on numpy arrays.

    Returns ``(ids_remove_padding, batch_id_per_token, cu_seqlens_q, cu_seqlens_k,
    output_cum_offsets, output_padding_offset)``. Speculative: ``token_num = sum(this_time)``,
    ``cum_offsets = cumsum(L_in - this_time)``, §5.1, §5.2, ``cumsum(L_in - seq_lens_output)``, §5.3
    with ``max_seq_len = L_in``. Not speculative: every token comes from input_ids (passed as
    draft_tokens too, with seq_lens_this_time as seq_lens_encoder) and the two output tensors are None.
    """
    this_time = _flat(seq_lens_this_time)
    l_in = input_ids.shape[1]
    token_num = np.int64(this_time.astype(np.int64).sum())
    cum_offsets = np.cumsum(l_in - this_time.astype(np.int64)).astype(np.int32)
    if not speculative_decoding:
        ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
            input_ids, input_ids, cum_offsets, token_num, seq_lens_this_time, seq_lens_this_time
        )
        return ids, batch_id, cu_q, cu_k, None, None
    ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
        input_ids, draft_tokens, cum_offsets, token_num, seq_lens_this_time, seq_lens_encoder
    )
    seq_lens_output = speculate_get_seq_lens_output(
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder
    )
    out_token_num = np.int64(seq_lens_output.astype(np.int64).sum())
    out_cum_tmp = np.cumsum(l_in - seq_lens_output.astype(np.int64)).astype(np.int32)
    output_padding_offset, output_cum_offsets = speculate_get_output_padding_offset(
        out_cum_tmp, out_token_num, seq_lens_output, l_in
    )
    return ids, batch_id, cu_q, cu_k, output_cum_offsets, output_padding_offset


# --------------------------------------------------------------------------------------------
# §5.4 rebuild_padding
# --------------------------------------------------------------------------------------------
def rebuild_padding(
    tmp_out,
    cu_seqlens_q,
    seq_len_this_time,
    seq_lens_decoder,
    seq_lens_encoder,
    output_padding_offset,
    first_token_out,
    max_input_length,
    enable_logprob,
    *,
    use_output_padding_offset=None,
):
    """The hidden rows that get logits (spec §5.4). Returns a new array of tmp_out's dtype.

    ``tmp_out`` [T, H] (any dtype: a row copy; bfloat16 as uint16 bits), ``bsz =
    cu_seqlens_q.shape[0] - 1``. With ``output_padding_offset``: R = T - sum over b with enc > 0 of
    (enc - 1) rows; row r belongs to request ``b = p // max_input_length``, ``p = r +
    output_padding_offset[r]``. Without: one row per request (local index 0). A request with
    ``this_time == 0`` or ``dec == enc == 0`` gives a zero row; otherwise the row copies
    ``tmp_out[cu_seqlens_q[b] + local + (enc - 1 if enc > 0 else 0)]``.
    first_token_out and enable_logprob have no effect. ``use_output_padding_offset`` (keyword-only)
    selects the branch; None (the default) means ``output_padding_offset is not None``, as the op;
    True with ``output_padding_offset`` None is the speculative branch with no offsets.
    """
    op = "rebuild_padding"
    cu = _flat(cu_seqlens_q)
    this_time = _flat(seq_len_this_time)
    dec = _flat(seq_lens_decoder)
    enc = _flat(seq_lens_encoder)
    bsz = cu.size - 1
    t, h = tmp_out.shape
    if use_output_padding_offset is None:
        use_output_padding_offset = output_padding_offset is not None
    speculative = bool(use_output_padding_offset)
    if speculative:
        opo = (
            np.zeros(0, np.int32) if output_padding_offset is None else _flat(output_padding_offset)
        )
        max_input_length = int(max_input_length)
        rows = _speculative_rows(op, t, enc, bsz, opo, max_input_length)
    else:
        rows = bsz

    src = np.full(rows, -1, np.int64)
    for r in range(rows):
        if speculative:
            p = r + int(opo[r])
            b = p // max_input_length if p >= 0 else -1
            if not 0 <= b < bsz:
                raise ValueError(
                    f"{op}: output_padding_offset maps an output row to request {b} but "
                    f"the batch has {bsz} requests"
                )
            local = p - b * max_input_length
        else:
            b, local = r, 0
        if this_time[b] == 0 or (dec[b] == 0 and enc[b] == 0):
            continue
        s = int(enc[b]) - 1 if enc[b] > 0 else 0
        row = int(cu[b]) + local + s
        if not 0 <= row < t:
            raise ValueError(
                f"{op}: cu_seqlens_q (request {b}) with seq_lens_encoder selects tmp_out "
                f"row {row} but tmp_out has {t} rows"
            )
        src[r] = row

    out = np.zeros((rows, h), dtype=tmp_out.dtype)
    for r in range(rows):
        if src[r] >= 0:
            out[r] = tmp_out[src[r]]
    return out


def _speculative_rows(op, t, enc, bsz, opo, max_input_length) -> int:
    """rebuild_padding's output rows with output_padding_offset (``R = T - sum over prefills of
    (enc - 1)``), checked against max_input_length, tmp_out's T rows and the offsets' length."""
    if max_input_length < 1:
        raise ValueError(f"{op}: max_input_length must be >= 1, got {max_input_length}")
    rows = t - sum(int(enc[b]) - 1 for b in range(bsz) if enc[b] > 0)
    if rows < 0:
        raise ValueError(
            f"{op}: seq_lens_encoder sums to more prefill tokens than tmp_out has rows "
            f"({t}): the output would have {rows} rows"
        )
    if opo.size < rows:
        raise ValueError(
            f"{op}: output_padding_offset has {opo.size} entries but the output has R = {rows} rows"
        )
    return rows
