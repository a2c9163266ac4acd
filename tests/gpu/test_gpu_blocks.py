"""Parity of the block managers' CUDA kernels (fd_mtp.cuda, on CuPy) with the numpy references:
speculate_schedule_cache, recover_decode_task (both variants), speculate_step_paddle (with
preemption and recovery) and its variants speculate_step_system_cache and
speculate_step_reschedule. Seeded random batches including batch > 512 (no batch cap); every
written array must match exactly; then one bad-input case per op: ValueError naming the
argument, nothing written.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module; skipped otherwise (never fails). Needs neither
paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import assert_parity, assert_refused, skip_module_without_gpu

skip_module_without_gpu()

from fd_mtp.testing.builders.blocks import pool_tables  # noqa: E402
from fd_mtp.testing.op_inputs import positional  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024]
SEEDS = [0, 1]


# ------------------------------------------------------------------------------------------------
# speculate_schedule_cache
# ------------------------------------------------------------------------------------------------
SCHEDULE_ORDER = list(positional("speculate_schedule_cache"))


def schedule_batch(rng, bsz, extra=3, k=3, bs=16, nb=6):
    m = bsz + extra
    return dict(
        draft_tokens=rng.integers(0, 1000, (m, k + 1)),
        block_tables=np.where(
            rng.random((m, nb)) < 0.3, -1, rng.integers(0, 10**4, (m, nb))
        ).astype(np.int32),
        stop_flags=rng.random(m) < 0.2,
        prompt_lens=rng.integers(0, nb * bs, m).astype(np.int64),
        seq_lens_this_time=rng.integers(0, k + 2, bsz).astype(np.int32),
        seq_lens_encoder=rng.integers(0, 5, m).astype(np.int32),
        seq_lens_decoder=rng.integers(0, nb * bs + 4, m).astype(np.int32),
        step_seq_lens_decoder=np.zeros(m, np.int32),
        step_draft_tokens=np.full((m, k + 2), -7, np.int64),
        step_seq_lens_this_time=np.zeros(m, np.int32),
        accept_num=rng.integers(0, k + 2, m).astype(np.int32),
        accept_tokens=rng.integers(0, 1000, (m, k + 1)),
        is_block_step=np.zeros(m, bool),
        not_need_stop=np.array([False]),
        stop_nums=np.array([int(rng.integers(0, m + 2))], np.int64),
        block_size=bs,
        max_draft_tokens=k,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("one_step", [False, True])
def test_schedule_cache_parity(bsz, seed, one_step):
    args = schedule_batch(np.random.default_rng([seed, bsz, 1]), bsz)
    assert_parity("speculate_schedule_cache", args, SCHEDULE_ORDER, prefill_one_step_stop=one_step)


def test_schedule_cache_bad_input_writes_nothing():
    args = schedule_batch(np.random.default_rng(5), 33)
    b = 4
    args["stop_flags"][b] = False
    args["prompt_lens"][b] = -50
    args["seq_lens_decoder"][b] = -3
    assert_refused(
        "speculate_schedule_cache",
        args,
        SCHEDULE_ORDER,
        "speculate_schedule_cache: seq_lens_decoder",
        prefill_one_step_stop=False,
    )


# ------------------------------------------------------------------------------------------------
# recover_decode_task
# ------------------------------------------------------------------------------------------------
RECOVER_ORDER = list(positional("recover_decode_task"))


def recover_batch(rng, n, spec=True, k=3, bs=16, nb=5):
    d = dict(
        stop_flags=rng.random(n) < 0.7,
        seq_lens_this_time=rng.integers(0, 5, n).astype(np.int32),
        seq_lens_encoder=rng.integers(0, 5, n).astype(np.int32),
        seq_lens_decoder=rng.integers(0, 50, n).astype(np.int32),
        step_seq_lens_decoder=rng.integers(0, nb * bs + 2 * k + 2, n).astype(np.int32),
        block_tables=np.where(rng.random((n, nb)) < 0.5, -1, rng.integers(0, 999, (n, nb))).astype(
            np.int32
        ),
        is_block_step=rng.random(n) < 0.6,
        draft_tokens=rng.integers(0, 999, (n, k + 1)),
        step_draft_tokens=rng.integers(0, 999, (n, k + 1)),
        step_seq_lens_this_time=rng.integers(0, k + 2, n).astype(np.int32),
        block_size=bs,
        max_draft_tokens=k,
    )
    if not spec:
        d["draft_tokens"] = d["step_draft_tokens"] = d["step_seq_lens_this_time"] = None
    return d


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("spec", [True, False])
def test_recover_decode_task_parity(bsz, seed, spec):
    args = recover_batch(np.random.default_rng([seed, bsz, 2]), bsz, spec)
    assert_parity("recover_decode_task", args, RECOVER_ORDER)


def test_recover_decode_task_bad_input_writes_nothing():
    args = recover_batch(np.random.default_rng(6), 600)
    b = 517
    args["is_block_step"][b] = True
    args["block_tables"][b, :] = 3  # its slot holds a block: it resumes
    args["step_seq_lens_this_time"][b] = args["draft_tokens"].shape[1] + 1
    assert_refused(
        "recover_decode_task", args, RECOVER_ORDER, "recover_decode_task: step_seq_lens_this_time"
    )


# ------------------------------------------------------------------------------------------------
# speculate_step_paddle
# ------------------------------------------------------------------------------------------------
STEP_ORDER = list(positional("speculate_step_paddle"))


def step_batch(rng, bsz, free_len, nb=8, bs=4, k=2, width=32):
    """A consistent pool (unique block ids); block-stepped requests hold no decode blocks."""
    ids = iter(rng.permutation(bsz * nb + free_len + 8).astype(np.int32))
    enc = rng.integers(0, 3, bsz).astype(np.int32)
    used = np.array([rng.integers(0, min(nb, width // bs) - e + 1) for e in enc], np.int32)
    bstep = rng.random(bsz) < 0.2
    stop = bstep | (rng.random(bsz) < 0.15)
    tables, step_list = pool_tables(rng, ids, enc, used, bstep, nb)
    free = np.zeros(free_len + int(used.sum()) + 2, np.int32)
    free[:free_len] = [next(ids) for _ in range(free_len)]
    dec = np.maximum(
        0, (enc + used + rng.integers(-2, 2, bsz)) * bs - k - 1 + rng.integers(0, bs, bsz)
    )
    ori = rng.integers(1, width // 2, bsz).astype(np.int32)
    return dict(
        stop_flags=stop,
        seq_lens_this_time=np.where(stop, 0, rng.integers(1, k + 2, bsz)).astype(np.int32),
        ori_seq_lens_encoder=ori,
        seq_lens_encoder=np.zeros(bsz, np.int32),
        seq_lens_decoder=np.where(bstep, 0, dec).astype(np.int32),
        block_tables=tables,
        encoder_block_lens=enc,
        is_block_step=bstep,
        step_block_list=step_list,
        step_lens=np.array([int(bstep.sum())], np.int32),
        recover_block_list=np.full(bsz, -1, np.int32),
        recover_lens=np.zeros(1, np.int32),
        need_block_list=np.full(bsz, -1, np.int32),
        need_block_len=np.zeros(1, np.int32),
        used_list_len=used,
        free_list=free,
        free_list_len=np.array([free_len], np.int32),
        input_ids=rng.integers(0, 100, (bsz, width)),
        pre_ids=rng.integers(0, 100, (bsz, width)),
        step_idx=(rng.random(bsz) * (width - ori + 1)).astype(np.int64),
        next_tokens=np.zeros((bsz, 1), np.int64),
        first_token_ids=rng.integers(0, 100, bsz),
        accept_num=rng.integers(0, k + 2, bsz).astype(np.int32),
        block_size=bs,
        encoder_decoder_block_num=2,
        max_draft_tokens=k,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scarce", [False, True])
def test_speculate_step_parity(bsz, seed, scarce):
    rng = np.random.default_rng([seed, bsz, int(scarce), 3])
    # scarce: few free blocks, so requests are preempted; otherwise enough for everyone.
    free_len = int(rng.integers(0, max(bsz // 8, 1) + 1)) if scarce else 2 * bsz + 8
    args = step_batch(rng, bsz, free_len)
    assert_parity("speculate_step_paddle", args, STEP_ORDER, skip_if_refused=True)


def exhaust(args):
    """Everyone needs a block, nothing is free or held (free_list_len 0)."""
    args["stop_flags"][:] = False
    args["is_block_step"][:] = False
    args["seq_lens_this_time"][:] = 3
    args["used_list_len"][:] = 0
    args["encoder_block_lens"][:] = 0
    args["block_tables"][:] = -1
    args["seq_lens_decoder"][:] = 0
    args["step_lens"][0] = 0
    args["free_list_len"][0] = 0


@pytest.mark.parametrize(
    "case, argument",
    [("exhausted", "free_list"), ("input_ids", "input_ids"), ("need_len", "need_block_len")],
)
def test_speculate_step_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(62)
    args = step_batch(rng, 600, free_len=4)
    if case == "exhausted":
        exhaust(args)
    elif (
        case == "input_ids"
    ):  # the parked request on top of the stack recovers past its input_ids row
        for b in range(600):
            args["stop_flags"][b] = args["is_block_step"][b] = True
            args["seq_lens_this_time"][b] = 0
            args["used_list_len"][b] = 0
        args["block_tables"][:, :] = -1
        args["encoder_block_lens"][:] = 0
        args["step_block_list"][:] = np.arange(600, dtype=np.int32)
        args["step_lens"][0] = 600
        args["ori_seq_lens_encoder"][599] = args["input_ids"].shape[1]
        args["step_idx"][599] = 1
    else:
        args["need_block_len"][0] = 2
    assert_refused("speculate_step_paddle", args, STEP_ORDER, rf"speculate_step_paddle: {argument}")


# ------------------------------------------------------------------------------------------------
# speculate_step_system_cache, speculate_step_reschedule (the same kernel, other variants)
# ------------------------------------------------------------------------------------------------
SYSTEM_CACHE_ORDER = STEP_ORDER[:3] + ["ori_seq_lens_decoder"] + STEP_ORDER[3:]


def _cached(rng, args, bsz):
    args["ori_seq_lens_decoder"] = rng.integers(0, 50, bsz).astype(np.int32)


def _parked_hold_nothing(rng, args, bsz):
    args["used_list_len"][args["is_block_step"]] = 0


# variant: (seed salt, argument order, how its batch differs from speculate_step_paddle's)
VARIANTS = {
    "speculate_step_system_cache": (4, SYSTEM_CACHE_ORDER, _cached),
    "speculate_step_reschedule": (5, STEP_ORDER, _parked_hold_nothing),
}


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("scarce", [False, True])
@pytest.mark.parametrize("op", sorted(VARIANTS))
def test_speculate_step_variant_parity(op, bsz, scarce):
    salt, order, adapt = VARIANTS[op]
    rng = np.random.default_rng([bsz, int(scarce), salt])
    free_len = int(rng.integers(0, max(bsz // 8, 1) + 1)) if scarce else 2 * bsz + 8
    args = step_batch(rng, bsz, free_len)
    adapt(rng, args, bsz)
    assert_parity(op, args, order, skip_if_refused=True)


@pytest.mark.parametrize(
    "op", [("speculate_step_system_cache", True), ("speculate_step_reschedule", False)]
)
def test_step_variants_bad_input_writes_nothing(op):
    name, cached = op
    args = step_batch(np.random.default_rng(63), 600, free_len=0)
    exhaust(args)
    order = STEP_ORDER
    if cached:
        args["ori_seq_lens_decoder"] = np.zeros(600, np.int32)
        order = SYSTEM_CACHE_ORDER
    assert_refused(name, args, order, rf"{name}: free_list")
