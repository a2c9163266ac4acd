"""fd_mtp.ops.paged_attention (the float32 paged-attention kernel of the model's CPU backend) vs
the numpy loop reference, a hand case, and bad metadata (ValueError naming the argument, caches
untouched)."""

import numpy as np
import pytest
from tolerances import U, assert_within, attention_error_bound
from util import assert_same, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as ref
from fd_mtp.ops import _loader
from fd_mtp.testing.builders.attention import paged_attention_batch
from fd_mtp.testing.op_inputs import positional


def make_batch(rng, *, lens, dec, d, bs, **kw):
    """Random q/k/v and caches (fd_mtp.testing's paged_attention_batch, head size ``d``, block
    size ``bs``); every request gets shuffled (non-contiguous) block ids, the table has a spare
    column of -1, and ``extra_rows`` unused table rows follow the batch."""
    return paged_attention_batch(rng, lens, dec, dim=d, block_size=bs, spare_columns=1, **kw)


NAMES = tuple(positional("paged_attention"))


def run_op(batch, **kw):
    args = [to_paddle(batch[n].copy()) for n in NAMES]
    out = ops.paged_attention(*args, **kw)
    return out.numpy(), args[3].numpy(), args[4].numpy()


def run_ref(batch, **kw):
    a = {n: batch[n].copy() for n in NAMES}
    out = ref.paged_attention(*[a[n] for n in NAMES], **kw)
    return out, a["key_cache"], a["value_cache"]


def error_bound(batch, key_cache, value_cache, want, scale=None):
    """``[T, Hq * D]`` bound on ``|kernel - reference|``: the reference computes in float64, the
    kernel in float32, so per (token, head) the float32 attention bound
    (tolerances.attention_error_bound: scores gamma(D + 2) |q| . |k|, softmax rounding over the
    context length, weighted sum gamma(2n + 1)) over that token's context read from the written
    caches, plus U |want| for the reference's float64 result stored as float32."""
    q = batch["q"]
    t_count, hq, d = q.shape
    g = hq // key_cache.shape[1]
    bs = key_cache.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    cu, bid, dec, bt = (
        batch[n] for n in ("cu_seqlens_q", "batch_id_per_token", "seq_lens_decoder", "block_tables")
    )
    bound = np.zeros((t_count, hq * d))
    for t in range(t_count):
        b = bid[t]
        p = np.arange(dec[b] + t - cu[b] + 1)
        blocks = bt[b, p // bs]
        for h in range(hq):
            k, v = key_cache[blocks, h // g, p % bs], value_cache[blocks, h // g, p % bs]
            bound[t, h * d : (h + 1) * d] = attention_error_bound(q[t, h], k, v, scale)
    return bound + U * np.abs(want)


def compare(batch, **kw):
    out, kc, vc = run_op(batch, **kw)
    want, kc_ref, vc_ref = run_ref(batch, **kw)
    assert_same(kc, kc_ref, "key_cache")
    assert_same(vc, vc_ref, "value_cache")
    assert_within(
        out, want, error_bound(batch, kc_ref, vc_ref, want, kw.get("scale")), "paged_attention out"
    )
    return out


def test_hand_case_two_tokens_one_head():
    # q = k = ones: both positions score alike, so token 1 averages v of positions 0 and 1
    i32 = lambda x: np.array(x, np.int32)  # noqa: E731
    batch = dict(
        q=np.ones((2, 1, 2), np.float32),
        k=np.ones((2, 1, 2), np.float32),
        v=np.array([[[1, 2]], [[3, 4]]], np.float32),
        key_cache=np.zeros((2, 1, 2, 2), np.float32),
        value_cache=np.zeros((2, 1, 2, 2), np.float32),
        block_tables=i32([[1, -1]]),
        cu_seqlens_q=i32([0, 2]),
        batch_id_per_token=i32([0, 0]),
        seq_lens_decoder=i32([0]),
    )
    out, kc, vc = run_op(batch)
    assert_same(out, np.array([[1, 2], [2, 3]], np.float32), "out")
    assert_same(vc, np.array([[[[0, 0], [0, 0]]], [[[1, 2], [3, 4]]]], np.float32), "value_cache")
    assert_same(kc[0], np.zeros((1, 2, 2), np.float32), "key_cache block 0 (untouched)")


@pytest.mark.parametrize("bs", [1, 3, 16])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 1)])
def test_mixed_prefill_decode_batches_match_reference(bs, hq, hkv):
    rng = np.random.default_rng(bs * 100 + hq * 10 + hkv)
    # prefill from empty, prefill chunk on a cached prefix, decodes, a speculative decode, an idle slot
    batch = make_batch(
        rng,
        lens=[5, 4, 1, 1, 3, 0, 1],
        dec=[0, 7, 9, 0, 20, 4, 33],
        hq=hq,
        hkv=hkv,
        d=8,
        bs=bs,
        extra_rows=2,
    )
    compare(batch)


def test_explicit_scale_and_odd_head_dim():
    rng = np.random.default_rng(5)
    batch = make_batch(rng, lens=[3, 1], dec=[2, 11], hq=2, hkv=1, d=7, bs=3)
    compare(batch, scale=0.3)


def test_large_batch_above_512_tokens():
    rng = np.random.default_rng(7)
    lens = [1] * 600 + [40]
    dec = list(rng.integers(0, 30, 600)) + [10]
    batch = make_batch(rng, lens=lens, dec=dec, hq=2, hkv=1, d=4, bs=16)
    compare(batch)


def test_empty_batch():
    rng = np.random.default_rng(0)
    batch = make_batch(rng, lens=[0, 0], dec=[3, 0], hq=2, hkv=1, d=4, bs=4)
    out, kc, _ = run_op(batch)
    assert out.shape == (0, 8)
    assert_same(kc, batch["key_cache"], "key_cache")


def test_registered_runner_writes_caches_in_place():
    rng = np.random.default_rng(3)
    batch = make_batch(rng, lens=[2, 1], dec=[0, 5], hq=2, hkv=1, d=4, bs=4)
    args = [to_paddle(batch[n].copy()) for n in NAMES]
    res = _loader.run_registered("paged_attention", *args, 0.5)
    out = res[0] if isinstance(res, (list, tuple)) else res
    want, kc_ref, vc_ref = run_ref(batch, scale=0.5)
    assert_within(
        out.numpy(), want, error_bound(batch, kc_ref, vc_ref, want, 0.5), "registered runner out"
    )
    assert_same(args[3].numpy(), kc_ref, "key_cache")
    assert_same(args[4].numpy(), vc_ref, "value_cache")


def _bad(batch, **changes):
    bad = {n: batch[n].copy() for n in NAMES}
    for name, fn in changes.items():
        fn(bad[name])
    return bad


@pytest.mark.parametrize(
    "case,arg",
    [
        ("block id too large", "block_tables"),
        ("block id -1 needed", "block_tables"),
        ("table too narrow", "block_tables"),
        ("request out of range", "batch_id_per_token"),
        ("negative decoder length", "seq_lens_decoder"),
    ],
)
def test_bad_metadata_raises_naming_the_argument_and_writes_nothing(case, arg):
    rng = np.random.default_rng(11)
    batch = make_batch(rng, lens=[3, 1, 2], dec=[0, 9, 4], hq=4, hkv=2, d=4, bs=4)
    nblocks = batch["key_cache"].shape[0]
    if case == "block id too large":
        batch["block_tables"][1, 1] = nblocks
    elif case == "block id -1 needed":
        batch["block_tables"][2, 0] = -1
    elif case == "table too narrow":
        batch["block_tables"] = np.ascontiguousarray(batch["block_tables"][:, :2])
    elif case == "request out of range":
        batch["batch_id_per_token"][5] = 3
    else:
        batch["seq_lens_decoder"][2] = -1
    for runner in (run_op, run_ref):
        args = [to_paddle(batch[n].copy()) for n in NAMES] if runner is run_op else None
        with pytest.raises(ValueError, match=arg):
            if runner is run_op:
                ops.paged_attention(*args)
            else:
                run_ref(batch)
        if args is not None:
            assert_same(args[3].numpy(), batch["key_cache"], "key_cache")
            assert_same(args[4].numpy(), batch["value_cache"], "value_cache")


def test_shape_and_dtype_checks_name_the_argument():
    rng = np.random.default_rng(1)
    batch = make_batch(rng, lens=[2], dec=[1], hq=4, hkv=2, d=4, bs=4)
    cases = {
        "q": batch["q"].astype(np.float64),
        "k": batch["k"][:, :1].repeat(3, axis=1),  # 3 kv heads do not divide 4
        "value_cache": batch["value_cache"][:, :, :2].copy(),
        "cu_seqlens_q": batch["cu_seqlens_q"].astype(np.int64),
        "batch_id_per_token": batch["batch_id_per_token"][:1].copy(),
    }
    for name, value in cases.items():
        args = [to_paddle(value if n == name else batch[n].copy()) for n in NAMES]
        with pytest.raises(ValueError, match=f"paged_attention: {name}"):
            ops.paged_attention(*args)


def test_docstring_example():
    import doctest

    import fd_mtp.ops.attention as mod

    result = doctest.testmod(mod, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_values_propagate_to_the_queries_that_attend_to_them(value):
    """NaN / inf are not inspected: a non-finite value of token 1 makes the outputs of the tokens
    that attend to it (1 and 2, causal) non-finite in op and reference; token 0 is unaffected."""
    rng = np.random.default_rng(5)
    batch = make_batch(rng, lens=[3], dec=[0], hq=2, hkv=1, d=4, bs=4)
    batch["v"][1, 0, 2] = value
    out, kc, vc = run_op(batch)
    want, kc_ref, vc_ref = run_ref(batch)
    assert np.array_equal(kc, kc_ref) and np.array_equal(vc, vc_ref, equal_nan=True)
    assert np.array_equal(np.isfinite(out), np.isfinite(want)), "same non-finite pattern"
    assert np.isfinite(out[0]).all() and not np.isfinite(out[1:]).all()
    finite = np.isfinite(want)
    np.testing.assert_allclose(out[finite], want[finite], rtol=1e-5, atol=1e-6)
