"""The schema's rules written once for every layer (see fd_mtp/schema/__init__.py): `Check` rules
and computed fields (Python expressions that fd_mtp.cuda and the numpy references evaluate and
cmake/gen_ops_expr.py compiles into the binding), `Together` groups of optional tensors."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Op


@dataclass(frozen=True)
class Check:
    """A rule on the attributes and named dims, declared once for every layer: ``expr`` must
    hold, else ValueError ``"<op>: <argument> <message>"``. ``expr`` reads the same in Python
    and C++ (the binding compiles it): attribute names, ``dims.<dim>``, ints, comparisons,
    ``and`` / ``or`` / ``not``, + - * %, ``x if c else y``, ``rank(<tensor>)``,
    ``dim(<tensor>, <axis>)``, ``numel(<tensor>)``, ``given(<tensor>)`` (an optional tensor is
    given; guard the reads of one with it) (cmake/gen_ops_expr.py compiles it). ``message`` may show
    ``{<expression>}``, e.g. ``{shape(<tensor>)}``."""

    argument: str
    expr: str
    message: str

    @staticmethod
    def _names(attrs: dict, dims: dict, shapes: dict, expr: str = "") -> dict:
        from types import SimpleNamespace

        absent = {n: None for n in re.findall(r"\bgiven\((\w+)\)", expr) if n not in shapes}
        return {
            **absent,
            **{k: None if v is None else tuple(v) for k, v in shapes.items()},
            **attrs,
            "dims": SimpleNamespace(**dims),
            "rank": len,
            "shape": list,
            "dim": lambda shape, axis: shape[axis],
            "numel": lambda shape: math.prod(shape),
            "given": lambda shape: shape is not None,  # Op.python_checks only (see _calls)
        }

    def holds(self, attrs: dict, dims: dict, shapes: dict | None = None) -> bool:
        names = self._names(attrs, dims, shapes or {}, self.expr)
        return bool(eval(self.expr, {"__builtins__": {}}, names))  # noqa: S307 - schema text

    def text(self, attrs: dict, dims: dict, shapes: dict | None = None) -> str:
        names = self._names(attrs, dims, shapes or {}, self.expr)

        def value(m):
            return str(eval(m.group(1), {"__builtins__": {}}, names))  # noqa: S307 - schema text

        return re.sub(r"\{([^{}]+)\}", value, self.message)


def expr_value(text: str, attrs: dict, dims: dict, shapes: dict):
    """The value of a schema expression (a `Check`'s, or a computed ``extra_params`` field's) for
    the attributes, named dims and tensor shapes of a call."""
    return eval(text, {"__builtins__": {}}, Check._names(attrs, dims, shapes))  # noqa: S307


def check_rules(op: Op, attrs: dict, dims: dict, shapes: dict | None = None) -> None:
    """Raises the op's ValueError for the first of its `Check` rules that fails (``attrs``: the
    attribute values by name; ``dims``: the named dims; ``shapes``: the shapes of the tensors
    the rules read)."""
    for rule in op.checks:
        if not rule.holds(attrs, dims, shapes):
            raise ValueError(f"{op.name}: {rule.argument} {rule.text(attrs, dims, shapes)}")


@dataclass(frozen=True)
class Together:
    """Optional tensors given all together (``what``: the variant they make) or all None."""

    tensors: tuple
    what: str

    def message(self) -> tuple[str, str]:
        """``(argument, what)``: the error names the group's first tensor."""
        first, *rest = self.tensors
        return first, f"and {' and '.join(rest)} must all be given ({self.what}) or all be None"


def check_together(op: Op, values: dict) -> None:
    """Raises the op's ValueError when a `Together` group is given only in part (``values``: the
    arguments by name, None for an absent optional tensor): the rule of the generated binding,
    for fd_mtp.cuda and the numpy reference."""
    for group in op.together:
        given = {values[name] is not None for name in group.tensors}
        if len(given) > 1:
            first, what = group.message()
            raise ValueError(f"{op.name}: {first} {what}")
