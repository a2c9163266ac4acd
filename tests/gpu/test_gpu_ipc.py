"""KV-cache sharing through CUDA IPC (fd_mtp.cuda.set_data_ipc / share_external_data /
unset_data_ipc, spec §7) between two real processes on one GPU.

The second process is a multiprocessing 'spawn' child (gpu_ipc_worker.py) driven over a Pipe;
each command waits for its answer (the child synchronises its stream before answering a write),
which orders the two writers. A process cannot open its own IPC handle (CUDA's rule), so every
attachment happens in the process that did not publish. No numpy reference: the ops move no
data; expected arrays are the values written. Checks at the end that /dev/shm is clean.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module; skipped otherwise. Needs no paddle.
"""

import gc
import itertools
import os
import pathlib

import numpy as np
import pytest
from gpu_util import assert_exact, on_simt, skip_module_without_gpu

skip_module_without_gpu()
if on_simt():
    pytest.skip(
        "CUDA IPC has no CPU meaning: the simt emulator's IPC calls return cudaErrorNotSupported "
        "(tests/simt/test_simt.py checks that)",
        allow_module_level=True,
    )

import cupy as cp  # noqa: E402
import gpu_ipc_worker  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp.testing.child import Child, new_shm_segments  # noqa: E402
from fd_mtp.testing.child import shm_entries as child_shm_entries  # noqa: E402

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
# bfloat16 has no CuPy dtype: its 2-byte storage (uint16 bits) stands in; the ops see only bytes.
DTYPES = ("float32", "float16", "uint16", "uint8")
KV_SHAPE = [6, 2, 4, 8]  # [num_blocks, kv_num_heads, block_size, head_dim]
TIMEOUT = 120
_names = itertools.count()


def fresh_name():
    return f"/fd_mtp_gpu_test_{os.getpid()}_{next(_names)}"


SHM_PREFIXES = ("fd_mtp_gpu_test_",)


def shm_entries():
    return child_shm_entries(SHM_PREFIXES)


def values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "ui":
        return rng.integers(1, 200, size=shape).astype(dtype)
    v = rng.uniform(-4, 4, size=shape).astype(dtype)
    return np.where(v == 0, np.asarray(1, dtype), v)


def spawn_child():
    """A spawned second process running gpu_ipc_worker.serve."""
    return Child(gpu_ipc_worker.serve, ROOT, TIMEOUT)


@pytest.fixture(scope="module", autouse=True)
def no_leaked_segments():
    with new_shm_segments(SHM_PREFIXES) as leaked:
        yield
    assert not leaked, f"segments left in /dev/shm: {sorted(leaked)}"


@pytest.fixture(scope="module")
def child():
    with spawn_child() as c:
        yield c


def sync():
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.parametrize("dtype", DTYPES)
def test_parent_publishes_child_attaches_both_write(child, dtype):
    name = fresh_name()
    cache = cp.zeros(KV_SHAPE, dtype)
    a = values(dtype, [3] + KV_SHAPE[1:], seed=1)
    b = values(dtype, [3] + KV_SHAPE[1:], seed=2)
    cache[0:3] = cp.asarray(a)
    sync()
    fcuda.set_data_ipc(cache, name)

    child.call("attach", "kv", name, dtype, KV_SHAPE)
    zeros = np.zeros([3] + KV_SHAPE[1:], dtype)
    assert_exact(
        child.call("read", "kv"), np.concatenate([a, zeros]), "child sees the parent's write"
    )

    child.call("write", "kv", 3, 6, b)
    assert_exact(cp.asnumpy(cache), np.concatenate([a, b]), "parent sees the child's write")

    c = values(dtype, [1] + KV_SHAPE[1:], seed=3)
    cache[5:6] = cp.asarray(c)
    sync()
    assert_exact(
        child.call("read", "kv"), np.concatenate([a, b[:2], c]), "child sees the overwrite"
    )

    child.call("free", "kv")
    fcuda.unset_data_ipc(cache, name, False, True)
    assert name[1:] not in shm_entries()


def test_array_inside_a_larger_allocation_is_published_at_its_offset(child):
    name = fresh_name()
    base = cp.zeros((8, 256), cp.float32)
    fcuda.set_data_ipc(base[3:], name)  # 3 KiB after the allocation's start
    child.call("attach", "tail", name, "float32", [5, 256])
    child.call("write", "tail", 0, 1, np.full([1, 256], 7.0, np.float32))
    expected = np.zeros((8, 256), np.float32)
    expected[3] = 7.0
    assert_exact(cp.asnumpy(base), expected, "base")
    kind, msg = child.try_call("attach", "big", name, "float32", [6, 256])
    assert kind == "ValueError" and "share_external_data: shape [6, 256]" in msg, msg
    child.call("free", "tail")
    fcuda.unset_data_ipc(base, name, False, True)


def test_child_publishes_parent_attaches_closes_and_child_exit_removes_the_name():
    name = fresh_name()
    producer = spawn_child()
    try:
        data = values("float32", KV_SHAPE, seed=4)
        producer.call("alloc", "kv", KV_SHAPE, "float32")
        producer.call("write", "kv", 0, 6, data)
        producer.call("publish", "kv", name)
        like = cp.empty(1, cp.float32)
        mine = fcuda.share_external_data(like, name, KV_SHAPE)
        again = fcuda.share_external_data(
            like, name, [int(np.prod(KV_SHAPE))]
        )  # same handle: reused
        assert_exact(cp.asnumpy(mine), data, "parent sees the child's data")
        mine[2] = 5.0
        sync()
        expected = data.copy()
        expected[2] = 5.0
        assert_exact(producer.call("read", "kv"), expected, "child sees the parent's write")
        assert_exact(cp.asnumpy(again).reshape(KV_SHAPE), expected, "second attachment")

        fcuda.unset_data_ipc(mine, name, True, False)  # closes the handle behind both arrays
        with pytest.raises(ValueError, match=r"unset_data_ipc: tensor was not attached"):
            fcuda.unset_data_ipc(again, name, True, False)
        del mine, again
        gc.collect()
        reopened = fcuda.share_external_data(like, name, KV_SHAPE)  # a fresh open after the close
        assert_exact(cp.asnumpy(reopened), expected, "reopened")
        del reopened
        gc.collect()
        assert name[1:] in shm_entries()
    finally:
        producer.exit()  # normal exit without unset: its atexit removes the publication
    assert name[1:] not in shm_entries()


def test_fastdeploy_72_byte_record_is_accepted():
    """FastDeploy's segment is only {size_t nprocesses; cudaIpcMemHandle_t}: offset 0, size unknown."""
    name, legacy = fresh_name(), fresh_name()
    producer = spawn_child()
    try:
        data = values("float16", [64], seed=5)
        producer.call("alloc", "kv", [64], "float16")  # its own cudaMalloc: the array starts it
        producer.call("write", "kv", 0, 64, data)
        producer.call("publish", "kv", name)
        with open(f"/dev/shm{name}", "rb") as f:
            record = f.read(72)
        with open(f"/dev/shm{legacy}", "wb") as f:
            f.write(record)
        like = cp.empty(1, cp.float16)
        view = fcuda.share_external_data(like, legacy, [64])
        assert_exact(cp.asnumpy(view), data, "attached through the 72-byte record")
        with pytest.raises(ValueError, match=r"share_external_data: shape \[100000000\]"):
            fcuda.share_external_data(like, legacy, [100_000_000])
        del view
        gc.collect()
        fcuda.unset_data_ipc(None, legacy, False, True)
        producer.call("unset", "kv", name, False, True)
    finally:
        producer.exit()


def test_bad_input_raises_naming_the_argument():
    like = cp.empty(1, cp.float32)
    name = fresh_name()
    with pytest.raises(
        ValueError, match=rf"share_external_data: shm_name '{name}' names no shared-memory"
    ):
        fcuda.share_external_data(like, name, [4])
    with pytest.raises(
        ValueError,
        match=r"share_external_data: shm_name '/no_slash_fd_mtp_missing' names no shared-memory",
    ):
        fcuda.share_external_data(like, "no_slash_fd_mtp_missing", [4])
    with pytest.raises(ValueError, match=r"set_data_ipc: shm_name '/a/b' must not contain"):
        fcuda.set_data_ipc(like, "/a/b")
    with pytest.raises(ValueError, match=r"set_data_ipc: tensor must be a cupy.ndarray"):
        fcuda.set_data_ipc(np.zeros(4, np.float32), name)
    with pytest.raises(ValueError, match=r"unset_data_ipc: tensor was not attached"):
        fcuda.unset_data_ipc(like, name, True, False)
    with pytest.raises(
        ValueError, match=rf"unset_data_ipc: shm_name '{name}' names no shared-memory"
    ):
        fcuda.unset_data_ipc(like, name, False, True)
    own = cp.zeros(16, cp.float32)
    fcuda.set_data_ipc(own, name)
    with pytest.raises(ValueError, match=r"share_external_data: shape \[17\] with dtype float32"):
        fcuda.share_external_data(like, name, [17])  # checked before any handle is opened
    fcuda.unset_data_ipc(own, name, False, True)
