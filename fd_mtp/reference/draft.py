"""Numpy references of the draft-model (MTP) ops, written from the spec (spec/ops.md §6.1-6.6).

These are executable specs: one plain Python loop per request, in the order the spec describes,
with no attempt at speed. They mutate their arguments in place exactly as the ops do.

Conventions shared by every function here (spec §1.2):

* Per-request tensors may be ``[B]`` or ``[B, 1]``; the functions work on flat views
  (``_flat``), so every write lands in the caller's array.
* ``bsz`` is the length of the tensor the op takes its batch size from (stated per function);
  other per-request tensors may be longer and are only read/written below ``bsz``.
* Valid input is assumed (the C++ ops validate shapes and dtypes). In particular every computed
  column index lies inside its row; numpy would wrap a negative index where the kernel writes
  outside the row, so such inputs are outside the contract.
"""

import numpy as np

from ..schema import check_rules, get, resolve_kw, written_args
from ._arrays import _flat, _on_copies, _views

__all__ = [
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "draft_model_set_value_by_flags",
]


def _write_first_token(input_ids, b, enc, first, truncate_first_token):
    """Place the target's first token after the draft prompt; return the draft query length (§6.1).

    With truncation the draft prompt is the target prompt shifted left by one, so position
    ``enc - 1`` (the one left empty by the shift) receives the token; otherwise it is appended.
    """
    if truncate_first_token:
        input_ids[b, enc - 1] = first
        return enc
    input_ids[b, enc] = first
    return enc + 1


# §6.1 draft_model_preprocess ---------------------------------------------------------------------
def draft_model_preprocess(
    draft_tokens,
    input_ids,
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
    not_need_stop,
    is_block_step,
    batch_drop,
    pre_ids,
    mask_rollback,
    recompute_token_num,
    accept_tokens,
    accept_num,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    base_model_seq_lens_decoder,
    base_model_step_idx,
    base_model_stop_flags,
    base_model_is_block_step,
    base_model_draft_tokens,
    num_model_step,
    truncate_first_token,
    splitwise_prefill,
    kvcache_scheduler_v1,
):
    """Prepare the draft model's inputs from the target's verify result (spec §6.1). Returns None.

    ``bsz = seq_lens_this_time.size``. Draft tensors (written in place): draft_tokens [B, Dd] int64,
    input_ids [B, Li] int64, stop_flags, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder
    (int32), step_idx (int64), not_need_stop ([1] bool), is_block_step, batch_drop (bool),
    pre_ids [B, Lp] int64, mask_rollback, recompute_token_num (int32).
    Target tensors (read): accept_tokens [B, Wa] int64, accept_num int32,
    base_model_seq_lens_this_time, base_model_seq_lens_decoder (int32), base_model_step_idx (int64),
    base_model_stop_flags, base_model_is_block_step (bool); base_model_seq_lens_encoder is unused.
    base_model_draft_tokens [B, Db] int64 is written (mode B: columns 1.. reset to -1 for every b).

    Mode A (``splitwise_prefill``, PD prefill node): only prefill requests run.
    Mode B (normal): target-stopped or dropped requests stop; prefills get the target's first token;
    decodes rewind by ``recompute_token_num`` (or recover from a draft stop) and take the accepted
    tokens as input. ``not_need_stop[0]`` = "at least one request runs".

    ``base_model_seq_lens_this_time`` may be the very array passed as ``seq_lens_this_time``:
    request b's target values are read before request b is written.
    """
    s = _views(locals(), **_PREPROCESS_VIEWS)
    n_running = 0
    for b in range(s.this_time.size):
        if splitwise_prefill:  # Mode A
            n_running += _preprocess_prefill_node(s, b)
        else:
            n_running += _preprocess_request(s, b)
    _flat(not_need_stop)[0] = n_running > 0


_PREPROCESS_VIEWS = dict(
    stop="stop_flags",
    this_time="seq_lens_this_time",
    enc="seq_lens_encoder",
    dec="seq_lens_decoder",
    step="step_idx",
    block_step="is_block_step",
    drop="batch_drop",
    rollback="mask_rollback",
    recompute="recompute_token_num",
    n_accept="accept_num",
    base_this_time="base_model_seq_lens_this_time",
    base_dec="base_model_seq_lens_decoder",
    base_step="base_model_step_idx",
    base_stop="base_model_stop_flags",
    base_block_step="base_model_is_block_step",
)


def _stop_draft(s, b):
    s.stop[b] = True
    s.this_time[b] = s.dec[b] = s.enc[b] = 0


def _preprocess_prefill_node(s, b):
    """Mode A (PD prefill node): only prefill requests run. Returns 1 if request b runs."""
    if s.enc[b] > 0:
        s.stop[b] = False
        s.this_time[b] = _write_first_token(
            s.input_ids, b, int(s.enc[b]), int(s.accept_tokens[b, 0]), s.truncate_first_token
        )
        return 1
    _stop_draft(s, b)
    return 0


def _preprocess_request(s, b):
    """Mode B (normal) for request b. Returns 1 if it runs."""
    # Target values of request b, read before any write to request b (aliasing, see docstring).
    b_this_time, b_dec, b_step = int(s.base_this_time[b]), int(s.base_dec[b]), int(s.base_step[b])
    b_stop, b_block_step = bool(s.base_stop[b]), bool(s.base_block_step[b])

    # Step 1: the target's draft row keeps only column 0, for every request.
    s.base_model_draft_tokens[b, 1:] = -1

    # Step 2: a block-stepped target request stops the draft too.
    if b_stop and b_block_step:
        s.stop[b] = True
        if s.kvcache_scheduler_v1:
            s.block_step[b] = True
        else:
            s.drop[b] = True

    # Step 3.
    if b_stop or s.drop[b]:
        _stop_draft(s, b)
        return 0

    if s.enc[b] > 0:  # prefill
        s.stop[b] = False
        first = int(s.accept_tokens[b, 0])
        s.pre_ids[b, 0] = first
        s.this_time[b] = _write_first_token(
            s.input_ids, b, int(s.enc[b]), first, s.truncate_first_token
        )
        return 1
    # decode
    if s.kvcache_scheduler_v1 and not b_block_step and s.block_step[b]:
        s.block_step[b] = False
    if s.stop[b]:
        # The draft stopped (e.g. it proposed EOS) while the target went on: resync with
        # the target, subtracting the target's query length (not accept_num, §14.5).
        s.stop[b] = False
        s.dec[b] = b_dec - b_this_time
        s.step[b] = b_step - b_this_time
    else:
        r = int(s.recompute[b])
        s.dec[b] -= r
        s.step[b] -= r
        s.rollback[b] += r
        s.recompute[b] = s.num_model_step - 1
    a = int(s.n_accept[b])
    for i in range(a):
        token = int(s.accept_tokens[b, i])
        s.draft_tokens[b, i] = token
        s.pre_ids[b, b_step - a + i] = token
    s.this_time[b] = a
    return 1


# §6.2 eagle_get_hidden_states --------------------------------------------------------------------
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
):
    """Gather the target hidden rows the draft consumes this step (spec §6.2). Returns [Tout, H].

    ``input`` [Tin, H] is the target's packed output (any dtype: a pure row gather).
    Reads (draft, after preprocess) seq_lens_this_time and seq_lens_encoder, (target) accept_nums and
    base_model_seq_lens_this_time; ``bsz = seq_lens_this_time.size``. seq_lens_decoder, stop_flags,
    base_model_seq_lens_encoder and actual_draft_token_num are unused. Writes nothing.

    Per request, in order, over the target's rows: a draft prefill takes its ``enc`` rows; a request
    the target ran but the draft does not skips the target's rows; a decode takes the first
    ``accept_nums[b]`` rows of the target's ``base_this_time[b]`` and skips the rest.
    """
    this_time = _flat(seq_lens_this_time)
    enc = _flat(seq_lens_encoder)
    n_accept = _flat(accept_nums)
    base_this_time = _flat(base_model_seq_lens_this_time)
    bsz = this_time.size

    spans = []  # (first input row, count) copied in order to the output rows
    row = 0  # next unread input row
    for b in range(bsz):
        if enc[b] > 0:
            spans.append((row, int(enc[b])))
            row += int(enc[b])
        elif base_this_time[b] != 0 and this_time[b] == 0:
            row += int(base_this_time[b])
        elif base_this_time[b] == 0 and this_time[b] == 0:
            pass
        else:
            spans.append((row, int(n_accept[b])))
            row += int(base_this_time[b])
    # Checked before any index list is built (counts may be huge).
    if row > input.shape[0] or any(count > input.shape[0] for _, count in spans):
        raise ValueError(
            f"eagle_get_hidden_states: input has {input.shape[0]} rows but the requests read {row}"
        )
    src = [r for first, count in spans for r in range(first, first + max(count, 0))]
    return input[np.asarray(src, dtype=np.intp)]


# §6.3 draft_model_update -------------------------------------------------------------------------
def draft_model_update(
    inter_next_tokens,
    draft_tokens,
    pre_ids,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
    output_cum_offsets,
    stop_flags,
    not_need_stop,
    max_dec_len,
    end_ids,
    base_model_draft_tokens,
    max_seq_len,
    substep,
    *,
    prefill_one_step_stop=None,
):
    """Record the draft token of one substep and advance the draft state (spec §6.3). Returns None.

    ``bsz = seq_lens_this_time.size``. Reads inter_next_tokens (flat int64, one token per output
    row), output_cum_offsets int32, max_dec_len int64, end_ids int64 (any shape, flattened).
    Writes in place: draft_tokens [B, Dd], pre_ids [B, Lp], seq_lens_this_time, seq_lens_encoder,
    seq_lens_decoder, step_idx, stop_flags, not_need_stop[0], and column ``substep + 1`` of
    base_model_draft_tokens [B, Db] (the target's draft row).

    Request b's output rows start at ``b * max_seq_len - output_cum_offsets[b]``; a decode takes the
    token of its last row, a prefill (or enc == dec == 0) the token of its first row.
    A proposed EOS stays in the draft row and stops the request. On ``step_idx >= max_dec_len`` the
    request stops and end_ids[0] is written at ``draft_tokens[b, q - 1]`` (q = query length at
    entry; index q - 1, not 0: upstream behaviour, §14.13) and at the target's draft column.
    A request stopped at entry gets -1 in both places.
    ``prefill_one_step_stop`` (upstream env PREFILL_NODE_ONE_STEP_STOP) stops every running request.
    ``not_need_stop[0]`` = fewer than bsz requests stopped (entry-stopped ones included).
    ``prefill_one_step_stop=None`` reads the variable, as the op does (`fd_mtp.schema.resolve_kw`).
    """
    prefill_one_step_stop = resolve_kw(
        "draft_model_update", "prefill_one_step_stop", prefill_one_step_stop
    )
    s = _views(locals(), **_UPDATE_VIEWS)
    s.next_tokens = inter_next_tokens.reshape(-1)
    s.eos = [int(t) for t in end_ids.reshape(-1)]
    bsz = s.this_time.size
    _check_update_fits_int32(s)
    n_stopped = sum(_update_request(s, b, substep + 1) for b in range(bsz))
    _flat(not_need_stop)[0] = n_stopped < bsz


_UPDATE_VIEWS = dict(
    this_time="seq_lens_this_time",
    enc="seq_lens_encoder",
    dec="seq_lens_decoder",
    step="step_idx",
    out_cum="output_cum_offsets",
    stop="stop_flags",
    max_len="max_dec_len",
)


def _check_update_fits_int32(s):
    """The op's check pass: the new seq_lens_decoder must fit in int32."""
    for b in range(s.this_time.size):
        d, e = int(s.dec[b]), int(s.enc[b])
        new_dec = d + (int(s.this_time[b]) if d > 0 and e <= 0 else e)
        if not s.stop[b] and new_dec > 2**31 - 1:
            raise ValueError(
                f"draft_model_update: seq_lens_decoder (request {b}) would become {new_dec}, "
                f"past the int32 range (at most {2**31 - 1})"
            )


def _update_request(s, b, column):
    """Request b's substep: record its token in the draft row and the target's draft ``column``,
    advance or stop it. Returns 1 if it is stopped (at entry or now)."""
    q, e, d = int(s.this_time[b]), int(s.enc[b]), int(s.dec[b])
    start = b * s.max_seq_len - int(s.out_cum[b])
    n_stopped = 0
    if s.stop[b]:
        s.draft_tokens[b, 0] = -1
        s.base_model_draft_tokens[b, column] = -1
        n_stopped = 1
    else:
        if d > 0 and e <= 0:  # decode
            token = int(s.next_tokens[start + q - 1])
            s.dec[b] = d + q
            s.step[b] += q
            s.pre_ids[b, int(s.step[b])] = token
        else:  # prefill (or the odd dec == enc == 0 case)
            token = int(s.next_tokens[start])
            s.dec[b] = e + d
            s.enc[b] = 0
            s.pre_ids[b, 1] = token
            s.step[b] += 1
        s.draft_tokens[b, 0] = token
        s.base_model_draft_tokens[b, column] = token

        if token in s.eos or s.prefill_one_step_stop:
            s.stop[b] = True
            n_stopped = 1
        elif s.step[b] >= s.max_len[b]:
            s.stop[b] = True
            if q - 1 < s.draft_tokens.shape[1]:  # upstream writes past the row; we skip it
                s.draft_tokens[b, q - 1] = s.eos[0]
            s.base_model_draft_tokens[b, column] = s.eos[0]
            n_stopped = 1

    if s.stop[b]:
        s.this_time[b] = 0
        s.enc[b] = 0
    else:
        s.this_time[b] = 1
    return n_stopped


# §6.4 eagle_get_self_hidden_states ---------------------------------------------------------------
def eagle_get_self_hidden_states(input, last_seq_lens_this_time, seq_lens_this_time, step_idx):
    """Pick the draft's own hidden row per running request for the next substep (spec §6.4).

    ``input`` [Tin, H] is the draft hidden of this substep (after rebuild_padding: one row per
    prefill, q rows per decode). Reads last_seq_lens_this_time (query length before the substep),
    seq_lens_this_time and step_idx (after draft_model_update); ``bsz = seq_lens_this_time.size``.
    Returns a new [Tout, H] array (same dtype), one row per request with ``this_time > 0``.
    Writes nothing.

    ``step_idx == 1`` is taken to mean "came from prefill" (one row); a decode request whose
    step_idx happens to be 1 is therefore read as one row too (upstream quirk, kept).
    """
    last = _flat(last_seq_lens_this_time)
    this_time = _flat(seq_lens_this_time)
    step = _flat(step_idx)
    bsz = this_time.size

    src = []
    row = 0  # input rows consumed so far
    for b in range(bsz):
        q = int(this_time[b])
        q_last = int(last[b])
        if step[b] == 1 and q > 0:  # came from prefill: a single row
            row += 1
            src.append(row - 1)
        elif q > 0:  # decode: the request's last row
            row += q_last
            src.append(row - 1)
        elif step[b] == 1:  # stopped, after a prefill
            row += 1 if q_last > 0 else 0
        else:  # stopped
            row += q_last
    return input[np.asarray(src, dtype=np.intp)]


# §6.5 draft_model_postprocess --------------------------------------------------------------------
def draft_model_postprocess(
    base_model_draft_tokens,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    base_model_stop_flags,
):
    """Set the target's next query length from its draft row (spec §6.5). Returns None.

    ``bsz = base_model_seq_lens_this_time.size``. Reads base_model_draft_tokens [B, Db],
    base_model_seq_lens_encoder, base_model_stop_flags; writes base_model_seq_lens_this_time:
    a running decode gets the number of entries != -1 in its whole draft row (not just a prefix),
    a stopped request 0, a running prefill keeps its value.
    """
    this_time = _flat(base_model_seq_lens_this_time)
    enc = _flat(base_model_seq_lens_encoder)
    stop = _flat(base_model_stop_flags)
    for b in range(this_time.size):
        if stop[b]:
            this_time[b] = 0
        elif enc[b] == 0:
            this_time[b] = int(np.count_nonzero(base_model_draft_tokens[b] != -1))


# §6.6 mtp_step_paddle ----------------------------------------------------------------------------
def mtp_step_paddle(
    base_model_stop_flags,
    stop_flags,
    batch_drop,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    used_list_len,
    free_list,
    free_list_len,
    block_size,
    max_draft_tokens,
):
    """The draft model's v0 decode-block manager (spec §6.6). Returns None.

    ``bsz = seq_lens_this_time.size``. Reads base_model_stop_flags and seq_lens_decoder (for the
    slot ``(dec + max_draft_tokens + 1) // block_size``); seq_lens_encoder is unused. Writes in place:
    stop_flags, batch_drop, seq_lens_this_time, seq_lens_decoder, block_tables [bsz, NB] int32,
    encoder_block_lens, used_list_len, free_list [n] int32, free_list_len [1] int32.

    1. Free: requests stopped by the target or dropped give their decode blocks back.
    2. Need: running requests whose next slot is still -1 need one block.
    3. Preempt while short: drop the request holding most decode blocks (ties: lowest b).
    4. Allocate: pop a block from the end of the free list for each listed, undropped request.

    Deterministic where upstream is not: blocks are appended to the free list request by request
    (b ascending, a request's blocks in table order) and the need list is in b order.
    Where upstream misbehaves this raises instead, leaving every argument unchanged:
    ValueError when no request can be preempted while short (upstream spins forever), ValueError
    when an append would run past the end of free_list.
    """
    # the schema's Check rule on free_list (the binding's and fd_mtp.cuda's too)
    attrs = {"block_size": block_size, "max_draft_tokens": max_draft_tokens}
    check_rules(get("mtp_step_paddle"), attrs, {}, {"free_list": np.shape(free_list)})
    # Run on copies and write back only on success, so an error leaves the arguments unchanged.
    _on_copies(
        locals(),
        _MTP_STEP_WRITTEN,
        lambda work: _mtp_step_phases(
            _flat(base_model_stop_flags), work, block_size, max_draft_tokens
        ),
    )


_MTP_STEP_WRITTEN = written_args("mtp_step_paddle")  # from the schema


def _mtp_step_phases(base_stop, w, block_size, max_draft_tokens):
    s = _views(
        w,
        stop="stop_flags",
        drop="batch_drop",
        this_time="seq_lens_this_time",
        dec="seq_lens_decoder",
        enc_blocks="encoder_block_lens",
        used="used_list_len",
        free_len="free_list_len",
    )
    s.base_stop, s.block_size, s.k = base_stop, block_size, max_draft_tokens
    bsz = s.this_time.size
    # A running request's next block slot needs seq_lens_decoder >= 0 (the kernel's check pass).
    for b in range(bsz):
        if not (base_stop[b] or s.drop[b]) and int(s.dec[b]) < 0:
            raise ValueError(
                f"mtp_step_paddle: seq_lens_decoder (request {b}) is {int(s.dec[b])} for a running "
                "request; it must be >= 0"
            )

    # Phase 1: free the decode blocks of requests the target stopped or the draft dropped.
    for b in range(bsz):
        if (base_stop[b] or s.drop[b]) and s.used[b] > 0:
            _mtp_give_back_decode_blocks(s, b)
            s.enc_blocks[b] = 0

    # Phase 2: running requests whose next slot has no block yet.
    need = [
        b
        for b in range(bsz)
        if not base_stop[b]
        and not s.drop[b]
        and _mtp_next_slot(s, b) < s.block_tables.shape[1]
        and s.block_tables[b, _mtp_next_slot(s, b)] == -1
    ]
    _mtp_preempt(s, need)

    # Phase 4: allocate from the end of the free list.
    for b in need:
        if s.drop[b]:
            continue
        s.used[b] += 1
        s.free_len[0] -= 1
        s.block_tables[b, _mtp_next_slot(s, b)] = s.free_list[int(s.free_len[0])]


def _mtp_next_slot(s, b):
    return (int(s.dec[b]) + s.k + 1) // s.block_size


def _mtp_give_back_decode_blocks(s, b):
    first, n, top = int(s.enc_blocks[b]), int(s.used[b]), int(s.free_len[0])
    if top + n > s.free_list.size:
        raise ValueError(
            f"mtp_step_paddle: free_list (size {s.free_list.size}) cannot take back {n} blocks of "
            f"request {b} at free_list_len {top}"
        )
    for i in range(n):
        s.free_list[top + i] = s.block_tables[b, first + i]
        s.block_tables[b, first + i] = -1
    s.free_len[0] = top + n
    s.used[b] = 0


def _mtp_preempt(s, need):
    """Phase 3: preempt while short. The need list is not shortened (dropped requests are skipped
    in phase 4), so this may drop more requests than strictly necessary, as upstream does."""
    while len(need) > s.free_len[0]:
        held = [0 if s.base_stop[b] else int(s.used[b]) for b in range(s.this_time.size)]
        victim = int(np.argmax(held))  # first maximum: ties go to the lowest b
        if held[victim] <= 0:
            raise ValueError(
                f"mtp_step_paddle: {len(need)} requests need a block, free_list has "
                f"{int(s.free_len[0])} and no request holds decode blocks to preempt "
                "(upstream would loop forever)"
            )
        _mtp_give_back_decode_blocks(s, victim)
        s.stop[victim] = True
        s.drop[victim] = True
        s.this_time[victim] = 0
        s.dec[victim] = 0


# §6.9 draft_model_set_value_by_flags -------------------------------------------------------------
def draft_model_set_value_by_flags(
    draft_tokens,
    pre_ids_all,
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
):
    """Writes each running request's tokens into pre_ids_all, then seq_lens_this_time = 1
    (spec §6.9). Every request is checked before anything is written."""
    op = "draft_model_set_value_by_flags"
    this_time = _flat(seq_lens_this_time)
    stop, step = _flat(stop_flags), _flat(step_idx)
    cols, width = draft_tokens.shape[1], pre_ids_all.shape[1]
    running = [b for b in range(this_time.size) if this_time[b] != 0 and not stop[b]]
    for b in running:
        n, s = int(this_time[b]), int(step[b])
        if s > 1 and n > 0:
            if n > cols:
                raise ValueError(
                    f"{op}: draft_tokens (request {b}) row is read up to column {n} "
                    f"(seq_lens_this_time) but has {cols} columns"
                )
            for column in (s, s - n + 1):
                if not 0 <= column < width:
                    raise ValueError(
                        f"{op}: pre_ids_all (request {b}) column {column} would be written but "
                        f"the row has {width} columns"
                    )
        elif s == 1 and width < 2:
            raise ValueError(
                f"{op}: pre_ids_all (request {b}) column 1 would be written but the row has "
                f"{width} columns"
            )
    for b in running:
        n, s = int(this_time[b]), int(step[b])
        if s > 1:
            for i in range(n):
                pre_ids_all[b, s - i] = draft_tokens[b, n - 1 - i]
        elif s == 1:
            pre_ids_all[b, 1] = draft_tokens[b, 0]
        this_time[b] = 1
