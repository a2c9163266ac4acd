"""Stream capture on the simt emulator (tools/simt/runtime.cc): what a capture records, what a
replay runs, and the calls that fail a capture as in CUDA (cudaErrorStreamCaptureUnsupported,
then cudaErrorStreamCaptureInvalidated from cudaStreamEndCapture). Through the self-test module
(tools/simt/selftest), which calls the runtime directly; the CuPy stand-in's side
(cupy.cuda.Stream.begin_capture / end_capture, Graph.launch) is tested in
tests/gpu/test_gpu_capture.py. Skips without `make simt`."""

import importlib.util
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIB = ROOT / "build" / "simt" / "lib"
OK = ("cudaSuccess", "cudaSuccess")
STREAM = 0x5100  # any handle but 0 / 1 (the legacy streams) names a stream on the emulator
OTHER = 0x5200
KERNEL, MEMCPY, MEMSET = 0, 1, 2  # cudaGraphNodeType
H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyKind


@pytest.fixture(scope="module")
def rt():
    found = sorted(LIB.glob("simt_selftest*.so"))
    if not found:
        pytest.skip(f"no simt build in {LIB} (make simt)")
    spec = importlib.util.spec_from_file_location("_simt_capture.simt_selftest", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ptr(a):
    return a.ctypes.data


def _captured(rt, body, stream=STREAM):
    """Captures ``body()`` on ``stream``; returns (end_capture's (name, message), graph)."""
    assert rt.begin_capture(stream) == OK
    body()
    name, message, graph = rt.end_capture(stream)
    return (name, message), graph


def test_capture_records_instead_of_running_and_replays_in_order(rt):
    out = np.zeros(64, np.float32)
    src = np.full(64, 7.0, np.float32)
    value = 3.0

    def body():
        assert rt.fill_on(ptr(out), value, 64, STREAM) == OK
        assert rt.memcpy_async(ptr(out) + 16 * 4, ptr(src), 8 * 4, D2D, STREAM) == OK
        assert rt.memset_async(ptr(out) + 40 * 4, 0, 4 * 4, STREAM) == OK
        assert rt.capture_status(STREAM) == 1  # active

    result, graph = _captured(rt, body)
    assert result == OK and graph != 0
    assert rt.capture_status(STREAM) == 0
    assert (out == 0).all()  # nothing ran during the capture
    assert rt.graph_nodes(graph) == [KERNEL, MEMCPY, MEMSET]
    exec_ = rt.instantiate(graph)
    try:
        expected = np.full(64, 3.0, np.float32)
        expected[16:24] = 7.0
        expected[40:44] = 0.0
        for step in range(3):
            src[:] = 10.0 + step  # a copy node reads its source at the replay, not at the capture
            expected[16:24] = 10.0 + step
            out[:] = -1.0
            assert rt.launch(exec_, STREAM) == OK
            np.testing.assert_array_equal(out, expected)
    finally:
        rt.exec_destroy(exec_)


def test_launch_arguments_are_copied_at_the_capture(rt):
    """A kernel argument is a value copied at the launch, as CUDA copies it to the parameter
    space: the graph replays 1.5 however the host's variable changes later."""
    out = np.zeros(8, np.float32)
    value = [1.5]
    result, graph = _captured(rt, lambda: rt.fill_on(ptr(out), value[0], 8, STREAM))
    assert result == OK
    value[0] = 9.0
    exec_ = rt.instantiate(graph)
    assert rt.launch(exec_, STREAM) == OK
    rt.exec_destroy(exec_)
    assert (out == 1.5).all()


def test_other_streams_run_while_one_captures(rt):
    out = np.zeros(8, np.float32)
    assert rt.begin_capture(STREAM) == OK
    assert rt.fill_on(ptr(out), 2.0, 8, OTHER) == OK  # not the capturing stream: runs now
    assert rt.stream_sync(OTHER) == OK  # legal in the relaxed mode CuPy uses
    name, _, graph = rt.end_capture(STREAM)
    assert name == "cudaSuccess" and rt.graph_nodes(graph) == []
    rt.exec_destroy(rt.instantiate(graph))
    assert (out == 2.0).all()


@pytest.mark.parametrize(
    "call, what",
    [
        ("stream_sync", "cudaStreamSynchronize"),
        ("legacy_sync", "cudaStreamSynchronize"),
        ("device_sync", "cudaDeviceSynchronize"),
        ("malloc", "cudaMalloc"),
        ("memcpy_d2h", "cudaMemcpy (synchronous)"),
        ("memcpy_h2d", "cudaMemcpy (synchronous)"),
        ("async_d2h", "cudaMemcpyAsync between host and device memory"),
        ("async_h2d", "cudaMemcpyAsync between host and device memory"),
    ],
)
def test_calls_cuda_refuses_during_a_capture_invalidate_it(rt, call, what):
    a, b = np.zeros(4, np.float32), np.ones(4, np.float32)
    calls = {
        "stream_sync": lambda: rt.stream_sync(STREAM),
        "legacy_sync": lambda: rt.stream_sync(0),
        "device_sync": rt.device_sync,
        "malloc": rt.malloc_free,
        "memcpy_d2h": lambda: rt.memcpy(ptr(a), ptr(b), 16, D2H),
        "memcpy_h2d": lambda: rt.memcpy(ptr(a), ptr(b), 16, H2D),
        "async_d2h": lambda: rt.memcpy_async(ptr(a), ptr(b), 16, D2H, STREAM),
        "async_h2d": lambda: rt.memcpy_async(ptr(a), ptr(b), 16, H2D, STREAM),
    }
    assert rt.begin_capture(STREAM) == OK
    assert rt.fill_on(ptr(a), 5.0, 4, STREAM) == OK
    name, message = calls[call]()
    expected = "cudaErrorStreamCaptureImplicit" if call == "legacy_sync" else None
    assert name == (expected or "cudaErrorStreamCaptureUnsupported"), (name, message)
    assert what in message and "capturing" in message
    assert rt.capture_status(STREAM) == 2  # invalidated
    name, message, graph = rt.end_capture(STREAM)
    assert name == "cudaErrorStreamCaptureInvalidated" and graph == 0
    assert what in message
    assert (a == 0).all()  # the recorded kernel never ran, the refused copy did nothing
    # The stream is usable again and the refused call's error is not pending.
    assert rt.fill_on(ptr(a), 1.0, 4, STREAM) == OK and (a == 1.0).all()
    assert rt.stream_sync(STREAM) == OK and rt.malloc_free() == OK


def test_capture_misuse(rt):
    assert rt.begin_capture(0)[0] == "cudaErrorStreamCaptureUnsupported"  # the legacy stream
    assert rt.end_capture(STREAM)[0] == "cudaErrorIllegalState"  # not capturing
    assert rt.begin_capture(STREAM) == OK
    assert rt.begin_capture(STREAM)[0] == "cudaErrorIllegalState"  # already capturing
    name, _, graph = rt.end_capture(STREAM)
    assert name == "cudaSuccess"
    exec_ = rt.instantiate(graph)
    assert rt.begin_capture(OTHER) == OK
    assert rt.launch(exec_, OTHER)[0] == "cudaErrorNotSupported"  # a child graph
    assert rt.end_capture(OTHER)[2] != 0
    rt.exec_destroy(exec_)
