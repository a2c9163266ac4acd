"""paged_attention's CUDA kernel (fd_mtp.cuda.paged_attention, the raw module's binding) against the
numpy reference and, where paddle and the op library are there, the CPU op (the same C++ code).

The cache writes are copies: they must match exactly. The attention output is float32 arithmetic
whose rounding differs between the implementations: the numpy reference sums in float64, the CPU
driver in float32 without fused multiply-adds (the build's x86-64 baseline), nvcc contracts
``a * b + c`` into FMAs by default (fd_mtp's CUDA build keeps that default; the simt emulator
builds with -ffp-contract=off). So each output element is compared with a bound that holds for
any of these evaluations (the standard float32 bounds hold with or without FMA, which only
removes roundings), per (token, head), with u = 2^-24 and gamma(n) = n u / (1 - n u):

* a score s_p = scale * sum_d q_d k_pd (D products, four partial sums) is off by at most
  delta = scale * gamma(D + 2) * sum_d |q_d k_pd|;
* so a softmax weight exp(s_p - m) is off by a factor within exp(+-2 delta_max) and expf's own
  error (CUDA's expf: 2 ulp), eps_w = exp(2 delta_max) - 1 + 4u;
* the weighted mean of the v rows is then off by at most max|v| * 2 eps_w / (1 - eps_w) from the
  weights, plus max|v| * gamma(2 ctx + 4) from the float32 accumulation of the numerator and the
  denominator over ctx positions, the chunk rescales and the final division.
* the CUDA kernel splits the context over G = 4 partitions (custom_ops/cuda/paged_attention.cu) and
  merges them: a partition's weights carry one more factor exp(m_g - M), whose argument is rounded
  once (relative error u |m_g - M| <= 2 u max|s|) and whose expf adds 4u, so
  eps_w += (2 max|s| + 4) u; the merge's products and its sum of G terms add 2 G + 2 roundings to
  the accumulation: gamma(2 ctx + 4 + 2 G + 2).
"""

import numpy as np
import pytest
from gpu_util import skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing.builders.attention import (  # noqa: E402  (a packed batch, random caches)
    paged_attention_batch as make_batch,
)
from fd_mtp.testing.op_inputs import positional  # noqa: E402

U = 2.0**-24
GROUPS = 4  # the CUDA kernel's partitions of the context (kPagedGroups)


def gamma(n):
    return n * U / (1 - n * U)


ORDER = list(positional("paged_attention"))


def bound(args, kc, vc):
    """The per-element tolerance of the output (see the module doc), from the written caches."""
    q, tables = args["q"], args["block_tables"]
    tokens, hq, dim = q.shape
    hkv, bs = kc.shape[1], kc.shape[2]
    scale = 1.0 / np.sqrt(dim)
    cu, dec = args["cu_seqlens_q"], args["seq_lens_decoder"]
    tol = np.zeros((tokens, hq * dim))
    for t in range(tokens):
        b = int(args["batch_id_per_token"][t])
        pos = int(dec[b]) + t - int(cu[b])
        p = np.arange(pos + 1)
        blocks = tables[b, p // bs]
        for h in range(hq):
            g = h // (hq // hkv)
            keys = kc[blocks, g, p % bs, :].astype(np.float64)
            vals = vc[blocks, g, p % bs, :].astype(np.float64)
            delta = scale * gamma(dim + 2) * (np.abs(keys) @ np.abs(q[t, h].astype(np.float64)))
            smax = scale * np.abs(keys @ q[t, h].astype(np.float64)).max()
            eps_w = np.expm1(2 * delta.max()) + 4 * U + (2 * smax + 4) * U
            vmax = np.abs(vals).max(axis=0)
            tol[t, h * dim : (h + 1) * dim] = vmax * (
                2 * eps_w / (1 - eps_w) + gamma(2 * (pos + 1) + 4 + 2 * GROUPS + 2)
            )
    return tol


CASES = {
    "decode": ([1, 1, 1], [5, 17, 0]),
    "prefill": ([9, 3], [0, 4]),
    "mixed": ([4, 1, 7, 1, 2], [0, 30, 8, 63, 1]),
    # contexts over several iterations of the 4 x 32 partitions, uneven last chunks
    "long": ([1, 2, 1], [300, 517, 128]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_paged_attention_matches_the_reference(case):
    rng = np.random.default_rng(sorted(CASES).index(case))
    args = make_batch(rng, *CASES[case])
    host = {k: v.copy() for k, v in args.items()}
    dev = {k: cp.asarray(v) for k, v in args.items()}
    expected = ref.paged_attention(*[host[k] for k in ORDER])
    got = fcuda.paged_attention(*[dev[k] for k in ORDER])
    fcuda.check_pending()
    kc, vc = cp.asnumpy(dev["key_cache"]), cp.asnumpy(dev["value_cache"])
    np.testing.assert_array_equal(kc, host["key_cache"])  # copies: exact
    np.testing.assert_array_equal(vc, host["value_cache"])
    got = cp.asnumpy(got)
    tol = bound(args, kc, vc)
    err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    assert np.all(err <= tol), f"max excess {np.max(err - tol)} (max err {err.max()})"


@pytest.mark.parametrize("dim", [64, 160, 264])
def test_paged_attention_head_dims(dim):
    """Several dims per lane (64, 160: a partial last lane group) and, above 256, the
    per-(token, head) kernel."""
    rng = np.random.default_rng(dim)
    args = make_batch(rng, [1, 3, 1], [70, 9, 0], hq=2, hkv=1, dim=dim, block_size=16)
    host = {k: v.copy() for k, v in args.items()}
    dev = {k: cp.asarray(v) for k, v in args.items()}
    expected = ref.paged_attention(*[host[k] for k in ORDER])
    got = cp.asnumpy(fcuda.paged_attention(*[dev[k] for k in ORDER]))
    fcuda.check_pending()
    kc, vc = cp.asnumpy(dev["key_cache"]), cp.asnumpy(dev["value_cache"])
    np.testing.assert_array_equal(kc, host["key_cache"])
    np.testing.assert_array_equal(vc, host["value_cache"])
    err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    tol = bound(args, kc, vc)
    assert np.all(err <= tol), f"max excess {np.max(err - tol)} (max err {err.max()})"


def test_paged_attention_matches_the_cpu_op():
    """The CPU op runs the same C++ per-(token, head) function: within the same bound."""
    paddle = pytest.importorskip("paddle")
    try:
        import fd_mtp.ops as ops

        ops.load()
    except ImportError as exc:
        pytest.skip(f"the CPU op library is not built ({exc})")
    args = make_batch(np.random.default_rng(7), *CASES["mixed"])
    cpu = {k: paddle.to_tensor(v.copy()) for k, v in args.items()}
    dev = {k: cp.asarray(v) for k, v in args.items()}
    expected = ops.paged_attention(*[cpu[k] for k in ORDER]).numpy()
    got = cp.asnumpy(fcuda.paged_attention(*[dev[k] for k in ORDER]))
    fcuda.check_pending()
    kc = cpu["key_cache"].numpy()
    np.testing.assert_array_equal(cp.asnumpy(dev["key_cache"]), kc)
    tol = bound(args, kc, cpu["value_cache"].numpy())
    err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    assert np.all(err <= tol), f"max excess {np.max(err - tol)}"


def test_paged_attention_bad_block_id_raises_and_writes_nothing():
    args = make_batch(np.random.default_rng(3), [2, 3], [4, 9])
    args["block_tables"][1, 0] = args["key_cache"].shape[0] + 5
    dev = {k: cp.asarray(v) for k, v in args.items()}
    with fcuda.errors("checked"):
        with pytest.raises(ValueError, match=r"paged_attention: block_tables \(request 1\)"):
            fcuda.paged_attention(*[dev[k] for k in ORDER])
    np.testing.assert_array_equal(cp.asnumpy(dev["key_cache"]), args["key_cache"])
    np.testing.assert_array_equal(cp.asnumpy(dev["value_cache"]), args["value_cache"])


def test_paged_attention_bad_shape_raises_on_the_host():
    args = make_batch(np.random.default_rng(4), [2], [0])
    dev = {k: cp.asarray(v) for k, v in args.items()}
    dev["v"] = dev["v"][:, :1].copy()
    with pytest.raises(ValueError, match="paged_attention: v"):
        fcuda.paged_attention(*[dev[k] for k in ORDER])


def test_paged_attention_deferred_error_raises_at_check_pending():
    """Deferred mode: the bad launch returns, writes nothing (the caches keep their rows) and the
    next check names the op, the argument and the request."""
    args = make_batch(np.random.default_rng(5), [2, 3], [4, 9])
    args["block_tables"][1, 0] = -7
    dev = {k: cp.asarray(v) for k, v in args.items()}
    with fcuda.errors("deferred"):
        fcuda.paged_attention(*[dev[k] for k in ORDER])
        np.testing.assert_array_equal(cp.asnumpy(dev["key_cache"]), args["key_cache"])
        np.testing.assert_array_equal(cp.asnumpy(dev["value_cache"]), args["value_cache"])
        with pytest.raises(ValueError, match=r"paged_attention: block_tables \(request 1\) holds "):
            fcuda.check_pending()
        fcuda.check_pending()
