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
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402

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


@pytest.fixture(scope="module")
def exact_ckpt(tmp_path_factory):
    """MTP drafts always equal the target's greedy tokens (100% acceptance)."""
    return write_exact_draft_checkpoint(tmp_path_factory.mktemp("exact"), seed=1)


SPEC_ARGS = ["--prompt-ids", "5 6 7 8", "--prompt-ids", "9 10", "--max-tokens", "13", "--ignore-eos",
             "--no-progress", "--max-model-len", "64", "--block-size", "8"]


def test_generate_speculative_prints_metrics_and_matches_plain(exact_ckpt, capsys):
    assert main(["generate", "--model", str(exact_ckpt), *SPEC_ARGS]) == 0
    plain = capsys.readouterr().out
    assert "spec:" not in plain and "speculative" not in plain and "proposer" not in plain
    rc = main(["generate", "--model", str(exact_ckpt), *SPEC_ARGS, "--speculative-method", "mtp",
               "--num-speculative-tokens", "3", "--num-model-steps", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    ids = parse(out)
    assert ids == parse(plain) and len(ids) == 2 and all(len(v) == 13 for v in ids.values())
    lines = out.splitlines()
    # 13 tokens: the prefill token, then 3 decode steps of 4 (3 drafts accepted + bonus).
    for i in range(2):
        assert (f"[{i}] spec: mean accepted length 4.00 tokens/step over 3 steps, accepted 9/9 drafts (100.0%), "
                "per position [1.00 1.00 1.00]") in lines
    total = next(x for x in lines if x.startswith("speculative ("))
    assert total == ("speculative (mtp, K=3, model steps 3, verification target_match): mean accepted length 4.00 "
                     "tokens/step over 6 steps, accepted 18/18 drafts (100.0%), per position [1.00 1.00 1.00]")
    prop = next(x for x in lines if x.startswith("proposer: "))
    calls = int(prop.split()[1])
    host, run, fwd = (float(prop.split(word)[1].split()[0]) for word in ("host ", "run ", "forward "))
    assert calls >= 4 and run > 0 and fwd > 0 and abs(run - fwd - host) < 2e-3


def test_generate_speculative_ngram_and_hybrid_match_plain(exact_ckpt, capsys):
    assert main(["generate", "--model", str(exact_ckpt), *SPEC_ARGS]) == 0
    plain = parse(capsys.readouterr().out)
    for extra in (["--speculative-method", "ngram", "--num-speculative-tokens", "2", "--verification", "greedy"],
                  ["--speculative-method", "mtp", "--num-speculative-tokens", "3", "--num-model-steps", "1",
                   "--mtp-strategy", "with_ngram"]):
        assert main(["generate", "--model", str(exact_ckpt), *SPEC_ARGS, *extra]) == 0
        out = capsys.readouterr().out
        assert parse(out) == plain, extra
        total = next(x for x in out.splitlines() if x.startswith("speculative ("))
        length = float(total.split("mean accepted length ")[1].split()[0])
        assert 1.0 <= length <= 4.0
    assert "hybrid n-gram" in total


@pytest.mark.parametrize("argv, field", [
    (["--speculative-method", "mtp", "--num-speculative-tokens", "9"], "SpeculativeConfig.num_speculative_tokens"),
    (["--speculative-method", "mtp", "--num-model-steps", "0"], "SpeculativeConfig.num_model_steps"),
    (["--num-speculative-tokens", "2"], "--num-speculative-tokens needs --speculative-method"),
])
def test_generate_speculative_bad_values_exit_2(exact_ckpt, capsys, argv, field):
    assert main(["generate", "--model", str(exact_ckpt), "--prompt-ids", "5 6", *argv]) == 2
    assert field in capsys.readouterr().err


def test_generate_mtp_without_mtp_block_exits_2(tmp_path, capsys):
    no_mtp = write_random_checkpoint(tmp_path, seed=3, with_mtp=False, num_nextn_predict_layers=0)
    assert main(["generate", "--model", str(no_mtp), "--prompt-ids", "5 6", "--speculative-method", "mtp"]) == 2
    assert "needs an MTP block" in capsys.readouterr().err
