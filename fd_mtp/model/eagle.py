"""EAGLE draft heads for ERNIE-4.5 (``SpeculativeConfig(method="eagle" | "eagle3", model=DIR)``).

An EAGLE head is a small separate model that drafts from the target's hidden states, as vLLM's
``EagleProposer`` runs Llama EAGLE / EAGLE-3 heads; fd_mtp runs it through the same proposer, ops
and KV-cache scheme as the ERNIE MTP block (`fd_mtp.proposer.eagle.EagleProposer`).

Checkpoint directory (the ERNIE-4.5 variant of vLLM's / SpecForge's Llama head layout)
--------------------------------------------------------------------------------------
``config.json``::

    {
      "model_type": "ernie4_5_eagle" | "ernie4_5_eagle3",   # which head (must match the method)
      "architectures": ["Ernie4_5EagleForCausalLM"] | ["Ernie4_5Eagle3ForCausalLM"],
      "hidden_size": H,                 # must equal the target's
      "vocab_size": V,                  # must equal the target's
      "intermediate_size": I,           # the head's own decoder layer (dense SwiGLU MLP)
      "num_attention_heads": ..., "num_key_value_heads": ..., "head_dim": ...,
      "rms_norm_eps": ..., "rope_theta": ...,
      # EAGLE-3 only:
      "draft_vocab_size": Vd,           # the head's own vocabulary (<= V)
      "eagle_aux_hidden_state_layer_ids": [lo, mid, hi]   # target layers (also accepted inside
                                        # "eagle_config", as vLLM reads it)
    }

``model.safetensors`` (shapes in the Paddle layout, linear weights ``[in, out]``; the torch layout
``[out, in]`` of vLLM's / SpecForge's heads is read too: every 2-D tensor but the embedding
transposed; H = hidden_size)::

    fc.weight                     EAGLE-1: [2H, H] on concat([embed(token), target last hidden])
                                  EAGLE-3: [n*H, H] fusing the n aux hidden states (n = the layer
                                  list's length, usually 3)
    fc.bias                       [H], optional
    enorm.weight, hnorm.weight    [H]      EAGLE-3 only: RMSNorms of the embedding and the hidden
    eh_proj.weight                [2H, H]  EAGLE-3 only: on concat([enorm(embed), hnorm(hidden)])
    layers.0.*                    one dense ERNIE-4.5 decoder layer (``self_attn.{q,k,v,o}_proj``,
                                  ``mlp.{gate,up,down}_proj``, ``input_layernorm``,
                                  ``post_attention_layernorm`` weights, the target's names)
    norm.weight                   [H] the head's final RMSNorm
    lm_head.weight                EAGLE-3: [H, Vd] (required, over the draft vocabulary);
                                  EAGLE-1: [H, V] optional (absent: the target's lm_head)
    embed_tokens.weight           [V, H] optional (absent: the target's embedding)
    d2t                           EAGLE-3: [Vd] int64, target id = draft id + d2t[draft id]
                                  (vLLM / SpecForge's offsets); each target id in [0, V), distinct
    t2d                           EAGLE-3, optional: [V] bool, true exactly at the mapped ids

Forward over packed tokens (``ids [T]``, ``previous_hidden_states``):

* EAGLE-1: ``x = fc(concat([e, h]))`` with ``e = embed(ids)``; ``h`` the target's final-normed
  hidden state (substep 0) or the head's own output (later substeps).
* EAGLE-3: at substep 0 ``h = fc(concat(aux))`` (the n target-layer streams, ``[T, n*H]``, the
  proposer's ``target_hidden_states``); later substeps take the head's own output ``[T, H]``;
  then ``x = eh_proj(concat([enorm(e), hnorm(h)]))`` (vLLM's Llama EAGLE-3 feeds the concat into a
  2H-wide attention instead; ERNIE's decoder layer is H wide, so the MTP block's projection is
  used).
* One decoder layer (its KV cache is the proposer's own, layer index = the target's
  ``num_hidden_layers``), then ``out = norm(h + residual)``: the output fed to the next substep
  and to ``compute_logits``.
* ``compute_logits``: EAGLE-1: ``out @ lm_head`` over V. EAGLE-3: ``out @ lm_head`` over Vd,
  scattered to the target ids ``arange(Vd) + d2t`` of a ``[R, V]`` row of ``-inf``: the d2t map is
  applied before the drafts reach sampling and verification (every draft is a target id; draft
  probabilities are over the target vocabulary, zero off the mapped ids).

`fd_mtp.model.eagle_io.load_eagle_head` reads a head directory (either layout: Paddle
``[in, out]`` or torch ``[out, in]`` linear weights) and refuses a head that does not fit the
target with a ValueError naming the field (``hidden_size``, ``vocab_size``,
``eagle_aux_hidden_state_layer_ids``, ``d2t``, ``draft_vocab_size``, a tensor's name);
`fd_mtp.model.eagle_io.save_eagle_head` writes one. `fd_mtp.testing.eagle.write_random_eagle_head`
writes a random-init head for a target (tests, and to try the option).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle
from paddle import nn

from .config import ErnieConfig
from .ernie import Ernie4_5DecoderLayer, RMSNorm, _freeze, _layer_names, _mm, _set_forward

__all__ = [
    "EAGLE_METHODS",
    "MODEL_TYPES",
    "EagleHeadConfig",
    "EagleHead",
    "default_aux_layer_ids",
    "eagle_tensor_shapes",
]

EAGLE_METHODS = ("eagle", "eagle3")
#: config.json ``model_type`` of each method's head
MODEL_TYPES = {"eagle": "ernie4_5_eagle", "eagle3": "ernie4_5_eagle3"}
ARCHITECTURES = {"eagle": "Ernie4_5EagleForCausalLM", "eagle3": "Ernie4_5Eagle3ForCausalLM"}
CONFIG_FILE = "config.json"


def default_aux_layer_ids(num_hidden_layers: int) -> list[int]:
    """vLLM's default EAGLE-3 layers ``(2, L // 2, L - 3)``, clipped to ``[0, L)`` for small L.

    >>> default_aux_layer_ids(32), default_aux_layer_ids(2)
    ([2, 16, 29], [1, 1, 0])
    """
    n = int(num_hidden_layers)
    return [min(max(i, 0), n - 1) for i in (2, n // 2, n - 3)]


def _int_field(d: dict, name: str, default=None, required: bool = True):
    """``d[name]``, an int >= 1 (``default`` when absent and not ``required``); ValueError
    naming the field otherwise."""
    if name not in d:
        if required:
            raise ValueError(f"EAGLE head config.json: missing field {name!r}")
        return default
    v = d[name]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"EAGLE head config.json: {name} must be an int >= 1, got {v!r}")
    return v


def _layer_config(d: dict, target: ErnieConfig) -> ErnieConfig:
    """The `ErnieConfig` of the head's decoder layer: its attention / MLP fields from ``d``
    (checked, named in errors), the rest the target's."""
    heads = _int_field(d, "num_attention_heads")
    kv_heads = _int_field(d, "num_key_value_heads", heads, required=False)
    head_dim = d.get("head_dim")
    if head_dim is None:
        head_dim = target.hidden_size // heads
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2:
        raise ValueError(f"EAGLE head config.json: head_dim must be an int >= 2, got {head_dim!r}")
    if head_dim % 2:
        raise ValueError(f"EAGLE head config.json: head_dim must be even (RoPE), got {head_dim}")
    if heads % kv_heads:
        raise ValueError(
            f"EAGLE head config.json: num_attention_heads {heads} must be a multiple of "
            f"num_key_value_heads {kv_heads}"
        )
    eps = d.get("rms_norm_eps", target.rms_norm_eps)
    theta = d.get("rope_theta", target.rope_theta)
    for name, v in (("rms_norm_eps", eps), ("rope_theta", theta)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"EAGLE head config.json: {name} must be a number > 0, got {v!r}")
    return ErnieConfig(
        vocab_size=target.vocab_size,
        hidden_size=target.hidden_size,
        intermediate_size=_int_field(d, "intermediate_size"),
        num_hidden_layers=target.num_hidden_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(eps),
        rope_theta=float(theta),
        max_position_embeddings=target.max_position_embeddings,
        tie_word_embeddings=True,
        use_bias=False,
        moe_num_experts=0,
        bos_token_id=target.bos_token_id,
        eos_token_id=target.eos_token_id,
        pad_token_id=target.pad_token_id,
        dtype=target.dtype,
    )


def _aux_layer_ids(d: dict, num_layers: int) -> tuple:
    """EAGLE-3's ``eagle_aux_hidden_state_layer_ids`` (top level or inside ``eagle_config``, as
    vLLM reads it), each a layer of the target's ``[0, num_layers)``."""
    ids = d.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(d.get("eagle_config"), dict):
        ids = d["eagle_config"].get("eagle_aux_hidden_state_layer_ids")
    if (
        not isinstance(ids, list)
        or not ids
        or any(isinstance(i, bool) or not isinstance(i, int) for i in ids)
    ):
        raise ValueError(
            "EAGLE head config.json: eagle_aux_hidden_state_layer_ids must be a non-empty "
            f"list of target layer indices, got {ids!r}"
        )
    bad = [i for i in ids if not 0 <= i < num_layers]
    if bad:
        raise ValueError(
            f"EAGLE head config.json: eagle_aux_hidden_state_layer_ids {ids} has {bad} "
            f"outside the target's layers [0, {num_layers})"
        )
    return tuple(ids)


@dataclass
class EagleHeadConfig:
    """A head's ``config.json``, checked against its target (see the module docstring).

    ``layer_config`` is the `ErnieConfig` of the head's decoder layer: the head's attention and
    MLP sizes, the target's ``num_hidden_layers`` (the layer's id, i.e. its KV-cache index), vocab
    and dtype.
    """

    method: str
    hidden_size: int
    vocab_size: int
    layer_config: ErnieConfig
    draft_vocab_size: int | None = None
    aux_layer_ids: tuple = ()

    @classmethod
    def from_dict(cls, d: dict, target: ErnieConfig, method: str | None = None) -> EagleHeadConfig:
        """Parse ``d`` (a head's config.json) for ``target``; ``method`` (the SpeculativeConfig's)
        must agree with ``model_type``. ValueError naming the field otherwise."""
        if not isinstance(d, dict):
            raise ValueError(f"EAGLE head config must be a JSON object, got {type(d).__name__}")
        model_type = d.get("model_type")
        found = {v: k for k, v in MODEL_TYPES.items()}.get(model_type)
        if found is None:
            raise ValueError(
                f"EAGLE head config.json: model_type must be one of {sorted(MODEL_TYPES.values())}, "
                f"got {model_type!r}"
            )
        if method is not None and method != found:
            raise ValueError(
                f"EAGLE head config.json: model_type {model_type!r} is a {found!r} head, but "
                f"speculative_config.method is {method!r}"
            )
        for name in ("hidden_size", "vocab_size"):
            v = _int_field(d, name)
            if v != getattr(target, name):
                raise ValueError(
                    f"EAGLE head config.json: {name} {v} does not fit the target's "
                    f"{name} {getattr(target, name)}"
                )
        hidden, vocab = target.hidden_size, target.vocab_size
        layer_config = _layer_config(d, target)
        if found == "eagle3":
            draft_vocab = _int_field(d, "draft_vocab_size")
            if draft_vocab > vocab:
                raise ValueError(
                    f"EAGLE head config.json: draft_vocab_size {draft_vocab} exceeds the target's "
                    f"vocab_size {vocab}"
                )
            layers = _aux_layer_ids(d, target.num_hidden_layers)
            return cls(found, hidden, vocab, layer_config, draft_vocab, layers)
        if "draft_vocab_size" in d and d["draft_vocab_size"] not in (None, vocab):
            raise ValueError(
                "EAGLE head config.json: draft_vocab_size is an EAGLE-3 field; an 'eagle' head "
                f"drafts over the target's vocabulary, got {d['draft_vocab_size']!r}"
            )
        return cls(found, hidden, vocab, layer_config)

    @classmethod
    def from_file(cls, path, target: ErnieConfig, method: str | None = None) -> EagleHeadConfig:
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from e
        return cls.from_dict(d, target, method)

    def to_dict(self) -> dict:
        c = self.layer_config
        d = {
            "model_type": MODEL_TYPES[self.method],
            "architectures": [ARCHITECTURES[self.method]],
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": c.head_dim,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta,
        }
        if self.method == "eagle3":
            d["draft_vocab_size"] = self.draft_vocab_size
            d["eagle_aux_hidden_state_layer_ids"] = list(self.aux_layer_ids)
        return d


def eagle_tensor_shapes(
    cfg: EagleHeadConfig, *, own_embedding: bool = False, own_lm_head: bool = False
) -> dict[str, list[int]]:
    """Every tensor name of a head -> its shape (``d2t`` int64, the rest floating). The optional
    ones (``fc.bias``, ``embed_tokens.weight``, EAGLE-1's ``lm_head.weight``, ``t2d``) are listed
    only when asked for (bias and t2d never)."""
    h, v = cfg.hidden_size, cfg.vocab_size
    lc = cfg.layer_config
    out: dict[str, list[int]] = {}
    if cfg.method == "eagle":
        out["fc.weight"] = [2 * h, h]
    else:
        out["fc.weight"] = [len(cfg.aux_layer_ids) * h, h]
        out["enorm.weight"] = [h]
        out["hnorm.weight"] = [h]
        out["eh_proj.weight"] = [2 * h, h]
        out["lm_head.weight"] = [h, cfg.draft_vocab_size]
        out["d2t"] = [cfg.draft_vocab_size]
    out.update(_layer_names("layers.0", lc, False))
    out["norm.weight"] = [h]
    if own_embedding:
        out["embed_tokens.weight"] = [v, h]
    if own_lm_head and cfg.method == "eagle":
        out["lm_head.weight"] = [h, v]
    return out


class EagleHead(nn.Layer):
    """An EAGLE / EAGLE-3 draft head over ``main`` (an ``Ernie4_5ForCausalLM``), with the MTP
    block's interface: ``forward(ids [T], previous_hidden_states, meta) -> [T, H]``,
    ``compute_logits(hidden [R, H]) -> [R, V]`` float32 (target vocabulary), ``config`` (its
    decoder layer's `ErnieConfig`: ``num_hidden_layers`` = the target's, so its one layer uses
    ``meta.caches[num_hidden_layers]``), ``main``. See the module docstring for the maths.
    The target's embedding / lm_head are shared (not in this Layer's state dict) unless the
    checkpoint has its own.
    """

    def __init__(
        self,
        cfg: EagleHeadConfig,
        main,
        *,
        own_embedding: bool = False,
        own_lm_head: bool = False,
        fc_bias: bool = False,
    ):
        super().__init__()
        if getattr(main, "tp", None) is not None:
            raise ValueError(
                "EagleHead: tensor parallelism is not supported for EAGLE heads "
                "(tensor_parallel_size must be 1)"
            )
        self.head_config = cfg
        self.method = cfg.method
        self.config = cfg.layer_config
        self.full_config = cfg.layer_config
        self.tp = None
        self.__dict__["_main"] = main
        h = cfg.hidden_size
        lc = cfg.layer_config
        width = 2 * h if cfg.method == "eagle" else len(cfg.aux_layer_ids) * h
        self.fc = nn.Linear(width, h, bias_attr=None if fc_bias else False)
        if cfg.method == "eagle3":
            self.enorm = RMSNorm(h, lc.rms_norm_eps)
            self.hnorm = RMSNorm(h, lc.rms_norm_eps)
            self.eh_proj = nn.Linear(2 * h, h, bias_attr=False)
        self.layers = nn.LayerList([Ernie4_5DecoderLayer(lc, lc.num_hidden_layers, is_moe=False)])
        self.norm = RMSNorm(h, lc.rms_norm_eps)
        self.own_embedding = bool(own_embedding)
        if own_embedding:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, h)
        self.own_lm_head = cfg.method == "eagle3" or bool(own_lm_head)
        if self.own_lm_head:
            cols = cfg.vocab_size if cfg.method == "eagle" else cfg.draft_vocab_size
            self.lm_head_weight = self.create_parameter([h, cols])
        # EAGLE-3: draft id -> target id (arange(Vd) + d2t), set by `set_d2t`
        self.draft_to_target = None
        _freeze(self)
        if lc.dtype != "float32":
            self.to(dtype=lc.dtype)

    @property
    def main(self):
        return self.__dict__["_main"]

    def __getattr__(self, name):
        if name == "embed_tokens" and not self.__dict__.get("own_embedding", True):
            return self.main.embed_tokens
        return super().__getattr__(name)

    @property
    def draft_layers(self):
        """The decoder layers of the draft forward (the native forward runs them)."""
        return [self.layers[0]]

    @property
    def aux_layer_ids(self) -> tuple:
        return self.head_config.aux_layer_ids

    def set_d2t(self, d2t: np.ndarray) -> None:
        """EAGLE-3: install the ``d2t`` offsets (``[Vd]`` ints; target id = draft id + d2t[id]),
        checked: every target id in ``[0, V)`` and distinct (ValueError naming ``d2t``)."""
        cfg = self.head_config
        d2t = np.asarray(d2t)
        if d2t.shape != (cfg.draft_vocab_size,) or not np.issubdtype(d2t.dtype, np.integer):
            raise ValueError(
                f"EAGLE head d2t must be an integer array of shape [{cfg.draft_vocab_size}] "
                f"(draft_vocab_size), got {d2t.dtype} {list(d2t.shape)}"
            )
        targets = np.arange(cfg.draft_vocab_size, dtype=np.int64) + d2t.astype(np.int64)
        bad = np.flatnonzero((targets < 0) | (targets >= cfg.vocab_size))
        if bad.size:
            raise ValueError(
                f"EAGLE head d2t maps draft id {int(bad[0])} to target id {int(targets[bad[0]])}, "
                f"outside the target's vocabulary [0, {cfg.vocab_size})"
            )
        if np.unique(targets).size != targets.size:
            raise ValueError("EAGLE head d2t maps two draft ids to the same target id")
        self.draft_to_target = paddle.to_tensor(targets, dtype="int64")

    def _project(self, ids, previous_hidden_states):
        """The decoder layer's input ``[T, H]`` (see the module docstring)."""
        e = self.embed_tokens(ids.reshape([-1]))
        h = previous_hidden_states.astype(e.dtype)
        if self.method == "eagle":
            return _mm(self.fc, paddle.concat([e, h], axis=-1))
        if h.shape[-1] != self.head_config.hidden_size:  # the target's aux streams: fuse
            h = _mm(self.fc, h)
        return _mm(self.eh_proj, paddle.concat([self.enorm(e), self.hnorm(h)], axis=-1))

    #: what runs `forward`: the native layers (`native_forward`) or None: eager
    _compiled = None

    def layers_forward(self, ids_remove_padding, previous_hidden_states, meta):
        backend = self.main.attn_backend
        layer = self.layers[0]
        h = self._project(ids_remove_padding, previous_hidden_states)
        backend.init_attention_metadata(meta, [layer.layer_id])
        rope = backend.rope(meta, h.shape[0], self.config.head_dim, self.config.rope_theta)
        h, residual = layer(h, None, rope, meta, backend)
        return self.norm.fused_add(h, residual)[0]

    def forward(self, ids_remove_padding, previous_hidden_states, meta):
        if self._compiled is not None:
            out = self._compiled(ids_remove_padding, previous_hidden_states, meta)
            if out is not None:
                return out
        return self.layers_forward(ids_remove_padding, previous_hidden_states, meta)

    def native_forward(self, enabled: bool = True):
        """As `Ernie4_5ForCausalLM.native_forward` (the head's decoder layer in the C++ kernel)."""
        return _set_forward(self, "native", enabled)

    def compile_forward(self, enabled: bool = True):
        """The head runs eagerly under ``forward="static"`` (its input width changes between
        substeps for EAGLE-3); the target's compiled program still returns the aux hidden
        states. Returns None."""
        self.__dict__["_compiled"] = None
        return None

    def compute_logits(self, hidden):
        """``[R, V]`` float32 over the target vocabulary (EAGLE-3: -inf off the d2t ids)."""
        if not self.own_lm_head:
            return self.main.compute_logits(hidden)
        logits = paddle.matmul(hidden, self.lm_head_weight).astype("float32")
        if self.method == "eagle":
            return logits
        R = logits.shape[0]
        full = paddle.full([self.head_config.vocab_size, R], float("-inf"), "float32")
        full = paddle.scatter(full, self.draft_to_target, logits.T, overwrite=True)
        return full.T.contiguous()
