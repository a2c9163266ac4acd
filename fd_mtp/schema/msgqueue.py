"""Schemas of the output-message ops (host ops over a SysV message queue): spec ../shared/spec/ops.md
§5.11, §6.8. Host-only: no fd_mtp.cuda wrapper (tests/ops/test_schema.py lists them in CPU_ONLY); the
kernel header custom_ops/kernels/msgqueue.h builds the payload, custom_ops/paddle/msgqueue.cc copies
device inputs to the host, fills the kernel's Params by hand (host pointers) and does the SysV calls.

The tensors the binding copies to the host one by one (GPU ones synchronously, as upstream) are
``any_place``: they need not share a device. Keyword-only attributes: ``msg_queue_id`` defaults to
``INFERENCE_MSG_QUEUE_ID`` (fd_mtp.envs); ``msg_id`` to ``INFERENCE_MSG_ID`` and ``ftok_path`` to
``"./"``, resolved by fd_mtp.ops.msgqueue (``resolve_msg_id``, which reads INFERENCE_MSG_ID through
fd_mtp.envs and refuses the reserved id 2)."""

from . import Attr, Op, Status, Tensor

_BATCH_TOO_LARGE = (
    "has {value} rows but a message holds at most {limit} requests (MAX_BSZ of the wire format)"
)
_BAD_MSG_ID = 'is {value}; 2 and negative ids are reserved (-2 means "no output")'


_MAX_BSZ = Attr(
    "max_bsz",
    "int",
    min=1,
    max=512,
    kw=True,
    doc="requests per top-k message (MAX_BSZ of the wire format); None: 512 (upstream's)",
)


def _ids(msg_id: bool) -> tuple:
    """The keyword-only queue / message / key attributes every op of the family takes."""
    out = (
        Attr("msg_queue_id", "int", kw=True, env="INFERENCE_MSG_QUEUE_ID", doc="the SysV queue id"),
    )
    if msg_id:
        out += (
            Attr(
                "msg_id",
                "int",
                kw=True,
                doc="the message id (header word); None: INFERENCE_MSG_ID or 1 (fd_mtp.ops.msgqueue.resolve_msg_id)",
            ),
        )
    return out + (
        Attr(
            "ftok_path", "str", kw=True, doc='the directory whose inode keys the queue; None: "./"'
        ),
    )


OPS = [
    Op(
        name="speculate_save_output",
        entry="SpeculateSaveOutput",
        spec="§5.11",
        kernel="msgqueue",
        cuda=False,
        params=None,  # host pointers (GPU inputs are copied first): filled by hand in apply
        args=(
            Tensor(
                "accept_tokens",
                "int64[B, W>=0]",
                any_place=True,
                param=None,
                doc="defines bs (<= 256); first min(W, 6) columns sent",
            ),
            Tensor("accept_num", "int32[>=B]", any_place=True, param=None),
            Tensor(
                "not_need_stop", "bool[1]", cpu=True, param=None, doc="the sign of the header word"
            ),
            Tensor("seq_lens_decoder", "int32[>=B]", any_place=True, param=None),
            Tensor("prompt_lens", "int64[>=B]", any_place=True, param=None),
            Attr("rank_id", "int64"),
            Attr("save_each_rank", "bool"),
            Attr("skip_prefill", "bool"),
            *_ids(msg_id=True),
        ),
        status=(
            Status("msgqueue::kBatchTooLarge", 1, "accept_tokens", _BATCH_TOO_LARGE),
            Status("msgqueue::kBadMsgId", 2, "msg_id", _BAD_MSG_ID),
            Status(
                "msgqueue::kBadAcceptNum",
                3,
                "accept_num",
                "is {value} but must be in [0, {limit}]: a request sends at most "
                "min(accept_tokens columns, MAX_DRAFT_TOKENS 6) tokens",
            ),
        ),
    ),
    Op(
        name="speculate_get_output",
        entry="SpeculateGetOutput",
        spec="§5.11",
        kernel="msgqueue",
        cuda=False,
        params=None,
        place="x",
        args=(
            Tensor(
                "x",
                "int64[>=1794]",
                "written",
                cpu=True,
                param=None,
                doc="x[0 .. 1793] (flat) = the message",
            ),
            Attr("rank_id", "int64"),
            Attr("wait_flag", "bool"),
            Attr("get_each_rank", "bool"),
            *_ids(msg_id=False),
        ),
    ),
    Op(
        name="mtp_save_first_token",
        entry="MtpSaveFirstToken",
        spec="§6.8",
        kernel="msgqueue",
        cuda=False,
        params=None,  # host pointers (GPU inputs are copied first): filled by hand in apply
        args=(
            Tensor(
                "x",
                "int64[B, W>=2]",
                any_place=True,
                param=None,
                doc="base_model_draft_tokens; defines bs (<= 256)",
            ),
            Tensor(
                "not_need_stop", "bool[1]", cpu=True, param=None, doc="the sign of the header word"
            ),
            Tensor("seq_lens_decoder", "int32[>=B]", any_place=True, param=None),
            Tensor("prompt_lens", "int64[>=B]", any_place=True, param=None),
            Tensor("step_idx", "int64[>=B]", any_place=True, param=None),
            Attr("rank_id", "int64"),
            Attr("save_each_rank", "bool"),
            Attr("skip_chunk_prefill", "bool"),
            *_ids(msg_id=True),
        ),
        status=(
            Status("msgqueue::kBatchTooLarge", 1, "x", _BATCH_TOO_LARGE),
            Status("msgqueue::kBadMsgId", 2, "msg_id", _BAD_MSG_ID),
        ),
    ),
    Op(
        name="speculate_save_output_topk",
        entry="SpeculateSaveOutputTopk",
        spec="§5.16, docs/spec/logprobs.md",
        kernel="msgqueue",
        cuda=False,
        params=None,  # host pointers (GPU inputs are copied first): filled by hand in apply
        batch="token_num_per_batch",
        args=(
            Tensor(
                "sampled_token_ids",
                "int64[>=B, Ws>=1]",
                any_place=True,
                param=None,
                doc="accept_tokens: token j of request i at [i, j]",
            ),
            Tensor("logprob_token_ids", "int64[N, C>=1]", any_place=True, param=None),
            Tensor("logprob_scores", "float32[N, C]", any_place=True, param=None),
            Tensor("logprob_ranks", "int64[>=N]", any_place=True, param=None),
            Tensor(
                "token_num_per_batch",
                "int32[B]",
                any_place=True,
                param=None,
                doc="defines bs (<= max_bsz)",
            ),
            Tensor("cu_batch_token_offset", "int32[>=B]", any_place=True, param=None),
            Tensor(
                "not_need_stop", "bool[1]", cpu=True, param=None, doc="the sign of the header word"
            ),
            Tensor("seq_lens_decoder", "int32[>=B]", any_place=True, param=None),
            Tensor("prompt_lens", "int64[>=B]", any_place=True, param=None),
            Attr("message_flag", "int", doc="meta[1]: 3 target, 4 draft"),
            Attr("rank_id", "int64"),
            Attr("save_each_rank", "bool"),
            *_ids(msg_id=True),
            _MAX_BSZ,
        ),
        status=(
            Status(
                "msgqueue::kTopkBatchTooLarge",
                1,
                "token_num_per_batch",
                "has {value} entries but a message holds at most {limit} requests (max_bsz)",
            ),
            Status("msgqueue::kTopkBadMsgId", 2, "msg_id", _BAD_MSG_ID),
            Status(
                "msgqueue::kTopkTokenNum",
                3,
                "token_num_per_batch",
                "is {value} but must be in [0, {limit}] (min(6, sampled_token_ids columns))",
            ),
            Status(
                "msgqueue::kTopkOffset",
                4,
                "cu_batch_token_offset",
                "puts the request's logprob rows at {value}, outside [0, {limit}] (rows)",
            ),
            Status(
                "msgqueue::kTopkWideLogprobs",
                5,
                "logprob_token_ids",
                "has {value} columns; a message holds {limit} per token (sampled + top 20)",
            ),
        ),
    ),
    Op(
        name="speculate_get_output_topk",
        entry="SpeculateGetOutputTopk",
        spec="§5.16, docs/spec/logprobs.md",
        kernel="msgqueue",
        cuda=False,
        params=None,
        place="output_tokens",
        args=(
            Tensor("output_tokens", "int64[>=1]", "written", cpu=True, param=None),
            Tensor("output_scores", "float32[>=1]", "written", cpu=True, param=None),
            Tensor("output_ranks", "int64[>=1]", "written", cpu=True, param=None),
            Attr("real_k", "int", min=0, max=20, doc="entries 0 .. real_k of each token copied"),
            Attr("rank_id", "int64", doc="unused (as upstream)"),
            Attr("wait_flag", "bool"),
            *_ids(msg_id=False),
            _MAX_BSZ,
        ),
        status=(
            Status(
                "msgqueue::kTopkOutputTokens",
                1,
                "output_tokens",
                "has {value} elements; a message needs {limit} (3 + max_bsz * 127)",
            ),
            Status(
                "msgqueue::kTopkOutputScores",
                2,
                "output_scores",
                "has {value} elements; a message needs {limit} (max_bsz * 126)",
            ),
            Status(
                "msgqueue::kTopkOutputRanks",
                3,
                "output_ranks",
                "has {value} elements; a message needs {limit} (max_bsz * 6)",
            ),
            Status(
                "msgqueue::kTopkBadMessage",
                4,
                "msg_queue_id",
                "delivered a message with {value} requests / tokens (limit {limit}): not a top-k "
                "message of this max_bsz",
            ),
        ),
    ),
]
