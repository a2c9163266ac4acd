"""What the Python wrappers do before an op's checks, declared in the schema (see
fd_mtp/schema/__init__.py) and done by `prepare_call` for every layer (fd_mtp.ops' `invoke`,
fd_mtp.cuda's `prepare`, the numpy reference), so that no wrapper is written by hand for it:

* ``Attr(choices=(...))``: the Python value is one of these names, the kernel takes its index
  (ValueError naming the argument otherwise); None resolves from ``env_choices``, pairs
  ``(variable, name)``: the first variable of ``fd_mtp.envs`` that is not 0 gives its name, else
  the first choice (FastDeploy's environment defaults of a strategy).
* ``Attr(given=<tensor>)``: a bool left at None becomes whether that optional tensor is given
  (before Paddle hands a zero-size tensor to the op as absent).
* ``Attr(counter=True)``: None takes the layer's call counter of the op (each layer keeps its
  own, `CallCounter`): its number of earlier calls, as upstream's global host counters (an RNG
  position: pass a value to reproduce a call). The counter advances once per call.
* ``Attr(default=<expression>)``: None resolves to the expression's value, of the tensors'
  shapes (e.g. ``"1.0 / dim(q, -1) ** 0.5"``; left None when a tensor it reads has no shape:
  the type checks name it then).
* ``Tensor(contiguous_copy=True)``: a strided paddle view of the (read-only) tensor is copied to
  a contiguous one by fd_mtp.ops instead of refused.
* ``Tensor(only_if=<expression>)``: the tensor is read only when the expression of the
  (resolved) attributes holds; otherwise the wrappers pass None, so it is never checked.
* ``Attr(resolve="<module>:<function>")`` / ``Attr(env=...)``: `resolve_kw`, per attribute (the
  references call it too).
* ``Op(python_checks=(Check, ...))``: rules the wrappers check and the binding cannot: Paddle
  hands a zero-size optional tensor to the op as absent. Their expressions may also use
  ``given(<tensor>)``; an absent tensor's shape is None.

The wrappers themselves come from here too: their signature (`python_signature`) and their
definition in a family module (`define_wrapper`).
"""

from __future__ import annotations

import importlib
import re
import threading
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Op


class CallCounter:
    """One layer's call counters, by op name (thread-safe)."""

    def __init__(self):
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getitem__(self, op_name: str) -> int:
        return self._counts.get(op_name, 0)

    def take(self, op_name: str) -> int:
        """The op's count before this call, which it advances by one."""
        with self._lock:
            n = self._counts.get(op_name, 0)
            self._counts[op_name] = n + 1
        return n


def has_python_side(op: Op) -> bool:
    """Whether `prepare_call` has anything to do for ``op``."""
    return _has_python_side(op.name)


@cache
def _has_python_side(op_name: str) -> bool:
    from . import get

    op = get(op_name)
    return bool(
        op.python_checks
        or any(a.choices or a.counter or a.default or a.given for a in op.attrs)
        or any(t.only_if or t.contiguous_copy for t in op.tensors)
    )


def choice_code(op: Op, attr, value):
    """The kernel's code of a ``choices`` attribute's Python value (None: its environment default)."""
    if value is None:
        from .. import envs

        value = next((n for var, n in attr.env_choices if envs.get(var) != 0), attr.choices[0])
    if not isinstance(value, str) or value not in attr.choices:
        raise ValueError(
            f"{op.name}: {attr.python_name} must be one of {sorted(attr.choices)}, got {value!r}"
        )
    return attr.choices.index(value)


def prepare_call(op: Op, values: dict, calls: CallCounter) -> dict:
    """The arguments ``values`` (a wrapper's ``locals()``, by Python name) with the declared
    Python-side steps done (see the module docstring), attributes by C++ name. Raises ValueError naming the
    argument."""
    out = dict(values)  # a layer's own keywords (fd_mtp.cuda's out=) stay
    for a in op.attrs:
        value = values[a.python_name]
        if a.given is not None and value is None:  # before paddle drops a zero-size tensor
            value = values[a.given] is not None
        if a.choices:
            value = choice_code(op, a, value)
        out[a.name] = value
    for t in op.tensors:
        x = out[t.name]
        if t.contiguous_copy and hasattr(x, "is_contiguous") and not x.is_contiguous():
            out[t.name] = x.contiguous()
    defaults = [a for a in op.attrs if a.default and out[a.name] is None]
    if defaults:
        from ._rules import expr_value

        shapes = {t.name: _shape(out[t.name]) for t in op.tensors}
        for a in defaults:
            if all(hasattr(out[n], "shape") for n in re.findall(r"\w+", a.default) if n in shapes):
                out[a.name] = expr_value(a.default, {}, {}, shapes)
    counters = [a for a in op.attrs if a.counter]
    if counters:
        n = calls.take(op.name)
        for a in counters:
            if out[a.name] is None:
                out[a.name] = n
    if any(t.only_if for t in op.tensors) or op.python_checks:
        from ._rules import expr_value

        attrs = {a.name: out[a.name] for a in op.attrs}
        shapes = {t.name: None for t in op.tensors}
        for t in op.tensors:
            if t.only_if and not expr_value(t.only_if, attrs, {}, shapes):
                out[t.name] = None
        shapes = {t.name: _shape(out[t.name]) for t in op.tensors}
        for rule in op.python_checks:
            if not rule.holds(attrs, {}, shapes):
                raise ValueError(f"{op.name}: {rule.argument} {rule.text(attrs, {}, shapes)}")
    return out


def _shape(x):
    return None if x is None else tuple(getattr(x, "shape", ()))


def python_signature(op: Op) -> tuple[list[str], set[str]]:
    """(positional parameter names in order, keyword-only names) of the op's Python wrapper."""
    from . import Attr

    positional = [a.python_name if isinstance(a, Attr) else a.name for a in op.args if not a.kw]
    keyword = {a.python_name if isinstance(a, Attr) else a.name for a in op.args if a.kw}
    return positional, keyword


def resolve_kw(op_name: str, name: str, value):
    """``value`` through the ``resolve`` function of the op's keyword-only attribute ``name``,
    or when it is None its environment default (``fd_mtp.envs``): the one rule shared by
    fd_mtp.ops, fd_mtp.cuda and fd_mtp.reference, so their defaults cannot drift apart."""
    from . import Attr, get

    attr = get(op_name).arg(name)
    if isinstance(attr, Attr) and attr.resolve is not None:
        module, function = attr.resolve.split(":")
        return getattr(importlib.import_module(module), function)(value)
    if value is not None or not isinstance(attr, Attr) or attr.env is None:
        return value
    from .. import envs

    return envs.get(attr.env)


def define_wrapper(
    op: Op, namespace: dict, call: str, doc: str, extra: tuple = (), name: str | None = None
) -> None:
    """Defines the function ``op.name`` in ``namespace`` (a module's globals) with the schema's
    Python signature (FastDeploy's positional arguments, then the keyword-only extras defaulting
    to None, then the layer's own keywords ``extra``, also None) and docstring ``doc``; its body
    is ``return <call>("<op>", locals())`` (its first element when the op returns one tensor).
    Defined in the module's own globals, it is an ordinary function of that module (``help``,
    ``inspect.signature`` and doctest see it as written there). ``name``: the function's name
    when it is not the op's (a layer's variant of the op)."""
    from . import Attr

    positional = [a.python_name if isinstance(a, Attr) else a.name for a in op.args if not a.kw]
    keyword = [a.python_name if isinstance(a, Attr) else a.name for a in op.args if a.kw]
    keyword += list(extra)
    params = ", ".join(positional + (["*"] + [f"{k}=None" for k in keyword] if keyword else []))
    first = "[0]" if len(op.returns) == 1 else ""  # one returned tensor: the tensor itself
    fn = name or op.name
    if op.result is not None:  # the in-place op's tensor, as FastDeploy's wrapper returns it
        body = f"    {call}({op.name!r}, locals())\n    return {op.result}\n"
    else:
        body = f"    return {call}({op.name!r}, locals()){first}\n"
    source = f"def {fn}({params}):\n{body}"
    code = compile(source, f"<fd_mtp.schema: {op.name}>", "exec")
    exec(code, namespace)  # noqa: S102 - the source is built from the schema, not from input
    namespace[fn].__doc__ = doc
