"""ERNIE-4.5 model: packed paged forward == dense no-cache oracle; MTP block; config; bad input."""

from __future__ import annotations

import json

import numpy as np
import paddle
import pytest
from model_util import (
    MOE,
    TINY,
    Forward64,
    PagedHarness,
    assert_matches_reference,
    dense_reference,
    forward64,
    make_models,
    mtp_forward64,
    reference,
)
from tolerances import (
    Float32Noise,
    U,
    assert_within,
    gamma,
    matmul_error_bound,
    rope_error_bound,
    rope_truth64,
    softmax_perturbation_rel,
    softmax_rounding_rel,
)

from fd_mtp.model import ErnieConfig
from fd_mtp.model.attention import (
    ForwardMeta,
    PagedAttentionCPU,
    allocate_kv_caches,
    kv_cache_shape,
)
from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP, state_dict_names


@pytest.fixture(
    params=[
        (kind, forward) for forward in ("eager", "native") for kind in ("dense", "moe", "moe_mtp")
    ],
    ids=lambda p: "-".join(p),
)
def models(request):
    # "moe": moe_layer_start_index 1 (as the released MoE models): layer 0 and the MTP block dense.
    # "moe_mtp": start index 0, so the MTP block (layer index 0 for the MoE rule) is MoE too.
    # forward "native": the dense layers run as fd_mtp.ops.decoder_layer (fd_mtp.model.native),
    # held to the same float64 truth and float32 error bound as the eager path.
    kind, forward = request.param
    extra = {"moe_layer_start_index": 0} if kind == "moe_mtp" else {}
    with paddle.no_grad():
        cfg, model, mtp = make_models(moe=kind != "dense", seed=3, **extra)
        if forward == "native":
            model.native_forward()
            if mtp is not None:
                mtp.native_forward()
        yield cfg, model, mtp


def dense(model, ids):
    """The dense float32 oracle's rows with their float64 truth and float32 error bound
    (model_util.Reference; slicing it slices all three)."""
    return dense_reference(model, ids)


def assert_close(got, want, what=""):
    """Paged rows ``got`` and the dense oracle's ``want`` (a Reference): two float32 code paths of
    one function, each within the probabilistic float32 error bound of the float64 truth
    (tests/tolerances.py, Float32Noise), so within twice that bound of each other."""
    assert_matches_reference(got, want, what)


def prompts(n, lengths, seed=0, vocab=300):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=length).tolist() for length in lengths[:n]]


# --------------------------------------------------------------------------- paged == dense
@pytest.mark.parametrize("block_size", [4, 16])
def test_prefill_batch_then_decode(models, block_size):
    cfg, model, _ = models
    seqs = prompts(4, [7, 1, 13, 4], seed=1)
    h = PagedHarness(cfg, model, block_size=block_size, seed=block_size)
    slots = [0, 2, 3, 5]  # slots 1 and 4 stay empty (seq_lens_this_time 0)
    out = h.step({s: seq for s, seq in zip(slots, seqs)})
    for s, seq in zip(slots, seqs):
        assert_close(out[s], dense(model, seq), f"prefill slot {s}")
    rng = np.random.default_rng(7)
    for step in range(3):
        new = {s: [int(rng.integers(3, 300))] for s in slots}
        out = h.step(new)
        for s, seq in zip(slots, seqs):
            seq.append(new[s][0])
            assert_close(out[s], dense(model, seq)[-1:], f"decode step {step} slot {s}")
    # several non-contiguous blocks per request when block_size is small
    if block_size == 4:
        assert max(len(b) for b in h.blocks) >= 4
        assert any(np.any(np.diff(b) != 1) for b in h.blocks if len(b) > 1)


def test_chunked_prefill(models):
    cfg, model, _ = models
    (seq,) = prompts(1, [11], seed=2)
    h = PagedHarness(cfg, model, block_size=4, seed=3)
    ref = dense(model, seq)
    out1 = h.step({1: seq[:6]})
    out2 = h.step({1: seq[6:]})
    assert_close(out1[1], ref[:6], "chunk 1")
    assert_close(out2[1], ref[6:], "chunk 2")
    out3 = h.step({1: [42]})
    assert_close(out3[1], dense(model, seq + [42])[-1:], "decode after chunks")


def test_mixed_prefill_chunk_and_decode_in_one_batch(models):
    cfg, model, _ = models
    a, b, c = prompts(3, [5, 9, 6], seed=4)
    h = PagedHarness(cfg, model, block_size=4, seed=5)
    h.step({0: a, 1: b[:4]})  # a: full prefill, b: first chunk
    out = h.step({0: [17], 1: b[4:], 2: c})  # a decodes, b's second chunk, c prefills
    assert_close(out[0], dense(model, a + [17])[-1:], "decode")
    assert_close(out[1], dense(model, b)[4:], "second chunk")
    assert_close(out[2], dense(model, c), "prefill")
    out = h.step({2: [5, 6, 7], 0: [18]})  # several tokens for one request (speculative-style)
    assert_close(out[2], dense(model, c + [5, 6, 7])[-3:], "multi-token decode")
    assert_close(out[0], dense(model, a + [17, 18])[-1:], "decode 2")


@pytest.mark.parametrize("seed", [0, 1])
def test_random_schedule(models, seed):
    """Random mixes of prefill chunks, single and multi-token decodes and idle slots; every
    returned row equals the oracle's row at that position."""
    cfg, model, _ = models
    rng = np.random.default_rng(100 + seed)
    bs = int(rng.choice([1, 3, 8]))
    h = PagedHarness(
        cfg, model, max_num_seqs=4, block_size=bs, num_blocks=160, max_blocks=40, seed=seed
    )
    target = [rng.integers(3, 300, size=int(rng.integers(2, 24))).tolist() for _ in range(4)]
    fed = [[] for _ in range(4)]
    for _ in range(5):
        batch = {}
        for s in range(4):
            if rng.random() < 0.25:
                continue  # idle this step
            n = int(rng.integers(1, 6))
            if len(fed[s]) >= len(target[s]):
                target[s] += rng.integers(3, 300, size=n).tolist()
            batch[s] = target[s][len(fed[s]) : len(fed[s]) + n]
        if not batch:
            continue
        out = h.step(batch)
        for s, ids in batch.items():
            start = len(fed[s])
            fed[s] += ids
            assert_close(out[s], dense(model, fed[s])[start:], f"slot {s} positions {start}..")


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_kernel_and_paddle_ops_backends_agree(models, block_size):
    """The same steps through the fused kernel (default) and the Paddle-ops path: outputs and
    caches of both within the float32 error bound of the float64 truth (so within twice it of
    each other), the kernel's equal to the dense oracle."""
    cfg, model, _ = models
    a, b, c = prompts(3, [7, 12, 5], seed=9)
    runs = {}
    for use_kernel in (True, False):
        model.attn_backend = PagedAttentionCPU(use_kernel=use_kernel)
        h = PagedHarness(cfg, model, block_size=block_size, num_blocks=64, max_blocks=24, seed=7)
        outs = [
            h.step({0: a, 1: b[:5]}),
            h.step({0: [11], 1: b[5:], 2: c}),
            h.step({0: [12, 13, 14], 2: [9]}),
        ]
        runs[use_kernel] = outs, [(k.numpy(), v.numpy()) for k, v in h.caches], h.blocks
    model.attn_backend = PagedAttentionCPU()
    (ko, kc, kblocks), (po, pc, pblocks) = runs[True], runs[False]
    assert kblocks == pblocks  # same seed: the same block ids
    seqs = {0: a + [11, 12, 13, 14], 1: b, 2: c + [9]}
    rows = [
        {0: slice(0, 7), 1: slice(0, 5)},
        {0: slice(7, 8), 1: slice(5, 12), 2: slice(0, 5)},
        {0: slice(8, 11), 2: slice(5, 6)},
    ]
    refs = {s: dense(model, seq) for s, seq in seqs.items()}
    for step, (x, y) in enumerate(zip(ko, po)):
        assert x.keys() == y.keys() == rows[step].keys()
        for s in x:
            assert_close(x[s], refs[s][rows[step][s]], f"kernel step {step} slot {s}")
            assert_close(y[s], refs[s][rows[step][s]], f"paddle ops step {step} slot {s}")
    # layer 0's k/v come straight from the embeddings through the same Paddle ops in both runs (the
    # backends differ only after the cache write): bit-equal by construction; later layers see the
    # (rounding-level) different attention outputs of the layers before: each run within the bound
    # of the truth's k (after RoPE) / v at every written slot, the unwritten slots still zero. The
    # native forward computes the kernel run's k/v in its own layer kernel (not bit-equal then).
    if model._compiled is None:
        np.testing.assert_array_equal(kc[0][0], pc[0][0])
        np.testing.assert_array_equal(kc[0][1], pc[0][1])
    kv = {s: forward64(model, seq)[1] for s, seq in seqs.items()}
    for layer, cache in enumerate(kc):
        want = [np.zeros_like(cache[0], np.float64), np.zeros_like(cache[1], np.float64)]
        bound = [np.zeros_like(w) for w in want]
        for s, seq in seqs.items():
            for j in (0, 1) if layer < cfg.num_hidden_layers else ():
                truth, bnd = Float32Noise.bound(kv[s][layer][j])  # [S, Hkv, D]
                for pos in range(len(seq)):
                    slot = (kblocks[s][pos // block_size], slice(None), pos % block_size)
                    want[j][slot], bound[j][slot] = truth[pos], bnd[pos]
        for j, name in ((0, "key"), (1, "value")):
            assert_within(kc[layer][j], want[j], bound[j], f"kernel {name} cache, layer {layer}")
            assert_within(
                pc[layer][j], want[j], bound[j], f"paddle ops {name} cache, layer {layer}"
            )
    assert_close(ko[2][0], dense(model, a + [11, 12, 13, 14])[-3:], "kernel multi-token decode")
    assert_close(ko[1][1], dense(model, b)[5:], "kernel second chunk")


def test_mqa_and_single_layer_dense_head_dim_override():
    with paddle.no_grad():
        cfg, model, _ = make_models(
            seed=9,
            num_key_value_heads=1,
            num_hidden_layers=1,
            head_dim=8,
            tie_word_embeddings=False,
        )
        assert cfg.head_dim == 8 and model.ernie.layers[0].self_attn.q_proj.weight.shape == [64, 32]
        seqs = prompts(2, [5, 3], seed=6)
        h = PagedHarness(cfg, model, block_size=2)
        out = h.step({0: seqs[0], 1: seqs[1]})
        for s in (0, 1):
            assert_close(out[s], dense(model, seqs[s]), f"slot {s}")


def test_logits(models):
    cfg, model, _ = models
    hid = paddle.to_tensor(
        np.random.default_rng(0).standard_normal((3, cfg.hidden_size)).astype(np.float32)
    )
    logits = model.compute_logits(hid)
    assert logits.dtype == paddle.float32 and logits.shape == [3, cfg.vocab_size]
    w = (
        model.embed_tokens.weight.numpy().T
        if cfg.tie_word_embeddings
        else model.lm_head.weight.numpy()
    )
    # Paddle's and numpy's float32 matmuls (different BLAS kernels): each within gamma(H) |hid| @ |w|
    # of the float64 product
    truth, bound = (
        hid.numpy().astype(np.float64) @ w.astype(np.float64),
        matmul_error_bound(hid.numpy(), w),
    )
    assert_within(logits.numpy(), truth, bound, "compute_logits")
    assert_within(hid.numpy() @ w, truth, bound, "numpy float32 matmul")


def test_untied_lm_head_has_own_weight():
    cfg, model, _ = make_models(tie_word_embeddings=False)
    assert "lm_head.weight" in model.state_dict()
    assert list(model.lm_head.weight.shape) == [cfg.hidden_size, cfg.vocab_size]
    cfg2, model2, _ = make_models()
    assert "lm_head.weight" not in model2.state_dict()
    np.testing.assert_array_equal(
        model2.lm_head.weight.numpy(), model2.embed_tokens.weight.numpy().T
    )


# --------------------------------------------------------------------------- MoE router
@pytest.mark.parametrize("experts", [6, 12])  # 12: the per-expert dispatch path of forward
def test_moe_route_matches_numpy(experts):
    with paddle.no_grad():
        cfg, model, _ = make_models(moe=True, seed=11, moe_num_experts=experts, moe_k=3)
        moe = model.ernie.layers[1].mlp
        assert model.ernie.layers[1].is_moe and not model.ernie.layers[0].is_moe
        x = np.random.default_rng(1).standard_normal((9, cfg.hidden_size)).astype(np.float32)
        bias = np.zeros((1, experts), np.float32)
        bias[0, 5] = 10.0  # expert 5 always chosen, but its weight is its plain softmax probability
        moe.moe_statics.e_score_correction_bias.set_value(paddle.to_tensor(bias))
        probs, chosen, w = moe.route(paddle.to_tensor(x))
        chosen = chosen.numpy()
        # float64 truth of the router and the float32 error of its scores: logits within
        # gamma(H) |x| @ |gate| (matmul), softmax weights within that perturbation and their own
        # rounding, + U for the bias add
        gate = moe.gate.weight.numpy()
        logits = x.astype(np.float64) @ gate.astype(np.float64)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        p_rel = softmax_perturbation_rel(matmul_error_bound(x, gate)) + softmax_rounding_rel(
            experts, (logits.max(-1, keepdims=True) - logits).max(-1, keepdims=True)
        )
        score_err = p * p_rel + U * (p + bias)
        order = np.argsort(-(p + bias), axis=-1, kind="stable")
        want_idx = order[:, :3]
        # the top-3 choice is a discrete function of float32 scores: it is the same on every CPU only
        # where every chosen score's lower bound exceeds every other score's upper bound; the inputs
        # are fixed, so this holds for all tokens (else the exact comparison below would be a coin flip)
        low = np.take_along_axis(p + bias - score_err, want_idx, -1).min(-1)
        high = p + bias + score_err
        np.put_along_axis(high, want_idx, -np.inf, -1)
        assert np.all(low > high.max(-1)), "router near-tie in the test input"
        assert (chosen[:, 0] == 5).all()
        np.testing.assert_array_equal(np.sort(chosen, -1), np.sort(want_idx, -1))
        # renormalised weights: p's relative error twice (numerator, sum) + the k-term sum and division
        sel = np.take_along_axis(p, chosen, -1)
        sel_rel = np.take_along_axis(p_rel, chosen, -1)
        w_bound = (
            sel
            / sel.sum(-1, keepdims=True)
            * (sel_rel + sel_rel.max(-1, keepdims=True) + gamma(3 + 1))
        )
        assert_within(w.numpy(), sel / sel.sum(-1, keepdims=True), w_bound, "route weights")
        # sum of k weights w_j = fl(p_j / fl(sum p)), summed again in float32: gamma(2k + 1) of 1
        assert_within(w.numpy().sum(-1), np.ones(9), gamma(2 * 3 + 1), "route weights sum")
        # full layer: explicit per-token sum of experts (single-row expert matmuls, numpy float32
        # accumulation) and the layer's own combine: both within the float32 bound of the truth
        out = moe(paddle.to_tensor(x)).numpy()
        want = moe.shared_experts(paddle.to_tensor(x)).numpy()
        for t in range(9):
            for j in range(3):
                e = int(chosen[t, j])
                want[t] += (
                    w.numpy()[t, j] * moe.experts[e](paddle.to_tensor(x[t : t + 1])).numpy()[0]
                )
        noise = Float32Noise()
        ref = reference(want, Forward64(cfg, noise).moe(moe, noise.lift(x)))
        assert_matches_reference(out, ref, "MoE layer")
        assert (experts > moe.dense_combine_max_experts) == (experts == 12)


def test_moe_layer_selection():
    c = ErnieConfig(
        **{
            **TINY,
            **MOE,
            "num_hidden_layers": 6,
            "moe_layer_start_index": 1,
            "moe_layer_interval": 2,
            "moe_layer_end_index": 4,
        }
    )
    assert [c.is_moe_layer(i) for i in range(6)] == [False, True, False, True, False, False]
    assert c.is_moe_layer(6) is False and c.is_moe_layer(7) is False  # past the end index
    assert c.mtp_block_is_moe is False  # the MTP block is layer index 0 for the MoE rule
    names = state_dict_names(c, mtp=True)
    assert "ernie.layers.3.mlp.experts.3.down_proj.weight" in names
    assert (
        "ernie.layers.2.mlp.gate_proj.weight" in names
        and "ernie.layers.2.mlp.gate.weight" not in names
    )
    assert "ernie.mtp_block.0.mlp.gate_proj.weight" in names  # dense, like layer 0
    assert ErnieConfig(**{**TINY, **MOE, "moe_layer_start_index": 0}).mtp_block_is_moe
    assert not ErnieConfig(**{**TINY, **MOE, "moe_layer_interval": 2}).mtp_block_is_moe
    dense = ErnieConfig(**TINY)
    assert not any(dense.is_moe_layer(i) for i in range(4))
    no_bias = ErnieConfig(**{**TINY, **MOE, "moe_use_aux_free": False})
    assert not any("moe_statics" in k for k in state_dict_names(no_bias))
    assert "ernie.layers.1.mlp.gate.weight" in state_dict_names(no_bias)
    model = Ernie4_5ForCausalLM(no_bias)
    assert set(model.state_dict()) == set(state_dict_names(no_bias, mtp=False))


# --------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "moe,tie,bias", [(False, True, False), (True, False, False), (True, True, True)]
)
def test_state_dict_names_equal_parameters(moe, tie, bias):
    cfg = ErnieConfig(
        **{**TINY, **(MOE if moe else {}), "tie_word_embeddings": tie, "use_bias": bias}
    )
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model)
    main_sd = {k: list(v.shape) for k, v in model.state_dict().items()}
    mtp_sd = {k: list(v.shape) for k, v in mtp.state_dict().items()}
    assert not set(main_sd) & set(mtp_sd)
    assert {**main_sd, **mtp_sd} == state_dict_names(cfg)
    assert state_dict_names(cfg, mtp=False) == main_sd
    assert mtp_sd["ernie.mtp_linear_proj.0.weight"] == [2 * cfg.hidden_size, cfg.hidden_size]
    if moe:
        assert main_sd["ernie.layers.1.mlp.gate.weight"] == [cfg.hidden_size, cfg.moe_num_experts]
        assert model.ernie.layers[1].mlp.gate.weight.dtype == paddle.float32


# --------------------------------------------------------------------------- MTP
def test_mtp_shares_main_layers(models):
    cfg, model, mtp = models
    assert mtp.embed_tokens is model.embed_tokens
    assert mtp.norm is model.norm
    assert mtp.lm_head is model.lm_head
    assert mtp.mtp_block.layer_id == cfg.num_hidden_layers
    assert mtp.mtp_block.self_attn.layer_id == cfg.num_hidden_layers
    assert list(mtp.eh_proj.weight.shape) == [2 * cfg.hidden_size, cfg.hidden_size]
    assert mtp.mtp_block.is_moe == cfg.mtp_block_is_moe == cfg.is_moe_layer(0)
    hid = paddle.ones([2, cfg.hidden_size])
    np.testing.assert_array_equal(
        mtp.compute_logits(hid).numpy(), model.compute_logits(hid).numpy()
    )


def test_mtp_paged_equals_dense_oracle(models):
    cfg, model, mtp = models
    a, b = prompts(2, [6, 9], seed=12)
    rng = np.random.default_rng(13)
    prev = {
        0: rng.standard_normal((6, cfg.hidden_size)).astype(np.float32),
        3: rng.standard_normal((9, cfg.hidden_size)).astype(np.float32),
    }
    h = PagedHarness(cfg, model, mtp=mtp, block_size=4, seed=14)
    main_before = [c[0].numpy().copy() for c in h.caches[: cfg.num_hidden_layers]]
    out = h.step_mtp({0: a, 3: b}, prev)
    for s, seq in ((0, a), (3, b)):
        want = mtp.dense_forward(paddle.to_tensor(seq), paddle.to_tensor(prev[s])).numpy()
        assert_close(
            out[s], reference(want, mtp_forward64(mtp, seq, prev[s])), f"mtp prefill slot {s}"
        )
    # the MTP writes only its own cache layer (index num_hidden_layers)
    for i, before in enumerate(main_before):
        np.testing.assert_array_equal(h.caches[i][0].numpy(), before)
    assert np.abs(h.caches[cfg.num_hidden_layers][0].numpy()).sum() > 0
    # one decode step each, then compare with the oracle over the extended sequence
    step_prev = {s: rng.standard_normal((1, cfg.hidden_size)).astype(np.float32) for s in (0, 3)}
    out = h.step_mtp({0: [21], 3: [22]}, step_prev)
    for s, seq, tok in ((0, a, 21), (3, b, 22)):
        full_prev = np.concatenate([prev[s], step_prev[s]], axis=0)
        want = mtp.dense_forward(paddle.to_tensor(seq + [tok]), paddle.to_tensor(full_prev)).numpy()
        want = reference(want, mtp_forward64(mtp, seq + [tok], full_prev))
        assert_close(out[s], want[-1:], f"mtp decode slot {s}")
    assert out[0].shape == (1, cfg.hidden_size)


def test_mtp_only_meta_with_its_own_cache_size(models):
    """The proposer may pass a cache list holding only the MTP layer (index num_hidden_layers),
    with fewer blocks than the main cache: block ids are checked against that layer only."""
    cfg, model, mtp = models
    n = cfg.num_hidden_layers
    (seq,) = prompts(1, [7], seed=20)
    prev = np.random.default_rng(21).standard_normal((7, cfg.hidden_size)).astype(np.float32)
    meta = _meta(cfg, [[2, 0]], [7], [0], num_blocks=3)
    meta.ids_remove_padding = paddle.to_tensor(np.asarray(seq, np.int64))
    meta.caches = [None] * n + [meta.caches[n]]
    out = mtp(meta.ids_remove_padding, paddle.to_tensor(prev), meta).numpy()
    want = mtp.dense_forward(paddle.to_tensor(seq), paddle.to_tensor(prev)).numpy()
    assert_close(out, reference(want, mtp_forward64(mtp, seq, prev)), "mtp-only meta")
    meta.block_tables = paddle.to_tensor(
        np.array([[2, 3]], np.int32)
    )  # 3 is out of range for this cache
    with pytest.raises(ValueError, match="block_tables"):
        mtp(meta.ids_remove_padding, paddle.to_tensor(prev), meta)


def test_inference_only_parameters(models):
    cfg, model, mtp = models
    assert all(p.stop_gradient for p in model.parameters())
    assert all(p.stop_gradient for p in mtp.parameters())


def test_half_dtypes_refused_on_cpu():
    if paddle.device.get_device() != "cpu":
        pytest.skip("CPU-only check")
    cfg = ErnieConfig(**{**TINY, "dtype": "bfloat16"})
    with pytest.raises(ValueError, match="dtype"):
        Ernie4_5ForCausalLM(cfg)


# --------------------------------------------------------------------------- bad metadata
def _meta(cfg, tables, q, dec, num_blocks=4, bs=4):
    caches = allocate_kv_caches(cfg, cfg.num_hidden_layers + 1, num_blocks, bs, "float32")
    q = np.asarray(q, np.int32)
    ids = np.arange(3, 3 + int(q.sum()), dtype=np.int64)
    t = paddle.to_tensor
    return ForwardMeta(
        ids_remove_padding=t(ids),
        cu_seqlens_q=t(np.r_[0, np.cumsum(q)].astype(np.int32)),
        batch_id_per_token=t(np.repeat(np.arange(len(q)), q).astype(np.int32)),
        seq_lens_this_time=t(q),
        seq_lens_encoder=t(np.zeros_like(q)),
        seq_lens_decoder=t(np.asarray(dec, np.int32)),
        block_tables=t(np.asarray(tables, np.int32)),
        caches=caches,
        block_size=bs,
    )


@pytest.mark.parametrize(
    "tables,q,dec",
    [
        ([[0, -1]], [6], [0]),  # second block needed but -1
        ([[0, 7]], [2], [5]),  # block id out of range (num_blocks 4)
        ([[0]], [3], [3]),  # position 5 needs column 1, table width 1
        ([[1, 2], [-1, -1]], [1, 1], [2, 0]),  # second request has no block at all
    ],
)
@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "paddle_ops"])
def test_bad_block_table_raises_and_writes_nothing(tables, q, dec, use_kernel):
    cfg, model, _ = make_models()
    model.attn_backend = PagedAttentionCPU(use_kernel=use_kernel)
    meta = _meta(cfg, tables, q, dec)
    with pytest.raises(ValueError, match="block_tables"):
        model(meta.ids_remove_padding, meta)
    for k, v in meta.caches:
        assert not k.numpy().any() and not v.numpy().any()


def test_share_inputs_shapes_accepted(models):
    """FastDeploy buffers: [B, 1] seq_lens / cu_seqlens, a block table with more rows than the
    step's batch (the runner passes a [num_running] seq_lens_this_time view), a longer
    batch_id_per_token buffer, a cache list without the MTP layer."""
    cfg, model, _ = models
    a, b = prompts(2, [5, 3], seed=30)
    meta = _meta(cfg, [[1, 0], [2, -1], [-1, -1]], [5, 3], [0, 0])
    meta.ids_remove_padding = paddle.to_tensor(np.asarray(a + b, np.int64)).reshape([-1, 1])
    for name in ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "cu_seqlens_q"):
        setattr(meta, name, getattr(meta, name).reshape([-1, 1]))
    meta.batch_id_per_token = paddle.to_tensor(
        np.r_[[0] * 5 + [1] * 3, [-1] * 6].astype(np.int32)
    ).reshape([-1, 1])
    meta.caches = meta.caches[: cfg.num_hidden_layers]
    out = model(meta.ids_remove_padding, meta).numpy()
    assert_close(out[:5], dense(model, a), "request 0")
    assert_close(out[5:], dense(model, b), "request 1")


def test_inconsistent_meta_raises():
    cfg, model, _ = make_models()
    meta = _meta(cfg, [[0, 1]], [3], [0])
    meta.cu_seqlens_q = paddle.to_tensor(np.array([0, 2], np.int32))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        model(meta.ids_remove_padding, meta)


def test_empty_batch_and_cache_shape():
    cfg, model, _ = make_models()
    assert kv_cache_shape(cfg, 10, 16) == [10, cfg.num_key_value_heads, 16, cfg.head_dim]
    meta = _meta(cfg, [[-1], [-1]], [0, 0], [0, 5])
    out = PagedAttentionCPU().forward(
        paddle.zeros([0, 4, 16]), paddle.zeros([0, 2, 16]), paddle.zeros([0, 2, 16]), 0, meta
    )
    assert out.shape == [0, 64]


# --------------------------------------------------------------------------- config
def test_config_round_trip(tmp_path):
    cfg = ErnieConfig(**{**TINY, **MOE, "eos_token_id": [2, 5], "tie_word_embeddings": False})
    d = cfg.to_dict()
    assert d["architectures"] == ["Ernie4_5_MoeForCausalLM"] and d["hidden_act"] == "silu"
    assert ErnieConfig.from_dict(d) == cfg
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    assert ErnieConfig.from_file(tmp_path) == cfg
    assert ErnieConfig.from_file(p) == cfg
    assert cfg.eos_token_ids == [2, 5]


def test_config_from_ernie_json_fields():
    d = {
        "architectures": ["Ernie4_5_ForCausalLM"],
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "max_position_embeddings": 131072,
        "model_type": "ernie4_5",
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "num_hidden_layers": 18,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_bias": False,
        "vocab_size": 103424,
        "use_cache": False,
        "unknown_field": [1, 2],
        "hidden_act": "silu",
    }
    c = ErnieConfig.from_dict(d)
    assert (c.head_dim, c.dtype, c.rope_theta, c.moe_num_experts) == (128, "bfloat16", 500000.0, 0)
    assert c.extra["unknown_field"] == [1, 2]
    d2 = dict(d, num_key_value_heads=None, head_dim=None)
    c2 = ErnieConfig.from_dict(d2)
    assert (c2.num_key_value_heads, c2.head_dim) == (16, 64)


@pytest.mark.parametrize(
    "field,value",
    [
        ("hidden_size", 0),
        ("num_key_value_heads", 3),
        ("vocab_size", -1),
        ("moe_k", 9),
        ("rms_norm_eps", 0.0),
        ("dtype", "int8"),
        ("eos_token_id", []),
        ("tie_word_embeddings", "yes"),
        ("num_nextn_predict_layers", 2),
        ("head_dim", 7),
        ("moe_layer_interval", 0),
        ("rope_theta", -1.0),
    ],
)
def test_config_validation_names_field(field, value):
    d = {**TINY, **MOE, field: value}
    with pytest.raises(ValueError, match=field):
        ErnieConfig.from_dict(d)


def test_config_missing_and_unsupported():
    d = dict(TINY)
    del d["hidden_size"]
    with pytest.raises(ValueError, match="hidden_size"):
        ErnieConfig.from_dict(d)
    with pytest.raises(ValueError, match="rope_scaling"):
        ErnieConfig.from_dict({**TINY, "rope_scaling": {"type": "yarn", "factor": 4}})
    with pytest.raises(ValueError, match="hidden_act"):
        ErnieConfig.from_dict({**TINY, "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="moe_intermediate_size"):
        ErnieConfig.from_dict({**TINY, "moe_num_experts": 4, "moe_intermediate_size": 0})


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, fd_mtp.model; from fd_mtp.model import ErnieConfig; print('paddle' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("head_dim", [8, 48, 128])
def test_rope_rotation_matrices_and_elementwise_form_agree(head_dim, monkeypatch):
    """Rope's two forms (per-token rotation matrices for small steps, elementwise for large ones)
    and the reference apply_rope_interleaved all rotate like the float64 interleaved RoPE.

    The bound (tolerances.rope_error_bound) grows with the position: a float32 angle
    ``pos * theta ** (-2i/D)`` carries a relative error of a few U (the rounded exponent through
    ``ln(theta)``, pow / exp, the reciprocal, the product with pos), i.e. up to ~0.08 rad at
    position 131071, and each form computes its angles its own way (numpy's float32 ``**`` and
    sin / cos, whose AVX-512 and AVX2 loops differ, or Paddle's); cos / sin then add their own few
    ulp and the rotation two products and a sum. At small positions the bound is ~1e-6, so a wrong
    sign or a swapped pair (errors of order |x|) fails there."""
    from fd_mtp.model.attention import Rope, apply_rope_interleaved, rope_cos_sin

    theta = 500000.0
    pos = np.array([0, 1, 5, 77, 1000, 4095, 131071])
    xs = np.random.default_rng(head_dim).standard_normal((len(pos), 3, head_dim)).astype(np.float32)
    x = paddle.to_tensor(xs)
    truth, bound = rope_truth64(xs, pos, theta), rope_error_bound(xs, pos, theta)
    cos, sin = rope_cos_sin(paddle.to_tensor(pos), head_dim, theta)
    reference_form = apply_rope_interleaved(x, cos, sin).numpy()
    small = Rope(pos, head_dim, theta)
    assert small.rotation is not None
    monkeypatch.setattr(Rope, "MAX_MATRIX_ELEMENTS", 0)
    large = Rope(pos, head_dim, theta)
    assert large.rotation is None
    got_small, got_large = small.apply(x).numpy(), large.apply(x).numpy()
    assert_within(got_small, truth, bound, "rotation-matrix form")
    assert_within(got_large, truth, bound, "elementwise form")
    assert_within(reference_form, truth, bound, "apply_rope_interleaved")
    # the two forms with each other: the sum of their bounds
    assert_within(got_small, got_large, 2 * bound, "matrix form vs elementwise form")
    assert_within(got_small, reference_form, 2 * bound, "matrix form vs apply_rope_interleaved")
    # the bound is tight enough to see a wrong rotation: swapping the sign of sin, or the two
    # elements of each pair, is caught (at the small positions)
    wrong_sign = rope_truth64(xs, -pos, theta)
    swapped = rope_truth64(xs.reshape(len(pos), 3, -1, 2)[..., ::-1].reshape(xs.shape), pos, theta)
    for wrong in (wrong_sign, swapped):
        assert np.any(np.abs(wrong - truth) > 2 * bound)
