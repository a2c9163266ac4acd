"""Type stubs of ``fd_mtp.ops`` for editors and static readers (mypy, pyright, go-to-definition).

Most wrappers of ``fd_mtp.ops`` are defined at import time from their schema (`define_wrapper`),
and ``fd_mtp/ops/__init__.py`` re-exports every family's ``__all__`` in a loop: a static reader
sees neither. This module writes, from the schema:

* ``fd_mtp/ops/<family>.pyi`` for every family module with generated wrappers: each public
  function with its signature (FastDeploy's positional arguments, then the keyword-only
  extras), type hints from its schema (``paddle.Tensor``, ``int``, ``float``, ``bool``, ``str``,
  ``Sequence[int]``; ``| None`` where None is accepted) and its docstring. A hand-written
  function of such a module takes its names, kinds and defaults from its own signature, and
  its hints from the schema (or, for a function no schema declares, from its annotations);
* ``fd_mtp/ops/__init__.pyi``: the package's names, each imported from its family module.

Family modules written entirely by hand (ipc, msgqueue) have no stub: a
static reader reads them as they are. The stubs are committed; tests/ops/test_stubs.py checks
that they are current. Regenerate them after changing a schema or a wrapper's signature::

    .venv/bin/python -m fd_mtp.schema.stubs        (or: make stubs)
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from . import Tensor, all_ops, family_ops

__all__ = ["OPS_DIR", "REGENERATE", "render", "write"]

OPS_DIR = Path(__file__).resolve().parent.parent / "ops"
REGENERATE = ".venv/bin/python -m fd_mtp.schema.stubs"
HEADER = (
    f"# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `{REGENERATE}`."
)

_ATTR_HINTS = {
    "int": "int",
    "int64": "int",
    "bool": "bool",
    "float": "float",
    "str": "str",
    "int64[]": "Sequence[int]",
}


def _hint(arg, nullable: bool) -> str:
    """The type hint of a schema argument (``| None`` when None is accepted: an optional tensor,
    or a parameter defaulting to None)."""
    if isinstance(arg, Tensor):
        base = "paddle.Tensor"
        nullable = nullable or arg.optional
    elif arg.choices:  # one of the names (its code goes to the kernel)
        base = "Literal[" + ", ".join(_quote(c) for c in arg.choices) + "]"
    else:
        base = _ATTR_HINTS[arg.type]
    return f"{base} | None" if nullable else base


def _returns(op) -> str:
    if op is None:
        return "None"
    if op.result is not None:  # an in-place op whose wrapper returns that tensor
        return "paddle.Tensor"
    if not op.returns:
        return "None"
    if len(op.returns) == 1:
        return "paddle.Tensor"
    return "list[paddle.Tensor]"


def _default(value) -> str:
    """A default as a stub writes it: the literal of a simple value, else ``...``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value) if not isinstance(value, str) else _quote(value)
    return "..."


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _param(fn_name: str, p: inspect.Parameter, op) -> str:
    """One parameter of a stub: ``name: hint`` (``= default``)."""
    hint = None  # a hand-written wrapper's own annotation, else the schema argument's type
    if p.annotation is not inspect.Parameter.empty:
        hint = p.annotation if isinstance(p.annotation, str) else p.annotation.__name__
    elif op is not None:
        try:
            hint = _hint(op.arg(p.name), p.default is None)
        except KeyError:
            hint = None
    if hint is None:
        raise ValueError(
            f"fd_mtp.ops.{fn_name}: parameter {p.name} has neither a schema argument nor an "
            "annotation (annotate it, so its stub has a type)"
        )
    text = f"{p.name}: {hint}"
    if p.default is not inspect.Parameter.empty:
        text += f" = {_default(p.default)}"
    return text


def _docstring(doc: str, indent: str) -> list[str]:
    """The lines of a docstring at ``indent``, in the layout ``ruff format`` keeps."""
    lines = inspect.cleandoc(doc).split("\n")
    if '"""' in doc:
        raise ValueError('a docstring with """ cannot be written into a stub')
    prefix = 'r"""' if "\\" in doc else '"""'
    out = [f"{indent}{prefix}{lines[0]}"]
    out += [f"{indent}{line}".rstrip() for line in lines[1:]]
    if len(lines) == 1:
        out[0] += '"""'
    else:
        out.append(f'{indent}"""')
    return out


def _function(name: str, fn, op) -> list[str]:
    """A stub ``def`` (signature, docstring, ``...``) for the runtime function ``fn``."""
    sig = inspect.signature(fn)
    params = []
    star = False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"fd_mtp.ops.{name}: *args / **kwargs cannot be stubbed")
        params.append(_param(name, p, op))
    if sig.return_annotation is not inspect.Signature.empty:  # a hand-written wrapper's own
        returns = sig.return_annotation
    else:
        returns = _returns(op)
    out = [f"def {name}("]
    out += [f"    {p}," for p in params]
    out += _wrap(f") -> {returns}:")
    out += _docstring(fn.__doc__ or "", "    ")
    out.append("    ...")
    return out


def _top_level_split(text: str) -> list[str]:
    """``text`` split at its commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _wrap(line: str) -> list[str]:
    """A line ending in ``X[...]:`` or an import, wrapped as ``ruff format`` wraps it when it
    does not fit 100 columns."""
    if len(line) <= 100:
        return [line]
    if line.startswith("from ") and " import " in line:
        head, name = line.split(" import ", 1)
        return [f"{head} import (", f"    {name},", ")"]
    head, inner = line.split("[", 1)
    inner = inner[: inner.rindex("]")]
    return [f"{head}["] + [f"    {p}," for p in _top_level_split(inner)] + ["]:"]


def _sort_key(name: str):
    """The order ruff's isort gives imported names: constants, classes, then the rest."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def _stubbed_families() -> list[str]:
    """The family modules with at least one wrapper generated from its schema."""
    from . import FAMILIES

    return [f for f in FAMILIES if any(op.doc for op in family_ops(f))]


def _family_stub(family: str) -> str:
    module = importlib.import_module(f"fd_mtp.ops.{family}")
    ops = all_ops()
    body: list[str] = []
    uses_sequence = uses_literal = False
    for name in sorted(module.__all__):
        fn = getattr(module, name)
        if isinstance(fn, (int, str)) and not isinstance(fn, bool):  # a constant
            body += ["", f"{name}: {type(fn).__name__}"]
            continue
        if not inspect.isfunction(fn):
            raise ValueError(
                f"fd_mtp.ops.{family}.{name}: only functions and constants can be stubbed"
            )
        # upstream's ``_dynamic`` variant of an op takes the op's arguments (the queue id moved)
        lines = _function(name, fn, ops.get(name, ops.get(name.removesuffix("_dynamic"))))
        uses_sequence |= any("Sequence[int]" in line for line in lines)
        uses_literal |= any("Literal[" in line for line in lines)
        body += [""] + lines
    head = [HEADER, f'"""{inspect.cleandoc(module.__doc__).splitlines()[0]}"""', ""]
    if uses_sequence:
        head.append("from collections.abc import Sequence")
        head.append("")
    if uses_literal:
        head.append("from typing import Literal")
        head.append("")
    head.append("import paddle")
    names = ", ".join(f'"{n}"' for n in sorted(module.__all__))
    head += ["", f"__all__ = [{names}]"]
    return _wrap_all("\n".join(head + body) + "\n")


def _wrap_all(text: str) -> str:
    """``__all__`` one name per line when it does not fit 100 columns (as ruff formats it)."""
    out = []
    for line in text.split("\n"):
        if line.startswith("__all__ = [") and len(line) > 100:
            names = line[len("__all__ = [") : -1].split(", ")
            out += ["__all__ = ["] + [f"    {n}," for n in names] + ["]"]
        else:
            out.append(line)
    return "\n".join(out)


def _package_stub() -> str:
    """``fd_mtp/ops/__init__.pyi``: every public name, imported from where it is defined."""
    from . import FAMILIES

    ops_pkg = importlib.import_module("fd_mtp.ops")
    lines = [
        HEADER,
        f'"""{inspect.cleandoc(ops_pkg.__doc__).splitlines()[0]}"""',
        "",
        "from ._loader import check_pending as check_pending",
        "from ._loader import load as load",
        "from ._loader import set_error_mode as set_error_mode",
    ]
    for family in sorted(FAMILIES):
        module = importlib.import_module(f"fd_mtp.ops.{family}")
        for name in sorted(module.__all__, key=_sort_key):
            lines += _wrap(f"from .{family} import {name} as {name}")
    return "\n".join(lines) + "\n"


def render() -> dict[Path, str]:
    """Every stub file's path and text."""
    out = {OPS_DIR / "__init__.pyi": _package_stub()}
    for family in _stubbed_families():
        out[OPS_DIR / f"{family}.pyi"] = _family_stub(family)
    return out


def write() -> list[Path]:
    """Writes the stubs (and removes stale ones); returns the paths written."""
    stubs = render()
    for stale in set(OPS_DIR.glob("*.pyi")) - set(stubs):
        stale.unlink()
    for path, text in stubs.items():
        path.write_text(text)
    return sorted(stubs)


if __name__ == "__main__":
    for written in write():
        print(written)
