"""The demo checkpoint fd_mtp/assets/ernie45_tiny_mtp and its training script tools/train_demo_model.py.

The asset tests skip when the checkpoint has not been trained yet (``python tools/train_demo_model.py``).
The training-script tests need no asset: a few steps on a tiny config and a tiny corpus.
"""

from __future__ import annotations

import csv
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import paddle
import pytest
from model_util import PagedHarness, assert_matches_reference, forward64, mtp_forward64, reference

from fd_mtp.assets import DEMO_MODEL, default_model_path
from fd_mtp.model.loader import load_checkpoint, load_tokenizer
from fd_mtp.testing.scripts import load_script

REPO = Path(__file__).resolve().parents[2]

# Held-out Python written for this test (not from the standard library): about 600 tokens.
SNIPPET = '''import os
import sys
from collections import defaultdict


class Inventory:
    """A store's stock: item name -> quantity."""

    def __init__(self, items=None):
        self._items = defaultdict(int)
        if items is not None:
            for name, count in items.items():
                self.add(name, count)

    def add(self, name, count=1):
        if count < 0:
            raise ValueError("count must not be negative")
        self._items[name] += count

    def remove(self, name, count=1):
        if self._items[name] < count:
            raise KeyError(name)
        self._items[name] -= count
        if self._items[name] == 0:
            del self._items[name]

    def __len__(self):
        return len(self._items)

    def __contains__(self, name):
        return name in self._items

    def __repr__(self):
        return "%s(%r)" % (self.__class__.__name__, dict(self._items))


def read_lines(path):
    """Return the non-empty lines of the file at *path*."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\\n") for line in f if line.strip()]


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if not argv:
        print("usage: inventory FILE", file=sys.stderr)
        return 2
    inventory = Inventory()
    for line in read_lines(argv[0]):
        name, _, count = line.partition(" ")
        inventory.add(name, int(count or 1))
    for name in sorted(inventory._items):
        print(name, inventory._items[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

# Bounds on the SNIPPET top-1 accuracies (505 predictions). Measured: the trained checkpoint (850 steps)
# main 0.428, MTP (x[t+2]) 0.455; its step-200 snapshot 0.232 / 0.293 (both fail); random weights
# (seeds 7, 8) 0.028 / 0.000.
MAIN_ACC_MIN = 0.33
MTP_ACC_MIN = 0.33
RANDOM_ACC_MAX = 0.06


def _train_module():
    return load_script("tools/train_demo_model.py")


@pytest.fixture(scope="module")
def T():
    return _train_module()


@pytest.fixture(scope="module")
def demo():
    if not (DEMO_MODEL / "model.safetensors").is_file():
        pytest.skip(
            f"demo checkpoint not trained yet ({DEMO_MODEL}); run python tools/train_demo_model.py"
        )
    model, mtp, cfg = load_checkpoint(default_model_path())
    return model, mtp, cfg, load_tokenizer(DEMO_MODEL)


def _accuracies(T, model, mtp, ids) -> tuple[float, float]:
    """Top-1 accuracy of the main model on x[t+1] and of the MTP block (step 1) on x[t+2]."""
    w = paddle.to_tensor(np.asarray(ids, np.int64)[None])
    with paddle.no_grad():
        r = T.losses(model, mtp, w, 1)
    n = len(ids) - 2
    return float(r["main_correct"]) / n, float(r["mtp1_correct"]) / n


# --------------------------------------------------------------------------- the asset
def test_default_model_path_missing_names_the_command(tmp_path, monkeypatch):
    import fd_mtp.assets as assets

    monkeypatch.setattr(assets, "DEMO_MODEL", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="tools/train_demo_model.py"):
        assets.default_model_path()


def test_llm_and_cli_default_to_the_demo_model(monkeypatch, tmp_path):
    import fd_mtp
    import fd_mtp.assets as assets
    from fd_mtp.cli import main

    monkeypatch.setattr(assets, "DEMO_MODEL", tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="tools/train_demo_model.py"):
        fd_mtp.LLM()
    assert (
        main(["generate", "--prompt", "x", "--no-progress"]) == 2
    )  # the message names the command


def test_llm_generates_code_with_the_demo_model(demo):
    import fd_mtp

    llm = fd_mtp.LLM(
        max_model_len=512,
        speculative_config={"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2},
    )
    out = llm.generate(
        "def read_config(path):\n",
        fd_mtp.SamplingParams(temperature=0, max_tokens=24),
        use_tqdm=False,
    )[0]
    assert out.error is None and len(out.token_ids) > 0 and out.text
    assert out.metrics.spec.num_steps > 0


def test_demo_loads(demo):
    model, mtp, cfg, tok = demo
    assert mtp is not None and cfg.num_nextn_predict_layers == 1
    assert cfg.moe_num_experts == 0 and cfg.tie_word_embeddings
    assert cfg.num_key_value_heads < cfg.num_attention_heads
    assert cfg.num_hidden_layers >= 4
    assert model.embed_tokens.weight.dtype == paddle.float32
    assert tok.vocab_size == cfg.vocab_size
    assert (tok.eos_token_id, tok.bos_token_id, tok.pad_token_id) == (
        cfg.eos_token_id,
        cfg.bos_token_id,
        cfg.pad_token_id,
    )
    for name in (
        "README.md",
        "train_info.json",
        "train_log.csv",
        "loss_curve.png",
        "tokenizer_config.json",
    ):
        assert (DEMO_MODEL / name).is_file(), name


@pytest.mark.parametrize(
    "text", [SNIPPET, "\tx  =  1\n\n\n    # caf\u00e9 \u2603\r\n", "  leading and trailing  \n"]
)
def test_demo_tokenizer_round_trips(demo, text):
    tok = demo[3]
    ids = tok.encode(text)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_demo_paged_forward_equals_training_forward(demo, T):
    """The packed paged forward (chunked prefill, then the MTP, then one MTP step-2 decode) equals
    the training script's batched forward: main hidden, MTP hidden, MTP step-2 hidden.

    Two float32 code paths of one function: each within the probabilistic float32 error bound of
    the float64 truth (model_util.forward64 / mtp_forward64, tests/tolerances.py), so within twice
    it of each other. The MTP's input hidden rows differ between the paths (each path feeds its
    own main / step-1 output): the truth's samples carry those errors into the MTP's bound."""
    model, mtp, cfg, tok = demo
    ids = tok.encode(SNIPPET)[:67]
    s = len(ids) - 3
    with paddle.no_grad():
        want = T.batched_forward(
            model, mtp, paddle.to_tensor(np.asarray(ids, np.int64)[None]), steps=2
        )
        want = {k: v[0].numpy() for k, v in want.items()}
        main = PagedHarness(cfg, model, block_size=8, seed=3)
        got_main = np.concatenate([main.step({1: ids[:23]})[1], main.step({1: ids[23:s]})[1]])
        main64, _ = forward64(model, ids[:s], seed=0)  # [K + 1, s, H]
        assert_matches_reference(got_main, reference(want["main"], main64), "main")
        for i in (s // 2, s - 1):  # MTP prefill of positions 0..i, then the step-2 token at i + 1
            h = PagedHarness(cfg, model, mtp=mtp, block_size=8, seed=i)
            got1 = h.step_mtp({2: ids[1 : i + 2]}, {2: got_main[: i + 1]})[2]
            mtp1 = mtp_forward64(mtp, ids[1 : i + 2], main64[:, : i + 1], seed=1)
            assert_matches_reference(got1, reference(want["mtp1"][: i + 1], mtp1), f"mtp1 0..{i}")
            got2 = h.step_mtp({2: [ids[i + 2]]}, {2: got1[i : i + 1]})[2]
            prev = np.concatenate([main64[:, : i + 1], mtp1[:, i : i + 1]], axis=1)
            mtp2 = mtp_forward64(mtp, ids[1 : i + 3], prev, seed=2)[:, -1]  # MTP position i + 1
            assert_matches_reference(got2[0], reference(want["mtp2"][i], mtp2), f"mtp2 {i + 1}")


def test_demo_is_trained(demo, T):
    model, mtp, cfg, tok = demo
    main_acc, mtp_acc = _accuracies(T, model, mtp, tok.encode(SNIPPET))
    assert main_acc > MAIN_ACC_MIN, main_acc
    assert mtp_acc > MTP_ACC_MIN, mtp_acc
    # the same measure on random weights of the same shape fails
    r_model, r_mtp = T.build_models(cfg, seed=7, trainable=False)
    r_main, r_mtp_acc = _accuracies(T, r_model, r_mtp, tok.encode(SNIPPET))
    assert max(r_main, r_mtp_acc) < RANDOM_ACC_MAX, (r_main, r_mtp_acc)


# --------------------------------------------------------------------------- the training script
def _tiny_corpus(root: Path) -> Path:
    """Training files and at least one file the crc32 rule puts in validation."""
    sources = sorted((REPO / "fd_mtp" / "model").glob("*.py"))
    d = root / "corpus"
    (d / "pkg").mkdir(parents=True)
    names, i = [], 0
    while not any(zlib.crc32(n.encode()) % 20 == 0 for n in names):
        names.append(f"pkg/mod_{i}.py")
        i += 1
    names = [n for n in names if zlib.crc32(n.encode()) % 20 == 0] + [
        f"pkg/train_{j}.py" for j in range(3)
    ]
    for j, n in enumerate(names):
        (d / n).write_text(sources[j % len(sources)].read_text())
    (d / "test").mkdir()
    (d / "test" / "skipped.py").write_text("this directory is excluded\n")
    return d


TINY_ARGS = [
    "--threads",
    "1",
    "--vocab-size",
    "400",
    "--hidden-size",
    "32",
    "--intermediate-size",
    "64",
    "--layers",
    "2",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--seq-len",
    "32",
    "--batch-size",
    "2",
    "--warmup",
    "2",
    "--eval-every",
    "2",
    "--eval-windows",
    "2",
    "--save-every",
    "2",
    "--tokenizer-chars",
    "20000",
    "--no-progress",
    "--export-dtype",
    "float32",
]


def _train_rows(out: Path) -> list[dict]:
    with open(out / "train_log.csv") as f:
        return list(csv.DictReader(f))


def test_script_trains_exports_and_resumes_exactly(tmp_path, T, monkeypatch):
    # The script sets the thread-pool variables in its own process (set_threads); restore them
    # after this test, or paddle in later subprocesses warns about OMP_NUM_THREADS.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    corpus = _tiny_corpus(tmp_path)
    from fd_mtp.assets.corpus import corpus_files

    files = corpus_files(corpus)
    assert all(not r.startswith("test/") for r, _ in files)
    common = TINY_ARGS + ["--corpus-dir", str(corpus), "--steps", "4"]

    full, full_exp = tmp_path / "full", tmp_path / "full_export"
    assert T.main(common + ["--out", str(full), "--export", str(full_exp)]) == 0
    rows = _train_rows(full)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert all(np.isfinite(float(r["loss"])) for r in rows)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.model",
        "tokenizer_config.json",
        "README.md",
        "train_log.csv",
        "loss_curve.png",
        "train_info.json",
    ):
        assert (full_exp / name).is_file(), name
    info = json.loads((full_exp / "train_info.json").read_text())
    assert info["step"] == 4 and info["threads"] == 1 and info["finished"]
    model, mtp, cfg = load_checkpoint(full_exp)
    assert mtp is not None and cfg.hidden_size == 32
    tok = load_tokenizer(full_exp)
    assert tok.decode(tok.encode(SNIPPET)) == SNIPPET

    part, part_exp = tmp_path / "part", tmp_path / "part_export"
    assert (
        T.main(common + ["--out", str(part), "--export", str(part_exp), "--stop-after", "2"]) == 0
    )
    assert json.loads((part / "state.json").read_text())["step"] == 2
    assert T.main(common + ["--out", str(part), "--export", str(part_exp), "--resume"]) == 0
    resumed = _train_rows(part)
    assert [int(r["step"]) for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(rows, resumed):
        for k in ("lr", "loss", "main", "mtp1", "mtp2"):
            assert a[k] == b[k], (a["step"], k, a[k], b[k])
    # a snapshot exports on its own
    again = tmp_path / "again"
    assert (
        T.main(
            [
                "--export-only",
                "--from-state",
                str(part),
                "--export",
                str(again),
                "--out",
                str(part),
                "--export-dtype",
                "float32",
            ]
        )
        == 0
    )
    for name in ("model.safetensors", "config.json"):
        assert (again / name).read_bytes() == (part_exp / name).read_bytes(), name
    shutil.rmtree(tmp_path / "corpus")


def test_script_warm_starts_from_an_export(tmp_path, T, monkeypatch):
    """--init-from: the weights and tokenizer of an export, a fresh schedule; with lr 0 the first
    validation is the export's last one and the weights come back unchanged."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    from fd_mtp.model.loader import SafetensorsCheckpoint

    corpus = _tiny_corpus(tmp_path)
    common = TINY_ARGS + ["--corpus-dir", str(corpus)]
    first = tmp_path / "first_export"
    assert (
        T.main(common + ["--steps", "3", "--out", str(tmp_path / "a"), "--export", str(first)]) == 0
    )
    info0 = json.loads((first / "train_info.json").read_text())

    warm = tmp_path / "warm_export"
    args = common + ["--init-from", str(first), "--out", str(tmp_path / "b"), "--export", str(warm)]
    assert T.main(args + ["--steps", "1", "--lr", "0", "--warmup", "1"]) == 0
    info = json.loads((warm / "train_info.json").read_text())
    assert info["init_from"]["step"] == 3 and info["step"] == 1
    assert info["tokens_seen_total"] == info0["tokens_seen"] + info["tokens_seen"]
    assert info["init_from"]["final_val"] == info0["final_val"]
    for k in ("val_main", "val_mtp1", "val_mtp2"):  # the start, scored on this run's windows
        assert abs(info["init_from"]["val_this_run"][k] - info0["final_val"][k]) < 1e-5, k
    for k in ("val_main", "val_mtp1", "val_mtp2"):  # same weights, same windows
        assert abs(info["final_val"][k] - info0["final_val"][k]) < 1e-5, k
    assert (warm / "tokenizer.model").read_bytes() == (first / "tokenizer.model").read_bytes()
    with SafetensorsCheckpoint.from_dir(first) as a, SafetensorsCheckpoint.from_dir(warm) as b:
        assert sorted(a) == sorted(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    text = (warm / "README.md").read_text()
    assert "Warm start" in text and info0["command"] in text

    # it trains from there (lr > 0 moves the weights), and a mismatched shape is refused by name
    moved = tmp_path / "moved"
    assert (
        T.main(
            common
            + [
                "--init-from",
                str(first),
                "--out",
                str(tmp_path / "c"),
                "--export",
                str(moved),
                "--steps",
                "1",
                "--warmup",
                "1",
            ]
        )
        == 0
    )
    with SafetensorsCheckpoint.from_dir(first) as a, SafetensorsCheckpoint.from_dir(moved) as b:
        assert any(not np.array_equal(a[n], b[n]) for n in a)
    bad = [x if x != "32" else "48" for x in common]  # --hidden-size 48
    with pytest.raises(SystemExit, match="hidden_size 32 .this run: 48"):
        T.main(bad + ["--init-from", str(first), "--out", str(tmp_path / "d"), "--steps", "1"])
    shutil.rmtree(corpus)


def test_warm_start_note_lists_the_whole_chain(T):
    """An export warm-started from a warm-started export names every earlier run, oldest first,
    and says how to stop a run cut by its time budget at the same step."""
    first = {"step": 10, "tokens_seen": 100, "wall_time_s": 60.0, "command": "train A --steps 10"}
    second = {
        "step": 7,
        "tokens_seen": 70,
        "wall_time_s": 30.0,
        "command": "train B --steps 9 --max-minutes 1",
        "final_val": {"val_main": 2.5},
        "init_from": first,
    }
    info = {"init_from": second, "tokens_seen_total": 200, "wall_time_s_total": 120.0}
    assert [r["command"] for r in T._warm_start_chain(info)] == [
        first["command"],
        second["command"],
    ]
    note = T._warm_start_note(info)
    assert note.index("train A") < note.index("train B")
    assert "--stop-after 7" in note and "--stop-after 10" not in note
    assert (
        "held-out main CE 2.500" in note
        and "In all (3 runs): 200 training tokens, 2.0 minutes" in note
    )
    assert T._steps_option("x --steps=12 --lr 1") == 12
    assert T._steps_option("x --lr 1") is None and T._steps_option("x 'unclosed") is None


def test_test_files_take_parsing_tests_for_training_only(tmp_path):
    """corpus.test_files: the test / tests directories' .py files that are UTF-8 and parse, none
    from idlelib/ or over the size cap; split_corpus(with_tests=True) adds them to the training
    list and leaves the validation list as it was."""
    from fd_mtp.assets.corpus import MAX_FILE_BYTES, corpus_files, split_corpus, test_files

    corpus = _tiny_corpus(tmp_path)
    files = {
        "test/test_ok.py": "import unittest\n\n\nclass T(unittest.TestCase):\n    pass\n",
        "test/data/fixture.py": "x = '\\d'\n",  # an invalid escape still parses (a warning)
        "pkg/tests/test_pkg.py": "def test_it():\n    assert 1 + 1 == 2\n",
        "test/badsyntax_future.py": "def f(:\n",
        "test/py2_print.py": 'print "hello"\n',
        "test/big.py": "x = 1\n" * (MAX_FILE_BYTES // 6 + 1),
        "idlelib/idle_test/test_x.py": "y = 2\n",
    }
    for rel, text in files.items():
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).write_text(text)
    (corpus / "test" / "latin1.py").write_bytes(b"s = '\xe9'\n")  # not UTF-8
    got = [r for r, _ in test_files(corpus)]
    assert got == ["pkg/tests/test_pkg.py", "test/data/fixture.py", "test/test_ok.py"]
    assert not set(got) & {r for r, _ in corpus_files(corpus)}  # the plain corpus has no tests

    train, val = split_corpus(corpus)
    train_t, val_t = split_corpus(corpus, with_tests=True)
    assert val_t == val
    assert [r for r, _ in train_t] == sorted([r for r, _ in train] + got)
    shutil.rmtree(corpus)


def test_script_with_tests_records_them(tmp_path, T, monkeypatch):
    """--with-tests: the test files are in the training stream, counted in train_info.json and the
    exported README; the validation stream is the one without them."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    corpus = _tiny_corpus(tmp_path)
    (corpus / "test" / "test_one.py").write_text((REPO / "fd_mtp" / "envs.py").read_text())
    common = TINY_ARGS + ["--corpus-dir", str(corpus), "--steps", "1"]
    runs = {}
    for name, extra in (("plain", []), ("tests", ["--with-tests"])):
        out = tmp_path / name
        assert T.main(common + extra + ["--out", str(out), "--export", str(out / "x")]) == 0
        runs[name] = json.loads((out / "x" / "train_info.json").read_text())["corpus"]
        runs[name]["readme"] = (out / "x" / "README.md").read_text()
    plain, tests = runs["plain"], runs["tests"]
    assert tests["train_files"] == plain["train_files"] + 1
    assert tests["train_tokens"] > plain["train_tokens"]
    assert (tests["val_files"], tests["val_tokens"]) == (plain["val_files"], plain["val_tokens"])
    assert tests["test_files"]["train_files"] == 1 and "test_files" not in plain
    assert "1 are the standard library's own tests" in tests["readme"]
    assert "own tests" not in plain["readme"]
    shutil.rmtree(corpus)


def test_strip_comments_by_hand():
    """Comment-only lines go, trailing comments are cut, ``#`` inside strings stays, the AST is
    the same; an untokenizable text comes back as it was."""
    from fd_mtp.assets.corpus import strip_comments

    src = (
        "#!/usr/bin/env python\n"
        "# a header\n"
        "x = 1  # one\n"
        "s = '# not a comment'  # but this is\n"
        "def f():\n"
        "    # inside\n"
        '    """Doc # kept."""\n'
        "    return [1,  # first\n"
        "            2]\n"
        "\n"
        "y = 2 # last, no newline"
    )
    want = (
        "x = 1\n"
        "s = '# not a comment'\n"
        "def f():\n"
        '    """Doc # kept."""\n'
        "    return [1,\n"
        "            2]\n"
        "\n"
        "y = 2"
    )
    assert strip_comments(src) == want
    assert strip_comments("# only\n") == ""
    assert strip_comments("a = 1\n# end") == "a = 1\n"
    assert strip_comments("no comment\n") == "no comment\n"
    bad = "x = (1,\n# open\n"  # EOF inside a bracket: tokenize fails
    assert strip_comments(bad) == bad
    import ast

    real = (REPO / "fd_mtp" / "model" / "ernie.py").read_text()
    got = strip_comments(real)
    assert ast.dump(ast.parse(got)) == ast.dump(ast.parse(real))
    assert len(got) < len(real) and "\n#" not in got


def test_library_files_rules(tmp_path):
    """corpus.library_files: the listed packages' sources outside test / vendored / distutils
    directories, UTF-8, parsing, not data tables; exact copies (of a standard-library file or an
    earlier library file) and near-copies of a held-out file left out."""
    from fd_mtp.assets.corpus import MAX_FILE_BYTES, corpus_files, is_validation, library_files

    std = _tiny_corpus(tmp_path)
    val_rel, val_path = next((r, p) for r, p in corpus_files(std) if is_validation(r))
    train_path = next(p for r, p in corpus_files(std) if not is_validation(r))
    held = val_path.read_text()
    site = tmp_path / "site"
    code = "def area(w, h):\n    return w * h\n"
    files = {
        "good/a.py": code,
        "good/sub/b.py": "class B:\n    pass\n",
        "good/c.py": code,  # a copy of good/a.py: only the first is kept
        "good/tests/test_a.py": "def test():\n    pass\n",
        "good/_vendor/lib.py": "z = 1\n",
        "good/_distutils/core.py": "z = 2\n",
        "good/table.py": "T = [" + ", ".join(str(i) for i in range(500)) + "]\n",
        "good/bad.py": "def f(:\n",
        "good/big.py": "x = 1\n" * (MAX_FILE_BYTES // 6 + 1),
        "good/stdcopy.py": train_path.read_text(),
        "good/near.py": held + "\nextra = 'one line of its own that is long enough'\n",
        "other/x.py": code + "# other\n",  # a package not asked for
    }
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "good" / "latin1.py").write_bytes(b"s = '\xe9'\n")
    got = [r for r, _ in library_files(site, stdlib=std, packages=("good", "missing"))]
    assert got == ["site-packages/good/a.py", "site-packages/good/sub/b.py"]
    assert library_files(site, stdlib=std, packages=("other",))[0][0] == "site-packages/other/x.py"
    shutil.rmtree(std)


def test_script_library_code_and_strip_comments_record_them(tmp_path, T, monkeypatch):
    """--library-code adds the library files to the training stream only; --strip-comments
    removes comments from both streams; train_info.json and the README say so."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    corpus = _tiny_corpus(tmp_path)
    site = tmp_path / "site" / "numpy"
    site.mkdir(parents=True)
    (site / "mod.py").write_text((REPO / "fd_mtp" / "envs.py").read_text())
    monkeypatch.setattr(T, "library_root", lambda: tmp_path / "site")
    common = TINY_ARGS + ["--corpus-dir", str(corpus), "--steps", "1"]
    runs = {}
    for name, extra in (
        ("plain", []),
        ("lib", ["--library-code"]),
        ("strip", ["--strip-comments"]),
    ):
        out = tmp_path / name
        assert T.main(common + extra + ["--out", str(out), "--export", str(out / "x")]) == 0
        runs[name] = json.loads((out / "x" / "train_info.json").read_text())["corpus"]
        runs[name]["readme"] = (out / "x" / "README.md").read_text()
    plain, lib, strip = runs["plain"], runs["lib"], runs["strip"]
    assert lib["train_files"] == plain["train_files"] + 1
    assert lib["train_tokens"] > plain["train_tokens"]
    assert (lib["val_files"], lib["val_tokens"]) == (plain["val_files"], plain["val_tokens"])
    assert lib["library_files"]["train_files"] == 1 and "library_files" not in plain
    assert "numpy" in lib["library_files"]["packages"]
    assert "1 are library code" in lib["readme"] and "library code" not in plain["readme"]
    assert strip["val_tokens"] < plain["val_tokens"]
    assert strip["train_tokens"] < plain["train_tokens"]
    assert "strip_comments" in strip and "comments removed" in strip["readme"]
    assert "comments removed" not in plain["readme"]
    shutil.rmtree(corpus)


def test_unlikelihood_by_hand(T):
    """The token-level unlikelihood term against a loop over positions written from its
    definition: -log(1 - p(c)) summed over the distinct earlier tokens c (x[0..t]) other than the
    target x[t+1], averaged over positions."""
    rng = np.random.default_rng(0)
    w = rng.integers(0, 5, size=(2, 7))
    w[0] = [3, 3, 3, 1, 3, 0, 0]  # repeats, the target also seen before, a token seen twice
    logits = rng.normal(size=(2, 6, 5)).astype(np.float32)
    got = float(T.unlikelihood(paddle.to_tensor(logits), paddle.to_tensor(w)))
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(-1, keepdims=True)
    want = [
        sum(-np.log1p(-p[b, t, c]) for c in set(w[b, : t + 1].tolist()) - {int(w[b, t + 1])})
        for b in range(2)
        for t in range(6)
    ]
    # float32 softmax / log of values in (0, 1): a few ulp of a sum of at most 5 terms
    assert got == pytest.approx(np.mean(want), rel=1e-5)
    # a window that never repeats a token before the target leaves nothing to penalise at t = 0
    one = float(T.unlikelihood(paddle.to_tensor(logits[:1, :1]), paddle.to_tensor(w[1:, :2])))
    seen0 = {int(w[1, 0])} - {int(w[1, 1])}
    assert one == pytest.approx(sum(-np.log1p(-p[0, 0, c]) for c in seen0), rel=1e-5, abs=1e-7)


def test_script_unlikelihood_trains_and_records_it(tmp_path, T, monkeypatch):
    """--unlikelihood: the term is logged per step (ul), recorded in train_info.json and named in
    the exported README; without it, none of them."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    corpus = _tiny_corpus(tmp_path)
    common = TINY_ARGS + ["--corpus-dir", str(corpus), "--steps", "2"]
    got = {}
    for name, extra in (("plain", []), ("ul", ["--unlikelihood", "0.5"])):
        out = tmp_path / name
        assert T.main(common + extra + ["--out", str(out), "--export", str(out / "x")]) == 0
        info = json.loads((out / "x" / "train_info.json").read_text())
        got[name] = (info, (out / "x" / "README.md").read_text(), _train_rows(out))
    info, readme, rows = got["ul"]
    assert info["unlikelihood"] == 0.5 and "token-level unlikelihood" in readme
    assert all(float(r["ul"]) > 0 for r in rows)
    info, readme, rows = got["plain"]
    assert info["unlikelihood"] == 0.0 and "token-level unlikelihood" not in readme
    assert all(r["ul"] == "" for r in rows)
    shutil.rmtree(corpus)


# --------------------------------------------------------------------------- the evaluation tool
def _eval_module():
    return load_script("tools/eval_demo_model.py")


def test_eval_repetition_measures_by_hand():
    E = _eval_module()
    r = E.repetition([1, 2, 3, 4, 1, 2, 3, 4], "x = 1\n#\n#\n#\n\ny = 2\nx = 1\n")
    # 4-grams: 1234 2341 3412 4123 1234 -> 4 distinct of 5
    assert r["distinct4"] == pytest.approx(4 / 5)
    assert r["lines"] == 6  # blank lines are not counted
    assert r["repeated_lines"] == 3  # the second and third "#", the second "x = 1"
    assert r["comment_only_lines"] == 3
    assert r["longest_run"] == 3
    assert E.repetition([5, 6, 7], "a")["distinct4"] == 1.0  # no 4-gram: nothing repeats


def test_eval_syntax_measure_by_hand():
    E = _eval_module()
    prompt = "def f(x):\n    y = x\n"
    # whole generated lines: 4 (the cut "ret" is not one); prompt + the first 3 parse, + 4 does not
    r = E.syntax(prompt, "    # c\n    return y\n\ndef g(:\nret")
    assert r == {"whole_lines": 4, "parsed_lines": 3, "parsed_code_lines": 1}
    # a prompt that ends inside a string parses once the string closes (lines are counted as
    # text: the string's lines are not comments, so they count as code)
    r = E.syntax('s = """doc\n', 'more\n"""\nt = 1\n')
    assert r == {"whole_lines": 3, "parsed_lines": 3, "parsed_code_lines": 3}
    # nothing parses: 0; no whole line: 0 of 0
    assert E.syntax("def f(:\n", "x\n")["parsed_lines"] == 0
    assert E.syntax(prompt, "    retu")["whole_lines"] == 0


def test_eval_tool_runs_on_the_demo_model(demo, tmp_path):
    E = _eval_module()
    out = tmp_path / "eval.json"
    assert E.main(["--prompts", "2", "--max-tokens", "12", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["prompts"] == 2 and 0 < r["distinct4"] <= 1
    assert 0 <= r["parsed_line_share"] <= 1 and r["parsed_code_lines_mean"] >= 0
    assert r["sampled"]["temperature"] == 0.7 and 0 < r["sampled"]["distinct4"] <= 1
    assert 1 <= r["sampled"]["mean_accepted_length"] <= 4
    assert r["penalized"]["repetition_penalty"] == 1.1 and r["penalized"]["temperature"] == 0.0
    assert 0 < r["penalized"]["distinct4"] <= 1
    assert 1 <= r["penalized"]["mean_accepted_length"] <= 4
    assert 1 <= r["mean_accepted_length"] <= 4  # K = 3 drafts + the bonus token at most
    assert len(r["acceptance_per_position"]) == 3
    assert r["english"]["prompts"] == len(E.ENGLISH_PROMPTS) == len(r["english_samples"])
    assert 0 < r["english"]["distinct4"] <= 1
    assert 0 <= r["english"]["comment_only_line_frac"] <= 1


# --------------------------------------------------------------------------- make demo
def test_demo_program_runs_and_prints_both_continuations(demo, capsys):
    from fd_mtp import demo as demo_program

    argv = ["--prompts", "2", "--max-tokens", "10", "--modes", "plain,mtp_k1", "--show", "1"]
    assert demo_program.main(argv) == 0
    out = capsys.readouterr().out
    table = out[out.index("tokens/s  vs plain") :]
    assert table.count("yes") == 2 and " NO" not in table  # mtp_k1's greedy output is plain's
    assert out.count("--- greedy continuation ---") == 1
    assert (
        out.count("--- sampled continuation (temperature 0.7, top_p 0.9, seed 0, MTP K = 3)") == 1
    )
    assert demo_program.main(argv + ["--temperature", "0"]) == 0
    assert "sampled continuation" not in capsys.readouterr().out
