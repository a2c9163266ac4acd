"""Tiny ERNIE-4.5 models with random weights and a paged-batch harness for the model tests
(imported by tests/model/* and usable by the engine tests)."""
from __future__ import annotations

import numpy as np
import paddle

from fd_mtp.model import ErnieConfig
from fd_mtp.model.attention import ForwardMeta, allocate_kv_caches
from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP

TINY = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
            num_nextn_predict_layers=1)
MOE = dict(moe_num_experts=4, moe_k=2, moe_intermediate_size=32, moe_num_shared_experts=1,
           moe_layer_start_index=1, moe_use_aux_free=True)


def randomize(layer: paddle.nn.Layer, seed: int) -> None:
    """Random weights everywhere (norm weights near 1, a non-zero expert-choice bias)."""
    rng = np.random.default_rng(seed)
    for name, p in sorted(layer.named_parameters()):
        shape = list(p.shape)
        if name.endswith("norm.weight") or ".norm." in name or "layernorm" in name or "mtp_emb_norm" in name \
                or "mtp_hidden_norm" in name:
            val = 1.0 + 0.2 * rng.standard_normal(shape)
        elif "e_score_correction_bias" in name:
            val = 0.05 * rng.standard_normal(shape)
        elif "embed_tokens" in name:
            val = 0.5 * rng.standard_normal(shape)
        else:
            val = rng.standard_normal(shape) / np.sqrt(shape[0])
        p.set_value(paddle.to_tensor(val.astype(np.float32)).astype(p.dtype))


def make_models(moe: bool = False, seed: int = 0, **overrides):
    cfg = ErnieConfig(**{**TINY, **(MOE if moe else {}), **overrides})
    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model) if cfg.num_nextn_predict_layers else None
    randomize(model, seed)
    if mtp is not None:
        randomize(mtp, seed + 1)
    model.eval()
    return cfg, model, mtp


class PagedHarness:
    """Slots with their own block lists (blocks drawn from a shuffled free list, so a request's
    block ids are not contiguous) and lengths; ``step`` runs one packed forward."""

    def __init__(self, cfg, model, *, max_num_seqs=6, block_size=4, num_blocks=64, max_blocks=16, seed=0,
                 mtp=None):
        self.cfg, self.model, self.mtp = cfg, model, mtp
        self.bs, self.max_blocks, self.B = block_size, max_blocks, max_num_seqs
        self.caches = allocate_kv_caches(cfg, cfg.num_hidden_layers + 1, num_blocks, block_size, "float32")
        self.free = list(np.random.default_rng(seed).permutation(num_blocks))
        self.blocks = [[] for _ in range(max_num_seqs)]
        self.lens = [0] * max_num_seqs

    def meta(self, batch: dict[int, list[int]]) -> ForwardMeta:
        q = np.zeros(self.B, np.int32)
        for slot, ids in batch.items():
            q[slot] = len(ids)
            need = -(-(self.lens[slot] + len(ids)) // self.bs)
            while len(self.blocks[slot]) < need:
                self.blocks[slot].append(int(self.free.pop()))
        dec = np.array(self.lens, np.int32)
        enc = np.where((dec == 0) & (q > 0), q, 0).astype(np.int32)
        tables = np.full((self.B, self.max_blocks), -1, np.int32)
        for s, bl in enumerate(self.blocks):
            tables[s, :len(bl)] = bl
        ids = np.concatenate([np.asarray(batch.get(s, []), np.int64) for s in range(self.B)] + [np.zeros(0, np.int64)])
        cu = np.concatenate([[0], np.cumsum(q)]).astype(np.int32)
        bid = np.repeat(np.arange(self.B), q).astype(np.int32)
        t = paddle.to_tensor
        return ForwardMeta(ids_remove_padding=t(ids), cu_seqlens_q=t(cu), batch_id_per_token=t(bid),
                           seq_lens_this_time=t(q), seq_lens_encoder=t(enc), seq_lens_decoder=t(dec),
                           block_tables=t(tables), caches=self.caches, block_size=self.bs)

    def _split(self, batch, out):
        res, off = {}, 0
        for s in range(self.B):
            if s in batch:
                n = len(batch[s])
                res[s] = out[off:off + n].numpy()
                off += n
                self.lens[s] += n
        return res

    def step(self, batch: dict[int, list[int]]) -> dict[int, np.ndarray]:
        meta = self.meta(batch)
        return self._split(batch, self.model(meta.ids_remove_padding, meta))

    def step_mtp(self, batch: dict[int, list[int]], hidden: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        meta = self.meta(batch)
        prev = np.concatenate([hidden[s] for s in range(self.B) if s in batch], axis=0).astype(np.float32)
        return self._split(batch, self.mtp(meta.ids_remove_padding, paddle.to_tensor(prev), meta))
