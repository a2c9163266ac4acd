"""The packed paged forward of the main model or the MTP block as a compiled Paddle program.

``paddle.jit.to_static`` (PIR, whole graph) traces the model's own layer code once per model with
symbolic token counts: the program's inputs are the step's token ids (and, for the MTP block, the
previous hidden states), the step's RoPE rotation matrices (`fd_mtp.model.attention.Rope`, matrix
form), the paged-attention kernel's int32 metadata (block tables, ``cu_seqlens_q``,
``batch_id_per_token``, ``seq_lens_decoder``) and the layers' KV caches, which the
``fd_mtp_paged_attention`` custom op inside the program writes in place. The weights are the
model's parameters (shared, not copied). Everything that needs the host (validating the metadata,
the RoPE tables, the kernel's metadata tensors) runs before the program, in the attention
backend, exactly as on the eager path; the program runs the same kernels in the same order, so its
outputs equal the eager forward's bit for bit (tests/model/test_compiled.py).

A step the program does not cover runs eagerly: a backend other than the fused float32 CPU kernel
(`fd_mtp.model.attention.PagedAttentionCPU` with ``use_kernel``), a step large enough for RoPE's
elementwise form (`Rope.MAX_MATRIX_ELEMENTS`), a model split over tensor-parallel ranks (the
all-reduces are eager collectives), MoE layers routed per expert (more than
``Ernie4_5MoE.dense_combine_max_experts`` experts: a host read of the routing per layer), or a
non-float32 model. `CompiledForward.fallbacks` counts those steps.

Whether it pays is measured, not assumed: ``benchmarks/bench_profile.py --forward static`` runs the
profile with it; the README's *CPU step profile* has the figures on the 2-core CPU. The model's
``compile_forward()`` turns it on (``LLM(forward="static")``, ``fd-mtp generate --forward static``),
``compile_forward(False)`` turns it off.
"""

from __future__ import annotations

import paddle

from ..ops._loader import run_registered
from .attention import AttentionBackend, PagedAttentionCPU


class _ProgramRope:
    """`Rope`'s matrix form on the program's rotation input ``[T, D, D]``."""

    def __init__(self, rotation):
        self.rotation = rotation

    def apply(self, x):
        return paddle.matmul(x, self.rotation)


class _ProgramMeta:
    """What the layers read of a step inside the program: its kernel metadata and caches."""

    def __init__(self, block_tables, cu_seqlens_q, batch_id_per_token, seq_lens_decoder, caches):
        self.kernel_args = (block_tables, cu_seqlens_q, batch_id_per_token, seq_lens_decoder)
        self.caches = caches


class _ProgramAttention(AttentionBackend):
    """Paged attention inside the program: the registered custom op ``fd_mtp_paged_attention``
    (what a static program can call), on the program's metadata inputs."""

    def forward(self, q, k, v, layer_id: int, meta: _ProgramMeta):
        key_cache, value_cache = meta.caches[layer_id]
        scale = 1.0 / float(q.shape[-1]) ** 0.5
        out = run_registered(
            "paged_attention", q, k, v, key_cache, value_cache, *meta.kernel_args, scale
        )
        return out[0] if isinstance(out, (list, tuple)) else out


def _spec(shape, dtype):
    from paddle.static import InputSpec

    return InputSpec(shape, dtype)


class CompiledForward:
    """``model``'s packed forward as a ``paddle.jit.to_static`` program (see the module docstring).

    ``model``: an ``Ernie4_5ForCausalLM`` or an ``Ernie4_5MTP``. Calling it with the eager
    forward's arguments returns the forward's output, or None when this step must run eagerly.
    """

    def __init__(self, model):
        from .ernie import Ernie4_5MTP

        self.model = model
        self.is_mtp = isinstance(model, Ernie4_5MTP)
        main = model.main if self.is_mtp else model
        self.main = main
        self.layer_ids = (
            [model.mtp_block.layer_id] if self.is_mtp else [layer.layer_id for layer in main.layers]
        )
        self.reason = self._unsupported_reason()
        self.calls = 0
        self.fallbacks = 0
        self._program = None
        self._layer = None
        self._cache_shape = None
        self._aux = ()  # the aux layers the program returns (EAGLE-3 capture)

    def _unsupported_reason(self) -> str | None:
        main = self.main
        if getattr(main, "tp", None) is not None:
            return "tensor parallelism (eager collectives)"
        if main.config.dtype != "float32":
            return f"dtype {main.config.dtype} (the kernel is float32)"
        layers = [self.model.mtp_block] if self.is_mtp else list(main.layers)
        for layer in layers:
            mlp = layer.mlp
            if layer.is_moe and mlp.num_experts > mlp.dense_combine_max_experts:
                return f"MoE with {mlp.num_experts} experts (routed per expert on the host)"
        return None

    @property
    def supported(self) -> bool:
        return self.reason is None

    def _build(self, cache_shape):
        hidden = self.main.config.hidden_size
        d = self.main.config.head_dim
        n = len(self.layer_ids)
        specs = [_spec([None], "int64")]
        if self.is_mtp:
            specs.append(_spec([None, hidden], self.main.config.dtype))
        specs += [
            _spec([None, d, d], "float32"),
            _spec([None, None], "int32"),
            _spec([None], "int32"),
            _spec([None], "int32"),
            _spec([None], "int32"),
            [_spec(list(cache_shape), "float32") for _ in range(2 * n)],
        ]
        model, layer_ids, is_mtp = self.model, self.layer_ids, self.is_mtp
        backend = _ProgramAttention()

        def layers(rotation, block_tables, cu, bid, dec, flat):
            caches = {lid: (flat[2 * i], flat[2 * i + 1]) for i, lid in enumerate(layer_ids)}
            return _ProgramMeta(block_tables, cu, bid, dec, caches), _ProgramRope(rotation)

        if is_mtp:

            def program(ids, prev, rotation, block_tables, cu, bid, dec, flat):
                meta, rope = layers(rotation, block_tables, cu, bid, dec, flat)
                return model.layers_forward(ids, prev, meta, rope, backend)
        elif self._aux:

            def program(ids, rotation, block_tables, cu, bid, dec, flat):
                # EAGLE-3's aux hidden states: program outputs after the final hidden states
                meta, rope = layers(rotation, block_tables, cu, bid, dec, flat)
                aux = []
                out = model.layers_forward(ids, meta, rope, backend, capture=aux)
                return [out, *aux]
        else:

            def program(ids, rotation, block_tables, cu, bid, dec, flat):
                meta, rope = layers(rotation, block_tables, cu, bid, dec, flat)
                return model.layers_forward(ids, meta, rope, backend)

        self._program = paddle.jit.to_static(program, input_spec=specs, full_graph=True)
        self._layer = None
        self._cache_shape = tuple(cache_shape)

    def __call__(self, ids, *args, capture=()):
        """``(ids, meta)`` (main model) or ``(ids, previous_hidden_states, meta)`` (MTP block).
        ``capture``: as `Ernie4_5ForCausalLM.run_layers` (the program then also returns the
        streams entering the main model's `aux_hidden_state_layers`)."""
        meta = args[-1]
        if not self.supported or not isinstance(self.main.attn_backend, PagedAttentionCPU):
            self.fallbacks += 1
            return None
        backend = self.main.attn_backend
        caches = [meta.caches[lid] for lid in self.layer_ids]
        if not backend.use_kernel or any(
            c.dtype != paddle.float32 or not c.place.is_cpu_place() for kv in caches for c in kv
        ):
            self.fallbacks += 1
            return None
        ids = ids.reshape([-1])
        cfg = self.main.config
        backend.init_attention_metadata(meta, self.layer_ids)
        rope = backend.rope(meta, ids.shape[0], cfg.head_dim, cfg.rope_theta)
        if rope.rotation is None or ids.shape[0] == 0:
            self.fallbacks += 1
            return None
        shape = tuple(caches[0][0].shape)
        aux = () if self.is_mtp or capture == () else tuple(self.main.aux_hidden_state_layers)
        if self._program is None or shape != self._cache_shape or aux != self._aux:
            self._aux = aux
            self._build(shape)
        flat = [c for kv in caches for c in kv]
        extra = [args[0].astype(cfg.dtype)] if self.is_mtp else []
        inputs = [ids, *extra, rope.rotation, *meta.attn_metadata.kernel_args]
        if self._layer is None:
            # the traced program (symbolic token counts: one program serves every step); calling
            # its layer with the flat input list skips to_static's per-call argument matching
            _, self._layer = self._program.get_concrete_program(*inputs, flat)
        self.calls += 1
        out = self._layer(inputs + flat)
        if not self._aux:
            return out
        capture.extend(out[1:])
        return out[0]
