"""The CPU decoder layer's AVX2 code and its portable code return the same bits
(custom_ops/kernels/cpu_gemm.h and decoder_layer.h: the same fused multiply-adds in the same order,
exp computed without libm), so the native forward's results do not depend on which x86-64 CPU runs
it. tests/ops/native/portable_paths.cc runs both paths on random matrix products (1 .. 40 rows,
widths that exercise every tile and tail) and whole layers (decodes, chunks, head_dim 8 / 10 / 64);
this test compiles it with the C++ compiler that builds the extension."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent / "native" / "portable_paths.cc"


def _has_avx2_fma() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx2" in flags and " fma" in flags


def test_avx2_and_portable_paths_return_the_same_bits(tmp_path):
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH (the build needs one: see README, Building)")
    if not _has_avx2_fma():
        pytest.skip("this CPU has no AVX2 + FMA: only the portable path runs here")
    exe = tmp_path / "portable_paths"
    subprocess.run(
        [
            cxx,
            "-O2",
            "-std=c++17",
            f"-I{ROOT / 'custom_ops' / 'kernels'}",
            str(SOURCE),
            "-o",
            str(exe),
        ],
        check=True,
        timeout=300,
    )
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=300)
    rows = lines.stdout.split("\n")
    rows = [r for r in rows if r]
    assert len(rows) == 10 * 6 + 27, rows[-3:]
    bad = [r for r in rows if not r.endswith(" same")]
    assert not bad, f"{len(bad)} cases differ between the AVX2 and portable paths: {bad[:5]}"
