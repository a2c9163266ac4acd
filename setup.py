"""Build fd_mtp's compiled parts with CMake (see CMakeLists.txt and cmake/fd_mtp_build.py).

`pip install .` (or `pip install -e .`) configures and builds custom_ops/ against the paddle
importable by the building Python, with the CMake and Ninja of the build environment (no system
CMake needed), and puts the libraries into the package's `_lib` folder. Environment switches (read
here, never by a kernel):

    FD_MTP_WITH_CUDA=0|1          also build the raw CUDA module fd_mtp_cuda (default 0; GPU tests)
    FD_MTP_CUDA_ARCHITECTURES     e.g. "90" (default "80;90")
    FD_MTP_BUILD_DIR              CMake build directory (default build/cmake)
    CMAKE_BUILD_PARALLEL_LEVEL    parallel compile jobs (default: CPU count)

The Makefile builds with `python cmake/fd_mtp_build.py` directly (to show progress); the editable
install it then makes finds everything built.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "cmake"))
import fd_mtp_build  # noqa: E402  (cmake/fd_mtp_build.py: the one build driver)


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


def _cuda_module_wanted() -> bool:
    return os.environ.get("FD_MTP_WITH_CUDA", "0").strip().lower() in ("1", "on", "yes")


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
        fd_mtp_build.build("ops", out_dir)
        if _cuda_module_wanted():
            fd_mtp_build.build("cuda-module", out_dir)


EXTENSIONS = [
    CMakeExtension("fd_mtp._lib.fd_mtp_ops"),
    CMakeExtension("fd_mtp._lib.fd_mtp_ops_pybind"),
]
if _cuda_module_wanted():
    EXTENSIONS.append(CMakeExtension("fd_mtp._lib.fd_mtp_cuda"))

setup(
    ext_modules=EXTENSIONS,
    cmdclass={"build_ext": CMakeBuild},
)
