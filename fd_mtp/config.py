"""Validated configuration of speculative decoding (spec/ops.md §12).

`SpeculativeConfig` mirrors FastDeploy's `SpeculativeConfig` fields and defaults, accepts a plain
dict as FastDeploy does (``LLM(..., speculative_config={"method": "mtp", ...})``), and refuses bad
values with a ValueError that names the field. Pure Python: importing it loads no paddle.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

METHODS = ("mtp", "ngram")
MTP_STRATEGIES = ("default", "with_ngram")
# How drafts are checked against the target (fd_mtp.ops.speculate_verify's verify_strategy).
VERIFICATIONS = ("greedy", "topp", "topk", "target_match", "rejection")
# candidates_len values top_p_candidates accepts (spec §5.6).
CANDIDATE_LENS = tuple(range(1, 11)) + tuple(range(20, 101, 10))
MAX_SPECULATIVE_TOKENS = 5  # the SysV output message carries 6 tokens per request (§12)


@dataclass
class SpeculativeConfig:
    """Speculative decoding settings.

    Args:
        method: "mtp" (the model's multi-token-prediction head drafts) or "ngram" (prompt and
            history lookup drafts).
        num_speculative_tokens: K, drafts verified per step, 1..5.
        num_model_steps: MTP substeps per step, 1..5; for "mtp", K is raised to it when smaller
            (FastDeploy does the same).
        mtp_strategy: "default", or "with_ngram" (extend the MTP drafts with n-gram matches up to
            K when K > num_model_steps: hybrid mode).
        verification: how drafts are checked (default "target_match").
            "target_match": each output row samples its token exactly as plain decoding would
            (same seed, same token index) and a draft is accepted while it equals that sample:
            output identical to plain decoding, greedy or sampled (lossless).
            "greedy": accept while draft == target argmax (greedy requests only).
            "rejection": lossless speculative sampling (same output distribution as plain
            sampling, different draws). "topp" (FastDeploy's default candidate rule) and
            "topk": accept drafts among the target's top candidates (not lossless).
        max_candidate_len: candidates per row for "topp" (top_p_candidates' C).
        verify_window: the top-2 window of "topp".
        max_ngram_size, min_ngram_size: n-gram sizes of the "ngram" method and hybrid mode.
        num_gpu_block_expand_ratio: the MTP cache has int(main blocks * ratio) blocks.
        benchmark_mode: reject every draft (measures the drafting overhead).
        model: FastDeploy's path of a separate draft checkpoint; fd_mtp always drafts with the MTP
            block of the main checkpoint, so only None (or "") is accepted: a path raises
            ValueError rather than being silently ignored.
    """

    method: str = "mtp"
    num_speculative_tokens: int = 1
    num_model_steps: int = 1
    mtp_strategy: str = "default"
    verification: str = "target_match"
    max_candidate_len: int = 5
    verify_window: int = 2
    max_ngram_size: int = 5
    min_ngram_size: int = 2
    num_gpu_block_expand_ratio: float = 1.0
    benchmark_mode: bool = False
    model: str | None = None
    extra: dict = field(default_factory=dict, repr=False)  # unknown keys of a dict, kept for callers

    def __post_init__(self) -> None:
        _choice("method", self.method, METHODS)
        _int_range("num_speculative_tokens", self.num_speculative_tokens, 1, MAX_SPECULATIVE_TOKENS)
        _int_range("num_model_steps", self.num_model_steps, 1, MAX_SPECULATIVE_TOKENS)
        _choice("mtp_strategy", self.mtp_strategy, MTP_STRATEGIES)
        _choice("verification", self.verification, VERIFICATIONS)
        _choice("max_candidate_len", self.max_candidate_len, CANDIDATE_LENS)
        _int_range("verify_window", self.verify_window, 0, None)
        _int_range("max_ngram_size", self.max_ngram_size, 1, None)
        _int_range("min_ngram_size", self.min_ngram_size, 1, self.max_ngram_size)
        if isinstance(self.num_gpu_block_expand_ratio, bool) or not isinstance(
            self.num_gpu_block_expand_ratio, (int, float)
        ) or not self.num_gpu_block_expand_ratio > 0:
            raise ValueError(
                f"SpeculativeConfig.num_gpu_block_expand_ratio must be a number > 0, "
                f"got {self.num_gpu_block_expand_ratio!r}"
            )
        if not isinstance(self.benchmark_mode, bool):
            raise ValueError(f"SpeculativeConfig.benchmark_mode must be a bool, got {self.benchmark_mode!r}")
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError(f"SpeculativeConfig.model must be a path string or None, got {self.model!r}")
        if self.model == "":
            self.model = None
        if self.model is not None:
            raise ValueError(
                f"SpeculativeConfig.model={self.model!r}: fd_mtp has no separate draft checkpoint; it drafts with "
                "the MTP block of the main checkpoint (method 'mtp') or by n-gram lookup (method 'ngram'): "
                "leave model unset (None)"
            )
        if self.method == "mtp" and self.num_speculative_tokens < self.num_model_steps:
            self.num_speculative_tokens = self.num_model_steps

    @property
    def hybrid_mode(self) -> bool:
        """MTP drafts extended by n-gram matches (spec §3: with_ngram and K > num_model_steps)."""
        return (self.method == "mtp" and self.mtp_strategy == "with_ngram"
                and self.num_speculative_tokens > self.num_model_steps)  # fmt: skip

    @classmethod
    def from_value(cls, value: "SpeculativeConfig | Mapping[str, Any] | None") -> "SpeculativeConfig | None":
        """A config from a SpeculativeConfig, a dict (FastDeploy style) or None (no speculation).

        A dict's unknown keys are refused unless they are FastDeploy fields fd_mtp does not use
        (kept in ``extra``), so a typo does not silently fall back to a default.
        """
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"speculative_config must be a SpeculativeConfig, a dict or None, got {type(value).__name__}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in value.items() if k in known}
        extra = {k: v for k, v in value.items() if k not in known}
        unknown = sorted(k for k in extra if k not in FASTDEPLOY_ONLY_FIELDS)
        if unknown:
            raise ValueError(f"speculative_config has unknown fields {unknown}; known: {sorted(known)}")
        if kwargs.get("method") is None and "method" in kwargs:
            return None
        return cls(**kwargs, extra=extra)


# FastDeploy SpeculativeConfig fields accepted in a dict but not used by fd_mtp.
FASTDEPLOY_ONLY_FIELDS = frozenset({
    "quantization", "model_type", "sharing_model", "num_extra_cache_layer", "enable_draft_logprob",
})  # fmt: skip


def _choice(name: str, value: Any, allowed: tuple) -> None:
    if isinstance(value, bool) or value not in allowed:
        raise ValueError(f"SpeculativeConfig.{name} must be one of {list(allowed)}, got {value!r}")


def _int_range(name: str, value: Any, lo: int, hi: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"SpeculativeConfig.{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"SpeculativeConfig.{name} must be {bound}, got {value}")
