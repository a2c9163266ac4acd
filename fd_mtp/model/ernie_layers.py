"""The ERNIE-4.5 building blocks (RMSNorm, attention, SwiGLU MLP, MoE, decoder layer, embeddings,
LM head) of :mod:`fd_mtp.model.ernie`, whose docstring gives their maths and parameter names; the
models (`Ernie4_5ForCausalLM`, `Ernie4_5MTP`) and `state_dict_names` are there, and every name
here is re-exported from there (``fd_mtp.model.ernie.RMSNorm`` etc.)."""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import nn
from paddle.incubate.nn.functional import fused_rms_norm as _fused_rms_norm

from .attention import AttentionBackend, ForwardMeta, Rope
from .config import ErnieConfig
from .parallel import TensorParallel

__all__ = [
    "Ernie4_5Attention",
    "Ernie4_5DecoderLayer",
    "Ernie4_5MLP",
    "Ernie4_5MoE",
    "Ernie4_5Model",
    "LMHead",
    "MoeStatics",
    "RMSNorm",
    "VocabParallelEmbedding",
]


class RMSNorm(nn.Layer):
    """``x * rsqrt(mean(x^2) + eps) * weight`` in float32. Float32 inputs run Paddle's fused
    ``fused_rms_norm`` kernel (one op instead of six; the same maths, its own summation order:
    within a few float32 ulps of the elementwise chain); other dtypes the elementwise chain in
    float32. `fused_add` also adds the residual in the same op, as FastDeploy's layers do."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = self.create_parameter(
            [hidden_size], default_initializer=nn.initializer.Constant(1.0)
        )

    def _fused(self, x) -> bool:
        return x.dtype == paddle.float32 and self.weight.dtype == paddle.float32 and x.ndim == 2

    def forward(self, x):
        if self._fused(x):
            return _fused_rms_norm(x, self.weight, None, self.eps, 1)[0]
        xf = x.astype("float32")
        y = xf * paddle.rsqrt(paddle.mean(xf * xf, axis=-1, keepdim=True) + self.eps)
        return (y * self.weight.astype("float32")).astype(x.dtype)

    def fused_add(self, x, residual):
        """``(norm(x + residual), x + residual)``: the pre-norm layer's residual step in one op."""
        if self._fused(x) and residual.dtype == x.dtype:
            out, res = _fused_rms_norm(x, self.weight, None, self.eps, 1, residual=residual)
            return out, res
        res = x + residual
        return self.forward(res), res


def _linear(cfg: ErnieConfig, n_in: int, n_out: int, bias: bool | None = None) -> nn.Linear:
    use_bias = cfg.use_bias if bias is None else bias
    return nn.Linear(n_in, n_out, bias_attr=None if use_bias else False)


def _mm(linear: nn.Linear, x):
    """``linear(x)`` (same maths: ``x @ weight + bias``) without ``nn.Linear``'s Python dispatch,
    which costs about three times the matmul itself on the few-token inputs of decoding."""
    y = paddle.matmul(x, linear.weight)
    return y if linear.bias is None else y + linear.bias


def _active(tp: TensorParallel | None) -> TensorParallel | None:
    """``tp`` when it spans more than one process, else None (the single-process code paths)."""
    return tp if tp is not None and tp.active else None


def _row_parallel(linear: nn.Linear, x, tp: TensorParallel | None, reduce: bool = True):
    """A row-parallel ``linear(x)``: this rank's partial product, summed over the group when
    ``reduce`` (else the caller sums), the bias added once after the sum. ``tp`` None: `_mm`."""
    if tp is None:
        return _mm(linear, x)
    y = paddle.matmul(x, linear.weight)
    if not reduce:
        return y
    tp.all_reduce(y)
    return y if linear.bias is None else y + linear.bias


class Ernie4_5Attention(nn.Layer):
    """``tp``: q / k / v column-parallel by heads, ``o_proj`` row-parallel (`fd_mtp.model.parallel`)."""

    def __init__(self, cfg: ErnieConfig, layer_id: int, tp: TensorParallel | None = None):
        super().__init__()
        self.tp = _active(tp)
        n = 1 if self.tp is None else self.tp.world_size
        self.layer_id = layer_id
        self.num_heads = cfg.num_attention_heads // n
        self.num_kv_heads = cfg.num_key_value_heads // n
        self.head_dim = cfg.head_dim
        self.q_proj = _linear(cfg, cfg.hidden_size, self.num_heads * self.head_dim)
        self.k_proj = _linear(cfg, cfg.hidden_size, self.num_kv_heads * self.head_dim)
        self.v_proj = _linear(cfg, cfg.hidden_size, self.num_kv_heads * self.head_dim)
        self.o_proj = _linear(cfg, self.num_heads * self.head_dim, cfg.hidden_size)

    def qkv(self, h):
        t = h.shape[0]
        q = _mm(self.q_proj, h).reshape([t, self.num_heads, self.head_dim])
        k = _mm(self.k_proj, h).reshape([t, self.num_kv_heads, self.head_dim])
        v = _mm(self.v_proj, h).reshape([t, self.num_kv_heads, self.head_dim])
        return q, k, v

    def forward(self, h, rope: Rope, meta: ForwardMeta, backend: AttentionBackend):
        q, k, v = self.qkv(h)
        q, k = rope.apply(q), rope.apply(k)
        return _row_parallel(self.o_proj, backend.forward(q, k, v, self.layer_id, meta), self.tp)


class Ernie4_5MLP(nn.Layer):
    """SwiGLU. ``tp``: gate / up column-parallel, down row-parallel, summed over the group unless
    ``reduce`` is false (the MoE sums its shared experts with the routed ones)."""

    def __init__(
        self,
        cfg: ErnieConfig,
        intermediate_size: int,
        tp: TensorParallel | None = None,
        reduce: bool = True,
    ):
        super().__init__()
        self.tp = _active(tp)
        self.reduce = reduce
        if self.tp is not None:
            intermediate_size //= self.tp.world_size
        self.gate_proj = _linear(cfg, cfg.hidden_size, intermediate_size)
        self.up_proj = _linear(cfg, cfg.hidden_size, intermediate_size)
        self.down_proj = _linear(cfg, intermediate_size, cfg.hidden_size)

    def forward(self, x):
        act = F.silu(_mm(self.gate_proj, x)) * _mm(self.up_proj, x)
        return _row_parallel(self.down_proj, act, self.tp, self.reduce)


class MoeStatics(nn.Layer):
    def __init__(self, num_experts: int):
        super().__init__()
        self.e_score_correction_bias = self.create_parameter(
            [1, num_experts], dtype="float32", default_initializer=nn.initializer.Constant(0.0)
        )


class Ernie4_5MoE(nn.Layer):
    """Top-k routed experts + shared experts (the gate: :mod:`fd_mtp.model.ernie`'s docstring).

    ``tp``: the routed experts are split across ranks (this rank holds experts
    ``[expert_start, expert_start + len(experts))`` whole), the router is replicated, the shared
    experts are column / row-parallel, and one all-reduce sums experts and shared experts."""

    def __init__(self, cfg: ErnieConfig, tp: TensorParallel | None = None):
        super().__init__()
        self.tp = _active(tp)
        self.num_experts = cfg.moe_num_experts
        self.top_k = cfg.moe_k
        self.norm_min = cfg.moe_norm_min
        self.expert_start, expert_stop = (
            (0, cfg.moe_num_experts) if self.tp is None else self.tp.part(cfg.moe_num_experts)
        )
        self.gate = nn.Linear(cfg.hidden_size, cfg.moe_num_experts, bias_attr=False)
        self.moe_statics = MoeStatics(cfg.moe_num_experts) if cfg.moe_use_aux_free else None
        self.experts = nn.LayerList(
            [
                Ernie4_5MLP(cfg, cfg.moe_intermediate_size)
                for _ in range(self.expert_start, expert_stop)
            ]
        )
        self.shared_experts = (
            Ernie4_5MLP(
                cfg, cfg.moe_intermediate_size * cfg.moe_num_shared_experts, tp, reduce=False
            )
            if cfg.moe_num_shared_experts > 0
            else None
        )

    def route(self, x):
        """``(probs [T, E] float32, chosen [T, k] int64, weights [T, k] float32)``."""
        logits = paddle.matmul(x.astype("float32"), self.gate.weight.astype("float32"))
        probs = F.softmax(logits, axis=-1)
        scores = probs
        if self.moe_statics is not None:
            scores = probs + self.moe_statics.e_score_correction_bias.astype("float32")
        _, chosen = paddle.topk(scores, self.top_k, axis=-1)
        w = paddle.take_along_axis(probs, chosen, axis=-1)
        w = w / paddle.clip(w.sum(axis=-1, keepdim=True), min=self.norm_min)
        return probs, chosen, w

    # Up to this many experts every expert runs on every token (no host sync); above it each
    # expert runs on its own tokens only (one host read of the routing per layer).
    dense_combine_max_experts = 8

    def forward(self, x):
        if self.num_experts > self.dense_combine_max_experts:
            return self.forward_per_expert(x)
        # Every expert runs on every token and is combined with a [T, E] weight matrix that is zero
        # off the chosen experts: exact for the routed sum (w = 0 adds 0 * finite).
        _, chosen, w = self.route(x)
        combine = paddle.zeros([x.shape[0], self.num_experts], dtype="float32")
        combine = paddle.put_along_axis(combine, chosen, w, axis=-1, reduce="add")
        if self.tp is not None:
            combine = combine[:, self.expert_start : self.expert_start + len(self.experts)]
        outs = paddle.stack([e(x).astype("float32") for e in self.experts], axis=1)  # [T, E, H]
        out = (outs * combine.unsqueeze(-1)).sum(axis=1)
        return self._finish(out, x)

    def _finish(self, routed, x):
        """Routed sum (float32) + shared experts, in x's dtype; one all-reduce under ``tp``."""
        if self.tp is None:
            out = routed.astype(x.dtype)
            if self.shared_experts is not None:
                out = out + self.shared_experts(x)
            return out
        out = routed.astype(x.dtype)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)  # partial (row-parallel, not yet summed)
        return self.tp.all_reduce(out)

    def forward_per_expert(self, x):
        """Route, then run each expert on its own tokens only (one host read of the routing; also
        the oracle's MoE)."""
        _, chosen, w = self.route(x)
        chosen_np, w_np = chosen.numpy(), w.numpy()
        out = paddle.zeros(x.shape, dtype="float32")
        for j, expert in enumerate(self.experts):
            tok, slot = (chosen_np == self.expert_start + j).nonzero()
            if tok.size == 0:
                continue
            idx = paddle.to_tensor(tok, dtype="int64")
            y = expert(paddle.gather(x, idx)).astype("float32")
            y = y * paddle.to_tensor(w_np[tok, slot], dtype="float32").unsqueeze(-1)
            out = paddle.index_add(out, idx, 0, y)
        return self._finish(out, x)


class Ernie4_5DecoderLayer(nn.Layer):
    """Decoder layer ``layer_id`` (its KV-cache slot). ``is_moe`` (default
    ``cfg.is_moe_layer(layer_id)``) says whether its MLP has routed experts; the MTP block passes
    ``cfg.mtp_block_is_moe`` (layer index 0 for the MoE rule, as paddleformers and FastDeploy)."""

    def __init__(
        self,
        cfg: ErnieConfig,
        layer_id: int,
        is_moe: bool | None = None,
        tp: TensorParallel | None = None,
    ):
        super().__init__()
        self.layer_id = layer_id
        self.self_attn = Ernie4_5Attention(cfg, layer_id, tp)
        self.is_moe = cfg.is_moe_layer(layer_id) if is_moe is None else bool(is_moe)
        self.mlp = (
            Ernie4_5MoE(cfg, tp) if self.is_moe else Ernie4_5MLP(cfg, cfg.intermediate_size, tp)
        )
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, residual, rope: Rope, meta: ForwardMeta, backend: AttentionBackend):
        """FastDeploy-style fused residual: returns ``(mlp_out, residual)``; the layer's output is
        their sum."""
        if residual is None:
            residual, x = h, self.input_layernorm(h)
        else:
            x, residual = self.input_layernorm.fused_add(h, residual)
        h = self.self_attn(x, rope, meta, backend)
        x, residual = self.post_attention_layernorm.fused_add(h, residual)
        return self.mlp(x), residual


class VocabParallelEmbedding(nn.Layer):
    """This rank's rows ``[start, start + chunk)`` of the ``[V, H]`` table (``chunk = ceil(V/N)``,
    the last shard zero-padded); ids outside them look up zeros and the all-reduce sums the
    shards: exactly the single-process lookup (one non-zero term per element)."""

    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallel):
        super().__init__()
        self.tp = tp
        self.start = tp.vocab_part(vocab_size)[0]
        self.chunk = tp.vocab_chunk(vocab_size)
        self.weight = self.create_parameter([self.chunk, hidden_size])

    def forward(self, ids):
        local = ids - self.start
        inside = (local >= 0) & (local < self.chunk)
        e = F.embedding(paddle.where(inside, local, paddle.zeros_like(local)), self.weight)
        e = e * inside.unsqueeze(-1).astype(e.dtype)
        return self.tp.all_reduce(e)


class Ernie4_5Model(nn.Layer):
    def __init__(self, cfg: ErnieConfig, tp: TensorParallel | None = None):
        super().__init__()
        tp = _active(tp)
        self.embed_tokens = (
            nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            if tp is None
            else VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, tp)
        )
        self.layers = nn.LayerList(
            [Ernie4_5DecoderLayer(cfg, i, tp=tp) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LMHead(nn.Layer):
    """``[H] -> [V]``. Untied: own ``weight [H, V]``. Tied: reads the embedding ``[V, H]`` (no parameter
    of its own; ``weight`` is then the transposed embedding, a computed tensor)."""

    def __init__(self, cfg: ErnieConfig, embedding: nn.Embedding, tp: TensorParallel | None = None):
        super().__init__()
        self.tp = _active(tp)
        self.vocab_size = cfg.vocab_size
        self.tied = cfg.tie_word_embeddings
        self._embedding = [embedding]  # a list, so the embedding is not registered twice
        if not self.tied:
            cols = cfg.vocab_size if self.tp is None else self.tp.vocab_chunk(cfg.vocab_size)
            self.weight = self.create_parameter([cfg.hidden_size, cols])

    def __getattr__(self, name):
        if name == "weight" and self.__dict__.get("tied", False):
            return self.__dict__["_embedding"][0].weight.T
        return super().__getattr__(name)

    def forward(self, h):
        if self.tied:
            logits = paddle.matmul(h, self._embedding[0].weight, transpose_y=True)
        else:
            logits = paddle.matmul(h, self.weight)
        if self.tp is None:
            return logits
        # column-parallel (vocabulary shards, the last one padded): gather, drop the padding
        logits = self.tp.all_gather_last(logits)
        if logits.shape[-1] == self.vocab_size:
            return logits
        return logits[:, : self.vocab_size].contiguous()
