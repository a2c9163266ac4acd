"""The native forward (fd_mtp.model.native: one fd_mtp.ops.decoder_layer call per dense layer) is
the default, generates the eager path's greedy tokens, keeps its logits within the float32 error
bound of the float64 truth, and hands every step it does not cover to the eager code.

The layers' numerics (hidden states and KV caches against the float64 truth, within the
probabilistic float32 bound of tests/tolerances.py) are tested in tests/model/test_ernie.py, whose
paged tests run on both forwards; the kernel itself in tests/ops/test_decoder_layer.py."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from model_util import MTP2, PagedHarness, forward64, generate_tokens, make_models
from tolerances import Float32Noise, assert_within, matmul_error_bound

import fd_mtp
from fd_mtp.demo import MODES
from fd_mtp.engine.sampling_params import SamplingParams
from fd_mtp.model.attention import PagedAttentionCPU
from fd_mtp.model.native import NativeForward
from fd_mtp.testing import write_random_checkpoint


def test_native_is_the_default():
    llm = fd_mtp.LLM(max_num_seqs=1)
    assert llm.forward_mode == "native"
    assert isinstance(llm.runner.model._compiled, NativeForward)
    eager = fd_mtp.LLM(max_num_seqs=1, forward="eager")
    assert eager.runner.model._compiled is None


@pytest.mark.parametrize("spec", [None, MTP2], ids=["plain", "mtp_k2"])
@pytest.mark.parametrize("which", ["dense", "moe"])
def test_native_generates_the_eager_tokens(which, spec, dense_ckpt, moe_ckpt):
    ckpt = dense_ckpt if which == "dense" else moe_ckpt
    _, eager = generate_tokens(ckpt, "eager", spec)
    llm, native = generate_tokens(ckpt, None, spec)
    assert native == eager
    forward = llm.runner.model._compiled
    assert forward.calls > 0  # the kernel ran (not only fallbacks)
    if which == "moe":  # MoE layers run their eager code inside a native step
        assert forward.eager_layers > 0
    if spec is not None:
        assert llm.runner.proposer.model._compiled.calls > 0


def test_demo_model_native_equals_eager():
    """The shipped demo model, batch 3, plain, MTP K = 3 and hybrid (prefill chunks, decodes,
    multi-token verification)."""
    prompts = ["def read_config(path):\n", "import os\n", "class Cache:\n    def __init__"]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    for spec in (MODES["plain"], MODES["mtp_k3"], MODES["hybrid_k3"]):
        outs = {}
        for forward in ("eager", "native"):
            llm = fd_mtp.LLM(max_num_seqs=3, speculative_config=spec, forward=forward)
            outs[forward] = [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        assert outs["native"] == outs["eager"], spec


def test_logits_within_the_float32_bound_of_the_truth():
    """Prefill then decode through the native forward: the logits of the last token of each
    request within the float32 error bound of the float64 truth (forward64's samples through the
    lm_head in float64), as the eager forward's are."""
    with paddle.no_grad():
        cfg, model, _ = make_models(seed=5)
        seqs = [list(range(3, 20)), [7, 9, 11, 13], list(range(40, 61))]
        got = {}
        for forward in ("eager", "native"):
            model.native_forward(forward == "native")
            h = PagedHarness(cfg, model, block_size=4, num_blocks=64, max_blocks=16, seed=1)
            h.step({s: seq[:-1] for s, seq in enumerate(seqs)})
            last = h.step({s: seq[-1:] for s, seq in enumerate(seqs)})
            hidden = np.concatenate([last[s] for s in range(len(seqs))])
            got[forward] = model.compute_logits(paddle.to_tensor(hidden)).numpy()
            if forward == "native":
                assert model._compiled.calls == 2
        head = model.lm_head.weight.numpy().astype(np.float64)  # [H, V]
        for s, seq in enumerate(seqs):
            hidden64 = forward64(model, seq)[0][:, -1]  # [K + 1, H]
            truth, bound = Float32Noise.bound(hidden64 @ head)  # [K + 1, V]
            hidden_truth = hidden64[0:1]
            bound = bound + matmul_error_bound(hidden_truth, head)[0]
            for forward, logits in got.items():
                assert_within(logits[s], truth, bound, f"{forward} logits of request {s}")


def test_switches():
    """native_forward / compile_forward share the model's one forward slot; False is eager."""
    _, model, mtp = make_models(seed=2)
    assert model._compiled is None
    n = model.native_forward()
    assert isinstance(n, NativeForward) and model.native_forward() is n
    assert model.compile_forward() is not n and model._compiled is not n
    assert model.native_forward(False) is None and model._compiled is None
    assert isinstance(mtp.native_forward(), NativeForward) and mtp._compiled.is_mtp


def test_steps_it_does_not_cover_run_eagerly():
    """More tokens than max_tokens, the Paddle-ops attention backend (use_kernel=False) and
    float64 caches are counted as fallbacks and give the eager outputs bit for bit (they are the
    eager code)."""
    with paddle.no_grad():
        cfg, model, _ = make_models(seed=6)
        seq = list(range(3, 40))
        outs = {}
        for forward in ("eager", "native"):
            model.native_forward(forward == "native")
            if forward == "native":
                model._compiled.max_tokens = 8
            h = PagedHarness(cfg, model, block_size=4, num_blocks=64, max_blocks=16, seed=1)
            outs[forward] = h.step({0: seq})[0]
        np.testing.assert_array_equal(outs["native"], outs["eager"])
        assert model._compiled.fallbacks == 1 and model._compiled.calls == 0
        model.attn_backend = PagedAttentionCPU(use_kernel=False)
        h = PagedHarness(cfg, model, block_size=4, num_blocks=64, max_blocks=16, seed=1)
        h.step({0: seq[:4]})
        assert model._compiled.fallbacks == 2


def test_biased_layers_run_their_eager_code(tmp_path):
    """``use_bias``: the kernel has no bias inputs, so those layers run eagerly inside the native
    step (``eager_layers``), with the eager tokens."""
    ckpt = write_random_checkpoint(tmp_path, seed=8, use_bias=True)
    _, eager = generate_tokens(ckpt, "eager", batch=2)
    llm, native = generate_tokens(ckpt, "native", batch=2)
    assert native == eager
    forward = llm.runner.model._compiled
    assert forward.calls > 0 and forward.eager_layers == forward.calls * len(forward.layers)


def test_tensor_parallel_reason():
    class _TP:
        active = True
        world_size = 2

    _, model, _ = make_models(seed=2)
    model.__dict__["tp"] = _TP()
    try:
        forward = NativeForward(model)
        assert not forward.supported and "tensor parallelism" in forward.reason
    finally:
        model.__dict__["tp"] = None
