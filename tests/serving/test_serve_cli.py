"""``fd-mtp serve``'s command line: help, option errors (exit 2, the option named), and that the
command line stays light (building the parser imports none of the server's dependencies)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fd_mtp(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "fd_mtp.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_serve_help_lists_the_fastdeploy_flags():
    proc = fd_mtp("serve", "--help")
    assert proc.returncode == 0 and proc.stderr == ""
    for flag in (
        "--model",
        "--port",
        "--speculative-config",
        "--max-num-seqs",
        "--max-model-len",
        "--max-waiting-requests",
        "--served-model-name",
        "--max-request-bytes",
        "--shutdown-timeout",
    ):
        assert flag in proc.stdout


def test_the_parser_does_not_import_the_server():
    code = (
        "import sys, fd_mtp, fd_mtp.cli; fd_mtp.cli.build_parser(); "
        "heavy = [m for m in ('fastapi', 'uvicorn', 'prometheus_client', 'pydantic', 'starlette', "
        "'paddle') if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_bad_speculative_config_is_refused():
    proc = fd_mtp("serve", "--speculative-config", "[1]")
    assert proc.returncode == 2 and "--speculative-config wants a JSON object" in proc.stderr
    proc = fd_mtp("serve", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 9}')
    assert proc.returncode == 2 and "num_speculative_tokens" in proc.stderr, proc.stderr


def test_bad_max_request_bytes_is_refused():
    proc = fd_mtp("serve", "--max-request-bytes", "0")
    assert proc.returncode == 2 and "--max-request-bytes: wants an int >= 1" in proc.stderr


def test_bad_engine_option_names_it():
    proc = fd_mtp("serve", "--max-num-seqs", "0")
    assert proc.returncode == 2 and "max_num_seqs" in proc.stderr, proc.stderr


def test_unreadable_chat_template_is_refused(tmp_path):
    proc = fd_mtp("serve", "--chat-template", str(tmp_path / "missing.jinja"))
    assert proc.returncode == 2 and "--chat-template: cannot read" in proc.stderr, proc.stderr
