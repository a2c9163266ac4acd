"""Checkpoint loading: fd_mtp.model.loader and fd_mtp.testing.write_random_checkpoint (named
test_checkpoint.py: tests/ops/test_loader.py owns the basename test_loader under pytest's rootdir imports)."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import paddle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tokenizer import check_load_tokenizer_errors

from fd_mtp.model import ErnieConfig
from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP, state_dict_names
from fd_mtp.model.loader import (
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX_FILE,
    SafetensorsCheckpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_safetensors,
)
from fd_mtp.testing import random_weights, tiny_config, write_random_checkpoint

IDS = [5, 17, 3, 250, 42, 7, 99, 1, 120]


# --------------------------------------------------------------------------- helpers
def all_params(model, mtp=None) -> dict[str, np.ndarray]:
    sd = {k: v.astype("float32").numpy() for k, v in model.state_dict().items()}
    if mtp is not None:
        sd.update({k: v.astype("float32").numpy() for k, v in mtp.state_dict().items()})
    return sd


def assert_params_equal(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def build_direct(cfg, weights):
    """Models built without the loader: parameters set one by one from ``weights``."""
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model) if cfg.num_nextn_predict_layers else None
    for layer in (model, mtp):
        if layer is None:
            continue
        for k, p in layer.state_dict().items():
            p.set_value(paddle.to_tensor(weights[k]).astype(p.dtype))
        layer.eval()
    return model, mtp


def outputs(model, mtp):
    ids = paddle.to_tensor(IDS, dtype="int64")
    with paddle.no_grad():
        h = model.dense_forward(ids)
        out = [h.numpy(), model.compute_logits(h).numpy()]
        if mtp is not None:
            hm = mtp.dense_forward(ids, h)
            out += [hm.numpy(), mtp.compute_logits(hm).numpy()]
    return out


def is_linear(name: str) -> bool:
    return name.endswith(("_proj.weight", ".mlp.gate.weight")) or name == "lm_head.weight"


def to_hf(weights: dict) -> dict:
    """Contract names/layout -> Hugging-Face/torch: ``model.`` prefix, linear weights [out, in]."""
    out = {}
    for k, v in weights.items():
        name = "model." + k[len("ernie.") :] if k.startswith("ernie.") else k
        out[name] = np.ascontiguousarray(v.T) if is_linear(k) else v
    return out


def fuse(weights: dict, cfg) -> dict:
    """Contract names -> Paddle-format fused qkv_proj [q|k|v] and up_gate_proj [gate|up]."""
    out = dict(weights)
    for k in list(weights):
        if k.endswith(".self_attn.q_proj.weight"):
            p = k[: -len("q_proj.weight")]
            out[p + "qkv_proj.weight"] = np.concatenate(
                [out.pop(p + f"{x}_proj.weight") for x in "qkv"], axis=-1
            )
        elif k.endswith(".gate_proj.weight"):
            p = k[: -len("gate_proj.weight")]
            out[p + "up_gate_proj.weight"] = np.concatenate(
                [out.pop(p + "gate_proj.weight"), out.pop(p + "up_proj.weight")], axis=-1
            )
    return out


def write(tmp_path, cfg, tensors, **kw):
    return save_checkpoint(tmp_path, cfg, tensors, **kw)


@pytest.fixture(scope="module")
def dense_ckpt(tmp_path_factory):
    d = write_random_checkpoint(tmp_path_factory.mktemp("dense"), seed=11)
    cfg = ErnieConfig.from_file(d / "config.json")
    return d, cfg, random_weights(cfg, seed=11)


@pytest.fixture(scope="module")
def moe_ckpt(tmp_path_factory):
    d = write_random_checkpoint(
        tmp_path_factory.mktemp("moe"), seed=12, moe_num_experts=4, tie_word_embeddings=False
    )
    cfg = ErnieConfig.from_file(d / "config.json")
    return d, cfg, random_weights(cfg, seed=12)


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("which", ["dense_ckpt", "moe_ckpt"])
def test_round_trip_parameters_and_outputs(which, request):
    d, cfg, weights = request.getfixturevalue(which)
    model, mtp, cfg2 = load_checkpoint(d)
    assert cfg2 == cfg
    assert isinstance(mtp, Ernie4_5MTP)
    assert_params_equal(all_params(model, mtp), weights)
    # MTP shares the main model's Layer objects
    assert (
        mtp.embed_tokens is model.embed_tokens
        and mtp.norm is model.norm
        and mtp.lm_head is model.lm_head
    )
    # same outputs as models built directly with those weights (exact: same ops, same values)
    for got, want in zip(outputs(model, mtp), outputs(*build_direct(cfg, weights))):
        np.testing.assert_array_equal(got, want)


def test_moe_checkpoint_has_router_and_experts(moe_ckpt):
    d, cfg, weights = moe_ckpt
    assert cfg.is_moe and not cfg.is_moe_layer(0) and cfg.is_moe_layer(1)
    with SafetensorsCheckpoint.from_dir(d) as t:
        names = set(t)
        assert "ernie.layers.1.mlp.gate.weight" in names
        assert "ernie.layers.1.mlp.experts.3.down_proj.weight" in names
        # the MTP block is dense (layer index 0 for the MoE rule; moe_layer_start_index = 1)
        assert "ernie.mtp_block.0.mlp.up_proj.weight" in names
        assert not any(n.startswith("ernie.mtp_block.0.mlp.experts.") for n in names)
        assert "lm_head.weight" in names and t.shape("lm_head.weight") == (64, 300)
    assert names == set(state_dict_names(cfg, mtp=True))


def test_load_weights_from_numpy_dict(dense_ckpt):
    _, cfg, weights = dense_ckpt
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model)
    load_weights(model, weights)
    load_weights(mtp, weights)
    assert_params_equal(all_params(model, mtp), weights)


# --------------------------------------------------------------------------- layouts and names
def test_hf_names_and_torch_layout(tmp_path, moe_ckpt):
    _, cfg, weights = moe_ckpt
    hf = to_hf(weights)
    assert "model.layers.0.self_attn.q_proj.weight" in hf and hf["lm_head.weight"].shape == (
        300,
        64,
    )
    # q_proj and o_proj are square here (64 x 64): only the layout rule can orient them
    assert weights["ernie.layers.0.self_attn.o_proj.weight"].shape == (64, 64)
    model, mtp, _ = load_checkpoint(write(tmp_path, cfg, hf))
    assert_params_equal(all_params(model, mtp), weights)


def test_torch_layout_square_weights_follow_layout_argument(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    torch_names_kept = {
        k: (np.ascontiguousarray(v.T) if is_linear(k) else v) for k, v in weights.items()
    }
    d = write(tmp_path, cfg, torch_names_kept)
    model, mtp, _ = load_checkpoint(d, layout="torch")
    assert_params_equal(all_params(model, mtp), weights)
    # auto (ernie. names -> Paddle layout): non-square weights are still turned by their shape,
    # square ones are taken as stored
    model, mtp, _ = load_checkpoint(d)
    got = all_params(model, mtp)
    np.testing.assert_array_equal(
        got["ernie.layers.0.mlp.up_proj.weight"], weights["ernie.layers.0.mlp.up_proj.weight"]
    )
    np.testing.assert_array_equal(
        got["ernie.layers.0.self_attn.q_proj.weight"],
        weights["ernie.layers.0.self_attn.q_proj.weight"].T,
    )


def test_mtp_linear_proj_transposed_when_shape_disagrees(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    w["ernie.mtp_linear_proj.0.weight"] = np.ascontiguousarray(
        w["ernie.mtp_linear_proj.0.weight"].T
    )  # [H, 2H]
    model, mtp, _ = load_checkpoint(write(tmp_path, cfg, w))
    np.testing.assert_array_equal(
        mtp.eh_proj.weight.numpy(), weights["ernie.mtp_linear_proj.0.weight"]
    )
    assert list(mtp.eh_proj.weight.shape) == [128, 64]


@pytest.mark.parametrize("hf", [False, True])
def test_fused_qkv_and_up_gate(tmp_path, moe_ckpt, hf):
    _, cfg, weights = moe_ckpt
    fused = fuse(weights, cfg)
    assert "ernie.layers.0.self_attn.qkv_proj.weight" in fused
    assert fused["ernie.layers.0.self_attn.qkv_proj.weight"].shape == (64, 64 + 32 + 32)
    assert "ernie.layers.1.mlp.experts.2.up_gate_proj.weight" in fused
    assert "ernie.mtp_block.0.mlp.up_gate_proj.weight" in fused
    if hf:
        fused = to_hf(fused)
    model, mtp, _ = load_checkpoint(write(tmp_path, cfg, fused))
    assert_params_equal(all_params(model, mtp), weights)


def test_bias_checkpoint_round_trip(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=4, use_bias=True)
    cfg = ErnieConfig.from_file(d)
    weights = random_weights(cfg, seed=4)
    assert "ernie.layers.0.self_attn.q_proj.bias" in weights
    model, mtp, _ = load_checkpoint(d)
    assert_params_equal(all_params(model, mtp), weights)


def test_fused_bias_split(tmp_path):
    cfg = tiny_config(use_bias=True)
    weights = random_weights(cfg, seed=5)
    fused = fuse(weights, cfg)
    for k in list(weights):
        if k.endswith(".self_attn.q_proj.bias"):
            p = k[: -len("q_proj.bias")]
            fused[p + "qkv_proj.bias"] = np.concatenate(
                [fused.pop(p + f"{x}_proj.bias") for x in "qkv"]
            )
    model, mtp, _ = load_checkpoint(write(tmp_path, cfg, fused))
    assert_params_equal(all_params(model, mtp), weights)


# --------------------------------------------------------------------------- sharded
def test_sharded_checkpoint(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    d = write_random_checkpoint(tmp_path, seed=11, shard_size=40_000)
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert len(shards) > 2 and not (d / SAFETENSORS_FILE).exists()
    index = json.loads((d / SAFETENSORS_INDEX_FILE).read_text())
    assert set(index["weight_map"]) == set(weights) and set(index["weight_map"].values()) == set(
        shards
    )
    model, mtp, _ = load_checkpoint(d)
    assert_params_equal(all_params(model, mtp), weights)
    # without the index, a complete model-xxxxx-of-yyyyy set still loads
    (d / SAFETENSORS_INDEX_FILE).unlink()
    assert_params_equal(all_params(*load_checkpoint(d)[:2]), weights)
    # an incomplete set does not
    (d / shards[0]).unlink()
    with pytest.raises(ValueError, match="incomplete shard set"):
        load_checkpoint(d)


def test_index_naming_missing_shard(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=1, shard_size=40_000)
    victim = sorted(d.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        load_checkpoint(d)


# --------------------------------------------------------------------------- errors
def test_missing_tensor_names_it_and_writes_nothing(dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    del w["ernie.layers.1.mlp.down_proj.weight"]
    model = Ernie4_5ForCausalLM(cfg)
    before = all_params(model)
    with pytest.raises(
        ValueError, match=r"missing tensor\(s\): ernie\.layers\.1\.mlp\.down_proj\.weight"
    ):
        load_weights(model, w)
    assert_params_equal(all_params(model), before)


def test_missing_tensor_in_checkpoint_file(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    del w["ernie.norm.weight"]
    with pytest.raises(ValueError, match=r"ernie\.norm\.weight"):
        load_checkpoint(write(tmp_path, cfg, w))


@pytest.mark.parametrize(
    "name,shape,pattern",
    [
        (
            "ernie.layers.0.input_layernorm.weight",
            (63,),
            r"ernie\.layers\.0\.input_layernorm\.weight: expected shape \[64\], checkpoint has \[63\]",
        ),
        (
            "ernie.layers.1.mlp.up_proj.weight",
            (64, 100),
            r"ernie\.layers\.1\.mlp\.up_proj\.weight: shape \[64, 100\] matches neither the expected Paddle layout "
            r"\[64, 128\] \(\[in, out\]\) nor the torch layout \[128, 64\]",
        ),
        (
            "ernie.embed_tokens.weight",
            (64, 300),
            r"ernie\.embed_tokens\.weight: expected shape \[300, 64\], checkpoint has \[64, 300\]",
        ),
    ],
)
def test_wrong_shape_names_tensor_and_both_shapes(tmp_path, dense_ckpt, name, shape, pattern):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    w[name] = np.zeros(shape, np.float32)
    with pytest.raises(ValueError, match=pattern):
        load_checkpoint(write(tmp_path, cfg, w))


def test_wrong_fused_shape(tmp_path):
    cfg = tiny_config()
    fused = fuse(random_weights(cfg, seed=2), cfg)
    fused["ernie.layers.0.self_attn.qkv_proj.weight"] = np.zeros((64, 120), np.float32)
    with pytest.raises(
        ValueError,
        match=r"ernie\.layers\.0\.self_attn\.q_proj\.weight: fused "
        r"'ernie\.layers\.0\.self_attn\.qkv_proj\.weight' shape \[64, 120\]",
    ):
        load_checkpoint(write(tmp_path, cfg, fused))


@pytest.mark.parametrize(
    "field,value",
    [
        ("hidden_size", -64),
        ("num_key_value_heads", 3),
        ("rms_norm_eps", "tiny"),
        ("tie_word_embeddings", "yes"),
    ],
)
def test_bad_config_field_named(tmp_path, dense_ckpt, field, value):
    d = write_random_checkpoint(tmp_path, seed=0)
    cfg = json.loads((d / "config.json").read_text())
    cfg[field] = value
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=field):
        load_checkpoint(d)


def test_config_weights_disagree_names_tensor(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=0)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        ValueError, match=r"ernie\.layers\.0\.mlp\.gate_proj\.weight: shape \[64, 128\]"
    ):
        load_checkpoint(d)


def test_model_type_of_another_architecture_is_refused(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=0)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "ernie4_5"  # what save_checkpoint writes
    cfg["model_type"] = "llama"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        ValueError, match=r"model_type 'llama' is not supported.*\['ernie4_5', 'ernie4_5_moe'\]"
    ):
        load_checkpoint(d)
    # the ERNIE-4.5 dense and MoE model types, and configs without one, still load
    base = tiny_config().to_dict()
    for model_type in ("ernie4_5", "ernie4_5_moe", None):
        dd = (
            dict(base, model_type=model_type)
            if model_type
            else {k: v for k, v in base.items() if k != "model_type"}
        )
        assert ErnieConfig.from_dict(dd).hidden_size == base["hidden_size"]
    with pytest.raises(ValueError, match="ErnieConfig.model_type 'ernie4_5_moe_vl'"):
        ErnieConfig.from_dict(dict(base, model_type="ernie4_5_moe_vl"))


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint directory not found"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_checkpoint(tmp_path)
    d = write_random_checkpoint(tmp_path / "c", seed=0)
    (d / SAFETENSORS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_checkpoint(d)


def test_unexpected_tensor_strict_and_lenient(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    w["ernie.layers.0.self_attn.rogue.weight"] = np.zeros((3,), np.float32)
    w["model.rotary_emb.inv_freq"] = np.zeros((8,), np.float32)  # known buffer: ignored
    d = write(tmp_path, cfg, w)
    with pytest.raises(
        ValueError,
        match=r"unexpected tensor\(s\) in the checkpoint: "
        r"ernie\.layers\.0\.self_attn\.rogue\.weight \(load with strict=False",
    ):
        load_checkpoint(d)
    with pytest.warns(UserWarning, match=r"unexpected tensor\(s\).*rogue"):
        model, mtp, _ = load_checkpoint(d, strict=False)
    assert_params_equal(all_params(model, mtp), weights)


def test_tensor_stored_twice(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    w["model.norm.weight"] = w["ernie.norm.weight"]
    with pytest.raises(ValueError, match=r"ernie\.norm\.weight: stored twice"):
        load_checkpoint(write(tmp_path, cfg, w))


def test_bad_layout_argument(dense_ckpt):
    _, cfg, weights = dense_ckpt
    with pytest.raises(ValueError, match="layout"):
        load_weights(Ernie4_5ForCausalLM(cfg), weights, layout="tf")


# --------------------------------------------------------------------------- MTP present / absent
def test_mtp_absent_from_checkpoint(tmp_path):
    d = write_random_checkpoint(
        tmp_path / "said", seed=3, with_mtp=False, num_nextn_predict_layers=1
    )
    model, mtp, cfg = load_checkpoint(d)
    assert cfg.num_nextn_predict_layers == 1 and mtp is None
    assert_params_equal(all_params(model), random_weights(cfg, seed=3, mtp=False))
    # without the override the config says what the weights are: no MTP block
    d = write_random_checkpoint(tmp_path / "plain", seed=3, with_mtp=False)
    model, mtp, cfg = load_checkpoint(d)
    assert cfg.num_nextn_predict_layers == 0 and mtp is None
    assert_params_equal(all_params(model), random_weights(cfg, seed=3, mtp=False))


def test_mtp_weights_ignored_when_config_has_none(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=3, num_nextn_predict_layers=0)
    with SafetensorsCheckpoint.from_dir(d) as t:
        assert "ernie.mtp_linear_proj.0.weight" in t
    model, mtp, cfg = load_checkpoint(d)
    assert mtp is None
    assert_params_equal(all_params(model), random_weights(cfg, seed=3, mtp=False))


def test_partial_mtp_weights_named(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(weights)
    del w["ernie.mtp_block.0.self_attn.k_proj.weight"]
    with pytest.raises(
        ValueError, match=r"Ernie4_5MTP.*missing.*ernie\.mtp_block\.0\.self_attn\.k_proj\.weight"
    ):
        load_checkpoint(write(tmp_path, cfg, w))


def test_main_weights_only_for_main_model(dense_ckpt):
    _, cfg, weights = dense_ckpt
    model = Ernie4_5ForCausalLM(cfg)
    main_only = {k: v for k, v in weights.items() if not k.startswith("ernie.mtp_")}
    load_weights(model, main_only)  # no MTP block: nothing missing
    with pytest.raises(ValueError, match=r"missing.*ernie\.mtp_emb_norm\.0\.weight"):
        load_weights(Ernie4_5MTP(cfg, model), main_only)


# --------------------------------------------------------------------------- tied / untied
def test_tied_and_untied(dense_ckpt, moe_ckpt):
    d, cfg, weights = dense_ckpt
    assert cfg.tie_word_embeddings and "lm_head.weight" not in weights
    model, _, _ = load_checkpoint(d)
    np.testing.assert_array_equal(
        model.lm_head.weight.numpy(), weights["ernie.embed_tokens.weight"].T
    )
    d, cfg, weights = moe_ckpt
    assert not cfg.tie_word_embeddings
    model, _, _ = load_checkpoint(d)
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), weights["lm_head.weight"])
    assert not np.array_equal(weights["lm_head.weight"], weights["ernie.embed_tokens.weight"].T)


def test_tied_checkpoint_with_lm_head(tmp_path, dense_ckpt):
    _, cfg, weights = dense_ckpt
    w = dict(
        weights, **{"lm_head.weight": np.ascontiguousarray(weights["ernie.embed_tokens.weight"].T)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, mtp, _ = load_checkpoint(
            write(tmp_path / "same", cfg, w)
        )  # equal copy: silently ignored
    assert_params_equal(all_params(model, mtp), weights)
    w["lm_head.weight"] = w["lm_head.weight"] + 1.0
    with pytest.warns(UserWarning, match="tie_word_embeddings is true"):
        load_checkpoint(write(tmp_path / "diff", cfg, w))


def test_untied_missing_lm_head(tmp_path, moe_ckpt):
    _, cfg, weights = moe_ckpt
    w = {k: v for k, v in weights.items() if k != "lm_head.weight"}
    with pytest.raises(ValueError, match=r"missing tensor\(s\): lm_head\.weight"):
        load_checkpoint(write(tmp_path, cfg, w))


# --------------------------------------------------------------------------- dtypes
def test_bfloat16_checkpoint(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=6, dtype="bfloat16", moe_num_experts=4)
    cfg = ErnieConfig.from_file(d)
    assert cfg.dtype == "bfloat16" and cfg.moe_use_aux_free
    with SafetensorsCheckpoint.from_dir(d) as t:
        assert t.dtype("ernie.layers.0.mlp.up_proj.weight") == "BF16"
        assert t.dtype("ernie.layers.1.mlp.gate.weight") == "F32"  # router kept float32
        assert t.dtype("ernie.layers.1.mlp.moe_statics.e_score_correction_bias") == "F32"
    weights = random_weights(cfg, seed=6)
    rounded = {
        k: paddle.to_tensor(v).astype("bfloat16").astype("float32").numpy()
        if ".mlp.gate.weight" not in k and "e_score_correction_bias" not in k
        else v
        for k, v in weights.items()
    }
    assert not np.array_equal(
        rounded["ernie.embed_tokens.weight"], weights["ernie.embed_tokens.weight"]
    )
    # CPU: dtype=None falls back to float32 (no half matmul on Paddle's CPU build); values exact
    model, mtp, cfg32 = load_checkpoint(d)
    assert cfg32.dtype == "float32" and model.embed_tokens.weight.dtype == paddle.float32
    assert_params_equal(all_params(model, mtp), rounded)
    with pytest.raises(ValueError, match="dtype"):
        load_checkpoint(d, dtype="bfloat16")


def test_bad_dtype_argument(dense_ckpt):
    with pytest.raises(ValueError, match="dtype"):
        load_checkpoint(dense_ckpt[0], dtype="int8")


# --------------------------------------------------------------------------- write_random_checkpoint
def test_write_random_checkpoint_deterministic(tmp_path):
    a = write_random_checkpoint(tmp_path / "a", seed=7, moe_num_experts=4)
    b = write_random_checkpoint(tmp_path / "b", seed=7, moe_num_experts=4)
    c = write_random_checkpoint(tmp_path / "c", seed=8, moe_num_experts=4)
    for f in ("config.json", SAFETENSORS_FILE):
        assert (a / f).read_bytes() == (b / f).read_bytes()
    assert (a / "config.json").read_bytes() == (c / "config.json").read_bytes()
    assert (a / SAFETENSORS_FILE).read_bytes() != (c / SAFETENSORS_FILE).read_bytes()


def test_write_random_checkpoint_config(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=0)
    cfg = ErnieConfig.from_file(d)
    assert (
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.num_hidden_layers,
        cfg.num_nextn_predict_layers,
    ) == (300, 64, 2, 1)
    assert not cfg.is_moe and cfg.tie_word_embeddings
    raw = json.loads((d / "config.json").read_text())
    assert raw["architectures"] == ["Ernie4_5_ForCausalLM"]
    with pytest.raises(ValueError, match="moe_k"):
        write_random_checkpoint(tmp_path / "bad", moe_num_experts=2, moe_k=3)


def test_save_safetensors_single_file_when_under_shard_size(tmp_path):
    files = save_safetensors({"a": np.ones((2, 2), np.float32)}, tmp_path, shard_size=1 << 20)
    assert [f.name for f in files] == [SAFETENSORS_FILE]
    with SafetensorsCheckpoint.from_dir(tmp_path) as t:
        assert t.shape("a") == (2, 2) and t.nbytes() == 16


# --------------------------------------------------------------------------- progress, tokenizer
def test_progress_bar(dense_ckpt, capsys):
    load_checkpoint(dense_ckpt[0], progress=True)
    err = capsys.readouterr().err
    assert "loading Ernie4_5ForCausalLM" in err and "loading Ernie4_5MTP" in err
    load_checkpoint(dense_ckpt[0])  # tiny: no bar by default
    assert "loading" not in capsys.readouterr().err


def test_load_tokenizer_errors(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "paddleformers", None)
    monkeypatch.setitem(sys.modules, "paddleformers.transformers", None)
    check_load_tokenizer_errors(tmp_path, "tokenizer_config.json")


def test_paddle_tensor_values_and_flat_correction_bias(moe_ckpt):
    _, cfg, weights = moe_ckpt
    given = {k: paddle.to_tensor(v) for k, v in weights.items()}
    given["ernie.embed_tokens.weight"] = given["ernie.embed_tokens.weight"].astype("bfloat16")
    bias = "ernie.layers.1.mlp.moe_statics.e_score_correction_bias"
    given[bias] = paddle.to_tensor(weights[bias].reshape(-1))  # [E] for [1, E]
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model)
    load_weights(model, given)
    load_weights(mtp, given)
    want = dict(weights)
    want["ernie.embed_tokens.weight"] = given["ernie.embed_tokens.weight"].astype("float32").numpy()
    assert_params_equal(all_params(model, mtp), want)
    assert list(model.layers[1].mlp.moe_statics.e_score_correction_bias.shape) == [1, 4]


# --------------------------------------------------------------------------- property: any mix of forms
@pytest.fixture(scope="module")
def moe_models(moe_ckpt):
    _, cfg, weights = moe_ckpt
    model = Ernie4_5ForCausalLM(cfg)
    return cfg, weights, model, Ernie4_5MTP(cfg, model)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_mix_of_names_layouts_and_fusion_loads_the_same(moe_models, data):
    """Each stored form of each tensor drawn independently: HF or contract names with their layout,
    fused or split projections per layer, non-square linear weights in either orientation."""
    cfg, weights, model, mtp = moe_models
    hf = data.draw(st.booleans(), label="hf")
    w = dict(weights)
    prefixes = sorted({k.rsplit(".self_attn.", 1)[0] for k in w if ".self_attn." in k})
    fuse_qkv = {p for p in prefixes if data.draw(st.booleans(), label=f"fuse qkv {p}")}
    mlps = sorted({k[: -len("gate_proj.weight")] for k in w if k.endswith(".gate_proj.weight")})
    fuse_mlp = {p for p in mlps if data.draw(st.booleans(), label=f"fuse mlp {p}")}
    for p in fuse_qkv:
        w[p + ".self_attn.qkv_proj.weight"] = np.concatenate(
            [w.pop(p + f".self_attn.{x}_proj.weight") for x in "qkv"], axis=-1
        )
    for p in fuse_mlp:
        w[p + "up_gate_proj.weight"] = np.concatenate(
            [w.pop(p + "gate_proj.weight"), w.pop(p + "up_proj.weight")], axis=-1
        )
    stored = {}
    for k, v in w.items():
        square = v.ndim == 2 and v.shape[0] == v.shape[1]
        if is_linear(k) and (hf if square else data.draw(st.booleans(), label=f"T {k}")):
            v = np.ascontiguousarray(v.T)
        stored[("model." + k[len("ernie.") :]) if hf and k.startswith("ernie.") else k] = v
    # start from different values so that a skipped tensor is seen
    for layer in (model, mtp):
        for p in layer.parameters():
            p.set_value(paddle.zeros(p.shape, dtype=p.dtype))
    load_weights(model, stored)
    load_weights(mtp, stored)
    assert_params_equal(all_params(model, mtp), weights)


@pytest.mark.parametrize("strict", [True, False])
def test_correction_bias_without_aux_free_flag_is_refused(tmp_path, moe_ckpt, strict):
    _, cfg, weights = moe_ckpt
    from dataclasses import replace

    plain = replace(cfg, moe_use_aux_free=False)
    assert "ernie.layers.1.mlp.moe_statics.e_score_correction_bias" not in state_dict_names(plain)
    with pytest.raises(
        ValueError,
        match=r"correction bias.*ernie\.layers\.1\.mlp\.moe_statics\.e_score_correction_bias"
        r".*moe_use_aux_free = false",
    ):
        load_checkpoint(write(tmp_path, plain, weights), strict=strict)
