"""Tiny ERNIE-4.5 models with random weights, a paged-batch harness, and the float64 truth of a
forward with its float32 error bound (:func:`forward64`, :func:`dense_reference`) for the model
tests (imported by tests/model/* and usable by the engine and proposer tests)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import paddle
from tolerances import (
    FUNC_REL,
    FUNC_ULPS,
    Float32Noise,
    U,
    assert_within,
    gamma,
    rope_angle_error_bound,
    rope_angles64,
    softmax_rounding_rel,
)

import fd_mtp
from fd_mtp.engine.sampling_params import SamplingParams
from fd_mtp.model import ErnieConfig
from fd_mtp.model.attention import ForwardMeta, allocate_kv_caches
from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP
from fd_mtp.testing import TINY_CONFIG, TINY_MOE

#: greedy generation of 24 tokens over four prompts (5, 70, 8 and 41 tokens), and MTP K = 2: what
#: test_native and test_compiled run each forward on (`generate_tokens`)
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [[5, 6, 7, 8, 9], [11] * 70, [3, 1, 4, 1, 5, 9, 2, 6], list(range(20, 61))]
MTP2 = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}


def generate_tokens(model, forward, spec=None, batch=4, prompts=PROMPTS, params=GREEDY):
    """`fd_mtp.LLM` on ``model`` with ``forward`` (None: the default) and ``spec``: the first
    ``batch`` prompts generated; -> (the LLM, each request's token ids)."""
    kwargs = {} if forward is None else {"forward": forward}
    llm = fd_mtp.LLM(
        model,
        max_num_seqs=batch,
        max_model_len=256,
        block_size=16,
        speculative_config=spec,
        **kwargs,
    )
    outs = llm.generate(prompts[:batch], params, use_tqdm=False)
    return llm, [list(o.token_ids) for o in outs]


TINY = dict(TINY_CONFIG, intermediate_size=96)  # fd_mtp.testing's tiny model, a narrower MLP
MOE = dict(moe_num_experts=4, **TINY_MOE)  # 4 experts, layer 0 dense, aux-free bias


def randomize(layer: paddle.nn.Layer, seed: int) -> None:
    """Random weights everywhere (norm weights near 1, a non-zero expert-choice bias)."""
    rng = np.random.default_rng(seed)
    for name, p in sorted(layer.named_parameters()):
        shape = list(p.shape)
        if (
            name.endswith("norm.weight")
            or ".norm." in name
            or "layernorm" in name
            or "mtp_emb_norm" in name
            or "mtp_hidden_norm" in name
        ):
            val = 1.0 + 0.2 * rng.standard_normal(shape)
        elif "e_score_correction_bias" in name:
            val = 0.05 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            val = 0.5 * rng.standard_normal(shape)
        else:
            val = rng.standard_normal(shape) / np.sqrt(shape[0])
        p.set_value(paddle.to_tensor(val.astype(np.float32)).astype(p.dtype))


def make_models(moe: bool = False, seed: int = 0, **overrides):
    cfg = ErnieConfig(**{**TINY, **(MOE if moe else {}), **overrides})
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model) if cfg.num_nextn_predict_layers else None
    randomize(model, seed)
    if mtp is not None:
        randomize(mtp, seed + 1)
    model.eval()
    return cfg, model, mtp


class PagedHarness:
    """Slots with their own block lists (blocks drawn from a shuffled free list, so a request's
    block ids are not contiguous) and lengths; ``step`` runs one packed forward."""

    def __init__(
        self,
        cfg,
        model,
        *,
        max_num_seqs=6,
        block_size=4,
        num_blocks=64,
        max_blocks=16,
        seed=0,
        mtp=None,
    ):
        self.cfg, self.model, self.mtp = cfg, model, mtp
        self.bs, self.max_blocks, self.B = block_size, max_blocks, max_num_seqs
        self.caches = allocate_kv_caches(
            cfg, cfg.num_hidden_layers + 1, num_blocks, block_size, "float32"
        )
        self.free = list(np.random.default_rng(seed).permutation(num_blocks))
        self.blocks = [[] for _ in range(max_num_seqs)]
        self.lens = [0] * max_num_seqs

    def meta(self, batch: dict[int, list[int]]) -> ForwardMeta:
        q = np.zeros(self.B, np.int32)
        for slot, ids in batch.items():
            q[slot] = len(ids)
            need = -(-(self.lens[slot] + len(ids)) // self.bs)
            while len(self.blocks[slot]) < need:
                self.blocks[slot].append(int(self.free.pop()))
        dec = np.array(self.lens, np.int32)
        enc = np.where((dec == 0) & (q > 0), q, 0).astype(np.int32)
        tables = np.full((self.B, self.max_blocks), -1, np.int32)
        for s, bl in enumerate(self.blocks):
            tables[s, : len(bl)] = bl
        ids = np.concatenate(
            [np.asarray(batch.get(s, []), np.int64) for s in range(self.B)]
            + [np.zeros(0, np.int64)]
        )
        cu = np.concatenate([[0], np.cumsum(q)]).astype(np.int32)
        bid = np.repeat(np.arange(self.B), q).astype(np.int32)
        t = paddle.to_tensor
        return ForwardMeta(
            ids_remove_padding=t(ids),
            cu_seqlens_q=t(cu),
            batch_id_per_token=t(bid),
            seq_lens_this_time=t(q),
            seq_lens_encoder=t(enc),
            seq_lens_decoder=t(dec),
            block_tables=t(tables),
            caches=self.caches,
            block_size=self.bs,
        )

    def _split(self, batch, out):
        res, off = {}, 0
        for s in range(self.B):
            if s in batch:
                n = len(batch[s])
                res[s] = out[off : off + n].numpy()
                off += n
                self.lens[s] += n
        return res

    def step(self, batch: dict[int, list[int]]) -> dict[int, np.ndarray]:
        meta = self.meta(batch)
        return self._split(batch, self.model(meta.ids_remove_padding, meta))

    def step_mtp(
        self, batch: dict[int, list[int]], hidden: dict[int, np.ndarray]
    ) -> dict[int, np.ndarray]:
        meta = self.meta(batch)
        prev = np.concatenate([hidden[s] for s in range(self.B) if s in batch], axis=0).astype(
            np.float32
        )
        return self._split(batch, self.mtp(meta.ids_remove_padding, paddle.to_tensor(prev), meta))


# --------------------------------------------------------------------------- float64 truth and bounds
# The dense / paged / batched forwards are float32 computations of one function along different
# code paths (fused kernel or Paddle-ops attention, rotation-matrix or elementwise RoPE, dense
# combine or per-expert MoE, MKL's gemm or gemv kernels for different row counts). Tests compare
# each with the float64 truth below, within the probabilistic float32 error bound of
# tests/tolerances.py (Float32Noise): the same maths in float64, every op's result perturbed by
# its worst-case float32 rounding error.

#: silu(g) = g / (1 + exp(-g)) or g * sigmoid(g): one exp or sigmoid (FUNC_REL), an add, a
#: division or product (each U, and the exp's error is damped by the add)
SILU_REL = FUNC_REL + 3 * U


def _f64(tensor):
    return np.asarray(tensor.numpy(), np.float64)


class Forward64:
    """The model's maths (the module docstring of fd_mtp.model.ernie) in float64 numpy, with a
    leading sample axis: sample 0 exact, the others with every op's float32 rounding error as
    +-noise (:class:`tolerances.Float32Noise`). Arrays are ``[K + 1, S, ...]`` for one sequence,
    ``[K + 1, B, S, ...]`` for a batch of sequences. Each op's noise is its worst-case float32
    error: a linear layer gamma(in) |x| @ |W| (any summation order), RMSNorm the mean of squares
    gamma(H + 1), rsqrt FUNC_REL and two products, RoPE its angle error
    (tolerances.rope_angle_error_bound) and the rotation gamma(2), attention scores gamma(D) and
    the scale, softmax weights tolerances.softmax_rounding_rel, the weighted sum of values
    gamma(2n + 1), silu SILU_REL, every add and product U."""

    def __init__(self, cfg, noise: Float32Noise):
        self.cfg, self.noise = cfg, noise
        self.kv = {}  # layer_id -> (k after RoPE, v), each [K + 1, (B,) S, Hkv, D]

    def rnd(self, value, bound):
        return self.noise.round(value, bound)

    def add(self, a, b):
        s = a + b
        return self.rnd(s, U * np.abs(s))

    def linear(self, lin, x):
        w = _f64(lin.weight)
        y = self.rnd(x @ w, gamma(w.shape[0]) * (np.abs(x) @ np.abs(w)))
        if lin.bias is not None:
            y = y + _f64(lin.bias)
            y = self.rnd(y, U * np.abs(y))
        return y

    def rmsnorm(self, norm, x):
        # mean of squares: n products, a sum, a division; + eps; rsqrt; two products
        ms = (x * x).mean(axis=-1, keepdims=True)
        ms = self.rnd(ms, gamma(x.shape[-1] + 1) * ms) + norm.eps
        ms = self.rnd(ms, U * ms)
        r = 1.0 / np.sqrt(ms)
        r = self.rnd(r, FUNC_REL * r)
        y = x * r * _f64(norm.weight)
        return self.rnd(y, gamma(2) * np.abs(y))

    def rope_cos_sin(self, positions):
        """cos / sin ``[K + 1, S, 1, D/2]``: angle error (tolerances.rope_angle_error_bound), then
        cos / sin evaluation (FUNC_ULPS ulp of a value in [-1, 1])."""
        d, theta = self.cfg.head_dim, self.cfg.rope_theta
        ang = self.noise.lift(rope_angles64(positions, d, theta))
        ang = self.rnd(ang, rope_angle_error_bound(positions, d, theta))
        c = self.rnd(np.cos(ang), 2 * FUNC_ULPS * U)
        s = self.rnd(np.sin(ang), 2 * FUNC_ULPS * U)
        return c[:, :, None, :], s[:, :, None, :]

    def rope(self, x, cos, sin):
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        bound = np.empty_like(x)
        bound[..., 0::2] = gamma(2) * (np.abs(a * cos) + np.abs(b * sin))
        bound[..., 1::2] = gamma(2) * (np.abs(a * sin) + np.abs(b * cos))
        return self.rnd(out, bound)

    def attention(self, attn, h, cos_sin):
        """Causal GQA attention of ``h [K + 1, *B, S, H]`` (``B``: optional batch of sequences)."""
        lead, s = h.shape[:-2], h.shape[-2]
        hq, hkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
        cos, sin = (c.reshape(c.shape[:1] + (1,) * (len(lead) - 1) + c.shape[1:]) for c in cos_sin)
        q = self.rope(self.linear(attn.q_proj, h).reshape(*lead, s, hq, d), cos, sin)
        k = self.rope(self.linear(attn.k_proj, h).reshape(*lead, s, hkv, d), cos, sin)
        v = self.linear(attn.v_proj, h).reshape(*lead, s, hkv, d)
        self.kv[attn.layer_id] = (k, v)
        g = hq // hkv
        qh = np.swapaxes(q, -3, -2)  # [K+1, *B, Hq, S, D]
        kt = np.swapaxes(np.repeat(k, g, axis=-2), -3, -2).swapaxes(-1, -2)  # [K+1, *B, Hq, D, S]
        vh = np.swapaxes(np.repeat(v, g, axis=-2), -3, -2)
        scale = 1.0 / math.sqrt(d)
        # scores: a length-D dot product, then the float32 scale and the product
        sc = self.rnd(qh @ kt, gamma(d) * (np.abs(qh) @ np.abs(kt))) * scale
        sc = self.rnd(sc, 2 * U * np.abs(sc))
        causal = np.tril(np.ones((s, s), bool))
        sc = np.where(causal, sc, -np.inf)
        m = sc.max(axis=-1, keepdims=True)
        p = np.exp(sc - m)
        p /= p.sum(axis=-1, keepdims=True)
        n = np.arange(1, s + 1, dtype=np.float64)[:, None]  # visible positions per query
        gap = np.where(causal, m - sc, 0.0).max(axis=-1, keepdims=True)
        p = self.rnd(p, softmax_rounding_rel(n, gap) * p)
        # output: per position a product and a sum, and the final 1 / sum scaling
        o = self.rnd(p @ vh, gamma(2 * n + 1) * (np.abs(p) @ np.abs(vh)))
        o = np.swapaxes(o, -3, -2).reshape(*lead, s, hq * d)
        return self.linear(attn.o_proj, o)

    def mlp(self, mlp, x):
        gate = self.linear(mlp.gate_proj, x)
        act = gate / (1.0 + np.exp(-gate))
        act = self.rnd(act, SILU_REL * np.abs(act))
        prod = act * self.linear(mlp.up_proj, x)
        return self.linear(mlp.down_proj, self.rnd(prod, U * np.abs(prod)))

    def moe(self, moe, x):
        logits = self.linear(moe.gate, x)
        m = logits.max(axis=-1, keepdims=True)
        p = np.exp(logits - m)
        p /= p.sum(axis=-1, keepdims=True)
        p = self.rnd(
            p, softmax_rounding_rel(moe.num_experts, (m - logits).max(axis=-1, keepdims=True)) * p
        )
        scores = p
        if moe.moe_statics is not None:
            scores = p + _f64(moe.moe_statics.e_score_correction_bias)
            scores = self.rnd(scores, U * np.abs(scores))
        k = moe.top_k
        chosen = np.argsort(-scores[0], axis=-1, kind="stable")[..., :k]  # the truth's choice
        picked = np.zeros(scores.shape[1:], bool)
        np.put_along_axis(picked, chosen, True, axis=-1)
        # float32 routes like the truth only if the top-k boundary is not a near-tie at the float32
        # noise level (an exact comparison of a discrete choice needs this margin)
        if picked.shape[-1] > k:
            margin = np.where(picked, scores, np.inf).min(-1) - np.where(
                picked, -np.inf, scores
            ).max(-1)
            _, sigma_bound = Float32Noise.bound(margin[..., None])
            assert np.all(margin[0] > sigma_bound[..., 0]), (
                f"MoE routing near-tie: top-{k} margins {margin[0]} within float32 error {sigma_bound[..., 0]}"
            )
        w = np.take_along_axis(p, np.broadcast_to(chosen, p.shape[:1] + chosen.shape), axis=-1)
        denom = np.maximum(w.sum(axis=-1, keepdims=True), moe.norm_min)
        w = w / self.rnd(denom, gamma(k) * denom)
        w = self.rnd(w, U * w)
        out, acc = 0.0, 0.0
        for e in range(moe.num_experts):
            we = (w * (chosen == e)).sum(axis=-1)[..., None]  # [K+1, (B,) S, 1]
            if not np.any(we):
                continue
            y = self.mlp(moe.experts[e], x)
            out = out + we * y
            acc = acc + np.abs(we * y)
        # weighted sum over the experts (dense combine: zeros elsewhere, exact) or index_add
        out = self.rnd(out, gamma(moe.num_experts + 1) * acc)
        if moe.shared_experts is not None:
            out = self.add(out, self.mlp(moe.shared_experts, x))
        return out

    def layer(self, layer, x, cos_sin):
        x = self.add(
            x, self.attention(layer.self_attn, self.rmsnorm(layer.input_layernorm, x), cos_sin)
        )
        hn = self.rmsnorm(layer.post_attention_layernorm, x)
        return self.add(x, self.moe(layer.mlp, hn) if layer.is_moe else self.mlp(layer.mlp, hn))


@dataclass
class Reference:
    """A float32 oracle's rows with their float64 truth and probabilistic float32 error bound;
    indexing slices all three alike."""

    f32: np.ndarray
    truth: np.ndarray
    bound: np.ndarray

    def __getitem__(self, idx):
        return Reference(self.f32[idx], self.truth[idx], self.bound[idx])

    @property
    def shape(self):
        return self.f32.shape


def forward64(model, ids, seed=0):
    """``(hidden, kv)`` of ``model`` (Ernie4_5ForCausalLM) on one sequence ``ids [S]`` (positions
    0..S-1), or on a batch of sequences ``ids [B, S]``: final-normed hidden ``[K + 1, (B,) S, H]``
    (sample 0 the float64 truth) and per layer id the RoPE'd keys and values
    ``[K + 1, (B,) S, Hkv, D]``. ``seed``: of the noise signs."""
    noise = Float32Noise(seed=seed)
    f = Forward64(model.config, noise)
    ids = np.asarray(ids, np.int64)
    x = noise.lift(_f64(model.embed_tokens.weight)[ids])
    cos_sin = f.rope_cos_sin(np.arange(ids.shape[-1]))
    for layer in model.layers:
        x = f.layer(layer, x, cos_sin)
    return f.rmsnorm(model.norm, x), f.kv


def mtp_forward64(mtp, ids, previous_hidden, seed=1):
    """The MTP block (Ernie4_5MTP) on one sequence ``ids [S]`` (or a batch ``[B, S]``), positions
    0..S-1: final-normed hidden ``[K + 1, (B,) S, H]``. ``previous_hidden``: ``[(B,) S, H]``
    exact float32 input, or ``[K + 1, (B,) S, H]`` samples of an earlier forward64 /
    mtp_forward64 (their errors propagate; give this call another ``seed`` than theirs, so that
    its noise is independent of theirs)."""
    noise = Float32Noise(seed=seed)
    f = Forward64(mtp.config, noise)
    ids = np.asarray(ids, np.int64)
    prev = np.asarray(previous_hidden, np.float64)
    if prev.ndim == ids.ndim + 1:
        prev = noise.lift(prev)
    e = noise.lift(_f64(mtp.embed_tokens.weight)[ids])
    x = np.concatenate([f.rmsnorm(mtp.enorm, e), f.rmsnorm(mtp.hnorm, prev)], axis=-1)
    x = f.linear(mtp.eh_proj, x)
    x = f.layer(mtp.mtp_block, x, f.rope_cos_sin(np.arange(ids.shape[-1])))
    return f.rmsnorm(mtp.norm, x)


def reference(f32, samples) -> Reference:
    """:class:`Reference` of float32 oracle rows ``f32`` and the float64 samples of the same rows."""
    truth, bound = Float32Noise.bound(samples)
    return Reference(np.asarray(f32), truth, bound)


def dense_reference(model, ids) -> Reference:
    """The dense float32 oracle ``model.dense_forward(ids)`` with its float64 truth and bound."""
    f32 = model.dense_forward(paddle.to_tensor(np.asarray(ids, np.int64))).numpy()
    return reference(f32, forward64(model, ids)[0])


def assert_matches_reference(got, ref: Reference, what=""):
    """The oracle and ``got`` both within the float32 error bound of the float64 truth (so within
    twice the bound of each other)."""
    assert_within(ref.f32, ref.truth, ref.bound, f"{what} (float32 oracle)")
    assert_within(got, ref.truth, ref.bound, what)
