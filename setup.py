"""Build fd_mtp's compiled parts with CMake (see CMakeLists.txt).

`pip install .` (or `pip install -e .`) configures and builds custom_ops/ against
the paddle importable by the building Python and puts the libraries into the
package's `_lib` folder. Environment switches (read here, never by a kernel):

    FD_MTP_WITH_CUDA=0|1|auto     CUDA module (default auto: when nvcc is found)
    FD_MTP_CUDA_ARCHITECTURES     e.g. "90" (default "80;90")
    FD_MTP_BUILD_DIR              CMake build directory (default build/cmake)
    CMAKE_BUILD_PARALLEL_LEVEL    parallel compile jobs (default: CPU count)
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


def _cuda_wanted() -> bool:
    switch = os.environ.get("FD_MTP_WITH_CUDA", "auto").strip().lower()
    if switch in ("0", "off"):
        return False
    return switch in ("1", "on") or shutil.which("nvcc") is not None


class CMakeBuild(build_ext):
    """One CMake run builds every library; setuptools then copies them."""

    _built_into = None

    def get_ext_filename(self, fullname: str) -> str:
        if fullname == "fd_mtp._lib.fd_mtp_ops":  # a plain shared library, not a module
            return os.path.join("fd_mtp", "_lib", "libfd_mtp_ops.so")
        return super().get_ext_filename(fullname)

    def build_extension(self, ext: Extension) -> None:
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        if self._built_into == out_dir:
            return
        self._built_into = out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        build_dir = Path(os.environ.get("FD_MTP_BUILD_DIR", ROOT / "build" / "cmake"))
        with_cuda = os.environ.get("FD_MTP_WITH_CUDA", "auto").strip().lower()
        with_cuda = {"0": "OFF", "off": "OFF", "1": "ON", "on": "ON"}.get(with_cuda, "AUTO")
        args = [
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DFD_MTP_OUTPUT_DIR={out_dir}",
            f"-DFD_MTP_WITH_CUDA={with_cuda}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        if os.environ.get("FD_MTP_CUDA_ARCHITECTURES"):
            args.append(f"-DFD_MTP_CUDA_ARCHITECTURES={os.environ['FD_MTP_CUDA_ARCHITECTURES']}")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        # check_call: a configure or compile error stops the install with the
        # compiler's own output above it.
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args])
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])


EXTENSIONS = [CMakeExtension("fd_mtp._lib.fd_mtp_ops"), CMakeExtension("fd_mtp._lib.fd_mtp_ops_pybind")]
if _cuda_wanted():
    EXTENSIONS.append(CMakeExtension("fd_mtp._lib.fd_mtp_cuda"))

setup(
    ext_modules=EXTENSIONS,
    cmdclass={"build_ext": CMakeBuild},
)
