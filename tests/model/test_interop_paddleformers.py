"""Interop with paddleformers 1.2 (issue 17): checkpoints saved by paddleformers load in fd_mtp and
the reverse, dense and MoE (MTP block, router correction bias, ``moe_layer_start_index`` 1), with
the same logits; the demo checkpoint loads in paddleformers; the tokenizers agree on special tokens.

Skipped when paddleformers is not installed. It is not in requirements.txt: paddleformers 1.2.0
needs fast_dataindex (Linux), which pins numpy <= 1.26.4, against the project's numpy 2.x pin.
``make test`` (after the main suite, which leaves this file out) and ``make test-interop`` build a
second environment from requirements-interop.txt (paddlepaddle 3.3.1 + numpy 1.26.4 +
paddleformers 1.2.0) and run this file there with FD_MTP_REQUIRE_PADDLEFORMERS=1, so a missing
paddleformers fails instead of skipping.

Everything is float32 and local: random tiny models, no model hub.

Two CPU substitutions, both named where they happen:

* paddleformers' RMSNorm calls ``fused_rms_norm_ext``, which has no CPU kernel in Paddle 3.3: the
  config switch ``fuse_rms_norm = False`` (paddleformers' own unfused path) is set before loading.
* paddleformers' MoE layer (``MOEAllGatherLayerV2``) routes with ``expand_modality_expert_id`` and
  ``moe_gate_dispatch_partial_nosoftmaxtopk``, which have no CPU kernel: only that routing step
  is replaced (:func:`_pf_routed_forward`), written from paddleformers' own maths
  (``fused_gate_logits_process_fused`` + the combine): ``p = gate.act(x @ gate.weight)``
  (softmax), experts = ``topk(p + e_score_correction_bias[0], k)``, weights = ``p`` at the chosen
  experts normalised by ``max(sum, 1e-12)`` (``norm_gate_logits``), output = the weighted sum of
  paddleformers' own expert modules + its shared experts. Gate, experts, attention, norms, rotary
  embedding and lm_head are paddleformers' modules, unchanged.

Tolerance (1e-4, absolute, on float32 logits): two float32 implementations of one function differ
by rounding only. Each rounding is at most 2^-24 relative (6e-8); along one logit the error of a
length-n reduction grows like sqrt(n) when roundings are independent, and the longest chain here
is about 2 layers x (attention over H=64 + MLP over I=128 + the lm_head over H=64) ~ 600 roundings,
so the relative error is about sqrt(600) x 6e-8 ~ 1.5e-6, on logits of size |z| <= ~10: ~1.5e-5.
1e-4 leaves a factor ~6 for correlated roundings, and is far below the effect of any real mismatch
(a dropped routing bias moves these logits by > 1e-1, checked below; a transposed square weight by
O(1)). The measured maxima are printed (``-s``).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import paddle
import pytest

if os.environ.get("FD_MTP_REQUIRE_PADDLEFORMERS") == "1":  # make test / test-interop: never skip
    import paddleformers as pf
else:
    pf = pytest.importorskip(
        "paddleformers",
        reason="paddleformers is not installed (1.2.0 pins numpy <= 1.26.4 through "
        "fast_dataindex, so it is not in requirements.txt: `make test` runs this file "
        "in its own environment, requirements-interop.txt)",
    )

from paddleformers.transformers import (  # noqa: E402
    AutoConfig,
    AutoTokenizer,
    Ernie4_5_MoeConfig,
    Ernie4_5_MoeForCausalLM,
    Ernie4_5Config,
    Ernie4_5ForCausalLM,
)
from paddleformers.transformers.ernie4_5_moe import modeling as pf_moe  # noqa: E402
from paddleformers.transformers.masking_utils import (  # noqa: E402
    create_causal_mask_and_row_indices,
)

from fd_mtp.assets import DEMO_MODEL  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.model.tokenizer import SentencePieceTokenizer  # noqa: E402
from fd_mtp.testing import TINY_CONFIG, TINY_MOE, write_random_checkpoint  # noqa: E402

TOL = 1e-4
IDS = [5, 17, 42, 99, 3, 250, 7, 7, 120, 64, 1, 288]
#: fd_mtp.testing's tiny model (TINY_CONFIG; MoE: TINY_MOE, 4 experts) in paddleformers' configs:
#: the dense one without the MTP block, the tie given per test, paddleformers' default dtype; the
#: head size given and a shorter context.
TINY = {
    k: v
    for k, v in TINY_CONFIG.items()
    if k not in ("num_nextn_predict_layers", "tie_word_embeddings", "dtype")
}
TINY.update(head_dim=16, max_position_embeddings=256)
MOE = dict(TINY_MOE, moe_num_experts=4, num_nextn_predict_layers=1)


# --------------------------------------------------------------------------- paddleformers side
def _pf_routed_forward(self, input, token_type_ids=None, use_dense_expert=False):
    """Replaces ``Ernie4_5_MoeSparseMoeBlock.forward`` (its routing ops have no CPU kernel); see
    the module docstring. Returns what the original returns: (output, weights, loss, logits)."""
    shape = input.shape
    x = input.reshape([-1, shape[-1]])
    logits, _, router_loss = self.gate(x, transform_weight=False)
    prob = self.gate.act(logits)
    score = prob
    if self.use_correction_bias:
        score = prob + self.moe_statics.e_score_correction_bias[0].detach()
    _, chosen = score.topk(k=self.k, axis=-1)
    weight = paddle.take_along_axis(prob, chosen, axis=-1)
    if self.gate.norm_gate_logits:
        weight = weight / paddle.clip(weight.sum(-1, keepdim=True), min=1e-12)
    out = paddle.zeros(x.shape, dtype="float32")
    for e, expert in enumerate(self.experts):
        w_e = ((chosen == e).astype("float32") * weight).sum(-1, keepdim=True)  # [T, 1]
        out = out + expert(x).astype("float32") * w_e
    if self.shared_experts is not None:
        out = out + self.shared_experts(x).astype("float32")
    return out.astype(input.dtype).reshape(shape), weight, router_loss, logits


@pytest.fixture
def pf_routing(monkeypatch):
    monkeypatch.setattr(pf_moe.Ernie4_5_MoeSparseMoeBlock, "forward", _pf_routed_forward)


def pf_load(cls, path):
    config = AutoConfig.from_pretrained(str(path))
    config.fuse_rms_norm = False  # fused_rms_norm_ext has no CPU kernel
    model = cls.from_pretrained(str(path), config=config, dtype="float32")
    model.eval()
    return model


def pf_randomize(model, seed):
    """paddleformers initialises norms to 1 and the correction bias to 0: make them random too,
    so that a norm or bias loaded wrongly (or not at all) shows in the logits."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        if "norm" in name:
            p.set_value((1 + 0.2 * rng.standard_normal(p.shape)).astype("float32"))
        elif "e_score_correction_bias" in name:
            p.set_value((0.1 * rng.standard_normal(p.shape)).astype("float32"))


def pf_logits(model, ids):
    with paddle.no_grad():
        return model(input_ids=paddle.to_tensor([ids])).logits[0].astype("float32").numpy()


def pf_mtp_logits(model, ids, previous_hidden):
    """paddleformers' MTP block (its own modules) on embeddings of ``ids`` and the given previous
    hidden states (its MTP forward is training-only; this is that path's maths at depth 0)."""
    m = model.model
    with paddle.no_grad():
        e = m.embed_tokens(paddle.to_tensor([ids]))
        h = paddle.to_tensor(previous_hidden[None])
        x = m.mtp_linear_proj[0](paddle.concat([m.mtp_emb_norm[0](e), m.mtp_hidden_norm[0](h)], -1))
        pos = paddle.arange(len(ids), dtype="int64")[None]
        mask, rows = create_causal_mask_and_row_indices(  # paddleformers' own causal mask
            config=m.config,
            inputs_embeds=x,
            batch_size=1,
            seq_length=len(ids),
            cache_length=0,
            prepare_decoder_attention_mask=m._prepare_decoder_attention_mask,
        )
        out = m.mtp_block[0](x, mask, rows, pos, m.rotary_emb(x, pos))
        out = out[0] if isinstance(out, (tuple, list)) else out
        return model.lm_head(m.norm(out))[0].astype("float32").numpy()


# --------------------------------------------------------------------------- fd_mtp side
def fd_logits(model, ids):
    with paddle.no_grad():
        h = model.dense_forward(paddle.to_tensor(ids, dtype="int64"))
        return model.compute_logits(h).numpy(), h.numpy()


def fd_mtp_logits(mtp, ids, previous_hidden):
    with paddle.no_grad():
        h = mtp.dense_forward(
            paddle.to_tensor(ids, dtype="int64"), paddle.to_tensor(previous_hidden)
        )
        return mtp.compute_logits(h).numpy()


def assert_logits_close(got, want, what):
    diff = float(np.abs(got - want).max())
    agree = float((got.argmax(-1) == want.argmax(-1)).mean())
    print(f"{what}: max |logit diff| {diff:.2e}, argmax agreement {agree:.0%}")
    assert diff <= TOL, (what, diff)
    assert agree == 1.0, (what, agree)


# --------------------------------------------------------------------------- dense
@pytest.mark.parametrize("tie", [True, False])
def test_dense_saved_by_paddleformers_loads_in_fd_mtp(tmp_path, tie):
    paddle.seed(1)
    pfm = Ernie4_5ForCausalLM(Ernie4_5Config(**TINY, tie_word_embeddings=tie, fuse_rms_norm=False))
    pf_randomize(pfm, 1)
    pfm.eval()
    pfm.save_pretrained(str(tmp_path))
    model, mtp, cfg = load_checkpoint(tmp_path)  # strict: every tensor placed, none left over
    assert mtp is None and cfg.head_dim == 16
    got, _ = fd_logits(model, IDS)
    assert_logits_close(got, pf_logits(pfm, IDS), f"dense pf->fd tie={tie}")


@pytest.mark.parametrize("tie", [True, False])
def test_dense_saved_by_fd_mtp_loads_in_paddleformers(tmp_path, tie):
    d = write_random_checkpoint(
        tmp_path, seed=3, with_mtp=False, layout="torch", tie_word_embeddings=tie
    )
    model, _, _ = load_checkpoint(d)
    got, _ = fd_logits(model, IDS)
    assert_logits_close(got, pf_logits(pf_load(Ernie4_5ForCausalLM, d), IDS), f"dense fd->pf {tie}")


def demo_copy(tmp_path):
    """The demo checkpoint copied out of the package: paddleformers' from_pretrained writes a
    ``flex-ckpt.auto_generated.metadata`` file next to the weights it loads."""
    for f in DEMO_MODEL.iterdir():
        if f.is_file():
            shutil.copyfile(f, tmp_path / f.name)
    return tmp_path


def test_demo_checkpoint_loads_in_paddleformers(tmp_path):
    tok = SentencePieceTokenizer(DEMO_MODEL)
    ids = tok.encode("import os\n\ndef main(argv):\n    return os.path.join(")
    model, _, _ = load_checkpoint(DEMO_MODEL)
    got, _ = fd_logits(model, ids)
    pfm = pf_load(Ernie4_5ForCausalLM, demo_copy(tmp_path))
    assert_logits_close(got, pf_logits(pfm, ids), "demo")


# --------------------------------------------------------------------------- MoE + MTP
def test_moe_saved_by_paddleformers_loads_in_fd_mtp(tmp_path, pf_routing):
    paddle.seed(2)
    pfm = Ernie4_5_MoeForCausalLM(
        Ernie4_5_MoeConfig(**TINY, **MOE, tie_word_embeddings=False, fuse_rms_norm=False)
    )
    pf_randomize(pfm, 2)
    pfm.eval()
    pfm.save_pretrained(str(tmp_path))
    model, mtp, cfg = load_checkpoint(tmp_path)
    assert cfg.moe_use_aux_free and mtp is not None and not mtp.mtp_block.is_moe
    assert model.ernie.layers[1].is_moe and not model.ernie.layers[0].is_moe
    got, hidden = fd_logits(model, IDS)
    assert_logits_close(got, pf_logits(pfm, IDS), "moe pf->fd main")
    # the MTP block on the main model's hidden states and the next tokens
    nxt = IDS[1:] + [0]
    assert_logits_close(
        fd_mtp_logits(mtp, nxt, hidden), pf_mtp_logits(pfm, nxt, hidden), "moe pf->fd MTP"
    )
    # the routing bias matters here: without it the logits move far beyond the tolerance
    bias = model.ernie.layers[1].mlp.moe_statics.e_score_correction_bias
    bias.set_value(paddle.zeros_like(bias))
    moved = float(np.abs(fd_logits(model, IDS)[0] - got).max())
    print(f"moe: logits move by {moved:.2e} without the correction bias")
    assert moved > 100 * TOL


def test_moe_saved_by_fd_mtp_loads_in_paddleformers(tmp_path, pf_routing):
    d = write_random_checkpoint(
        tmp_path, seed=4, moe_num_experts=4, tie_word_embeddings=False, layout="torch"
    )
    model, mtp, cfg = load_checkpoint(d)
    assert cfg.moe_layer_start_index == 1 and cfg.moe_use_aux_free and not mtp.mtp_block.is_moe
    pfm = pf_load(Ernie4_5_MoeForCausalLM, d)
    got, hidden = fd_logits(model, IDS)
    assert_logits_close(got, pf_logits(pfm, IDS), "moe fd->pf main")
    nxt = IDS[1:] + [0]
    assert_logits_close(
        fd_mtp_logits(mtp, nxt, hidden), pf_mtp_logits(pfm, nxt, hidden), "moe fd->pf MTP"
    )


# --------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize(
    "text",
    [
        "def f():\n    return 1",
        "a</s>b",
        "x <s> y",
        "<pad><pad>",
        "foo<unk>bar",
        " </s> ",
        "The JSON</s> encoder  <s>and<pad>",
        "<</s>>",
    ],
)
def test_tokenizer_matches_paddleformers_on_special_tokens(text, tmp_path):
    ours = SentencePieceTokenizer(DEMO_MODEL)
    theirs = AutoTokenizer.from_pretrained(str(demo_copy(tmp_path)), local_files_only=True)
    ids = theirs.encode(text, add_special_tokens=False)
    assert ours.encode(text) == ids
    assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids)
    assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
