"""Numpy references of the logprob helpers of speculative decoding, written from the spec
(spec/ops.md §5.18, docs/spec/logprobs.md): speculate_get_logits, speculate_insert_first_token,
speculate_get_target_logits.

Each is a plain loop over the requests in the order the spec describes; the functions mutate
their arguments in place as the ops do. Per-request tensors may be ``[B]`` or ``[B, 1]`` (flat
views are used, so writes land in the caller's arrays). Bad data raise ValueError naming the
argument, before anything is written, like the ops.
"""

import numpy as np

__all__ = ["speculate_get_logits", "speculate_insert_first_token", "speculate_get_target_logits"]

_INT32_MAX = 2**31 - 1


def _flat(a):
    """A flat view of ``a``; writes through it land in ``a``."""
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _fail(op, arg, request, msg):
    where = f" (request {request})" if request is not None else ""
    raise ValueError(f"{op}: {arg}{where} {msg}")


def _matrix(op, name, a, cols=None):
    if a.ndim != 2 or a.dtype != np.float32:
        raise ValueError(f"{op}: {name} must be a float32 matrix, got {a.dtype} {a.shape}")
    if cols is not None and a.shape[1] != cols:
        raise ValueError(f"{op}: {name} must have {cols} columns, got shape {a.shape}")


def _per_request(op, name, a, bsz, dtype=np.int32):
    if a.dtype != dtype or a.size < bsz or (a.ndim == 2 and a.shape[1] != 1) or a.ndim > 2:
        raise ValueError(f"{op}: {name} must be {np.dtype(dtype).name} [>= {bsz}], got {a.shape}")


def _batch(op, seq_lens_this_time):
    a = seq_lens_this_time
    if a.dtype != np.int32 or a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[1] != 1):
        raise ValueError(f"{op}: seq_lens_this_time must be int32 [bsz] or [bsz, 1], got {a.shape}")
    return a.shape[0]


# --------------------------------------------------------------------------------------------
# speculate_get_logits
# --------------------------------------------------------------------------------------------
def speculate_get_logits(
    draft_logits,
    next_token_num,
    batch_token_num,
    cu_next_token_offset,
    cu_batch_token_offset,
    logits,
    first_token_logits,
    seq_lens_this_time,
    seq_lens_encoder,
):
    """The draft model's rows of one step, packed per request (spec §5.18): a prefill request
    (enc > 0) reads 1 logits row and writes 2 rows (first_token_logits[b], then that row), a
    decode request reads and writes seq_lens_this_time rows. The counts go to next_token_num /
    batch_token_num, their inclusive prefix sums to entries 1..bsz of the offsets; entry 0 is
    kept and is request 0's start."""
    op = "speculate_get_logits"
    bsz = _batch(op, seq_lens_this_time)
    _matrix(op, "draft_logits", draft_logits)
    vocab = draft_logits.shape[1]
    _matrix(op, "logits", logits, vocab)
    _matrix(op, "first_token_logits", first_token_logits, vocab)
    if first_token_logits.shape[0] < bsz:
        _fail(
            op, "first_token_logits", None, f"needs >= {bsz} rows, got {first_token_logits.shape}"
        )
    for name, a in (
        ("next_token_num", next_token_num),
        ("batch_token_num", batch_token_num),
        ("seq_lens_encoder", seq_lens_encoder),
    ):
        _per_request(op, name, a, bsz)
    this_time, enc = _flat(seq_lens_this_time), _flat(seq_lens_encoder)
    cu_next, cu_batch = _flat(cu_next_token_offset), _flat(cu_batch_token_offset)
    for name, a in (("cu_next_token_offset", cu_next), ("cu_batch_token_offset", cu_batch)):
        if a.dtype != np.int32:
            _fail(op, name, None, f"must be int32, got {a.dtype}")
        if bsz > 0 and a.size < bsz + 1:
            _fail(op, name, None, f"has {a.size} entries; it needs bsz + 1 = {bsz + 1}")

    prefill = [int(enc[b]) > 0 for b in range(bsz)]
    nexts = [1 if prefill[b] else int(this_time[b]) for b in range(bsz)]
    batches = [2 if prefill[b] else int(this_time[b]) for b in range(bsz)]
    # Check every request before writing anything.
    next_sum = batch_sum = 0
    logits_limit = min(logits.shape[0], _INT32_MAX)
    draft_limit = min(draft_logits.shape[0], _INT32_MAX)
    for b in range(bsz):
        if not prefill[b] and this_time[b] < 0:
            _fail(op, "seq_lens_this_time", b, f"is {int(this_time[b])}; it must be >= 0")
        ns = int(cu_next[0]) if b == 0 else next_sum
        bs = int(cu_batch[0]) if b == 0 else batch_sum
        n, m = nexts[b], batches[b]
        if n > 0 and ns < 0:
            _fail(op, "cu_next_token_offset", b, f"entry 0 is {ns}; it must be >= 0")
        if m > 0 and bs < 0:
            _fail(op, "cu_batch_token_offset", b, f"entry 0 is {bs}; it must be >= 0")
        if n > 0 and ns + n > logits_limit:
            _fail(op, "logits", b, f"needs {ns + n} rows; it has {logits_limit}")
        if m > 0 and bs + m > draft_limit:
            _fail(op, "draft_logits", b, f"needs {bs + m} rows; it has {draft_limit}")
        next_sum += n
        batch_sum += m

    nn, bn = _flat(next_token_num), _flat(batch_token_num)
    nn[:bsz] = nexts
    bn[:bsz] = batches
    cu_next[1 : bsz + 1] = np.cumsum(nexts, dtype=np.int64)
    cu_batch[1 : bsz + 1] = np.cumsum(batches, dtype=np.int64)
    for b in range(bsz):
        src, dst = int(cu_next[b]), int(cu_batch[b])
        if prefill[b]:
            draft_logits[dst] = first_token_logits[b]
            draft_logits[dst + 1] = logits[src]
        else:
            n = nexts[b]
            draft_logits[dst : dst + n] = logits[src : src + n]


# --------------------------------------------------------------------------------------------
# speculate_insert_first_token
# --------------------------------------------------------------------------------------------
def speculate_insert_first_token(
    token_ids,
    accept_tokens,
    next_tokens,
    cu_next_token_offset,
    cu_batch_token_offset,
    seq_lens_this_time,
    seq_lens_encoder,
):
    """The token ids matching speculate_get_logits' rows (spec §5.18): at token_ids[cu_batch[b]],
    a prefill request (enc != 0) writes accept_tokens[b, 0] then next_tokens[cu_next[b]], a
    decode request its seq_lens_this_time tokens next_tokens[cu_next[b] + i]."""
    op = "speculate_insert_first_token"
    bsz = _batch(op, seq_lens_this_time)
    for name, a in (("token_ids", token_ids), ("next_tokens", next_tokens)):
        if a.dtype != np.int64:
            _fail(op, name, None, f"must be int64, got {a.dtype}")
    if accept_tokens.dtype != np.int64 or accept_tokens.ndim != 2 or accept_tokens.shape[0] < bsz:
        _fail(op, "accept_tokens", None, f"must be int64 [>= {bsz}, W], got {accept_tokens.shape}")
    if accept_tokens.shape[1] < 1:
        _fail(op, "accept_tokens", None, f"needs at least 1 column, got {accept_tokens.shape}")
    for name, a in (
        ("cu_next_token_offset", cu_next_token_offset),
        ("cu_batch_token_offset", cu_batch_token_offset),
        ("seq_lens_encoder", seq_lens_encoder),
    ):
        _per_request(op, name, a, bsz)
    ids, nxt = _flat(token_ids), _flat(next_tokens)
    cu_next, cu_batch = _flat(cu_next_token_offset), _flat(cu_batch_token_offset)
    this_time, enc = _flat(seq_lens_this_time), _flat(seq_lens_encoder)

    plans = []
    for b in range(bsz):
        prefill = int(enc[b]) != 0
        written = 2 if prefill else max(int(this_time[b]), 0)
        read = 1 if prefill else written
        dst, src = int(cu_batch[b]), int(cu_next[b])
        if written > 0:
            if dst < 0:
                _fail(op, "cu_batch_token_offset", b, f"is {dst}; it must be >= 0")
            if src < 0:
                _fail(op, "cu_next_token_offset", b, f"is {src}; it must be >= 0")
            if dst + written > ids.size:
                _fail(
                    op,
                    "token_ids",
                    b,
                    f"needs {dst + written} entries (from cu_batch_token_offset); it has {ids.size}",
                )
            if src + read > nxt.size:
                _fail(
                    op,
                    "next_tokens",
                    b,
                    f"needs {src + read} entries (from cu_next_token_offset); it has {nxt.size}",
                )
        plans.append((prefill, written, dst, src))
    for b, (prefill, written, dst, src) in enumerate(plans):
        if prefill:
            ids[dst] = accept_tokens[b, 0]
            ids[dst + 1] = nxt[src]
        else:
            ids[dst : dst + written] = nxt[src : src + written]


# --------------------------------------------------------------------------------------------
# speculate_get_target_logits
# --------------------------------------------------------------------------------------------
def speculate_get_target_logits(
    target_logits,
    logits,
    cu_batch_token_offset,
    ori_cu_batch_token_offset,
    seq_lens_this_time,
    seq_lens_encoder,
    accept_num,
):
    """The target's rows of the accepted tokens (spec §5.18): request b copies rows
    logits[ori[b] + j] to target_logits[cu[b] + j], one row for a prefill (enc > 0), else
    accept_num[b] rows (none when <= 0)."""
    op = "speculate_get_target_logits"
    bsz = _batch(op, seq_lens_this_time)
    _matrix(op, "target_logits", target_logits)
    _matrix(op, "logits", logits, target_logits.shape[1])
    for name, a in (
        ("cu_batch_token_offset", cu_batch_token_offset),
        ("ori_cu_batch_token_offset", ori_cu_batch_token_offset),
        ("seq_lens_encoder", seq_lens_encoder),
        ("accept_num", accept_num),
    ):
        _per_request(op, name, a, bsz)
    cu, ori = _flat(cu_batch_token_offset), _flat(ori_cu_batch_token_offset)
    enc, acc = _flat(seq_lens_encoder), _flat(accept_num)
    plans = []
    for b in range(bsz):
        n = 1 if int(enc[b]) > 0 else max(int(acc[b]), 0)
        dst, src = int(cu[b]), int(ori[b])
        if n > 0:
            if dst < 0:
                _fail(op, "cu_batch_token_offset", b, f"is {dst}; it must be >= 0")
            if src < 0:
                _fail(op, "ori_cu_batch_token_offset", b, f"is {src}; it must be >= 0")
            if dst + n > target_logits.shape[0]:
                _fail(
                    op, "target_logits", b, f"needs {dst + n} rows; it has {target_logits.shape[0]}"
                )
            if src + n > logits.shape[0]:
                _fail(op, "logits", b, f"needs {src + n} rows; it has {logits.shape[0]}")
        plans.append((n, dst, src))
    for n, dst, src in plans:
        target_logits[dst : dst + n] = logits[src : src + n]
