"""The docstring examples of the engine modules run as written."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    [
        "fd_mtp",
        "fd_mtp.engine.block_manager",
        "fd_mtp.engine.sampler",
        "fd_mtp.engine.sampling_params",
        "fd_mtp.engine.request",
    ],
)
def test_docstring_examples(name):
    if name.endswith("sampler"):
        pytest.importorskip("paddle")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_mkl_dispatch_setting_runs_before_paddle_only(tmp_path):
    """A fresh interpreter that imports fd_mtp first gets MKL_DEBUG_CPU_TYPE exactly when the CPU is
    an AVX2 AMD one; a value set by the user is kept."""
    import os
    import subprocess
    import sys

    from fd_mtp import _mkl_cpu_type

    with open("/proc/cpuinfo") as f:
        want = _mkl_cpu_type(f.read(16384))
    code = "import os, fd_mtp; print(os.environ.get('MKL_DEBUG_CPU_TYPE'))"
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(want)
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "MKL_DEBUG_CPU_TYPE": "2"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "2"
