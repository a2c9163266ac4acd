"""fd_mtp.cuda versions of the target-side block managers (spec §5.13-§5.15). The
standard-dispatch wrappers are generated from the schema (fd_mtp/schema/blocks.py); written
here: recover_decode_task's check no schema expresses."""

from __future__ import annotations

from ._common import _fail, define_launchers, launch


def recover_decode_task(
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_seq_lens_decoder,
    block_tables,
    is_block_step,
    draft_tokens,
    step_draft_tokens,
    step_seq_lens_this_time,
    block_size,
    max_draft_tokens,
):
    """fd_mtp.ops.recover_decode_task on CuPy arrays (the three speculative arrays or None)."""
    spec = draft_tokens is not None
    if (step_draft_tokens is not None) != spec or (step_seq_lens_this_time is not None) != spec:
        _fail(
            "recover_decode_task",
            "draft_tokens",
            "and step_draft_tokens and step_seq_lens_this_time must all "
            "be given (speculative variant) or all be None",
        )
    launch("recover_decode_task", locals())


__all__ = define_launchers(globals(), "blocks")
