"""Configure and build fd_mtp's compiled parts with CMake, using only what the Python environment has.

Used by setup.py (``pip install .`` / ``pip install -e .``) and by the Makefile, which runs it
directly so that the compiler's progress is shown::

    python cmake/fd_mtp_build.py ops           # fd_mtp_ops + fd_mtp_ops_pybind (needs paddle)
    python cmake/fd_mtp_build.py cuda-module   # the raw CUDA module fd_mtp_cuda (needs nvcc, no paddle)

CMake and Ninja are taken from the ``cmake`` and ``ninja`` Python packages installed next to the
running interpreter (requirements.txt pins both), falling back to the ones on PATH; a machine
needs no system CMake. Environment switches (read here, never by a kernel):

    FD_MTP_CUDA_ARCHITECTURES     e.g. "90" (default "80;90")
    FD_MTP_BUILD_DIR              CMake build directory of the ops (default build/cmake)
    CMAKE_BUILD_PARALLEL_LEVEL    parallel compile jobs (default: CPU count)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "fd_mtp" / "_lib"


def _tool(module: str, attr: str, exe: str) -> str | None:
    """The executable ``exe`` of the Python package ``module`` (``module.<attr>`` is its bin
    directory), else the one on PATH, else None."""
    try:
        mod = __import__(module)
        path = Path(getattr(mod, attr)) / exe
        if path.is_file():
            return str(path)
    except (ImportError, AttributeError):
        pass
    return shutil.which(exe)


def cmake_executable() -> str:
    path = _tool("cmake", "CMAKE_BIN_DIR", "cmake")
    if path is None:
        raise SystemExit(
            "fd_mtp build: CMake not found. Install the pinned build tools into this Python "
            f"environment: {sys.executable} -m pip install -r requirements.txt"
        )
    return path


def _generator_args() -> list[str]:
    ninja = _tool("ninja", "BIN_DIR", "ninja")
    if ninja is None:
        return []  # CMake's default generator (Unix Makefiles)
    return ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]


def _cache_has(build_dir: Path, args: list[str]) -> bool:
    """Whether ``build_dir`` is configured with every ``-DKEY=VALUE`` of ``args``."""
    try:
        lines = (build_dir / "CMakeCache.txt").read_text().splitlines()
    except OSError:
        return False
    cache = {}
    for line in lines:
        if "=" in line and ":" in line.split("=", 1)[0] and not line.startswith(("#", "//")):
            key_type, value = line.split("=", 1)
            cache[key_type.split(":", 1)[0]] = value
    for arg in args:
        key, value = arg[2:].split("=", 1)
        if cache.get(key) != value:
            return False
    return True


def build(
    part: str,
    out_dir: Path = DEFAULT_OUT,
    build_dir: Path | None = None,
    quiet: bool = False,
    cuda_kernels_lib: Path | None = None,
) -> None:
    """Configure (once) and build ``part`` ("ops" or "cuda-module") into ``out_dir``.

    A rebuild with nothing changed takes about a second (CMake re-configures only when a CMake file
    changed). Raises CalledProcessError with the compiler's output above it on a build error."""
    if part not in ("ops", "cuda-module"):
        raise ValueError(f"part must be 'ops' or 'cuda-module', got {part!r}")
    cmake = cmake_executable()
    if build_dir is None:
        default = ROOT / "build" / ("cmake" if part == "ops" else "cuda-module")
        build_dir = Path(os.environ.get("FD_MTP_BUILD_DIR", default)) if part == "ops" else default
    build_dir = Path(build_dir)
    args = [
        f"-DPython3_EXECUTABLE={sys.executable}",
        f"-DFD_MTP_OUTPUT_DIR={Path(out_dir).resolve()}",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    if part == "ops":
        args += ["-DFD_MTP_WITH_PADDLE=ON", "-DFD_MTP_WITH_CUDA=OFF"]
    else:
        args += ["-DFD_MTP_WITH_PADDLE=OFF", "-DFD_MTP_WITH_CUDA=ON"]
    if part == "ops":  # "": compile the CUDA sources (when the paddle is a CUDA build)
        lib = Path(cuda_kernels_lib).resolve() if cuda_kernels_lib else ""
        args.append(f"-DFD_MTP_CUDA_KERNELS_LIB={lib}")
    if os.environ.get("FD_MTP_CUDA_ARCHITECTURES"):
        args.append(f"-DFD_MTP_CUDA_ARCHITECTURES={os.environ['FD_MTP_CUDA_ARCHITECTURES']}")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    if not _cache_has(build_dir, args):
        generator = [] if (build_dir / "CMakeCache.txt").exists() else _generator_args()
        subprocess.check_call(
            [cmake, "-S", str(ROOT), "-B", str(build_dir), *generator, *args],
            stdout=subprocess.DEVNULL if quiet else None,
        )
    # else: `cmake --build` re-configures by itself when a CMake file changed
    subprocess.check_call([cmake, "--build", str(build_dir), "-j", jobs])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("ops", "cuda-module"))
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=None,
        help="CMake build directory (default: build/cmake, or FD_MTP_BUILD_DIR; "
        "build/cuda-module for the CUDA module)",
    )
    parser.add_argument(
        "--cuda-kernels-lib",
        type=Path,
        default=None,
        help="ops of a CUDA paddle: link this libfd_mtp_cuda_kernels.a (the raw module's build, "
        "e.g. build/cuda-module/libfd_mtp_cuda_kernels.a) instead of compiling the CUDA sources",
    )
    args = parser.parse_args(argv)
    start = time.monotonic()
    what = {"ops": "the C++ ops (fd_mtp_ops)", "cuda-module": "the CUDA module (fd_mtp_cuda)"}[
        args.part
    ]
    print(
        f"fd_mtp: building {what}; the first build compiles every source (minutes on 2 cores), "
        "later builds only what changed",
        flush=True,
    )
    try:
        build(args.part, args.out_dir, args.build_dir, cuda_kernels_lib=args.cuda_kernels_lib)
    except subprocess.CalledProcessError as exc:
        print(f"fd_mtp: build failed ({exc}); the compiler's message is above", file=sys.stderr)
        return 1
    print(f"fd_mtp: {what} up to date ({time.monotonic() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
