"""Output-message ops: the speculative decoder's per-step results sent to the token processor
through a SysV message queue (spec ../shared/spec/ops.md §5.11, §6.8; the wire format:
fd_mtp.sysv_queue). The ops are declared, documented and resolve their keyword arguments in
fd_mtp/schema/msgqueue.py; written here: upstream's ``_dynamic`` variants, which take the queue id
positionally."""

from __future__ import annotations

# The wire constants and the paddle-free queue helpers live in fd_mtp.sysv_queue (below the ops and
# the references, which both use them); re-exported here as part of fd_mtp.ops' API.
from ..sysv_queue import (  # noqa: F401
    DEFAULT_FTOK_PATH,
    MAX_BSZ,
    MAX_DRAFT_TOKENS,
    MESSAGE_BYTES,
    MESSAGE_INTS,
    TOPK_DEFAULT_MAX_BSZ,
    TOPK_FTOK_PATH,
    queue_key,
    receive_message,
    remove_queue,
    resolve_msg_id,
    resolve_msg_queue_id,
    topk_message_bytes,
)
from ._composite import renamed
from ._loader import define_ops

__all__ = [
    *define_ops(globals(), "msgqueue"),
    "MAX_BSZ",
    "MAX_DRAFT_TOKENS",
    "MESSAGE_BYTES",
    "MESSAGE_INTS",
    "mtp_save_first_token_dynamic",
    "queue_key",
    "remove_queue",
    "speculate_get_output_dynamic",
    "speculate_save_output_dynamic",
    "TOPK_DEFAULT_MAX_BSZ",
    "TOPK_FTOK_PATH",
    "topk_message_bytes",
]


def speculate_save_output_dynamic(
    accept_tokens,
    accept_num,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    rank_id,
    msg_queue_id,
    save_each_rank,
    skip_prefill,
    *,
    msg_id=None,
    ftok_path=DEFAULT_FTOK_PATH,
) -> None:
    """`speculate_save_output` with the queue id positional (upstream's ``_dynamic`` op).

    Difference from upstream: the given ``msg_queue_id`` is used as is (upstream's op let
    ``$INFERENCE_MSG_QUEUE_ID`` override it when set). ``msg_queue_id=None`` falls back to the
    environment like `speculate_save_output`.
    """
    with renamed("speculate_save_output_dynamic", "speculate_save_output", alias=True):
        speculate_save_output(  # noqa: F821 - defined by define_ops
            accept_tokens,
            accept_num,
            not_need_stop,
            seq_lens_decoder,
            prompt_lens,
            rank_id,
            save_each_rank,
            skip_prefill,
            msg_queue_id=msg_queue_id,
            msg_id=msg_id,
            ftok_path=ftok_path,
        )


def speculate_get_output_dynamic(
    x, rank_id, wait_flag, msg_queue_id, get_each_rank, *, ftok_path=DEFAULT_FTOK_PATH
) -> None:
    """`speculate_get_output` with the queue id positional (upstream's ``_dynamic`` op).

    The given ``msg_queue_id`` is used as is (upstream let ``$INFERENCE_MSG_QUEUE_ID`` override it).
    """
    with renamed("speculate_get_output_dynamic", "speculate_get_output", alias=True):
        speculate_get_output(  # noqa: F821 - defined by define_ops
            x, rank_id, wait_flag, get_each_rank, msg_queue_id=msg_queue_id, ftok_path=ftok_path
        )


def mtp_save_first_token_dynamic(
    x,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    step_idx,
    rank_id,
    msg_queue_id,
    save_each_rank,
    skip_chunk_prefill,
    *,
    msg_id=None,
    ftok_path=DEFAULT_FTOK_PATH,
) -> None:
    """`mtp_save_first_token` with the queue id positional (upstream's ``_dynamic`` op).

    The given ``msg_queue_id`` is used as is (upstream let ``$INFERENCE_MSG_QUEUE_ID`` override it).
    """
    with renamed("mtp_save_first_token_dynamic", "mtp_save_first_token", alias=True):
        mtp_save_first_token(  # noqa: F821 - defined by define_ops
            x,
            not_need_stop,
            seq_lens_decoder,
            prompt_lens,
            step_idx,
            rank_id,
            save_each_rank,
            skip_chunk_prefill,
            msg_queue_id=msg_queue_id,
            msg_id=msg_id,
            ftok_path=ftok_path,
        )
