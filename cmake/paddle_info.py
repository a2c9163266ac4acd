"""Print what CMake needs to build against the installed paddle.

Output: one `KEY=VALUE` line each for INCLUDE_DIRS (|-separated), CORE_LIB (path
of libpaddle.so), WITH_CUDA (ON/OFF), CXX11_ABI (0/1) and VERSION. Exits 1 with a
message on stderr when paddle cannot be imported.
"""

import mmap
import os
import sys
import warnings


def main() -> int:
    warnings.filterwarnings("ignore")
    try:
        import paddle
        from paddle.utils.cpp_extension import extension_utils as eu
    except Exception as exc:  # pragma: no cover - reported to CMake
        print(f"paddle is not importable: {exc}", file=sys.stderr)
        return 1
    core_lib = os.path.join(eu._get_base_path(), eu._get_core_name())
    # The C++ ABI paddle was built with: libpaddle exports __cxx11 symbols
    # only under the new ABI.
    with open(core_lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        abi = 1 if m.find(b"__cxx11") != -1 else 0
    print("INCLUDE_DIRS=" + "|".join(eu.find_paddle_includes(use_cuda=False)))
    print("CORE_LIB=" + core_lib)
    print("WITH_CUDA=" + ("ON" if paddle.is_compiled_with_cuda() else "OFF"))
    print(f"CXX11_ABI={abi}")
    print("VERSION=" + paddle.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
