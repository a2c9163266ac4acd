"""An op's ``flag`` (fd_mtp.schema.Op): its value on the host, its device form, the tensors it reads
on the host; and the `Require` rules' bounds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Op, Require


def flag_value(op: Op, count: int, dims: dict, params, host: dict) -> bool:
    """The value of the op's ``flag`` expression (the same text the C++ dispatch compiles)."""
    from types import SimpleNamespace

    names = {
        "count": count,
        "dims": SimpleNamespace(**dims),
        "p": params,
        "host": SimpleNamespace(**host),
    }
    return bool(eval(op.flag[1], {"__builtins__": {}}, names))  # noqa: S307 - schema text


def required(op: Op, rule: Require, attrs: dict) -> int:
    """The lower bound of a `Require` rule for the attribute values ``attrs`` (by name)."""
    return int(eval(rule.at_least, {"__builtins__": {}}, dict(attrs)))  # noqa: S307 - schema text


def host_reads(op: Op) -> list[str]:
    """Tensors the op's ``flag`` expression reads on the host (``host.<name>``)."""
    if op.flag is None:
        return []
    return list(dict.fromkeys(re.findall(r"\bhost\.(\w+)", op.flag[1])))


# The comparisons a device flag may use (the C++ FlagCompare of custom_ops/cuda/stream_status.h,
# in this order).
FLAG_COMPARES = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True)
class DeviceFlag:
    """An op's ``flag`` expression in the form a device kernel evaluates (`device_flag`):
    ``count + <offset> <compare> <bound>``. ``offset``: an expression of ``dims.<dim>``,
    ``p.<Params field>`` and integer literals, known on the host at the call ("0" when the
    expression has none); ``bound_tensor``: the one-element int64 tensor the bound is read from
    on the device (``host.<tensor>`` in the schema text), or None when ``bound`` (a host-known
    expression like ``offset``) is the bound."""

    offset: str
    compare: str
    bound_tensor: str | None
    bound: str | None

    @property
    def compare_id(self) -> int:
        """The comparison's value in the C++ FlagCompare."""
        return FLAG_COMPARES.index(self.compare)

    def host_ints(self, dims: dict, params) -> tuple[int, int | None]:
        """``(offset, bound)`` for one call (the named dims, the filled Params); bound is None
        when it is read on the device from ``bound_tensor``."""
        from types import SimpleNamespace

        names = {"dims": SimpleNamespace(**dims), "p": params}

        def value(text):
            return int(eval(text, {"__builtins__": {}}, names))  # noqa: S307 - schema text

        return value(self.offset), None if self.bound is None else value(self.bound)


def device_flag(op: Op) -> DeviceFlag:
    """The device form of ``op.flag`` (raises ValueError, naming the op, for an expression that
    is not ``count [+ <host-known int>] <cmp> <host.<tensor> | host-known int>``; host-known:
    ``dims.<dim>``, ``p.<field>``, integer literals with + - * and parentheses)."""
    import ast

    if op.flag is None:
        raise ValueError(f"{op.name}: has no flag")
    text = op.flag[1]
    ops = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

    def refuse(why):
        raise ValueError(
            f"{op.name}: flag expression {text!r} has no device form ({why}); it must read "
            "`count [+ <host-known int>] <cmp> <host.<tensor> | host-known int>`, host-known: "
            "dims.<dim>, p.<field>, integer literals, + - * and parentheses"
        )

    def host_known(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("dims", "p"):
                return
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            host_known(node.left)
            host_known(node.right)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            host_known(node.operand)
            return
        refuse(f"{ast.unparse(node)!r} is not a host-known int")

    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        refuse("not an expression")
    if not isinstance(tree, ast.Compare) or len(tree.ops) != 1 or type(tree.ops[0]) not in ops:
        refuse("not one comparison")
    left, right = tree.left, tree.comparators[0]
    offset = "0"
    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add):
        if not (isinstance(left.left, ast.Name) and left.left.id == "count"):
            refuse("the left side must start with `count +`")
        host_known(left.right)
        offset = ast.unparse(left.right)
    elif not (isinstance(left, ast.Name) and left.id == "count"):
        refuse("the left side must be `count` or `count + <host-known int>`")
    if (
        isinstance(right, ast.Attribute)
        and isinstance(right.value, ast.Name)
        and right.value.id == "host"
    ):
        if right.attr not in {t.name for t in op.tensors}:
            refuse(f"host.{right.attr} is not a tensor of the op")
        return DeviceFlag(offset, ops[type(tree.ops[0])], right.attr, None)
    host_known(right)
    return DeviceFlag(offset, ops[type(tree.ops[0])], None, ast.unparse(right))
