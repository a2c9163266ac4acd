"""The simt runtime's counters of host-visible CUDA calls, read from Python (the emulated
fd_mtp_cuda links tools/simt/runtime.cc, which exports ``simt_counters``).

    import simt_counters
    before = simt_counters.snapshot()
    ...  # ops through fd_mtp.cuda
    used = simt_counters.since(before)   # {"waits": 3, "mallocs": 0, ...}

Keys: ``sync_calls`` (cudaStreamSynchronize / cudaDeviceSynchronize), ``host_reads`` (blocking
device-to-host copies, the CuPy stand-in's ``asnumpy`` / ``.get()`` included), ``waits`` (the
blocking calls of those two kinds that found work enqueued since the previous one: the host
really waits for the device), ``mallocs`` / ``frees`` (cudaMalloc / cudaFree), ``launches``,
``async_ops`` (cudaMemsetAsync, non-blocking copies), ``graph_launches`` (cudaGraphLaunch; the
nodes a launch runs count as launches / async ops), ``captured_nodes`` (launches, memsets and
copies a stream capture recorded instead of running), ``array_allocations`` (device arrays the
CuPy stand-in created: CuPy's memory pool hands them out, not cudaMalloc, but each is an
allocation per call all the same).
"""

from __future__ import annotations

import ctypes
import sys

KEYS = (
    "sync_calls",
    "host_reads",
    "waits",
    "mallocs",
    "frees",
    "launches",
    "async_ops",
    "graph_launches",
    "captured_nodes",
)
_MODULES = ("fd_mtp_cuda", "fd_mtp._lib.fd_mtp_cuda")
_lib = None
array_allocations = 0  # incremented by the CuPy stand-in


def _runtime(strict: bool = True):
    """The loaded emulated module as a ctypes library, or None before it is loaded. A loaded
    fd_mtp_cuda that is not the simt build (the nvcc one, in a process that also uses the stand-in)
    raises when ``strict``, else counts as not loaded (nothing to count on)."""
    global _lib
    if _lib is None:
        for name in _MODULES:
            mod = sys.modules.get(name)
            if mod is not None and getattr(mod, "__file__", None):
                lib = ctypes.CDLL(mod.__file__)
                if not hasattr(lib, "simt_counters"):
                    if not strict:
                        return None
                    raise RuntimeError(f"{mod.__file__} is not the simt build of fd_mtp_cuda")
                lib.simt_counters.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
                lib.simt_counters.restype = ctypes.c_int
                lib.simt_note_host_read.argtypes = []
                lib.simt_note_host_read.restype = ctypes.c_int
                _lib = lib
                break
    return _lib


def note_host_read() -> int:
    """Counts a blocking host read; returns its cudaError_t: nonzero (and nothing counted)
    while a stream captures (the read fails the capture, as in CUDA)."""
    lib = _runtime(strict=False)
    if lib is not None:
        return lib.simt_note_host_read()
    return 0


def snapshot() -> dict[str, int]:
    lib = _runtime()
    if lib is None:
        raise RuntimeError("the emulated fd_mtp_cuda is not loaded (fd_mtp.cuda.load())")
    buf = (ctypes.c_uint64 * len(KEYS))()
    lib.simt_counters(buf, len(KEYS))
    out = {k: int(v) for k, v in zip(KEYS, buf)}
    out["array_allocations"] = array_allocations
    return out


def since(before: dict[str, int]) -> dict[str, int]:
    now = snapshot()
    return {k: now[k] - before[k] for k in now}
