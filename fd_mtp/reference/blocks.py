"""Numpy references of the target-side KV-block managers (spec/ops.md §5.13-§5.15, §11).

Executable specs: plain Python loops over the requests in the order the spec describes, mutating
their arguments in place like the ops. Per-request tensors may be ``[B]`` or ``[B, 1]`` (flat
views are used). Where the ops raise (ValueError naming the argument), these raise the same kind
of error and leave every argument unchanged: they work on copies and write back on success.

Determinism: upstream's speculate_step_paddle orders need-list appends, free-list appends and
allocations by atomics; here (and in the op) everything goes in batch order.
"""

import numpy as np

from ..schema import resolve_kw, written_args

__all__ = [
    "speculate_schedule_cache",
    "recover_decode_task",
    "speculate_step_paddle",
    "speculate_step_system_cache",
    "speculate_step_reschedule",
]


def _flat(a):
    """A flat view of ``a``; writes through it land in ``a``."""
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _commit(written, work):
    for arg, result in zip(written, work):
        arg[...] = result


# --------------------------------------------------------------------------------------------
# §5.14 speculate_schedule_cache
# --------------------------------------------------------------------------------------------
def speculate_schedule_cache(
    draft_tokens,
    block_tables,
    stop_flags,
    prompt_lens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_seq_lens_decoder,
    step_draft_tokens,
    step_seq_lens_this_time,
    accept_num,
    accept_tokens,
    is_block_step,
    not_need_stop,
    stop_nums,
    block_size,
    max_draft_tokens,
    *,
    prefill_one_step_stop=None,
):
    """v1 block step (spec §5.14). Returns None; writes stop_flags, the lengths, the step_* buffers,
    accept_num, accept_tokens, is_block_step and not_need_stop ([1] bool) in place.

    ``bsz = seq_lens_this_time.size``, ``max_bsz = stop_flags.size``; the slot a decoding request
    needs is ``(dec + 2K + 2) // block_size``. ``prefill_one_step_stop=None`` reads the
    environment variable PREFILL_NODE_ONE_STEP_STOP_V1, as the op does (`fd_mtp.schema.resolve_kw`).
    """
    op = "speculate_schedule_cache"
    prefill_one_step_stop = resolve_kw(op, "prefill_one_step_stop", prefill_one_step_stop)
    this_time = _flat(seq_lens_this_time)
    stop = _flat(stop_flags)
    dec = _flat(seq_lens_decoder)
    prompt = _flat(prompt_lens)
    bsz, max_bsz = this_time.size, stop.size
    nb = block_tables.shape[1]
    draft_cols = draft_tokens.shape[1]
    nxt = 2 * max_draft_tokens + 2

    def decoding(b):
        return not stop[b] and not prefill_one_step_stop and dec[b] >= prompt[b]

    for b in range(bsz):
        if decoding(b) and dec[b] < 0:
            raise ValueError(
                f"{op}: seq_lens_decoder (request {b}) is {int(dec[b])} for a decoding request; "
                "it must be >= 0"
            )

    enc = _flat(seq_lens_encoder)
    step_dec = _flat(step_seq_lens_decoder)
    step_this_time = _flat(step_seq_lens_this_time)
    acc = _flat(accept_num)
    block_step = _flat(is_block_step)
    stopped = max_bsz - bsz
    for b in range(bsz):
        if stop[b]:
            stopped += 1
            continue
        if dec[b] < prompt[b] or prefill_one_step_stop:
            # unfinished chunked prefill (re-inserted by the scheduler) or a PD prefill node
            stop[b] = True
            this_time[b] = dec[b] = enc[b] = acc[b] = 0
            stopped += 1
            continue
        slot = (int(dec[b]) + nxt) // block_size
        if slot < nb and block_tables[b, slot] == -1:
            block_step[b] = True
            step_this_time[b] = this_time[b]
            this_time[b] = 0
            stop[b] = True
            step_dec[b] = dec[b]
            dec[b] = 0
            acc[b] = 0
            accept_tokens[b, :] = -1
            step_draft_tokens[b, :draft_cols] = draft_tokens[b, :]
            stopped += 1
    _flat(not_need_stop)[0] = stopped < int(_flat(stop_nums)[0])


# --------------------------------------------------------------------------------------------
# §5.15 recover_decode_task
# --------------------------------------------------------------------------------------------
def recover_decode_task(
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_seq_lens_decoder,
    block_tables,
    is_block_step,
    draft_tokens,
    step_draft_tokens,
    step_seq_lens_this_time,
    block_size,
    max_draft_tokens,
):
    """Resume block-stepped requests whose next block was granted (spec §5.15). Returns None.

    ``bsz = seq_lens_this_time.size``. Speculative variant when draft_tokens, step_draft_tokens
    and step_seq_lens_this_time are given (slot ``(step_dec + 2K + 1) // block_size``), the
    non-speculative one when all three are None (slot ``step_dec // block_size``, this_time 1).
    A slot at or past the end of the row (upstream's ``min(slot, NB)`` reads one past the row)
    counts as ready: the request resumes.
    """
    op = "recover_decode_task"
    spec = draft_tokens is not None
    if (step_draft_tokens is not None) != spec or (step_seq_lens_this_time is not None) != spec:
        raise ValueError(
            f"{op}: draft_tokens and step_draft_tokens and step_seq_lens_this_time must all be "
            "given (speculative variant) or all be None"
        )
    this_time = _flat(seq_lens_this_time)
    block_step = _flat(is_block_step)
    step_dec = _flat(step_seq_lens_decoder)
    bsz = this_time.size
    nb = block_tables.shape[1]

    def ready(b):
        d = int(step_dec[b])
        slot = (d + 2 * max_draft_tokens + 1) // block_size if spec else d // block_size
        return slot >= nb or block_tables[b, slot] != -1

    if spec:
        step_n = _flat(step_seq_lens_this_time)
        cols = min(draft_tokens.shape[1], step_draft_tokens.shape[1])
    for b in range(bsz):
        if not block_step[b]:
            continue
        if step_dec[b] < 0:
            raise ValueError(
                f"{op}: step_seq_lens_decoder (request {b}) is {int(step_dec[b])} for a "
                "block-stepped request; it must be >= 0"
            )
        if spec and ready(b) and not 0 <= step_n[b] <= cols:
            raise ValueError(
                f"{op}: step_seq_lens_this_time (request {b}) is {int(step_n[b])}; the draft row "
                f"it restores must fit [0, {cols}] columns"
            )

    stop = _flat(stop_flags)
    enc = _flat(seq_lens_encoder)
    dec = _flat(seq_lens_decoder)
    for b in range(bsz):
        if not block_step[b] or not ready(b):
            continue
        block_step[b] = False
        stop[b] = False
        enc[b] = 0
        dec[b] = step_dec[b]
        if spec:
            n = int(step_n[b])
            this_time[b] = n
            draft_tokens[b, :n] = step_draft_tokens[b, :n]
        else:
            this_time[b] = 1


# --------------------------------------------------------------------------------------------
# §5.13 speculate_step_paddle
# --------------------------------------------------------------------------------------------
_STEP_WRITTEN = written_args("speculate_step_paddle")  # from the schema


def speculate_step_paddle(
    stop_flags,
    seq_lens_this_time,
    ori_seq_lens_encoder,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    is_block_step,
    step_block_list,
    step_lens,
    recover_block_list,
    recover_lens,
    need_block_list,
    need_block_len,
    used_list_len,
    free_list,
    free_list_len,
    input_ids,
    pre_ids,
    step_idx,
    next_tokens,
    first_token_ids,
    accept_num,
    block_size,
    encoder_decoder_block_num,
    max_draft_tokens,
):
    """The target's v0 decode-block manager (spec §5.13). Returns None.

    Reads ori_seq_lens_encoder, pre_ids, step_idx; next_tokens and encoder_decoder_block_num are
    unused. Writes every other tensor argument in place (on success only).

    1. Finished requests (stopped, not block-stepped): first_token_ids -1; their decode blocks go
       back to the free list. Running ones whose slot ``(dec + K + 1) // block_size`` is empty
       join the need list (batch order).
    2. While the need list is longer than the free list: preempt the request not block-stepped
       with most decode blocks (ties: lowest b; those holding ``max_decoder_block_num`` only once
       nobody else holds any). Its blocks go back; used_list_len is kept; it is pushed on
       step_block_list, leaves the need list and is stopped/block-stepped with this_time, dec
       and accept_num 0.
    3. Remaining running need-list entries pop the free-list top into their slot.
    4. The last pushed block-stepped request recovers when ``min(used + 1, max_decoder_block_num
       - encoder_block_lens)`` blocks are free; it is re-prefilled (prompt + generated tokens).

    Raises ValueError (nothing written) where upstream loops forever (``free_list``) or would
    read/write outside a list, a block-table row, a pre_ids row or an input_ids row.
    """
    args = dict(
        stop_flags=stop_flags,
        seq_lens_this_time=seq_lens_this_time,
        seq_lens_encoder=seq_lens_encoder,
        seq_lens_decoder=seq_lens_decoder,
        block_tables=block_tables,
        encoder_block_lens=encoder_block_lens,
        is_block_step=is_block_step,
        step_block_list=step_block_list,
        step_lens=step_lens,
        recover_block_list=recover_block_list,
        recover_lens=recover_lens,
        need_block_list=need_block_list,
        need_block_len=need_block_len,
        used_list_len=used_list_len,
        free_list=free_list,
        free_list_len=free_list_len,
        input_ids=input_ids,
        first_token_ids=first_token_ids,
        accept_num=accept_num,
    )
    written = [args[n] for n in _STEP_WRITTEN]
    work = {n: a.copy() for n, a in args.items()}
    _speculate_step(
        work, _flat(ori_seq_lens_encoder), pre_ids, _flat(step_idx), block_size, max_draft_tokens
    )
    _commit(written, [work[n] for n in _STEP_WRITTEN])


def speculate_step_system_cache(
    stop_flags,
    seq_lens_this_time,
    ori_seq_lens_encoder,
    ori_seq_lens_decoder,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    is_block_step,
    step_block_list,
    step_lens,
    recover_block_list,
    recover_lens,
    need_block_list,
    need_block_len,
    used_list_len,
    free_list,
    free_list_len,
    input_ids,
    pre_ids,
    step_idx,
    next_tokens,
    first_token_ids,
    accept_num,
    block_size,
    encoder_decoder_block_num,
    max_draft_tokens,
):
    """speculate_step_paddle with prefix caching (spec §5.13). Returns None.

    Everything is as in `speculate_step_paddle`, except the re-prefill of the recovered request
    r, which also restores ``seq_lens_decoder[r] = ori_seq_lens_decoder[r]`` (the cached part of
    the sequence) instead of leaving it at 0.
    """
    args = dict(
        stop_flags=stop_flags,
        seq_lens_this_time=seq_lens_this_time,
        seq_lens_encoder=seq_lens_encoder,
        seq_lens_decoder=seq_lens_decoder,
        block_tables=block_tables,
        encoder_block_lens=encoder_block_lens,
        is_block_step=is_block_step,
        step_block_list=step_block_list,
        step_lens=step_lens,
        recover_block_list=recover_block_list,
        recover_lens=recover_lens,
        need_block_list=need_block_list,
        need_block_len=need_block_len,
        used_list_len=used_list_len,
        free_list=free_list,
        free_list_len=free_list_len,
        input_ids=input_ids,
        first_token_ids=first_token_ids,
        accept_num=accept_num,
    )
    written = [args[n] for n in _STEP_WRITTEN]
    work = {n: a.copy() for n, a in args.items()}
    _speculate_step(
        work,
        _flat(ori_seq_lens_encoder),
        pre_ids,
        _flat(step_idx),
        block_size,
        max_draft_tokens,
        op="speculate_step_system_cache",
        cached=_flat(ori_seq_lens_decoder),
    )
    _commit(written, [work[n] for n in _STEP_WRITTEN])


_RESCHEDULE_WRITTEN = written_args("speculate_step_reschedule")


def speculate_step_reschedule(
    stop_flags,
    seq_lens_this_time,
    ori_seq_lens_encoder,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    is_block_step,
    step_block_list,
    step_lens,
    recover_block_list,
    recover_lens,
    need_block_list,
    need_block_len,
    used_list_len,
    free_list,
    free_list_len,
    input_ids,
    pre_ids,
    step_idx,
    next_tokens,
    first_token_ids,
    accept_num,
    block_size,
    encoder_decoder_block_num,
    max_draft_tokens,
):
    """The decode-block manager that hands preempted requests back to the scheduler (spec
    §5.13, FD_DISABLED_RECOVER). Returns None.

    Writes stop_flags, seq_lens_this_time, seq_lens_decoder, block_tables, encoder_block_lens,
    need_block_list, need_block_len, used_list_len, free_list, free_list_len, first_token_ids.
    Ignores ori_seq_lens_encoder, seq_lens_encoder, is_block_step, the step / recover lists,
    input_ids, pre_ids, step_idx, next_tokens, accept_num and encoder_decoder_block_num.

    1. Every stopped request: first_token_ids -1; its decode blocks (if any) go back to the free
       list and its encoder_block_lens / used_list_len become 0. Running requests with an empty
       slot ``(dec + K + 1) // block_size`` inside the row join the need list (batch order).
    2. While short: the request with most decode blocks (ties: lowest b; no exemptions) gives
       them back, is stopped with this_time, dec, encoder_block_lens and used_list_len 0, and
       leaves the need list. Not block-stepped; accept_num kept.
    3. Remaining running entries pop the free-list top into their slot. No recovery.

    Raises ValueError (nothing written) where upstream loops forever (``free_list``) or would
    write outside a list or a block-table row.
    """
    args = dict(
        stop_flags=stop_flags,
        seq_lens_this_time=seq_lens_this_time,
        seq_lens_decoder=seq_lens_decoder,
        block_tables=block_tables,
        encoder_block_lens=encoder_block_lens,
        need_block_list=need_block_list,
        need_block_len=need_block_len,
        used_list_len=used_list_len,
        free_list=free_list,
        free_list_len=free_list_len,
        first_token_ids=first_token_ids,
    )
    written = [args[n] for n in _RESCHEDULE_WRITTEN]
    work = {n: a.copy() for n, a in args.items()}
    _reschedule(work, block_size, max_draft_tokens)
    _commit(written, [work[n] for n in _RESCHEDULE_WRITTEN])


def _reschedule(w, block_size, k):
    op = "speculate_step_reschedule"

    def fail(arg, msg):
        raise ValueError(f"{op}: {arg} {msg}")

    stop = _flat(w["stop_flags"])
    this_time = _flat(w["seq_lens_this_time"])
    dec = _flat(w["seq_lens_decoder"])
    tables = w["block_tables"]
    enc_blocks = _flat(w["encoder_block_lens"])
    need_list = _flat(w["need_block_list"])
    need_len = _flat(w["need_block_len"])
    used = _flat(w["used_list_len"])
    free_list = _flat(w["free_list"])
    free_len = _flat(w["free_list_len"])
    first = _flat(w["first_token_ids"])
    bsz, nb = this_time.size, tables.shape[1]

    if not 0 <= free_len[0] <= free_list.size:
        fail("free_list_len", f"is {int(free_len[0])}; it must be in [0, {free_list.size}]")
    if need_len[0] != 0:
        fail("need_block_len", f"is {int(need_len[0])} on entry; it must be 0")
    for b in range(bsz):
        if used[b] < 0 or enc_blocks[b] < 0 or enc_blocks[b] + used[b] > nb:
            fail(
                "used_list_len",
                f"(request {b}) is {int(used[b])}; with encoder_block_lens it must fit the "
                f"block table row ({nb} slots)",
            )
        if not stop[b] and this_time[b] != 0 and dec[b] < 0:
            fail(
                "seq_lens_decoder",
                f"(request {b}) is {int(dec[b])} for a running request; it must be >= 0",
            )

    def slot(b):
        return (int(dec[b]) + k + 1) // block_size

    def give_back(b):
        """Request b's decode blocks onto the free list; it holds none afterwards."""
        lo, n, top = int(enc_blocks[b]), int(used[b]), int(free_len[0])
        if top + n > free_list.size:
            fail(
                "free_list",
                f"is too small: returned blocks would fill {top + n} entries but it has "
                f"{free_list.size}",
            )
        free_list[top : top + n] = tables[b, lo : lo + n]
        tables[b, lo : lo + n] = -1
        free_len[0] = top + n
        enc_blocks[b] = 0
        used[b] = 0

    # 1. Stopped requests (block-stepped or not) free their decode blocks; who needs one.
    need = []
    for b in range(bsz):
        if stop[b]:
            first[b] = -1
            if used[b] > 0:
                give_back(b)
        elif this_time[b] != 0 and slot(b) < nb and tables[b, slot(b)] == -1:
            need.append(b)
    if len(need) > need_list.size:
        fail(
            "need_block_list",
            f"is too small: {len(need)} requests need a block but it has {need_list.size} entries",
        )
    need_list[: len(need)] = need
    need_len[0] = len(need)

    # 2. Hand the biggest holders back to the scheduler while short.
    while need_len[0] > free_len[0]:
        victim = int(np.argmax(used[:bsz])) if bsz else 0
        if bsz == 0 or used[victim] <= 0:
            fail(
                "free_list",
                f"is exhausted: {int(need_len[0])} requests need a decode block, "
                f"{int(free_len[0])} are free, and no running request holds a decode block to "
                "preempt (upstream loops forever)",
            )
        give_back(victim)
        if victim in need:
            need_list[need.index(victim)] = -1
            need_len[0] -= 1
        stop[victim] = True
        this_time[victim] = 0
        dec[victim] = 0

    # 3. Allocate in need-list order from the free-list top; no recovery.
    for i in range(len(need)):
        b = int(need_list[i])
        if b != -1 and not stop[b]:
            used[b] += 1
            free_len[0] -= 1
            tables[b, slot(b)] = free_list[free_len[0]]
        need_list[i] = -1
    need_len[0] = 0


def _speculate_step(
    w, ori, pre_ids, step_idx, block_size, k, op="speculate_step_paddle", cached=None
):

    def fail(arg, msg):
        raise ValueError(f"{op}: {arg} {msg}")

    stop = _flat(w["stop_flags"])
    this_time = _flat(w["seq_lens_this_time"])
    enc = _flat(w["seq_lens_encoder"])
    dec = _flat(w["seq_lens_decoder"])
    tables = w["block_tables"]
    enc_blocks = _flat(w["encoder_block_lens"])
    block_step = _flat(w["is_block_step"])
    step_list = _flat(w["step_block_list"])
    step_lens = _flat(w["step_lens"])
    recover_list = _flat(w["recover_block_list"])
    recover_lens = _flat(w["recover_lens"])
    need_list = _flat(w["need_block_list"])
    need_len = _flat(w["need_block_len"])
    used = _flat(w["used_list_len"])
    free_list = _flat(w["free_list"])
    free_len = _flat(w["free_list_len"])
    input_ids = w["input_ids"]
    first = _flat(w["first_token_ids"])
    acc = _flat(w["accept_num"])
    bsz = this_time.size
    nb = tables.shape[1]
    mdb = input_ids.shape[1] // block_size  # max_decoder_block_num

    # Entry state and ranges (the op checks all of these before writing anything).
    if not 0 <= free_len[0] <= free_list.size:
        fail("free_list_len", f"is {int(free_len[0])}; it must be in [0, {free_list.size}]")
    if not 0 <= step_lens[0] <= step_list.size:
        fail("step_lens", f"is {int(step_lens[0])}; it must be in [0, {step_list.size}]")
    if need_len[0] != 0:
        fail("need_block_len", f"is {int(need_len[0])} on entry; it must be 0")
    if recover_lens[0] != 0:
        fail("recover_lens", f"is {int(recover_lens[0])} on entry; it must be 0")
    for b in range(bsz):
        if used[b] < 0 or enc_blocks[b] < 0 or enc_blocks[b] + used[b] > nb:
            fail(
                "used_list_len",
                f"(request {b}) is {int(used[b])}; with encoder_block_lens it must fit the "
                f"block table row ({nb} slots)",
            )
        if not (stop[b] and not block_step[b]) and this_time[b] != 0 and dec[b] < 0:
            fail(
                "seq_lens_decoder",
                f"(request {b}) is {int(dec[b])} for a running request; it must be >= 0",
            )

    def slot(b):
        return (int(dec[b]) + k + 1) // block_size

    def append_decode_blocks(b):
        first_slot, n, top = int(enc_blocks[b]), int(used[b]), int(free_len[0])
        if top + n > free_list.size:
            fail(
                "free_list",
                f"is too small: returned blocks would fill {top + n} entries but it has "
                f"{free_list.size}",
            )
        free_list[top : top + n] = tables[b, first_slot : first_slot + n]
        tables[b, first_slot : first_slot + n] = -1
        free_len[0] = top + n

    # 1. Finished requests give their decode blocks back; who needs a block (batch order).
    need = []
    for b in range(bsz):
        if stop[b] and not block_step[b]:
            first[b] = -1
            if used[b] > 0:
                append_decode_blocks(b)
                enc_blocks[b] = 0
                used[b] = 0
        elif this_time[b] != 0 and slot(b) < nb and tables[b, slot(b)] == -1:
            need.append(b)
    if len(need) > need_list.size:
        fail(
            "need_block_list",
            f"is too small: {len(need)} requests need a block but it has {need_list.size} entries",
        )
    need_list[: len(need)] = need
    need_len[0] = len(need)
    listed = len(need)

    # 2. Preempt while short (step_max_block_flag: spare requests holding max_decoder_block_num).
    flag = False
    while need_len[0] > free_len[0]:
        held = [
            int(used[b]) if not block_step[b] and (flag or used[b] != mdb) else 0
            for b in range(bsz)
        ]
        victim = int(np.argmax(held))  # first maximum: ties go to the lowest b
        if held[victim] == 0:
            if flag:
                fail(
                    "free_list",
                    f"is exhausted: {int(need_len[0])} requests need a decode block, "
                    f"{int(free_len[0])} are free, and no running request holds a decode block to preempt "
                    "(upstream loops forever)",
                )
            flag = True
            continue
        if step_lens[0] >= step_list.size:
            fail(
                "step_block_list",
                f"is too small: preemption pushes entry {int(step_lens[0]) + 1} but it has "
                f"{step_list.size}",
            )
        append_decode_blocks(victim)  # used_list_len is kept: the recovery re-grants used + 1
        step_list[step_lens[0]] = victim
        step_lens[0] += 1
        for i in range(listed):
            if need_list[i] == victim:
                need_list[i] = -1
                need_len[0] -= 1
                break
        stop[victim] = True
        block_step[victim] = True
        this_time[victim] = 0
        dec[victim] = 0
        acc[victim] = 0

    # 3. Allocate in need-list order from the free-list top.
    for i in range(listed):
        b = int(need_list[i])
        if b != -1 and not stop[b]:
            used[b] += 1
            free_len[0] -= 1
            tables[b, slot(b)] = free_list[free_len[0]]
        need_list[i] = -1

    # 4. Recover at most one request: the last pushed (LIFO).
    if step_lens[0] > 0:
        r = int(step_list[step_lens[0] - 1])
        if not 0 <= r < bsz:
            fail("step_block_list", f"the request to recover is {r}; it must be in [0, {bsz})")
        want = min(int(used[r]) + 1, mdb - int(enc_blocks[r]))
        if free_len[0] >= want:
            if recover_list.size < 1:
                fail("recover_block_list", "is too small: a recovery needs 1 entry but it has 0")
            if want < 0 or enc_blocks[r] + want > nb:
                fail(
                    "encoder_block_lens",
                    f"(request {r}): with the blocks granted on recovery the row needs "
                    f"{int(enc_blocks[r]) + want} slots but it has {nb}",
                )
            recover_list[recover_lens[0]] = r
            recover_lens[0] += 1
            block_step[r] = False
            used[r] = want
            step_list[step_lens[0] - 1] = -1
            step_lens[0] -= 1
    need_len[0] = 0

    # Re-prefill of the recovered request: prompt + generated tokens; its blocks come back.
    for i in range(int(recover_lens[0])):
        r = int(recover_list[i])
        o, s = int(ori[r]), int(step_idx[r])
        if o < 0:
            fail(
                "ori_seq_lens_encoder",
                f"(request {r}) is {o} for the request to recover; it must be >= 0",
            )
        if s < 0 or (s > 0 and s + 1 > pre_ids.shape[1]):
            fail(
                "step_idx",
                f"(request {r}) is {s} for the request to recover; its generated tokens "
                f"pre_ids[1..step_idx] must fit pre_ids",
            )
        if input_ids.shape[1] < 1 or o + s > input_ids.shape[1]:
            fail(
                "input_ids",
                f"(request {r}): the re-prefill needs {o + s} columns but the row has "
                f"{input_ids.shape[1]}",
            )
        this_time[r] = enc[r] = o + s
        if cached is not None:  # speculate_step_system_cache: the cached prefix
            dec[r] = cached[r]
        stop[r] = False
        input_ids[r, 0] = first[r]
        e = int(enc_blocks[r])
        for j in range(int(used[r])):
            free_len[0] -= 1
            tables[r, e + j] = free_list[free_len[0]]
        input_ids[r, o : o + s] = pre_ids[r, 1 : s + 1]
    recover_lens[0] = 0
