"""Numpy references of the target-side KV-block managers (spec/ops.md §5.13-§5.15, §11).

Executable specs: plain Python loops over the requests in the order the spec describes, mutating
their arguments in place like the ops. Per-request tensors may be ``[B]`` or ``[B, 1]`` (flat
views are used). Where the ops raise (ValueError naming the argument), these raise the same kind
of error and leave every argument unchanged: they work on copies and write back on success.

Determinism: upstream's speculate_step_paddle orders need-list appends, free-list appends and
allocations by atomics; here (and in the op) everything goes in batch order.
"""

import numpy as np

from ..schema import check_together, get, resolve_kw, written_args
from ._arrays import _flat, _on_copies
from ._decode_blocks import DecodeBlocks

__all__ = [
    "speculate_schedule_cache",
    "recover_decode_task",
    "speculate_step_paddle",
    "speculate_step_system_cache",
    "speculate_step_reschedule",
]


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
    check_together(get(op), locals())  # the schema's Together rule
    spec = draft_tokens is not None
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
    _step_on_copies(locals(), "speculate_step_paddle", cached=None)


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
    _step_on_copies(locals(), "speculate_step_system_cache", cached=ori_seq_lens_decoder)


def _step_on_copies(args, op, cached):
    """Run the v0 manager (`_speculate_step`) on copies of the written arguments
    (``args``: the op's arguments by name); they are written back on success."""
    _on_copies(
        args,
        _STEP_WRITTEN,
        lambda work: _speculate_step(
            work,
            _flat(args["ori_seq_lens_encoder"]),
            args["pre_ids"],
            _flat(args["step_idx"]),
            args["block_size"],
            args["max_draft_tokens"],
            op=op,
            cached=None if cached is None else _flat(cached),
        ),
    )


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
    _on_copies(
        locals(),
        _RESCHEDULE_WRITTEN,
        lambda work: _reschedule(work, block_size, max_draft_tokens),
    )


def _reschedule(w, block_size, k):
    """speculate_step_reschedule on the working copies ``w``."""
    m = DecodeBlocks("speculate_step_reschedule", w, block_size, k)
    m.check_free_len()
    m.check_need_len()
    m.check_requests(lambda b: not m.stop[b])
    # 1. Stopped requests (block-stepped or not) free their decode blocks; who needs one.
    listed = m.list_needs(lambda b: m.stop[b])
    # 2. Hand the biggest holders back to the scheduler while short.
    while m.need_len[0] > m.free_len[0]:
        victim = int(np.argmax(m.used[: m.bsz])) if m.bsz else 0
        if m.bsz == 0 or m.used[victim] <= 0:
            m.exhausted()
        m.release(victim)
        m.unlist(victim, listed)
        m.stop[victim] = True
        m.this_time[victim] = 0
        m.dec[victim] = 0
    # 3. Allocate in need-list order from the free-list top; no recovery.
    m.allocate(listed)
    m.need_len[0] = 0


class _StepBlocks(DecodeBlocks):
    """speculate_step_paddle's manager: preempted requests are parked on step_block_list and the
    last one parked recovers with a re-prefill."""

    def __init__(self, op, w, block_size, k):
        super().__init__(op, w, block_size, k)
        self.enc = _flat(w["seq_lens_encoder"])
        self.block_step = _flat(w["is_block_step"])
        self.step_list = _flat(w["step_block_list"])
        self.step_lens = _flat(w["step_lens"])
        self.recover_list = _flat(w["recover_block_list"])
        self.recover_lens = _flat(w["recover_lens"])
        self.input_ids = w["input_ids"]
        self.acc = _flat(w["accept_num"])
        self.mdb = self.input_ids.shape[1] // block_size  # max_decoder_block_num

    def check_entry(self):
        self.check_free_len()
        if not 0 <= self.step_lens[0] <= self.step_list.size:
            self.fail(
                "step_lens",
                f"is {int(self.step_lens[0])}; it must be in [0, {self.step_list.size}]",
            )
        self.check_need_len()
        if self.recover_lens[0] != 0:
            self.fail("recover_lens", f"is {int(self.recover_lens[0])} on entry; it must be 0")
        self.check_requests(lambda b: not (self.stop[b] and not self.block_step[b]))

    def preempt(self, listed):
        """Step 2: preempt while short (step_max_block_flag: spare requests holding
        max_decoder_block_num until nobody else holds a decode block)."""
        flag = False
        while self.need_len[0] > self.free_len[0]:
            held = [
                int(self.used[b])
                if not self.block_step[b] and (flag or self.used[b] != self.mdb)
                else 0
                for b in range(self.bsz)
            ]
            victim = int(np.argmax(held))  # first maximum: ties go to the lowest b
            if held[victim] == 0:
                if flag:
                    self.exhausted()
                flag = True
                continue
            if self.step_lens[0] >= self.step_list.size:
                self.fail(
                    "step_block_list",
                    f"is too small: preemption pushes entry {int(self.step_lens[0]) + 1} but it "
                    f"has {self.step_list.size}",
                )
            self.return_decode_blocks(victim)  # used_list_len kept: the recovery re-grants used + 1
            self.step_list[self.step_lens[0]] = victim
            self.step_lens[0] += 1
            self.unlist(victim, listed)
            self.stop[victim] = True
            self.block_step[victim] = True
            self.this_time[victim] = 0
            self.dec[victim] = 0
            self.acc[victim] = 0

    def recover_one(self):
        """Step 4: recover at most one request, the last pushed (LIFO), when its blocks are free."""
        if self.step_lens[0] <= 0:
            return
        r = int(self.step_list[self.step_lens[0] - 1])
        if not 0 <= r < self.bsz:
            self.fail(
                "step_block_list", f"the request to recover is {r}; it must be in [0, {self.bsz})"
            )
        want = min(int(self.used[r]) + 1, self.mdb - int(self.enc_blocks[r]))
        if self.free_len[0] < want:
            return
        if self.recover_list.size < 1:
            self.fail("recover_block_list", "is too small: a recovery needs 1 entry but it has 0")
        if want < 0 or self.enc_blocks[r] + want > self.nb:
            self.fail(
                "encoder_block_lens",
                f"(request {r}): with the blocks granted on recovery the row needs "
                f"{int(self.enc_blocks[r]) + want} slots but it has {self.nb}",
            )
        self.recover_list[self.recover_lens[0]] = r
        self.recover_lens[0] += 1
        self.block_step[r] = False
        self.used[r] = want
        self.step_list[self.step_lens[0] - 1] = -1
        self.step_lens[0] -= 1

    def reprefill(self, ori, pre_ids, step_idx, cached):
        """Re-prefill of the recovered requests: prompt + generated tokens; their blocks come
        back. ``cached`` (speculate_step_system_cache) restores seq_lens_decoder."""
        input_ids = self.input_ids
        for i in range(int(self.recover_lens[0])):
            r = int(self.recover_list[i])
            o, s = int(ori[r]), int(step_idx[r])
            if o < 0:
                self.fail(
                    "ori_seq_lens_encoder",
                    f"(request {r}) is {o} for the request to recover; it must be >= 0",
                )
            if s < 0 or (s > 0 and s + 1 > pre_ids.shape[1]):
                self.fail(
                    "step_idx",
                    f"(request {r}) is {s} for the request to recover; its generated tokens "
                    f"pre_ids[1..step_idx] must fit pre_ids",
                )
            if input_ids.shape[1] < 1 or o + s > input_ids.shape[1]:
                self.fail(
                    "input_ids",
                    f"(request {r}): the re-prefill needs {o + s} columns but the row has "
                    f"{input_ids.shape[1]}",
                )
            self.this_time[r] = self.enc[r] = o + s
            if cached is not None:  # speculate_step_system_cache: the cached prefix
                self.dec[r] = cached[r]
            self.stop[r] = False
            input_ids[r, 0] = self.first[r]
            e = int(self.enc_blocks[r])
            for j in range(int(self.used[r])):
                self.free_len[0] -= 1
                self.tables[r, e + j] = self.free_list[self.free_len[0]]
            input_ids[r, o : o + s] = pre_ids[r, 1 : s + 1]
        self.recover_lens[0] = 0


def _speculate_step(w, ori, pre_ids, step_idx, block_size, k, op, cached=None):
    """speculate_step_paddle (``cached`` None) or speculate_step_system_cache on the working
    copies ``w``."""
    m = _StepBlocks(op, w, block_size, k)
    m.check_entry()
    # 1. Finished requests give their decode blocks back; who needs a block (batch order).
    listed = m.list_needs(lambda b: m.stop[b] and not m.block_step[b])
    m.preempt(listed)
    # 3. Allocate in need-list order from the free-list top.
    m.allocate(listed)
    m.recover_one()
    m.need_len[0] = 0
    m.reprefill(ori, pre_ids, step_idx, cached)
