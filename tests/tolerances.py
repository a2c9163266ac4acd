"""Float tolerances derived from the arithmetic, for tests that compare float32 results.

A tolerance here is a bound on float32 rounding error computed from the inputs of the
comparison, never one machine's observed difference: the tests must pass on any x86-64 CPU
(Intel or AMD, with or without AVX-512, MKL on either code path, any thread count).

Model of the arithmetic (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.):

* ``U = 2**-24`` is the unit roundoff of float32: a correctly rounded ``+ - * /`` (and an FMA)
  returns ``(x op y)(1 + d)`` with ``|d| <= U``; ``gamma(n) = n U / (1 - n U)`` bounds ``n``
  such factors in a chain (Lemma 3.1).
* A dot product of length ``n`` summed in *any* order (SIMD width, blocking, FMA or not, so
  MKL's AVX-512 and AVX2 kernels, OpenBLAS, numpy and a plain loop alike) satisfies
  ``|fl(a.b) - a.b| <= gamma(n) sum_i |a_i b_i|`` (eq. 3.5). So two code paths may disagree in
  the low bits and a cross-path comparison needs such a bound, not exact equality.
* exp, log, sin, cos, pow, rsqrt, sigmoid are not correctly rounded and differ between glibc,
  numpy's SIMD loops (separate AVX-512 and AVX2 implementations), Eigen and MKL:
  :data:`FUNC_ULPS` (4 ulp) covers the documented accuracy of each, i.e. a relative error of at
  most :data:`FUNC_REL` ``= 2 * FUNC_ULPS * U`` (one ulp of ``x`` is at most ``2 U |x|``).

Single operations (a matmul, one attention head, a RoPE rotation) get worst-case bounds
(:func:`matmul_error_bound`, :func:`attention_error_bound`, :func:`rope_error_bound`).
Through a whole network, worst-case bounds multiply layer by layer (|W| in place of W) and
become useless after a few layers; there :class:`Float32Noise` gives the probabilistic bound of
Higham & Mary (SIAM J. Sci. Comput. 41(5), 2019): the float32 result differs from the exact one
by ``sum_k J_k d_k`` (``J_k`` the network's sensitivity to op ``k``'s rounding error ``d_k``,
``|d_k| <= D_k`` the op's worst-case bound above); with the ``d_k`` independent and of mean zero,
Hoeffding's inequality gives ``P(|err| > lam sigma) <= 2 exp(-lam**2 / 2)`` where
``sigma**2 = sum_k J_k**2 D_k**2``. ``sigma`` is measured by evaluating the network in float64
with every op's result perturbed by ``+-D_k`` (random signs): the spread of those evaluations
is ``sigma`` (first order), computed from the actual weights and inputs.
"""

from __future__ import annotations

import math

import numpy as np

#: float32 unit roundoff
U = 2.0**-24
#: accuracy assumed of a float32 transcendental function (exp, sin, cos, pow, rsqrt, sigmoid)
FUNC_ULPS = 4
#: the same as a relative error
FUNC_REL = 2 * FUNC_ULPS * U


def gamma(n, u: float = U):
    """``n u / (1 - n u)``: relative error bound of ``n`` roundings in a chain (a length-``n``
    dot product in any summation order). ``n`` may be an array."""
    n = np.asarray(n, np.float64)
    return n * u / (1.0 - n * u)


def matmul_error_bound(a, b, extra: int = 0):
    """Elementwise bound on ``|fl32(a @ b) - a @ b|`` for float32 inputs ``a [.., m, n]``,
    ``b [.., n, p]`` (batched like ``np.matmul``): ``gamma(n + extra) * (|a| @ |b|)``, whatever the
    summation order (Higham eq. 3.5). ``extra`` counts further roundings of the result (a bias
    add, a scale)."""
    a = np.abs(np.asarray(a, np.float64))
    b = np.abs(np.asarray(b, np.float64))
    return gamma(a.shape[-1] + extra) * (a @ b)


def softmax_rounding_rel(n, max_gap):
    """Relative error bound of every weight of a float32 softmax over ``n`` entries whose largest
    ``max - x`` is ``max_gap``, either a plain softmax (``x - max``, exp, sum, divide) or the
    online form of the paged-attention kernel (running max, up to ``n`` rescales of the sum and
    accumulator by ``exp(m_old - m_new)``): the subtraction costs ``U |x - max|`` in the exponent
    (the rescales' subtractions add up to at most ``max_gap`` more), each exp and its product
    ``FUNC_REL + U`` (``n + 1`` of them), the sum ``gamma(n)``, the division ``2 U``, and the
    weight's numerator and the denominator both carry these (factor 2)."""
    n = np.asarray(n, np.float64)
    return (
        2 * (2 * U * np.asarray(max_gap, np.float64) + (n + 1) * (FUNC_REL + U)) + gamma(n) + 2 * U
    )


def softmax_perturbation_rel(err, axis=-1):
    """Relative change bound of ``softmax(x)`` when every ``x_j`` moves by at most ``err_j``:
    ``p~_j / p_j = exp(d_j) / sum_k p_k exp(d_k)`` lies in ``exp(+-(err_j + max_k err_k))``, so
    ``|p~_j - p_j| <= p_j * expm1(err_j + max_k err_k)`` (exact, not first order)."""
    err = np.asarray(err, np.float64)
    return np.expm1(err + np.max(err, axis=axis, keepdims=True))


def attention_error_bound(q, k, v, scale):
    """Bound on ``|fl32(attention) - attention|`` for one query row and head: ``q [D]``, the
    context keys / values ``k, v [n, D]`` (float32 values, exact inputs), softmax over
    ``scale * k @ q``, output ``softmax @ v`` ``[D]``. Scores: ``gamma(D + 2)`` on ``|k| @ |q|``
    (dot product, the float32 scale and its product); weights: :func:`softmax_perturbation_rel`
    of those plus :func:`softmax_rounding_rel`; output: the weights' errors times ``|v|`` plus
    ``gamma(2 n + 1)`` for the weighted sum (a product and a sum per term, the final scaling)."""
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    v = np.asarray(v, np.float64)
    n = k.shape[0]
    s = scale * (k @ q)
    p = np.exp(s - s.max())
    p /= p.sum()
    e = gamma(q.shape[-1] + 2) * scale * (np.abs(k) @ np.abs(q))
    pert = softmax_perturbation_rel(e)
    rel = pert + softmax_rounding_rel(n, s.max() - s.min()) * (1 + pert)
    dp = p * rel
    return dp @ np.abs(v) + gamma(2 * n + 1) * ((p + dp) @ np.abs(v))


# --------------------------------------------------------------------------- RoPE
def rope_inv_freq64(head_dim: int, theta: float):
    """Exact (float64) RoPE frequencies ``theta ** (-2i / head_dim)``, ``i < head_dim / 2``."""
    return float(theta) ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def rope_angles64(positions, head_dim: int, theta: float):
    """``[T, D/2]`` float64 angles ``pos * theta ** (-2i / D)`` (error ~1e-16 relative)."""
    return np.asarray(positions, np.float64)[:, None] * rope_inv_freq64(head_dim, theta)[None, :]


def rope_truth64(x, positions, theta: float):
    """Interleaved RoPE of ``x [T, H, D]`` in float64: pair ``(x[2i], x[2i+1])`` of token t rotated
    by angle ``pos_t * theta ** (-2i / D)``: ``(a cos - b sin, a sin + b cos)``."""
    x = np.asarray(x, np.float64)
    ang = rope_angles64(positions, x.shape[-1], theta)[:, None, :]  # [T, 1, D/2]
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def rope_angle_error_bound(positions, head_dim: int, theta: float):
    """``[T, D/2]`` bound on the error of a float32 RoPE angle, and so (|d cos|, |d sin| <= |d angle|)
    of its cos / sin, before their own evaluation error.

    float32 computes ``a_i = fl(fl(pos) * 1 / theta ** fl(2i / D))`` (numpy's ``**`` or Paddle's,
    possibly as ``exp(e * log(theta))``): ``fl(pos)`` is exact (|pos| < 2**24); the rounded
    exponent ``e_i (1 + d)``, a rounded ``log(theta)`` (``FUNC_REL``) and the product
    (``U``) change ``theta ** -e_i`` by a relative ``e_i ln(theta) (2 U + FUNC_REL)``; pow / exp
    itself ``FUNC_REL``, the reciprocal ``U``, the product with pos ``U``. So the relative error
    of the angle is ``rho_i = e_i ln(theta) (2U + FUNC_REL) + FUNC_REL + 2U`` and its absolute
    error ``|pos| theta**-e_i rho_i``: it grows with the position (0.08 rad at pos 131071, i = 0;
    float32 numbers near 1.3e5 are 2**-7 apart, so no float32 angle there is better than 0.004)."""
    positions = np.asarray(positions, np.float64)
    assert np.all(np.abs(positions) < 2**24), "positions must be exact in float32"
    e = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    rho = e * math.log(theta) * (2 * U + FUNC_REL) + FUNC_REL + 2 * U
    return np.abs(rope_angles64(positions, head_dim, theta)) * rho[None, :]


def rope_error_bound(x, positions, theta: float):
    """``[T, H, D]`` bound on ``|fl32 RoPE(x) - rope_truth64(x)|`` for float32 ``x [T, H, D]``, any
    of the float32 forms (elementwise ``x cos + swap(x) signed_sin``, the per-token rotation
    matmul whose other ``D - 2`` terms are exact zeros, the pairwise oracle).

    cos / sin are off by :func:`rope_angle_error_bound` plus their evaluation error
    (``FUNC_ULPS`` ulp of a value in [-1, 1], at most ``2 FUNC_ULPS U`` absolute); the output
    ``a cos - b sin`` adds two products and a sum, ``gamma(2) (|a cos| + |b sin|)``."""
    x = np.asarray(x, np.float64)
    ang = rope_angles64(positions, x.shape[-1], theta)[:, None, :]
    dtrig = rope_angle_error_bound(positions, x.shape[-1], theta)[:, None, :] + 2 * FUNC_ULPS * U
    a, b = np.abs(x[..., 0::2]), np.abs(x[..., 1::2])
    c, s = np.abs(np.cos(ang)), np.abs(np.sin(ang))
    out = np.empty_like(x)
    out[..., 0::2] = (a + b) * dtrig + gamma(2) * (a * c + b * s)
    out[..., 1::2] = (a + b) * dtrig + gamma(2) * (a * s + b * c)
    return out


# --------------------------------------------------------------------------- probabilistic bound
#: Hoeffding multiplier of the probabilistic bound: ``2 exp(-6**2 / 2) = 3e-8`` per element under
#: the model, times 5/3 for the sampling error of sigma measured from :data:`NOISE_SAMPLES`
#: samples (pooled over each row, see :meth:`Float32Noise.bound`).
LAMBDA = 10.0
#: perturbed float64 evaluations that measure sigma
NOISE_SAMPLES = 16


class Float32Noise:
    """A float64 evaluation standing for float32 arithmetic, with a leading sample axis.

    Sample 0 is exact (the float64 truth); samples ``1..K`` perturb every op's result by
    ``+-bound`` (random signs, a fixed seed: the same on every machine), ``bound`` being that op's
    worst-case float32 rounding error. Write the computation with arrays ``[K + 1, ...]``
    (:meth:`lift` an exact input) and pass every op's result through :meth:`round`; then
    :meth:`bound` turns the spread of the samples into the probabilistic error bound.
    """

    def __init__(self, samples: int = NOISE_SAMPLES, seed: int = 0):
        self.samples = int(samples)
        self.rng = np.random.default_rng(seed)

    def lift(self, value):
        """An exact input (float32 data, weights) broadcast to ``[K + 1, ...]`` float64."""
        value = np.asarray(value, np.float64)
        return np.broadcast_to(value, (self.samples + 1,) + value.shape).copy()

    def round(self, value, bound):
        """``value`` (``[K + 1, ...]``) with sample k >= 1 moved by ``+-bound`` (elementwise signs)."""
        sign = np.where(self.rng.random(value.shape) < 0.5, -1.0, 1.0)
        sign[0] = 0.0
        return value + sign * np.broadcast_to(bound, value.shape)

    @staticmethod
    def bound(value, lam: float = LAMBDA):
        """``(truth, bound)`` of a ``[K + 1, ..., n]`` result: ``truth = value[0]``; ``bound =
        lam * max(sigma_i, sigma_row)``, ``sigma_i`` the root mean square deviation of the samples
        of element i and ``sigma_row`` that of its row (the last axis: a hidden-state row, whose
        elements share the errors of their norm and projections), which steadies an estimate
        from few samples."""
        value = np.asarray(value, np.float64)
        dev2 = (value[1:] - value[0]) ** 2
        sigma = np.sqrt(dev2.mean(axis=0))
        row = np.sqrt(dev2.mean(axis=(0, -1)))[..., None] if value.ndim > 1 else sigma
        return value[0], lam * np.maximum(sigma, row)


def assert_within(got, want, bound, what: str = "") -> None:
    """``|got - want| <= bound`` elementwise (shapes equal), reporting the worst element as the
    ratio of its error to its bound."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if not got.size:
        return
    bound = np.broadcast_to(np.asarray(bound, np.float64), got.shape)
    err = np.abs(got - want)
    ratio = np.nan_to_num(err / np.maximum(bound, np.finfo(np.float64).tiny), nan=np.inf)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), got.shape))
    assert np.all(err <= bound), (
        f"{what}: |got - want| = {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst} "
        f"(got {got[worst]!r}, want {want[worst]!r}; {int((err > bound).sum())} of "
        f"{err.size} elements out of bound)"
    )
