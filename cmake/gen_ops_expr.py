"""The schema's expressions in C++ (cmake/gen_ops.py): the `Check` rules and computed Params fields
(``extra_params``) of fd_mtp/schema are Python expressions, evaluated as such by fd_mtp.cuda and
the numpy references (fd_mtp.schema.expr_value) and compiled here into the binding's C++ from
their syntax tree, so both read the same text.

Names: attributes (``a.<name>``), ``dims.<dim>`` (``a.dims.<dim>``), tensors as arguments of
``rank(t)`` (its number of axes), ``dim(t, i)`` (axis i, negative from the end), ``numel(t)`` and ``shape(t)``
(its shape as text, for messages), ``given(t)`` (an optional tensor is given: guard its reads);
ints, strings, comparisons, ``and`` / ``or`` / ``not``, ``+ - * % //`` (``//`` of non-negative
ints only: C++ ``/``), ``x if c else y``."""

from __future__ import annotations

import ast

from gen_ops_common import Op

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Mod: "%", ast.FloorDiv: "/"}  # // of dims
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def cpp_expr(op: Op, text: str) -> str:
    """The C++ of schema expression ``text`` of ``op`` (ValueError, naming the op, for anything
    outside the language above)."""
    attrs = {a.name for a in op.attrs}
    tensors = {t.name for t in op.tensors}
    optional = {t.name for t in op.tensors if t.optional}

    def refuse(node, why):
        raise ValueError(f"{op.name}: expression {text!r}: {ast.unparse(node)!r} {why}")

    def tensor(node):
        if not (isinstance(node, ast.Name) and node.id in tensors):
            refuse(node, "is not a tensor of the op")
        if node.id in optional:  # read only where a given() guard holds
            return f"(*a.{node.id}).shape()"
        return f"a.{node.id}.shape()"

    def emit(node, inner=False) -> str:
        """``inner``: an operand of another operator (parenthesised where needed)."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, str):
            if isinstance(node.value, str):
                return '"' + node.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
            return str(node.value)
        if isinstance(node, ast.Name):
            if node.id not in attrs:
                refuse(node, "is not an attribute")
            return f"a.{node.id}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id != "dims":
                refuse(node, "is not dims.<dim>")
            return f"a.dims.{node.attr}"
        if isinstance(node, ast.BoolOp):
            sep = " && " if isinstance(node.op, ast.And) else " || "
            out = sep.join(emit(v, isinstance(v, ast.BoolOp)) for v in node.values)
            return f"({out})" if inner else out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            return ("!" if isinstance(node.op, ast.Not) else "-") + emit(node.operand, True)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            out = f"{emit(node.left, True)} {_BINOPS[type(node.op)]} {emit(node.right, True)}"
            return f"({out})" if inner else out
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            left, right = emit(node.left, True), emit(node.comparators[0], True)
            out = f"{left} {_COMPARE[type(node.ops[0])]} {right}"
            return f"({out})" if inner else out
        if isinstance(node, ast.IfExp):
            return f"({emit(node.test)} ? {emit(node.body, True)} : {emit(node.orelse, True)})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            fn, args = node.func.id, node.args
            if fn == "rank" and len(args) == 1:
                return f"static_cast<int64_t>({tensor(args[0])}.size())"
            if fn == "shape" and len(args) == 1:
                return f"check::shape_str({tensor(args[0])})"
            if fn == "numel" and len(args) == 1:
                return f"{tensor(args[0])[: -len('.shape()')]}.numel()"
            if fn == "given" and len(args) == 1:  # an optional tensor is given
                tensor(args[0])
                return f"static_cast<bool>(a.{args[0].id})"
            if fn == "dim" and len(args) == 2:
                return f"check::dim_of({tensor(args[0])}, {emit(args[1])})"
        refuse(node, "is outside the schema's expression language")

    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise ValueError(f"{op.name}: expression {text!r} is not a Python expression") from None
    return emit(tree)


def cpp_message(op: Op, message: str) -> str:
    """The C++ arguments of check::fail for a `Check` message: its text, ``{<expression>}``
    showing a value."""
    import re

    parts = []
    for i, piece in enumerate(re.split(r"\{([^{}]+)\}", message)):
        if i % 2:
            parts.append(cpp_expr(op, piece))
        elif piece:
            parts.append('"' + piece.replace('"', '\\"') + '"')
    return ", ".join(parts)
