"""The error model of fd_mtp.cuda without a sync per op (docs/gpu_errors.md) and the sync /
allocation budget of one speculative step.

* deferred mode (the default): bad data raises the op's own ValueError (naming the op and the
  argument) at ``check_pending`` or at the next op that synchronises anyway, and writes nothing;
  every later op on the poisoned stream skips on the device until the error is read;
* checked mode raises at the op; record mode never raises (``pending`` reads the record);
* the GPU names the lowest bad request, as the CPU driver does, whatever the thread schedule;
* one MTP step with one substep (the engine's and the proposer's op sequence, inputs from
  fd_mtp.testing.op_inputs) makes at most 10 waits for the device (FastDeploy's count) and no
  cudaMalloc and no workspace allocation after warm-up: counted by the simt emulator, which sees
  every runtime call (tools/simt/python/simt_counters.py), so that test runs there only.

Needs CuPy, a CUDA GPU (or FD_MTP_SIMT=1) and the fd_mtp_cuda module; needs neither paddle nor
hypothesis.
"""

import numpy as np
import pytest
from gpu_util import bad_set_value, on_simt, poison_stream, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402
from fd_mtp.testing.gpu_step import (  # noqa: E402  (the step's ops, shared with bench_gpu_ops)
    device_args,
    padded_step,
    prepare_step,
    run_step,
)


def host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else np.array(x)


def snapshot(args):
    return [host(a) if isinstance(a, (np.ndarray, cp.ndarray)) else a for a in args]


def assert_unchanged(before, args, names, op):
    for b, a, n in zip(before, args, names):
        if isinstance(b, np.ndarray):
            np.testing.assert_array_equal(host(a), b, err_msg=f"{op}: {n} was written")


def run_op(name, case):
    args, kwargs = device_args(name, case)
    return args, getattr(fcuda, name)(*args, **kwargs)


pytestmark = pytest.mark.usefixtures("clean_stream")  # conftest.py: nothing pending around a test


def test_deferred_error_raises_at_check_pending_and_writes_nothing():
    case, message = bad_set_value()
    assert "(request 2)" in message and "accept_num" in message
    with fcuda.errors("deferred"):
        args, kwargs = device_args("speculate_set_value_by_flags_and_idx", case)
        before = snapshot(args)
        fcuda.speculate_set_value_by_flags_and_idx(*args)  # returns: no sync, no raise
        assert_unchanged(before, args, case.names, "speculate_set_value_by_flags_and_idx")
        with pytest.raises(ValueError) as info:
            fcuda.check_pending()
        assert str(info.value) == message
        assert str(info.value).startswith("speculate_set_value_by_flags_and_idx: accept_num")
        fcuda.check_pending()  # read once: the stream is clean again


def test_checked_mode_raises_at_the_op():
    case, message = bad_set_value()
    with fcuda.errors("checked"):
        args, _ = device_args("speculate_set_value_by_flags_and_idx", case)
        before = snapshot(args)
        with pytest.raises(ValueError) as info:
            fcuda.speculate_set_value_by_flags_and_idx(*args)
        assert str(info.value) == message
        assert_unchanged(before, args, case.names, "speculate_set_value_by_flags_and_idx")
    assert fcuda.pending() is None


def test_poisoned_stream_skips_later_ops_until_the_error_is_read():
    bad, message = bad_set_value()
    good = op_inputs.build_set_value(8)
    expected = [np.copy(a) for a in good.args]
    ref.speculate_set_value_by_flags_and_idx(*expected)
    with fcuda.errors("deferred"):
        fcuda.speculate_set_value_by_flags_and_idx(
            *device_args("speculate_set_value_by_flags_and_idx", bad)[0]
        )
        # a valid op (with data checks) and a hand-written one on the poisoned stream: skipped
        args, _ = device_args("speculate_set_value_by_flags_and_idx", good)
        before = snapshot(args)
        fcuda.speculate_set_value_by_flags_and_idx(*args)
        assert_unchanged(
            before, args, good.names, "speculate_set_value_by_flags_and_idx (poisoned)"
        )
        pen = op_inputs.build_penalty(4, 256)
        pargs, pkw = device_args("speculate_get_token_penalty_multi_scores", pen)
        pbefore = snapshot(pargs)
        fcuda.speculate_get_token_penalty_multi_scores(*pargs, **pkw)  # deferred too: no raise
        assert_unchanged(pbefore, pargs, pen.names, "penalty (poisoned)")
        # a shape op synchronises anyway: the first op's error raises there, by that op's name
        hid = op_inputs.build_self_hidden(4, hidden=8, dtype="float32")
        with pytest.raises(ValueError) as info:
            fcuda.eagle_get_self_hidden_states(*device_args("eagle_get_self_hidden_states", hid)[0])
        assert str(info.value) == message
        # the error was read: the stream runs ops again
        fcuda.speculate_set_value_by_flags_and_idx(*args)
        fcuda.check_pending()
        for a, e, n in zip(args, expected, good.names):
            if isinstance(e, np.ndarray):
                np.testing.assert_array_equal(host(a), e, err_msg=n)


def test_pending_error_raises_at_the_next_flag_op_and_the_flag_is_kept():
    upd = op_inputs.build_update(8)
    with fcuda.errors("deferred"):
        message = poison_stream("deferred")
        args, kwargs = device_args("draft_model_update", upd)
        flag = args[upd.names.index("not_need_stop")]
        flag[0] = True
        before = snapshot(args)
        with pytest.raises(ValueError) as info:
            fcuda.draft_model_update(*args, **kwargs)
        assert str(info.value) == message  # names the original op, not draft_model_update
        assert_unchanged(before, args, upd.names, "draft_model_update (poisoned)")


def test_record_mode_never_raises():
    upd = op_inputs.build_update(8)
    with fcuda.errors("record"):
        message = poison_stream("record")
        args, kwargs = device_args("draft_model_update", upd)
        fcuda.draft_model_update(*args, **kwargs)  # synchronises, raises nothing
        assert fcuda.pending() == ("speculate_set_value_by_flags_and_idx", message)
        assert fcuda.pending() is None


def test_fd_mtp_ops_check_pending_reads_the_cuda_record():
    import fd_mtp.ops as ops

    with fcuda.errors("deferred"):
        poison_stream()
        with pytest.raises(ValueError, match="speculate_set_value_by_flags_and_idx: accept_num"):
            ops.check_pending()
        ops.check_pending()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_lowest_bad_request_is_named_whatever_the_schedule(seed, monkeypatch):
    """Requests 2, 5 and 260 are bad; one GPU thread per request reports, in any order (a seeded
    random schedule on the emulator: blocks in random order, threads start and switch at atomics
    in random order); the message names request 2, as the CPU driver's first-wins loop does."""
    if on_simt():
        monkeypatch.setenv("FD_MTP_SIMT_SCHEDULE", f"random:{seed}")
    case, message = bad_set_value(batch=300)  # two blocks of threads
    with fcuda.errors("checked"):
        with pytest.raises(ValueError) as info:
            fcuda.speculate_set_value_by_flags_and_idx(
                *device_args("speculate_set_value_by_flags_and_idx", case)[0]
            )
    assert str(info.value) == message


# ------------------------------------------------------------------------------------------
# One speculative step: the sync and allocation budget
# ------------------------------------------------------------------------------------------
@pytest.mark.skipif("not __import__('gpu_util').on_simt()", reason="counted by the simt emulator")
@pytest.mark.parametrize("mode", ["deferred", "checked"])
def test_step_sync_and_allocation_budget(mode, record_property):
    import simt_counters

    with fcuda.errors(mode):
        run_step(prepare_step())  # warm-up: the stream's record, scratch rings, workspaces
        prepared = prepare_step()
        before = simt_counters.snapshot()
        outputs = run_step(prepared)
        used = simt_counters.since(before)
        # The step's tail (after its last sync) is checked at the next step's first sync; here
        # there is none, so read it now (outside the count): the step raised nothing.
        fcuda.check_pending()
    for key, value in used.items():
        record_property(key, value)
    print(f"\n{mode}: {used} ({outputs} output arrays)")
    assert used["mallocs"] == 0 and used["frees"] == 0
    # every device array created is an op's returned output: no workspace per call
    assert used["array_allocations"] == outputs
    if mode == "deferred":
        assert used["waits"] <= 10, used  # FastDeploy's count
    else:  # checked: at least one wait per op with data checks
        assert used["waits"] >= len(prepared), used


def test_emulator_counts_syncs_and_allocations():
    """The counters see what they claim: a launch then a sync is one wait, a second sync on the
    drained stream is not; cudaMalloc is counted once per stream record."""
    if not on_simt():
        pytest.skip("the counters are the simt emulator's")
    import simt_counters

    case = op_inputs.build_set_value(4)
    args, _ = device_args("speculate_set_value_by_flags_and_idx", case)
    with fcuda.errors("deferred"):
        before = simt_counters.snapshot()
        fcuda.speculate_set_value_by_flags_and_idx(*args)
        mid = simt_counters.since(before)
        fcuda.check_pending()
        fcuda.check_pending()
        used = simt_counters.since(before)
    assert mid["waits"] == 0 and mid["sync_calls"] == 0 and mid["launches"] >= 3
    assert used["waits"] == 1 and used["sync_calls"] == 2
    assert used["mallocs"] == 0


# ------------------------------------------------------------------------------------------
# The same step with the fixed-capacity variants: one wait, at the end of the step
# ------------------------------------------------------------------------------------------
@pytest.mark.skipif("not __import__('gpu_util').on_simt()", reason="counted by the simt emulator")
def test_padded_step_waits_once(record_property):
    """Issue 20's capturable step: between the step's start and its end no host sync, no host
    read, no cudaMalloc (what stream capture forbids); the end reads the step's errors and its
    not_need_stop flags in one wait. At most 2 waits per step is the budget; this step needs 1."""
    import simt_counters

    with fcuda.errors("deferred"):
        run_step(padded_step()[0])  # warm-up
        fcuda.check_pending()
        prepared, flags = padded_step()
        before = simt_counters.snapshot()
        outputs = run_step(prepared)
        body = simt_counters.since(before)
        fcuda.check_pending()  # the step's errors: it raised none
        stop = [bool(cp.asnumpy(f)[0]) for f in flags]  # the flags the engine reads
        used = simt_counters.since(before)
    for key, value in used.items():
        record_property(key, value)
    print(f"\npadded: body {body}, step {used} ({outputs} output arrays), not_need_stop {stop}")
    assert body["sync_calls"] == 0 and body["host_reads"] == 0 and body["waits"] == 0, body
    assert used["mallocs"] == 0 and used["frees"] == 0, used
    assert used["array_allocations"] == outputs, used
    assert used["waits"] <= 2 and used["waits"] == 1, used
