"""ERNIE-4.5 (dense and MoE) in Paddle, packed paged forward, and the ERNIE MTP block (spec §10).

Architecture (checked against FastDeploy's ``models/ernie4_5_moe.py`` / ``ernie4_5_mtp.py`` and
Hugging Face's ``ernie4_5`` / ``ernie4_5_moe`` ports of paddleformers' code):

* Pre-norm decoder layers: ``x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x))``,
  then the final ``norm``. The packed path carries the residual separately as FastDeploy does
  (``layer(h, residual) -> (h, residual)``, final ``norm(h + residual)``), same maths.
* RMSNorm: ``x * rsqrt(mean(x^2) + eps) * weight`` computed in float32.
* RoPE: **interleaved** (GPT-J / GLM style; FastDeploy ``use_neox_rotary_style=False``, HF ERNIE-4.5
  ``rotate_half`` over ``x[..., 0::2], x[..., 1::2]``): the pair ``(x[2i], x[2i+1])`` is rotated by
  angle ``pos * rope_theta ** (-2i / head_dim)``, over the whole head_dim. The angles and their
  cos / sin are computed in float64 on the host and rounded to float32 (exact at large positions),
  the rotation in float32. Defined once, :func:`fd_mtp.model.attention.rope_tables`; the attention
  backend builds each step's :class:`~fd_mtp.model.attention.Rope` (and picks its form), the layers
  call ``rope.apply``.
* Attention: separate q/k/v/o projections, GQA (``num_key_value_heads`` <= ``num_attention_heads``),
  scale ``1/sqrt(head_dim)``, no bias unless ``use_bias``.
* MLP: SwiGLU ``down(silu(gate(x)) * up(x))``.
* MoE layers (:meth:`ErnieConfig.is_moe_layer`): router ``logits = x_fp32 @ gate.weight`` (float32
  gate), ``p = softmax(logits)``; experts chosen by ``topk(p + e_score_correction_bias, moe_k)``
  (bias only with ``moe_use_aux_free``; it only affects the choice); weights
  ``p[chosen] / max(sum(p[chosen]), moe_norm_min)`` (renormalised top-k); output
  ``sum_k w_k * expert_k(x) + shared_experts(x)``, the shared experts being one SwiGLU MLP of width
  ``moe_intermediate_size * moe_num_shared_experts`` (absent when 0). Up to 8 experts every expert
  runs on every token (combine matrix, no host sync); above, each expert runs on its tokens only.
* ``compute_logits``: ``hidden @ lm_head`` cast to float32, all ``vocab_size`` columns (no
  ``ori_vocab_size`` masking: the config has no separate original vocabulary size).
* MTP block (spec §10): ``e = embed_tokens(ids)`` (the main model's Layer), ``x = concat([enorm(e),
  hnorm(previous_hidden)])``, ``h = eh_proj(x)`` (2H -> H, no bias), one decoder layer with layer id
  ``num_hidden_layers`` (it reads/writes ``meta.caches[num_hidden_layers]``), then the main model's
  final ``norm`` and ``lm_head`` (the same Layer objects, not copies). Whether that layer is MoE
  follows the MoE rule at layer index **0** (:attr:`ErnieConfig.mtp_block_is_moe`), as paddleformers
  and FastDeploy build it: dense in the released MoE models (``moe_layer_start_index >= 1``).

Parameter names (``model.state_dict()`` keys equal :func:`state_dict_names`; Paddle layout, linear
weights ``[in, out]``)::

    ernie.embed_tokens.weight                                   [V, H]
    ernie.layers.{i}.self_attn.q_proj.weight                    [H, Hq*D]   (.bias [Hq*D] if use_bias)
    ernie.layers.{i}.self_attn.k_proj.weight / v_proj.weight    [H, Hkv*D]
    ernie.layers.{i}.self_attn.o_proj.weight                    [Hq*D, H]
    ernie.layers.{i}.input_layernorm.weight, post_attention_layernorm.weight   [H]
    dense layer: ernie.layers.{i}.mlp.{gate,up}_proj.weight [H, I], mlp.down_proj.weight [I, H]
    MoE layer:   ernie.layers.{i}.mlp.gate.weight                                    [H, E] float32
                 ernie.layers.{i}.mlp.moe_statics.e_score_correction_bias  [1, E] float32
                                                              (only when moe_use_aux_free)
                 ernie.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight [H, Im], down_proj [Im, H]
                 ernie.layers.{i}.mlp.shared_experts.{gate,up}_proj.weight [H, Im*S], down [Im*S, H]
    ernie.norm.weight                                           [H]
    lm_head.weight                                              [H, V]  (absent when tied)
    MTP (Ernie4_5MTP.state_dict()):
    ernie.mtp_emb_norm.0.weight, ernie.mtp_hidden_norm.0.weight [H]
    ernie.mtp_linear_proj.0.weight                              [2H, H]
    ernie.mtp_block.0.*                                         (decoder-layer names as above)

Corrections to the issue-5 contract, both from the upstream MoE code: with ``moe_use_aux_free``
(ERNIE-4.5-MoE configs set it) MoE layers also have ``mlp.moe_statics.e_score_correction_bias``
``[1, E]`` float32 (FastDeploy's ``gate_correction_bias``), and with ``use_bias`` the q/k/v/o and
MLP/expert projections carry ``.bias`` ``[out]``. On CPU only float32 is supported (Paddle's CPU
build has no half-precision matmul); the constructor refuses other dtypes there.
Main-model and MTP parameters are disjoint: the MTP's state dict holds only its own weights.

For the loader: these are the Paddle-checkpoint names (paddleformers' ``ernie.`` prefix, linear
weights ``[in, out]``). Hugging Face "-PT" checkpoints use the prefix ``model.`` and torch's
``[out, in]`` linear layout (transpose on load; ``embed_tokens`` is ``[V, H]`` in both). FastDeploy's
fused in-memory names (``qkv_proj``, ``up_gate_proj``) are not checkpoint names.

The dense no-cache test oracle is :mod:`fd_mtp.model.oracles` (``dense_forward`` below defers to it).
"""

from __future__ import annotations

import paddle
from paddle import nn

from .attention import AttentionBackend, ForwardMeta, PagedAttentionCPU, Rope  # noqa: F401
from .config import ErnieConfig
from .ernie_layers import (  # noqa: F401  (re-exported: fd_mtp.model.ernie.<block>)
    Ernie4_5Attention,
    Ernie4_5DecoderLayer,
    Ernie4_5MLP,
    Ernie4_5Model,
    Ernie4_5MoE,
    LMHead,
    MoeStatics,
    RMSNorm,
    VocabParallelEmbedding,
    _active,
    _mm,
)
from .parallel import TensorParallel, local_config, shard_sources


# --------------------------------------------------------------------------- models
def _freeze(layer: nn.Layer) -> None:
    """Inference only: no autograd graph is recorded through the parameters."""
    for p in layer.parameters():
        p.stop_gradient = True
    layer.eval()


def _check_dtype_supported(config: ErnieConfig) -> None:
    """Paddle's CPU build has no float16 / bfloat16 matmul kernel: refuse early with a clear message."""
    if config.dtype != "float32" and paddle.device.get_device() == "cpu":
        raise ValueError(
            f"ErnieConfig.dtype={config.dtype!r}: Paddle has no CPU matmul kernel for it; "
            "use dtype='float32' on CPU (load_checkpoint(..., dtype='float32'))"
        )


class Ernie4_5ForCausalLM(nn.Layer):
    """ERNIE-4.5 main model.

    ``forward(ids_remove_padding [T] int64, meta)`` -> ``[T, H]`` final-normed hidden states (packed,
    paged KV cache: layer i uses ``meta.caches[i]``). ``compute_logits(hidden [R, H])`` -> ``[R, V]``
    float32. ``dense_forward(input_ids [S])`` -> ``[S, H]``: the test oracle
    (:func:`fd_mtp.model.oracles.dense_forward`: one sequence, no cache, independent code).
    """

    def __init__(
        self,
        config: ErnieConfig,
        attn_backend: AttentionBackend | None = None,
        *,
        tp: TensorParallel | None = None,
    ):
        super().__init__()
        _check_dtype_supported(config)
        tp = _active(tp)
        #: this rank's view (its heads; `fd_mtp.model.parallel.local_config`), what the runner
        #: sizes the KV cache from; ``full_config`` is the checkpoint's
        self.config = local_config(config, tp)
        self.full_config = config
        self.tp = tp
        self.attn_backend = attn_backend if attn_backend is not None else PagedAttentionCPU()
        self.ernie = Ernie4_5Model(config, tp)
        self.lm_head = LMHead(config, self.ernie.embed_tokens, tp)
        _freeze(self)
        if config.dtype != "float32":
            self.to(dtype=config.dtype)
            for layer in self.ernie.layers:  # router stays float32 as upstream
                if layer.is_moe:
                    layer.mlp.gate.to(dtype="float32")
                    if layer.mlp.moe_statics is not None:
                        layer.mlp.moe_statics.to(dtype="float32")

    def tp_sources(self):
        """``{parameter: (checkpoint name, full array -> this rank's shard)}`` under tensor
        parallelism (`fd_mtp.model.parallel.shard_sources`), None in one process."""
        if self.tp is None:
            return None
        return shard_sources(self.state_dict().keys(), self.full_config, self.tp)

    @property
    def embed_tokens(self):
        return self.ernie.embed_tokens

    @property
    def layers(self):
        return self.ernie.layers

    @property
    def norm(self):
        return self.ernie.norm

    #: what runs `forward`: the compiled program (`compile_forward`), the native layers
    #: (`native_forward`) or None: eager
    _compiled = None
    #: layer indices whose input stream `forward` keeps in `aux_hidden_states` (EAGLE-3 heads;
    #: `capture_aux_hidden_states`); empty: nothing kept
    aux_hidden_state_layers: tuple = ()
    #: ``[T, H]`` per entry of `aux_hidden_state_layers`, from the last `forward` (None before)
    aux_hidden_states = None

    def capture_aux_hidden_states(self, layer_ids) -> None:
        """Make every `forward` also keep, in `aux_hidden_states`, the residual stream entering
        each layer of ``layer_ids`` (``h + residual`` before layer i: the output of layer i - 1,
        the token embedding for i = 0; vLLM's ``aux_hidden_state_layers`` of EAGLE-3), in the
        order given: no extra forward pass. Empty / None: stop keeping them."""
        ids = tuple(int(i) for i in (layer_ids or ()))
        n = self.config.num_hidden_layers
        for i in ids:
            if not 0 <= i < n:
                raise ValueError(
                    f"capture_aux_hidden_states: layer id {i} is outside [0, {n}) "
                    f"(num_hidden_layers = {n})"
                )
        self.__dict__["aux_hidden_state_layers"] = ids
        self.__dict__["aux_hidden_states"] = None

    def run_layers(self, h, layers, meta: ForwardMeta, rope=None, backend=None, capture=()):
        """Packed paged pass of ``h [T, H]`` through ``layers``; returns ``(h, residual)``. Without
        ``backend``, the model's attention backend builds the step's metadata and ``rope``; the
        compiled program (`fd_mtp.model.compiled`) passes its own. ``capture``: a list to append
        to, for each index i of `aux_hidden_state_layers` in order, the stream entering
        ``layers[i]`` (``h + residual``); () keeps nothing."""
        if backend is None:
            backend = self.attn_backend
            backend.init_attention_metadata(meta, [layer.layer_id for layer in layers])
            rope = backend.rope(meta, h.shape[0], self.config.head_dim, self.config.rope_theta)
        residual = None
        streams = {}
        want = set(self.aux_hidden_state_layers) if capture != () else set()
        for i, layer in enumerate(layers):
            if i in want:
                streams[i] = h if residual is None else h + residual
            h, residual = layer(h, residual, rope, meta, backend)
        if want:
            capture.extend(streams[i] for i in self.aux_hidden_state_layers)
        return h, residual

    def layers_forward(self, ids_remove_padding, meta, rope=None, backend=None, capture=()):
        """The eager forward's maths (also what the compiled program traces); ``capture`` as
        `run_layers`."""
        ids = ids_remove_padding.reshape([-1])
        h, residual = self.run_layers(
            self.embed_tokens(ids), self.layers, meta, rope, backend, capture
        )
        return self.norm.fused_add(h, residual)[0]

    def forward(self, ids_remove_padding, meta: ForwardMeta):
        """``[T, H]`` final-normed hidden states; with `aux_hidden_state_layers`, also sets
        `aux_hidden_states` (every forward kind keeps them)."""
        aux = [] if self.aux_hidden_state_layers else ()
        self.__dict__["aux_hidden_states"] = None
        out = None
        if self._compiled is not None:
            out = self._compiled(ids_remove_padding, meta, capture=aux)
        if out is None:
            out = self.layers_forward(ids_remove_padding, meta, capture=aux)
        if self.aux_hidden_state_layers:
            self.__dict__["aux_hidden_states"] = aux
        return out

    def compile_forward(self, enabled: bool = True):
        """Run `forward` as a compiled Paddle program (`fd_mtp.model.compiled`; steps it does not
        cover run eagerly) when ``enabled``, else eagerly. Returns the `CompiledForward` or None."""
        return _set_forward(self, "static", enabled)

    def native_forward(self, enabled: bool = True):
        """Run `forward` with native CPU decoder layers (`fd_mtp.model.native`; steps it does not
        cover run eagerly) when ``enabled``, else eagerly. Returns the `NativeForward` or None."""
        return _set_forward(self, "native", enabled)

    def compute_logits(self, hidden):
        return self.lm_head(hidden).astype("float32")

    def dense_forward(self, input_ids):
        """Test oracle: :func:`fd_mtp.model.oracles.dense_forward` (imported on call)."""
        from .oracles import dense_forward

        return dense_forward(self, input_ids)


class _MTPWeights(nn.Layer):
    """Holds the MTP block's own parameters under the checkpoint names ``ernie.mtp_*``."""

    def __init__(self, cfg: ErnieConfig, tp: TensorParallel | None = None):
        super().__init__()
        self.mtp_emb_norm = nn.LayerList([RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)])
        self.mtp_hidden_norm = nn.LayerList([RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)])
        self.mtp_linear_proj = nn.LayerList(
            [nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias_attr=False)]
        )
        self.mtp_block = nn.LayerList(
            [Ernie4_5DecoderLayer(cfg, cfg.num_hidden_layers, is_moe=cfg.mtp_block_is_moe, tp=tp)]
        )


class Ernie4_5MTP(nn.Layer):
    """The ERNIE MTP block (spec §10), sharing the main model's ``embed_tokens``, ``norm`` and
    ``lm_head`` Layer objects (attributes return the main model's objects; they are not in this
    Layer's state dict). Its decoder layer has layer id ``num_hidden_layers`` and so uses
    ``meta.caches[num_hidden_layers]``.

    ``forward(ids_remove_padding [T], previous_hidden_states [T, H], meta)`` -> ``[T, H]``, normed by
    the main model's final norm. ``dense_forward(input_ids [S], previous_hidden_states [S, H])`` is
    the no-cache oracle (:func:`fd_mtp.model.oracles.mtp_dense_forward`).
    """

    def __init__(self, config: ErnieConfig, main: Ernie4_5ForCausalLM):
        super().__init__()
        tp = getattr(main, "tp", None)
        #: as the main model's: this rank's view and the checkpoint's config (tensor parallelism:
        #: the block is sharded like a main layer; enorm / hnorm / eh_proj are replicated)
        self.config = local_config(config, tp)
        self.full_config = config
        self.tp = tp
        self.__dict__["_main"] = main  # plain attribute: not a sublayer, not in state_dict
        self.ernie = _MTPWeights(config, tp)
        _freeze(self)
        if config.dtype != "float32":
            self.to(dtype=config.dtype)
            if self.mtp_block.is_moe:
                self.mtp_block.mlp.gate.to(dtype="float32")
                if self.mtp_block.mlp.moe_statics is not None:
                    self.mtp_block.mlp.moe_statics.to(dtype="float32")

    def tp_sources(self):
        """As `Ernie4_5ForCausalLM.tp_sources`."""
        if self.tp is None:
            return None
        return shard_sources(self.state_dict().keys(), self.full_config, self.tp)

    @property
    def main(self):
        return self.__dict__["_main"]

    @property
    def embed_tokens(self):
        return self.main.embed_tokens

    @property
    def norm(self):
        return self.main.norm

    @property
    def lm_head(self):
        return self.main.lm_head

    @property
    def enorm(self):
        return self.ernie.mtp_emb_norm[0]

    @property
    def hnorm(self):
        return self.ernie.mtp_hidden_norm[0]

    @property
    def eh_proj(self):
        return self.ernie.mtp_linear_proj[0]

    @property
    def mtp_block(self):
        return self.ernie.mtp_block[0]

    @property
    def draft_layers(self):
        """The decoder layers of the draft forward (the native forward runs them)."""
        return [self.mtp_block]

    def _project(self, ids, previous_hidden_states):
        e = self.embed_tokens(ids.reshape([-1]))
        x = paddle.concat(
            [self.enorm(e), self.hnorm(previous_hidden_states.astype(e.dtype))], axis=-1
        )
        return _mm(self.eh_proj, x)

    #: what runs `forward`: the compiled program (`compile_forward`), the native layers
    #: (`native_forward`) or None: eager
    _compiled = None

    def layers_forward(
        self, ids_remove_padding, previous_hidden_states, meta, rope=None, backend=None
    ):
        """The eager forward's maths (also what the compiled program traces)."""
        h = self._project(ids_remove_padding, previous_hidden_states)
        h, residual = self.main.run_layers(h, [self.mtp_block], meta, rope, backend)
        return self.norm.fused_add(h, residual)[0]

    def forward(self, ids_remove_padding, previous_hidden_states, meta: ForwardMeta):
        if self._compiled is not None:
            out = self._compiled(ids_remove_padding, previous_hidden_states, meta)
            if out is not None:
                return out
        return self.layers_forward(ids_remove_padding, previous_hidden_states, meta)

    def compile_forward(self, enabled: bool = True):
        """As `Ernie4_5ForCausalLM.compile_forward`."""
        return _set_forward(self, "static", enabled)

    def native_forward(self, enabled: bool = True):
        """As `Ernie4_5ForCausalLM.native_forward`."""
        return _set_forward(self, "native", enabled)

    def compute_logits(self, hidden):
        return self.main.compute_logits(hidden)

    def dense_forward(self, input_ids, previous_hidden_states):
        """Test oracle: :func:`fd_mtp.model.oracles.mtp_dense_forward` (imported on call)."""
        from .oracles import mtp_dense_forward

        return mtp_dense_forward(self, input_ids, previous_hidden_states)


def _set_forward(model, kind: str, enabled: bool):
    """Install the ``kind`` forward ("static": `fd_mtp.model.compiled`, "native":
    `fd_mtp.model.native`) in the model's one forward slot, or clear it (eager) when not
    ``enabled``. One object per model and kind: turning it on again returns the same one."""
    if not enabled:
        model.__dict__["_compiled"] = None
        return None
    if kind == "static":
        from .compiled import CompiledForward as impl
    else:
        from .native import NativeForward as impl
    current = model.__dict__.get("_compiled")
    forward = current if isinstance(current, impl) else impl(model)
    model.__dict__["_compiled"] = forward
    return forward


# --------------------------------------------------------------------------- names
def _layer_names(prefix: str, cfg: ErnieConfig, is_moe: bool) -> dict[str, list[int]]:
    h, d = cfg.hidden_size, cfg.head_dim
    hq, hkv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    out: dict[str, list[int]] = {}

    def lin(name, n_in, n_out, bias=cfg.use_bias):
        out[f"{prefix}.{name}.weight"] = [n_in, n_out]
        if bias:
            out[f"{prefix}.{name}.bias"] = [n_out]

    lin("self_attn.q_proj", h, hq)
    lin("self_attn.k_proj", h, hkv)
    lin("self_attn.v_proj", h, hkv)
    lin("self_attn.o_proj", hq, h)

    def mlp(p, inter):
        lin(f"{p}.gate_proj", h, inter)
        lin(f"{p}.up_proj", h, inter)
        lin(f"{p}.down_proj", inter, h)

    if is_moe:
        e = cfg.moe_num_experts
        out[f"{prefix}.mlp.gate.weight"] = [h, e]
        if cfg.moe_use_aux_free:
            out[f"{prefix}.mlp.moe_statics.e_score_correction_bias"] = [1, e]
        for j in range(e):
            mlp(f"mlp.experts.{j}", cfg.moe_intermediate_size)
        if cfg.moe_num_shared_experts > 0:
            mlp("mlp.shared_experts", cfg.moe_intermediate_size * cfg.moe_num_shared_experts)
    else:
        mlp("mlp", cfg.intermediate_size)
    out[f"{prefix}.input_layernorm.weight"] = [h]
    out[f"{prefix}.post_attention_layernorm.weight"] = [h]
    return out


def state_dict_names(config: ErnieConfig, *, mtp: bool | None = None) -> dict[str, list[int]]:
    """Every checkpoint parameter name -> Paddle shape (main model, plus the MTP block when
    ``mtp`` is true; default ``config.num_nextn_predict_layers > 0``). Main-model names equal
    ``Ernie4_5ForCausalLM(config).state_dict()`` keys; MTP names equal ``Ernie4_5MTP`` ones.

    >>> c = ErnieConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
    ...                 num_attention_heads=4, num_key_value_heads=2)
    >>> state_dict_names(c)["ernie.layers.0.self_attn.k_proj.weight"]
    [64, 32]
    """
    h, v = config.hidden_size, config.vocab_size
    names: dict[str, list[int]] = {"ernie.embed_tokens.weight": [v, h]}
    for i in range(config.num_hidden_layers):
        names.update(_layer_names(f"ernie.layers.{i}", config, config.is_moe_layer(i)))
    names["ernie.norm.weight"] = [h]
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = [h, v]
    if mtp is None:
        mtp = config.num_nextn_predict_layers > 0
    if mtp:
        names["ernie.mtp_emb_norm.0.weight"] = [h]
        names["ernie.mtp_hidden_norm.0.weight"] = [h]
        names["ernie.mtp_linear_proj.0.weight"] = [2 * h, h]
        names.update(_layer_names("ernie.mtp_block.0", config, config.mtp_block_is_moe))
    return names
