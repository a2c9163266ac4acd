"""Target-side KV-block managers: spec ../shared/spec/ops.md §5.13-§5.15, §11."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/blocks.py.
__all__ = define_ops(globals(), "blocks")
