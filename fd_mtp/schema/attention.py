"""Schemas of the model-forward kernels (not FastDeploy ops; see fd_mtp/schema/__init__.py for
the format): paged_attention, the float32 kernel of fd_mtp.model's PagedAttentionCPU, and
decoder_layer, a whole dense decoder layer on the CPU (fd_mtp.model's native forward)."""

from . import Attr, Check, Op, Out, Status, Tensor, Workspace

_SCALE = "1.0 / dim(q, -1) ** 0.5"  # the default score scale: 1 / sqrt(D)
_SCALE_OF_CACHE = "1.0 / dim(key_cache, -1) ** 0.5"
# The packed batch's metadata (the paged-attention kernel's): cu_seqlens_q [bsz + 1] defines bsz;
# block_tables has >= bsz rows, seq_lens_decoder >= bsz entries and batch_id_per_token an entry
# per token of `tokens` (its argument).
_BSZ = "dim(cu_seqlens_q, 0) - 1"


def _paged_batch(tokens):
    return (
        Check(
            "cu_seqlens_q",
            "rank(cu_seqlens_q) == 1 and dim(cu_seqlens_q, 0) >= 1",
            "must have shape [bsz + 1], got {shape(cu_seqlens_q)}",
        ),
        Check(
            "block_tables",
            f"dims.R >= {_BSZ}",
            f"has {{dims.R}} rows but the batch has {{{_BSZ}}} requests",
        ),
        Check(
            "seq_lens_decoder",
            f"dims.S >= {_BSZ}",
            f"has {{dims.S}} entries but the batch has {{{_BSZ}}} requests (bsz is taken from "
            "cu_seqlens_q)",
        ),
        Check(
            "batch_id_per_token",
            "numel(batch_id_per_token) >= dims.T",
            f"has {{numel(batch_id_per_token)}} entries but {tokens} has {{dims.T}} tokens",
        ),
    )


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
        doc="""Append this step's k/v to the paged cache, then causal attention of every packed token.

        Token ``t`` belongs to request ``b = batch_id_per_token[t]``, is its local token
        ``i = t - cu_seqlens_q[b]`` and has position ``pos = seq_lens_decoder[b] + i``. Position ``p``
        of request b lives in block ``block_tables[b, p // block_size]`` at offset ``p % block_size``.
        First every token's k/v rows are written to its slot; then every (token, q head h) attends
        over positions ``0 .. pos`` of its request read from the cache (so a prefill chunk sees its
        own earlier tokens), kv head ``h // (Hq // Hkv)``, scores ``q . k * scale``, softmax in float32
        (online, numerically stable).

        Args:
            q: ``[T, Hq, D]`` float32, read.
            k, v: ``[T, Hkv, D]`` float32, read (RoPE already applied to q and k); Hkv divides Hq.
            key_cache, value_cache: ``[num_blocks, Hkv, block_size, D]`` float32, **written** (the
                slot of every token).
            block_tables: ``[>=bsz, NB]`` int32, read (-1 = no block; only the columns a token needs
                are read).
            cu_seqlens_q: ``[bsz + 1]`` int32, read; defines bsz.
            batch_id_per_token: ``[>=T]`` int32, read.
            seq_lens_decoder: ``[>=bsz]`` (or ``[bsz, 1]``) int32, read: tokens already cached.
            scale (float, keyword): score scale; default ``1 / sqrt(D)``.

        Returns:
            ``[T, Hq * D]`` float32: head h of token t in columns ``h*D .. h*D + D``.

        Not a FastDeploy op (upstream uses its append_attention CUDA kernels); float32 only. Bad
        metadata raises ValueError naming the argument before anything is written: a request id outside
        ``[0, bsz)`` or a token outside its request's ``cu_seqlens_q`` range (``batch_id_per_token``),
        a negative ``seq_lens_decoder``, a needed position beyond the table width or a needed block id
        outside ``[0, num_blocks)`` (``block_tables``). Two requests sharing a slot are not detected.

        NaN / inf in ``q``, ``k``, ``v`` or the caches are not inspected: they are scattered into the
        caches as they are and propagate through IEEE arithmetic (a NaN or inf key or value makes the
        output rows of every query that attends to it NaN or inf; queries that do not attend to it
        are unaffected), as in the numpy reference.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> q = paddle.ones([2, 1, 2]); k = paddle.ones([2, 1, 2])
            >>> v = paddle.to_tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
            >>> kc, vc = paddle.zeros([2, 1, 2, 2]), paddle.zeros([2, 1, 2, 2])
            >>> i32 = lambda x: paddle.to_tensor(x, dtype="int32")
            >>> out = ops.paged_attention(q, k, v, kc, vc, i32([[1, -1]]), i32([0, 2]), i32([0, 0]), i32([0]))
            >>> out.tolist(), vc[1, 0].tolist()
            ([[1.0, 2.0], [2.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]])
""",
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
            "bsz": _BSZ,
        },
        cpu="paged_attention_cpu",
        computed_dims={"HqD": "dims.Hq * dims.D"},
        outputs=(Out("out", "float32[T, HqD]", doc="head h of token t in columns h*D .. h*D + D"),),
        # The place of every tensor is q's.
        checks=(
            Check(
                "k",
                "dims.Hq % dims.Hkv == 0",
                "must be [{dims.T}, Hkv, {dims.D}] with Hkv dividing {dims.Hq}, got shape {shape(k)}",
            ),
            Check("v", "dims.Hv == dims.Hkv", "must have k's shape {shape(k)}, got {shape(v)}"),
            Check(
                "key_cache",
                "dims.Hc == dims.Hkv",
                "must be [num_blocks, {dims.Hkv}, block_size, {dims.D}], got shape "
                "{shape(key_cache)}",
            ),
            *_paged_batch("q"),
        ),
        args=(
            Tensor(
                "q",
                "float32[T, Hq>=0, D>=0]",
                contiguous_copy=True,
                doc="no head or head_dim minimum, as before",
            ),
            Tensor("k", "float32[T, Hkv, D]", contiguous_copy=True),
            Tensor("v", "float32[T, Hv, D]", contiguous_copy=True),
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
            Attr("scale", "float", kw=True, default=_SCALE, doc="None: 1 / sqrt(D)"),
        ),
        status=_PAGED_STATUS,
    ),
    Op(
        name="decoder_layer",
        entry="DecoderLayer",
        spec="fd_mtp.model",
        doc="""One dense ERNIE-4.5 decoder layer of a packed batch, on the CPU, in one call.

        With the residual carried beside the hidden state (FastDeploy's layer structure)::

            res = hidden + residual;  x = rms_norm(res) * input_norm_weight
            q, k, v = x @ q_weight, x @ k_weight, x @ v_weight      # then RoPE on q and k
            attn = paged_attention(q, k, v, key_cache, value_cache, ...)   # writes the caches
            res = attn @ o_weight + res;  x = rms_norm(res) * post_norm_weight
            out = (silu(x @ gate_weight) * (x @ up_weight)) @ down_weight

        ``rms_norm(r) = r / sqrt(mean(r ** 2) + eps)``; RoPE is interleaved: the pair
        ``(a, b) = (x[2i], x[2i+1])`` of every head becomes ``(a cos - b sin, b cos + a sin)`` with
        ``cos = rope_cos[t, i]``, ``sin = rope_sin[t, i]``. The attention is
        :func:`paged_attention`'s (same cache layout, metadata and checks). Each matrix-product element
        is one fused multiply-add chain in input order, so the result is the same on every x86-64
        CPU; it differs from Paddle's matmul (another summation order) by float32 rounding.

        Args:
            hidden: ``[T, H]`` float32, read: the layer's input.
            residual: ``[T, H]`` float32, read: the residual stream (zeros for the first layer:
                ``hidden + 0 = hidden``).
            input_norm_weight, post_norm_weight: ``[H]`` float32, read.
            q_weight: ``[H, Hq * D]``; k_weight, v_weight: ``[H, Hkv * D]``; o_weight:
                ``[Hq * D, H]``; gate_weight, up_weight: ``[H, I]``; down_weight: ``[I, H]``;
                float32, read (Paddle's Linear layout, ``[in, out]``; no bias). Hkv divides Hq.
            key_cache, value_cache: ``[num_blocks, Hkv, block_size, D]`` float32, **written** (the
                slot of every token).
            block_tables, cu_seqlens_q, batch_id_per_token, seq_lens_decoder: int32, read: as in
                :func:`paged_attention`.
            rope_cos, rope_sin: ``[T, D / 2]`` float32, read
                (:func:`fd_mtp.model.attention.rope_tables` of the tokens' positions).
            eps (float): the RMSNorms' epsilon (>= 0).
            scale (float, keyword): attention score scale; default ``1 / sqrt(D)``.
            num_threads (int, keyword): threads to split the matrix products and the attention over
                (a process-wide pool per count, kept between calls); default 1. The result does not
                depend on it.

        Returns:
            ``[out, residual_out]``, both ``[T, H]`` float32: the MLP's output and the residual
            stream after the attention block; the layer's output is their sum (the next layer's
            ``hidden`` and ``residual``).

        Not a FastDeploy op; CPU and float32 only. Bad metadata raises ValueError naming the argument
        before anything is written (as :func:`paged_attention`).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> t, h, d = 1, 8, 4
            >>> z = lambda *s: paddle.zeros(list(s))
            >>> i32 = lambda x: paddle.to_tensor(x, dtype="int32")
            >>> kc, vc = z(1, 1, 2, d), z(1, 1, 2, d)
            >>> out, res = ops.decoder_layer(
            ...     paddle.ones([t, h]), z(t, h), paddle.ones([h]), z(h, 2 * d), z(h, d), z(h, d),
            ...     z(2 * d, h), paddle.ones([h]), z(h, 16), z(h, 16), z(16, h), kc, vc,
            ...     i32([[0]]), i32([0, 1]), i32([0]), i32([0]), paddle.ones([t, d // 2]),
            ...     z(t, d // 2), 1e-6)
            >>> out.tolist(), res.tolist()
            ([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
""",
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
            "bsz": _BSZ,
            "q_heads": "dims.QD // dims.D",
        },
        cpu="decoder_layer_cpu",
        outputs=(
            Out("out", "float32[T, H]", doc="the MLP's output"),
            Out("residual_out", "float32[T, H]", doc="the residual stream after the attention"),
        ),
        # decoder_layer_workspace_floats (decoder_layer.h): x, x2 [T, H], q, attn [T, QD], k, v
        # [T, KD], gate, up [T, I]
        workspaces=(
            Workspace(
                "workspace",
                "float32[]",
                "decoder_layer_workspace",
                size="dims.T * (2 * dims.H + 2 * dims.QD + 2 * dims.KD + 2 * dims.I)",
            ),
        ),
        host_params={  # the CPU's features and the process-wide worker pool (speed only)
            "avx2": "cpu_gemm::cpu_has_avx2_fma()",
            "pool": "cpu_pool(a.num_threads)",
        },
        host_includes=("cpu_pool.h",),
        # The place of every tensor is hidden's (the CPU).
        checks=(
            Check(
                "rope_cos",
                "dims.D % 2 == 0 and dims.D2 * 2 == dims.D",
                "must be [{dims.T}, D / 2] with an even head_dim D = {dims.D} (the caches' last "
                "axis), got shape {shape(rope_cos)}",
            ),
            Check(
                "q_weight",
                "dims.QD % dims.D == 0 and (dims.QD // dims.D) % dims.Hkv == 0",
                "must be [{dims.H}, Hq * {dims.D}] with Hkv = {dims.Hkv} dividing Hq, got shape "
                "{shape(q_weight)}",
            ),
            Check(
                "k_weight",
                "dims.KD == dims.Hkv * dims.D",
                "must be [{dims.H}, {dims.Hkv * dims.D}] (the caches' kv heads x head_dim), got "
                "shape {shape(k_weight)}",
            ),
            *_paged_batch("hidden"),
        ),
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
            Attr("scale", "float", kw=True, default=_SCALE_OF_CACHE, doc="None: 1 / sqrt(D)"),
            Attr(
                "num_threads",
                "int",
                min=1,
                kw=True,
                param=None,
                default="1",
                doc="threads the work is split over (the result does not depend on it); None: 1",
            ),
        ),
        status=_PAGED_STATUS,
    ),
]
