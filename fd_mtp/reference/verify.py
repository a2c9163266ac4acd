"""Numpy reference of speculate_verify, written from the spec (spec/ops.md §5.7, §9.1, §14 items 7-10).

An executable spec: one plain Python loop per request in the order §5.7 describes, mutating its
arguments in place exactly as the op does. Valid input is assumed except for the checks the op
also makes (ValueError naming the argument, raised before anything is written).

Randomness (a deliberate difference from upstream's curand XORWOW, which neither a CPU nor numpy
can reproduce): Philox4x32-10 (Salmon et al. 2011) with key = (seed low 32 bits, seed high 32
bits) and counter = (draw, request index, offset low, offset high); a draw is the float32
``((word0 >> 8) + 1) * 2**-24``, uniform in (0, 1]. TOPP uses draw 0 of its request; the
"rejection" strategy uses draw 2i for the accept test at position i and 2i+1 for the token
sampled there.

"rejection" reads, per running request, what its accept walk tests (``target_probs[row, d]``
and ``draft_probs[row, d]`` of each tested draft d, in position order) and then, unless an
accepted draft stopped the request, the one row it samples from: the rejected position's row
(weights ``max(0, p - q)``, q = the draft_probs row or one-hot on the draft) or the bonus row
(weights p). Exactly these values must be finite (in that order: the walk's entries, then the
sampled target row, then the sampled draft row); NaN / inf elsewhere is never read.

The sampling sums are defined blockwise (custom_ops/kernels/speculate_verify.h, shared bit for
bit by the CPU driver and the CUDA kernel; independent of any launch shape). The vocabulary is cut
into chunks of 1024 ids; id ``v = 1024 c + 32 j + l`` is step j (0..31) of lane l (0..31) of chunk
c (ids >= V are absent: weight 0). With float32 weights w and every sum a float32 add, left to
right as written::

    L[c][l] = ((w(c,l,0) + w(c,l,1)) + w(c,l,2)) + ...    lane sum, steps in order
    Q[c][l] = Q[c][l-1] + L[c][l],  Q[c][-1] = 0          lanes in order; S[c] = Q[c][31]
    P[c]    = P[c-1] + S[c],  P[-1] = 0;  total = P[last] chunks in order

Inverse CDF with the draw u: ``t = u * total``; chunk c* = the first c with ``S[c] > 0`` and
``t <= P[c]``; lane l* = the first l with ``L[c*][l] > 0`` and ``t <= P[c*-1] + Q[c*][l]``; step
j* = the first j with ``w > 0`` and ``t <= P[c*-1] + (Q[c*][l*-1] + s_j)`` (s_j the lane's
running sum through step j). Each level's prefix ends exactly at the sum above it, so the search
always ends on an id of positive weight: tokens are drawn with probability ``w_v / total`` (up to
float32 rounding), enumerated in the order chunk, lane, step (a fixed permutation of the ids).
``total == 0`` (p <= q everywhere): the argmax of p (lowest id).
"""

import numpy as np

from ..schema import CallCounter, get, prepare_call, resolve_kw
from ..schema.arrays import convert_attr

__all__ = ["speculate_verify", "philox4x32_10", "philox_uniform"]

_M32 = np.uint64(0xFFFFFFFF)
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))


def philox4x32_10(counter, key):
    """Philox4x32-10 of ``counter`` ([..., 4] uint32) with ``key`` ([..., 2] uint32) -> [..., 4] uint32."""
    counter = np.asarray(counter, dtype=np.uint64)
    key = np.asarray(key, dtype=np.uint64)
    c0, c1, c2, c3 = (counter[..., j] for j in range(4))
    k0, k1 = key[..., 0], key[..., 1]
    for rnd in range(10):
        if rnd:
            k0 = (k0 + _PHILOX_W[0]) & _M32
            k1 = (k1 + _PHILOX_W[1]) & _M32
        p0 = c0 * _PHILOX_M[0]  # < 2**64: exact in uint64
        p1 = c2 * _PHILOX_M[1]
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ k0,
            p1 & _M32,
            (p0 >> np.uint64(32)) ^ c3 ^ k1,
            p0 & _M32,
        )
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1).astype(np.uint32)


def philox_uniform(seed, offset, stream, draw):
    """float32 uniform(s) in (0, 1] at (seed, offset, stream = request index, draw); broadcasts."""
    seed, offset = int(seed), int(offset)
    stream = np.asarray(stream, dtype=np.uint64) & _M32
    draw = np.asarray(draw, dtype=np.uint64) & _M32
    stream, draw = np.broadcast_arrays(stream, draw)
    counter = np.stack(
        [
            draw,
            stream,
            np.full_like(draw, offset & 0xFFFFFFFF),
            np.full_like(draw, (offset >> 32) & 0xFFFFFFFF),
        ],
        axis=-1,
    )
    key = np.array([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF], dtype=np.uint64)
    word0 = philox4x32_10(counter, key)[..., 0]
    return ((word0 >> np.uint32(8)) + np.uint32(1)).astype(np.float32) * np.float32(2.0**-24)


CALLS = CallCounter()  # the reference's call counters (the default seed / offset)


def _flat(a):
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _fail(arg, msg):
    raise ValueError(f"speculate_verify: {arg} {msg}")


def _check_finite(arg, m, first, last, where):
    """The first NaN / inf of rows first..last (row order, then column order) is refused."""
    bad = np.argwhere(~np.isfinite(np.asarray(m[first : last + 1], np.float32)))
    if bad.size:
        r, c = int(bad[0][0]) + first, int(bad[0][1])
        _fail(arg, where + f"holds NaN or inf at row {r}, column {c}; it must be finite")


LANES = 32  # lanes of a chunk
STEPS = 32  # steps of a lane
CHUNK = LANES * STEPS  # ids per chunk


def _sample(probs_row, u, q_row=None):
    """Token from weights max(0, p - q) (q None: p itself) by the blockwise inverse CDF of the
    module docstring; the argmax of p (lowest id) when the weights sum to 0."""
    p = np.asarray(probs_row, dtype=np.float32)
    r = p - (np.float32(0) if q_row is None else np.asarray(q_row, np.float32))
    w = np.where(r > 0, r, np.float32(0)).astype(np.float32)
    chunks = -(-w.size // CHUNK)
    x = np.zeros(chunks * CHUNK, np.float32)
    x[: w.size] = w
    x = x.reshape(chunks, STEPS, LANES)  # x[c, j, l] = w(1024 c + 32 j + l)
    lanes = np.zeros((chunks, LANES), np.float32)
    for j in range(STEPS):  # L[c][l]: steps in order (adding an absent id's 0 is exact)
        lanes = lanes + x[:, j, :]
    sums = np.zeros(chunks, np.float32)
    for lane in range(LANES):  # S[c] = Q[c][31]: lanes in order
        sums = sums + lanes[:, lane]
    total = np.float32(0)
    for c in range(chunks):  # P: chunks in order
        total = np.float32(total + sums[c])
    if total > 0:
        t = np.float32(np.float32(u) * total)
        before = np.float32(0)  # P[c-1]
        for c in range(chunks):
            nxt = np.float32(before + sums[c])
            if sums[c] > 0 and t <= nxt:
                q = np.float32(0)  # Q[c][l-1]
                for lane in range(LANES):
                    q_next = np.float32(q + lanes[c, lane])
                    if lanes[c, lane] > 0 and t <= np.float32(before + q_next):
                        s = np.float32(0)
                        for j in range(STEPS):
                            wv = x[c, j, lane]
                            s = np.float32(s + wv)
                            if wv > 0 and t <= np.float32(before + np.float32(q + s)):
                                return int(c * CHUNK + j * LANES + lane)
                        break
                    q = q_next
                break
            before = nxt
    return int(np.argmax(p))


def speculate_verify(
    sampled_token_ids,
    accept_tokens,
    accept_num,
    step_idx,
    stop_flags,
    seq_lens_encoder,
    seq_lens_decoder,
    draft_tokens,
    seq_lens_this_time,
    verify_tokens,
    verify_scores,
    max_dec_len,
    end_tokens,
    is_block_step,
    output_cum_offsets,
    actual_candidate_len,
    actual_draft_token_nums,
    topp,
    max_seq_len,
    verify_window,
    enable_topp,
    benchmark_mode,
    accept_all_drafts,
    *,
    seed=None,
    offset=None,
    verify_strategy=None,
    prefill_one_step_stop=None,
    target_probs=None,
    draft_probs=None,
):
    """Verify drafts and emit accepted + bonus/correction tokens (spec §5.7). Returns None.

    Same arguments and in-place effects as fd_mtp.ops.speculate_verify (see its docstring):
    accept_tokens [Bm, Wa] int64, accept_num int32, step_idx int64, stop_flags bool are written;
    ``bsz = seq_lens_this_time.size``; row widths are each tensor's own.
    """
    op = get("speculate_verify")
    # the schema's Python side: the strategy's code and default, the call counter, target_probs
    # and draft_probs for "rejection" only and their rules
    v = prepare_call(op, locals(), CALLS)
    strategy, seed, offset = (
        convert_attr(op, op.arg(n), v[n]) for n in ("strategy", "seed", "offset")
    )
    name = op.arg("strategy").choices[strategy]
    one_step_stop = bool(resolve_kw(op.name, "prefill_one_step_stop", prefill_one_step_stop))
    c = _Call.of(v, name=name, seed=seed, offset=offset, one_step_stop=one_step_stop)
    if not c.ends:
        _fail("end_tokens", "must hold at least one token id")
    if int(verify_window) < 0:
        _fail("verify_window", f"must be >= 0, got {verify_window}")
    # Block-stepped and stopped requests are left untouched (accept_num too): step 0.
    running = [b for b in range(c.this_time.size) if not (c.block_step[b] or c.stop[b])]
    for b in running:  # every check before anything is written
        _check_request(c, b)
    for b in running:
        _apply_request(c, b)


class _Call:
    """One call's options and arguments: per-request vectors flattened (views: writes land in
    the caller's arrays), matrices as given; target_probs / draft_probs None unless "rejection".
    (A plain class: the reference modules import numpy only.)"""

    __slots__ = (
        "name",  # the strategy
        "seed",
        "offset",
        "one_step_stop",
        "sampled",
        "accept_tokens",
        "n_acc",
        "step",
        "stop",
        "enc",
        "this_time",
        "draft_tokens",
        "verify_tokens",
        "verify_scores",
        "max_dec",
        "ends",  # list of ints
        "block_step",
        "cum",
        "cand_len",
        "top_p",
        "max_seq_len",
        "verify_window",
        "enable_topp",
        "benchmark_mode",
        "accept_all_drafts",
        "target_probs",
        "draft_probs",
    )

    def __init__(self, **fields):
        assert set(fields) == set(self.__slots__), set(fields) ^ set(self.__slots__)
        for name, value in fields.items():
            setattr(self, name, value)

    @classmethod
    def of(cls, v: dict, **options) -> "_Call":
        """The call's `_Call` from the prepared arguments ``v`` (by name) and its ``options``."""
        return cls(
            **options,
            sampled=_flat(v["sampled_token_ids"]),
            accept_tokens=v["accept_tokens"],
            n_acc=_flat(v["accept_num"]),
            step=_flat(v["step_idx"]),
            stop=_flat(v["stop_flags"]),
            enc=_flat(v["seq_lens_encoder"]),
            this_time=_flat(v["seq_lens_this_time"]),
            draft_tokens=v["draft_tokens"],
            verify_tokens=v["verify_tokens"],
            verify_scores=v["verify_scores"],
            max_dec=_flat(v["max_dec_len"]),
            ends=[int(t) for t in _flat(v["end_tokens"])],
            block_step=_flat(v["is_block_step"]),
            cum=_flat(v["output_cum_offsets"]),
            cand_len=_flat(v["actual_candidate_len"]),
            top_p=_flat(v["topp"]),
            max_seq_len=v["max_seq_len"],
            verify_window=v["verify_window"],
            enable_topp=v["enable_topp"],
            benchmark_mode=v["benchmark_mode"],
            accept_all_drafts=v["accept_all_drafts"],
            target_probs=v["target_probs"],
            draft_probs=v["draft_probs"],
        )

    def start(self, b) -> int:
        """Request b's first output row."""
        return b * int(self.max_seq_len) - int(self.cum[b])

    def drafts_skipped(self, b) -> bool:
        """No draft of request b is verified (benchmark mode, or a prefill)."""
        return bool(self.benchmark_mode or self.enc[b] != 0)

    def uniform(self, b, draw):
        return philox_uniform(self.seed, self.offset, b, draw)[()]


# ---- checks (before anything is written) ---------------------------------------------------------
def _check_request(c: _Call, b: int) -> None:
    """Request b's data checks: row widths, output rows, and the finite values it reads."""
    used = 1 if c.drafts_skipped(b) else max(int(c.this_time[b]), 1)  # output rows it touches
    where = f"(request {b}) "
    if used > c.draft_tokens.shape[1]:
        _fail(
            "draft_tokens",
            where
            + f"the request verifies {used} tokens but the row has {c.draft_tokens.shape[1]} columns",
        )
    if used > c.accept_tokens.shape[1]:
        _fail(
            "accept_tokens",
            where
            + f"the request may accept {used} tokens but the row has {c.accept_tokens.shape[1]} columns",
        )
    start = c.start(b)
    if start < 0:
        _fail("output_cum_offsets", where + f"gives first output row {start}; it must be >= 0")
    last = start + used - 1
    tensors = [
        ("verify_tokens", c.verify_tokens),
        ("verify_scores", c.verify_scores),
        ("actual_candidate_len", c.cand_len),
        ("sampled_token_ids", c.sampled),
    ]
    if c.name == "rejection":
        tensors.append(("target_probs", c.target_probs))
        if c.draft_probs is not None:
            tensors.append(("draft_probs", c.draft_probs))
    for arg, t in tensors:
        if last >= t.shape[0]:
            _fail(arg, where + f"row {last} is read but there are {t.shape[0]} rows")
    if c.enable_topp and c.name in ("topp", "topk"):
        if not np.isfinite(c.top_p[b]):
            _fail("topp", where + "is NaN or infinite; it must be finite")
        _check_finite("verify_scores", c.verify_scores, start, last, where)
    if c.name == "rejection":
        vocab = c.target_probs.shape[1]
        for i in range(1, used):
            d = int(c.draft_tokens[b, i])
            if not 0 <= d < vocab:
                _fail(
                    "draft_tokens",
                    where
                    + f"holds token id {d}, outside the vocabulary [0, {vocab}) of target_probs",
                )
        row, residual = _rejection_plan(c, b, start, where)
        if row is not None:
            _check_finite("target_probs", c.target_probs, row, row, where)
            if residual and c.draft_probs is not None:
                _check_finite("draft_probs", c.draft_probs, row, row, where)


def _rejection_plan(c: _Call, b: int, start: int, where: str):
    """The "rejection" accept walk of request b without writing: every entry it reads must be
    finite. Returns (the row it samples from or None when an accepted draft stops the request,
    whether that is a residual sample)."""
    n = int(c.this_time[b])
    count = int(c.step[b])  # step_idx as the walk's ACCEPTs would advance it
    i = 0
    while i < n - 1 and not c.drafts_skipped(b):
        row = start + i
        d = int(c.draft_tokens[b, i + 1])
        if not c.accept_all_drafts:
            pv = np.float32(c.target_probs[row, d])
            qv = np.float32(1) if c.draft_probs is None else np.float32(c.draft_probs[row, d])
            for arg, value in (("target_probs", pv), ("draft_probs", qv)):
                if not np.isfinite(value):
                    _fail(
                        arg,
                        where + f"holds NaN or inf at row {row}, column {d}; it must be finite",
                    )
            if not c.uniform(b, 2 * i) * qv <= pv:
                return row, True
        count += 1
        if d in c.ends or count >= c.max_dec[b]:
            return None, False
        i += 1
    return start + i, False


# ---- apply ---------------------------------------------------------------------------------------
def _apply_request(c: _Call, b: int) -> None:
    """Steps 1-3 of request b: the accept walk, then (unless it stopped) the bonus / correction
    token; writes accept_tokens, step_idx, stop_flags and accept_num."""
    start = c.start(b)
    acc, i, stopped, correction = _accept_drafts(c, b, start, int(c.this_time[b]))
    if not stopped:  # step 3: the bonus / correction token
        token = _bonus_token(c, b, start + i, i, correction)
        if c.one_step_stop:
            c.stop[b] = True
        _emit(c, b, i, token)
    c.n_acc[b] = acc


def _emit(c: _Call, b: int, i: int, token: int) -> bool:
    """ACCEPT(i) / step-3 write; returns True when the request stopped."""
    c.step[b] += 1
    c.accept_tokens[b, i] = token
    if token in c.ends or c.step[b] >= c.max_dec[b]:
        c.stop[b] = True
        if c.step[b] >= c.max_dec[b]:
            c.accept_tokens[b, i] = c.ends[0]
        return True
    return False


def _accept_drafts(c: _Call, b: int, start: int, n: int):
    """The accept walk over request b's n - 1 drafts -> (accept count, position of the bonus /
    correction token, whether an accepted token stopped the request, the "rejection" correction
    token or None)."""
    acc, i = 1, 0
    while i < n - 1 and not c.drafts_skipped(b):
        row = start + i
        d = int(c.draft_tokens[b, i + 1])
        correction = None
        if c.accept_all_drafts:
            ok = True
        elif c.name == "target_match":
            ok = int(c.sampled[row]) == d
        elif c.name in ("topk", "greedy"):
            ok = int(c.verify_tokens[row, 0]) == d
        elif c.name == "rejection":
            ok, correction = _rejection_test(c, b, row, i, d)
        else:  # topp
            m = min(int(c.cand_len[row]), c.verify_tokens.shape[1])
            if d not in [int(t) for t in c.verify_tokens[row, : max(m, 0)]]:
                # every top-2 outcome (and a plain mismatch) ends the walk
                acc, i, stopped = _top2_window(c, b, start, n, i, acc)
                return acc, i, stopped, None
            ok = True
        if not ok:
            return acc, i, False, correction
        if _emit(c, b, i, d):
            return acc, i, True, None
        acc += 1
        i += 1
    return acc, i, False, None


def _rejection_test(c: _Call, b: int, row: int, i: int, d: int):
    """The "rejection" test of draft d at position i -> (accepted, the correction token sampled
    from the residual when rejected, else None)."""
    q = np.float32(1) if c.draft_probs is None else np.float32(c.draft_probs[row, d])
    if c.uniform(b, 2 * i) * q <= np.float32(c.target_probs[row, d]):
        return True, None
    if c.draft_probs is None:
        q_row = np.zeros(c.target_probs.shape[1], np.float32)
        q_row[d] = 1
    else:
        q_row = np.asarray(c.draft_probs[row], np.float32)
    return False, _sample(c.target_probs[row], c.uniform(b, 2 * i + 1), q_row)


def _top2_window(c: _Call, b: int, start: int, n: int, i: int, acc: int):
    """TOPP's top-2 window rule at the mismatching position i: when draft i is the row's
    second candidate and the next ``verify_window`` drafts are their rows' top-1, those (and
    draft i) are accepted, up to a stop. -> (accept count, position, stopped)."""
    row = start + i
    stopped = False
    if c.verify_tokens.shape[1] >= 2 and int(c.verify_tokens[row, 1]) == int(
        c.draft_tokens[b, i + 1]
    ):
        j, ii = 0, i + 1
        while (
            j < c.verify_window
            and ii < n - 1
            and int(c.verify_tokens[start + ii, 0]) == int(c.draft_tokens[b, ii + 1])
        ):
            j += 1
            ii += 1
        if j >= c.verify_window:
            acc += c.verify_window + 1
            c.step[b] += c.verify_window + 1
            k = i
            while k < ii:
                t = int(c.draft_tokens[b, k + 1])
                c.accept_tokens[b, k] = t
                if t in c.ends or c.step[b] >= c.max_dec[b]:
                    c.stop[b] = True
                    stopped = True
                    if c.step[b] >= c.max_dec[b]:
                        c.accept_tokens[b, k] = c.ends[0]
                    acc -= 1
                    c.step[b] -= 1
                    break
                k += 1
            i = k
    return acc, i, stopped


def _bonus_token(c: _Call, b: int, row: int, i: int, correction):
    """Step 3's token at output row ``row`` (position i): the correction, else by strategy."""
    if correction is not None:
        return correction
    if c.name == "target_match":
        return int(c.sampled[row])
    if c.name == "greedy":
        return int(c.verify_tokens[row, 0])
    if c.name == "rejection":
        return _sample(c.target_probs[row], c.uniform(b, 2 * i + 1))
    if c.enable_topp:  # TOPP(row)
        m = min(int(c.cand_len[row]), c.verify_tokens.shape[1])
        u = c.uniform(b, 0) * np.float32(c.top_p[b])
        token, running = int(c.verify_tokens[row, 0]), np.float32(0)
        for k in range(m):
            running = np.float32(running + np.float32(c.verify_scores[row, k]))
            if u <= running:
                return int(c.verify_tokens[row, k])
        return token
    return int(c.verify_tokens[row, 0])
