"""Target-side verify op: spec ../shared/spec/ops.md §5.7, §9.1."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/verify.py.
__all__ = define_ops(globals(), "verify")
