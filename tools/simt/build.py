"""Build the CUDA kernels for the CPU: the raw module fd_mtp_cuda on the simt emulator.

    python tools/simt/build.py            # fibers:      build/simt/lib/fd_mtp_cuda*.so
    python tools/simt/build.py --tsan     # ThreadSanitizer, one OS thread per CUDA thread:
                                          #              build/simt-tsan/lib/fd_mtp_cuda*.so

Like cmake/fd_mtp_build.py it needs no system CMake (the venv's cmake and ninja) and no CUDA
toolkit, no GPU, no paddle. tests/gpu run on the result with FD_MTP_SIMT=1 (see
tests/gpu/conftest.py and the Makefile's test-simt targets); the module directory is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _fd_mtp_build():
    spec = importlib.util.spec_from_file_location(
        "fd_mtp_build", ROOT / "cmake" / "fd_mtp_build.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def output_dir(tsan: bool = False) -> Path:
    """Where the emulated fd_mtp_cuda of that variant is built."""
    return ROOT / "build" / ("simt-tsan" if tsan else "simt") / "lib"


def build(tsan: bool = False) -> Path:
    """Configures (once) and builds the variant; returns its module directory."""
    fb = _fd_mtp_build()
    cmake = fb.cmake_executable()
    build_dir = ROOT / "build" / ("simt-tsan" if tsan else "simt") / "cmake"
    out = output_dir(tsan)
    args = [
        f"-DPython3_EXECUTABLE={sys.executable}",
        f"-DSIMT_OUTPUT_DIR={out}",
        # RelWithDebInfo: pybind11 leaves the module unstripped, so ThreadSanitizer's reports name
        # the kernels' source lines.
        f"-DCMAKE_BUILD_TYPE={'RelWithDebInfo' if tsan else 'Release'}",
        f"-DSIMT_THREADS={'ON' if tsan else 'OFF'}",
    ]
    if not fb._cache_has(build_dir, args):
        generator = [] if (build_dir / "CMakeCache.txt").exists() else fb._generator_args()
        subprocess.check_call(
            [cmake, "-S", str(HERE), "-B", str(build_dir), *generator, *args],
            stdout=subprocess.DEVNULL,
        )
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(min(os.cpu_count() or 1, 2)))
    subprocess.check_call([cmake, "--build", str(build_dir), "-j", jobs])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tsan", action="store_true", help="the ThreadSanitizer variant")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        out = build(args.tsan)
    except subprocess.CalledProcessError as exc:
        print(f"simt: build failed ({exc}); the compiler's message is above", file=sys.stderr)
        return 1
    print(f"simt: {out} up to date ({time.monotonic() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
