"""Target-side sampling ops: spec ../shared/spec/ops.md §5.5 (penalties) and §5.6 (top-p candidates)."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/sampling.py.
__all__ = define_ops(globals(), "sampling")
