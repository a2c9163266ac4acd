"""Argument resolvers of the KV-cache sharing ops (spec ../shared/spec/ops.md §7), with no paddle:
fd_mtp/schema/ipc.py names them (``Attr.resolve``), so the ops' wrappers and any other layer take
``shm_name`` and ``shape`` the same way. Their errors start with the argument's name; the caller
prefixes the op's."""

from __future__ import annotations

import operator


def posix_name(name: str) -> str:
    """FastDeploy's names have no leading '/' (glibc's shm_open adds it); add it the same way,
    so ``"key_caches_0_rank0.device0"`` and ``"/key_caches_0_rank0.device0"`` are one segment."""
    return name if name.startswith("/") or not name else "/" + name


def resolve_shm_name(shm_name) -> str:
    """``shm_name`` as a POSIX name (`posix_name`); ValueError when it is not a str (the op
    checks the rest: no other '/', at most 255 characters, not a reserved ``/fd_mtp.`` name)."""
    if not isinstance(shm_name, str):
        raise ValueError(f"shm_name must be a str, got {type(shm_name).__name__}")
    return posix_name(shm_name)


def resolve_shape(shape) -> list[int]:
    """``shape`` as a list of ints >= 0 (ints only: a float, a bool or a str element is refused,
    not converted), else ValueError naming ``shape``."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ValueError(f"shape must be a list of ints, got {type(shape).__name__}")
    dims = []
    for i, d in enumerate(shape):
        if isinstance(d, bool) or type(d).__name__ == "bool_":
            raise ValueError(f"shape[{i}] must be an int, got bool")
        try:
            dims.append(operator.index(d))
        except TypeError:
            raise ValueError(f"shape[{i}] must be an int, got {type(d).__name__}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must have non-negative dimensions, got {dims}")
    return dims
