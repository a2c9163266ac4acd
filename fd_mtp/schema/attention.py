"""Schemas of the model-forward kernels (not FastDeploy ops; see fd_mtp/schema/__init__.py for
the format): paged_attention, the float32 kernel of fd_mtp.model's PagedAttentionCPU, and
decoder_layer, a whole dense decoder layer on the CPU (fd_mtp.model's native forward)."""

from . import Attr, Op, Status, Tensor

# The paged-attention kernel's statuses: both ops run its check pass.
_PAGED_STATUS = (
    Status(
        "kPagedBatchId",
        1,
        "batch_id_per_token",
        "names request {value} but the batch has {limit} requests",
    ),
    Status(
        "kPagedTokenIndex",
        2,
        "batch_id_per_token",
        "does not match cu_seqlens_q: token {value} is outside its request's range (which ends at {limit})",
    ),
    Status("kPagedDecoder", 3, "seq_lens_decoder", "is {value}, must be >= {limit}"),
    Status(
        "kPagedTableWidth",
        4,
        "block_tables",
        "is too narrow: position {value} is needed but the table covers {limit} positions",
    ),
    Status(
        "kPagedBlockId",
        5,
        "block_tables",
        "holds block id {value} for a needed position; valid block ids are [0, {limit})",
    ),
)

OPS = [
    Op(
        name="paged_attention",
        entry="PagedAttention",
        spec="fd_mtp.model",
        # Not generated yet: cmake/gen_ops.py registers an op's in-place outputs before its
        # returned ones ("key_cache_out", "value_cache_out", "out"), while this op is registered
        # with "out" first, which is what paddle's generic runner returns first (run_registered,
        # static programs). custom_ops/paddle/paged_attention.cc stays hand-written until the
        # generator can keep that order; its entry point is still declared from this schema
        # (ops_gen.h), and fd_mtp.ops calls it through invoke().
        kernel="paged_attention",
        params="PagedAttentionParams",
        extra_params={
            "num_tokens": "T",
            "q_heads": "Hq",
            "kv_heads": "Hkv",
            "head_dim": "D",
            "num_blocks": "NBlk",
            "block_size": "BS",
            "table_width": "NB",
        },
        returns=("out",),
        # The place of every tensor is q's. Checked by hand in apply (in this order, with the
        # messages of the former binding): Hkv divides Hq, v has k's heads (Hv), key_cache has k's
        # heads (Hc), cu_seqlens_q is [bsz + 1], block_tables has >= bsz rows, seq_lens_decoder
        # >= bsz entries and batch_id_per_token >= T entries.
        args=(
            Tensor("q", "float32[T, Hq>=0, D>=0]", doc="no head or head_dim minimum, as before"),
            Tensor("k", "float32[T, Hkv, D]"),
            Tensor("v", "float32[T, Hv, D]"),
            Tensor(
                "key_cache", "float32[NBlk, Hc, BS, D]", "written", doc="the slot of every token"
            ),
            Tensor(
                "value_cache", "float32[NBlk, Hc, BS, D]", "written", doc="the slot of every token"
            ),
            Tensor("block_tables", "int32[R, NB]"),
            Tensor("cu_seqlens_q", "int32[]", doc="[bsz + 1]: defines bsz"),
            Tensor("batch_id_per_token", "int32[]", doc="[>=T] entries, any shape"),
            Tensor("seq_lens_decoder", "int32[S]", doc="[>=bsz] or [>=bsz, 1]"),
            Attr("scale", "float", kw=True, doc="None: 1 / sqrt(D), computed by the wrappers"),
        ),
        status=_PAGED_STATUS,
    ),
    Op(
        name="decoder_layer",
        entry="DecoderLayer",
        spec="fd_mtp.model",
        kernel="decoder_layer",
        params="DecoderLayerParams",
        cuda=False,
        extra_params={
            "num_tokens": "T",
            "hidden_size": "H",
            "kv_heads": "Hkv",
            "head_dim": "D",
            "intermediate_size": "I",
            "num_blocks": "NBlk",
            "block_size": "BS",
            "table_width": "NB",
        },
        returns=("out", "residual_out"),
        # The place of every tensor is hidden's (the CPU). Checked by hand in apply: D is even and
        # rope_cos / rope_sin have D / 2 columns; q_weight has Hq * D columns with Hkv dividing
        # Hq; k_weight / v_weight have Hkv * D columns (Hkv: the caches'); cu_seqlens_q is
        # [bsz + 1], block_tables has >= bsz rows, seq_lens_decoder >= bsz entries and
        # batch_id_per_token >= T entries.
        args=(
            Tensor("hidden", "float32[T, H>=1]", doc="the layer's input (packed tokens)"),
            Tensor("residual", "float32[T, H]", doc="the residual stream; zeros for layer 0"),
            Tensor("input_norm_weight", "float32[H]"),
            Tensor("q_weight", "float32[H, QD]", doc="[H, Hq * D]"),
            Tensor("k_weight", "float32[H, KD]", doc="[H, Hkv * D]"),
            Tensor("v_weight", "float32[H, KD]", doc="[H, Hkv * D]"),
            Tensor("o_weight", "float32[QD, H]"),
            Tensor("post_norm_weight", "float32[H]"),
            Tensor("gate_weight", "float32[H, I]"),
            Tensor("up_weight", "float32[H, I]"),
            Tensor("down_weight", "float32[I, H]"),
            Tensor(
                "key_cache", "float32[NBlk, Hkv, BS, D]", "written", doc="the slot of every token"
            ),
            Tensor(
                "value_cache", "float32[NBlk, Hkv, BS, D]", "written", doc="the slot of every token"
            ),
            Tensor("block_tables", "int32[R, NB]"),
            Tensor("cu_seqlens_q", "int32[]", doc="[bsz + 1]: defines bsz"),
            Tensor("batch_id_per_token", "int32[]", doc="[>=T] entries, any shape"),
            Tensor("seq_lens_decoder", "int32[S]", doc="[>=bsz] or [>=bsz, 1]"),
            Tensor("rope_cos", "float32[T, D2]", doc="[T, D / 2]: cos of every token's angles"),
            Tensor("rope_sin", "float32[T, D2]", doc="[T, D / 2]: sin of every token's angles"),
            Attr("eps", "float", min=0.0, doc="the RMSNorms' epsilon"),
            Attr("scale", "float", kw=True, doc="None: 1 / sqrt(D), computed by the wrappers"),
            Attr(
                "num_threads",
                "int",
                min=1,
                kw=True,
                param=None,
                doc="threads the work is split over (the result does not depend on it); None: 1",
            ),
        ),
        status=_PAGED_STATUS,
    ),
]
