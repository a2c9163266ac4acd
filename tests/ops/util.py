"""Helpers for op tests: build batches from lists, run an op and its reference on
copies of the same arrays, and compare with readable mismatch reports."""

from __future__ import annotations

import numpy as np
import pytest

from fd_mtp.ops import _paddle_compat

BATCH_GRID = (1, 7, 33, 99, 257, 600)  # odd sizes, and above upstream's 512 cap


def uint16_skip_reason() -> str:
    import paddle

    return (
        "needs paddle.uint16 (the bit views of bfloat16 tensors these tests compare exactly), "
        f"which paddle 3.x has and paddle {paddle.__version__} does not"
    )


def skip_on_paddle_2(reason: str) -> None:
    """Skips the calling test on paddle 2.x (2.6: the Paddle GPU build of make test) for a
    behaviour of that version the test cannot work around, named in ``reason``."""
    if (0, 0) < _paddle_compat.version() < (3, 0):
        import paddle

        pytest.skip(f"paddle {paddle.__version__}: {reason}")


def skip_without_uint16() -> None:
    """Skips the calling test (named reason) on a paddle without ``paddle.uint16`` (2.6: the
    Paddle GPU build of make test); every test that views bfloat16 bits goes through here."""
    if not _paddle_compat.has_uint16():
        pytest.skip(uint16_skip_reason())


def i32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def flags(values) -> np.ndarray:
    return np.asarray(values, dtype=bool)


def ragged(rows: list[list[int]], width: int, fill: int = -1, dtype=np.int64) -> np.ndarray:
    """A [len(rows), width] array from ragged rows, padded with `fill`."""
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def to_paddle(value):
    """numpy array -> paddle CPU tensor (other values pass through)."""
    import paddle

    if isinstance(value, np.ndarray):
        return paddle.to_tensor(value, place=paddle.CPUPlace())
    return value


def to_numpy(value):
    import paddle

    if isinstance(value, paddle.Tensor):
        if value.dtype == paddle.bfloat16:
            skip_without_uint16()
            return value.view(paddle.uint16).numpy()
        return value.numpy()
    return value


def run_both(op, ref, args: list, **kwargs):
    """Run `op` on paddle copies and `ref` on numpy copies of `args`.

    Returns (op_args_after, ref_args_after, op_result, ref_result), all numpy.
    """
    ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    op_args = [to_paddle(a) for a in args]
    op_result = op(*op_args, **kwargs)
    ref_result = ref(*ref_args, **kwargs)
    return ([to_numpy(a) for a in op_args], ref_args, to_numpy(op_result), ref_result)


def assert_same(actual, expected, name: str = "array") -> None:
    """Exact equality (NaN equal to NaN) with a report of shape and the first mismatches."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {actual.shape} != expected {expected.shape}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{name}: dtype {actual.dtype} != expected {expected.dtype}")
    differ = actual != expected
    if actual.dtype.kind in "fc":  # NaN == NaN (same positions): only real differences count
        differ &= ~(np.isnan(actual) & np.isnan(expected))
    diff = np.argwhere(differ)
    if diff.size:
        shown = ", ".join(
            f"{tuple(int(i) for i in idx)}: {actual[tuple(idx)]!r} != {expected[tuple(idx)]!r}"
            for idx in diff[:5]
        )
        raise AssertionError(f"{name}: {len(diff)} mismatches (got != expected): {shown}")


def expect_fields(out: dict, **fields) -> None:
    """Each named array of ``out`` equals ``fields[name]`` (lists, in its dtype and shape)."""
    for n, v in fields.items():
        assert_same(out[n], np.asarray(v, dtype=out[n].dtype).reshape(out[n].shape), n)


def assert_all_same(op_args, ref_args, names) -> None:
    for a, e, n in zip(op_args, ref_args, names):
        if isinstance(e, np.ndarray):
            assert_same(a, e, n)


def grid_and_property(check, batch, *, grid_seed: int, max_n: int):
    """An op's odd-size grid and its Hypothesis test over a random batch builder, as the two test
    functions a module binds to ``test_grid`` / ``test_property``: ``check(batch(rng, n))`` for
    every n of BATCH_GRID (rng seeded ``grid_seed + n``), and for any n in [0, max_n] and any seed."""
    from hypothesis import given
    from hypothesis import strategies as st

    @pytest.mark.parametrize("n", BATCH_GRID)
    def grid(n):
        check(batch(np.random.default_rng(grid_seed + n), n))

    @given(st.integers(0, max_n), st.integers(0, 2**32 - 1))
    def prop(n, seed):
        check(batch(np.random.default_rng(seed), n))

    return grid, prop


def replaced(d: dict, name: str, value) -> dict:
    """``d`` (arrays by argument name) with ``name`` set to ``value``: ``d`` itself, changed."""
    d[name] = value
    return d


class OpPair:
    """The hand-case harness of one op whose arguments a test keeps in a dict by name: the op and
    its numpy reference (same name in fd_mtp.ops / fd_mtp.reference) run on copies of the same
    arrays and must agree exactly; expected values are given as lists, shaped like the input.

    ``names``: the array arguments in positional order (default: every positional argument of the
    op's schema); ``matrices``: the 2-D ones given as ragged rows, padded with ``fill.get(name,
    -1)``; anything else is reshaped to its input's shape."""

    def __init__(self, op: str, names=None, matrices=(), fill=None):
        from fd_mtp.testing.op_inputs import positional

        self.op = op
        self.names = tuple(positional(op) if names is None else names)
        self.matrices = tuple(matrices)
        self.fill = dict(fill or {})

    def as_like(self, template, values, name):
        """``values`` (lists) as an array of ``template``'s dtype and shape (ragged rows for a
        matrix)."""
        if name in self.matrices:
            fill = self.fill.get(name, -1)
            return ragged(values, template.shape[1], fill=fill, dtype=template.dtype)
        return np.asarray(values, dtype=template.dtype).reshape(template.shape)

    def wrong_rank(self, a, name):
        """``a`` with one axis too many: a matrix ``[n, m] -> [n, m, 1]``, a vector ``[n] ->
        [n, 2]``."""
        if name in self.matrices:
            return a.reshape(a.shape[0], -1, 1)
        return np.repeat(a.reshape(-1, 1), 2, axis=1)

    @staticmethod
    def wrong_dtype(a):
        """``a`` in a dtype the op refuses: float32 (int32 for a float32 array)."""
        return a.astype(np.int32 if a.dtype == np.float32 else np.float32)

    @staticmethod
    def shape_cases(dtype=(), rank=(), rows=()):
        """The ``kind, name`` cases of `expect_shape_error`: a wrong dtype for each argument named in
        ``dtype``, one axis too many for each in ``rank``, too few requests for each in ``rows``."""
        kinds = (("dtype", dtype), ("rank", rank), ("rows", rows))
        return [pytest.param(k, n, id=f"{k}-{n}") for k, names in kinds for n in names]

    def expect_shape_error(self, d, kind, name, rows, expect_error=None):
        """``d`` with argument ``name`` in a wrong dtype (`wrong_dtype`), of a wrong rank
        (`wrong_rank`) or of only its first ``rows`` requests (``kind``): the op raises ValueError
        naming it and writes nothing (``expect_error(d, name)``, default `expect_error`)."""
        a = d[name]
        bad = {
            "dtype": lambda: self.wrong_dtype(a),
            "rank": lambda: self.wrong_rank(a, name),
            "rows": lambda: a[:rows].copy(),
        }[kind]()
        (expect_error or self.expect_error)(replaced(d, name, bad), name)

    def set_fields(self, d, **fields):
        """``d`` with the named arrays replaced by ``fields`` (lists, see `as_like`)."""
        for name, values in fields.items():
            d[name] = self.as_like(d[name], values, name)
        return d

    def run(self, d, extra=(), **kwargs) -> dict:
        """Runs op and reference on copies of ``d``'s arrays (then the positional ``extra``, then
        ``kwargs``); asserts that every array agrees exactly; returns the op's arrays by name."""
        import fd_mtp.ops as ops
        import fd_mtp.reference as reference

        args = [d[n] for n in self.names] + list(extra)
        op_after, ref_after, _, _ = run_both(
            getattr(ops, self.op), getattr(reference, self.op), args, **kwargs
        )
        for name, a, e in zip(self.names, op_after, ref_after):
            assert_same(a, e, f"{name} (op vs reference)")
        return dict(zip(self.names, op_after))

    def check(self, d, expected: dict, extra=(), **kwargs) -> dict:
        """`run`, then the op's arrays equal ``expected`` (lists) on the named arrays and every
        other array is unchanged; returns the op's arrays by name."""
        got = self.run(d, extra, **kwargs)
        self.assert_expected(got, d, expected)
        return got

    def assert_expected(self, got: dict, d, expected: dict) -> None:
        """``got`` equals ``expected`` (lists) where named and ``d`` elsewhere."""
        for name in self.names:
            want = self.as_like(d[name], expected[name], name) if name in expected else d[name]
            assert_same(got[name], want, name)

    def expect_args_error(self, args, name, extra=(), data=False) -> None:
        """`expect_error` with the array arguments as a list ``args`` in ``names``' order."""
        self.expect_error(dict(zip(self.names, args, strict=True)), name, data=data, extra=extra)

    def expect_replaced_error(self, args, bad, extra=(), data=False) -> None:
        """`expect_args_error` on ``args`` with one replaced: ``bad`` is ``(index, value, name)``;
        the op (``data``: the reference too) raises ValueError naming ``name``, writes nothing."""
        index, value, name = bad
        args = list(args)
        args[index] = value
        self.expect_args_error(args, name, extra, data)

    def expect_error(self, d, name, data=False, extra=(), **kwargs) -> None:
        r"""The op raises ValueError ``"<op>: <name>"`` and writes none of ``d``'s arrays; for a
        data error (``data``) the reference too (it assumes valid shapes and dtypes, and checks
        data like the op). ``name`` is a regular expression: an argument's name, or the start of
        the message (``r"accept_num \(request 0\) is 3"``)."""
        import fd_mtp.ops as ops
        import fd_mtp.reference as reference

        pattern = rf"{self.op}: {name}(?!\w)"
        op_args = [to_paddle(d[n]) for n in self.names]
        with pytest.raises(ValueError, match=pattern):
            getattr(ops, self.op)(*op_args, *extra, **kwargs)
        for arg_name, t in zip(self.names, op_args):
            assert_same(to_numpy(t), d[arg_name], f"{arg_name} written despite the error")
        if not data:
            return
        ref_args = [d[n].copy() for n in self.names]
        with pytest.raises(ValueError, match=pattern):
            getattr(reference, self.op)(*ref_args, *extra, **kwargs)
        for arg_name, a in zip(self.names, ref_args):
            assert_same(a, d[arg_name], f"{arg_name} written by the reference despite the error")
