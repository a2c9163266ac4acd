"""Setup of the GPU parity tests (tests/gpu): CuPy + a CUDA GPU + the fd_mtp_cuda module.

These tests need neither paddle nor hypothesis. tools/gpu_check.sh runs them with
``--confcutdir=tests/gpu`` so that tests/conftest.py (which imports hypothesis) is not loaded;
under a plain ``pytest tests`` that conftest loads first, which is fine where hypothesis exists.

Each test_gpu_*.py skips its whole module (gpu_util.skip_module_without_gpu) (never fails) when a
requirement is missing.
"""

import pathlib
import sys

import pytest

# Make `fd_mtp` importable from the checkout when pytest runs with a confcutdir/rootdir that
# does not put the repository root on sys.path.
ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in item.nodeid or item.nodeid.startswith("test_gpu"):
            item.add_marker(pytest.mark.gpu)
