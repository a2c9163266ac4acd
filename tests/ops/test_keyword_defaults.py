"""Keyword defaults agree everywhere (issue 16): for every op of the schema, the Paddle wrapper
(fd_mtp.ops), the numpy reference (fd_mtp.reference) and the CuPy wrapper (fd_mtp.cuda) have the
same parameters with the same defaults, and a keyword left at its default resolves the same way in
each layer, with the environment variables behind it set and unset: the op run with the default
equals the op run with the value `fd_mtp.schema.resolve_kw` gives, and equals the reference run
with its default."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest
from util import assert_same, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp import envs, schema
from fd_mtp.testing.op_inputs import BUILDERS

LAYERS = ("fd_mtp.ops", "fd_mtp.reference", "fd_mtp.cuda")
OPS = sorted(schema.all_ops())


def _parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _without_fixed_capacity(layer, name, params):
    """fd_mtp.cuda's two extensions: the fixed-capacity keyword of a shape op (FIXED_CAPACITY)
    and ``out=`` persistent outputs (PERSISTENT_OUT), keyword-only and off by default, checked
    and left out of the comparison."""
    import fd_mtp.cuda as fcuda

    if layer != "fd_mtp.cuda":
        return params
    extra = [fcuda.FIXED_CAPACITY.get(name), "out" if name in fcuda.PERSISTENT_OUT else None]
    for kw in filter(None, extra):
        found = [p for p in params if p[0] == kw]
        assert len(found) == 1, f"{layer}.{name}: no keyword {kw!r}"
        assert found[0][1] == inspect.Parameter.KEYWORD_ONLY and found[0][2] in (None, False)
        params = [p for p in params if p[0] != kw]
    return params


@pytest.mark.parametrize("name", OPS)
def test_every_layer_has_the_same_parameters_and_defaults(name):
    """Names, kinds (positional / keyword-only) and defaults, parameter by parameter."""
    want = _parameters(getattr(ops, name))
    for layer in LAYERS[1:]:
        fn = getattr(importlib.import_module(layer), name, None)
        if fn is None:  # host-only ops have no CuPy wrapper; IPC plumbing has no reference
            continue
        got = _without_fixed_capacity(layer, name, _parameters(fn))
        assert got == want, f"{layer}.{name}: parameters / defaults differ from fd_mtp.ops.{name}"


def _env_attrs():
    """(op, keyword attribute, environment variable) of every environment-backed keyword."""
    out = []
    for name in OPS:
        for a in schema.get(name).attrs:
            if a.kw and a.env is not None:
                out.append((name, a.python_name, a.env))
    return out


ENV_ATTRS = _env_attrs()
# Raw values each kind of variable is tried with (unset is tried too).
TRIED = {bool: ["1", "0", "1yes", "true"], int: ["7", "0", "100000"]}


def test_the_env_backed_keywords_are_walked():
    names = {(op, attr) for op, attr, _ in ENV_ATTRS}
    assert ("speculate_schedule_cache", "prefill_one_step_stop") in names
    assert ("draft_model_update", "prefill_one_step_stop") in names
    assert ("speculate_verify", "prefill_one_step_stop") in names
    assert ("ngram_match", "threshold") in names


@pytest.mark.parametrize("op, attr, env", ENV_ATTRS)
def test_every_layer_resolves_a_default_from_the_same_variable(op, attr, env, monkeypatch):
    """The schema's resolver gives the variable's value when set and its default when unset: the
    one rule fd_mtp.ops (`invoke`), fd_mtp.cuda (`prepare`) and fd_mtp.reference use."""
    monkeypatch.delenv(env, raising=False)
    assert schema.resolve_kw(op, attr, None) == envs.VARIABLES[env].default
    kind = type(envs.VARIABLES[env].default)
    for raw in TRIED.get(kind, []):
        monkeypatch.setenv(env, raw)
        assert schema.resolve_kw(op, attr, None) == envs.get(env), (op, attr, raw)
    explicit = not envs.VARIABLES[env].default if kind is bool else 3
    assert schema.resolve_kw(op, attr, explicit) == explicit  # a given value wins


# Ops whose keyword defaults are run on the builders' inputs (the message-queue ops send SysV
# messages: their queue id / message id defaults are covered by tests/ops/test_msgqueue.py).
RUN = sorted(
    {(op, attr, env) for op, attr, env in ENV_ATTRS if op in BUILDERS and "msg" not in attr}
)


def _run(fn, case, kwargs):
    args = [to_paddle(a) if fn.__module__.startswith("fd_mtp.ops") else a for a in case_args(case)]
    result = fn(*args, **kwargs)
    written = {case.names[i]: to_numpy(args[i]) for i in case.written}
    if result is not None:
        written["<returned>"] = result
    return written


def case_args(case):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]


def _same(a, b, what):
    assert a.keys() == b.keys(), what
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (list, tuple)):
            for i, (u, v) in enumerate(zip(x, y)):
                assert_same(to_numpy(u), to_numpy(v), f"{what}: {k}[{i}]")
        else:
            assert_same(to_numpy(x), to_numpy(y), f"{what}: {k}")


@pytest.mark.parametrize("raw", [None, "1", "0", "7"])
@pytest.mark.parametrize("op, attr, env", RUN)
def test_a_default_keyword_runs_as_its_resolved_value(op, attr, env, raw, monkeypatch):
    """With the variable unset or set: op(default) == op(resolved value) == reference(default)."""
    if raw is None:
        monkeypatch.delenv(env, raising=False)
    else:
        monkeypatch.setenv(env, raw)
    case = BUILDERS[op](16)
    kwargs = {k: v for k, v in case.kwargs.items() if k != attr}
    resolved = schema.resolve_kw(op, attr, None)
    by_default = _run(getattr(ops, op), case, kwargs)
    explicit = _run(getattr(ops, op), case, {**kwargs, attr: resolved})
    _same(by_default, explicit, f"fd_mtp.ops.{op}({attr}=None) vs {attr}={resolved!r}")
    ref = _run(getattr(reference, op), case, kwargs)
    _same(by_default, ref, f"fd_mtp.ops.{op} vs fd_mtp.reference.{op}, {attr} by default")


@pytest.mark.parametrize("op, attr, env", RUN)
def test_the_walked_inputs_depend_on_the_keyword(op, attr, env):
    """The builders' inputs are ones where the keyword changes the result, so a layer that
    resolved its default differently would fail the test above."""
    case = BUILDERS[op](16)
    kwargs = {k: v for k, v in case.kwargs.items() if k != attr}
    values = (True, False) if schema.get(op).arg(attr).type == "bool" else (7, 100_000)
    a = _run(getattr(ops, op), case, {**kwargs, attr: values[0]})
    b = _run(getattr(ops, op), case, {**kwargs, attr: values[1]})
    with pytest.raises(AssertionError):
        _same(a, b, f"{op}: {attr}={values[0]!r} vs {values[1]!r}")
