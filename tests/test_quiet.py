"""`import fd_mtp` and the commands print nothing the user did not ask for (no paddle warnings,
no build chatter): each case runs in a fresh interpreter, as a user's would."""

import subprocess
import sys

import pytest

CASES = {
    "import fd_mtp": ["-c", "import fd_mtp"],
    "import fd_mtp then paddle, load the ops": [
        "-c",
        "import fd_mtp, paddle, fd_mtp.ops._loader as loader; loader.load()",
    ],
    "fd-mtp --help": ["-m", "fd_mtp.cli", "--help"],
    "fd-mtp generate": [
        "-m",
        "fd_mtp.cli",
        "generate",
        "--prompt-ids",
        "5 6 7",
        "--max-tokens",
        "2",
        "--no-progress",
    ],
    "demo --help": ["-m", "fd_mtp.demo", "--help"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nothing_unasked_on_stderr(name):
    proc = subprocess.run(
        [sys.executable, *CASES[name]], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", f"{name} printed to stderr:\n{proc.stderr}"
    if name.startswith("import"):
        assert proc.stdout == "", f"{name} printed to stdout:\n{proc.stdout}"
