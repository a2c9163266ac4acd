"""Argument checks of the composite wrappers: the ``fd_mtp.ops`` functions that compute on their
arguments or call other ops (``pre_process``, ``shared_empty``, the ``_dynamic`` message-queue
ops, ...). Such a wrapper checks its own arguments first, by its own names (type before any
attribute is read, then dtype, rank and length), and runs each inner op under `renamed`, so an
error the inner op still raises names the wrapper and the wrapper's argument."""

from __future__ import annotations

import contextlib
import re

from ._loader import _tensor_type, _type_name

__all__ = ["require_bool", "require_tensor", "renamed"]


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("paddle.")


def require_tensor(op: str, name: str, value, dtype: str | None = None, *, ranks=None, rows=None):
    """``value`` when it is a paddle Tensor of ``dtype`` (None: any) whose rank is in ``ranks``
    (None: any) and whose first axis has at least ``rows`` entries (None: any); a per-request
    vector is ``ranks=(1, "column")``: ``[n]`` or ``[n, 1]``. Else TypeError (not a Tensor) or
    ValueError, ``"<op>: <name> ..."``."""
    if not isinstance(value, _tensor_type()):
        raise TypeError(f"{op}: {name} must be a paddle.Tensor, got {_type_name(value)}")
    if dtype is not None and _dtype_name(value) != dtype:
        raise ValueError(f"{op}: {name} must be {dtype}, got {_dtype_name(value)}")
    shape = list(value.shape)
    if ranks is not None:
        column = "column" in ranks and len(shape) == 2 and shape[1] == 1
        if len(shape) not in ranks and not column:
            want = " or ".join(_rank_text(r) for r in ranks)
            raise ValueError(f"{op}: {name} must be {want}, got shape {shape}")
    if rows is not None and (not shape or shape[0] < rows):
        got = shape[0] if shape else 0
        what = "rows" if ranks is not None and "column" not in ranks else "entries"
        raise ValueError(f"{op}: {name} has {got} {what} but the batch has {rows} requests")
    return value


def _rank_text(rank) -> str:
    return "[n, 1]" if rank == "column" else f"{rank}-D"


def require_bool(op: str, name: str, value) -> bool:
    """``value`` as a bool (a bool, numpy bool or int 0 / 1), else TypeError naming it."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{op}: {name} must be a bool, got {_type_name(value)}")


@contextlib.contextmanager
def renamed(op: str, inner: str, names: dict[str, str] | None = None, *, alias: bool = False):
    """Runs an inner op's call: a ValueError / TypeError it raises as ``"<inner>: ..."`` is raised
    again as ``"<op>: ..."`` with the inner op's argument names replaced by ``names`` (inner name
    -> the wrapper's argument it comes from) and ``(in <inner>)`` appended, unless ``alias``
    (``op`` only forwards its own arguments to ``inner``, by the same names)."""
    names = names or {}
    try:
        yield
    except (ValueError, TypeError) as exc:
        text = str(exc)
        if not text.startswith(f"{inner}: "):
            raise
        body = text[len(inner) + 2 :]
        if names:
            pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
            body = pattern.sub(lambda m: names[m.group(1)], body)
        suffix = "" if alias else f" (in {inner})"
        raise type(exc)(f"{op}: {body}{suffix}") from None
