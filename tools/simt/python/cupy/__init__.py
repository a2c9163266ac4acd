"""A numpy-backed stand-in for the small part of CuPy that fd_mtp.cuda and tests/gpu use, for
running tests/gpu on the simt emulator (tools/simt), where "device memory" is host memory.

Never installed: tests/gpu/conftest.py puts this directory first on sys.path only when
FD_MTP_SIMT=1, so a machine with a GPU always tests with the real CuPy.

``cupy.ndarray`` is a numpy subclass whose ``.data.ptr`` is the buffer's address (what the
launchers of the emulated fd_mtp_cuda take). Like CuPy, it does not mix with numpy arrays in
arithmetic (TypeError) and ``cupy.empty`` memory is not zeroed (it holds a poison pattern).
Anything outside the subset raises AttributeError naming it, instead of guessing. Known gap:
``numpy.asarray(device_array)`` succeeds here, where CuPy raises TypeError.
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
        _counters.note_host_read()
        return _np.array(self.view(_np.ndarray))

    def set(self, arr):
        self[...] = arr

    # Reading a value on the host waits for the device, as in CuPy.
    def item(self, *args):
        _counters.note_host_read()
        return super().item(*args)

    def tolist(self):
        _counters.note_host_read()
        return super().tolist()

    def __int__(self):
        _counters.note_host_read()
        return super().__int__()

    def __float__(self):
        _counters.note_host_read()
        return super().__float__()

    def __bool__(self):
        _counters.note_host_read()
        return super().__bool__()

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        _refuse_host(inputs, f"cupy.{ufunc.__name__}")
        if out is not None:
            _refuse_host(out, f"cupy.{ufunc.__name__}")
            kwargs["out"] = tuple(_host_view(o) for o in out)
        result = getattr(ufunc, method)(*_host_view(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _device(result)

    def __array_function__(self, func, types, args, kwargs):
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
        _counters.note_host_read()
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
    _np.copyto(_host_view(dst), _host_view(src))


arange = _wrap("arange")
concatenate = _wrap("concatenate")
cumsum = _wrap("cumsum")
stack = _wrap("stack")
where = _wrap("where")


class _Cuda:
    """``cupy.cuda``: one device (0), the legacy default stream (pointer 0)."""

    class Device:
        def __init__(self, device=0):
            self.id = int(device)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            pass

    class Stream:
        def __init__(self, ptr=0):
            self.ptr = ptr

        def synchronize(self):
            pass

    class runtime:  # noqa: N801 (CuPy's name)
        @staticmethod
        def getDeviceCount():  # noqa: N802 (CuPy's name)
            return 1

    @staticmethod
    def get_current_stream():
        return _Cuda.Stream(0)

    def __getattr__(self, name):
        raise AttributeError(f"cupy.cuda.{name} is not in the simt CuPy stand-in")


cuda = _Cuda()


def __getattr__(name):
    raise AttributeError(
        f"cupy.{name} is not in the simt CuPy stand-in (tools/simt/python/cupy): add it there"
    )
