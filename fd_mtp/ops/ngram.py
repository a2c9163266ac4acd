"""N-gram drafting ops: ngram_match (spec ../shared/spec/ops.md §5.17) and hybrid_mtp_ngram (§6.7)."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/ngram.py.
__all__ = define_ops(globals(), "ngram")
