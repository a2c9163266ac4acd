"""Draft-model (MTP proposer) ops: spec ../shared/spec/ops.md §6."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/draft.py.
__all__ = define_ops(globals(), "draft")
