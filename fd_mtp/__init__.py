"""fd_mtp: PaddlePaddle custom ops for MTP (multi-token-prediction) speculative decoding.

Importing this package is cheap: paddle and the compiled extension are loaded on
first use of an op (`fd_mtp.ops`), the numpy references (`fd_mtp.reference`)
need only numpy, and the raw CUDA module (`fd_mtp.cuda`) needs no paddle.
`fd_mtp.LLM` and `fd_mtp.SamplingParams` (the Python API, `fd_mtp.llm`) are
imported on first access.

On Linux AMD CPUs with AVX2, importing fd_mtp before paddle sets ``MKL_DEBUG_CPU_TYPE=5`` (unless it
is set), so that the MKL bundled with paddle's CPU wheel runs its AVX2 matmuls instead of its generic
code (see `_mkl_cpu_type`), and paddle's import-time ccache warning is filtered (`_quiet_paddle`).
"""

__version__ = "0.1.0"


def _mkl_cpu_type(cpuinfo: str) -> str | None:
    r"""The ``MKL_DEBUG_CPU_TYPE`` to use for a CPU described by ``/proc/cpuinfo`` text, or None.

    Paddle's CPU wheel bundles an MKL (mklml) whose dispatcher sends AMD processors to its generic
    SSE code: small matmuls (decode-sized GEMMs) run about 4x slower than its AVX2 code on the same
    machine. ``MKL_DEBUG_CPU_TYPE=5`` selects the AVX2 code; it is only safe where the CPU has AVX2.

    >>> _mkl_cpu_type("vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n")
    '5'
    >>> _mkl_cpu_type("vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx avx2\n") is None
    True
    >>> _mkl_cpu_type("vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx\n") is None
    True
    """
    block = cpuinfo.split("\n\n", 1)[0]
    flags = next(
        (line.split(":", 1)[1].split() for line in block.splitlines() if line.startswith("flags")),
        [],
    )
    return "5" if "AuthenticAMD" in block and "avx2" in flags else None


def _prefer_mkl_avx2() -> None:
    """Set ``MKL_DEBUG_CPU_TYPE`` (see `_mkl_cpu_type`) before paddle loads MKL: only on Linux, only
    when neither the variable is set (set it yourself to keep MKL's own choice) nor paddle is
    already imported (then it is too late and nothing changes)."""
    import os
    import sys

    if (
        "MKL_DEBUG_CPU_TYPE" in os.environ
        or "paddle" in sys.modules
        or not sys.platform.startswith("linux")
    ):
        return
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpuinfo = f.read(16384)
    except OSError:
        return
    value = _mkl_cpu_type(cpuinfo)
    if value is not None:
        os.environ["MKL_DEBUG_CPU_TYPE"] = value


def _quiet_paddle() -> None:
    """Silence paddle's import-time ``UserWarning: No ccache found ...`` (about compiling extensions
    with ``paddle.utils.cpp_extension``, which fd_mtp never does at run time). Only that message is
    filtered, and only when fd_mtp is imported before paddle."""
    import warnings

    warnings.filterwarnings("ignore", message=r"No ccache found", category=UserWarning)


_prefer_mkl_avx2()
_quiet_paddle()

__all__ = ["__version__", "LLM", "SamplingParams", "RequestOutput", "SpeculativeConfig"]

_LAZY = {
    "LLM": ("fd_mtp.llm", "LLM"),
    "SamplingParams": ("fd_mtp.engine.sampling_params", "SamplingParams"),
    "RequestOutput": ("fd_mtp.engine.request", "RequestOutput"),
    "SpeculativeConfig": ("fd_mtp.config", "SpeculativeConfig"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fd_mtp' has no attribute {name!r}")
