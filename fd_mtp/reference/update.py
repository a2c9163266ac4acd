"""Numpy references of the target-side update ops, written from the spec (spec/ops.md §5.8, §5.10,
§5.12, §5.16): the ops of one engine step after verify (§4.1 step 6).

One plain Python loop per request, in the order the spec describes; the functions mutate their
arguments in place exactly as the ops do. Per-request tensors may be ``[B]`` or ``[B, 1]`` (flat
views are used, so writes land in the caller's arrays). Bad data raise ValueError naming the
argument, before anything is written, like the ops.
"""

import numpy as np

from ..schema import check_rules, expr_value, get

__all__ = [
    "speculate_set_stop_value_multi_seqs",
    "speculate_update",
    "speculate_set_value_by_flags_and_idx",
    "speculate_clear_accept_nums",
    "speculate_calcu_accept_ratio",
    "speculate_limit_thinking_content_length",
    "speculate_update_input_ids_cpu",
]


def _flat(a):
    """A flat view of ``a``; writes through it land in ``a``."""
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _fail(op, arg, request, msg):
    raise ValueError(f"{op}: {arg} (request {request}) {msg}")


# --------------------------------------------------------------------------------------------
# §5.8 speculate_set_stop_value_multi_seqs
# --------------------------------------------------------------------------------------------
def _stop_seq_matches(accept_tokens, pre_ids, seq, length, b, a, t, idx):
    """Spec §5.8: does the stop sequence (``seq[:length]``) end just before accepted token idx?"""
    for k in range(length - 1, -1, -1):
        d = length - 1 - k
        if d < idx:
            token = accept_tokens[b, idx - 1 - d]
        else:
            j = t - a + idx - d
            if j <= 0:  # upstream: a pre_ids index <= 0 fails the comparison
                return False
            token = pre_ids[b, j]
        if token != seq[k]:
            return False
    return True


def speculate_set_stop_value_multi_seqs(
    accept_tokens,
    accept_num,
    pre_ids,
    step_idx,
    stop_flags,
    seq_lens,
    stop_seqs,
    stop_seqs_len,
    end_ids,
):
    """Stop requests whose output completes a stop sequence (spec §5.8). Returns None.

    ``bs = accept_tokens.shape[0]``. Writes accept_tokens [bs, Wa], accept_num and stop_flags;
    reads pre_ids [bs, Lp] (target convention), step_idx (already advanced by verify),
    stop_seqs [bs, S, Ls] with stop_seqs_len [bs, S], or stop_seqs [bs, Ls] with stop_seqs_len
    [bs] (one stop sequence per request), end_ids (end_ids[0]); seq_lens is unused.

    For a running request with ``a = accept_num``, ``t = step_idx`` and each stop sequence of
    length ``len > 0``, candidate idx = 0 .. a-1 (skipped when ``t - a + idx + 1 < len``) is a hit
    when the sequence ends just before accept_tokens[idx]: compared backwards, its tokens come from
    accept_tokens[idx-1], accept_tokens[idx-2], ... and then pre_ids[t - a], pre_ids[t - a - 1], ...;
    a pre_ids index <= 0 fails the comparison. On a hit: accept_num = idx + 1,
    accept_tokens[idx] = end_ids[0], stop_flags = True. A sequence completed by the last accepted
    token is only seen next step (as idx 0).

    Deterministic choice (upstream races between the stop sequences of one request): the earliest
    hit idx over all the request's stop sequences wins.

    Checked for running requests: accept_num in [0, Wa], every stop_seqs_len in [0, Ls], and
    pre_ids column ``t - a`` inside the row whenever a compared candidate can read pre_ids.
    """
    op = "speculate_set_stop_value_multi_seqs"
    n_accept = _flat(accept_num)
    step = _flat(step_idx)
    stop = _flat(stop_flags)
    bs, wa = accept_tokens.shape
    # [bs, S, Ls] with [bs, S], or [bs, Ls] with [bs]: one stop sequence per request (the
    # schema's Check rules and computed Params fields, as the binding and fd_mtp.cuda use them)
    schema_op = get(op)
    shapes = {"stop_seqs": stop_seqs.shape, "stop_seqs_len": stop_seqs_len.shape}
    check_rules(schema_op, {}, {"B": bs}, shapes)
    n_seqs = expr_value(schema_op.extra_params["num_stop_seqs"], {}, {}, shapes)
    ls = expr_value(schema_op.extra_params["stop_seq_cols"], {}, {}, shapes)
    stop_seqs = stop_seqs.reshape(stop_seqs.shape[0], n_seqs, ls)
    stop_seqs_len = stop_seqs_len.reshape(stop_seqs_len.shape[0], n_seqs)
    lp = pre_ids.shape[1]
    eos = int(end_ids.reshape(-1)[0])

    for b in range(bs):  # checks first: nothing is written on bad input
        if not stop[b]:
            _check_stop_request(op, b, int(n_accept[b]), int(step[b]), wa, lp, stop_seqs_len[b], ls)

    for b in range(bs):
        if stop[b]:
            continue
        a, t = int(n_accept[b]), int(step[b])
        hits = []
        for s in range(n_seqs):
            length = int(stop_seqs_len[b, s])
            if length <= 0:
                continue
            for idx in _candidates(a, t, length):  # first hit of this stop sequence
                if _stop_seq_matches(accept_tokens, pre_ids, stop_seqs[b, s], length, b, a, t, idx):
                    hits.append(idx)
                    break
        if hits:
            idx = min(hits)
            n_accept[b] = idx + 1
            accept_tokens[b, idx] = eos
            stop[b] = True


def _candidates(a, t, length):
    """Candidate idx values compared for a stop sequence of this length (spec §5.8), with
    ``a = accept_num`` and ``t = step_idx``."""
    return [idx for idx in range(a) if t - a + idx + 1 >= length]


def _check_stop_request(op, b, a, t, wa, lp, lengths, ls):
    """The checks of running request b (``a = accept_num``, ``t = step_idx``, ``lengths`` its
    stop_seqs_len row): accept_num in [0, Wa], every length in [0, Ls], and the pre_ids column
    ``t - a`` inside the row whenever a compared candidate reads pre_ids."""
    if not 0 <= a <= wa:
        _fail(op, "accept_num", b, f"is {a}; it must be in [0, {wa}] (columns of accept_tokens)")
    reads_pre_ids = False
    for length in (int(v) for v in lengths):
        if not 0 <= length <= ls:
            _fail(
                op,
                "stop_seqs_len",
                b,
                f"is {length}; it must be in [0, {ls}] (Ls, the last dim of stop_seqs)",
            )
        # Candidate idx reads pre_ids (down from column t - a) when the sequence is longer than idx.
        reads_pre_ids |= any(idx <= length - 1 for idx in _candidates(a, t, length))
    if reads_pre_ids and t - a >= lp:
        _fail(
            op,
            "pre_ids",
            b,
            f"column {t - a} (step_idx - accept_num) is compared but the row has {lp} columns",
        )


# --------------------------------------------------------------------------------------------
# §5.10 speculate_update
# --------------------------------------------------------------------------------------------
def speculate_update(
    seq_lens_encoder,
    seq_lens_decoder,
    not_need_stop,
    draft_tokens,
    actual_draft_token_nums,
    accept_tokens,
    accept_num,
    stop_flags,
    seq_lens_this_time,
    is_block_step,
    stop_nums,
    mask_rollback,
):
    """Advance the target's lengths by what verify accepted (spec §5.10). Returns None.

    ``real_bsz = seq_lens_this_time.size``, ``max_bsz = stop_flags.size``, ``D = draft_tokens.shape[1]``.
    Writes seq_lens_encoder, seq_lens_decoder, not_need_stop[0], draft_tokens[:, 0],
    actual_draft_token_nums and mask_rollback; reads accept_tokens [B, Wa], accept_num, stop_flags,
    seq_lens_this_time, is_block_step and stop_nums[0].

    For b < real_bsz not block-stepped, with ``a = accept_num[b]`` and the entry values of enc and
    this_time: (1) stopped -> counts as stopped, mask_rollback 0; else enc == 0 -> dec += a,
    mask_rollback = this_time - a; else mask_rollback 0. (2) this_time > 1 and enc == 0 (stopped
    too): n = actual[b]; a - 1 == n -> actual = n + 2 if n + 2 <= D - 1, else n + 1 if
    n + 1 <= D - 1, else D - 1; otherwise actual = max(n - 1, 1). (3) enc != 0 -> dec += enc,
    enc = 0. (4) draft_tokens[b, 0] = accept_tokens[b, a - 1] (stopped too).
    Slots in [real_bsz, max_bsz) count as stopped; block-stepped requests are untouched and count 0.
    ``not_need_stop[0] = stopped count < stop_nums[0]``.

    Deliberate differences from upstream: a == 0 leaves draft_tokens[b, 0] unchanged (upstream
    reads the element before the row); accept_tokens is read with its own row width (upstream uses
    D; the same on FastDeploy's inputs). Checked: accept_num in [0, Wa] where it is read.
    """
    op = "speculate_update"
    enc = _flat(seq_lens_encoder)
    dec = _flat(seq_lens_decoder)
    actual = _flat(actual_draft_token_nums)
    n_accept = _flat(accept_num)
    stop = _flat(stop_flags)
    this_time = _flat(seq_lens_this_time)
    block_step = _flat(is_block_step)
    rollback = _flat(mask_rollback)
    real_bsz, max_bsz = this_time.size, stop.size
    cap = draft_tokens.shape[1] - 1
    wa = accept_tokens.shape[1]

    for b in range(real_bsz):  # checks first: nothing is written on bad input
        if not block_step[b]:
            _check_update_request(op, b, int(n_accept[b]), wa, stop[b], int(enc[b]), this_time[b])

    n_stopped = max_bsz - real_bsz
    for b in range(real_bsz):
        if block_step[b]:
            continue
        a = int(n_accept[b])
        e = int(enc[b])
        q = int(this_time[b])
        if stop[b]:
            n_stopped += 1
            rollback[b] = 0
        elif e == 0:
            dec[b] += a
            rollback[b] = q - a
        else:
            rollback[b] = 0
        if q > 1 and e == 0:
            n = int(actual[b])
            if a - 1 == n:
                actual[b] = n + 2 if n + 2 <= cap else (n + 1 if n + 1 <= cap else cap)
            else:
                actual[b] = max(n - 1, 1)
        if e != 0:
            dec[b] += e
            enc[b] = 0
        if a > 0:
            draft_tokens[b, 0] = accept_tokens[b, a - 1]

    _flat(not_need_stop)[0] = n_stopped < int(np.asarray(stop_nums).reshape(-1)[0])


def _check_update_request(op, b, a, wa, stopped, enc, this_time):
    """speculate_update's checks of request b (not block-stepped): accept_num in [0, Wa]; a running
    decode request's seq_lens_this_time >= 0."""
    if not 0 <= a <= wa:
        _fail(op, "accept_num", b, f"is {a}; it must be in [0, {wa}] (columns of accept_tokens)")
    if not stopped and enc == 0 and int(this_time) < 0:
        _fail(
            op,
            "seq_lens_this_time",
            b,
            f"is {int(this_time)} for a running decode request; it must be >= 0",
        )


# --------------------------------------------------------------------------------------------
# §5.12 speculate_set_value_by_flags_and_idx
# --------------------------------------------------------------------------------------------
def speculate_set_value_by_flags_and_idx(
    pre_ids_all,
    accept_tokens,
    accept_num,
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
):
    """Append the accepted tokens to the target's history (spec §5.12). Returns None.

    ``bs = seq_lens_this_time.size``. For b < bs: a stopped request gets accept_num = 0 and
    seq_lens_decoder = 0. A running one with dec != 0 or enc != 0 and step_idx > 0 writes
    ``pre_ids_all[b, step_idx - i] = accept_tokens[b, accept_num - 1 - i]`` for i < accept_num,
    i.e. the accepted tokens land at columns step_idx - accept_num + 1 .. step_idx.

    Checked where pre_ids is written: accept_num in [0, Wa] and every written column in [0, Lp).
    """
    op = "speculate_set_value_by_flags_and_idx"
    n_accept = _flat(accept_num)
    stop = _flat(stop_flags)
    enc = _flat(seq_lens_encoder)
    dec = _flat(seq_lens_decoder)
    step = _flat(step_idx)
    bs = _flat(seq_lens_this_time).size
    lp, wa = pre_ids_all.shape[1], accept_tokens.shape[1]

    def writes(b):
        return not stop[b] and not (dec[b] == 0 and enc[b] == 0) and step[b] > 0

    for b in range(bs):
        if not writes(b):
            continue
        a, t = int(n_accept[b]), int(step[b])
        if not 0 <= a <= wa:
            _fail(
                op, "accept_num", b, f"is {a}; it must be in [0, {wa}] (columns of accept_tokens)"
            )
        if a > 0 and (t >= lp or t - a + 1 < 0):
            col = t if t >= lp else t - a + 1
            _fail(
                op,
                "pre_ids_all",
                b,
                f"accepted tokens go to column {col} (from step_idx and accept_num) "
                f"but the row has {lp} columns",
            )

    for b in range(bs):
        if stop[b]:
            n_accept[b] = 0
            dec[b] = 0
        elif writes(b):
            a, t = int(n_accept[b]), int(step[b])
            for i in range(a):
                pre_ids_all[b, t - i] = accept_tokens[b, a - 1 - i]


# --------------------------------------------------------------------------------------------
# §5.16 speculate_clear_accept_nums
# --------------------------------------------------------------------------------------------
def speculate_clear_accept_nums(accept_num, seq_lens_decoder):
    """accept_num[b] = 0 where seq_lens_decoder[b] == 0, for b < seq_lens_decoder.size (spec §5.16)."""
    n_accept = _flat(accept_num)
    dec = _flat(seq_lens_decoder)
    for b in range(dec.size):
        if dec[b] == 0:
            n_accept[b] = 0


_INT32 = (-(2**31), 2**31 - 1)


def speculate_calcu_accept_ratio(
    sum_draft_num, sum_accept_num, accept_nums, seq_lens_this_time, seq_lens_decoder, stop_flags
):
    """Adds the step's drafted / accepted counts to the running totals (spec §5.16)."""
    this_time = _flat(seq_lens_this_time).astype(np.int64)
    dec = _flat(seq_lens_decoder).astype(np.int64)
    acc = _flat(accept_nums).astype(np.int64)
    stop = _flat(stop_flags)
    drafted = accepted = 0
    for b in range(this_time.size):
        if dec[b] > 0 and this_time[b] != dec[b]:
            drafted += int(this_time[b]) - 1
            accepted += int(acc[b]) - 1
        elif this_time[b] > 0 and stop[b]:
            drafted += int(this_time[b]) - 1
            accepted += int(acc[b])
    if drafted == 0:
        return
    totals = _flat(sum_draft_num), _flat(sum_accept_num)
    new = int(totals[0][0]) + drafted, int(totals[1][0]) + accepted
    for name, value in zip(("sum_draft_num", "sum_accept_num"), new):
        if not _INT32[0] <= value <= _INT32[1]:
            raise ValueError(
                f"speculate_calcu_accept_ratio: {name} would become {value}, outside int32 "
                f"(limit {_INT32[1]})"
            )
    totals[0][0], totals[1][0] = new


# --------------------------------------------------------------------------------------------
# §5.9 speculate_limit_thinking_content_length
# --------------------------------------------------------------------------------------------
def _limit_thinking_request(
    tokens, a, step, status, max_think, max_reply, eos, inject, think_end, decode_node
):
    """One request's state machine (spec §5.9) on its ``a`` tokens (a list, replaced in place).
    Returns (status, max_reply, accepted)."""
    j = len(inject)
    done = j + 1 if j > 0 else 1
    reply_base = done + 1
    status = max(status, 0)
    base_step = step - a + 1
    for o in range(a):
        token = tokens[o]
        previous = status
        truncate = False
        if status == 0 and token == think_end:
            status = done
            if max_reply >= 0:
                max_reply += 2
        if max_think >= 0 and status < reply_base:
            if max_think > 0:
                if status == 0 and base_step + o - 1 == max_think:
                    status = 1 if j > 0 else done
            elif status == 0:
                if not decode_node:
                    status = 1 if j > 0 else done
                else:
                    status = 2 if j > 0 else done + 1
            if status == 0 and j > 0 and token in eos:
                status = 1
            if j > 0 and 1 <= status <= j:
                token = inject[status - 1]
                status = min(status + 1, done)
                truncate = True
        became_done = status == done and previous != done and previous < reply_base
        if max_reply >= 0 and not became_done:
            if status == done:
                status = reply_base
            if status >= reply_base:
                if status - reply_base >= max_reply:
                    if eos:
                        token = eos[0]
                    status = reply_base + max_reply
                    truncate = True
                else:
                    status += 1
        tokens[o] = token
        if truncate:
            return status, max_reply, o + 1
    return status, max_reply, a


def speculate_limit_thinking_content_length(
    next_tokens,
    max_think_lens,
    max_reply_lens,
    step_idx,
    limit_status,
    accept_num,
    stop_flags,
    eos_token_ids,
    inject_token_ids,
    think_end_id,
    splitwise_role_is_decode,
):
    """Thinking / reply budgets of reasoning models on this step's tokens (spec §5.9). Every
    running request is checked (accept_num within the row, the state within int32) before
    anything is written."""
    op = "speculate_limit_thinking_content_length"
    bs, width = next_tokens.shape
    n_accept, stop = _flat(accept_num), _flat(stop_flags)
    think, reply = _flat(max_think_lens), _flat(max_reply_lens)
    status, step = _flat(limit_status), _flat(step_idx)
    eos = [int(x) for x in np.asarray(eos_token_ids).reshape(-1)]
    inject = [int(x) for x in np.asarray(inject_token_ids).reshape(-1)]
    results = {}
    for b in range(bs):
        a = int(n_accept[b])
        if a <= 0 or stop[b] or (think[b] < 0 and reply[b] < 0):
            continue
        if a > width:
            raise ValueError(
                f"{op}: accept_num (request {b}) is {a}; it must be at most {width} "
                "(columns of next_tokens)"
            )
        tokens = [int(x) for x in next_tokens[b, :a]]
        new_status, new_reply, accepted = _limit_thinking_request(
            tokens,
            a,
            int(step[b]),
            int(status[b]),
            int(think[b]),
            int(reply[b]),
            eos,
            inject,
            int(think_end_id),
            bool(splitwise_role_is_decode),
        )
        for name, value in (("limit_status", new_status), ("max_reply_lens", new_reply)):
            if value > _INT32[1]:
                raise ValueError(
                    f"{op}: {name} (request {b}) would become {value} (limit {_INT32[1]})"
                )
        results[b] = tokens, new_status, new_reply, accepted
    for b, (tokens, new_status, new_reply, accepted) in results.items():
        a = int(n_accept[b])
        next_tokens[b, :a] = tokens
        step[b] -= a - accepted
        n_accept[b], status[b], reply[b] = accepted, new_status, new_reply


# --------------------------------------------------------------------------------------------
# §5.16 speculate_update_input_ids_cpu
# --------------------------------------------------------------------------------------------
def speculate_update_input_ids_cpu(input_ids_cpu, task_input_ids, bid, max_seq_len):
    """input_ids_cpu.flat[bid * max_seq_len + i] = task_input_ids[i] (spec §5.16)."""
    op = "speculate_update_input_ids_cpu"
    for name, value in (("bid", bid), ("max_seq_len", max_seq_len)):
        if not 0 <= value <= _INT32[1]:
            raise ValueError(f"{op}: {name} must be in [0, {_INT32[1]}], got {value}")
    ids = [int(x) for x in task_input_ids]
    if not ids:
        return
    flat = _flat(input_ids_cpu)
    end = bid * max_seq_len + len(ids)
    if end > flat.size:
        raise ValueError(
            f"{op}: input_ids_cpu has {flat.size} elements but the copy writes up to element {end}"
        )
    flat[bid * max_seq_len : end] = ids
