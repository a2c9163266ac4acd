"""EAGLE / EAGLE-3 heads at the unit level: the config option, the head checkpoint (format,
refusals naming the field), the target's aux hidden states (every forward kind, no extra pass),
the d2t map, and the proposer the factory builds (fd_mtp.model.eagle, fd_mtp.proposer.eagle)."""

from __future__ import annotations

import json

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig  # noqa: E402
from fd_mtp.engine.spec_runner import SpeculativeModelRunner  # noqa: E402
from fd_mtp.model.attention import ForwardMeta, allocate_kv_caches  # noqa: E402
from fd_mtp.model.eagle import EagleHead, default_aux_layer_ids  # noqa: E402
from fd_mtp.model.eagle_io import load_eagle_head  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.proposer import EagleProposer, MTPProposer, Proposer  # noqa: E402
from fd_mtp.testing import write_random_checkpoint  # noqa: E402
from fd_mtp.testing.eagle import write_random_eagle_head  # noqa: E402

SCHED = SchedulerConfig(max_num_seqs=2, max_model_len=32)
CACHE = CacheConfig(block_size=8, num_gpu_blocks=16)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle_unit")
    return write_random_checkpoint(root / "t", seed=5, num_hidden_layers=4)


@pytest.fixture
def main(target):
    return load_checkpoint(target)[0]


# -- SpeculativeConfig -----------------------------------------------------------------------------
def test_config_takes_vllm_and_fastdeploy_names():
    c = SpeculativeConfig.from_value(
        {"method": "eagle3", "model": "/heads/e3", "num_speculative_tokens": 3}
    )
    assert (c.method, c.model, c.num_speculative_tokens, c.uses_draft_model) == (
        "eagle3",
        "/heads/e3",
        3,
        True,
    )
    c = SpeculativeConfig(method="eagle", model="d", num_speculative_tokens=1, num_model_steps=3)
    assert c.num_speculative_tokens == 3 and c.lookahead == 2  # K raised to N, as for MTP
    c = SpeculativeConfig(method="eagle", model="d", draft_policy="adaptive")
    assert c.draft_policy == "adaptive"
    c = SpeculativeConfig(method="eagle3", model="d", draft_sampling=True, verification="rejection")
    assert c.draft_sampling


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"method": "eagle"}, r"SpeculativeConfig\.model: method 'eagle' needs the directory"),
        ({"method": "eagle3", "model": ""}, r"SpeculativeConfig\.model: method 'eagle3' needs"),
        ({"method": "eagle3", "model": 7}, r"SpeculativeConfig\.model must be a path string"),
        ({"method": "mtp", "model": "d"}, r"SpeculativeConfig\.model='d': method 'mtp' takes no"),
        ({"method": "ngram", "model": "d"}, r"SpeculativeConfig\.model='d': method 'ngram'"),
    ],
)
def test_config_refuses_a_missing_or_misplaced_model_by_name(fields, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig.from_value(fields)


# -- the head checkpoint ---------------------------------------------------------------------------
def test_default_aux_layers_are_vllm_s():
    assert default_aux_layer_ids(32) == [2, 16, 29]
    assert default_aux_layer_ids(4) == [2, 2, 1]


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_written_head_loads_with_its_documented_tensors(target, main, tmp_path, method):
    head_dir = write_random_eagle_head(tmp_path / method, target, method=method, seed=1)
    cfg = json.loads((head_dir / "config.json").read_text())
    assert cfg["model_type"] == {"eagle": "ernie4_5_eagle", "eagle3": "ernie4_5_eagle3"}[method]
    head = load_eagle_head(head_dir, main, method)
    assert isinstance(head, EagleHead) and head.method == method
    names = {n for n, _ in head.named_parameters()}
    H = main.config.hidden_size
    assert list(head.fc.weight.shape) == [(2 if method == "eagle" else 3) * H, H]
    # shared with the target (not the head's own parameters) unless the checkpoint has them
    assert head.embed_tokens is main.embed_tokens
    assert not any(n.startswith("embed_tokens") for n in names)
    assert head.config.num_hidden_layers == main.config.num_hidden_layers  # its KV-cache index
    assert head.layers[0].layer_id == main.config.num_hidden_layers
    if method == "eagle":
        assert "lm_head_weight" not in names and main.aux_hidden_state_layers == ()
    else:
        assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 2, 1]
        assert main.aux_hidden_state_layers == (2, 2, 1)
        Vd = cfg["draft_vocab_size"]
        assert list(head.lm_head_weight.shape) == [H, Vd]
        t = head.draft_to_target.numpy()
        assert t.shape == (Vd,) and np.all(np.diff(t) > 0) and t.max() < main.config.vocab_size


def test_own_embedding_and_lm_head_are_used_when_present(target, main, tmp_path):
    d = write_random_eagle_head(
        tmp_path / "own", target, method="eagle", own_embedding=True, own_lm_head=True
    )
    head = load_eagle_head(d, main, "eagle")
    assert head.embed_tokens is not main.embed_tokens
    h = paddle.randn([3, main.config.hidden_size])
    np.testing.assert_allclose(
        head.compute_logits(h).numpy(), (h @ head.lm_head_weight).numpy(), rtol=1e-6
    )


def _edit_config(d, **changes):
    p = d / "config.json"
    cfg = json.loads(p.read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    p.write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "method, change, message",
    [
        ("eagle", {"hidden_size": 32}, "hidden_size 32 does not fit the target's hidden_size 64"),
        ("eagle3", {"hidden_size": 128}, "hidden_size 128 does not fit"),
        ("eagle", {"vocab_size": 301}, "vocab_size 301 does not fit the target's vocab_size 300"),
        ("eagle3", {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}, r"has \[4\] outside"),
        ("eagle3", {"eagle_aux_hidden_state_layer_ids": [-1, 1, 2]}, r"has \[-1\] outside"),
        ("eagle3", {"eagle_aux_hidden_state_layer_ids": []}, "must be a non-empty list"),
        ("eagle3", {"eagle_aux_hidden_state_layer_ids": None}, "eagle_aux_hidden_state_layer_ids"),
        ("eagle3", {"draft_vocab_size": 400}, "draft_vocab_size 400 exceeds"),
        ("eagle3", {"draft_vocab_size": None}, "missing field 'draft_vocab_size'"),
        ("eagle", {"draft_vocab_size": 100}, "draft_vocab_size is an EAGLE-3 field"),
        ("eagle", {"model_type": "ernie4_5"}, "model_type must be one of"),
        ("eagle", {"model_type": "ernie4_5_eagle3"}, "is a 'eagle3' head, but speculative_config"),
        ("eagle", {"intermediate_size": 0}, "intermediate_size must be an int >= 1"),
        ("eagle", {"num_key_value_heads": 3}, "must be a multiple of num_key_value_heads 3"),
    ],
)
def test_a_head_that_does_not_fit_is_refused_naming_the_field(
    target, main, tmp_path, method, change, message
):
    d = write_random_eagle_head(tmp_path / "h", target, method=method)
    _edit_config(d, **change)
    with pytest.raises(ValueError, match=message):
        load_eagle_head(d, main, method)


def test_layer_list_width_must_match_the_fc(target, main, tmp_path):
    """A layer list of another length than the checkpoint's fc was trained for: the fc tensor's
    shape is refused by name."""
    d = write_random_eagle_head(tmp_path / "h", target, method="eagle3")
    _edit_config(d, eagle_aux_hidden_state_layer_ids=[0, 1])
    with pytest.raises(ValueError, match=r"tensor fc.weight has shape \[192, 64\], expected"):
        load_eagle_head(d, main, "eagle3")


def _rewrite_tensors(d, edit):
    from safetensors.numpy import load_file, save_file

    path = d / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.update(d2t=t["d2t"] + 1000), r"d2t maps draft id 0 to target id \d+"),
        (lambda t: t.update(d2t=-np.arange(t["d2t"].size)), "same target id"),
        (lambda t: t.update(d2t=t["d2t"][:-1]), r"tensor d2t has shape"),
        (lambda t: t.pop("d2t"), r"missing tensors \['d2t'\]"),
        (lambda t: t.update(extra=np.zeros(2, np.float32)), r"unexpected tensors \['extra'\]"),
        (lambda t: t.update(t2d=np.ones(300, bool)), "t2d does not mark exactly"),
        (lambda t: t.update(d2t=t["d2t"].astype(np.float32)), "d2t must be an integer array"),
    ],
)
def test_a_bad_vocab_map_or_tensor_is_refused_by_name(target, main, tmp_path, edit, message):
    d = write_random_eagle_head(tmp_path / "h", target, method="eagle3")
    _rewrite_tensors(d, edit)
    with pytest.raises(ValueError, match=message):
        load_eagle_head(d, main, "eagle3")


def test_a_consistent_t2d_is_accepted(target, main, tmp_path):
    d = write_random_eagle_head(tmp_path / "h", target, method="eagle3")

    def add_t2d(t):
        mask = np.zeros(300, bool)
        mask[np.arange(t["d2t"].size) + t["d2t"]] = True
        t["t2d"] = mask

    _rewrite_tensors(d, add_t2d)
    assert load_eagle_head(d, main, "eagle3").method == "eagle3"


def test_missing_directory_or_config(main, tmp_path):
    with pytest.raises(FileNotFoundError, match="EAGLE head directory not found"):
        load_eagle_head(tmp_path / "nope", main)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_eagle_head(tmp_path / "empty", main)


def test_eagle3_logits_are_over_the_target_vocabulary_through_d2t(target, main, tmp_path):
    d = write_random_eagle_head(tmp_path / "h", target, method="eagle3", draft_vocab_size=40)
    head = load_eagle_head(d, main, "eagle3")
    h = paddle.randn([5, main.config.hidden_size])
    logits = head.compute_logits(h).numpy()
    draft = (h @ head.lm_head_weight).numpy()
    ids = head.draft_to_target.numpy()
    assert logits.shape == (5, 300)
    np.testing.assert_array_equal(logits[:, ids], draft)
    off = np.setdiff1d(np.arange(300), ids)
    assert np.all(np.isneginf(logits[:, off]))
    # the argmax draft is the d2t image of the draft-vocabulary argmax
    np.testing.assert_array_equal(logits.argmax(-1), ids[draft.argmax(-1)])


# -- the target's aux hidden states ----------------------------------------------------------------
def _packed_step(model, ids, num_blocks=8, block_size=8):
    """One prefill step of the sequence ``ids`` through ``model.forward``."""
    n = len(ids)
    caches = allocate_kv_caches(
        model.config, model.config.num_hidden_layers, num_blocks, block_size
    )
    meta = ForwardMeta(
        ids_remove_padding=paddle.to_tensor(ids, dtype="int64"),
        cu_seqlens_q=paddle.to_tensor([0, n], dtype="int32"),
        seq_lens_this_time=paddle.to_tensor([n], dtype="int32"),
        seq_lens_encoder=paddle.to_tensor([n], dtype="int32"),
        seq_lens_decoder=paddle.to_tensor([0], dtype="int32"),
        block_tables=paddle.to_tensor([list(range(num_blocks))], dtype="int32"),
        batch_id_per_token=paddle.to_tensor([0] * n, dtype="int32"),
        caches=caches,
        block_size=block_size,
    )
    return model(meta.ids_remove_padding, meta)


@pytest.mark.parametrize("forward", ["eager", "native", "static"])
def test_the_target_keeps_the_chosen_layers_streams_from_its_one_forward(main, forward):
    kind = None
    if forward == "native":
        kind = main.native_forward()
    elif forward == "static":
        kind = main.compile_forward()
    ids = [5, 9, 33, 7, 101, 250, 3, 17, 64]
    plain = _packed_step(main, ids).numpy()
    assert main.aux_hidden_states is None
    main.capture_aux_hidden_states([0, 3, 1])
    out = _packed_step(main, ids)
    if kind is not None:  # the step ran on that forward, not on an eager fallback
        assert kind.calls == 2 and kind.fallbacks == 0
    np.testing.assert_array_equal(out.numpy(), plain)  # the same forward, nothing else run
    aux = [a.numpy() for a in main.aux_hidden_states]
    assert len(aux) == 3 and all(a.shape == (9, 64) for a in aux)
    # layer 0's input is the token embedding itself
    np.testing.assert_array_equal(aux[0], main.embed_tokens(paddle.to_tensor(ids)).numpy())
    # the streams agree with the eager forward's (the oracle of every forward kind)
    main.native_forward(False)
    main.compile_forward(False)
    _packed_step(main, ids)
    eager = [a.numpy() for a in main.aux_hidden_states]
    for a, e in zip(aux, eager):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)
    # the final hidden state of layer L-1's stream: norm(stream after the last layer); layer 3's
    # input differs from layer 1's
    assert not np.allclose(eager[1], eager[2])
    main.capture_aux_hidden_states(None)
    _packed_step(main, ids)
    assert main.aux_hidden_states is None


def test_capture_refuses_layers_outside_the_target(main):
    with pytest.raises(ValueError, match=r"layer id 4 is outside \[0, 4\)"):
        main.capture_aux_hidden_states([1, 4])


# -- the proposer ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_the_factory_builds_an_eagle_proposer_with_its_own_cache(target, main, tmp_path, method):
    head = load_eagle_head(
        write_random_eagle_head(
            tmp_path / method, target, method=method, num_key_value_heads=1, head_dim=32
        ),
        main,
        method,
    )
    cfg = SpeculativeConfig(
        method=method, model=str(tmp_path), num_speculative_tokens=2, num_model_steps=2
    )
    r = SpeculativeModelRunner(
        main, cfg, scheduler_config=SCHED, cache_config=CACHE, mtp_model=head
    )
    p = r.proposer
    assert type(p) is EagleProposer and isinstance(p, Proposer) and not isinstance(p, MTPProposer)
    L = main.config.num_hidden_layers
    assert p.caches[:L] == [None] * L
    k, v = p.caches[L]
    assert list(k.shape) == [16, 1, 8, 32]  # the head's kv heads and head_dim, the target's blocks
    assert r.prefix_cache_margin == 2  # the draft model's lookahead, as MTP


def test_the_proposer_refuses_a_wrong_draft_model(target, main, tmp_path):
    mtp = load_checkpoint(target)[1]
    cfg = SpeculativeConfig(method="eagle", model="d", num_speculative_tokens=1)
    with pytest.raises(ValueError, match="EagleProposer: the draft model must be an EagleHead"):
        SpeculativeModelRunner(main, cfg, scheduler_config=SCHED, cache_config=CACHE, mtp_model=mtp)
    with pytest.raises(ValueError, match="EagleProposer: the draft model is None"):
        SpeculativeModelRunner(main, cfg, scheduler_config=SCHED, cache_config=CACHE)
    head3 = load_eagle_head(write_random_eagle_head(tmp_path / "e3", target), main, "eagle3")
    with pytest.raises(ValueError, match="method is 'eagle' but the head is an 'eagle3' head"):
        SpeculativeModelRunner(
            main, cfg, scheduler_config=SCHED, cache_config=CACHE, mtp_model=head3
        )


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_the_head_reads_the_target_hidden_states_of_the_same_forward(target, tmp_path, method):
    """The head's first substep reads, row for row, the hidden states of the target's forward of
    that step (no second target pass): EAGLE-1 the final hidden states, EAGLE-3 the concatenated
    streams of its layers; later substeps its own H-wide output."""
    import fd_mtp
    from fd_mtp import SamplingParams

    head_dir = write_random_eagle_head(tmp_path / method, target, method=method)
    llm = fd_mtp.LLM(
        str(target),
        speculative_config={
            "method": method,
            "model": str(head_dir),
            "num_speculative_tokens": 2,
            "num_model_steps": 2,
        },
        max_num_seqs=2,
        max_model_len=64,
        block_size=8,
    )
    head, main = llm.runner.proposer.model, llm.runner.model
    seen, target_rows = [], []
    head_forward, main_forward = head.forward, main.forward

    def record_main(ids, meta):
        out = main_forward(ids, meta)
        aux = main.aux_hidden_states
        target_rows.append(out.numpy() if aux is None else paddle.concat(aux, -1).numpy())
        return out

    def record_head(ids, prev, meta):
        seen.append(prev.numpy())
        return head_forward(ids, prev, meta)

    main.forward, head.forward = record_main, record_head
    prompt = [5, 9, 33, 7, 101, 250, 3]
    llm.generate([prompt], SamplingParams(max_tokens=3, temperature=0.0), use_tqdm=False)
    H = main.config.hidden_size
    width = H if method == "eagle" else 3 * H
    assert len(target_rows) >= 2 and seen[0].shape == (len(prompt), width)
    # prefill: the draft's input position j pairs token j + 1 with the target's row j
    np.testing.assert_array_equal(seen[0], target_rows[0])
    assert seen[1].shape == (1, H)  # the next substep: the head's own output row
    # the next step's first substep: the rows of that step's target forward (accepted tokens)
    assert seen[2].shape[1] == width
    rows = target_rows[1]
    assert any(np.array_equal(seen[2], rows[:n]) for n in range(1, rows.shape[0] + 1))


@pytest.mark.parametrize("name", ["fd_mtp.model.eagle", "fd_mtp.testing.eagle"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_the_writer_command_writes_a_loadable_head(target, main, tmp_path, capsys):
    from fd_mtp.testing.eagle import main as write_main

    assert write_main([str(tmp_path / "h"), "--target", str(target), "--method", "eagle"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "h")
    assert load_eagle_head(tmp_path / "h", main, "eagle").method == "eagle"


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_a_torch_layout_head_loads_as_the_same_head(target, main, tmp_path, method):
    """vLLM's / SpecForge's ``[out, in]`` linear weights: `load_eagle_head` tells the layout by
    the input projection and transposes every matrix but the embedding; a head written back in
    either layout reads back to the same parameters."""
    from fd_mtp.model.eagle_io import save_eagle_head

    d = write_random_eagle_head(tmp_path / "h", target, method=method, own_embedding=True)
    head = load_eagle_head(d, main, method)
    want = {k: v.numpy() for k, v in head.state_dict().items()}
    torch_dir = save_eagle_head(head, tmp_path / "torch", layout="torch")
    from safetensors.numpy import load_file

    stored = load_file(str(torch_dir / "model.safetensors"))
    h = main.config.hidden_size
    name = "fc.weight" if method == "eagle" else "eh_proj.weight"
    assert list(stored[name].shape) == [h, 2 * h]  # [out, in]
    assert stored["embed_tokens.weight"].shape == want["embed_tokens.weight"].shape
    for layout in ("auto", "torch"):
        got = load_eagle_head(torch_dir, main, method, layout=layout).state_dict()
        for k, v in want.items():
            np.testing.assert_array_equal(got[k].numpy(), v, err_msg=f"{layout} {k}")
    back = load_eagle_head(save_eagle_head(head, tmp_path / "paddle"), main, method).state_dict()
    for k, v in want.items():
        np.testing.assert_array_equal(back[k].numpy(), v, err_msg=f"paddle {k}")
    with pytest.raises(ValueError, match=r"tensor fc.weight has shape .*\(paddle layout"):
        load_eagle_head(torch_dir, main, method, layout="paddle")


def test_a_head_mixing_layouts_or_an_unknown_layout_is_refused(target, main, tmp_path):
    d = write_random_eagle_head(tmp_path / "h", target, method="eagle3")
    name = "layers.0.mlp.down_proj.weight"
    _rewrite_tensors(d, lambda t: t.update({name: np.ascontiguousarray(t[name].T)}))
    with pytest.raises(ValueError, match=rf"tensor {name} has shape .* \(paddle layout"):
        load_eagle_head(d, main, "eagle3")
    with pytest.raises(ValueError, match="layout must be one of"):
        load_eagle_head(d, main, "eagle3", layout="jax")
    _rewrite_tensors(d, lambda t: t.update({"eh_proj.weight": np.zeros([5, 7], np.float32)}))
    with pytest.raises(ValueError, match=r"eh_proj.weight has shape \[5, 7\], expected .* or"):
        load_eagle_head(d, main, "eagle3")
