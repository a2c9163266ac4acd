"""The simt CPU emulator of the CUDA kernels (tools/simt) checked on its own: the launch rewriting,
the numpy CuPy stand-in, and kernels with known defects (tools/simt/selftest) that it must report.

The rewriting and stand-in tests need no build. The kernel tests need `make simt` (which
`make test` runs first); they skip when build/simt/lib holds no emulator build.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fd_mtp.testing.scripts import load_script

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIMT = ROOT / "tools" / "simt"
LIB = ROOT / "build" / "simt" / "lib"
THREADS = 64  # the self-test kernels' block


def _load(path, name):
    return load_script(path, name)


rewrite = _load(SIMT / "rewrite_launches.py", "simt_rewrite_launches").rewrite


def _extension(name):
    found = sorted(LIB.glob(f"{name}*.so"))
    if not found:
        pytest.skip(f"no simt build in {LIB} (make simt)")
    return _load(found[0], f"_simt_build.{name}")


@pytest.fixture(scope="module")
def kernels():
    return _extension("simt_selftest")


@pytest.fixture
def schedule():
    """Sets FD_MTP_SIMT_SCHEDULE for the test (the runtime reads it at every launch)."""
    old = os.environ.get("FD_MTP_SIMT_SCHEDULE")

    def set_schedule(value):
        os.environ["FD_MTP_SIMT_SCHEDULE"] = value

    yield set_schedule
    if old is None:
        os.environ.pop("FD_MTP_SIMT_SCHEDULE", None)
    else:
        os.environ["FD_MTP_SIMT_SCHEDULE"] = old


def ptr(a):
    return a.ctypes.data


OK = ("cudaSuccess", "cudaSuccess")


# ------------------------------------------------------------------ launch rewriting ---
def test_rewrite_keeps_template_arguments_line_count_and_comments():
    src = (
        "// k<<<1, 2>>>(x) in a comment stays\n"
        "  copy_kernel<Unit>\n"
        "      <<<grid_for(n), kThreads, 0, stream>>>(f(a, b),\n"
        "                                             c);\n"
        "  k2<decltype(t)><<<g, b>>>();\n"
    )
    out, count = rewrite(src)
    assert count == 2
    assert out.count("\n") == src.count("\n")
    assert out.startswith("// k<<<1, 2>>>(x) in a comment stays\n")
    assert (
        '::simt::launch(::simt::LaunchConfig(grid_for(n), kThreads, 0, stream), "copy_kernel<Unit>", '
        "__FILE__, __LINE__, [](auto... simt_a) { copy_kernel<Unit>(simt_a...); }, f(a, b), c)"
    ) in out
    assert "{ k2<decltype(t)>(simt_a...); })" in out


def test_rewrite_counts_every_launch_of_the_kernels():
    total = sum(rewrite(p.read_text())[1] for p in (ROOT / "custom_ops" / "cuda").glob("*.cu"))
    raw = sum(p.read_text().count(">>>(") for p in (ROOT / "custom_ops" / "cuda").glob("*.cu"))
    assert total == raw > 0


# ------------------------------------------------------------------ CuPy stand-in ---
@pytest.fixture(scope="module")
def cp():
    return _load(SIMT / "python" / "cupy" / "__init__.py", "simt_cupy_standin")


def test_standin_arrays_are_host_memory_at_data_ptr(cp):
    a = cp.asarray(np.arange(5, dtype=np.int64))
    assert isinstance(a, cp.ndarray) and not isinstance(np.arange(2), cp.ndarray)
    assert a.data.ptr == a.ctypes.data
    np.ctypeslib.as_array((np.ctypeslib.ctypes.c_int64 * 5).from_address(a.data.ptr))[2] = 7
    assert cp.asnumpy(a).tolist() == [0, 1, 7, 3, 4]
    assert type(cp.asnumpy(a)) is np.ndarray


def test_standin_refuses_numpy_operands_and_unknown_names(cp):
    a = cp.zeros(3, dtype=cp.int32)
    with pytest.raises(TypeError, match="does not mix"):
        a + np.ones(3, np.int32)
    with pytest.raises(TypeError, match="does not mix"):
        cp.concatenate([a, np.ones(3, np.int32)])
    assert isinstance(a + 1, cp.ndarray) and isinstance(a.sum(), cp.ndarray)
    with pytest.raises(AttributeError, match="not in the simt CuPy stand-in"):
        cp.fft  # noqa: B018
    with pytest.raises(AttributeError, match="not in the simt CuPy stand-in"):
        cp.cuda.Memory  # noqa: B018


def test_standin_empty_is_not_zeroed(cp):
    assert (cp.asnumpy(cp.empty(4, dtype=cp.uint8)) == 0xA5).all()
    assert (cp.asnumpy(cp.zeros(4, dtype=cp.uint8)) == 0).all()


# ------------------------------------------------------------------ kernels with defects ---
def test_barrier_makes_shared_writes_visible_and_its_absence_is_seen(kernels, schedule):
    out = np.zeros(1, np.int64)
    for mode in ("ordered", "random:3"):
        schedule(mode)
        assert kernels.shared_sum(ptr(out), True) == OK
        assert out[0] == THREADS * (THREADS - 1) // 2
        assert kernels.shared_sum(ptr(out), False) == OK
        assert out[0] != THREADS * (THREADS - 1) // 2, mode  # thread 0 read poisoned slots


def test_divergent_barriers_are_an_error_naming_both_sites(kernels):
    out = np.zeros(THREADS, np.int32)
    name, message = kernels.divergent_barrier(ptr(out))
    assert name == "cudaErrorLaunchFailure"
    assert "divergence" in message and message.count("selftest_kernels.cu:") == 2
    assert kernels.shared_sum(ptr(np.zeros(1, np.int64)), True) == OK  # the error was read


def test_exit_before_a_barrier_others_wait_at_is_an_error(kernels):
    name, message = kernels.early_exit(ptr(np.zeros(THREADS, np.int32)))
    assert name == "cudaErrorLaunchFailure"
    assert "thread 0 has exited" in message


def test_cub_temp_storage_reuse_needs_a_barrier(kernels):
    out = np.zeros(2, np.int64)
    assert kernels.reduce_twice(ptr(out), True) == OK
    assert out.tolist() == [THREADS * (THREADS - 1) // 2, THREADS]
    name, message = kernels.reduce_twice(ptr(out), False)
    assert name == "cudaErrorLaunchFailure"
    assert "TempStorage" in message and "without a __syncthreads()" in message


def test_cub_block_shape_must_match_the_template(kernels):
    out = np.zeros(1, np.int64)
    assert kernels.reduce_shape(ptr(out), THREADS) == OK and out[0] == THREADS
    name, message = kernels.reduce_shape(ptr(out), 32)
    assert name == "cudaErrorLaunchFailure"
    assert "used in a block of (32, 1, 1) threads" in message


def test_block_scan_exclusive_sums_and_aggregate(kernels, schedule):
    for mode in ("ordered", "random:5"):
        schedule(mode)
        out = np.zeros(THREADS, np.int64)
        total = np.zeros(THREADS, np.int64)
        assert kernels.scan(ptr(out), ptr(total)) == OK
        assert out.tolist() == [3 * i for i in range(THREADS)]
        assert (total == THREADS).all()


def test_shared_memory_starts_poisoned(kernels):
    out = np.ones(THREADS, np.int32)
    assert kernels.uninitialized_shared(ptr(out), True) == OK and (out == 0).all()
    assert kernels.uninitialized_shared(ptr(out), False) == OK and (out != 0).all()


def test_syncthreads_votes(kernels):
    out = np.zeros(3, np.int32)
    flags = np.zeros(THREADS, np.int32)
    flags[5] = 1
    assert kernels.vote(ptr(flags), ptr(out)) == OK and out.tolist() == [1, 0, 1]
    flags[:] = 1
    assert kernels.vote(ptr(flags), ptr(out)) == OK and out.tolist() == [1, 1, THREADS]


@pytest.mark.parametrize(
    "blocks, threads, shared",
    [(1, 1025, 0), (0, 32, 0), (1, 32, 64 * 1024)],
    ids=["1025-threads", "empty-grid", "64KiB-shared"],
)
def test_bad_launch_shapes_are_refused_and_not_sticky(kernels, blocks, threads, shared):
    out = np.zeros(8, np.float32)
    name, message = kernels.fill(ptr(out), 1.0, 8, blocks, threads, shared)
    assert name == "cudaErrorInvalidConfiguration" and "fill_kernel" in message
    assert (out == 0).all()
    assert kernels.fill(ptr(out), 2.0, 8, 3, 2, 0) == OK and (out == 2).all()


def test_random_schedule_is_seeded_and_ordered_schedule_is_in_order(kernels, schedule):
    def order():
        o = np.full(2 * THREADS, -1, np.int32)
        nxt = np.zeros(1, np.int32)
        assert kernels.ticket(ptr(o), ptr(nxt), 2, THREADS) == OK
        assert sorted(o.tolist()) == list(range(2 * THREADS))
        return o.tolist()

    schedule("ordered")
    assert order() == list(range(2 * THREADS))
    schedule("random:11")
    first = order()
    assert first != list(range(2 * THREADS))
    schedule("ordered")
    order()
    schedule("random:11")
    assert order() == first  # the same seed, the same schedule
    schedule("random:12")
    assert order() != first


def test_bad_schedule_value_is_an_error(kernels, schedule):
    schedule("sometimes")
    name, message = kernels.fill(ptr(np.zeros(1, np.float32)), 1.0, 1, 1, 1, 0)
    assert name == "cudaErrorInvalidValue" and "FD_MTP_SIMT_SCHEDULE=sometimes" in message


_IPC_SCRIPT = """
import importlib.util, os, sys
import numpy as np
spec = importlib.util.spec_from_file_location("fd_mtp_cuda", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
buf = np.zeros(4, np.float32)
try:
    module.ipc_publish_cuda(buf.ctypes.data, buf.nbytes, sys.argv[2], 0, [4], 4, "float32")
except RuntimeError as exc:
    print("refused:", exc)
else:
    print("published")
"""


def test_cuda_ipc_is_not_supported_on_the_emulator():
    """In a process of its own: the emulated fd_mtp_cuda registers the same pybind11 types as
    the real module (fd_mtp/_lib, built by make test where nvcc is installed), which this
    pytest process may have loaded already."""
    found = sorted(LIB.glob("fd_mtp_cuda*.so"))
    if not found:
        pytest.skip(f"no simt build in {LIB} (make simt)")
    name = f"/fd_mtp_simt_test_{os.getpid()}"
    proc = subprocess.run(
        [sys.executable, "-c", _IPC_SCRIPT, str(found[0]), name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused:") and "not supported" in proc.stdout, proc.stdout
    assert not os.path.exists(f"/dev/shm{name}")


TSAN_LIB = ROOT / "build" / "simt-tsan" / "lib"
_RACE_SCRIPT = """
import importlib.util, sys
import numpy as np
path = sorted(__import__("pathlib").Path(sys.argv[1]).glob("simt_selftest*.so"))[0]
spec = importlib.util.spec_from_file_location("_simt_tsan.simt_selftest", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
out = np.zeros(1, np.int64)
print(m.shared_sum(out.ctypes.data, sys.argv[2] == "barrier"), int(out[0]))
"""


@pytest.mark.parametrize("barrier", [True, False], ids=["barrier", "no-barrier"])
def test_thread_sanitizer_build_names_the_race_of_a_missing_barrier(barrier):
    """make test-simt-tsan's build: the missing __syncthreads of shared_sum_kernel is a data race
    ThreadSanitizer reports with the kernel's source lines; with the barrier it is silent."""
    if not sorted(TSAN_LIB.glob("simt_selftest*.so")):
        pytest.skip(f"no ThreadSanitizer build in {TSAN_LIB} (make test-simt-tsan)")
    libtsan = subprocess.run(
        ["g++", "-print-file-name=libtsan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=libtsan, TSAN_OPTIONS="halt_on_error=1 exitcode=66")
    run = subprocess.run(
        [sys.executable, "-c", _RACE_SCRIPT, str(TSAN_LIB), "barrier" if barrier else "none"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if barrier:
        assert run.returncode == 0, run.stderr[-3000:]
        assert "2016" in run.stdout
    else:
        assert run.returncode == 66, run.stdout + run.stderr[-3000:]
        assert "ThreadSanitizer: data race" in run.stderr
        assert "selftest_kernels.cu" in run.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
