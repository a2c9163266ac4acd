"""Child process of tests/ops/test_fuzz.py: runs every bad-input case of one op and prints one JSON
line per case (``{"case", "outcome", "error", "message", "written_changed"}``), after a
``{"start": case}`` line, so that the parent can name the case a crash happened in.

    python tests/ops/fuzz_worker.py OP [--seed S] [--long]

Cases mutate one argument of a valid batch (fd_mtp.testing.op_inputs) at a time: a numpy array or
None in place of a tensor, another dtype, a strided view (same shape and values), one request too
few, an extra axis; for attributes, an int out of range and a value of the wrong type. ``--long``
adds random-permutation strided views (transposes, step slices, stride-0 broadcasts) at more batch
sizes.

Value mutations (``kind: "value"``) keep every argument well formed and set one element of one
tensor to an extreme value: for an int tensor its dtype's maximum, -1 and its minimum; for a float
tensor NaN and +inf (bfloat16 bit patterns for bfloat16). The worker also runs the numpy
reference (fd_mtp.reference) on numpy copies of the same mutated input and reports whether the
op's written and returned arrays equal the reference's (NaN equal to NaN). Fast mode mutates one
element per (tensor, value): a random row, among its first 16 columns; ``--long`` adds two
elements anywhere in the tensor, at every batch size.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import paddle  # noqa: E402

import fd_mtp  # noqa: E402,F401  (before paddle)
import fd_mtp.ops as ops  # noqa: E402
import fd_mtp.reference as ref  # noqa: E402
from fd_mtp import schema  # noqa: E402
from fd_mtp.testing.op_inputs import BUILDERS  # noqa: E402

WRONG_DTYPE = (
    np.float64
)  # no op takes float64: a wrong dtype for every tensor (unless it takes any)


def to_paddle(a, name):
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == np.uint16:  # bfloat16 bits
        return paddle.to_tensor(a, place=paddle.CPUPlace()).view(paddle.bfloat16)
    return paddle.to_tensor(a, place=paddle.CPUPlace())


def strided(a, kind="stack", bf16=False):
    """A non-contiguous paddle view holding the values of ``a`` (bfloat16 bits when ``bf16``), and
    its base tensor."""

    def tensor(x):
        t = paddle.to_tensor(np.ascontiguousarray(x), place=paddle.CPUPlace())
        return t.view(paddle.bfloat16) if bf16 else t

    if kind == "transpose" and a.ndim == 2:
        base = tensor(a.T)
        return base.t(), base
    if kind == "step" and a.ndim >= 1:
        base = tensor(np.repeat(a, 3, axis=0))
        return base[::3], base
    base = tensor(np.stack([a, a], axis=-1))
    return base[..., 0], base


def _is_bf16_bits(a):
    return isinstance(a, np.ndarray) and a.dtype == np.uint16


def _numpy(t):
    return t.view(paddle.uint16).numpy() if t.dtype == paddle.bfloat16 else t.numpy()


def snapshot(values, names):
    out = {}
    for n in names:
        v = values.get(n)
        if isinstance(v, paddle.Tensor):
            out[n] = _numpy(v).copy()
    return out


def cases(op, case, batch, long):
    """(case name, argument name, mutate(values) -> extra tensors to check unchanged)."""
    B = (  # bsz: the batch tensor's length (less its `add`: [B+1] is cu_seqlens_q's bsz + 1)
        int(np.asarray(case.args[case.names.index(op.batch)]).shape[0])
        - op.arg(op.batch).dims[0].add
        if op.batch in case.names
        else None
    )
    values = dict(zip(case.names, case.args)) | case.kwargs
    for t in op.tensors:
        if not isinstance(
            values.get(t.name), np.ndarray
        ):  # absent, None (optional) or a Python scalar
            continue

        def set_numpy(v, t=t):
            v[t.name] = v[t.name].numpy()

        yield f"{t.name}:numpy", t.name, set_numpy
        if not t.optional:

            def set_none(v, t=t):
                v[t.name] = None

            yield f"{t.name}:none", t.name, set_none

        def set_dtype(v, t=t):
            a = _numpy(v[t.name])
            v[t.name] = paddle.to_tensor(a.astype(WRONG_DTYPE), place=paddle.CPUPlace())

        if "any" not in t.dtypes:
            yield f"{t.name}:dtype", t.name, set_dtype
        # A view of at most one element is contiguous whatever its strides: nothing to refuse.
        kinds = (
            ()
            if values[t.name].size <= 1
            else ("stack", "transpose", "step")
            if long
            else ("stack",)
        )
        for kind in kinds:

            def set_strided(v, t=t, kind=kind):
                x = v[t.name]
                bf16 = x.dtype == paddle.bfloat16
                a = x.view(paddle.uint16).numpy() if bf16 else x.numpy()
                if kind == "transpose" and a.ndim != 2:
                    return []
                view, base = strided(a, kind, bf16)
                v[t.name] = view
                return [base]

            yield f"{t.name}:strided-{kind}", t.name, set_strided
        dims = t.dims or ()
        if dims and dims[0].lower_name == "B" and B:

            def set_short(v, t=t):
                v[t.name] = v[t.name][: B - 1].contiguous()

            yield f"{t.name}:short", t.name, set_short
        if dims and not (len(dims) == 1 and dims[0].name == "1") and dims[0].at_least is None:

            def set_rank(v, t=t):
                x = v[t.name]
                v[t.name] = (
                    paddle.stack([x, x, x], axis=-1)
                    if x.dtype != paddle.bfloat16
                    else x.unsqueeze(0)
                )

            yield f"{t.name}:rank", t.name, set_rank
    for a in op.attrs:
        name = a.python_name
        if name not in case.names and name not in case.kwargs:
            continue
        if a.type in ("int", "int64"):

            def set_big(v, name=name):
                v[name] = 2**64

            yield f"{name}:out-of-range", name, set_big

        def set_type(v, name=name, a=a):
            v[name] = 5 if a.type == "str" else "x"

        if a.type != "bool":
            yield f"{name}:type", name, set_type


def _int_values(dtype):
    info = np.iinfo(dtype)
    return (("max", info.max), ("-1", -1), ("min", info.min))


BF16_NAN, BF16_INF = 0x7FC0, 0x7F80  # bfloat16 bit patterns (arrays hold uint16 bits)
FLOAT_VALUES = (("nan", np.nan), ("inf", np.inf))


def value_cases(op, case, long):
    """(case name, argument name, mutate(numpy values)): one element of one tensor set to an
    extreme value (see the module docstring)."""
    values = dict(zip(case.names, case.args)) | case.kwargs
    for t in op.tensors:
        a = values.get(t.name)
        if not isinstance(a, np.ndarray) or a.size == 0:
            continue
        if a.dtype == np.uint16:  # bfloat16 bits
            kinds = (("nan", BF16_NAN), ("inf", BF16_INF))
        elif a.dtype in (np.int32, np.int64):
            kinds = _int_values(a.dtype)
        elif a.dtype.kind == "f":
            kinds = FLOAT_VALUES
        else:  # bool, uint8: every value is in range
            continue
        rng = np.random.default_rng(zlib.crc32(f"{op.name}:{t.name}".encode()))
        flat = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
        rows, cols = flat.shape
        positions = [int(rng.integers(rows)) * cols + int(rng.integers(min(cols, 16)))]
        if long:
            positions += [int(i) for i in rng.integers(a.size, size=2)]
        for kind, value in kinds:
            for pos in dict.fromkeys(positions):

                def mutate(v, t=t, pos=pos, value=value):
                    x = v[t.name].copy()
                    x.reshape(-1)[pos] = value
                    v[t.name] = x

                yield f"{t.name}:value-{kind}@{pos}", t.name, mutate


def _as_list(result):
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _comparable(x):
    """numpy float32 (bfloat16 bits widened) or the array itself."""
    if isinstance(x, paddle.Tensor):
        x = _numpy(x)
    x = np.asarray(x)
    if x.dtype == np.uint16:
        return (x.astype(np.uint32) << 16).view(np.float32)
    return x


def _same(a, b):
    a, b = _comparable(a), _comparable(b)
    if a.shape != b.shape and a.size == b.size:
        b = b.reshape(a.shape)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


def run_value_case(op, fn, reffn, case, mutate, written):
    """One value mutation: the op on paddle copies, the reference on numpy copies."""
    values = dict(zip(case.names, case.args)) | dict(case.kwargs)
    mutate(values)
    ref_values = {k: (x.copy() if isinstance(x, np.ndarray) else x) for k, x in values.items()}
    pd_values = {k: to_paddle(x, k) for k, x in values.items()}
    before = snapshot(pd_values, written)
    outcome, error, message, result = "ok", None, "", None
    try:
        result = fn(*[pd_values[n] for n in case.names], **{k: pd_values[k] for k in case.kwargs})
    except (ValueError, TypeError) as exc:
        outcome, error, message = "raised", type(exc).__name__, str(exc)
    except Exception as exc:  # noqa: BLE001  (reported: not a named error)
        outcome, error, message = "other", type(exc).__name__, str(exc)
    after = snapshot(pd_values, written)
    changed = [n for n in before if not _same(before[n], after[n])]
    ref_outcome, ref_message, mismatch = "ok", "", []
    try:
        ref_result = reffn(
            *[ref_values[n] for n in case.names], **{k: ref_values[k] for k in case.kwargs}
        )
    except (ValueError, TypeError) as exc:
        ref_outcome, ref_message = "raised", str(exc)
    except Exception as exc:  # noqa: BLE001
        ref_outcome, ref_message = "other", f"{type(exc).__name__}: {exc}"
    if outcome == "ok" and ref_outcome == "ok":
        mismatch = [n for n in written if not _same(pd_values[n], ref_values[n])]
        got, want = _as_list(result), _as_list(ref_result)
        if len(got) != len(want):
            mismatch.append(f"<returned: {len(got)} values, reference {len(want)}>")
        else:
            mismatch += [
                f"<returned {i}>" for i, (g, w) in enumerate(zip(got, want)) if not _same(g, w)
            ]
    return {
        "outcome": outcome,
        "error": error,
        "message": message[:300],
        "written_changed": changed,
        "ref_outcome": ref_outcome,
        "ref_message": ref_message[:300],
        "ref_mismatch": mismatch,
    }


def run(op_key, long):
    base_name = op_key.split("[")[0]
    op = schema.get(base_name)
    fn = getattr(ops, base_name)
    written = [t.name for t in op.tensors if t.role == "written"]
    for batch in (5, 1, 33) if long else (5,):
        case = BUILDERS[op_key](batch)
        bf16 = [a for a in list(case.args) + list(case.kwargs.values()) if _is_bf16_bits(a)]
        if bf16 and not hasattr(paddle, "uint16"):  # the parent skips the test (paddle 2.6)
            print(json.dumps({"skip": "uint16"}), flush=True)
            print(json.dumps({"done": True}), flush=True)
            return
        for name, arg, mutate in cases(op, case, batch, long):
            values = {n: to_paddle(x, n) for n, x in zip(case.names, case.args)}
            values.update({k: to_paddle(x, k) for k, x in case.kwargs.items()})
            print(json.dumps({"start": f"B={batch} {name}"}), flush=True)
            extra = mutate(values) or []
            before = snapshot(values, written)
            bases = [_numpy(b).copy() for b in extra]
            positional = [values[n] for n in case.names]
            kwargs = {k: values[k] for k in case.kwargs}
            outcome, error, message = "ok", None, ""
            try:
                fn(*positional, **kwargs)
            except (ValueError, TypeError) as exc:
                outcome, error, message = "raised", type(exc).__name__, str(exc)
            except Exception as exc:  # noqa: BLE001  (reported: not a named error)
                outcome, error, message = "other", type(exc).__name__, str(exc)
            after = snapshot(values, written)
            changed = [n for n in before if not np.array_equal(before[n], after[n])]
            changed += [
                f"base of {arg}" for b, x in zip(bases, extra) if not np.array_equal(b, _numpy(x))
            ]
            print(
                json.dumps(
                    {
                        "case": f"B={batch} {name}",
                        "kind": "bad",
                        "arg": arg,
                        "outcome": outcome,
                        "error": error,
                        "message": message[:300],
                        "written_changed": changed,
                    }
                ),
                flush=True,
            )
        reffn = getattr(ref, base_name)
        for name, arg, mutate in value_cases(op, case, long):
            print(json.dumps({"start": f"B={batch} {name}"}), flush=True)
            record = run_value_case(op, fn, reffn, case, mutate, written)
            record.update(case=f"B={batch} {name}", kind="value", arg=arg)
            print(json.dumps(record), flush=True)
    print(json.dumps({"done": True}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("op")
    p.add_argument("--long", action="store_true")
    args = p.parse_args()
    run(args.op, args.long)


if __name__ == "__main__":
    main()
