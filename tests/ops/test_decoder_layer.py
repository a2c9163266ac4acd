"""fd_mtp.ops.decoder_layer (one dense decoder layer on the CPU, the native forward's kernel) vs
its float64 numpy reference: hand cases, an odd-size grid, Hypothesis batches, invariants of the
caches, and bad input (ValueError naming the argument, nothing written).

The kernel computes in float32, the reference in float64; they are compared within a worst-case,
first-order bound of the layer's float32 rounding (`layer_error_bound`), computed from the
reference's own intermediates with tests/tolerances.py's model of the arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import (
    FUNC_REL,
    U,
    assert_within,
    gamma,
    softmax_perturbation_rel,
    softmax_rounding_rel,
)
from util import assert_same, to_paddle

import fd_mtp.ops as ops
from fd_mtp.model.attention import rope_tables
from fd_mtp.reference.attention import decoder_layer_stages

WEIGHTS = (
    "input_norm_weight",
    "q_weight",
    "k_weight",
    "v_weight",
    "o_weight",
    "post_norm_weight",
    "gate_weight",
    "up_weight",
    "down_weight",
)
META = ("block_tables", "cu_seqlens_q", "batch_id_per_token", "seq_lens_decoder")
NAMES = ("hidden", "residual", *WEIGHTS, "key_cache", "value_cache", *META, "rope_cos", "rope_sin")
EPS = 1e-5


def make_layer(rng, *, lens, dec, hidden, hq, hkv, d, inter, bs, spare_blocks=3, theta=1e4):
    """A random batch for one layer: weights scaled like a trained layer's (1 / sqrt(fan-in)),
    norms near 1, caches filled with random k / v, shuffled block ids, RoPE tables of the tokens'
    positions."""
    lens, dec = np.asarray(lens), np.asarray(dec)
    bsz, t = len(lens), int(lens.sum())
    need = -(-(dec + lens) // bs)
    nb = int(need.max()) + 1
    num_blocks = int(need.sum()) + spare_blocks
    perm = rng.permutation(num_blocks)
    tables = np.full((bsz, nb), -1, np.int32)
    used = 0
    for b in range(bsz):
        tables[b, : need[b]] = perm[used : used + need[b]]
        used += need[b]

    def f(*shape, fan_in=1):
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    bid = np.repeat(np.arange(bsz), lens).astype(np.int32)
    cos, sin = rope_tables(dec[bid] + np.arange(t) - cu[bid], d, theta)
    return dict(
        hidden=f(t, hidden),
        residual=f(t, hidden),
        input_norm_weight=(1 + 0.2 * f(hidden)).astype(np.float32),
        q_weight=f(hidden, hq * d, fan_in=hidden),
        k_weight=f(hidden, hkv * d, fan_in=hidden),
        v_weight=f(hidden, hkv * d, fan_in=hidden),
        o_weight=f(hq * d, hidden, fan_in=hq * d),
        post_norm_weight=(1 + 0.2 * f(hidden)).astype(np.float32),
        gate_weight=f(hidden, inter, fan_in=hidden),
        up_weight=f(hidden, inter, fan_in=hidden),
        down_weight=f(inter, hidden, fan_in=inter),
        key_cache=f(num_blocks, hkv, bs, d),
        value_cache=f(num_blocks, hkv, bs, d),
        block_tables=tables,
        cu_seqlens_q=cu,
        batch_id_per_token=bid,
        seq_lens_decoder=dec.astype(np.int32),
        rope_cos=cos,
        rope_sin=sin,
    )


def run_op(batch, **kw):
    args = [to_paddle(batch[n].copy()) for n in NAMES]
    out, res = ops.decoder_layer(*args, EPS, **kw)
    return out.numpy(), res.numpy(), args[11].numpy(), args[12].numpy()


def run_ref(batch, **kw):
    a = {n: batch[n].copy() for n in NAMES}
    stages = decoder_layer_stages({**a, "eps": EPS, **kw})
    return stages, a["key_cache"], a["value_cache"]


# ----------------------------------------------------------------------------- error bound
def _norm_bound(r, dr, w, eps):
    """Bound on the float32 error of ``rms_norm(r) * w`` (rows of r ``[T, n]``) whose input is off
    by ``dr``: first order, ``|w| / rms (|dr_i| + |r_i| sum_j |r_j dr_j| / (n rms^2))`` from the
    input, plus the norm's own roundings (the mean of squares in double, its float32 rounding,
    the eps add, sqrt, the reciprocal and two products: 6 U relative)."""
    n = r.shape[-1]
    rms = np.sqrt(np.mean(r * r, axis=-1, keepdims=True) + eps)
    spread = np.sum(np.abs(r * dr), axis=-1, keepdims=True) / (n * rms**2)
    return np.abs(w) / rms * (dr + np.abs(r) * spread) + 6 * U * np.abs(r / rms * w)


def _matmul_bound(x, dx, w):
    """``x @ w`` with x off by ``dx``: ``gamma(K) |x| @ |w|`` (any summation order) + ``dx @ |w|``."""
    aw = np.abs(w)
    return gamma(x.shape[-1]) * (np.abs(x) @ aw) + dx @ aw


def _rope_bound(x, dx, cos, sin):
    """Interleaved RoPE of ``x [T, h, D]`` (off by ``dx``) with exact tables: each output is two
    products and a sum of the pair (``gamma(2)``), plus the pair's input errors (|cos|, |sin| <= 1)."""
    a, b = np.abs(x[..., 0::2]), np.abs(x[..., 1::2])
    da, db = dx[..., 0::2], dx[..., 1::2]
    c, s = np.abs(cos), np.abs(sin)
    out = np.empty_like(dx)
    out[..., 0::2] = da * c + db * s + gamma(2) * (a * c + b * s)
    out[..., 1::2] = db * c + da * s + gamma(2) * (b * c + a * s)
    return out


def _attention_bound(batch, st, kc, vc, dq, dk, dv, scale):
    """``[T, Hq * D]``: per (token, head), the scores' error (``gamma(D + 2)`` of the dot product
    and scale, plus the inputs' errors: ``dq`` and ``dk`` for the token's own row, every other
    context row exact as read from the caches), the softmax's rounding and perturbation
    (tests/tolerances.py), the weighted sum of v (``gamma(2n + 1)``) and the token's own v error."""
    q = st["q"]
    t_count, hq, d = q.shape
    g = hq // kc.shape[1]
    bs = kc.shape[2]
    cu, bid, dec, bt = (batch[n] for n in META[1:] + META[:1])
    bound = np.zeros((t_count, hq * d))
    for t in range(t_count):
        b = int(bid[t])
        p = np.arange(dec[b] + t - cu[b] + 1)
        own = np.zeros(p.shape, bool)
        own[dec[b] :] = True  # positions this step wrote (tokens cu[b] .. t of this request)
        rows = cu[b] + np.arange(own.sum())
        blocks = bt[b, p // bs]
        for h in range(hq):
            k = kc[blocks, h // g, p % bs].astype(np.float64)
            v = vc[blocks, h // g, p % bs].astype(np.float64)
            s = scale * (k @ q[t, h])
            w = np.exp(s - s.max())
            w /= w.sum()
            dk_rows = np.zeros_like(k)
            dk_rows[own] = dk[rows, h // g]
            dv_rows = np.zeros_like(v)
            dv_rows[own] = dv[rows, h // g]
            es = scale * (
                gamma(d + 2) * (np.abs(k) @ np.abs(q[t, h]))
                + np.abs(k) @ dq[t, h]
                + dk_rows @ np.abs(q[t, h])
            )
            pert = softmax_perturbation_rel(es)
            rel = pert + softmax_rounding_rel(len(p), s.max() - s.min()) * (1 + pert)
            dp = w * rel
            bound[t, h * d : (h + 1) * d] = (
                dp @ np.abs(v) + gamma(2 * len(p) + 1) * ((w + dp) @ np.abs(v)) + w @ dv_rows
            )
    return bound


def layer_error_bound(batch, st, kc, vc, scale=None):
    """Worst-case, first-order bound on the float32 layer's error against the float64 truth, stage
    by stage (each stage's own rounding plus its inputs' errors carried through |W|): returns
    ``(out, residual_out, k, v)`` bounds (k after RoPE, as cached)."""
    d = kc.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    w = {n: np.asarray(batch[n], np.float64) for n in WEIGHTS}
    t_count = st["res"].shape[0]
    hq, hkv = st["q"].shape[1], st["k"].shape[1]
    d_res = U * np.abs(st["res"])
    d_x = _norm_bound(st["res"], d_res, w["input_norm_weight"], EPS)
    cos = batch["rope_cos"].astype(np.float64)[:, None, :]
    sin = batch["rope_sin"].astype(np.float64)[:, None, :]
    x = st["x"]
    q_pre, k_pre = (
        (x @ w["q_weight"]).reshape(st["q"].shape),
        (x @ w["k_weight"]).reshape(st["k"].shape),
    )
    d_q = _rope_bound(q_pre, _matmul_bound(x, d_x, w["q_weight"]).reshape(q_pre.shape), cos, sin)
    d_k = _rope_bound(k_pre, _matmul_bound(x, d_x, w["k_weight"]).reshape(k_pre.shape), cos, sin)
    d_v = _matmul_bound(x, d_x, w["v_weight"]).reshape(st["v"].shape)
    d_attn = _attention_bound(batch, st, kc, vc, d_q, d_k, d_v, scale)
    d_res2 = (
        _matmul_bound(st["attn"], d_attn, w["o_weight"]) + d_res + U * np.abs(st["residual_out"])
    )
    d_x2 = _norm_bound(st["residual_out"], d_res2, w["post_norm_weight"], EPS)
    d_gate = _matmul_bound(st["x2"], d_x2, w["gate_weight"])
    d_up = _matmul_bound(st["x2"], d_x2, w["up_weight"])
    # silu(g) u: |silu'| <= 1.1; exp (FUNC_REL), the add, the division and the product (3 U)
    silu = st["gate"] / (1.0 + np.exp(-st["gate"]))
    d_act = (
        1.1 * d_gate * np.abs(st["up"])
        + np.abs(silu) * d_up
        + (FUNC_REL + 3 * U) * np.abs(st["act"])
    )
    d_out = _matmul_bound(st["act"], d_act, w["down_weight"])
    assert d_q.shape == (t_count, hq, d) and d_k.shape == (t_count, hkv, d)
    return d_out + U * np.abs(st["out"]), d_res2 + U * np.abs(st["residual_out"]), d_k, d_v


def compare(batch, **kw):
    """The op against the reference: outputs within the derived bound, every written cache slot
    within the k / v bound, every other slot unchanged (bit for bit)."""
    out, res, kc, vc = run_op(batch, **kw)
    st, kc_ref, vc_ref = run_ref(batch, **kw)
    b_out, b_res, b_k, b_v = layer_error_bound(batch, st, kc_ref, vc_ref, kw.get("scale"))
    assert_within(out, st["out"], b_out, "decoder_layer out")
    assert_within(res, st["residual_out"], b_res, "decoder_layer residual_out")
    bs = kc.shape[2]
    cu, bid, dec, bt = (
        batch[n] for n in ("cu_seqlens_q", "batch_id_per_token", "seq_lens_decoder", "block_tables")
    )
    written = np.zeros(kc.shape[:3], bool)
    for t in range(out.shape[0]):
        pos = dec[bid[t]] + t - cu[bid[t]]
        blk, off = bt[bid[t], pos // bs], pos % bs
        written[blk, :, off] = True
        assert_within(
            kc[blk, :, off], st["k"][t], b_k[t] + U * np.abs(st["k"][t]), f"k of token {t}"
        )
        assert_within(
            vc[blk, :, off], st["v"][t], b_v[t] + U * np.abs(st["v"][t]), f"v of token {t}"
        )
    assert_same(kc[~written], batch["key_cache"][~written], "key_cache (unwritten slots)")
    assert_same(vc[~written], batch["value_cache"][~written], "value_cache (unwritten slots)")
    return out, res


# ----------------------------------------------------------------------------- cases
DEMO = dict(hidden=256, hq=4, hkv=2, d=64, inter=704)  # the demo model's layer
ODD = dict(hidden=40, hq=4, hkv=2, d=10, inter=52)  # widths not multiples of 8: the tails
MHA = dict(hidden=24, hq=3, hkv=3, d=8, inter=9)


def test_hand_case_zero_weights():
    """All projections zero: the attention reads v = 0 rows (written this step) and the cached
    zeros, so out = 0 exactly, residual_out = hidden + residual exactly, k / v slots set to 0."""
    rng = np.random.default_rng(0)
    batch = make_layer(rng, lens=[2, 1], dec=[0, 3], bs=4, **MHA)
    for n in WEIGHTS:
        if n.endswith("_weight") and "norm" not in n:
            batch[n] = np.zeros_like(batch[n])
    batch["value_cache"] = np.zeros_like(batch["value_cache"])
    out, res, kc, vc = run_op(batch)
    assert_same(out, np.zeros_like(out), "out")
    assert_same(res, batch["hidden"] + batch["residual"], "residual_out")
    for t, (b, pos) in enumerate([(0, 0), (0, 1), (1, 3)]):
        blk = batch["block_tables"][b, pos // 4]
        assert_same(kc[blk, :, pos % 4], np.zeros((3, 8), np.float32), f"k slot of token {t}")


def test_hand_case_uniform_attention():
    """q = 0 (zero q_weight): every context position gets the same weight, so the attention of a
    token is the mean of its request's v rows; with o_weight mapping heads back to the hidden
    columns and a zero MLP, residual_out = res + mean(v) o_weight (checked against numpy)."""
    rng = np.random.default_rng(1)
    batch = make_layer(rng, lens=[1], dec=[5], bs=4, **MHA)
    batch["q_weight"] = np.zeros_like(batch["q_weight"])
    batch["down_weight"] = np.zeros_like(batch["down_weight"])
    out, res, kc, vc = run_op(batch)
    st, kc_ref, vc_ref = run_ref(batch)
    tables = batch["block_tables"][0]
    v_rows = np.stack([vc_ref[tables[p // 4], :, p % 4] for p in range(6)])  # [6, Hkv, D]
    np.testing.assert_allclose(st["attn"][0], v_rows.astype(np.float64).mean(0).reshape(-1))
    assert_same(out, np.zeros_like(out), "out (zero down_weight)")
    b_out, b_res, _, _ = layer_error_bound(batch, st, kc_ref, vc_ref)
    assert_within(res, st["residual_out"], b_res, "residual_out")


@pytest.mark.parametrize("shape", [DEMO, ODD, MHA], ids=["demo", "odd", "mha"])
@pytest.mark.parametrize(
    "lens,dec",
    [
        ([1], [0]),
        ([1], [37]),
        ([3, 1, 5], [0, 20, 7]),
        ([7, 7, 7], [50, 0, 13]),
        ([1] * 9, list(range(0, 90, 10))),
    ],
    ids=["first", "decode", "mixed", "chunks", "batch9"],
)
@pytest.mark.parametrize("bs", [4, 16])
def test_grid_matches_reference(shape, lens, dec, bs):
    rng = np.random.default_rng(len(lens) * 100 + bs + shape["hidden"])
    compare(make_layer(rng, lens=lens, dec=dec, bs=bs, **shape))


def test_odd_row_counts_and_explicit_scale():
    """Every row-group size of the matrix-product tiles (1 .. 13 tokens) and a given scale."""
    for t in range(1, 14):
        rng = np.random.default_rng(t)
        compare(make_layer(rng, lens=[t], dec=[3], bs=4, **ODD), scale=0.3)


def test_long_prefill():
    """A prefill of 300 tokens: the long panels of the matrix products (more than 8 rows)."""
    rng = np.random.default_rng(5)
    compare(make_layer(rng, lens=[300], dec=[0], bs=16, hidden=64, hq=4, hkv=2, d=16, inter=96))


@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    hkv=st.integers(1, 3),
    group=st.integers(1, 3),
    d=st.sampled_from([2, 6, 8, 12, 16]),
    hidden=st.integers(1, 48),
    inter=st.integers(1, 40),
    bs=st.integers(1, 8),
)
def test_hypothesis_batches(data, hkv, group, d, hidden, inter, bs):
    n = data.draw(st.integers(1, 4), label="requests")
    lens = data.draw(st.lists(st.integers(1, 6), min_size=n, max_size=n), label="lens")
    dec = data.draw(st.lists(st.integers(0, 20), min_size=n, max_size=n), label="dec")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    compare(
        make_layer(
            rng, lens=lens, dec=dec, bs=bs, hidden=hidden, hq=hkv * group, hkv=hkv, d=d, inter=inter
        )
    )


def test_empty_batch():
    rng = np.random.default_rng(2)
    batch = make_layer(rng, lens=[1], dec=[0], bs=4, **MHA)
    for n in ("hidden", "residual", "rope_cos", "rope_sin"):
        batch[n] = batch[n][:0]
    batch["cu_seqlens_q"] = np.zeros(2, np.int32)
    batch["batch_id_per_token"] = batch["batch_id_per_token"][:0]
    out, res, kc, vc = run_op(batch)
    assert out.shape == res.shape == (0, 24)
    assert_same(kc, batch["key_cache"], "key_cache")


# ----------------------------------------------------------------------------- bad input
def _bad(batch, **changes):
    b = {n: batch[n].copy() for n in NAMES}
    b.update(changes)
    return b


@pytest.mark.parametrize(
    "change,arg",
    [
        (
            lambda b: {"block_tables": np.where(b["block_tables"] >= 0, -1, -1).astype(np.int32)},
            "block_tables",
        ),
        (lambda b: {"block_tables": b["block_tables"][:, :1].copy()}, "block_tables"),
        (
            lambda b: {"seq_lens_decoder": np.full_like(b["seq_lens_decoder"], -1)},
            "seq_lens_decoder",
        ),
        (
            lambda b: {"batch_id_per_token": np.full_like(b["batch_id_per_token"], 5)},
            "batch_id_per_token",
        ),
    ],
    ids=["missing_block", "narrow_table", "negative_decoder", "bad_request_id"],
)
def test_bad_metadata_raises_naming_the_argument_and_writes_nothing(change, arg):
    rng = np.random.default_rng(3)
    batch = make_layer(rng, lens=[2, 3], dec=[6, 0], bs=4, **MHA)
    bad = _bad(batch, **change(batch))
    args = [to_paddle(bad[n]) for n in NAMES]
    with pytest.raises(ValueError, match=f"decoder_layer: {arg}"):
        ops.decoder_layer(*args, EPS)
    assert_same(args[11].numpy(), batch["key_cache"], "key_cache")
    assert_same(args[12].numpy(), batch["value_cache"], "value_cache")


@pytest.mark.parametrize(
    "name,value",
    [
        ("hidden", lambda b: b["hidden"].astype(np.float64)),
        ("residual", lambda b: b["residual"][:, :-1].copy()),
        ("input_norm_weight", lambda b: b["input_norm_weight"][:-1].copy()),
        ("q_weight", lambda b: b["q_weight"][:, :-1].copy()),  # with o_weight's rows to match
        ("k_weight", lambda b: np.concatenate([b["k_weight"]] * 2, axis=1)),
        ("v_weight", lambda b: b["v_weight"][:, :-2].copy()),
        ("o_weight", lambda b: b["o_weight"][:-1].copy()),
        ("gate_weight", lambda b: b["gate_weight"][:-1].copy()),
        ("up_weight", lambda b: b["up_weight"][:, :-1].copy()),
        ("down_weight", lambda b: b["down_weight"][:-1].copy()),
        ("rope_cos", lambda b: b["rope_cos"][:, :-1].copy()),
        ("rope_sin", lambda b: b["rope_sin"][:-1].copy()),
        ("cu_seqlens_q", lambda b: b["cu_seqlens_q"].reshape(-1, 1).copy()),
    ],
)
def test_shape_and_dtype_checks_name_the_argument(name, value):
    rng = np.random.default_rng(4)
    batch = make_layer(rng, lens=[2, 3], dec=[6, 0], bs=4, **MHA)
    changes = {name: value(batch)}
    # a tensor whose dims bind a later one's: change both, so the rule of the first is what fails
    if name == "q_weight":  # Hq * D columns with D not dividing them (o_weight agrees)
        changes["o_weight"] = batch["o_weight"][:-1].copy()
    if name == "k_weight":  # twice the caches' kv heads (v_weight agrees)
        changes["v_weight"] = np.concatenate([batch["v_weight"]] * 2, axis=1)
    if name == "rope_cos":  # not D / 2 columns (rope_sin agrees)
        changes["rope_sin"] = batch["rope_sin"][:, :-1].copy()
    bad = _bad(batch, **changes)
    args = [to_paddle(bad[n]) for n in NAMES]
    with pytest.raises(ValueError, match=f"decoder_layer: {name}"):
        ops.decoder_layer(*args, EPS)
    assert_same(args[11].numpy(), batch["key_cache"], "key_cache")


def test_negative_eps_is_refused():
    rng = np.random.default_rng(6)
    batch = make_layer(rng, lens=[1], dec=[0], bs=4, **MHA)
    with pytest.raises(ValueError, match="eps"):
        ops.decoder_layer(*[to_paddle(batch[n]) for n in NAMES], -1.0)


@pytest.mark.parametrize("threads", [2, 3])
def test_thread_count_does_not_change_the_bits(threads):
    """The work is split by columns of the matrix products and by (token, head) of the attention:
    every element is computed by the same code whichever thread runs it."""
    for lens, dec in (([1], [30]), ([5, 3, 9], [0, 12, 40]), ([130], [0])):
        rng = np.random.default_rng(sum(lens))
        batch = make_layer(rng, lens=lens, dec=dec, bs=8, **DEMO)
        one = run_op(batch)
        many = run_op(batch, num_threads=threads)
        for name, a, b in zip(("out", "residual_out", "key_cache", "value_cache"), many, one):
            assert_same(a, b, f"{name} with {threads} threads")


def test_bad_thread_count_is_named():
    rng = np.random.default_rng(7)
    batch = make_layer(rng, lens=[1], dec=[0], bs=4, **MHA)
    with pytest.raises(ValueError, match="num_threads"):
        ops.decoder_layer(*[to_paddle(batch[n]) for n in NAMES], EPS, num_threads=0)
