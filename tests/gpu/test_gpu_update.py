"""Parity of the CUDA kernels of the target-side update ops (fd_mtp.cuda, on CuPy) with the numpy
references (fd_mtp.reference): speculate_set_stop_value_multi_seqs, speculate_update,
speculate_set_value_by_flags_and_idx, speculate_clear_accept_nums (spec §5.8, §5.10, §5.12, §5.16).

Seeded random valid batches (batch sizes up to 2049: several blocks of the grid-stride loops, far
above upstream's 512 cap; [B] and [B, 1] per-request shapes; per-request buffers longer than the
batch) run through fd_mtp.cuda.<op> on CuPy copies and fd_mtp.reference.<op> on numpy copies;
every array must match exactly. These ops carry only integer and bool tensors (no float dtype).
Then one bad-input case per data-dependent check: ValueError naming the argument, nothing written.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import assert_parity, assert_refused, assert_refused_at, skip_module_without_gpu

skip_module_without_gpu()

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp.schema import get as schema_op  # noqa: E402
from fd_mtp.schema import python_signature  # noqa: E402
from fd_mtp.testing.op_inputs import positional  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024, 2049]
SEEDS = [0, 1]


def per(values, column):
    return values.reshape(-1, 1) if column else values


# ------------------------------------------------------------------------------------------------
# speculate_set_stop_value_multi_seqs
# ------------------------------------------------------------------------------------------------
STOP_ORDER = list(positional("speculate_set_stop_value_multi_seqs"))


def stop_batch(rng, bs, column=False, extra_rows=0, wa=4, n_seqs=3, ls=4, lp=32, vocab=4):
    n = bs + extra_rows
    a = rng.integers(0, wa + 1, n)
    t = np.maximum(a - 2 + rng.integers(0, lp + 2, n), 0)  # t - a < lp
    return dict(
        accept_tokens=rng.integers(0, vocab, (bs, wa)).astype(np.int64),
        accept_num=per(a.astype(np.int32), column),
        pre_ids=rng.integers(-1, vocab, (n, lp)).astype(np.int64),
        step_idx=per(t.astype(np.int64), column),
        stop_flags=per(rng.random(n) < 0.2, column),
        seq_lens=np.zeros(n, np.int32),
        stop_seqs=rng.integers(0, vocab, (n, n_seqs, ls)).astype(np.int64),
        stop_seqs_len=rng.integers(0, ls + 1, (n, n_seqs)).astype(np.int32),
        end_ids=np.array([99, 98], np.int64),
    )


@pytest.mark.parametrize("bs", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_set_stop_value_parity(bs, seed):
    rng = np.random.default_rng([seed, bs, 58])
    args = stop_batch(rng, bs, column=bool(seed), extra_rows=2 * seed)
    host, _ = assert_parity("speculate_set_stop_value_multi_seqs", args, STOP_ORDER)
    if bs >= 33:
        assert (host["stop_flags"] != args["stop_flags"]).any(), "the batch must exercise hits"


@pytest.mark.parametrize("bs", BATCHES)
@pytest.mark.parametrize("lens_shape", ["flat", "column"])
def test_set_stop_value_two_dimensional_form_parity(bs, lens_shape):
    """stop_seqs [bs, Ls] with stop_seqs_len [bs] (or [bs, 1]): one stop sequence per request."""
    rng = np.random.default_rng([bs, 59])
    args = stop_batch(rng, bs, n_seqs=1)
    n = args["stop_seqs"].shape[0]
    args["stop_seqs"] = args["stop_seqs"].reshape(n, -1)
    args["stop_seqs_len"] = args["stop_seqs_len"].reshape((n,) if lens_shape == "flat" else (n, 1))
    assert_parity("speculate_set_stop_value_multi_seqs", args, STOP_ORDER)


def test_set_stop_value_two_dimensional_form_with_several_lengths_is_refused():
    args = stop_batch(np.random.default_rng(60), 7, n_seqs=2)
    args["stop_seqs"] = args["stop_seqs"][:, 0, :].copy()  # 2-D, but 2 lengths per request
    assert_refused(
        "speculate_set_stop_value_multi_seqs",
        args,
        STOP_ORDER,
        "speculate_set_stop_value_multi_seqs: stop_seqs_len",
    )


@pytest.mark.parametrize(
    "case, argument",
    [("accept_num", "accept_num"), ("len", "stop_seqs_len"), ("pre_ids", "pre_ids")],
)
def test_set_stop_value_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(7)
    args = stop_batch(rng, 600)
    b = 555
    args["stop_flags"][b] = False
    if case == "accept_num":
        args["accept_num"][b] = args["accept_tokens"].shape[1] + 1
    elif case == "len":
        args["stop_seqs_len"][b, 1] = args["stop_seqs"].shape[2] + 1
    else:
        args["stop_seqs_len"][b] = 2
        args["accept_num"][b] = 1
        args["step_idx"][b] = args["pre_ids"].shape[1] + 1  # compares pre_ids[Lp]
    assert_refused_at("speculate_set_stop_value_multi_seqs", args, STOP_ORDER, argument, b)


# ------------------------------------------------------------------------------------------------
# speculate_update
# ------------------------------------------------------------------------------------------------
UPDATE_ORDER = list(positional("speculate_update"))


def update_batch(rng, max_bsz, real_bsz, d=4, wa=4, column=False, stop_nums=None):
    kind = rng.integers(0, 3, max_bsz)  # 0 decode, 1 prefill, 2 stopped
    enc = np.where(
        kind == 1,
        rng.integers(1, 30, max_bsz),
        np.where(kind == 2, rng.integers(0, 2, max_bsz) * 3, 0),
    )
    this_time = np.where(kind == 1, enc, rng.integers(0, d + 1, max_bsz))
    return dict(
        seq_lens_encoder=per(enc.astype(np.int32), column),
        seq_lens_decoder=per(rng.integers(0, 100, max_bsz).astype(np.int32), column),
        not_need_stop=np.array([False]),
        draft_tokens=rng.integers(-1, 100, (max_bsz, d)).astype(np.int64),
        actual_draft_token_nums=rng.integers(0, d + 2, max_bsz).astype(np.int32),
        accept_tokens=rng.integers(0, 100, (max_bsz, wa)).astype(np.int64),
        accept_num=rng.integers(0, wa + 1, max_bsz).astype(np.int32),
        stop_flags=per(kind == 2, column),
        seq_lens_this_time=per(this_time[:real_bsz].astype(np.int32), column),
        is_block_step=rng.random(max_bsz) < 0.1,
        stop_nums=np.array([max_bsz if stop_nums is None else stop_nums], np.int64),
        mask_rollback=rng.integers(0, 5, max_bsz).astype(np.int32),
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_update_parity(bsz, seed):
    rng = np.random.default_rng([seed, bsz, 510])
    real = bsz if seed == 0 else max(0, bsz - 5)
    args = update_batch(rng, bsz, real, wa=4 + 2 * seed, column=bool(seed))
    assert_parity("speculate_update", args, UPDATE_ORDER)


@pytest.mark.parametrize("bsz", [600, 2049])
def test_update_not_need_stop_at_the_threshold(bsz):
    """stop_nums set to the stopped count (flag False) and one more (True): the device count is exact."""
    rng = np.random.default_rng([bsz, 511])
    args = update_batch(rng, bsz, bsz - 3)
    stop, block = args["stop_flags"], args["is_block_step"]
    count = int(np.count_nonzero(stop[: bsz - 3] & ~block[: bsz - 3])) + 3
    for stop_nums, expected in ((count, False), (count + 1, True)):
        args["stop_nums"] = np.array([stop_nums], np.int64)
        _, dev = assert_parity("speculate_update", args, UPDATE_ORDER)
        assert bool(dev["not_need_stop"][0]) is expected


def test_update_stop_nums_on_the_host():
    """stop_nums is read on the host: a numpy array works as well as a CuPy one (split's default)."""
    rng = np.random.default_rng(512)
    args = update_batch(rng, 300, 300)
    assert_parity("speculate_update", args, UPDATE_ORDER, host_side={"stop_nums"})


def test_update_bad_accept_num_writes_nothing():
    rng = np.random.default_rng(513)
    args = update_batch(rng, 1024, 1000)
    b = 777
    args["is_block_step"][b] = False
    args["accept_num"][b] = -1
    assert_refused_at("speculate_update", args, UPDATE_ORDER, "accept_num", b)


# ------------------------------------------------------------------------------------------------
# speculate_set_value_by_flags_and_idx
# ------------------------------------------------------------------------------------------------
SET_VALUE_ORDER = list(positional("speculate_set_value_by_flags_and_idx"))


def set_value_batch(rng, bs, extra_rows=0, wa=4, lp=64, column=False):
    n = bs + extra_rows
    a = rng.integers(0, wa + 1, n)
    step = np.maximum(a - 1, 0) + rng.integers(0, lp - wa, n)
    step[rng.random(n) < 0.1] = 0
    return dict(
        pre_ids_all=rng.integers(-1, 100, (n, lp)).astype(np.int64),
        accept_tokens=rng.integers(100, 200, (n, wa)).astype(np.int64),
        accept_num=per(a.astype(np.int32), column),
        stop_flags=per(rng.random(n) < 0.25, column),
        seq_lens_this_time=per(rng.integers(0, 5, bs).astype(np.int32), column),
        seq_lens_encoder=per(
            np.where(rng.random(n) < 0.2, rng.integers(1, 9, n), 0).astype(np.int32), column
        ),
        seq_lens_decoder=per(
            np.where(rng.random(n) < 0.8, rng.integers(1, 50, n), 0).astype(np.int32), column
        ),
        step_idx=per(step.astype(np.int64), column),
    )


@pytest.mark.parametrize("bs", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_set_value_parity(bs, seed):
    rng = np.random.default_rng([seed, bs, 512])
    args = set_value_batch(rng, bs, extra_rows=3 * seed, column=bool(seed))
    assert_parity("speculate_set_value_by_flags_and_idx", args, SET_VALUE_ORDER)


@pytest.mark.parametrize(
    "case, argument",
    [("accept_num", "accept_num"), ("last", "pre_ids_all"), ("first", "pre_ids_all")],
)
def test_set_value_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(514)
    args = set_value_batch(rng, 700)
    b = 650
    args["stop_flags"][b] = False
    args["seq_lens_decoder"][b] = 5
    args["step_idx"][b] = 3
    if case == "accept_num":
        args["accept_num"][b] = args["accept_tokens"].shape[1] + 1
    elif case == "last":
        args["accept_num"][b] = 1
        args["step_idx"][b] = args["pre_ids_all"].shape[1]
    else:
        args["accept_num"][b] = 4
        args["step_idx"][b] = 2  # first column 2 - 4 + 1 = -1
    op = "speculate_set_value_by_flags_and_idx"
    assert_refused_at(op, args, SET_VALUE_ORDER, argument, b)


# ------------------------------------------------------------------------------------------------
# speculate_clear_accept_nums
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", BATCHES)
def test_clear_accept_nums_parity(bsz):
    rng = np.random.default_rng([bsz, 516])
    args = dict(
        accept_num=rng.integers(-2, 6, bsz + 3).astype(np.int32),
        seq_lens_decoder=rng.integers(0, 3, bsz).astype(np.int32),
    )
    assert_parity("speculate_clear_accept_nums", args, ["accept_num", "seq_lens_decoder"])


def test_clear_accept_nums_bad_shape():
    import cupy as cp

    with pytest.raises(ValueError, match="speculate_clear_accept_nums: accept_num"):
        fcuda.speculate_clear_accept_nums(cp.zeros(2, cp.int32), cp.zeros(3, cp.int32))


# ------------------------------------------------------------------------------------------------
# speculate_calcu_accept_ratio
# ------------------------------------------------------------------------------------------------
RATIO_ORDER = python_signature(schema_op("speculate_calcu_accept_ratio"))[0]


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_calcu_accept_ratio_parity(bsz, seed):
    """One block walks the whole batch (no 512 cap): the totals equal the reference's."""
    rng = np.random.default_rng([bsz, seed, 1600])
    this_time = rng.integers(0, 6, bsz).astype(np.int32)
    dec = np.where(rng.random(bsz) < 0.2, 0, rng.integers(1, 300, bsz)).astype(np.int32)
    args = dict(
        sum_draft_num=np.array([int(rng.integers(0, 10**6))], np.int32),
        sum_accept_num=np.array([int(rng.integers(0, 10**6))], np.int32),
        accept_nums=rng.integers(0, 6, bsz + 2).astype(np.int32),
        seq_lens_this_time=per(this_time, seed == 1),
        seq_lens_decoder=np.where(rng.random(bsz) < 0.1, this_time, dec).astype(np.int32),
        stop_flags=rng.random(bsz) < 0.2,
    )
    assert_parity("speculate_calcu_accept_ratio", args, RATIO_ORDER)


def test_calcu_accept_ratio_overflow_writes_nothing():

    args = dict(
        sum_draft_num=np.array([2**31 - 2], np.int32),
        sum_accept_num=np.array([0], np.int32),
        accept_nums=np.array([4], np.int32),
        seq_lens_this_time=np.array([4], np.int32),
        seq_lens_decoder=np.array([9], np.int32),
        stop_flags=np.array([False]),
    )
    assert_refused(
        "speculate_calcu_accept_ratio",
        args,
        RATIO_ORDER,
        "speculate_calcu_accept_ratio: sum_draft_num would",
    )
    assert args["sum_draft_num"].tolist() == [2**31 - 2]
