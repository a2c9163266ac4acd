"""Child process of tests/ops/test_fuzz.py: runs every bad-input case of one op and prints one JSON
line per case (``{"case", "outcome", "error", "message", "written_changed"}``), after a
``{"start": case}`` line, so that the parent can name the case a crash happened in.

    python tests/ops/fuzz_worker.py OP [--seed S] [--long]

Cases mutate one argument of a valid batch (fd_mtp.testing.op_inputs) at a time: a numpy array or
None in place of a tensor, another dtype, a strided view (same shape and values), one request too
few, an extra axis; for attributes, an int out of range and a value of the wrong type. ``--long``
adds random-permutation strided views (transposes, step slices, stride-0 broadcasts) at more batch
sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import paddle  # noqa: E402

import fd_mtp  # noqa: E402,F401  (before paddle)
import fd_mtp.ops as ops  # noqa: E402
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
    B = (
        int(np.asarray(case.args[case.names.index(op.batch)]).shape[0])
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


def run(op_key, long):
    base_name = op_key.split("[")[0]
    op = schema.get(base_name)
    fn = getattr(ops, base_name)
    written = [t.name for t in op.tensors if t.role == "written"]
    for batch in (5, 1, 33) if long else (5,):
        case = BUILDERS[op_key](batch)
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
                        "arg": arg,
                        "outcome": outcome,
                        "error": error,
                        "message": message[:300],
                        "written_changed": changed,
                    }
                ),
                flush=True,
            )
    print(json.dumps({"done": True}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("op")
    p.add_argument("--long", action="store_true")
    args = p.parse_args()
    run(args.op, args.long)


if __name__ == "__main__":
    main()
