"""fd_mtp.cuda exports every name the GPU tests call (importable without CuPy or the CUDA module):
a missing export fails on any GPU (philox4x32_10 was missing once)."""

import ast
from pathlib import Path

import fd_mtp.cuda as fcuda

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"


def test_every_fd_mtp_cuda_name_used_by_the_gpu_tests_exists():
    used = set()
    for path in GPU_TESTS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "fcuda"
            ):
                used.add(node.attr)
    assert used, "no fcuda.<name> use found in tests/gpu"
    missing = sorted(name for name in used if not hasattr(fcuda, name))
    assert not missing, f"fd_mtp.cuda lacks {missing}"
    assert set(fcuda.__all__) <= set(dir(fcuda))
