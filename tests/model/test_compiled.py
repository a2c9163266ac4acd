"""The compiled forward (fd_mtp.model.compiled): the same outputs as the eager forward, bit for bit.

The program runs the eager path's kernels in the same order (the layers' own code traced by
paddle.jit.to_static), so hidden states, logits, KV-cache contents and greedy tokens are compared
exactly. Steps and models it cannot cover run eagerly (counted in ``fallbacks``)."""

from __future__ import annotations

import numpy as np
import pytest
from model_util import MTP2, generate_tokens

import fd_mtp
from fd_mtp.engine.sampling_params import SamplingParams
from fd_mtp.testing import write_random_checkpoint


@pytest.mark.parametrize("spec", [None, MTP2], ids=["plain", "mtp_k2"])
@pytest.mark.parametrize("which", ["dense", "moe"])
def test_static_generates_the_eager_tokens(which, spec, dense_ckpt, moe_ckpt):
    ckpt = dense_ckpt if which == "dense" else moe_ckpt
    _, eager = generate_tokens(ckpt, "eager", spec)
    llm, static = generate_tokens(ckpt, "static", spec)
    assert static == eager
    compiled = llm.runner.model._compiled
    assert compiled is not None and compiled.calls > 0  # the program ran (not only fallbacks)
    if spec is not None:
        mtp = llm.runner.proposer.model._compiled
        assert mtp is not None and mtp.calls > 0


def test_demo_model_static_equals_eager():
    """The shipped demo model, batch 2, MTP K = 3 (prefill chunks and decodes)."""
    spec = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}
    prompts = ["def read_config(path):\n", "import os\n"]
    params = SamplingParams(temperature=0, max_tokens=32)
    outs = {}
    for forward in ("eager", "static"):
        llm = fd_mtp.LLM(max_num_seqs=2, speculative_config=spec, forward=forward)
        outs[forward] = [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    assert outs["static"] == outs["eager"]


def _step_inputs(model, tokens_per_request, cached, block_size=16, seed=0):
    """A packed step over fresh caches: request b feeds ``tokens_per_request[b]`` tokens after
    ``cached[b]`` cached positions (cache contents random), contiguous blocks."""
    import paddle

    from fd_mtp.model.attention import ForwardMeta, allocate_kv_caches

    rng = np.random.default_rng(seed)
    cfg = model.config
    q = np.asarray(tokens_per_request, np.int32)
    dec = np.asarray(cached, np.int32)
    blocks_per = -(-(q + dec) // block_size)
    nb = int(blocks_per.max())
    bt = np.full((len(q), nb), -1, np.int32)
    nxt = 0
    for b, n in enumerate(blocks_per):
        bt[b, :n] = np.arange(nxt, nxt + n)
        nxt += n
    caches = allocate_kv_caches(cfg, cfg.num_hidden_layers + 1, nxt, block_size)
    for kc, vc in caches:
        kc.set_value(rng.standard_normal(kc.shape).astype(np.float32))
        vc.set_value(rng.standard_normal(vc.shape).astype(np.float32))
    cu = np.concatenate([[0], np.cumsum(q)]).astype(np.int32)
    t = int(cu[-1])
    meta = ForwardMeta(
        ids_remove_padding=paddle.to_tensor(rng.integers(0, cfg.vocab_size, t)),
        cu_seqlens_q=paddle.to_tensor(cu),
        batch_id_per_token=paddle.to_tensor(np.repeat(np.arange(len(q)), q).astype(np.int32)),
        seq_lens_this_time=paddle.to_tensor(q),
        seq_lens_encoder=paddle.to_tensor(np.where(dec == 0, q, 0).astype(np.int32)),
        seq_lens_decoder=paddle.to_tensor(dec),
        block_tables=paddle.to_tensor(bt),
        caches=caches,
        block_size=block_size,
    )
    return meta


@pytest.mark.parametrize(
    "tokens,cached",
    [([1], [0]), ([1, 1, 1], [5, 17, 40]), ([4, 0, 3, 1], [9, 0, 30, 63]), ([23, 1], [0, 70])],
)
def test_forward_and_caches_bit_for_bit(dense_ckpt, tokens, cached):
    import paddle

    from fd_mtp.model.loader import load_checkpoint

    model, mtp, _ = load_checkpoint(dense_ckpt)
    results = []
    for enabled in (False, True):
        model.compile_forward(enabled)
        mtp.compile_forward(enabled)
        meta = _step_inputs(model, tokens, cached)
        with paddle.no_grad():
            h = model(meta.ids_remove_padding, meta)
            logits = model.compute_logits(h)
            meta2 = _step_inputs(model, tokens, cached, seed=1)
            prev = paddle.to_tensor(
                np.random.default_rng(2).standard_normal((h.shape[0], h.shape[1]), np.float32)
            )
            g = mtp(meta2.ids_remove_padding, prev, meta2)
        caches = [c.numpy() for kv in meta.caches + meta2.caches for c in kv]
        results.append((h.numpy(), logits.numpy(), g.numpy(), caches))
    (h0, l0, g0, c0), (h1, l1, g1, c1) = results
    np.testing.assert_array_equal(h1, h0)
    np.testing.assert_array_equal(l1, l0)
    np.testing.assert_array_equal(g1, g0)
    for a, b in zip(c1, c0):
        np.testing.assert_array_equal(a, b)
    assert model._compiled.calls == 1 and mtp._compiled.calls == 1


def test_unsupported_models_run_eagerly(tmp_path):
    """More than 8 experts are routed per expert on the host: the program refuses the model (with
    its reason) and every step runs eagerly, with the same tokens."""
    ckpt = write_random_checkpoint(tmp_path, seed=5, moe_num_experts=12, moe_intermediate_size=16)
    _, eager = generate_tokens(ckpt, "eager", batch=2)
    llm, static = generate_tokens(ckpt, "static", batch=2)
    assert static == eager
    compiled = llm.runner.model._compiled
    assert not compiled.supported and "12 experts" in compiled.reason
    assert compiled.calls == 0 and compiled.fallbacks > 0


def test_compile_forward_switch(dense_ckpt):
    from fd_mtp.model.loader import load_checkpoint

    model, _, _ = load_checkpoint(dense_ckpt)
    assert model._compiled is None
    c = model.compile_forward()
    assert model._compiled is c and model.compile_forward() is c  # one program per model
    assert model.compile_forward(False) is None and model._compiled is None


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"forward": "jit"}, "forward"),
        ({"forward": None}, "forward"),
        ({"cpu_threads": 0}, "cpu_threads"),
        ({"cpu_threads": "2"}, "cpu_threads"),
    ],
)
def test_bad_options_are_named(dense_ckpt, kwargs, name):
    with pytest.raises(ValueError, match=name):
        fd_mtp.LLM(dense_ckpt, max_num_seqs=1, **kwargs)
