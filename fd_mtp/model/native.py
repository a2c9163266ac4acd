"""The packed paged forward of the main model or the MTP block with native CPU decoder layers.

Each dense decoder layer runs as one call of the C++ kernel ``fd_mtp.ops.decoder_layer`` (RMSNorm,
the q/k/v/o and MLP matrix products, RoPE, the paged-attention cache write and attention, SwiGLU and
the residual adds: ``custom_ops/kernels/decoder_layer.h``), where the eager forward dispatches about
twenty Paddle ops per layer, each costing more than its arithmetic on the few tokens of a decoding
step. The embedding, the MTP block's projection, MoE layers and the final norm run as on the eager
path. The attention backend validates the step's metadata once and provides the kernel's int32
metadata and the tokens' positions, exactly as for the eager path; RoPE uses the same tables
(`fd_mtp.model.attention.rope_tables`).

Numerics: the kernel's matrix products are fused multiply-add chains in input order (the same bits
on every x86-64 CPU), Paddle's are MKL's: outputs agree to float32 rounding, not bit for bit.
tests/model/test_native.py compares logits within a tolerance derived from the eager path's own
distance to a float64 forward, and greedy tokens on the demo model and random dense and MoE
checkpoints.

A step runs eagerly instead (counted in ``NativeForward.fallbacks``) when the kernel does not cover
it: another attention backend (or ``use_kernel=False``), non-float32 or non-CPU tensors, a model
split over tensor-parallel ranks, or more than ``max_tokens`` tokens (None, the default: no limit;
the kernel is faster than the eager forward from 1 to 2000 tokens on the 2-core CPU, README). Layers
with biases or routed experts run their eager code inside a native step (``eager_layers`` counts
them).

``model.native_forward()`` turns it on (``LLM(forward="native")``, the default; ``fd-mtp generate
--forward native``), ``model.native_forward(False)`` turns it off.
"""

from __future__ import annotations

import paddle

from ..ops import decoder_layer
from .attention import PagedAttentionCPU, rope_tables


def _layer_weights(layer):
    """The kernel's weight arguments of a dense, bias-free layer, or None when it needs eager code."""
    attn, mlp = layer.self_attn, layer.mlp
    if layer.is_moe:
        return None
    linears = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
    linears += (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    if any(lin.bias is not None for lin in linears):
        return None
    q, k, v, o, gate, up, down = (lin.weight for lin in linears)
    return (
        layer.input_layernorm.weight,
        q,
        k,
        v,
        o,
        layer.post_attention_layernorm.weight,
        gate,
        up,
        down,
    )


class NativeForward:
    """``model``'s packed forward with native decoder layers (see the module docstring).

    ``model``: an ``Ernie4_5ForCausalLM`` or an ``Ernie4_5MTP``. Calling it with the eager
    forward's arguments returns the forward's output, or None when this step must run eagerly.
    """

    #: steps with more tokens run eagerly (None: no limit)
    max_tokens: int | None = None
    #: threads the kernel splits a layer's matrix products and attention over (``LLM(cpu_threads=N)``
    #: sets it with paddle's math threads); the outputs do not depend on it
    threads: int = 1

    def __init__(self, model):
        from .ernie import Ernie4_5ForCausalLM

        self.model = model
        #: a draft model (the MTP block, an EAGLE head): ``_project(ids, previous_hidden)``, its
        #: ``draft_layers``, its ``norm``, on its ``main`` model's attention backend
        self.is_mtp = not isinstance(model, Ernie4_5ForCausalLM)
        self.main = model.main if self.is_mtp else model
        self.layers = list(model.draft_layers) if self.is_mtp else list(self.main.layers)
        self.layer_ids = [layer.layer_id for layer in self.layers]
        self.reason = self._unsupported_reason()
        self.calls = 0
        self.fallbacks = 0
        self.eager_layers = 0
        self._weights = None

    def _unsupported_reason(self) -> str | None:
        if getattr(self.main, "tp", None) is not None:
            return "tensor parallelism (eager collectives)"
        if self.main.config.dtype != "float32":
            return f"dtype {self.main.config.dtype} (the kernel is float32)"
        return None

    @property
    def supported(self) -> bool:
        return self.reason is None

    def _covers(self, meta, num_tokens: int) -> bool:
        backend = self.main.attn_backend
        if not self.supported or not isinstance(backend, PagedAttentionCPU):
            return False
        if not backend.use_kernel or num_tokens == 0:
            return False
        if self.max_tokens is not None and num_tokens > self.max_tokens:
            return False
        for lid in self.layer_ids:
            for cache in meta.caches[lid]:
                if cache.dtype != paddle.float32 or not cache.place.is_cpu_place():
                    return False
        return True

    def __call__(self, ids, *args, capture=()):
        """``(ids, meta)`` (main model) or ``(ids, previous_hidden_states, meta)`` (draft model:
        the MTP block or an EAGLE head). ``capture``: as `Ernie4_5ForCausalLM.run_layers` (the
        streams entering the main model's `aux_hidden_state_layers`)."""
        meta = args[-1]
        ids = ids.reshape([-1])
        num_tokens = int(ids.shape[0])
        if not self._covers(meta, num_tokens):
            self.fallbacks += 1
            return None
        if self._weights is None:
            self._weights = [_layer_weights(layer) for layer in self.layers]
        cfg = self.model.config  # an EAGLE head's own head_dim / rope_theta
        backend = self.main.attn_backend
        backend.init_attention_metadata(meta, self.layer_ids)
        md = meta.attn_metadata
        cos, sin = rope_tables(md.positions[:num_tokens], cfg.head_dim, cfg.rope_theta)
        rope_args = (paddle.to_tensor(cos), paddle.to_tensor(sin))
        if self.is_mtp:
            h = self.model._project(ids, args[0])
        else:
            h = self.main.embed_tokens(ids)
        residual = paddle.zeros_like(h)
        rope = None
        want = set(self.main.aux_hidden_state_layers) if capture != () else set()
        streams = {}
        for i, (layer, weights) in enumerate(zip(self.layers, self._weights)):
            if i in want:
                streams[i] = h + residual
            if weights is None:  # MoE or biased layer: its eager code, on the same metadata
                if rope is None:
                    rope = backend.rope(meta, num_tokens, cfg.head_dim, cfg.rope_theta)
                self.eager_layers += 1
                h, residual = layer(h, residual, rope, meta, backend)
                continue
            h, residual = decoder_layer(
                h,
                residual,
                *weights,
                *meta.caches[layer.layer_id],
                *md.kernel_args,
                *rope_args,
                layer.input_layernorm.eps,
                num_threads=self.threads,
            )
        self.calls += 1
        if want:
            capture.extend(streams[i] for i in self.main.aux_hidden_state_layers)
        return self.model.norm.fused_add(h, residual)[0]
