"""The EAGLE-3 head trainer (tools/train_eagle_head.py, tools/demo_train/eagle.py) and the head it
ships (fd_mtp/assets/ernie45_tiny_eagle3).

The trainer's batched K-step forward must be the maths inference runs (the head's packed paged
forward, substep by substep, as the proposer drives it); the shipped head must load, draft
tokens the target accepts, and leave greedy output unchanged. The asset tests skip when the demo
model has not been trained; the head's own tests fail when it is missing (it is committed).
"""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import paddle
import pytest
from model_util import PagedHarness, assert_matches_reference, mtp_forward64, reference
from test_demo_model import SNIPPET, _tiny_corpus
from tolerances import Float32Noise

from fd_mtp.assets import DEMO_EAGLE3_HEAD, DEMO_MODEL, default_eagle3_head_path
from fd_mtp.model.eagle_io import load_eagle_head
from fd_mtp.model.loader import load_checkpoint, load_tokenizer
from fd_mtp.testing.scripts import load_script

#: a trained head agrees with the target's greedy token on held-out text far more often than
#: chance (1 / 1024); the shipped one measured 0.6+ at step 1 (train_info.json)
TRAINED_ACC_MIN = 0.4


@pytest.fixture(scope="module")
def T():
    return load_script("tools/train_eagle_head.py")


@pytest.fixture(scope="module")
def E(T):
    import demo_train.eagle as e  # tools/ is on sys.path once the script is loaded

    return e


@pytest.fixture(scope="module")
def demo():
    if not (DEMO_MODEL / "model.safetensors").is_file():
        pytest.skip(f"demo checkpoint not trained yet ({DEMO_MODEL})")
    model, mtp, cfg = load_checkpoint(DEMO_MODEL)
    return model, mtp, cfg, load_tokenizer(DEMO_MODEL)


def test_draft_vocabulary_takes_the_most_frequent_ids(E):
    ids, cover = E.draft_vocabulary(np.array([5, 5, 5, 2, 2, 7, 1, 7, 7, 7]), 9, 3)
    assert ids.tolist() == [2, 5, 7] and cover == pytest.approx(9 / 10)
    ids, _ = E.draft_vocabulary(np.array([4, 3]), 6, 1)  # a tie: the lower id
    assert ids.tolist() == [3]


def test_warm_start_is_the_mtp_block_on_the_final_hidden(demo, E):
    """Warm-started, the head's step 1 fed the target's final-normed hidden state (instead of
    its fused aux streams) is the MTP block's step 1 through the same code: bit-identical."""
    import demo_train.model as M

    model, mtp, cfg, tok = demo
    ids = paddle.arange(cfg.vocab_size, dtype="int64")
    head = E.make_eagle3_head(model, ids.numpy(), (1, 3, 5))
    E.warm_start_from_mtp(head, mtp, model, ids)
    w = paddle.to_tensor(np.asarray(tok.encode(SNIPPET)[:40], np.int64)[None])
    s = w.shape[1] - 3
    with paddle.no_grad():
        want = M.batched_forward(model, mtp, w, steps=2)
        x = head.eh_proj(
            paddle.concat(
                [head.enorm(head.embed_tokens(w[:, 1 : s + 1])), head.hnorm(want["main"])], -1
            )
        )
        from fd_mtp.model.attention import rope_cos_sin

        cos, sin = rope_cos_sin(paddle.arange(0, s, dtype="int64"), cfg.head_dim, cfg.rope_theta)
        got = head.norm(M.layer_forward(head.layers[0], x, cos, sin, M.causal_mask(s)))
    np.testing.assert_array_equal(got.numpy(), want["mtp1"].numpy())
    # the fc passes the last aux stream through the final norm's weight, nothing else
    fc = head.fc.weight.numpy()
    h = cfg.hidden_size
    assert not fc[: 2 * h].any()
    np.testing.assert_array_equal(np.diag(fc[2 * h :]), model.norm.weight.numpy())


def test_training_forward_is_what_inference_runs(demo, E):
    """The trainer's K = 3 step forward equals the head's packed paged forward run as the
    proposer runs it: step 1 over positions 0..i (its KV cache of the verified context), then
    one decode substep at i + 1 on its own step-1 output and one at i + 2 on its step-2 output.
    Both float32 paths within the probabilistic float32 bound of the float64 truth
    (model_util.mtp_forward64 on the same inputs: the aux streams fused by fc, then the MTP-shaped
    block; step k at head position i + k - 1 sees the step-1 keys of 0..i and the later steps'
    own keys)."""
    model, mtp, cfg, tok = demo
    rng = np.random.default_rng(0)
    ids_np = np.sort(rng.choice(cfg.vocab_size, 256, replace=False))
    ids = paddle.to_tensor(ids_np)
    head = E.make_eagle3_head(model, ids_np, (1, 3, 5))
    E.warm_start_from_mtp(head, mtp, model, ids)
    fc = head.fc.weight.numpy()
    head.fc.weight.set_value(fc + 0.02 * rng.standard_normal(fc.shape).astype(np.float32))
    toks = tok.encode(SNIPPET)[:45]
    w = paddle.to_tensor(np.asarray(toks, np.int64)[None])
    s = w.shape[1] - 3
    with paddle.no_grad():
        aux, _, _ = E.target_forward(model, w, head.aux_layer_ids, ids)
        outs = [o[0].numpy() for o in E.head_forward(head, w, aux, 3)]
    aux = aux[0].numpy()
    block = SimpleNamespace(
        config=head.config,
        embed_tokens=head.embed_tokens,
        enorm=head.enorm,
        hnorm=head.hnorm,
        eh_proj=head.eh_proj,
        mtp_block=head.layers[0],
        norm=head.norm,
    )
    from model_util import Forward64

    noise = Float32Noise(seed=4)
    fused = Forward64(head.config, noise).linear(head.fc, noise.lift(aux))  # [K + 1, S + 3, H]
    for i in (s // 2, s - 1):
        h = PagedHarness(cfg, model, mtp=head, block_size=8, seed=i)
        got1 = h.step_mtp({2: toks[1 : i + 2]}, {2: aux[: i + 1]})[2]
        truth1 = mtp_forward64(block, toks[1 : i + 2], fused[:, : i + 1], seed=1)
        assert_matches_reference(got1, reference(outs[0][: i + 1], truth1), f"step 1, 0..{i}")
        got2 = h.step_mtp({2: [toks[i + 2]]}, {2: got1[i : i + 1]})[2]
        prev = np.concatenate([fused[:, : i + 1], truth1[:, i : i + 1]], axis=1)
        truth2 = mtp_forward64(block, toks[1 : i + 3], prev, seed=2)[:, -1]
        assert_matches_reference(got2[0], reference(outs[1][i], truth2), f"step 2 at {i + 1}")
        got3 = h.step_mtp({2: [toks[i + 3]]}, {2: got2})[2]
        prev = np.concatenate([prev, truth2[:, None]], axis=1)
        truth3 = mtp_forward64(block, toks[1 : i + 4], prev, seed=3)[:, -1]
        assert_matches_reference(got3[0], reference(outs[2][i], truth3), f"step 3 at {i + 2}")


TINY = (
    "--threads 1 --steps 4 --batch-size 2 --seq-len 16 --draft-vocab 64 --warmup 2 "
    "--eval-every 2 --eval-windows 2 --save-every 2 --no-progress"
).split()


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_script_trains_exports_and_resumes_exactly(demo, T, tmp_path, monkeypatch):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    model, _, cfg, _ = demo
    common = TINY + ["--corpus-dir", str(_tiny_corpus(tmp_path))]
    full, full_exp = tmp_path / "full", tmp_path / "full_export"
    assert T.main(common + ["--out", str(full), "--export", str(full_exp)]) == 0
    rows = _rows(full_exp / "train_log.csv")
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4]  # step 0: the initial head
    assert all(np.isfinite(float(r["loss"])) for r in rows[1:])
    for name in ("config.json", "model.safetensors", "README.md", "loss_curve.png"):
        assert (full_exp / name).is_file(), name
    info = json.loads((full_exp / "train_info.json").read_text())
    assert info["step"] == 4 and info["head_config"]["draft_vocab_size"] == 64
    assert set(info["final_val"]) >= {"val_acc_1", "val_acc_3", "val_mtp_acc_1"}
    head = load_eagle_head(full_exp, model, "eagle3")
    assert head.head_config.aux_layer_ids == (1, 3, 5)
    model.capture_aux_hidden_states(())

    part, part_exp = tmp_path / "part", tmp_path / "part_export"
    argv = common + ["--out", str(part), "--export", str(part_exp)]
    assert T.main(argv + ["--stop-after", "2"]) == 0
    assert json.loads((part / "state.json").read_text())["step"] == 2
    assert T.main(argv + ["--resume"]) == 0
    resumed = _rows(part_exp / "train_log.csv")
    for a, b in zip(rows, resumed, strict=True):
        for k in ("lr", "loss", "loss_1", "acc_3", "val_acc_1"):
            assert a[k] == b[k], (a["step"], k, a[k], b[k])
    assert (part_exp / "model.safetensors").read_bytes() == (
        full_exp / "model.safetensors"
    ).read_bytes()


def test_script_refuses_a_layer_list_that_does_not_fit(demo, T, tmp_path):
    with pytest.raises(ValueError, match="eagle_aux_hidden_state_layer_ids"):
        T.main(
            TINY
            + ["--corpus-dir", str(_tiny_corpus(tmp_path)), "--out", str(tmp_path / "o")]
            + ["--aux-layers", "1,3,6"]
        )


# --------------------------------------------------------------------------- the shipped head
@pytest.fixture(scope="module")
def shipped(demo):
    return default_eagle3_head_path()  # committed: a missing head fails here


def test_shipped_head_loads_and_was_trained(demo, shipped):
    model, _, cfg, _ = demo
    head = load_eagle_head(shipped, model, "eagle3")
    model.capture_aux_hidden_states(())
    info = json.loads((shipped / "train_info.json").read_text())
    assert info["head_config"] == head.head_config.to_dict()
    final, initial = info["final_val"], info["initial_val"]
    assert final["val_acc_1"] > TRAINED_ACC_MIN
    assert final["val_loss_1"] < initial["val_loss_1"]  # training improved on its start
    assert (shipped / "README.md").read_text().count(info["command"]) == 1


def test_shipped_head_drafts_tokens_the_target_accepts(demo, shipped):
    """Greedy with the shipped head equals plain decoding token for token, and its drafts are
    accepted: far above a random head's rate."""
    from fd_mtp import LLM, SamplingParams

    _, _, _, tok = demo
    prompt = SNIPPET[:300]
    sp = SamplingParams(temperature=0.0, max_tokens=48)
    common = dict(max_num_seqs=1, max_model_len=512, block_size=16)
    plain = LLM(str(DEMO_MODEL), **common).generate([prompt], sp, use_tqdm=False)[0]
    spec = {"method": "eagle3", "model": str(shipped), "num_speculative_tokens": 3}
    llm = LLM(str(DEMO_MODEL), speculative_config={**spec, "num_model_steps": 3}, **common)
    out = llm.generate([prompt], sp, use_tqdm=False)[0]
    assert out.token_ids == plain.token_ids
    assert llm.speculative_metrics.acceptance_per_position[0] > TRAINED_ACC_MIN


def test_demo_program_has_an_eagle3_row(demo, shipped, capsys):
    from fd_mtp import demo as demo_program

    argv = ["--prompts", "1", "--max-tokens", "10", "--modes", "plain,eagle3_k3", "--show", "0"]
    assert demo_program.main(argv) == 0
    table = capsys.readouterr().out.split("tokens/s  vs plain")[1]
    assert "eagle3_k3" in table and table.count("yes") == 2 and " NO" not in table
    # another model without --eagle3-head: the row is left out, with a note
    assert demo_program.main(argv + ["--model", str(DEMO_MODEL)]) == 0
    out, err = capsys.readouterr()
    assert "eagle3_k3 left out" in err and "eagle3_k3" not in out.split("tokens/s  vs plain")[1]


def test_missing_head_names_the_training_command(monkeypatch, tmp_path):
    import fd_mtp.assets as assets

    monkeypatch.setattr(assets, "DEMO_EAGLE3_HEAD", tmp_path / "none")
    with pytest.raises(FileNotFoundError, match="tools/train_eagle_head.py"):
        assets.default_eagle3_head_path()
    assert DEMO_EAGLE3_HEAD.name == "ernie45_tiny_eagle3"
