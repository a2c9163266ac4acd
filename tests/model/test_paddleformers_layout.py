"""Checkpoints in the layout paddleformers 1.2 saves, written by hand (no paddleformers needed):
issue 17 items 1-4. tests/model/test_interop_paddleformers.py runs paddleformers itself.

What paddleformers 1.2.0's ``save_pretrained`` writes for a tiny ERNIE-4.5-MoE model (observed):
``model.*`` names, linear weights ``[out, in]`` (the router ``mlp.gate.weight`` ``[E, H]`` too),
a dense MTP block (``mtp_block.0.mlp.{gate,up,down}_proj``) when ``moe_layer_start_index >= 1``,
``moe_statics.e_score_correction_bias`` ``[1, E]``, and a config.json without
``moe_use_aux_free`` / ``moe_norm_min`` but with ``torch_dtype``, ``rope_parameters`` and the
resolved ``moe_layer_end_index`` (``num_hidden_layers - 1``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fd_mtp.model import ErnieConfig
from fd_mtp.model.ernie import state_dict_names
from fd_mtp.model.loader import (
    SafetensorsCheckpoint,
    load_checkpoint,
    save_checkpoint,
    save_safetensors,
    to_torch_layout,
)
from fd_mtp.testing import random_weights, tiny_config, write_random_checkpoint

# config.json as paddleformers 1.2.0 saves Ernie4_5_MoeConfig(vocab_size=300, hidden_size=64,
# intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
# head_dim=16, moe_num_experts=4, moe_k=2, moe_intermediate_size=32, moe_num_shared_experts=1,
# moe_layer_start_index=1, num_nextn_predict_layers=1, tie_word_embeddings=False, rms_norm_eps=1e-5)
PF_MOE_CONFIG = {
    "architectures": ["Ernie4_5_MoeForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.0721651751193053,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "model_type": "ernie4_5_moe",
    "moe_capacity": [64, 64, 64],
    "moe_intermediate_size": 32,
    "moe_k": 2,
    "moe_layer_end_index": 1,
    "moe_layer_interval": 1,
    "moe_layer_start_index": 1,
    "moe_num_experts": 4,
    "moe_num_shared_experts": 1,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "num_nextn_predict_layers": 1,
    "pad_token_id": 0,
    "paddleformers_version": "1.2.0",
    "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 10000, "rope_type": "default"},
    "rope_theta": 10000,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_bias": False,
    "use_cache": False,
    "vocab_size": 300,
}

# Some of the shapes paddleformers 1.2.0 wrote for that config (observed), to check to_torch_layout
# against the real thing rather than against itself.
PF_SHAPES = {
    "lm_head.weight": (300, 64),
    "model.embed_tokens.weight": (300, 64),
    "model.layers.0.mlp.down_proj.weight": (64, 128),
    "model.layers.0.mlp.gate_proj.weight": (128, 64),
    "model.layers.0.self_attn.k_proj.weight": (32, 64),
    "model.layers.1.mlp.experts.0.down_proj.weight": (64, 32),
    "model.layers.1.mlp.experts.3.up_proj.weight": (32, 64),
    "model.layers.1.mlp.gate.weight": (4, 64),
    "model.layers.1.mlp.moe_statics.e_score_correction_bias": (1, 4),
    "model.layers.1.mlp.shared_experts.gate_proj.weight": (32, 64),
    "model.mtp_block.0.mlp.down_proj.weight": (64, 128),
    "model.mtp_block.0.mlp.up_proj.weight": (128, 64),
    "model.mtp_block.0.self_attn.q_proj.weight": (64, 64),
    "model.mtp_linear_proj.0.weight": (64, 128),
    "model.mtp_emb_norm.0.weight": (64,),
}


def pf_config() -> ErnieConfig:
    return ErnieConfig.from_dict(PF_MOE_CONFIG)


def write_pf_moe(path, weights=None, config=PF_MOE_CONFIG):
    """A checkpoint directory laid out as paddleformers saves one (see the module docstring)."""
    cfg = pf_config()
    weights = random_weights(cfg, seed=21) if weights is None else weights
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    save_safetensors(to_torch_layout(weights), path)
    return path, cfg, weights


def all_params(model, mtp=None):
    out = {k: v.numpy() for k, v in model.state_dict().items()}
    if mtp is not None:
        out.update({k: v.numpy() for k, v in mtp.state_dict().items()})
    return out


# --------------------------------------------------------------------------- items 1 and 2
def test_paddleformers_moe_config_reads_as_paddleformers_builds_it():
    cfg = pf_config()
    assert cfg.moe_use_aux_free is True  # paddleformers' default; the key is not written
    assert not cfg.mtp_block_is_moe  # layer index 0 < moe_layer_start_index 1
    names = state_dict_names(cfg, mtp=True)
    assert "ernie.mtp_block.0.mlp.gate_proj.weight" in names
    assert "ernie.layers.1.mlp.moe_statics.e_score_correction_bias" in names
    assert to_torch_layout({n: np.zeros(s, np.float32) for n, s in names.items()}).keys() >= set(
        PF_SHAPES
    )
    got = to_torch_layout({n: np.zeros(s, np.float32) for n, s in names.items()})
    assert {n: got[n].shape for n in PF_SHAPES} == PF_SHAPES


def test_paddleformers_moe_checkpoint_loads_strictly_with_bias_and_dense_mtp(tmp_path):
    d, cfg, weights = write_pf_moe(tmp_path)
    model, mtp, got_cfg = load_checkpoint(d)  # strict: nothing unexpected, nothing missing
    assert mtp is not None and not mtp.mtp_block.is_moe
    params = all_params(model, mtp)
    assert params.keys() == weights.keys()
    for name, want in weights.items():
        np.testing.assert_array_equal(params[name], want, err_msg=name)
    bias = model.ernie.layers[1].mlp.moe_statics.e_score_correction_bias.numpy()
    assert np.abs(bias).max() > 0  # the routing bias is in the model, not dropped
    assert got_cfg.moe_norm_min == 1e-12 and got_cfg.rope_theta == 10000.0


@pytest.mark.parametrize("strict", [True, False])
def test_correction_bias_is_never_dropped_silently(tmp_path, strict):
    # A config that says moe_use_aux_free = false next to weights that carry the bias: refused by
    # name with strict=False too (dropping the bias changes the expert choice).
    d, _, _ = write_pf_moe(tmp_path, config={**PF_MOE_CONFIG, "moe_use_aux_free": False})
    with pytest.raises(
        ValueError,
        match=r"model\.layers\.1\.mlp\.moe_statics\.e_score_correction_bias.*"
        r"moe_use_aux_free = false",
    ):
        load_checkpoint(d, strict=strict)


@pytest.mark.parametrize("aux_free", [True, False])
def test_old_moe_mtp_block_checkpoint_is_refused_by_name(tmp_path, aux_free):
    # What fd_mtp wrote before issue 17: an MoE MTP block although moe_layer_start_index = 1.
    cfg = tiny_config(moe_num_experts=4, moe_use_aux_free=aux_free)
    moe_mtp = tiny_config(moe_num_experts=4, moe_use_aux_free=aux_free, moe_layer_start_index=0)
    old = random_weights(cfg, seed=2, mtp=False)
    old.update(
        {
            k: v
            for k, v in random_weights(moe_mtp, seed=2, mtp=True).items()
            if k.startswith("ernie.mtp_")
        }
    )
    d = save_checkpoint(tmp_path, cfg, old)
    if aux_free:  # the block's routing bias has no parameter: refused whatever strict says
        for strict in (True, False):
            with pytest.raises(
                ValueError,
                match=r"correction bias.*ernie\.mtp_block\.0\.mlp\.moe_statics"
                r"\.e_score_correction_bias.*no parameter",
            ):
                load_checkpoint(d, strict=strict)
        return
    with pytest.raises(ValueError, match=r"unexpected.*ernie\.mtp_block\.0\.mlp\.experts"):
        load_checkpoint(d)
    with pytest.warns(UserWarning, match=r"unexpected.*mtp_block\.0\.mlp\.experts"):
        with pytest.raises(ValueError, match=r"missing.*ernie\.mtp_block\.0\.mlp\.gate_proj"):
            load_checkpoint(d, strict=False)


# --------------------------------------------------------------------------- item 3
def test_defaults_of_fields_missing_from_config_json():
    base = {
        "vocab_size": 1000,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 2,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    }
    c = ErnieConfig.from_dict(base)
    # the released ERNIE-4.5 configs' values (0.3B: hidden / heads = 64, head_dim 128)
    assert (c.head_dim, c.rope_theta, c.rms_norm_eps) == (128, 500000.0, 1e-5)
    assert c.moe_use_aux_free is True
    assert ErnieConfig.from_dict({**base, "head_dim": None}).head_dim == 64  # explicit null
    assert ErnieConfig.from_dict({**base, "head_dim": 96}).head_dim == 96
    # a saved config always carries head_dim, so it reads back the same
    small = tiny_config()
    assert ErnieConfig.from_dict(json.loads(json.dumps(small.to_dict()))).head_dim == 16


# --------------------------------------------------------------------------- item 4
@pytest.mark.parametrize("moe", [False, True])
def test_torch_layout_round_trip(tmp_path, moe):
    cfg = tiny_config(**({"moe_num_experts": 4} if moe else {}))
    weights = random_weights(cfg, seed=5)
    d = save_checkpoint(tmp_path, cfg, weights, layout="torch")
    with SafetensorsCheckpoint.from_dir(d) as t:
        names = set(t)
        assert all(n.startswith("model.") or n == "lm_head.weight" for n in names)
        q = "model.layers.0.self_attn.k_proj.weight"
        assert t.shape(q) == tuple(weights["ernie" + q[len("model") :]].shape[::-1])
    model, mtp, _ = load_checkpoint(d)
    params = all_params(model, mtp)
    for name, want in weights.items():
        np.testing.assert_array_equal(params[name], want, err_msg=name)


def test_config_dtype_says_what_the_tensors_are(tmp_path):
    cfg = tiny_config()
    d = save_checkpoint(tmp_path, cfg, random_weights(cfg, seed=1), dtype="bfloat16")
    saved = json.loads((d / "config.json").read_text())
    assert saved["dtype"] == saved["torch_dtype"] == "bfloat16"
    with SafetensorsCheckpoint.from_dir(d) as t:
        assert {t.dtype(n) for n in t} == {"BF16"}
    with pytest.raises(ValueError, match="layout"):
        save_checkpoint(tmp_path, cfg, {}, layout="hf")


def test_write_random_checkpoint_without_mtp_says_so(tmp_path):
    d = write_random_checkpoint(tmp_path, seed=1, with_mtp=False)
    assert json.loads((d / "config.json").read_text())["num_nextn_predict_layers"] == 0
    with SafetensorsCheckpoint.from_dir(d) as t:
        assert not any("mtp" in n for n in t)


def test_demo_checkpoint_is_saved_in_paddleformers_layout():
    from fd_mtp.assets import default_model_path

    d = default_model_path()
    saved = json.loads((d / "config.json").read_text())
    cfg = ErnieConfig.from_dict(saved)
    with SafetensorsCheckpoint.from_dir(d) as t:
        names, dtypes = set(t), {t.dtype(n) for n in t}
        k = "model.layers.0.self_attn.k_proj.weight"
        kv = cfg.num_key_value_heads * cfg.head_dim
        assert t.shape(k) == (kv, cfg.hidden_size)  # [out, in]
    assert all(n.startswith("model.") for n in names)
    want = to_torch_layout({n: np.zeros(s) for n, s in state_dict_names(cfg, mtp=True).items()})
    assert names == set(want)
    # float32 tensors (the trainer's float32 export) and a config that says float32
    assert dtypes == {"F32"} and saved["dtype"] == saved["torch_dtype"] == "float32"
    info = json.loads((d / "train_info.json").read_text())
    assert info["weights_dtype"] == "float32"
