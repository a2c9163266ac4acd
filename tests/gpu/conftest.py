"""Setup of the GPU parity tests (tests/gpu): CuPy + a CUDA GPU + the fd_mtp_cuda module.

These tests need neither paddle nor hypothesis. tools/gpu_check.sh runs them with
``--confcutdir=tests/gpu`` so that tests/conftest.py (which imports hypothesis) is not loaded;
under a plain ``pytest tests`` that conftest loads first, which is fine where hypothesis exists.

Each test_gpu_*.py skips its whole module (gpu_util.skip_module_without_gpu) (never fails) when a
requirement is missing.

FD_MTP_SIMT=1 runs them on the CPU instead (`make test-simt`): the CUDA kernels built for the simt
emulator (tools/simt; module from FD_MTP_CUDA_MODULE_DIR, default build/simt/lib) and the numpy
CuPy stand-in tools/simt/python/cupy, put first on sys.path for this pytest process only. Then a
missing module is an error, not a skip.
"""

import os
import pathlib
import sys

import pytest

# Make `fd_mtp` importable from the checkout when pytest runs with a confcutdir/rootdir that
# does not put the repository root on sys.path.
ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The parity and bad-input tests expect an op's error at the op: fd_mtp.cuda's checked mode
# (docs/gpu_errors.md). test_gpu_errors.py switches modes itself.
os.environ.setdefault("FD_MTP_CUDA_ERRORS", "checked")

SIMT = os.environ.get("FD_MTP_SIMT", "") == "1"
if SIMT:
    if "cupy" in sys.modules and not getattr(sys.modules["cupy"], "SIMT_STANDIN", False):
        raise pytest.UsageError("FD_MTP_SIMT=1 but the real CuPy is already imported")
    sys.path.insert(0, str(ROOT / "tools" / "simt" / "python"))
    os.environ.setdefault("FD_MTP_CUDA_MODULE_DIR", str(ROOT / "build" / "simt" / "lib"))
    import fd_mtp.cuda

    try:
        fd_mtp.cuda.load()
    except ImportError as exc:
        raise pytest.UsageError(
            f"FD_MTP_SIMT=1: {exc} (build it with `make simt` or tools/simt/build.py)"
        ) from exc


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in item.nodeid or item.nodeid.startswith("test_gpu"):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture
def clean_stream():
    """Nothing pending on the stream before and after the test (a failed test leaves no poison);
    the error-model tests use it on every test (``pytest.mark.usefixtures``)."""
    import fd_mtp.cuda

    fd_mtp.cuda.pending()
    yield
    fd_mtp.cuda.pending()
