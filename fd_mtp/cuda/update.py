"""fd_mtp.cuda versions of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16): all of
standard dispatch, so the wrappers are generated from the schema (fd_mtp/schema/update.py);
written here: speculate_set_stop_value_multi_seqs' check of its two stop-sequence forms."""

from __future__ import annotations

from ._common import define_launchers, launch


def _stop_seqs_check(op, values, dims, p):
    """The Python side of the op's check hook: the two forms of the stop sequences."""
    from ..schema.update import stop_seqs_layout

    p.num_stop_seqs, p.stop_seq_cols = stop_seqs_layout(
        op.name, values["stop_seqs"].shape, values["stop_seqs_len"].shape, dims["B"]
    )


def speculate_set_stop_value_multi_seqs(
    accept_tokens,
    accept_num,
    pre_ids,
    step_idx,
    stop_flags,
    seq_lens,
    stop_seqs,
    stop_seqs_len,
    end_ids,
):
    """fd_mtp.ops.speculate_set_stop_value_multi_seqs on CuPy arrays (stop_seqs [bs, S, Ls] with
    stop_seqs_len [bs, S], or [bs, Ls] with [bs])."""
    launch("speculate_set_stop_value_multi_seqs", locals(), _stop_seqs_check)


__all__ = define_launchers(globals(), "update")
