"""speculate_step's one-block CUDA kernel (custom_ops/cuda/speculate_step.cu) against the sequential
driver it must match bit for bit.

The Paddle CPU op runs speculate_step_check and speculate_step_apply of
custom_ops/kernels/speculate_step.h one request after another; the kernel runs the same pieces
with the batch spread over 256 threads (prefix sums for the free list and the need list, one
arg-max reduction per victim). Compared here on every array and on the error message (code,
request, value and limit), for the three variants: batches on both sides of the 256-thread chunk
boundaries, hundreds of victims, the second preemption pass (step_max_block_flag), recovery with
an empty prompt (the generated tokens overwrite input_ids[r][0]), and bad input at several
requests at once (the lowest index must win, as in the sequential loop).

Needs CuPy, a GPU (or the simt emulator) and fd_mtp_cuda, plus Paddle and the CPU ops (the
sequential driver); skipped otherwise. test_gpu_blocks.py compares the same kernel with the numpy
reference without Paddle.
"""

import numpy as np
import pytest
from gpu_util import arrays_of, call, compare_all, skip_module_without_gpu, split

skip_module_without_gpu()
paddle = pytest.importorskip("paddle", reason="the sequential driver is the Paddle CPU op")
try:
    import fd_mtp.ops as ops
except ImportError as exc:  # the CPU extension is not built
    pytest.skip(f"fd_mtp's CPU ops are not built ({exc})", allow_module_level=True)

from test_gpu_blocks import STEP_ORDER, SYSTEM_CACHE_ORDER, step_batch  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402

THREADS = 256  # kThreads of the kernel: the chunk width
VARIANTS = ["speculate_step_paddle", "speculate_step_system_cache", "speculate_step_reschedule"]


def order_of(name):
    return SYSTEM_CACHE_ORDER if name == "speculate_step_system_cache" else STEP_ORDER


def sequential(name, args):
    """The CPU op on copies of args: (every array after the call, None), or (None, the message)."""
    tensors = {
        k: paddle.to_tensor(v.copy()) if isinstance(v, np.ndarray) else v for k, v in args.items()
    }
    try:
        call(getattr(ops, name), tensors, order_of(name))
    except ValueError as exc:
        return None, str(exc)
    return {k: tensors[k].numpy() for k in arrays_of(args)}, None


def check_same_as_sequential(name, args):
    """Runs both; the kernel must write exactly what the CPU op writes, or raise its message and
    write nothing. Returns the CPU op's outputs (None after an error)."""
    expected, message = sequential(name, args)
    host, dev = split(args)
    if message is None:
        call(getattr(fcuda, name), dev, order_of(name))
        compare_all(dev, expected, arrays_of(args))
    else:
        with pytest.raises(ValueError) as err:
            call(getattr(fcuda, name), dev, order_of(name))
        assert str(err.value) == message
        compare_all(dev, host, arrays_of(args))  # nothing written
    return expected


def variant_batch(name, rng, bsz, free_len):
    args = step_batch(rng, bsz, free_len)
    if name == "speculate_step_system_cache":
        args["ori_seq_lens_decoder"] = rng.integers(0, 50, bsz).astype(np.int32)
    if name == "speculate_step_reschedule":
        args["used_list_len"][args["is_block_step"]] = 0  # parked requests hold nothing here
    return args


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("bsz", [1, 255, 256, 257, 513, 1500])
@pytest.mark.parametrize("supply", ["none", "scarce", "plenty"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_batches_match_the_sequential_driver(name, bsz, supply, seed):
    rng = np.random.default_rng([seed, bsz, VARIANTS.index(name), len(supply)])
    free_len = {"none": 0, "scarce": max(bsz // 8, 1), "plenty": 2 * bsz + 8}[supply]
    check_same_as_sequential(name, variant_batch(name, rng, bsz, free_len))


def flag_pass_batch(bsz, needy, singles, full):
    """free list empty; `needy` running requests need a block and hold none, `singles` hold one
    decode block, `full` hold max_decoder_block_num blocks (spared by the first pass). The first
    pass preempts every single, the second (flag set) the full holders."""
    nb, bs, k, width = 8, 4, 2, 32  # max_decoder_block_num = width // bs = nb
    args = step_batch(np.random.default_rng(bsz), bsz, free_len=0, nb=nb, bs=bs, k=k, width=width)
    role = np.array(["needy"] * needy + ["single"] * singles + ["full"] * full)
    np.random.default_rng(7).shuffle(role)  # victims spread over every chunk
    ids = iter(range(1000, 1000 + bsz * nb))
    tables = np.full((bsz, nb), -1, np.int32)
    enc = np.where(role == "full", 0, 1).astype(np.int32)
    used = np.select([role == "single", role == "full"], [1, nb], 0).astype(np.int32)
    for b in range(bsz):
        for j in range(enc[b] + used[b]):
            tables[b, j] = next(ids)
    args.update(
        stop_flags=np.zeros(bsz, bool),
        is_block_step=np.zeros(bsz, bool),
        seq_lens_this_time=np.full(bsz, k + 1, np.int32),
        # needy: slot (1 + k + 1) // bs = 1 is empty; singles: slot 1 is theirs; full: past the row
        seq_lens_decoder=np.where(role == "full", 30, 1).astype(np.int32),
        block_tables=tables,
        encoder_block_lens=enc,
        used_list_len=used,
        step_block_list=np.full(bsz, -1, np.int32),
        step_lens=np.zeros(1, np.int32),
        free_list=np.zeros(int(used.sum()) + 4, np.int32),
    )
    return args, role


def test_two_preemption_passes_with_victims_in_every_chunk():
    bsz, needy, singles, full = 700, 300, 290, 110
    args, role = flag_pass_batch(bsz, needy, singles, full)
    out = check_same_as_sequential("speculate_step_paddle", args)
    assert out is not None
    parked = out["is_block_step"]
    # The case exercises what it is meant to: more victims than threads, in both passes.
    assert parked[role == "single"].all()
    assert parked[role == "full"].sum() == -(-(needy - singles) // 8)  # ceil(10 / 8) = 2
    assert int(out["step_lens"][0]) == singles + 2 > THREADS
    assert (out["used_list_len"][role == "needy"] == 1).all()  # every needy request got a block


def test_out_of_blocks_after_both_passes():
    args, _ = flag_pass_batch(600, needy=500, singles=50, full=50)  # 450 short, 400 held in full
    args["step_block_list"] = np.full(600, -1, np.int32)
    assert check_same_as_sequential("speculate_step_paddle", args) is None


@pytest.mark.parametrize("ori", [0, 5])
@pytest.mark.parametrize("name", ["speculate_step_paddle", "speculate_step_system_cache"])
def test_recovery_rewrites_the_prompt(name, ori):
    """Everyone parked, blocks plenty: the top of the stack is recovered and re-prefilled. With an
    empty prompt the first generated token lands on input_ids[r][0], after first_token_ids[r]."""
    bsz = 300
    rng = np.random.default_rng(ori)
    args = variant_batch(name, rng, bsz, free_len=2 * bsz + 8)
    args["stop_flags"][:] = args["is_block_step"][:] = True
    args["seq_lens_this_time"][:] = 0
    args["step_block_list"][:] = rng.permutation(bsz).astype(np.int32)
    args["step_lens"][0] = bsz
    top = int(args["step_block_list"][-1])
    args["ori_seq_lens_encoder"][top] = ori
    args["step_idx"][top] = 20
    out = check_same_as_sequential(name, args)
    assert out is not None and not out["is_block_step"][top]
    assert out["input_ids"][top, 0] == (
        args["pre_ids"][top, 1] if ori == 0 else args["first_token_ids"][top]
    )


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize(
    "bad",
    [
        {"used_list_len": [1400, 3, 259]},  # three threads report; request 3 must win
        {"seq_lens_decoder": [700, 258], "used_list_len": [1000, 513]},  # across kinds: 258
        {"used_list_len": [257, 1]},  # same thread (1 and 257 share thread 1): the first
    ],
)
def test_lowest_bad_request_wins(name, bad):
    rng = np.random.default_rng(11)
    args = variant_batch(name, rng, 1500, free_len=3000)
    for arg, rows in bad.items():
        for b in rows:
            args["stop_flags"][b] = args["is_block_step"][b] = False  # running: both checks apply
            args["seq_lens_this_time"][b] = 1
            args[arg][b] = -1
    _, message = sequential(name, args)
    assert message is not None
    lowest = min(b for rows in bad.values() for b in rows)
    assert f"(request {lowest})" in message
    check_same_as_sequential(name, args)


@pytest.mark.parametrize("after_preemption", [False, True])
@pytest.mark.parametrize("error", ["input_ids", "step_idx", "step_list"])
def test_errors_found_after_the_request_pass(error, after_preemption):
    """Errors reported by thread 0 once the per-request pass (and the victim replay) is over:
    the recovered request's re-prefill does not fit, or the step list is full."""
    if after_preemption:
        # Ten parked requests are scheduled (in the need list, but stopped: they pop nothing), so
        # ten one-block holders are preempted and the last of them is recovered at once: ten
        # blocks are free and it wants two.
        args, role = flag_pass_batch(300, needy=10, singles=290, full=0)
        args["stop_flags"][role == "needy"] = args["is_block_step"][role == "needy"] = True
        r = int(np.flatnonzero(role == "single")[9])
    else:  # everyone parked; the top of the stack is recovered
        args = step_batch(np.random.default_rng(3), 300, free_len=608)
        args["stop_flags"][:] = args["is_block_step"][:] = True
        args["seq_lens_this_time"][:] = 0
        args["step_block_list"][:] = np.arange(300, dtype=np.int32)
        args["step_lens"][0] = 300
        r = 299
    width = args["input_ids"].shape[1]
    if error == "input_ids":
        args["ori_seq_lens_encoder"][r], args["step_idx"][r] = width, 1
    elif error == "step_idx":
        args["step_idx"][r] = width
    else:
        args["step_block_list"] = np.full(int(args["step_lens"][0]) + 1, -1, np.int32)
        if after_preemption:
            args["step_block_list"] = np.full(5, -1, np.int32)  # ten victims do not fit
    _, message = sequential("speculate_step_paddle", args)
    assert message is not None
    if error != "step_list":
        assert f"(request {r})" in message  # the recovered request, as planned
    check_same_as_sequential("speculate_step_paddle", args)
