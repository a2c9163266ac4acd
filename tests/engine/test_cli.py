"""`fd-mtp generate` on a tiny random checkpoint (main(argv) in process, one subprocess run)."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("paddle")
pytest.importorskip("safetensors")

from fd_mtp.cli import main  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.testing import write_random_checkpoint  # noqa: E402

from .util import naive_greedy  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt"), seed=3)


def parse(out: str) -> dict[int, list[int]]:
    ids = {}
    for line in out.splitlines():
        if "] token_ids: " in line:
            head, tail = line.split("] token_ids: ")
            ids[int(head[1:])] = ast.literal_eval(tail)
    return ids


def test_generate_greedy_matches_naive(ckpt, capsys):
    rc = main(["generate", "--model", str(ckpt), "--prompt-ids", "5 6 7 8", "--prompt-ids", "9,10",
               "--max-tokens", "6", "--ignore-eos", "--batch", "3", "--no-progress", "--max-model-len", "64",
               "--block-size", "8", "--stream"])
    out = capsys.readouterr().out
    assert rc == 0
    model, _, _ = load_checkpoint(ckpt)
    ids = parse(out)
    assert ids[0] == ids[2] == naive_greedy(model, [5, 6, 7, 8], 6)
    assert ids[1] == naive_greedy(model, [9, 10], 6)
    assert "3 requests, 18 tokens in" in out and "tokens/s" in out
    assert out.count("[1] +") == 6  # streamed one token per step


def test_generate_reports_rejected_prompts(ckpt, capsys):
    rc = main(["generate", "--model", str(ckpt), "--prompt-ids", "5 6", "--prompt-ids", "5 999",
               "--max-tokens", "2", "--no-progress", "--max-model-len", "32"])
    out = capsys.readouterr().out
    assert rc == 1 and "[1] error: prompt token id 999 is outside the vocabulary" in out and "[0] token_ids" in out
    assert main(["generate", "--model", str(ckpt), "--prompt-ids", "5", "--top-p", "0"]) == 2
    assert "SamplingParams.top_p" in capsys.readouterr().err
    assert main(["generate", "--model", str(ckpt)]) == 2


def test_console_entry_point_runs(ckpt):
    r = subprocess.run([sys.executable, "-m", "fd_mtp.cli", "generate", "--model", str(ckpt), "--prompt-ids", "4 5",
                        "--max-tokens", "3", "--temperature", "0.7", "--seed", "1", "--max-model-len", "32"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(parse(r.stdout)[0]) == 3 and "tokens/s" in r.stdout
