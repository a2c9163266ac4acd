"""Tensor parallelism of the ERNIE-4.5 model over a ``paddle.distributed`` group (design §9).

A `TensorParallel` names this process's rank in a group of ``world_size`` processes that hold one
shard each of every layer (Megatron / FastDeploy layout):

* attention: q / k / v column-parallel by heads (``num_attention_heads / N`` query heads and
  ``num_key_value_heads / N`` kv heads per rank, so the paged KV cache of a rank holds its own kv
  heads), ``o_proj`` row-parallel (a partial product, summed by ``all_reduce``; the bias is added
  once, after the sum);
* dense MLP and the MoE's shared experts: gate / up column-parallel, down row-parallel;
* MoE routed experts: split across ranks (rank r runs experts ``[r E/N, (r+1) E/N)`` whole); the
  router runs on every rank (replicated ``gate``), each rank adds its experts' weighted outputs
  and one ``all_reduce`` per layer sums experts and shared experts;
* vocabulary-parallel embedding (rank r holds rows ``[r c, (r+1) c)``, ``c = ceil(V / N)``, the
  last shard zero-padded; ids outside the shard give zeros, summed by ``all_reduce``: exact) and
  lm_head (columns likewise; logits gathered with ``all_gather``: exact);
* norms, the router, the MTP block's ``enorm`` / ``hnorm`` / ``eh_proj``: replicated.

Every rank ends a layer with the same activations (the all-reduce result is the same tensor on
every rank), so every rank samples the same tokens. What differs from one process is the
summation order of the row-parallel products: ``x[:, :k/2] @ W[:k/2] + x[:, k/2:] @ W[k/2:]``
instead of one ``x @ W`` (float32 rounding, a few ulps).

The communication is `paddle.distributed` (gloo on CPU, NCCL on GPU); this module only calls
``all_reduce``, ``all_gather`` and ``broadcast`` on ``group``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np

from .config import ErnieConfig

__all__ = ["TensorParallel", "check_tp_config", "local_config", "shard_sources"]


@dataclasses.dataclass(frozen=True)
class TensorParallel:
    """This process's place in a tensor-parallel group.

    Args:
        rank: 0 .. world_size - 1.
        world_size: processes in the group (1: no parallelism, the single-process code paths).
        group: the ``paddle.distributed`` group (None: the default group of ``init_parallel_env``).
    """

    rank: int
    world_size: int
    group: object = None

    def __post_init__(self):
        if not (isinstance(self.world_size, int) and self.world_size >= 1):
            raise ValueError(
                f"TensorParallel: world_size must be an int >= 1, got {self.world_size!r}"
            )
        if not (isinstance(self.rank, int) and 0 <= self.rank < self.world_size):
            raise ValueError(
                f"TensorParallel: rank must be in [0, {self.world_size}), got {self.rank!r}"
            )

    @property
    def active(self) -> bool:
        return self.world_size > 1

    # -- collectives (in place on x; return x) -----------------------------------------------------
    def all_reduce(self, x):
        import paddle.distributed as dist

        dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x):
        """``concat([x of rank 0, ..., x of rank N-1], axis=-1)``."""
        import paddle
        import paddle.distributed as dist

        parts: list = []
        dist.all_gather(parts, x, group=self.group)
        return paddle.concat(parts, axis=-1)

    def broadcast(self, x, src: int = 0):
        import paddle.distributed as dist

        dist.broadcast(x, src=src, group=self.group)
        return x

    # -- partitions --------------------------------------------------------------------------------
    def part(self, n: int) -> tuple[int, int]:
        """``[start, stop)`` of this rank in an even split of ``n`` (``n % world_size == 0``)."""
        k = n // self.world_size
        return self.rank * k, (self.rank + 1) * k

    def vocab_chunk(self, vocab_size: int) -> int:
        return -(-vocab_size // self.world_size)

    def vocab_part(self, vocab_size: int) -> tuple[int, int]:
        """``[start, stop)`` of this rank's vocabulary rows (the last shard may be short)."""
        c = self.vocab_chunk(vocab_size)
        return min(self.rank * c, vocab_size), min((self.rank + 1) * c, vocab_size)


def check_tp_config(config: ErnieConfig, world_size: int, *, what: str = "tensor_parallel_size"):
    """ValueError naming ``what`` and the config field when ``world_size`` does not divide a
    dimension that tensor parallelism splits evenly (heads, kv heads, MLP widths, experts)."""
    if not (isinstance(world_size, int) and not isinstance(world_size, bool) and world_size >= 1):
        raise ValueError(f"{what} must be an int >= 1, got {world_size!r}")
    if world_size == 1:
        return
    fields = [
        ("num_attention_heads", config.num_attention_heads),
        ("num_key_value_heads", config.num_key_value_heads),
        ("intermediate_size", config.intermediate_size),
    ]
    if config.is_moe:
        fields += [
            ("moe_num_experts", config.moe_num_experts),
            (
                "moe_intermediate_size * moe_num_shared_experts",
                config.moe_intermediate_size * config.moe_num_shared_experts,
            ),
        ]
    for name, value in fields:
        if value % world_size:
            raise ValueError(
                f"{what}={world_size} does not divide the model's {name} ({value}): tensor "
                "parallelism splits it evenly across ranks"
            )


def local_config(config: ErnieConfig, tp: TensorParallel | None) -> ErnieConfig:
    """The per-rank view the runner and the proposer size their buffers from: this rank's query
    and kv heads (the paged KV cache of a rank holds its kv heads), the same head_dim and
    vocabulary (logits are gathered whole)."""
    if tp is None or not tp.active:
        return config
    check_tp_config(config, tp.world_size)
    return dataclasses.replace(
        config,
        num_attention_heads=config.num_attention_heads // tp.world_size,
        num_key_value_heads=config.num_key_value_heads // tp.world_size,
        head_dim=config.head_dim,
    )


# --------------------------------------------------------------------------- checkpoint sharding
def _cols(start: int, stop: int, pad_to: int | None = None) -> Callable:
    def f(a: np.ndarray) -> np.ndarray:
        out = a[..., start:stop]
        if pad_to is not None and out.shape[-1] < pad_to:
            pad = [(0, 0)] * (out.ndim - 1) + [(0, pad_to - out.shape[-1])]
            out = np.pad(out, pad)
        return np.ascontiguousarray(out)

    return f


def _rows(start: int, stop: int, pad_to: int | None = None) -> Callable:
    def f(a: np.ndarray) -> np.ndarray:
        out = a[start:stop]
        if pad_to is not None and out.shape[0] < pad_to:
            out = np.pad(out, [(0, pad_to - out.shape[0])] + [(0, 0)] * (out.ndim - 1))
        return np.ascontiguousarray(out)

    return f


def _whole(a: np.ndarray) -> np.ndarray:
    return a


_EXPERT = re.compile(r"^(.*\.mlp\.experts\.)(\d+)(\..*)$")


def shard_sources(
    local_names, config: ErnieConfig, tp: TensorParallel
) -> dict[str, tuple[str, Callable]]:
    """``{local parameter name: (checkpoint name, full array -> this rank's shard)}`` for the
    parameters of a tensor-parallel model (``local_names``: its ``state_dict()`` keys). Routed
    experts are renamed: local ``experts.{j}`` is checkpoint ``experts.{e0 + j}``."""
    d = config.head_dim
    q0, q1 = tp.part(config.num_attention_heads)
    kv0, kv1 = tp.part(config.num_key_value_heads)
    v0, v1 = tp.vocab_part(config.vocab_size)
    chunk = tp.vocab_chunk(config.vocab_size)
    e0 = tp.part(config.moe_num_experts)[0] if config.is_moe else 0
    out: dict[str, tuple[str, Callable]] = {}
    for name in local_names:
        m = _EXPERT.match(name)
        if m:  # a routed expert: whole, under its global index
            out[name] = (f"{m.group(1)}{e0 + int(m.group(2))}{m.group(3)}", _whole)
            continue
        leaf = name.rsplit(".", 2)
        kind = leaf[-1]  # weight / bias / e_score_correction_bias
        proj = leaf[-2] if len(leaf) >= 2 else ""
        if name == "ernie.embed_tokens.weight":
            fn = _rows(v0, v1, chunk)
        elif name == "lm_head.weight":
            fn = _cols(v0, v1, chunk)
        elif proj == "q_proj":
            fn = _cols(q0 * d, q1 * d)
        elif proj in ("k_proj", "v_proj"):
            fn = _cols(kv0 * d, kv1 * d)
        elif proj in ("gate_proj", "up_proj"):
            width = _mlp_width(name, config)
            fn = _cols(*tp.part(width))
        elif proj == "o_proj" and kind == "weight":
            fn = _rows(q0 * d, q1 * d)
        elif proj == "down_proj" and kind == "weight":
            fn = _rows(*tp.part(_mlp_width(name, config)))
        else:  # norms, router, row-parallel biases, MTP enorm / hnorm / eh_proj
            fn = _whole
        out[name] = (name, fn)
    return out


def _mlp_width(name: str, config: ErnieConfig) -> int:
    if ".shared_experts." in name:
        return config.moe_intermediate_size * config.moe_num_shared_experts
    return config.intermediate_size
