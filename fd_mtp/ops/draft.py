"""Draft-model (MTP proposer) ops: spec ../shared/spec/ops.md §6."""
from __future__ import annotations

from ._loader import call


def draft_model_postprocess(
    base_model_draft_tokens,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    base_model_stop_flags,
) -> None:
    """Set the target's per-request token count for the next verify step (spec §6.5).

    ``bsz = base_model_seq_lens_this_time.shape[0]``. For each request b:
    stopped -> 0; running with ``seq_lens_encoder[b] == 0`` -> the number of
    entries of ``base_model_draft_tokens[b]`` that are not -1 (the whole row, not
    a prefix); running and prefilling -> unchanged.

    Args:
        base_model_draft_tokens: ``[>=bsz, K+1]`` int64, read. Target's draft row
            ``[last accepted, d1, ..., dK]``, -1 where no draft.
        base_model_seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, **written**.
        base_model_seq_lens_encoder: ``[>=bsz]`` int32, read.
        base_model_stop_flags: ``[>=bsz]`` bool, read.

    Returns:
        None (like FastDeploy's op).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> draft = paddle.to_tensor([[7, 8, -1], [5, -1, 6], [1, 2, 3]], dtype="int64")
        >>> this_time = paddle.to_tensor([9, 9, 9], dtype="int32")
        >>> enc = paddle.to_tensor([0, 0, 4], dtype="int32")
        >>> stop = paddle.to_tensor([False, False, False])
        >>> ops.draft_model_postprocess(draft, this_time, enc, stop)
        >>> this_time.tolist()
        [2, 2, 9]
    """
    call(
        "draft_model_postprocess",
        base_model_draft_tokens,
        base_model_seq_lens_this_time,
        base_model_seq_lens_encoder,
        base_model_stop_flags,
    )
