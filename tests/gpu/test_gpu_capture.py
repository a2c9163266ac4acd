"""The spec step captured as CUDA graphs and replayed (issue 35 §2, fd_mtp/cuda/graph.py).

* The step of fd_mtp.testing.gpu_step (target side and one MTP substep, 16 ops in the fixed-
  capacity forms with device not_need_stop flags and persistent outputs) is captured as one graph
  per segment between the model's forwards; the forwards stay outside as gaps that write the
  buffers the next segment reads.
* Over 20 steps whose batches change (each step another mix of decoding, prefilling (joining),
  stopped (finished) and block-stepped (preempted) requests, written into the persistent input
  buffers as an engine writes its slots; the packed token counts change too), the replay leaves
  every buffer (outputs and the arguments written in place) bit for bit as the same step driven
  op by op from Python on buffers of its own.
* The captured body allocates nothing and reads nothing on the host (the emulator's counters),
  and a host read, a sync or an allocation inside a capture fails it with CUDA's error.

On the simt emulator (FD_MTP_SIMT=1, make test's simt subset) the capture is the emulator's
(tools/simt/runtime.cc); on a GPU, CuPy's. The counter tests need the emulator.
"""

import numpy as np
import pytest
from gpu_util import on_simt, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp.cuda.graph import CapturedStep  # noqa: E402
from fd_mtp.testing.gpu_step import (  # noqa: E402
    PersistentStep,
    capacity_cases,
    step_cases,
)

STEPS = 20
# Small enough for make test's emulated subset (top_p_candidates' and the penalties' barriers
# dominate: about 0.15 s per step and form on the emulator).
BATCH, VOCAB, HIDDEN = 4, 128, 64


@pytest.fixture(scope="module")
def variants():
    return capacity_cases([step_cases(BATCH, VOCAB, HIDDEN, variant=n) for n in range(STEPS)])


def _mismatch(a, b):
    for key in a:
        x, y = a[key], b[key]
        if x.shape != y.shape or x.tobytes() != y.tobytes():
            where = np.argwhere(x != y)[:3].tolist() if x.shape == y.shape else "shape"
            return f"{key}: first differences at {where}"
    return None


def test_replay_equals_the_op_by_op_step_over_changing_batches(variants):
    """20 steps, each a different batch: graph replays on one set of persistent buffers, the
    same ops one by one on another; every buffer equal bit for bit after every step, the
    not_need_stop flags too, and no error recorded."""
    # the batches do change: the packed token counts and which slots decode, prefill or stop
    tokens = {int(c[0][1].args[1].sum()) for c in variants}
    slots = {(c[0][1].args[4] > 0).tobytes() + (c[0][1].args[1] == 0).tobytes() for c in variants}
    assert len(tokens) >= STEPS // 2 and len(slots) >= STEPS // 4, (tokens, len(slots))
    with fcuda.errors("deferred"):
        captured, eager = PersistentStep(variants[0]), PersistentStep(variants[0])
        graph = CapturedStep(captured.segments())
        op_by_op = CapturedStep(eager.segments())
        graph.capture(captured.gaps(variants[0]))
        for n, cases in enumerate(variants):
            for step, runner in ((captured, graph), (eager, op_by_op)):
                step.write(cases, runner.stream)
            graph.replay(captured.gaps(cases))
            op_by_op.run_eager(eager.gaps(cases))
            graph.check_pending()
            op_by_op.check_pending()
            got, want = captured.snapshot(), eager.snapshot()
            assert got.keys() == want.keys()
            problem = _mismatch(got, want)
            assert problem is None, f"step {n}: {problem}"
            assert [bool(cp.asnumpy(f)[0]) for f in captured.flags] == [
                bool(cp.asnumpy(f)[0]) for f in eager.flags
            ]


def test_segments_and_their_kernels(variants, record_property):
    """The step is five segments (the forwards' four gaps between them); each graph holds only
    kernels and memsets (no copies from or to the host)."""
    with fcuda.errors("deferred"):
        step = PersistentStep(variants[0])
        runner = CapturedStep(step.segments())
        runner.capture(step.gaps(variants[0]))
        counts = runner.node_counts()
    names = [[step.names[i] for i in range(lo, hi)] for lo, hi in step.bounds]
    assert [n[-1] for n in names[:-1]] == [
        "pre_process",
        "rebuild_padding",
        "pre_process",
        "rebuild_padding",
    ]
    for i, c in enumerate(counts):
        record_property(f"segment{i}_kernels", c["kernel"])
        record_property(f"segment{i}_memsets", c["memset"])
        assert c["kernel"] > 0 and c["memcpy"] == 0 and c["other"] == 0, (i, c)
    print("\nnodes per segment:", counts)
    # pre_process zeroes three persistent outputs per call; nothing else memsets
    assert [c["memset"] for c in counts] == [3, 0, 3, 0, 0]


@pytest.mark.skipif(not on_simt(), reason="counts runtime calls: the simt emulator")
def test_captured_body_neither_allocates_nor_reads_the_host(variants):
    """Capture and replay make no cudaMalloc / cudaFree, create no array, read nothing on the
    host and synchronise nothing; the replay runs as many launches as the capture recorded."""
    import simt_counters

    with fcuda.errors("deferred"):
        step = PersistentStep(variants[0])
        runner = CapturedStep(step.segments())
        gaps = step.gaps(variants[1])
        runner.run_eager(gaps)  # warm-up outside the counted span
        runner.check_pending()
        step.write(variants[1], runner.stream)
        before = simt_counters.snapshot()
        runner.capture(gaps, warmup=0)
        captured = simt_counters.since(before)
        before = simt_counters.snapshot()
        runner.replay()  # the gaps are the caller's: left out of the count
        replayed = simt_counters.since(before)
        runner.check_pending()
    for used in (captured, replayed):
        for key in ("mallocs", "frees", "array_allocations", "host_reads", "sync_calls", "waits"):
            assert used[key] == 0, (key, used)
    assert captured["launches"] == 0 and captured["captured_nodes"] > 0, captured
    assert replayed["graph_launches"] == len(step.bounds)
    assert replayed["launches"] + replayed["async_ops"] == captured["captured_nodes"], replayed


@pytest.mark.skipif(not on_simt(), reason="the simt stand-in's capture errors")
@pytest.mark.parametrize(
    "breach", ["host read", "element read", "sync", "allocation", "cupy kernel"]
)
def test_a_breach_inside_a_capture_fails_it_clearly(variants, breach):
    """What real CUDA refuses in a capture fails it with CuPy's error, the stream usable again
    (the next capture of the clean step works)."""
    with fcuda.errors("deferred"):
        step = PersistentStep(variants[0])
        segments = step.segments()
        flag = step.flags[0]

        def bad():
            segments[0]()
            if breach == "host read":
                cp.asnumpy(flag)
            elif breach == "element read":
                bool(flag[0])  # a 0-d device array; its truth value is a host read
            elif breach == "sync":
                cp.cuda.get_current_stream().synchronize()
            elif breach == "allocation":
                cp.zeros(4, cp.int32)
            else:
                flag + flag  # noqa: B018 (an array op of the stand-in)

        runner = CapturedStep(segments[:1])
        runner.run_eager()  # warm-up: the stream's status record and the workspaces exist
        runner.check_pending()
        with pytest.raises((RuntimeError, cp.cuda.runtime.CUDARuntimeError)) as info:
            CapturedStep([bad], runner.stream).capture(warmup=0)
        text = str(info.value)
        expected = {
            "host read": "cudaErrorStreamCaptureUnsupported",
            "element read": "cudaErrorStreamCaptureUnsupported",
            "sync": "cudaErrorStreamCaptureUnsupported",
            "allocation": "allocation",
            "cupy kernel": "cupy.add",
        }[breach]
        assert expected in text and "captur" in text, text
        assert not runner.stream.is_capturing()
        CapturedStep(segments[:1], runner.stream).capture(warmup=0).replay()
        runner.check_pending()


def test_out_buffers_are_checked_by_name(variants):
    step = PersistentStep(variants[0])
    name, args, kwargs = step.prepared[0]
    assert name == "pre_process"
    bad = list(kwargs["out"])
    bad[1] = cp.zeros(bad[1].size, cp.int64)
    with pytest.raises(ValueError, match=r"pre_process: out\[1\] \(batch_id_per_token\)"):
        fcuda.pre_process(*args, token_capacity=kwargs["token_capacity"], out=bad)
    with pytest.raises(ValueError, match="pre_process: out needs token_capacity"):
        fcuda.pre_process(*args, out=kwargs["out"])
    name, args, kwargs = step.prepared[1]
    with pytest.raises(ValueError, match="rebuild_padding: out must have shape"):
        fcuda.rebuild_padding(*args, padded=True, out=cp.zeros((1, HIDDEN), cp.float32))


def test_captured_step_misuse_is_refused():
    with pytest.raises(ValueError, match="at least one callable"):
        CapturedStep([])
    with pytest.raises(ValueError, match="legacy default stream"):
        CapturedStep([lambda: None], cp.cuda.Stream(null=True))
    runner = CapturedStep([lambda: None])
    with pytest.raises(RuntimeError, match=r"capture\(\) first"):
        runner.replay()
    with pytest.raises(ValueError, match="2 gaps for 1 segments"):
        runner.run_eager([None, None])
