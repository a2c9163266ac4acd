"""Validated configuration, parsed once (spec/ops.md §12; design §7).

`fd_mtp.LLM` parses its keyword arguments once into these typed objects and passes the objects
down (runner, proposer, engine); nothing below re-parses or re-checks them:

* `SpeculativeConfig`: FastDeploy's `SpeculativeConfig` fields and defaults; a plain dict is
  accepted as FastDeploy does (``LLM(..., speculative_config={"method": "mtp", ...})``).
* `SchedulerConfig`: ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``.
* `CacheConfig`: ``block_size``, ``num_gpu_blocks``, ``enc_dec_block_num``.

Each refuses bad values with a ValueError that names the field, and ``from_value`` refuses a dict
with an unknown key by name. Pure Python: importing it loads no paddle (and nothing of fd_mtp: the
bottom layer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

METHODS = ("mtp", "eagle", "eagle3", "ngram")
# Methods that draft with a model (its own KV cache, substeps, the draft ops): the checkpoint's MTP
# block, or a separate EAGLE / EAGLE-3 head (``model``: its directory).
DRAFT_MODEL_METHODS = ("mtp", "eagle", "eagle3")
EAGLE_METHODS = ("eagle", "eagle3")
MTP_STRATEGIES = ("default", "with_ngram")
# How drafts are checked against the target (fd_mtp.ops.speculate_verify's verify_strategy).
VERIFICATIONS = ("greedy", "topp", "topk", "target_match", "rejection")
# How many drafts each step verifies (fd_mtp.engine.draft_policy).
DRAFT_POLICIES = ("fixed", "adaptive")
# Who ends speculative requests (fd_mtp.engine.spec_runner's module docstring).
STOP_HANDLINGS = ("engine", "ops")
# Stop token ids per request under stop_handling "ops" (one-token stop sequences; FastDeploy's
# FD_MAX_STOP_SEQS_NUM default).
MAX_STOP_SEQS = 5
# candidates_len values top_p_candidates accepts (spec §5.6).
CANDIDATE_LENS = tuple(range(1, 11)) + tuple(range(20, 101, 10))
MAX_SPECULATIVE_TOKENS = 5  # the SysV output message carries 6 tokens per request (§12)


@dataclass
class SpeculativeConfig:
    """Speculative decoding settings.

    Args:
        method: "mtp" (the model's multi-token-prediction head drafts), "eagle" / "eagle3" (a
            separate EAGLE / EAGLE-3 draft head from the directory ``model``; vLLM's and
            FastDeploy's names; `fd_mtp.model.eagle` documents the checkpoint) or "ngram"
            (prompt and history lookup drafts).
        num_speculative_tokens: K, drafts verified per step, 1..5.
        num_model_steps: draft-model substeps per step, 1..5; for "mtp", "eagle" and "eagle3",
            K is raised to it when smaller (FastDeploy does the same). vLLM's EAGLE drafts K
            tokens with K substeps: set ``num_model_steps = K`` for that.
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
        draft_policy: "fixed" (default: every request verifies every draft, K per step) or
            "adaptive" (`fd_mtp.engine.draft_policy.AdaptiveDraftPolicy`: each step chooses the
            number of MTP substeps and, per request, how many drafts to verify (0..K), from an
            EMA of measured acceptance and the measured step costs, and switches speculation off
            for a request whose drafts do not pay). Methods "mtp", "eagle", "eagle3".
        adaptive_ema: weight of the newest step in the acceptance EMAs, in (0, 1].
        adaptive_warmup_steps: decode steps a request drafts (at least one token) before the
            adaptive policy may switch it off, >= 1.
        adaptive_off_patience: consecutive steps the adaptive policy must find "no draft" best
            for a request before it switches speculation off for it, >= 1.
        draft_sampling: sample each draft from the MTP head's distribution (the request's
            temperature, top-k and top-p; greedy requests keep the argmax) instead of taking its
            argmax, and verify with those draft probabilities: needs ``verification="rejection"``
            and a draft model ("mtp", "eagle", "eagle3") without n-gram extension. Same output distribution as plain
            sampling, with higher acceptance for sampled requests.
        stop_handling: who ends requests. "engine" (default): the engine checks EOS, stop token
            ids, stop strings, ``max_tokens`` and ``max_model_len`` on the host, token by token,
            exactly as plain decoding does, and the ops are given end tokens that match nothing
            and a length limit past the request's (speculative output equals plain output).
            "ops": FastDeploy's configuration: ``speculate_verify`` ends a request at an EOS id
            and at ``max_dec_len`` (= min(max_tokens, max_model_len - prompt length)),
            ``speculate_set_stop_value_multi_seqs`` at a stop token id (each a one-token stop
            sequence, at most 5 per request), ``draft_model_update`` stops drafts at EOS ids and
            at max_dec_len, and the engine finishes a request when the ops' ``stop_flags`` say
            so; only stop strings stay on the host. Upstream's semantics then show (the token
            at max_tokens becomes the EOS id, a stop token id is followed by an EOS id, ...;
            listed in `fd_mtp.engine.spec_runner`), and ``ignore_eos`` requests are refused
            (the ops' end tokens are one list for the whole batch, as FastDeploy's).
        model: the directory of the draft checkpoint (vLLM's / FastDeploy's name): required for
            "eagle" / "eagle3" (the head, `fd_mtp.model.eagle`); "mtp" drafts with the MTP block
            of the main checkpoint and "ngram" with none, so for them only None (or "") is
            accepted: a path raises ValueError rather than being silently ignored.
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
    draft_policy: str = "fixed"
    adaptive_ema: float = 0.3
    adaptive_warmup_steps: int = 2
    adaptive_off_patience: int = 2
    draft_sampling: bool = False
    stop_handling: str = "engine"
    extra: dict = field(
        default_factory=dict, repr=False
    )  # unknown keys of a dict, kept for callers

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
        if (
            isinstance(self.num_gpu_block_expand_ratio, bool)
            or not isinstance(self.num_gpu_block_expand_ratio, (int, float))
            or not self.num_gpu_block_expand_ratio > 0
        ):
            raise ValueError(
                f"SpeculativeConfig.num_gpu_block_expand_ratio must be a number > 0, "
                f"got {self.num_gpu_block_expand_ratio!r}"
            )
        if not isinstance(self.benchmark_mode, bool):
            raise ValueError(
                f"SpeculativeConfig.benchmark_mode must be a bool, got {self.benchmark_mode!r}"
            )
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError(
                f"SpeculativeConfig.model must be a path string or None, got {self.model!r}"
            )
        if self.model == "":
            self.model = None
        if self.method in EAGLE_METHODS and self.model is None:
            raise ValueError(
                f"SpeculativeConfig.model: method {self.method!r} needs the directory of the "
                "EAGLE head checkpoint (config.json + model.safetensors)"
            )
        if self.method not in EAGLE_METHODS and self.model is not None:
            raise ValueError(
                f"SpeculativeConfig.model={self.model!r}: method {self.method!r} takes no separate "
                "draft checkpoint (it drafts with the MTP block of the main checkpoint ('mtp') or "
                "by n-gram lookup ('ngram'); a separate head is method 'eagle' or 'eagle3'): "
                "leave model unset (None)"
            )
        if self.uses_draft_model and self.num_speculative_tokens < self.num_model_steps:
            self.num_speculative_tokens = self.num_model_steps
        _choice("draft_policy", self.draft_policy, DRAFT_POLICIES)
        _choice("stop_handling", self.stop_handling, STOP_HANDLINGS)
        if (
            isinstance(self.adaptive_ema, bool)
            or not isinstance(self.adaptive_ema, (int, float))
            or not 0.0 < self.adaptive_ema <= 1.0
        ):
            raise ValueError(
                f"SpeculativeConfig.adaptive_ema must be a number in (0, 1], got {self.adaptive_ema!r}"
            )
        _int_range("adaptive_warmup_steps", self.adaptive_warmup_steps, 1, None)
        _int_range("adaptive_off_patience", self.adaptive_off_patience, 1, None)
        if not isinstance(self.draft_sampling, bool):
            raise ValueError(
                f"SpeculativeConfig.draft_sampling must be a bool, got {self.draft_sampling!r}"
            )
        if self.draft_policy == "adaptive" and not self.uses_draft_model:
            raise ValueError(
                "SpeculativeConfig.draft_policy='adaptive' needs a draft model (method 'mtp', "
                f"'eagle' or 'eagle3'), got method {self.method!r}"
            )
        if self.draft_sampling:
            if not self.uses_draft_model or self.hybrid_mode:
                raise ValueError(
                    "SpeculativeConfig.draft_sampling=True needs a draft model (method 'mtp', "
                    "'eagle' or 'eagle3') without the n-gram "
                    f"extension (got method {self.method!r}, mtp_strategy {self.mtp_strategy!r})"
                )
            if self.verification != "rejection":
                raise ValueError(
                    "SpeculativeConfig.draft_sampling=True needs verification='rejection' (the "
                    f"verifier must see the draft probabilities), got {self.verification!r}"
                )

    @property
    def uses_draft_model(self) -> bool:
        """A draft model drafts ("mtp", "eagle", "eagle3"): its own KV cache and substeps."""
        return self.method in DRAFT_MODEL_METHODS

    @property
    def lookahead(self) -> int:
        """KV positions a step writes past the tokens it feeds: the draft model's substeps after
        the first (``num_model_steps - 1``; 0 for "ngram")."""
        return self.num_model_steps - 1 if self.uses_draft_model else 0

    @property
    def extra_positions(self) -> int:
        """KV positions past ``max_model_len - 1`` a request may touch: K rejected drafts plus the
        lookahead (the block-table row and the default cache size count them)."""
        return self.num_speculative_tokens + self.lookahead

    @property
    def hybrid_mode(self) -> bool:
        """Draft-model drafts extended by n-gram matches (spec §3: with_ngram and K >
        num_model_steps)."""
        return (
            self.uses_draft_model
            and self.mtp_strategy == "with_ngram"
            and self.num_speculative_tokens > self.num_model_steps
        )

    @classmethod
    def from_value(
        cls, value: SpeculativeConfig | Mapping[str, Any] | None
    ) -> SpeculativeConfig | None:
        """A config from a SpeculativeConfig, a dict (FastDeploy style) or None (no speculation).

        A dict's unknown keys are refused unless they are FastDeploy fields fd_mtp does not use
        (kept in ``extra``), so a typo does not silently fall back to a default.
        """
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"speculative_config must be a SpeculativeConfig, a dict or None, got {type(value).__name__}"
            )
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in value.items() if k in known}
        extra = {k: v for k, v in value.items() if k not in known}
        unknown = sorted(k for k in extra if k not in FASTDEPLOY_ONLY_FIELDS)
        if unknown:
            raise ValueError(
                f"speculative_config has unknown fields {unknown}; known: {sorted(known)}"
            )
        if kwargs.get("method") is None and "method" in kwargs:
            return None
        return cls(**kwargs, extra=extra)


# FastDeploy SpeculativeConfig fields accepted in a dict but not used by fd_mtp.
FASTDEPLOY_ONLY_FIELDS = frozenset(
    {
        "quantization",
        "model_type",
        "sharing_model",
        "num_extra_cache_layer",
        "enable_draft_logprob",
    }
)


def _choice(name: str, value: Any, allowed: tuple) -> None:
    if isinstance(value, bool) or value not in allowed:
        raise ValueError(f"SpeculativeConfig.{name} must be one of {list(allowed)}, got {value!r}")


def _int_range(name: str, value: Any, lo: int, hi: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"SpeculativeConfig.{name} must be an int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"SpeculativeConfig.{name} must be {bound}, got {value}")


def _from_mapping(cls, value, what: str):
    """``cls`` from an instance, a dict of its fields (an unknown key raises ValueError naming it)
    or None (the defaults)."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{what} must be a {cls.__name__}, a dict or None, got {type(value).__name__}"
        )
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ValueError(f"{what} has unknown fields {unknown}; known: {known}")
    return cls(**value)


def _check_int(
    owner: str, name: str, value: Any, lo: int, hi: int | None = None, hint: str = ""
) -> None:
    """ValueError ``"<owner>.<name> must be an int >= lo"`` (or ``in [lo, hi]``) unless it is one."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < lo
        or (hi is not None and value > hi)
    ):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{owner}.{name} must be an int {bound}{hint}, got {value!r}")


DEFAULT_MAX_MODEL_LEN = 4096  # max_model_len when unset: min(max_position_embeddings, this)
MAX_BLOCK_SIZE = 1024


@dataclass
class SchedulerConfig:
    """What one engine step may hold.

    Args:
        max_num_seqs: request slots (the batch size of a step), >= 1.
        max_num_batched_tokens: tokens per step, >= 1; longer prompts are prefilled in chunks.
        max_model_len: longest prompt + output, >= 2; None until `resolve` fills it from the model
            (``min(max_position_embeddings, 4096)``). Runners need it resolved.
    """

    max_num_seqs: int = 8
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        _check_int("SchedulerConfig", "max_num_seqs", self.max_num_seqs, 1)
        _check_int("SchedulerConfig", "max_num_batched_tokens", self.max_num_batched_tokens, 1)
        if self.max_model_len is not None:
            _check_int("SchedulerConfig", "max_model_len", self.max_model_len, 2)

    @classmethod
    def from_value(cls, value: SchedulerConfig | Mapping[str, Any] | None) -> SchedulerConfig:
        """A SchedulerConfig from one, a dict of its fields (unknown keys refused by name) or None."""
        return _from_mapping(cls, value, "scheduler_config")

    def resolve(self, max_position_embeddings: int) -> SchedulerConfig:
        """This config with ``max_model_len`` set for a model of ``max_position_embeddings``
        positions (ValueError when it exceeds them)."""
        limit = int(max_position_embeddings)
        if self.max_model_len is None:
            return dataclasses.replace(self, max_model_len=min(limit, DEFAULT_MAX_MODEL_LEN))
        if self.max_model_len > limit:
            raise ValueError(
                f"SchedulerConfig.max_model_len {self.max_model_len} exceeds the model's "
                f"max_position_embeddings {limit}"
            )
        return self


@dataclass
class CacheConfig:
    """The paged KV cache.

    Args:
        block_size: positions per KV block, an int in [1, 1024] (FastDeploy's default 64; the
            cache holds at least one block per slot, so huge blocks only waste memory).
        num_gpu_blocks: KV blocks per layer, >= 1; None until `resolve` fills the default: enough
            for every slot at ``max_model_len`` (plus the speculative extra positions). Fewer blocks
            make the engine preempt (and later re-prefill) the newest requests.
        enc_dec_block_num: spare block-table columns per row (FastDeploy's FD_ENC_DEC_BLOCK_NUM).
        enable_prefix_caching: reuse the KV blocks (the target's and the MTP draft model's) of a
            prefix an earlier request computed (vLLM's automatic prefix caching, FastDeploy's
            option name; `fd_mtp.engine.block_manager`). Output is the same either way.
    """

    block_size: int = 64
    num_gpu_blocks: int | None = None
    enc_dec_block_num: int = 2
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        _check_int(
            "CacheConfig", "block_size", self.block_size, 1, MAX_BLOCK_SIZE, " (FastDeploy uses 64)"
        )
        if self.num_gpu_blocks is not None:
            _check_int("CacheConfig", "num_gpu_blocks", self.num_gpu_blocks, 1)
        _check_int("CacheConfig", "enc_dec_block_num", self.enc_dec_block_num, 0)
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(
                "CacheConfig: enable_prefix_caching must be a bool, got "
                f"{self.enable_prefix_caching!r}"
            )

    @classmethod
    def from_value(cls, value: CacheConfig | Mapping[str, Any] | None) -> CacheConfig:
        """A CacheConfig from one, a dict of its fields (unknown keys refused by name) or None."""
        return _from_mapping(cls, value, "cache_config")

    def resolve(self, scheduler: SchedulerConfig, extra_positions: int = 0) -> CacheConfig:
        """This config with ``num_gpu_blocks`` set (when None) to ``max_num_seqs`` times the blocks
        of ``max_model_len + extra_positions`` positions (``scheduler`` resolved)."""
        if self.num_gpu_blocks is not None:
            return self
        if scheduler.max_model_len is None:
            raise ValueError(
                "CacheConfig.resolve: the SchedulerConfig's max_model_len is not resolved"
            )
        per_seq = -(-(scheduler.max_model_len + extra_positions) // self.block_size)
        return dataclasses.replace(self, num_gpu_blocks=scheduler.max_num_seqs * per_seq)


PD_ROLES = ("mixed", "prefill", "decode")


@dataclass
class ParallelConfig:
    """Beyond one process (design §9).

    Args:
        tensor_parallel_size: ranks that each hold a shard of the model (``paddle.distributed``:
            gloo on CPU, NCCL on GPU), >= 1. The model's heads, kv heads, MLP widths and experts
            must divide by it (checked against the model when it is loaded).
        splitwise_role: FastDeploy's prefill / decode disaggregation role: "mixed" (one instance
            does both), "prefill" or "decode".
    """

    tensor_parallel_size: int = 1
    splitwise_role: str = "mixed"

    def __post_init__(self) -> None:
        _check_int("ParallelConfig", "tensor_parallel_size", self.tensor_parallel_size, 1)
        if self.splitwise_role not in PD_ROLES:
            raise ValueError(
                f"ParallelConfig.splitwise_role must be one of {list(PD_ROLES)}, got "
                f"{self.splitwise_role!r}"
            )
        if self.tensor_parallel_size > 1 and self.splitwise_role != "mixed":
            raise ValueError(
                "ParallelConfig: tensor_parallel_size > 1 with splitwise_role "
                f"{self.splitwise_role!r} is not supported (prefill / decode disaggregation "
                "runs one process per instance)"
            )

    @classmethod
    def from_value(cls, value: ParallelConfig | Mapping[str, Any] | None) -> ParallelConfig:
        """A ParallelConfig from one, a dict of its fields (unknown keys refused by name) or None."""
        return _from_mapping(cls, value, "parallel_config")


#: fd_mtp.SamplingParams.seed and LLM(seed=...) are in [0, SEED_MODULUS) (2**63 - 2): FastDeploy keeps
#: per-request seeds in an int64 buffer and wraps them at this modulus (spec §2, infer_seed)
SEED_MODULUS = 9223372036854775806
#: LLM(device=...), LLM(dtype=...)
DEVICES = ("cpu", "gpu")
DTYPES = ("float32", "bfloat16", "float16")
#: LLM(forward=...): native CPU decoder layers (fd_mtp.model.native), op-by-op dispatch, or the
#: compiled program (fd_mtp.model.compiled)
FORWARDS = ("native", "eager", "static")


def check_device(device, owner: str = "LLM") -> str:
    """``device`` as `paddle.set_device` takes it: "cpu", or "gpu" ("cuda" is accepted as an alias;
    "gpu:N" / "cuda:N" pick a card). ValueError naming ``device`` for anything else, and for a GPU
    on a paddle built without CUDA."""
    dev = device.strip().lower() if isinstance(device, str) else None
    kind, _, index = (dev or "").partition(":")
    if kind == "cuda":
        kind = "gpu"
    if kind not in DEVICES or (index and (kind != "gpu" or not index.isdigit())):
        raise ValueError(
            f"{owner}: device must be one of {list(DEVICES)} (or 'gpu:N'), got {device!r}"
        )
    if kind == "gpu":
        import paddle

        if not paddle.is_compiled_with_cuda():
            raise ValueError(
                f"{owner}: device={device!r} needs a CUDA build of PaddlePaddle; this paddle "
                f"({paddle.__version__}) is a CPU build: use device='cpu'"
            )
    return kind + (":" + index if index else "")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_run_options(
    owner: str, *, device, dtype, seed, forward, cpu_threads
) -> tuple[str, str | None]:
    """The checks of `fd_mtp.LLM`'s (and a PD front's) run options, ValueError naming the option
    after ``owner``: ``device`` (`check_device`), ``dtype`` (None or one of `DTYPES`; half
    precision only on a GPU: Paddle's CPU build has no half-precision matmul), ``seed`` (an int in
    [0, SEED_MODULUS)), ``forward`` (one of `FORWARDS`), ``cpu_threads`` (None or an int >= 1).
    Returns ``(device, dtype)`` normalised ("cuda" -> "gpu", "paddle.float32" -> "float32")."""
    device = check_device(device, owner)
    if dtype is not None:
        dtype = str(dtype).replace("paddle.", "")
        if dtype not in DTYPES:
            raise ValueError(f"{owner}: dtype must be None or one of {list(DTYPES)}, got {dtype!r}")
        if dtype != "float32" and device == "cpu":
            raise ValueError(
                f"{owner}: dtype={dtype!r} is not supported on device 'cpu' (Paddle's CPU build has "
                "no half-precision matmul): use dtype='float32' or None (a half-precision "
                "checkpoint then runs in float32), or device='gpu'"
            )
    if not _is_int(seed) or not 0 <= seed < SEED_MODULUS:
        raise ValueError(f"{owner}: seed must be an int in [0, {SEED_MODULUS}), got {seed!r}")
    if forward not in FORWARDS:
        raise ValueError(f"{owner}: forward must be one of {list(FORWARDS)}, got {forward!r}")
    if cpu_threads is not None and (not _is_int(cpu_threads) or cpu_threads < 1):
        raise ValueError(f"{owner}: cpu_threads must be None or an int >= 1, got {cpu_threads!r}")
    return device, dtype
