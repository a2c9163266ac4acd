"""`SamplingParams`: how one request is sampled and when it stops (validated on construction).

numpy-free and paddle-free, so ``fd_mtp.SamplingParams`` can be built without loading paddle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..config import SEED_MODULUS

#: the largest ``SamplingParams.logprobs`` (FastDeploy's and vLLM's default cap)
MAX_LOGPROBS = 20


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass
class SamplingParams:
    """Sampling and stopping parameters of one request (vLLM / FastDeploy names).

    Sampling order per generated token (FastDeploy's ``Sampler``): repetition / frequency /
    presence penalties over the tokens generated so far (not the prompt, as FastDeploy), division
    by ``temperature``, softmax, top-k, top-p (the smallest prefix of the sorted distribution whose
    mass reaches ``top_p``), one draw. ``temperature == 0`` means greedy (argmax after the
    penalties). A draw uses a uniform number derived from ``(seed, index of the token)`` only, so
    a seeded request gives the same tokens whatever else is in the batch, and after preemption.

    Attributes:
        temperature: ``>= 0``; 0 is greedy.
        top_p: in ``(0, 1]``.
        top_k: 0 (all tokens) or ``>= 1``.
        max_tokens: ``>= 1`` tokens to generate at most (generation also ends at ``max_model_len``).
        min_tokens: ``0 <= min_tokens <= max_tokens``; EOS and ``stop_token_ids`` are masked out
            until that many tokens exist.
        stop: a string or list of strings; generation ends when the decoded text contains one
            (needs a tokenizer); the text is cut before it unless ``include_stop_str_in_output``.
        stop_token_ids: extra token ids that end generation (kept in ``token_ids``).
        ignore_eos: keep generating after the model's EOS tokens.
        repetition_penalty: ``> 0`` (1 = off), frequency_penalty / presence_penalty: in ``[-2, 2]``.
        seed: ``None`` (the engine derives one from its own seed and the request's arrival number)
            or an int in ``[0, 2**63 - 2)``.
        skip_special_tokens: passed to the tokenizer's ``decode``.
        max_draft_tokens: speculative decoding of this request: None (the engine's
            ``num_speculative_tokens``), 0 (no speculation: the request decodes one token per
            step and its drafter is switched off) or an int ``>= 1`` capping the drafts verified
            per step (at most the engine's K). Ignored without speculative decoding.
        logprobs: None (off: no extra work) or an int in ``[0, 20]``: every generated token
            gets the log-probabilities of the ``logprobs`` most likely tokens and of the sampled
            token itself (vLLM's semantics: so 1 or ``logprobs + 1`` entries), in
            ``RequestOutput.logprobs``. The distribution is the model's raw one,
            ``log_softmax(logits)`` before penalties, temperature, top-k and top-p
            (FastDeploy's default ``logprobs_mode``, "raw_logprobs").
        prompt_logprobs: None (off) or an int in ``[0, 20]``: every prompt token after the first
            gets the same kind of entry (the ``prompt_logprobs`` most likely tokens at its
            position and the prompt token itself), in ``RequestOutput.prompt_logprobs`` (its
            first entry is None: nothing predicts the first token), as vLLM. The prompt is then
            computed whole: the prefix cache is not read for the request (its blocks still
            enter the cache).

    Raises:
        ValueError naming the field for any out-of-range or mistyped value.

    Example:
        >>> SamplingParams(temperature=0.0, max_tokens=4).max_tokens
        4
        >>> SamplingParams(top_p=0.0)
        Traceback (most recent call last):
        ...
        ValueError: SamplingParams.top_p must be in (0, 1], got 0.0
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 16
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    max_draft_tokens: int | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    stop_list: list[str] = field(init=False, repr=False)

    def __post_init__(self):
        def bad(name, why):
            raise ValueError(f"SamplingParams.{name} {why}, got {getattr(self, name)!r}")

        for name in (
            "temperature",
            "top_p",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
        ):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                bad(name, "must be a finite number")
            setattr(self, name, float(value))
        for name in ("top_k", "max_tokens", "min_tokens"):
            if not _is_int(getattr(self, name)):
                bad(name, "must be an int")
        if self.temperature < 0:
            bad("temperature", "must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            bad("top_p", "must be in (0, 1]")
        if self.top_k < 0:
            bad("top_k", "must be 0 (disabled) or >= 1")
        if self.max_tokens < 1:
            bad("max_tokens", "must be >= 1")
        if not 0 <= self.min_tokens <= self.max_tokens:
            bad("min_tokens", f"must be in [0, max_tokens={self.max_tokens}]")
        if self.repetition_penalty <= 0:
            bad("repetition_penalty", "must be > 0")
        for name in ("frequency_penalty", "presence_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                bad(name, "must be in [-2, 2]")
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < SEED_MODULUS):
            bad("seed", f"must be None or an int in [0, {SEED_MODULUS})")
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                bad(name, "must be a bool")
        if self.max_draft_tokens is not None and (
            not _is_int(self.max_draft_tokens) or self.max_draft_tokens < 0
        ):
            bad("max_draft_tokens", "must be None or an int >= 0")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS
        ):
            bad("logprobs", f"must be None or an int in [0, {MAX_LOGPROBS}]")
        if self.prompt_logprobs is not None and (
            not _is_int(self.prompt_logprobs) or not 0 <= self.prompt_logprobs <= MAX_LOGPROBS
        ):
            bad("prompt_logprobs", f"must be None or an int in [0, {MAX_LOGPROBS}]")
        stop = self.stop
        if stop is None:
            stop_list = []
        elif isinstance(stop, str):
            stop_list = [stop]
        elif isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop):
            stop_list = list(stop)
        else:
            bad("stop", "must be None, a string or a list of strings")
        if any(s == "" for s in stop_list):
            bad("stop", "must not contain an empty string")
        self.stop_list = stop_list
        ids = self.stop_token_ids
        if ids is None:
            self.stop_token_ids = []
        elif isinstance(ids, (list, tuple)) and all(_is_int(t) and t >= 0 for t in ids):
            self.stop_token_ids = list(ids)
        else:
            bad("stop_token_ids", "must be None or a list of non-negative ints")

    @property
    def greedy(self) -> bool:
        """True when the token is the argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0.0 or self.top_k == 1
