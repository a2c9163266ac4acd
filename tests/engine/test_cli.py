"""`fd-mtp generate` on a tiny random checkpoint (main(argv) in process; subprocess runs for the console
entry point and Ctrl-C)."""

import ast
import os
import selectors
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("paddle")
pytest.importorskip("safetensors")

import fd_mtp  # noqa: E402
from fd_mtp.cli import build_parser, main  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402

from .util import naive_greedy  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt"), seed=3)


def cli_args(model, args: str = "") -> list[str]:
    """``fd-mtp generate --model MODEL ARGS`` as a list (``args``: a shell-quoted command line;
    ``model`` None: no --model, the demo model)."""
    return ["generate", *(["--model", str(model)] if model else []), *shlex.split(args)]


def parse(out: str) -> dict[int, list[int]]:
    ids = {}
    for line in out.splitlines():
        if "] token_ids: " in line:
            head, tail = line.split("] token_ids: ")
            ids[int(head[1:])] = ast.literal_eval(tail)
    return ids


def test_generate_greedy_matches_naive(ckpt, capsys):
    rc = main(
        cli_args(
            ckpt,
            "--prompt-ids '5 6 7 8' --prompt-ids 9,10 --max-tokens 6 --ignore-eos --batch 3"
            " --no-progress --max-model-len 64 --block-size 8 --stream",
        )
    )
    out = capsys.readouterr().out
    assert rc == 0
    model, _, _ = load_checkpoint(ckpt)
    ids = parse(out)
    assert ids[0] == ids[2] == naive_greedy(model, [5, 6, 7, 8], 6)
    assert ids[1] == naive_greedy(model, [9, 10], 6)
    assert "3 requests, 18 tokens in" in out and "tokens/s" in out
    # --stream with several requests: one line per request, in prompt order, before the report
    assert out.splitlines()[:3] == [f"[{i}] " + " ".join(map(str, ids[i])) for i in range(3)]


class FlushRecorder:
    """A stdout that records what was written between flushes."""

    def __init__(self):
        self.chunks, self.buf = [], ""

    def write(self, text):
        self.buf += text
        return len(text)

    def flush(self):
        if self.buf:
            self.chunks.append(self.buf)
            self.buf = ""

    def text(self):
        return "".join(self.chunks) + self.buf


def test_stream_one_request_writes_one_line_as_it_goes(ckpt, monkeypatch):
    rec = FlushRecorder()
    monkeypatch.setattr(sys, "stdout", rec)
    rc = main(
        cli_args(
            ckpt,
            "--prompt-ids '5 6 7 8' --max-tokens 6 --ignore-eos --no-progress --max-model-len 64"
            " --block-size 8 --stream",
        )
    )
    monkeypatch.undo()
    assert rc == 0
    out = rec.text()
    ids = parse(out)[0]
    assert out.splitlines()[0] == " ".join(map(str, ids))  # no "[0]" prefix, no per-token lines
    # written and flushed token by token: the line is in 6 flushed pieces, the newline comes last
    line = []
    for chunk in rec.chunks:
        line.append(chunk)
        if "\n" in chunk:
            break
    assert len(line) >= 6 and "".join(line).startswith(" ".join(map(str, ids)) + "\n")
    assert [c.strip() for c in line[:6]] == [str(t) for t in ids]


def test_stream_text_with_a_tokenizer(capsys):
    # the demo model has a tokenizer: the text streams, then the report repeats it
    assert (
        main(
            cli_args(
                None,
                "--prompt 'def f(' --max-tokens 8 --ignore-eos --no-progress --max-model-len 64"
                " --stream",
            )
        )
        == 0
    )
    out = capsys.readouterr().out
    text = ast.literal_eval(
        next(x for x in out.splitlines() if x.startswith("[0] text: ")).split(": ", 1)[1]
    )
    assert text and out.startswith(text + "\n[0] token_ids: ")


def test_generate_reports_rejected_prompts(ckpt, capsys):
    rc = main(
        cli_args(
            ckpt,
            "--prompt-ids '5 6' --prompt-ids '5 999' --max-tokens 2 --no-progress --max-model-len 32",
        )
    )
    out = capsys.readouterr().out
    assert (
        rc == 1
        and "[1] error: prompt token id 999 is outside the vocabulary" in out
        and "[0] token_ids" in out
    )
    assert main(["generate", "--model", str(ckpt), "--prompt-ids", "5", "--top-p", "0"]) == 2
    assert "SamplingParams.top_p" in capsys.readouterr().err
    assert main(["generate", "--model", str(ckpt)]) == 2


def test_console_entry_point_runs(ckpt):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "fd_mtp.cli",
            *cli_args(
                ckpt,
                "--prompt-ids '4 5' --max-tokens 3 --temperature 0.7 --seed 1 --max-model-len 32",
            ),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert len(parse(r.stdout)[0]) == 3 and "tokens/s" in r.stdout


@pytest.fixture(scope="module")
def exact_ckpt(tmp_path_factory):
    """MTP drafts always equal the target's greedy tokens (100% acceptance)."""
    return write_exact_draft_checkpoint(tmp_path_factory.mktemp("exact"), seed=1)


SPEC_ARGS = (
    "--prompt-ids '5 6 7 8' --prompt-ids '9 10' --max-tokens 13 --ignore-eos --no-progress"
    " --max-model-len 64 --block-size 8"
)


def test_generate_speculative_prints_metrics_and_matches_plain(exact_ckpt, capsys):
    assert main(cli_args(exact_ckpt, SPEC_ARGS)) == 0
    plain = capsys.readouterr().out
    assert "spec:" not in plain and "speculative" not in plain and "proposer" not in plain
    spec = " --speculative-method mtp --num-speculative-tokens 3 --num-model-steps 3"
    rc = main(cli_args(exact_ckpt, SPEC_ARGS + spec))
    out = capsys.readouterr().out
    assert rc == 0
    ids = parse(out)
    assert ids == parse(plain) and len(ids) == 2 and all(len(v) == 13 for v in ids.values())
    lines = out.splitlines()
    # 13 tokens: the prefill token, then 3 decode steps of 4 (3 drafts accepted + bonus).
    for i in range(2):
        assert (
            f"[{i}] spec: mean accepted length 4.00 tokens/step over 3 steps, accepted 9/9 drafts (100.0%), "
            "per position [1.00 1.00 1.00]"
        ) in lines
    total = next(x for x in lines if x.startswith("speculative ("))
    assert total == (
        "speculative (mtp, K=3, model steps 3, verification target_match): mean accepted length 4.00 "
        "tokens/step over 6 steps, accepted 18/18 drafts (100.0%), per position [1.00 1.00 1.00]"
    )
    prop = next(x for x in lines if x.startswith("proposer: "))
    calls = int(prop.split()[1])
    host, run, fwd = (
        float(prop.split(word)[1].split()[0]) for word in ("host ", "run ", "forward ")
    )
    assert calls >= 4 and run > 0 and fwd > 0 and abs(run - fwd - host) < 2e-3


def test_generate_adaptive_draft_length_and_draft_sampling_match_plain(exact_ckpt, capsys):
    assert main(cli_args(exact_ckpt, SPEC_ARGS)) == 0
    plain = parse(capsys.readouterr().out)
    extra = (
        " --speculative-method mtp --num-speculative-tokens 3 --draft-policy adaptive"
        " --verification rejection --draft-sampling"
    )
    assert main(cli_args(exact_ckpt, SPEC_ARGS + extra)) == 0
    out = capsys.readouterr().out
    assert parse(out) == plain and "spec: mean accepted length" in out
    policy = next(x for x in out.splitlines() if x.startswith("draft policy (adaptive, sampled"))
    assert "draft length k histogram [0:" in policy and "switched off:" in policy


def test_generate_speculative_ngram_and_hybrid_match_plain(exact_ckpt, capsys):
    assert main(cli_args(exact_ckpt, SPEC_ARGS)) == 0
    plain = parse(capsys.readouterr().out)
    for extra in (
        " --speculative-method ngram --num-speculative-tokens 2 --verification greedy",
        " --speculative-method mtp --num-speculative-tokens 3 --num-model-steps 1"
        " --mtp-strategy with_ngram",
    ):
        assert main(cli_args(exact_ckpt, SPEC_ARGS + extra)) == 0
        out = capsys.readouterr().out
        assert parse(out) == plain, extra
        total = next(x for x in out.splitlines() if x.startswith("speculative ("))
        length = float(total.split("mean accepted length ")[1].split()[0])
        assert 1.0 <= length <= 4.0
    assert "hybrid n-gram" in total


@pytest.mark.parametrize(
    "argv, field",
    [
        (
            ["--speculative-method", "mtp", "--num-speculative-tokens", "9"],
            "SpeculativeConfig.num_speculative_tokens",
        ),
        (
            ["--speculative-method", "mtp", "--num-model-steps", "0"],
            "SpeculativeConfig.num_model_steps",
        ),
        (["--num-speculative-tokens", "2"], "--num-speculative-tokens needs --speculative-method"),
        (
            ["--verification", "rejection"],
            "--verification needs --speculative-method mtp, eagle, eagle3 or ngram",
        ),
        (["--verification", "target_match"], "--verification needs --speculative-method"),
        (
            ["--num-model-steps", "2", "--verification", "greedy"],
            "--num-model-steps, --verification need --speculative-method",
        ),
        (
            ["--speculative-method", "ngram", "--num-model-steps", "2"],
            "--num-model-steps applies to --speculative-method mtp, eagle or eagle3 only, not ngram",
        ),
        (
            ["--speculative-method", "ngram", "--mtp-strategy", "with_ngram"],
            "--mtp-strategy applies to --speculative-method mtp, eagle or eagle3 only",
        ),
        (
            [
                "--speculative-method",
                "ngram",
                "--num-model-steps",
                "1",
                "--mtp-strategy",
                "default",
            ],
            "--num-model-steps, --mtp-strategy apply to --speculative-method mtp, eagle or eagle3 only",
        ),
        (
            ["--speculative-method", "ngram", "--draft-policy", "adaptive"],
            "--draft-policy applies to --speculative-method mtp, eagle or eagle3 only",
        ),
        (
            ["--speculative-method", "mtp", "--draft-sampling"],
            "SpeculativeConfig.draft_sampling=True needs verification='rejection'",
        ),
        (["--draft-sampling"], "--draft-sampling needs --speculative-method"),
    ],
)
def test_generate_speculative_bad_values_exit_2(exact_ckpt, capsys, argv, field):
    assert main(["generate", "--model", str(exact_ckpt), "--prompt-ids", "5 6", *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and err.startswith("fd-mtp generate: ") and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--block-size", "65536"], r"fd-mtp generate: --block-size must be an int in [1, 1024]"),
        (["--max-num-seqs", "0"], "fd-mtp generate: --max-num-seqs must be an int >= 1"),
        (
            ["--dtype", "bfloat16"],
            "fd-mtp generate: --dtype bfloat16 is not supported with --device cpu",
        ),
        (
            ["--dtype", "float16", "--device", "cpu"],
            "on cpu use --dtype float32, or leave --dtype out",
        ),
    ],
)
def test_bad_options_exit_2_naming_the_option(ckpt, capsys, argv, message):
    assert (
        main(["generate", "--model", str(ckpt), "--prompt-ids", "5 6", "--no-progress", *argv]) == 2
    )
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "load_checkpoint" not in err


@pytest.mark.skipif(__import__("paddle").is_compiled_with_cuda(), reason="needs a CPU-only paddle")
@pytest.mark.parametrize("device", ["gpu", "cuda"])
def test_gpu_device_on_a_cpu_build_exits_2(ckpt, capsys, device):
    assert main(["generate", "--model", str(ckpt), "--prompt-ids", "5 6", "--device", device]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("fd-mtp generate: --device gpu: this PaddlePaddle (")
        and "is a CPU build" in err
    )


def test_bad_device_and_dtype_choices_are_refused_by_the_parser(capsys):
    for argv in (["--device", "tpu"], ["--dtype", "int8"]):
        with pytest.raises(SystemExit) as info:
            main(["generate", "--prompt-ids", "5", *argv])
        assert info.value.code == 2
        assert "invalid choice" in capsys.readouterr().err


def test_every_option_has_help_and_choices():
    parser = build_parser()
    gen = next(
        a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)
    )
    g = gen.choices["generate"]
    for action in g._actions:
        assert action.help, action.option_strings
    opts = {a.dest: a for a in g._actions}
    assert tuple(opts["device"].choices) == ("cpu", "gpu")
    assert tuple(opts["dtype"].choices) == ("float32", "bfloat16", "float16")
    text = " ".join(g.format_help().split())
    assert "--max-tokens" in text and "130 when interrupted" in text and "in prompt order" in text


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"fd-mtp {fd_mtp.__version__}\n"


def test_ctrl_c_prints_partial_output_and_exits_130(ckpt):
    """A real SIGINT to a real `fd-mtp generate`, sent once streaming has begun."""
    cmd = [
        sys.executable,
        "-m",
        "fd_mtp.cli",
        *cli_args(
            ckpt,
            "--prompt-ids '5 6 7' --prompt-ids '8 9' --max-tokens 4000 --max-model-len 4096"
            " --ignore-eos --stream --no-progress",
        ),
    ]
    # a shell that starts us in the background ignores SIGINT, and the child would inherit that
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": ROOT},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + 120
        head = b""
        while len(head.split()) < 3 and time.monotonic() < deadline and p.poll() is None:
            if sel.select(timeout=1):
                head += os.read(p.stdout.fileno(), 4096)
        assert head.startswith(b"[0] "), head
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    out, err = (head + out).decode(), err.decode()
    assert p.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "fd-mtp generate: interrupted"
    ids = parse(out)
    assert sorted(ids) == [0, 1]
    assert 0 < len(ids[0]) < 4000
    assert "[0] finish_reason: abort" in out and "[1] finish_reason: abort" in out
    assert "2 requests, " in out and "tokens/s" in out
    # what request 0 streamed before the interrupt is a prefix of what the report lists
    streamed = out.splitlines()[0][len("[0] ") :].split()
    assert streamed and [int(t) for t in streamed] == ids[0][: len(streamed)]


def test_generate_mtp_without_mtp_block_exits_2(tmp_path, capsys):
    no_mtp = write_random_checkpoint(tmp_path, seed=3, with_mtp=False, num_nextn_predict_layers=0)
    assert main(cli_args(no_mtp, "--prompt-ids '5 6' --speculative-method mtp")) == 2
    assert "needs an MTP block" in capsys.readouterr().err
