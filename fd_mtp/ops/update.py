"""Target-side update ops of one engine step, after verify (spec ../shared/spec/ops.md §4.1 step 6,
§5.8, §5.10, §5.12, §5.16): speculate_set_stop_value_multi_seqs -> speculate_update ->
(save output) -> speculate_set_value_by_flags_and_idx; speculate_clear_accept_nums."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/update.py.
__all__ = define_ops(globals(), "update")
