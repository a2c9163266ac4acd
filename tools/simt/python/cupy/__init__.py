"""A numpy-backed stand-in for the small part of CuPy that fd_mtp.cuda and tests/gpu use, for
running tests/gpu on the simt emulator (tools/simt), where "device memory" is host memory.

Never installed: tests/gpu/conftest.py puts this directory first on sys.path only when
FD_MTP_SIMT=1, so a machine with a GPU always tests with the real CuPy.

``cupy.ndarray`` is a numpy subclass whose ``.data.ptr`` is the buffer's address (what the
launchers of the emulated fd_mtp_cuda take). Like CuPy, it does not mix with numpy arrays in
arithmetic (TypeError) and ``cupy.empty`` memory is not zeroed (it holds a poison pattern).
Anything outside the subset raises AttributeError naming it, instead of guessing. Known gap:
``numpy.asarray(device_array)`` succeeds here, where CuPy raises TypeError.

Streams and CUDA graphs as CuPy has them (``cupy.cuda.Stream(non_blocking=True)``, ``with
stream:``, ``stream.begin_capture()`` / ``graph = stream.end_capture()`` / ``graph.launch(stream)``,
and ``cupy.cuda.runtime.streamBeginCapture`` & co.), on the emulator's stream capture
(tools/simt/runtime.cc): the raw module's launches and async copies on a capturing stream are
recorded, a host read (``get`` / ``asnumpy`` / ``int`` ...) or a synchronisation fails the capture
with CuPy's ``CUDARuntimeError``. Stricter than CuPy in one point: this stand-in runs its own array
operations (creation, arithmetic, item assignment) on the host at once, so it cannot record them;
during a capture they raise instead of running (a captured step must use only the raw module's
launches on persistent buffers, which is what fd_mtp's captured step is built to do).
"""

from __future__ import annotations

import numpy as _np


def _load_counters():
    """tools/simt/python/simt_counters.py (first on sys.path with this package; loaded by its
    path, under the same name, when this file was loaded by path, as tests/simt does)."""
    import importlib.util
    import sys
    from pathlib import Path

    try:
        import simt_counters
    except ImportError:
        path = Path(__file__).resolve().parent.parent / "simt_counters.py"
        spec = importlib.util.spec_from_file_location("simt_counters", path)
        simt_counters = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(simt_counters)
        sys.modules["simt_counters"] = simt_counters
    return simt_counters


_counters = _load_counters()

SIMT_STANDIN = True  # fd_mtp's test helpers tell this stand-in from the real CuPy by it

bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
dtype = _np.dtype

_POISON = 0xA5  # the bytes of a fresh cupy.empty array
_capturing: set = set()  # the stream handles capturing now (runtime.streamBeginCapture)


def _refuse_in_capture(what):
    """The stand-in's own array operations run on the host at once: refused during a capture."""
    if _capturing:
        raise RuntimeError(
            f"simt CuPy stand-in: {what} while a stream captures: the stand-in runs its own array "
            "operations on the host at once and cannot record them (only the raw module's "
            "launches and async copies are captured); use persistent buffers"
        )


def _host_read():
    """A blocking device-to-host read: counted; fails (as in CUDA) while a stream captures."""
    code = _counters.note_host_read()
    if code:
        cuda.runtime._raise(code)


def _is_host_array(x):
    return isinstance(x, _np.ndarray) and not isinstance(x, ndarray)


def _refuse_host(values, what):
    for x in values:
        if _is_host_array(x):
            raise TypeError(
                f"{what}: a cupy.ndarray does not mix with a numpy.ndarray "
                "(copy it with cupy.asarray / cupy.asnumpy first)"
            )
        if isinstance(x, (list, tuple)):
            _refuse_host(x, what)


def _device(x):
    """``x`` (a numpy result) as a device array; scalars become 0-d arrays, as in CuPy."""
    if isinstance(x, tuple):
        return tuple(_device(v) for v in x)
    if isinstance(x, ndarray):
        return x
    if isinstance(x, (_np.ndarray, _np.generic)):
        return _np.asarray(x).view(ndarray)
    return x


def _host_view(x):
    if isinstance(x, ndarray):
        return x.view(_np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_host_view(v) for v in x)
    return x


class _MemoryPointer:
    def __init__(self, ptr, mem=None):
        self.ptr = ptr
        self.mem = mem


class ndarray(_np.ndarray):  # noqa: N801 (CuPy's name)
    """A device array: numpy storage, CuPy's ``.data.ptr`` / ``.device`` / ``.get()``."""

    def __new__(cls, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None:
            raise NotImplementedError(
                "cupy.ndarray(memptr=...): raw device memory (CUDA IPC) has no simt stand-in"
            )
        _refuse_in_capture("a device array allocation")
        a = _np.ndarray.__new__(cls, shape, dtype, strides=strides, order=order)
        _counters.array_allocations += 1
        if a.nbytes:
            a.view(_np.ndarray).reshape(-1).view(_np.uint8)[...] = _POISON
        return a

    @property
    def data(self):
        return _MemoryPointer(self.__array_interface__["data"][0])

    @property
    def device(self):
        return cuda.Device(0)

    def get(self):
        _host_read()
        return _np.array(self.view(_np.ndarray))

    def set(self, arr, stream=None):
        self[...] = arr

    def __getitem__(self, key):
        # An element is a 0-d device array viewing the element, as in CuPy (reading its value is
        # a host read); numpy would return a scalar copy.
        out = super().__getitem__(key)
        if isinstance(out, _np.generic):
            out = super().__getitem__((*key, Ellipsis) if isinstance(key, tuple) else (key, ...))
        return out

    def __setitem__(self, key, value):
        _refuse_in_capture("an item assignment of a device array")
        super().__setitem__(key, value)

    # Reading a value on the host waits for the device, as in CuPy.
    def item(self, *args):
        _host_read()
        return super().item(*args)

    def tolist(self):
        _host_read()
        return super().tolist()

    def __int__(self):
        _host_read()
        return super().__int__()

    def __float__(self):
        _host_read()
        return super().__float__()

    def __bool__(self):
        _host_read()
        return super().__bool__()

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        _refuse_in_capture(f"cupy.{ufunc.__name__}")
        _refuse_host(inputs, f"cupy.{ufunc.__name__}")
        if out is not None:
            _refuse_host(out, f"cupy.{ufunc.__name__}")
            kwargs["out"] = tuple(_host_view(o) for o in out)
        result = getattr(ufunc, method)(*_host_view(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _device(result)

    def __array_function__(self, func, types, args, kwargs):
        _refuse_in_capture(f"cupy.{func.__name__}")
        _refuse_host(args, f"cupy.{func.__name__}")
        _refuse_host(tuple(kwargs.values()), f"cupy.{func.__name__}")
        return _device(func(*_host_view(args), **{k: _host_view(v) for k, v in kwargs.items()}))


def asarray(a, dtype=None, order=None):
    """A device array of ``a``: a copy of host data, ``a`` itself when it already is one."""
    if isinstance(a, ndarray) and (dtype is None or a.dtype == _np.dtype(dtype)):
        return a
    host = _np.array(_host_view(a), dtype=dtype, order=order or "C", copy=True)
    out = ndarray(host.shape, host.dtype)
    out.view(_np.ndarray)[...] = host
    return out


array = asarray


def asnumpy(a):
    """A host numpy copy of ``a``."""
    if isinstance(a, ndarray):
        _host_read()
    return _np.array(_host_view(a), copy=True)


def ascontiguousarray(a, dtype=None):
    return asarray(_np.ascontiguousarray(_host_view(a), dtype=dtype))


def empty(shape, dtype=float, order="C"):
    return ndarray(shape, dtype, order=order)


def zeros(shape, dtype=float, order="C"):
    a = ndarray(shape, dtype, order=order)
    a.view(_np.ndarray)[...] = 0
    return a


def ones(shape, dtype=float, order="C"):
    a = ndarray(shape, dtype, order=order)
    a.view(_np.ndarray)[...] = 1
    return a


def full(shape, fill_value, dtype=None, order="C"):
    host = _np.full(shape, fill_value, dtype=dtype, order=order)
    return asarray(host)


def _wrap(name):
    func = getattr(_np, name)

    def device_func(*args, **kwargs):
        _refuse_in_capture(f"cupy.{name}")
        _refuse_host(args, f"cupy.{name}")
        _refuse_host(tuple(kwargs.values()), f"cupy.{name}")
        return _device(func(*_host_view(args), **{k: _host_view(v) for k, v in kwargs.items()}))

    device_func.__name__ = name
    device_func.__doc__ = f"numpy.{name} on device arrays (simt stand-in)."
    return device_func


def copyto(dst, src):
    """cupy.copyto: ``dst`` a device array, ``src`` a device array or a scalar (simt stand-in)."""
    if not isinstance(dst, ndarray):
        raise TypeError("cupy.copyto: dst must be a cupy.ndarray")
    _refuse_host((src,), "cupy.copyto")
    _refuse_in_capture("cupy.copyto")
    _np.copyto(_host_view(dst), _host_view(src))


arange = _wrap("arange")
concatenate = _wrap("concatenate")
cumsum = _wrap("cumsum")
stack = _wrap("stack")
where = _wrap("where")


def _lib():
    """The emulator's runtime (the loaded emulated fd_mtp_cuda), its capture entry points typed."""
    import ctypes

    lib = _counters._runtime()
    if lib is None:
        raise RuntimeError(
            "simt CuPy stand-in: streams and graphs need the emulated fd_mtp_cuda loaded first "
            "(fd_mtp.cuda.load())"
        )
    if not getattr(lib, "_capture_typed", False):
        u, p, i = ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_int
        for fn, args in (
            ("simt_stream_begin_capture", [u, i]),
            ("simt_stream_end_capture", [u, p]),
            ("simt_stream_is_capturing", [u, ctypes.POINTER(i)]),
            ("simt_graph_instantiate", [u, p]),
            ("simt_graph_launch", [u, u]),
            ("simt_graph_destroy", [u]),
            ("simt_graph_exec_destroy", [u]),
            ("simt_stream_synchronize", [u]),
            ("simt_device_synchronize", []),
            ("simt_get_last_error", []),
            ("simt_error_name", [i]),
            ("simt_error_string", [i]),
        ):
            f = getattr(lib, fn)
            f.argtypes = args
            f.restype = ctypes.c_char_p if fn.startswith("simt_error_") else i
        lib.simt_graph_exec_nodes.argtypes = [u, ctypes.POINTER(ctypes.c_int64)]
        lib.simt_graph_exec_nodes.restype = ctypes.c_int64
        lib._capture_typed = True
    return lib


class CUDARuntimeError(RuntimeError):
    """cupy.cuda.runtime.CUDARuntimeError: a CUDA runtime call failed (``status``: the code)."""

    def __init__(self, status, message):
        self.status = status
        super().__init__(message)


class _Graph:
    """cupy.cuda.Graph: an instantiated graph (made by Stream.end_capture)."""

    def __init__(self, exec_):
        self._exec = exec_

    def __del__(self):
        if getattr(self, "_exec", 0) and _counters._lib is not None:
            _counters._lib.simt_graph_exec_destroy(self._exec)
            self._exec = 0

    def launch(self, stream=None):
        ptr = _Cuda.get_current_stream().ptr if stream is None else stream.ptr
        _Cuda.runtime.graphLaunch(self._exec, ptr)

    def upload(self, stream=None):
        pass

    def node_counts(self):
        """simt only: {"kernel": n, "memcpy": n, "memset": n} of the graph's nodes."""
        import ctypes

        out = (ctypes.c_int64 * 3)()
        _lib().simt_graph_exec_nodes(self._exec, out)
        return {"kernel": out[0], "memcpy": out[1], "memset": out[2]}


_stream_stack: list = []  # the streams made current by `with stream:` (one host thread)
_next_stream = [0x5000]


class _Cuda:
    """``cupy.cuda``: one device (0), the legacy default stream (pointer 0), streams of their own
    (a handle each; every stream is ordered with every other on the emulator, whose launches run
    at once) and CUDA graphs by stream capture."""

    CUDARuntimeError = CUDARuntimeError
    Graph = _Graph

    class Device:
        def __init__(self, device=0):
            self.id = int(device)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            if _counters._runtime(strict=False) is not None:
                _Cuda.runtime._check(_lib().simt_device_synchronize())

    class Stream:
        def __init__(self, null=False, non_blocking=False, ptds=False, ptr=None):
            if ptr is not None:
                self.ptr = ptr
            elif null or ptds:
                self.ptr = 0 if null else 2
            else:
                _next_stream[0] += 16
                self.ptr = _next_stream[0]
            self.device_id = 0

        def __eq__(self, other):
            return isinstance(other, _Cuda.Stream) and other.ptr == self.ptr

        def __hash__(self):
            return self.ptr

        def __enter__(self):
            _stream_stack.append(self)
            return self

        def __exit__(self, *exc):
            _stream_stack.pop()
            return False

        def use(self):
            if _stream_stack:
                _stream_stack[-1] = self
            else:
                _stream_stack.append(self)
            return self

        def synchronize(self):
            if _counters._runtime(strict=False) is not None:
                _Cuda.runtime._check(_lib().simt_stream_synchronize(self.ptr))

        def begin_capture(self, mode=None):
            if self.ptr in (0, 1):
                raise RuntimeError("cannot capture on the default (legacy) stream")
            _Cuda.runtime.streamBeginCapture(
                self.ptr, _Cuda.runtime.streamCaptureModeRelaxed if mode is None else mode
            )

        def end_capture(self):
            graph = _Cuda.runtime.streamEndCapture(self.ptr)
            exec_ = _Cuda.runtime.graphInstantiate(graph)
            _Cuda.runtime.graphDestroy(graph)
            return _Graph(exec_)

        def is_capturing(self):
            return _Cuda.runtime.streamIsCapturing(self.ptr)

    class runtime:  # noqa: N801 (CuPy's name)
        CUDARuntimeError = CUDARuntimeError
        streamCaptureModeGlobal = 0  # noqa: N815 (CuPy's names)
        streamCaptureModeThreadLocal = 1  # noqa: N815
        streamCaptureModeRelaxed = 2  # noqa: N815

        @staticmethod
        def getDeviceCount():  # noqa: N802 (CuPy's name)
            return 1

        @staticmethod
        def _raise(code):
            lib = _lib()
            lib.simt_get_last_error()  # as CuPy's check_status: the error is read
            name = lib.simt_error_name(code).decode()
            raise CUDARuntimeError(code, f"{name}: {lib.simt_error_string(code).decode()}")

        @staticmethod
        def _check(code):
            if code:
                _Cuda.runtime._raise(code)

        @staticmethod
        def streamBeginCapture(stream, mode=2):  # noqa: N802
            _Cuda.runtime._check(_lib().simt_stream_begin_capture(stream, mode))
            _capturing.add(stream)

        @staticmethod
        def streamEndCapture(stream):  # noqa: N802
            import ctypes

            graph = ctypes.c_uint64(0)
            code = _lib().simt_stream_end_capture(stream, ctypes.byref(graph))
            _capturing.discard(stream)
            _Cuda.runtime._check(code)
            return graph.value

        @staticmethod
        def streamIsCapturing(stream):  # noqa: N802
            import ctypes

            status = ctypes.c_int(0)
            _Cuda.runtime._check(_lib().simt_stream_is_capturing(stream, ctypes.byref(status)))
            if status.value == 2:  # invalidated: CuPy raises from cudaStreamIsCapturing's status
                raise CUDARuntimeError(901, "cudaErrorStreamCaptureInvalidated")
            return status.value == 1

        @staticmethod
        def graphInstantiate(graph):  # noqa: N802
            import ctypes

            exec_ = ctypes.c_uint64(0)
            _Cuda.runtime._check(_lib().simt_graph_instantiate(graph, ctypes.byref(exec_)))
            return exec_.value

        @staticmethod
        def graphLaunch(exec_, stream):  # noqa: N802
            _Cuda.runtime._check(_lib().simt_graph_launch(exec_, stream))

        @staticmethod
        def graphDestroy(graph):  # noqa: N802
            _lib().simt_graph_destroy(graph)

        @staticmethod
        def graphExecDestroy(exec_):  # noqa: N802
            _lib().simt_graph_exec_destroy(exec_)

    @staticmethod
    def get_current_stream():
        return _stream_stack[-1] if _stream_stack else _Cuda.Stream(ptr=0)

    def __getattr__(self, name):
        raise AttributeError(f"cupy.cuda.{name} is not in the simt CuPy stand-in")


cuda = _Cuda()


def __getattr__(name):
    raise AttributeError(
        f"cupy.{name} is not in the simt CuPy stand-in (tools/simt/python/cupy): add it there"
    )
