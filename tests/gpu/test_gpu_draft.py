"""Parity of the CUDA kernels (fd_mtp.cuda, on CuPy) with the numpy references (fd_mtp.reference).

For each op: random valid batches (seeded; several batch sizes, eagle ops in several dtypes and
hidden sizes) run through fd_mtp.cuda.<op> on CuPy copies and fd_mtp.reference.<op> on numpy
copies; every written array and every output must match exactly. Then one bad-input case per
data-dependent error: fd_mtp.cuda raises ValueError naming the argument and writes nothing.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import (
    arrays_of,
    assert_exact,
    assert_parity,
    assert_refused,
    assert_refused_at,
    call,
    compare_all,
    skip_module_without_gpu,
    split,
)

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing.op_inputs import positional  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024]
SEEDS = [0, 1]
EOS = (2, 3)


# ------------------------------------------------------------------------------------------------
# draft_model_preprocess
# ------------------------------------------------------------------------------------------------
PRE_ORDER = list(positional("draft_model_preprocess"))


def preprocess_batch(rng, bsz, *, splitwise=False, truncate=False, v1=False, extra_rows=0):
    K, L = 3, 48
    n = bsz + extra_rows  # per-request buffers may be longer than bsz
    i32 = lambda lo, hi: rng.integers(lo, hi, n).astype(np.int32)  # noqa: E731
    enc = np.where(rng.random(n) < 0.3, rng.integers(1, L - 1, n), 0).astype(np.int32)
    accept_num = rng.integers(0, K + 2, n).astype(np.int32)
    base_step = rng.integers(K + 1, L - 1, n).astype(np.int64)
    return dict(
        draft_tokens=rng.integers(-1, 100, (n, K + 1)).astype(np.int64),
        input_ids=rng.integers(0, 100, (n, L)).astype(np.int64),
        stop_flags=rng.random(n) < 0.3,
        seq_lens_this_time=rng.integers(0, K + 2, bsz).astype(np.int32),
        seq_lens_encoder=enc,
        seq_lens_decoder=i32(0, L),
        step_idx=rng.integers(0, L, n).astype(np.int64),
        not_need_stop=np.array([False]),
        is_block_step=rng.random(n) < 0.1,
        batch_drop=rng.random(n) < 0.1,
        pre_ids=rng.integers(-1, 100, (n, L)).astype(np.int64),
        mask_rollback=i32(0, 4),
        recompute_token_num=i32(0, K + 1),
        accept_tokens=rng.integers(0, 100, (n, K + 1)).astype(np.int64),
        accept_num=accept_num,
        base_model_seq_lens_this_time=i32(0, K + 2),
        base_model_seq_lens_encoder=i32(0, 4),
        base_model_seq_lens_decoder=i32(0, L),
        base_model_step_idx=base_step,
        base_model_stop_flags=rng.random(n) < 0.2,
        base_model_is_block_step=rng.random(n) < 0.2,
        base_model_draft_tokens=rng.integers(-1, 100, (n, K + 1)).astype(np.int64),
        num_model_step=K,
        truncate_first_token=truncate,
        splitwise_prefill=splitwise,
        kvcache_scheduler_v1=v1,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["normal", "v1", "truncate", "splitwise", "splitwise_truncate"])
def test_preprocess_parity(bsz, seed, mode):
    rng = np.random.default_rng([seed, bsz, 1])
    args = preprocess_batch(
        rng,
        bsz,
        splitwise=mode.startswith("splitwise"),
        truncate="truncate" in mode,
        v1=mode == "v1",
        extra_rows=seed * 3,
    )
    assert_parity("draft_model_preprocess", args, PRE_ORDER)


@pytest.mark.parametrize("bsz", [1, 33, 1024])
def test_preprocess_parity_aliased_this_time(bsz):
    """base_model_seq_lens_this_time may be the very array passed as seq_lens_this_time."""
    rng = np.random.default_rng([bsz, 11])
    args = preprocess_batch(rng, bsz)
    args["base_model_seq_lens_this_time"] = args["seq_lens_this_time"]
    host, dev = split(args)
    host["base_model_seq_lens_this_time"] = host["seq_lens_this_time"]
    dev["base_model_seq_lens_this_time"] = dev["seq_lens_this_time"]
    call(ref.draft_model_preprocess, host, PRE_ORDER)
    call(fcuda.draft_model_preprocess, dev, PRE_ORDER)
    compare_all(dev, host, arrays_of(args))


def _running_decode(args, b):
    args["seq_lens_encoder"][b] = 0
    args["base_model_stop_flags"][b] = False
    args["batch_drop"][b] = False


@pytest.mark.parametrize(
    "case, argument",
    [("accept_num", "accept_num"), ("input_ids", "input_ids"), ("pre_ids", "pre_ids")],
)
def test_preprocess_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(5)
    bsz = 257
    args = preprocess_batch(rng, bsz)
    b = 200
    if case == "accept_num":
        _running_decode(args, b)
        args["accept_num"][b] = args["draft_tokens"].shape[1] + 1
    elif case == "input_ids":
        args["base_model_stop_flags"][b] = False
        args["batch_drop"][b] = False
        args["seq_lens_encoder"][b] = args["input_ids"].shape[1]  # column L: past the row
    else:
        _running_decode(args, b)
        args["accept_num"][b] = 2
        args["base_model_step_idx"][b] = 1  # first column 1 - 2 = -1
    assert_refused_at("draft_model_preprocess", args, PRE_ORDER, argument, b)  # nothing written


# ------------------------------------------------------------------------------------------------
# draft_model_update
# ------------------------------------------------------------------------------------------------
UPD_ORDER = list(positional("draft_model_update"))


def update_batch(rng, bsz, *, substep=1, extra_rows=0):
    K, L, MAX_SEQ = 4, 64, 16
    n = bsz + extra_rows
    stop = rng.random(n) < 0.25
    kind = rng.integers(0, 3, n)  # 0 decode, 1 prefill, 2 enc == dec == 0
    q = rng.integers(1, K + 1, n).astype(np.int32)  # <= Dd: the max_dec_len write stays in the row
    q[:bsz][stop[:bsz] & (rng.random(bsz) < 0.5)] = 0  # stopped requests may have q == 0
    enc = np.where(
        kind == 1, rng.integers(1, 20, n), np.where(kind == 0, -rng.integers(0, 2, n), 0)
    )
    dec = np.where(kind == 0, rng.integers(1, 30, n), np.where(kind == 1, rng.integers(0, 5, n), 0))
    step = rng.integers(0, L - K - 2, n).astype(np.int64)
    max_dec = (step + rng.integers(0, 2 * K, n)).astype(np.int64)
    # Packed rows: request b's rows start where b - 1's end.
    starts = np.concatenate([[0], np.cumsum(q[:bsz].astype(np.int64))[:-1]]) if bsz else np.zeros(0)
    total = int(q[:bsz].sum())
    cum = np.zeros(n, dtype=np.int32)
    cum[:bsz] = (np.arange(bsz) * MAX_SEQ - starts).astype(np.int32)
    tokens = rng.integers(0, 40, max(total, 1)).astype(np.int64)  # 2 and 3 are end ids
    return dict(
        inter_next_tokens=tokens.reshape(-1, 1),
        draft_tokens=rng.integers(-1, 100, (n, K)).astype(np.int64),
        pre_ids=rng.integers(-1, 100, (n, L)).astype(np.int64),
        seq_lens_this_time=q[:bsz].copy(),
        seq_lens_encoder=enc.astype(np.int32),
        seq_lens_decoder=dec.astype(np.int32),
        step_idx=step,
        output_cum_offsets=cum,
        stop_flags=stop,
        not_need_stop=np.array([False]),
        max_dec_len=max_dec,
        end_ids=np.array(EOS, dtype=np.int64),
        base_model_draft_tokens=rng.integers(-1, 100, (n, K + 1)).astype(np.int64),
        max_seq_len=MAX_SEQ,
        substep=substep,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("one_step_stop", [False, True])
def test_update_parity(bsz, seed, one_step_stop):
    rng = np.random.default_rng([seed, bsz, 2])
    args = update_batch(rng, bsz, substep=seed % 3, extra_rows=seed * 2)
    assert_parity("draft_model_update", args, UPD_ORDER, prefill_one_step_stop=one_step_stop)


@pytest.mark.parametrize(
    "case, argument",
    [("empty", "seq_lens_this_time"), ("row", "inter_next_tokens"), ("pre_ids", "pre_ids")],
)
def test_update_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(6)
    bsz = 257
    args = update_batch(rng, bsz)
    b = 100
    args["stop_flags"][b] = False
    if case == "empty":
        args["seq_lens_this_time"][b] = 0
    elif case == "row":
        args["output_cum_offsets"][b] = -(10**6)  # start far past the last row
    else:
        args["seq_lens_encoder"][b] = 0
        args["seq_lens_decoder"][b] = 5
        args["step_idx"][b] = args["pre_ids"].shape[1]  # column step + q past the row
    assert_refused_at(
        "draft_model_update", args, UPD_ORDER, argument, b, prefill_one_step_stop=False
    )


# ------------------------------------------------------------------------------------------------
# draft_model_postprocess
# ------------------------------------------------------------------------------------------------
POST_ORDER = [
    "base_model_draft_tokens",
    "base_model_seq_lens_this_time",
    "base_model_seq_lens_encoder",
    "base_model_stop_flags",
]


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_postprocess_parity(bsz, seed):
    rng = np.random.default_rng([seed, bsz, 3])
    n = bsz + seed * 5
    draft = rng.integers(0, 50, (n, 5)).astype(np.int64)
    draft[rng.random(draft.shape) < 0.4] = -1
    this_time = rng.integers(0, 9, bsz).astype(np.int32)
    args = dict(
        base_model_draft_tokens=draft,
        base_model_seq_lens_this_time=this_time.reshape(-1, 1) if seed else this_time,
        base_model_seq_lens_encoder=np.where(rng.random(n) < 0.3, rng.integers(1, 9, n), 0).astype(
            np.int32
        ),
        base_model_stop_flags=rng.random(n) < 0.3,
    )
    assert_parity("draft_model_postprocess", args, POST_ORDER)


# ------------------------------------------------------------------------------------------------
# eagle_get_hidden_states / eagle_get_self_hidden_states
# ------------------------------------------------------------------------------------------------
DTYPES = ["float32", "float16", "bfloat16"]
HIDDENS = [8, 129, 1024]
EAGLE_BATCHES = [1, 7, 33, 257, 600, 1024]


def hidden_input(rng, rows, hidden, dtype):
    if dtype == "bfloat16":  # bfloat16 as its uint16 bit patterns: a row gather is bit exact
        return rng.integers(0, 2**16, (rows, hidden), dtype=np.uint16)
    return rng.standard_normal((rows, hidden)).astype(dtype)


EAGLE_ORDER = list(positional("eagle_get_hidden_states"))


def eagle_batch(rng, bsz, hidden, dtype, slack=2):
    K = 3
    kind = rng.integers(0, 4, bsz)  # 0 prefill, 1 skip, 2 nothing, 3 decode
    enc = np.where(kind == 0, rng.integers(1, 6, bsz), 0).astype(np.int32)
    base_this = np.where(kind == 2, 0, rng.integers(1, K + 2, bsz)).astype(np.int32)
    base_this[kind == 0] = rng.integers(0, K + 2, int((kind == 0).sum()))
    this_time = np.where(kind == 1, 0, np.where(kind == 2, 0, rng.integers(1, K + 2, bsz))).astype(
        np.int32
    )
    acc = (rng.random(bsz) * (base_this + 1)).astype(np.int32)  # in [0, base_this]
    in_rows = int(np.where(kind == 0, enc, base_this).sum())
    return dict(
        input=hidden_input(rng, in_rows + slack, hidden, dtype),
        seq_lens_this_time=this_time,
        seq_lens_encoder=enc,
        seq_lens_decoder=rng.integers(0, 10, bsz).astype(np.int32),
        stop_flags=rng.random(bsz) < 0.5,
        accept_nums=acc,
        base_model_seq_lens_this_time=base_this,
        base_model_seq_lens_encoder=rng.integers(0, 10, bsz).astype(np.int32),
        actual_draft_token_num=K,
    )


@pytest.mark.parametrize("bsz", EAGLE_BATCHES)
@pytest.mark.parametrize("hidden", HIDDENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eagle_hidden_states_parity(bsz, hidden, dtype):
    rng = np.random.default_rng([bsz, hidden, DTYPES.index(dtype), 4])
    args = eagle_batch(rng, bsz, hidden, dtype)
    host, dev = split(args)
    expected = call(ref.eagle_get_hidden_states, host, EAGLE_ORDER)
    got = call(fcuda.eagle_get_hidden_states, dev, EAGLE_ORDER)
    assert isinstance(got, cp.ndarray)
    assert_exact(cp.asnumpy(got), expected, "out")
    compare_all(dev, host, arrays_of(args))  # inputs untouched


def test_eagle_hidden_states_empty_batch_and_no_rows():
    rng = np.random.default_rng(40)
    args = eagle_batch(rng, 5, 8, "float32", slack=0)
    args["seq_lens_this_time"][:] = 0
    args["seq_lens_encoder"][:] = 0
    args["base_model_seq_lens_this_time"][:] = 0
    args["input"] = args["input"][:0]
    host, dev = split(args)
    got = call(fcuda.eagle_get_hidden_states, dev, EAGLE_ORDER)
    assert_exact(cp.asnumpy(got), call(ref.eagle_get_hidden_states, host, EAGLE_ORDER), "out")


def test_eagle_hidden_states_bad_accept_nums():
    args = eagle_batch(np.random.default_rng(41), 600, 8, "float32")
    b = 500
    args["seq_lens_encoder"][b] = 0
    args["seq_lens_this_time"][b] = 1
    args["base_model_seq_lens_this_time"][b] = 2
    args["accept_nums"][b] = 3
    assert_refused_at("eagle_get_hidden_states", args, EAGLE_ORDER, "accept_nums", b)


SELF_ORDER = ["input", "last_seq_lens_this_time", "seq_lens_this_time", "step_idx"]


def self_batch(rng, bsz, hidden, dtype, slack=2, extra_rows=0):
    n = bsz + extra_rows
    q = np.where(rng.random(bsz) < 0.7, 1, 0).astype(np.int32)
    last = rng.integers(0, 5, n).astype(np.int32)
    step = np.where(rng.random(n) < 0.3, 1, rng.integers(2, 50, n)).astype(np.int64)
    run_decode = (q > 0) & (step[:bsz] != 1) & (last[:bsz] == 0)
    last[:bsz][run_decode] = 1 + rng.integers(0, 4, int(run_decode.sum()))
    rows = 0
    for b in range(bsz):
        rows += (1 if last[b] > 0 or q[b] > 0 else 0) if step[b] == 1 else int(last[b])
    return dict(
        input=hidden_input(rng, rows + slack, hidden, dtype),
        last_seq_lens_this_time=last,
        seq_lens_this_time=q,
        step_idx=step,
    )


@pytest.mark.parametrize("bsz", EAGLE_BATCHES)
@pytest.mark.parametrize("hidden", HIDDENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_eagle_self_hidden_states_parity(bsz, hidden, dtype):
    rng = np.random.default_rng([bsz, hidden, DTYPES.index(dtype), 5])
    args = self_batch(rng, bsz, hidden, dtype, extra_rows=bsz % 3)
    host, dev = split(args)
    expected = call(ref.eagle_get_self_hidden_states, host, SELF_ORDER)
    got = call(fcuda.eagle_get_self_hidden_states, dev, SELF_ORDER)
    assert_exact(cp.asnumpy(got), expected, "out")
    compare_all(dev, host, arrays_of(args))


def test_eagle_self_hidden_states_bad_last_seq_lens():
    args = self_batch(np.random.default_rng(51), 257, 8, "float16")
    b = 7
    args["seq_lens_this_time"][b] = 1
    args["step_idx"][b] = 9
    args["last_seq_lens_this_time"][b] = 0
    name = "last_seq_lens_this_time"
    assert_refused_at("eagle_get_self_hidden_states", args, SELF_ORDER, name, b)


# (the op, its batch, its argument order, how many rows too few)
SHORT_INPUT = {
    "eagle_get_hidden_states": (
        lambda: eagle_batch(np.random.default_rng(41), 600, 8, "float32"),
        EAGLE_ORDER,
        4,
    ),
    "eagle_get_self_hidden_states": (
        lambda: self_batch(np.random.default_rng(51), 257, 8, "float16"),
        SELF_ORDER,
        5,
    ),
}


@pytest.mark.parametrize("op", sorted(SHORT_INPUT))
def test_eagle_input_with_fewer_rows_than_the_requests_consume(op):
    make, order, missing = SHORT_INPUT[op]
    args = make()
    args["input"] = args["input"][: max(args["input"].shape[0] - missing, 0)].copy()
    assert_refused(op, args, order, rf"{op}: input the requests consume")


# ------------------------------------------------------------------------------------------------
# mtp_step_paddle
# ------------------------------------------------------------------------------------------------
MTP_ORDER = list(positional("mtp_step_paddle"))


def mtp_batch(rng, bsz, *, free_len=None, extra_rows=0):
    NB, BS, K = 8, 4, 2
    n = bsz + extra_rows
    enc_blocks = rng.integers(0, NB // 2, n).astype(np.int32)
    used = (rng.random(n) * (NB - enc_blocks)).astype(np.int32)  # enc + used <= NB
    tables = np.full((n, NB), -1, dtype=np.int32)
    next_id = 0
    for b in range(n):
        k = int(enc_blocks[b] + used[b])
        tables[b, :k] = np.arange(next_id, next_id + k)
        next_id += k
    dec = rng.integers(0, NB * BS, n).astype(np.int32)
    if free_len is None:
        free_len = int(rng.integers(0, bsz + 1))
    capacity = free_len + int(used.sum()) + 4
    free_list = np.arange(10**5, 10**5 + capacity, dtype=np.int32)
    return dict(
        base_model_stop_flags=rng.random(n) < 0.2,
        stop_flags=rng.random(n) < 0.2,
        batch_drop=rng.random(n) < 0.1,
        seq_lens_this_time=rng.integers(0, K + 2, bsz).astype(np.int32),
        seq_lens_encoder=rng.integers(0, 10, n).astype(np.int32),
        seq_lens_decoder=dec,
        block_tables=tables,
        encoder_block_lens=enc_blocks,
        used_list_len=used,
        free_list=free_list,
        free_list_len=np.array([free_len], dtype=np.int32),
        block_size=BS,
        max_draft_tokens=K,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scarce", [False, True])
def test_mtp_step_parity(bsz, seed, scarce):
    rng = np.random.default_rng([seed, bsz, int(scarce), 6])
    # scarce: few free blocks, so requests are preempted; otherwise enough for everyone.
    free_len = int(rng.integers(0, max(bsz // 8, 1) + 1)) if scarce else bsz
    args = mtp_batch(rng, bsz, free_len=free_len, extra_rows=seed)
    assert_parity("mtp_step_paddle", args, MTP_ORDER, skip_if_refused=True)


@pytest.mark.parametrize(
    "case, argument",
    [
        ("exhausted", "free_list"),
        ("full", "free_list"),
        ("used", "used_list_len"),
        ("free_len", "free_list_len"),
    ],
)
def test_mtp_step_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(61)
    bsz = 33
    args = mtp_batch(rng, bsz, free_len=4)
    if case == "exhausted":  # everyone needs a block, nothing free, nothing held
        args["base_model_stop_flags"][:] = False
        args["batch_drop"][:] = False
        args["used_list_len"][:] = 0
        args["encoder_block_lens"][:] = 0
        args["block_tables"][:] = -1
        args["seq_lens_decoder"][:] = 0
        args["free_list_len"][0] = 0
    elif case == "full":  # a stopped request returns blocks to a free list with no room
        b = 3
        args["base_model_stop_flags"][b] = True
        args["used_list_len"][b] = 2
        args["encoder_block_lens"][b] = 0
        args["free_list"] = args["free_list"][: int(args["free_list_len"][0]) + 1].copy()
    elif case == "used":
        args["used_list_len"][5] = args["block_tables"].shape[1] + 1
    else:
        args["free_list_len"][0] = args["free_list"].size + 1
    assert_refused("mtp_step_paddle", args, MTP_ORDER, rf"mtp_step_paddle: {argument}")


# The kernel runs one block that walks the batch in chunks of its threads: prefix sums for the
# free-list appends, the need list and the pops, a block arg-max per victim. The cases below
# cover batches past one chunk, many victims, ties in holdings and every error status.
MTP_BATCHES = [1, 7, 33, 257, 1000, 4097]
MTP_NB, MTP_BS, MTP_K = 8, 4, 2


def mtp_crowded_batch(rng, bsz, *, max_used=3, free_len=0, p_stop=0.1, p_drop=0.05, p_need=0.9):
    """A batch where most running requests need a block (their next slot is the first free one),
    holdings are small (many ties) and free_len is small, so step 3 preempts many requests. Every
    request's encoder + decode blocks fit the row and its next slot stays inside it."""
    enc_blocks = rng.integers(0, 3, bsz).astype(np.int32)
    used = rng.integers(0, max_used + 1, bsz).astype(np.int32)
    assert int((enc_blocks + used).max(initial=0)) < MTP_NB
    tables = np.full((bsz, MTP_NB), -1, dtype=np.int32)
    held = enc_blocks + used
    ids = np.arange(int(held.sum()), dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(held)[:-1]]).astype(np.int64)
    for b in range(bsz):
        tables[b, : held[b]] = ids[starts[b] : starts[b] + held[b]]
    # slot (dec + K + 1) // BS: the first free slot (needs a block) or the last held one (not).
    needy = rng.random(bsz) < p_need
    slot = np.where(needy | (held == 0), held, held - 1).astype(np.int64)
    dec = slot * MTP_BS - MTP_K - 1 + rng.integers(0, MTP_BS, bsz)
    dec = np.maximum(dec, 0).astype(np.int32)
    assert np.array_equal((dec.astype(np.int64) + MTP_K + 1) // MTP_BS, slot)
    capacity = free_len + int(used.sum()) + 4
    return dict(
        base_model_stop_flags=rng.random(bsz) < p_stop,
        stop_flags=rng.random(bsz) < 0.2,
        batch_drop=rng.random(bsz) < p_drop,
        seq_lens_this_time=rng.integers(0, MTP_K + 2, bsz).astype(np.int32),
        seq_lens_encoder=rng.integers(0, 10, bsz).astype(np.int32),
        seq_lens_decoder=dec,
        block_tables=tables,
        encoder_block_lens=enc_blocks,
        used_list_len=used,
        free_list=np.arange(10**5, 10**5 + capacity, dtype=np.int32),
        free_list_len=np.array([free_len], dtype=np.int32),
        block_size=MTP_BS,
        max_draft_tokens=MTP_K,
    )


def mtp_set_free_len(args, free_len):
    """free_len free blocks, and room in the free list for every decode block held plus 4."""
    capacity = free_len + int(args["used_list_len"].sum()) + 4
    args["free_list"] = np.arange(10**5, 10**5 + capacity, dtype=np.int32)
    args["free_list_len"][0] = free_len


def mtp_shortfall(args):
    """Blocks needed beyond what the free list, step 1 and every possible victim can give."""
    running = ~(args["base_model_stop_flags"] | args["batch_drop"])
    dec = args["seq_lens_decoder"].astype(np.int64)
    slot = (dec + args["max_draft_tokens"] + 1) // args["block_size"]
    rows = np.arange(slot.size)
    inside = slot < args["block_tables"].shape[1]
    needy = running & inside
    needy[inside] &= args["block_tables"][rows[inside], slot[inside]] == -1
    return int(needy.sum()) - int(args["used_list_len"].sum())


def mtp_expected_status(args):
    """(code, request, value, limit) of mtp_step_check (custom_ops/kernels/mtp_step.h), or None:
    the sequential check the kernel must reproduce exactly, first failing request first."""
    stop = args["base_model_stop_flags"].reshape(-1)
    drop = args["batch_drop"].reshape(-1)
    dec = args["seq_lens_decoder"].reshape(-1)
    enc = args["encoder_block_lens"].reshape(-1)
    used = args["used_list_len"].reshape(-1)
    tables = args["block_tables"]
    nb = tables.shape[1]
    capacity = args["free_list"].size
    free_len = int(args["free_list_len"][0])
    bsz = args["seq_lens_this_time"].size
    k, bs = args["max_draft_tokens"], args["block_size"]
    if free_len < 0 or free_len > capacity:
        return (4, -1, free_len, capacity)
    released = preemptible = need = 0
    for b in range(bsz):
        u, e = int(used[b]), int(enc[b])
        if u < 0 or e < 0 or e + u > nb:
            return (3, b, u, nb - max(e, 0))
        if stop[b] or drop[b]:
            released += u
            continue
        if dec[b] < 0:
            return (5, b, int(dec[b]), 0)
        preemptible += u
        slot = (int(dec[b]) + k + 1) // bs
        need += 0 <= slot < nb and tables[b, slot] == -1
    if need > free_len + released + preemptible:
        return (1, -1, need, free_len + released + preemptible)
    free_after = free_len + released
    order = sorted((-int(used[b]), b) for b in range(bsz) if not (stop[b] or drop[b]))
    for neg_used, _ in order:
        if need <= free_after:
            break
        free_after -= neg_used
    if free_after > capacity:
        return (2, -1, free_after, capacity)
    return None


def mtp_check_outcome(args):
    """Runs the kernel on device copies of args: on success every written array must equal the
    reference's; on an expected error the message must be the sequential check's (same code,
    request, value and limit) and nothing may be written. Returns the expected status."""
    from fd_mtp import schema

    expected = mtp_expected_status(args)
    host, dev = split(args)
    if expected is None:
        call(ref.mtp_step_paddle, host, MTP_ORDER)
        call(fcuda.mtp_step_paddle, dev, MTP_ORDER)
    else:
        message = schema.get("mtp_step_paddle").format_status(*expected)
        with pytest.raises(ValueError) as err:
            call(fcuda.mtp_step_paddle, dev, MTP_ORDER)
        assert str(err.value) == message
    compare_all(dev, host, arrays_of(args))
    return expected


def newly_dropped(args_before, dev):
    return int((cp.asnumpy(dev["batch_drop"]) & ~args_before["batch_drop"]).sum())


@pytest.mark.parametrize("bsz", MTP_BATCHES)
@pytest.mark.parametrize("max_used", [1, 3, 5])
def test_mtp_step_heavy_preemption(bsz, max_used):
    rng = np.random.default_rng([bsz, max_used, 62])
    args = mtp_crowded_batch(rng, bsz, max_used=max_used, p_stop=0.02, p_drop=0.01)
    mtp_set_free_len(args, max(int(rng.integers(0, 3)), mtp_shortfall(args)))
    assert mtp_expected_status(args) is None  # blocks suffice after preemption
    _, dev = assert_parity("mtp_step_paddle", args, MTP_ORDER)
    victims = newly_dropped(args, dev)
    if bsz >= 33:  # the case is what it claims: step 3 preempts many requests
        assert victims >= bsz // (4 * max_used), victims


@pytest.mark.parametrize("bsz", MTP_BATCHES)
def test_mtp_step_equal_holdings_preempt_lowest_indices_first(bsz):
    # Every request holds 2 decode blocks and needs one, nothing is free: each victim frees 2
    # and stays in the need list, so the first ceil(bsz / 2) requests (ties: lowest index) are
    # dropped and each remaining one takes a block.
    rng = np.random.default_rng([bsz, 63])
    args = mtp_crowded_batch(rng, bsz, max_used=0, p_stop=0, p_drop=0, p_need=1)
    args["used_list_len"][:] = 2
    held = args["encoder_block_lens"] + 2
    args["block_tables"][:] = -1
    for b in range(bsz):
        args["block_tables"][b, : held[b]] = np.arange(held[b]) + 10 * b
    args["seq_lens_decoder"][:] = held * MTP_BS - MTP_K - 1
    mtp_set_free_len(args, 0)
    victims = (bsz + 1) // 2
    assert mtp_check_outcome(args) is None
    host, dev = split(args)
    call(fcuda.mtp_step_paddle, dev, MTP_ORDER)
    drop = cp.asnumpy(dev["batch_drop"])
    assert drop[:victims].all() and not drop[victims:].any()
    assert int(cp.asnumpy(dev["free_list_len"])[0]) == 2 * victims - (bsz - victims)


@pytest.mark.parametrize("bsz", MTP_BATCHES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mtp_step_exhaustion_and_full_free_list(bsz, seed):
    rng = np.random.default_rng([bsz, seed, 64])
    # Exhausted: nothing free and too few blocks held (OutOfBlocks), or just enough (success).
    args = mtp_crowded_batch(rng, bsz, max_used=1, free_len=0, p_stop=0.05, p_need=1)
    expected = mtp_check_outcome(args)
    if bsz >= 7:
        assert expected is not None and expected[0] == 1, expected
    # Full: the free list has one entry less than the preemption's returns need (FreeListFull),
    # or exactly as many (success).
    for spare in (-1, 0):
        args = mtp_crowded_batch(rng, bsz, max_used=4)
        mtp_set_free_len(args, max(int(rng.integers(0, 4)), mtp_shortfall(args)))
        assert mtp_expected_status(args) is None
        free_len = int(args["free_list_len"][0])
        args["free_list"] = args["free_list"][:free_len].copy()
        full = mtp_expected_status(args)  # (2, -1, entries the returns fill, capacity) or None
        free_after = free_len if full is None else full[2]
        args["free_list"] = np.arange(10**5, 10**5 + free_after + spare, dtype=np.int32)
        expected = mtp_check_outcome(args)
        assert (expected is None) == (spare == 0), expected
        if bsz >= 7 and spare < 0:
            assert expected[0] == 2, expected


@pytest.mark.parametrize(
    "bad", [[5], [300, 4000], [4000, 300, 45], [45, 45 + 256, 45 + 512], [4096, 0]]
)
@pytest.mark.parametrize("kind", ["used", "negative_decoder", "mixed"])
def test_mtp_step_first_bad_request_is_reported(bad, kind):
    # Bad requests in different threads of the block and in one thread's later chunks: the
    # report names the first in batch order, with its own value and limit, as the CPU does.
    bsz = 4097
    rng = np.random.default_rng([len(bad), bad[0], 65])
    args = mtp_crowded_batch(rng, bsz, free_len=bsz)
    args["base_model_stop_flags"][bad] = False
    args["batch_drop"][bad] = False
    for j, b in enumerate(bad):
        if kind == "used" or (kind == "mixed" and j % 2 == 0):
            args["used_list_len"][b] = MTP_NB - args["encoder_block_lens"][b] + 1 + j
        else:
            args["seq_lens_decoder"][b] = -1 - j
    expected = mtp_check_outcome(args)
    assert expected is not None and expected[1] == min(bad), expected


def test_mtp_step_negative_decoder_of_a_stopped_request_is_no_error():
    rng = np.random.default_rng(66)
    args = mtp_crowded_batch(rng, 1000, free_len=3)
    args["base_model_stop_flags"][[10, 700]] = True
    args["seq_lens_decoder"][[10, 700]] = -5
    assert mtp_check_outcome(args) is None


def test_mtp_step_free_list_len_out_of_range_comes_first():
    # free_list_len is checked before any request (a bad request later is not reported).
    rng = np.random.default_rng(67)
    args = mtp_crowded_batch(rng, 257, free_len=2)
    args["used_list_len"][3] = MTP_NB + 1
    for bad_len in (-1, args["free_list"].size + 1):
        args["free_list_len"][0] = bad_len
        assert mtp_check_outcome(args)[0] == 4
