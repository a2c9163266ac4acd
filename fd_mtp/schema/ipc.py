"""Schemas of the ipc ops (see fd_mtp/schema/__init__.py for the format)."""
from . import Attr, Op, Status, Tensor  # noqa: F401

OPS = []
