"""Schemas of the packing ops (the packed token layout of a step): spec ../shared/spec/ops.md §5.1-§5.4.

The token counts (``token_num``, ``out_token_num``) are read on the host by the hand-written apply
(``packing::host_count``: one int64 or int32 element in [0, INT32_MAX]); rebuild_padding's batch is
``cu_seqlens_q.shape[0] - 1``, which no tensor spec expresses, so its per-request shapes are
checked by hand too.
"""

from . import Attr, Op, Status, Tensor

OPS = [
    Op(
        name="speculate_get_padding_offset",
        entry="SpeculateGetPaddingOffset",
        spec="§5.1",
        batch="seq_len",
        place="input_ids",
        kernel="speculate_padding",
        params="PaddingOffsetParams",
        extra_params={"input_ids_cols": "L", "draft_tokens_cols": "Kd", "bsz": "B"},
        returns=("x_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"),
        args=(
            Tensor("input_ids", "int64[>=B, L>=0]", doc="prefill tokens; L = the offsets' width"),
            Tensor("draft_tokens", "int64[>=B, Kd>=0]", doc="decode tokens"),
            Tensor("cum_offsets", "int32[>=B]", doc="inclusive cumsum of L - seq_len"),
            Tensor(
                "token_num", "int64|int32[1]", any_place=True, param=None, doc="T, read on the host"
            ),
            Tensor("seq_len", "int32[B]"),
            Tensor("seq_lens_encoder", "int32[>=B]", doc="> 0: prefilling, tokens from input_ids"),
        ),
        status=(
            Status(
                "kPadNegativeSeqLen", 1, "seq_len", "is {value}; token counts must be >= {limit}"
            ),
            Status(
                "kPadInputIdsRow",
                2,
                "seq_len",
                "is {value} for a prefilling request but its input_ids row has {limit} columns",
            ),
            Status(
                "kPadDraftTokensRow",
                3,
                "seq_len",
                "is {value} for a decoding request but its draft_tokens row has {limit} columns",
            ),
            Status(
                "kPadCumOffsets",
                4,
                "cum_offsets",
                "is {value}; it must be the inclusive prefix sum of input_ids.shape[1] - seq_len, {limit}",
            ),
            Status("kPadTokenNum", 5, "token_num", "is {value} but seq_len sums to {limit}"),
        ),
    ),
    Op(
        name="speculate_get_seq_lens_output",
        entry="SpeculateGetSeqLensOutput",
        spec="§5.2",
        batch="seq_lens_this_time",
        kernel="speculate_padding",
        params="SeqLensOutputParams",
        extra_params={"bsz": "B"},
        returns=("seq_lens_output",),
        args=(
            Tensor("seq_lens_this_time", "int32[B]"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "int32[>=B]", "unused", param=None),
        ),
    ),
    Op(
        name="speculate_get_output_padding_offset",
        entry="SpeculateGetOutputPaddingOffset",
        spec="§5.3",
        batch="output_cum_offsets_tmp",
        kernel="speculate_padding",
        params="OutputPaddingOffsetParams",
        extra_params={"bsz": "B"},
        returns=("output_padding_offset", "output_cum_offsets"),
        args=(
            Tensor(
                "output_cum_offsets_tmp",
                "int32[B]",
                doc="inclusive cumsum of max_seq_len - seq_lens_output",
            ),
            Tensor(
                "out_token_num",
                "int64|int32[1]",
                any_place=True,
                param=None,
                doc="To, read on the host",
            ),
            Tensor("seq_lens_output", "int32[>=B]"),
            Attr("max_seq_len", "int", min=1, doc="the L_in the offsets are built with"),
        ),
        status=(
            Status(
                "kOutNegativeSeqLens",
                1,
                "seq_lens_output",
                "is {value}; row counts must be >= {limit}",
            ),
            Status(
                "kOutSeqLensTooLong",
                2,
                "seq_lens_output",
                "is {value}; it must be <= max_seq_len = {limit}",
            ),
            Status(
                "kOutCumOffsets",
                3,
                "output_cum_offsets_tmp",
                "is {value}; it must be the inclusive prefix sum of max_seq_len - seq_lens_output, {limit}",
            ),
            Status(
                "kOutTokenNum", 4, "out_token_num", "is {value} but seq_lens_output sums to {limit}"
            ),
        ),
    ),
    Op(
        name="rebuild_padding",
        entry="RebuildPadding",
        spec="§5.4",
        kernel="rebuild_padding",
        params="RebuildPaddingParams",
        extra_params={"tmp_rows": "T"},
        returns=("out",),
        args=(
            Tensor(
                "tmp_out",
                "float32|float16|bfloat16[T, H>=0]",
                param=None,
                doc="packed model output",
            ),
            Tensor("cu_seqlens_q", "int32[]", doc="[bsz + 1], checked by hand; defines bsz"),
            Tensor("seq_len_this_time", "int32[]", doc="[>=bsz], checked by hand"),
            Tensor("seq_lens_decoder", "int32[]", doc="[>=bsz], checked by hand"),
            Tensor(
                "seq_lens_encoder",
                "int32[]",
                doc="[>=bsz], checked by hand; copied to the host for R",
            ),
            Tensor(
                "output_padding_offset",
                "int32[]",
                optional=True,
                param=None,
                doc="[>=R]: speculative branch",
            ),
            Tensor(
                "first_token_out",
                "any[]",
                "unused",
                optional=True,
                param=None,
                doc="accepted for the signature",
            ),
            Attr(
                "max_input_length",
                "int",
                doc="the width the offsets were built with (>= 1: checked by hand)",
            ),
            Attr("enable_logprob", "bool", param=None, doc="no effect"),
            Attr(
                "use_output_padding_offset",
                "bool",
                kw=True,
                param=None,
                doc="the speculative branch; None: output_padding_offset is not None (paddle hands a "
                "zero-size tensor to an optional input as none, which must not switch branches)",
            ),
        ),
        status=(
            Status(
                "kRebuildRequest",
                1,
                "output_padding_offset",
                "maps an output row to request {value} but the batch has {limit} requests (check "
                "max_input_length: it must be the width the offsets were built with)",
            ),
            Status(
                "kRebuildSourceRow",
                2,
                "cu_seqlens_q",
                "with seq_lens_encoder selects tmp_out row {value} but tmp_out has {limit} rows",
            ),
        ),
    ),
]
