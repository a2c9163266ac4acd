"""Output-message ops: the speculative decoder's per-step results sent to the token processor
through a SysV message queue (spec ../shared/spec/ops.md §5.11, §6.8).

Wire format (FastDeploy's, shared with every reader): ``long mtype = 1`` followed by
``int32 mtext[MESSAGE_INTS]``, ``MESSAGE_INTS = 2 + MAX_BSZ + MAX_BSZ * MAX_DRAFT_TOKENS`` = 1794::

    mtext[0]                      +msg_id, or -msg_id when not_need_stop is False
    mtext[1]                      bs, the number of requests in the batch
    mtext[2 + i]                  count of request i (i < 256; 0 for i >= bs)
    mtext[258 + 6 * i + j]        token j of request i (j < 6; 0 for i >= bs)

The queue is ``msgget(ftok(ftok_path, msg_queue_id), IPC_CREAT | 0666)``. Upstream always uses
``ftok("./", id)``, so the key depends on the process's current directory (its device and inode
number, not its name) and only on the low 8 bits of ``msg_queue_id`` (ids 1 and 257 name the same
queue). Writer and reader must therefore agree on both; ``ftok_path`` (keyword, default ``"./"``)
makes the directory explicit.

What upstream read from the environment is resolved here, in Python, and passed to the op as an
attribute: ``msg_queue_id=None`` means ``INFERENCE_MSG_QUEUE_ID`` (default 1, read by fd_mtp.envs)
and ``msg_id=None`` means ``INFERENCE_MSG_ID`` (default 1; 2 and negative ids are reserved and raise
ValueError); ``ftok_path=None`` means ``"./"``. The C++ op reads no environment variable and keeps
no static state: the key and the queue handle are looked up on every call, so one process can serve
several queues. Arguments, checks and the binding: fd_mtp/schema/msgqueue.py.

Errors: bad arguments raise ValueError naming the argument, before anything is sent. A failing
``msgget`` / ``msgsnd`` / ``msgrcv`` (for example EINTR when a signal interrupts a blocked call,
EIDRM when the queue is removed) raises OSError with the system's message (upstream printed
"full msg buffer" and carried on, or reported "no message").
"""

from __future__ import annotations

# The wire constants and the paddle-free queue helpers live in fd_mtp.sysv_queue (below the ops and
# the references, which both use them); re-exported here as part of fd_mtp.ops' API.
from ..sysv_queue import (  # noqa: E402,F401
    _ERRNO,
    _INT32_MAX,
    DEFAULT_FTOK_PATH,
    MAX_BSZ,
    MAX_DRAFT_TOKENS,
    MESSAGE_BYTES,
    MESSAGE_INTS,
    _as_int,
    _path,
    queue_key,
    receive_message,
    remove_queue,
    resolve_msg_id,
    resolve_msg_queue_id,
)
from ._loader import invoke

__all__ = [
    "MAX_BSZ",
    "MAX_DRAFT_TOKENS",
    "MESSAGE_BYTES",
    "MESSAGE_INTS",
    "mtp_save_first_token",
    "mtp_save_first_token_dynamic",
    "queue_key",
    "remove_queue",
    "speculate_get_output",
    "speculate_get_output_dynamic",
    "speculate_save_output",
    "speculate_save_output_dynamic",
]


def _invoke(op: str, values: dict) -> None:
    """Run the op (`invoke`); a failed SysV call (message ends in "[errno N]") becomes OSError."""
    try:
        invoke(op, values)
    except ValueError as exc:
        match = _ERRNO.search(str(exc))
        if match:
            raise OSError(int(match.group(1)), str(exc)) from None
        raise


def speculate_save_output(
    accept_tokens,
    accept_num,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    rank_id,
    save_each_rank,
    skip_prefill,
    *,
    msg_queue_id=None,
    msg_id=None,
    ftok_path=None,
) -> None:
    """Send this step's accepted tokens to the token processor (spec §5.11).

    ``bs = accept_tokens.shape[0]`` (at most 256). Nothing is sent when ``rank_id > 0`` and not
    ``save_each_rank``. Otherwise one message (module docstring) with, for request ``i < bs``:
    count ``accept_num[i]`` (0 when ``skip_prefill`` and ``seq_lens_decoder[i] < prompt_lens[i]``,
    i.e. the request is still in its prompt) and tokens ``accept_tokens[i, :6]`` (always written,
    whatever the count). ``msgsnd`` blocks while the queue is full, as upstream.

    Args:
        accept_tokens: ``[bs <= 256, W]`` int64, read; defines bs. Only the first ``min(W, 6)``
            columns are sent, columns ``W .. 5`` are sent as 0 (upstream read 6 entries from each
            row even when ``W < 6``, running into the next row). Tokens are narrowed to int32.
        accept_num: ``[>=bs]`` int32, read. Every count that is sent must be in
            ``[0, min(W, 6)]`` (ValueError otherwise: a larger count would make the reader take
            the next request's tokens; upstream sent it as is).
        not_need_stop: ``[1]`` bool on the CPU, read: the sign of ``mtext[0]``.
        seq_lens_decoder: ``[>=bs]`` int32, read. prompt_lens: ``[>=bs]`` int64, read.
        rank_id (int), save_each_rank (bool), skip_prefill (bool).
        msg_queue_id: keyword-only queue id; default (None) ``$INFERENCE_MSG_QUEUE_ID`` or 1,
            read by fd_mtp.envs.
        msg_id: keyword-only message id; default (None) ``$INFERENCE_MSG_ID`` or 1; 2 or
            negative raise ValueError.
        ftok_path: keyword-only directory whose inode keys the queue; default (None) ``"./"``
            (upstream's).

    Returns:
        None; no tensor is written. Raises ValueError naming the argument on bad input (bs > 256,
        wrong dtype or shape, a count outside ``[0, min(W, 6)]``, msg_id 2) with nothing sent,
        checked on every rank (upstream returned
        on ranks that do not save before looking at the input); OSError when msgsnd fails.
        GPU tensors (all but not_need_stop) are copied to the host first.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> tokens = paddle.to_tensor([[11, 12], [21, 22]], dtype="int64")
        >>> num = paddle.to_tensor([2, 1], dtype="int32")
        >>> go_on = paddle.to_tensor([True])
        >>> dec = paddle.to_tensor([9, 9], dtype="int32")
        >>> prompt = paddle.to_tensor([4, 4], dtype="int64")
        >>> ops.speculate_save_output(tokens, num, go_on, dec, prompt, 0, False, True,
        ...                           msg_queue_id=99, msg_id=7)
        >>> x = paddle.zeros([ops.MESSAGE_INTS, 1], dtype="int64")
        >>> ops.speculate_get_output(x, 0, False, False, msg_queue_id=99)
        >>> x[:4, 0].tolist(), x[258:270, 0].tolist()
        ([7, 2, 2, 1], [11, 12, 0, 0, 0, 0, 21, 22, 0, 0, 0, 0])
        >>> ops.remove_queue(99)
        True
    """
    msg_queue_id = resolve_msg_queue_id(msg_queue_id)
    msg_id = resolve_msg_id(msg_id)
    ftok_path = _path(ftok_path)
    _invoke("speculate_save_output", locals())


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
    speculate_save_output(
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


def speculate_get_output(
    x, rank_id, wait_flag, get_each_rank, *, msg_queue_id=None, ftok_path=None
) -> None:
    """Receive one output message into ``x`` (the token processor's side of §5.11 / §6.8).

    Does nothing when ``rank_id > 0`` and not ``get_each_rank``. Otherwise receives the oldest
    message of the queue (any mtype) and writes its ``MESSAGE_INTS`` int32 words, widened to int64,
    to ``x[0 .. 1793]`` (flat). With ``wait_flag`` False and an empty queue it writes ``x[0] = -2,
    x[1] = 0`` and leaves the rest of ``x``; with ``wait_flag`` True it blocks until a message
    arrives.

    Args:
        x: int64 CPU tensor with at least 1794 elements (FastDeploy: ``[1794, 1]``), **written**.
        rank_id (int), wait_flag (bool), get_each_rank (bool).
        msg_queue_id: keyword-only queue id; default (None) ``$INFERENCE_MSG_QUEUE_ID`` or 1,
            read by fd_mtp.envs.
        ftok_path: keyword-only directory whose inode keys the queue; default (None) ``"./"``
            (upstream's).

    Returns:
        None. Raises ValueError naming ``x`` when it is not an int64 CPU tensor of >= 1794
        elements (checked on every rank). Differences from upstream: a failing ``msgrcv`` other than "queue empty" in
        non-blocking mode (EINTR, EIDRM, E2BIG for a foreign oversized message) raises OSError
        instead of reporting -2; a shorter foreign message leaves zeros, not a previous message's
        words, after its end.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> x = paddle.full([ops.MESSAGE_INTS, 1], 5, dtype="int64")
        >>> ops.speculate_get_output(x, 0, False, False, msg_queue_id=98)  # empty queue
        >>> x[:3, 0].tolist()
        [-2, 0, 5]
        >>> ops.remove_queue(98)
        True
    """
    msg_queue_id = resolve_msg_queue_id(msg_queue_id)
    ftok_path = _path(ftok_path)
    _invoke("speculate_get_output", locals())


def speculate_get_output_dynamic(
    x, rank_id, wait_flag, msg_queue_id, get_each_rank, *, ftok_path=DEFAULT_FTOK_PATH
) -> None:
    """`speculate_get_output` with the queue id positional (upstream's ``_dynamic`` op).

    The given ``msg_queue_id`` is used as is (upstream let ``$INFERENCE_MSG_QUEUE_ID`` override it).
    """
    speculate_get_output(
        x, rank_id, wait_flag, get_each_rank, msg_queue_id=msg_queue_id, ftok_path=ftok_path
    )


def mtp_save_first_token(
    x,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    step_idx,
    rank_id,
    save_each_rank,
    skip_chunk_prefill,
    *,
    msg_queue_id=None,
    msg_id=None,
    ftok_path=None,
) -> None:
    """Send the first target token and the first draft of new requests (spec §6.8; PD prefill node).

    ``bs = x.shape[0]`` (at most 256). Nothing is sent when ``rank_id > 0`` and not
    ``save_each_rank``. Otherwise one message (module docstring) in which request ``i < bs`` with
    ``step_idx[i] == 1`` (and, when ``skip_chunk_prefill``, ``seq_lens_decoder[i] >=
    prompt_lens[i]``) has count 2 and tokens ``[x[i, 0], x[i, 1], 0, 0, 0, 0]``; every other slot
    has count 0 and tokens 0.

    Args:
        x: ``[bs <= 256, >= 2]`` int64, read (``base_model_draft_tokens``: column 0 the target's
            first token, column 1 the MTP's first draft); defines bs.
        not_need_stop: ``[1]`` bool on the CPU, read: the sign of ``mtext[0]``.
        seq_lens_decoder: ``[>=bs]`` int32, read. prompt_lens, step_idx: ``[>=bs]`` int64, read.
        rank_id (int), save_each_rank (bool), skip_chunk_prefill (bool).
        msg_queue_id, msg_id, ftok_path: keyword-only, as in `speculate_save_output`.

    Returns:
        None; no tensor is written. Raises ValueError naming the argument on bad input, with
        nothing sent; OSError when msgsnd fails. Difference from upstream: upstream kept the
        message in a function-static struct and wrote only the slots of requests with step_idx 0
        or 1, so slots with step_idx >= 2 (and i >= bs) repeated the previous message's values;
        here every slot is written (zeros), so a message never carries stale tokens.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> x = paddle.to_tensor([[11, 31, -1], [12, 32, -1], [13, 33, -1]], dtype="int64")
        >>> go_on = paddle.to_tensor([True])
        >>> dec = paddle.to_tensor([4, 4, 4], dtype="int32")
        >>> prompt = paddle.to_tensor([4, 4, 4], dtype="int64")
        >>> step = paddle.to_tensor([1, 0, 2], dtype="int64")
        >>> ops.mtp_save_first_token(x, go_on, dec, prompt, step, 0, False, True, msg_queue_id=97)
        >>> out = paddle.zeros([ops.MESSAGE_INTS], dtype="int64")
        >>> ops.speculate_get_output(out, 0, False, False, msg_queue_id=97)
        >>> out[:5].tolist(), out[258:260].tolist(), int(out[264:].abs().sum())
        ([1, 3, 2, 0, 0], [11, 31], 0)
        >>> ops.remove_queue(97)
        True
    """
    msg_queue_id = resolve_msg_queue_id(msg_queue_id)
    msg_id = resolve_msg_id(msg_id)
    ftok_path = _path(ftok_path)
    _invoke("mtp_save_first_token", locals())


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
    mtp_save_first_token(
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
