"""Request state inside the engine, and what the engine hands back (outputs, stream deltas, metrics)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from .sampler import Logprob
from .sampling_params import SamplingParams

__all__ = [
    "Logprob",
    "Request",
    "RequestMetrics",
    "RequestOutput",
    "RequestStatus",
    "SpeculativeMetrics",
    "StreamDelta",
    "with_decoded_tokens",
]


class RequestStatus(enum.Enum):
    WAITING = (
        "waiting"  # not in a slot: new, or preempted (re-prefilled from prompt + output later)
    )
    RUNNING = "running"  # holds a slot and KV blocks
    FINISHED = "finished"


@dataclass
class SpeculativeMetrics:
    """Draft statistics of speculative decoding, per request or summed over requests.

    Counted over *decode* steps (target steps that verified drafts; a prefill step emits one token
    and drafts nothing). ``drafted_per_position[i]`` / ``accepted_per_position[i]``: how often a
    draft was proposed / accepted at draft position i (0 = the first draft). A step that accepts
    ``a`` drafts out of ``d`` emits ``a + 1`` tokens (the accepted drafts and the bonus or
    correction token); every emitted token counts, including ones the engine then drops after a
    stop.

    Derived: ``acceptance_rate`` = accepted / drafted; ``acceptance_per_position[i]`` = accepted /
    drafted at position i; ``mean_accepted_length`` = emitted tokens per decode step (1.0 = no draft
    ever accepted; ``1 + K`` = every draft accepted).

    >>> m = SpeculativeMetrics(2)
    >>> m.add(SpeculativeMetrics.of_step(2, drafted=2, emitted=3))
    >>> m.add(SpeculativeMetrics.of_step(2, drafted=2, emitted=1))
    >>> m.mean_accepted_length, m.acceptance_per_position
    (2.0, [0.5, 0.5])
    """

    num_speculative_tokens: int
    num_steps: int = 0
    num_drafted: int = 0
    num_accepted: int = 0
    num_emitted: int = 0
    drafted_per_position: list = field(default_factory=list)
    accepted_per_position: list = field(default_factory=list)

    def __post_init__(self):
        k = self.num_speculative_tokens
        self.drafted_per_position = list(self.drafted_per_position) or [0] * k
        self.accepted_per_position = list(self.accepted_per_position) or [0] * k

    @classmethod
    def of_step(cls, num_speculative_tokens: int, drafted: int, emitted: int) -> SpeculativeMetrics:
        """One decode step that verified ``drafted`` drafts and emitted ``emitted`` tokens."""
        accepted = max(0, min(emitted - 1, drafted))
        k = num_speculative_tokens
        return cls(
            k,
            1,
            drafted,
            accepted,
            emitted,
            [1 if i < drafted else 0 for i in range(k)],
            [1 if i < accepted else 0 for i in range(k)],
        )

    def add(self, other: SpeculativeMetrics) -> None:
        self.num_steps += other.num_steps
        self.num_drafted += other.num_drafted
        self.num_accepted += other.num_accepted
        self.num_emitted += other.num_emitted
        for i in range(min(len(self.drafted_per_position), len(other.drafted_per_position))):
            self.drafted_per_position[i] += other.drafted_per_position[i]
            self.accepted_per_position[i] += other.accepted_per_position[i]

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted / self.num_drafted if self.num_drafted else None

    @property
    def acceptance_per_position(self) -> list:
        return [
            a / d if d else None
            for a, d in zip(self.accepted_per_position, self.drafted_per_position)
        ]

    @property
    def mean_accepted_length(self) -> float | None:
        return self.num_emitted / self.num_steps if self.num_steps else None

    def summary(self) -> str:
        """One line: mean accepted length, acceptance, per-position acceptance."""
        if not self.num_steps:
            return "speculative: no decode step"
        pos = " ".join("-" if p is None else f"{p:.2f}" for p in self.acceptance_per_position)
        rate = self.acceptance_rate
        return (
            f"mean accepted length {self.mean_accepted_length:.2f} tokens/step over {self.num_steps} steps, "
            f"accepted {self.num_accepted}/{self.num_drafted} drafts"
            f" ({0.0 if rate is None else rate:.1%}), per position [{pos}]"
        )

    @classmethod
    def total(cls, outputs) -> SpeculativeMetrics | None:
        """Sum over `RequestOutput`s (or RequestMetrics); None when none has speculative metrics."""
        parts = [getattr(o, "metrics", o).spec for o in outputs]
        parts = [p for p in parts if p is not None]
        if not parts:
            return None
        out = cls(max(p.num_speculative_tokens for p in parts))
        for p in parts:
            out.add(p)
        return out


@dataclass
class RequestMetrics:
    """Timings (``time.perf_counter`` seconds) and counts of one request.

    ``ttft`` (time to first token) and ``tokens_per_s`` (generated tokens over the time from the
    first scheduled step to the end) are derived. ``num_preemptions`` counts how often the request
    lost its KV blocks and was re-prefilled; ``num_steps`` the engine steps it took part in.
    ``spec``: the request's `SpeculativeMetrics` under speculative decoding, else None.
    ``num_cached_tokens``: prompt tokens whose K/V the prefix cache supplied when the request was
    first scheduled (vLLM's ``num_cached_tokens``; OpenAI's ``cached_tokens``).
    """

    arrival_time: float = 0.0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    num_steps: int = 0
    num_cached_tokens: int = 0
    spec: SpeculativeMetrics | None = None

    @property
    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def tokens_per_s(self) -> float | None:
        if (
            self.finished_time is None
            or self.first_scheduled_time is None
            or self.num_generated_tokens == 0
        ):
            return None
        elapsed = self.finished_time - self.first_scheduled_time
        return self.num_generated_tokens / elapsed if elapsed > 0 else None


@dataclass
class Request:
    """A request inside the engine (host-side truth; the runner's buffers mirror its slot).

    ``num_computed`` counts the tokens of ``prompt_token_ids + output_token_ids`` whose K/V are in
    the cache. Once its last prefill chunk ran (``prefilled``), it decodes: ``num_computed ==
    num_tokens - 1`` and the last token is fed; before that it is (re-)prefilling in chunks (a
    final chunk of one token looks like a decode by the counts alone).
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    seed: int
    arrival_index: int
    prompt: str | None = None
    output_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    slot: int = -1
    block_ids: list[int] = field(default_factory=list)
    num_computed: int = 0
    prefilled: bool = False  # the last (re-)prefill chunk ran: the request decodes
    finish_reason: str | None = None
    text: str = ""
    text_sent: int = 0  # characters of ``text`` already streamed
    tokens_sent: int = 0  # output tokens already streamed
    stop_text_len: int | None = None  # text cut here by a stop string
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    detokenizer: object = field(default=None, repr=False)  # the engine's IncrementalDetokenizer
    #: one ``{token id: Logprob}`` per output token when ``sampling_params.logprobs`` is set
    logprobs: list | None = None
    #: ``sampling_params.prompt_logprobs``: None, then one entry per prompt token after it
    prompt_logprobs: list | None = None
    #: prefix cache: the keys of the request's leading full blocks (`block_manager.block_keys`),
    #: how many of its leading blocks are in the cache (hits and registered), the tokens the
    #: cache supplied at its last admission, and whether its blocks may enter the cache at all
    block_keys: list = field(default_factory=list, repr=False)
    num_cached_blocks: int = 0
    num_cached_tokens: int = 0
    cacheable: bool = True

    def __post_init__(self):
        if self.logprobs is None and self.sampling_params.logprobs is not None:
            self.logprobs = []
        if self.prompt_logprobs is None and self.sampling_params.prompt_logprobs is not None:
            self.prompt_logprobs = [None] * len(self.prompt_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED


@dataclass
class StreamDelta:
    """New tokens of one request from one engine step (what a streaming caller receives).

    ``index`` is the position of the prompt in the ``generate`` call (-1 for ``add_request``
    users); ``new_token_ids`` / ``new_text`` are only what this step added; ``finished`` is True
    exactly once per request, on its last delta (which may carry no tokens, e.g. an error).
    """

    request_id: str
    index: int
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None = None
    error: str | None = None


@dataclass
class RequestOutput:
    """The result of one prompt.

    Attributes:
        request_id, prompt (None for token-id prompts), prompt_token_ids.
        token_ids: every generated token, including a final EOS / stop token id.
        text: the decoded generated text (without the EOS token; cut before a stop string unless
            ``include_stop_str_in_output``); "" without a tokenizer.
        finish_reason: "stop" (EOS, stop token id or stop string), "length" (max_tokens or
            max_model_len), "error" (the request was rejected: see ``error``), or "aborted".
        error: the message of a rejected request, else None.
        metrics: a `RequestMetrics`.
        logprobs: None unless ``SamplingParams.logprobs`` was set; then one dict per entry of
            ``token_ids``, ``{token id: Logprob}``, holding the ``logprobs`` most likely tokens
            and the generated token (``logprobs + 1`` entries, or fewer when the generated
            token is among the most likely), as vLLM.
        prompt_logprobs: None unless ``SamplingParams.prompt_logprobs`` was set; then one entry
            per prompt token, None for the first, then dicts as in ``logprobs`` (vLLM's).
    """

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finished: bool
    finish_reason: str | None
    error: str | None = None
    metrics: RequestMetrics = field(default_factory=RequestMetrics)
    logprobs: list | None = None
    prompt_logprobs: list | None = None

    @classmethod
    def from_request(cls, req: Request) -> RequestOutput:
        return cls(
            req.request_id,
            req.prompt,
            list(req.prompt_token_ids),
            list(req.output_token_ids),
            req.text,
            req.finished,
            req.finish_reason,
            None,
            req.metrics,
            None if req.logprobs is None else list(req.logprobs),
            None if req.prompt_logprobs is None else list(req.prompt_logprobs),
        )

    @classmethod
    def rejected(cls, request_id: str, prompt, prompt_token_ids, error: str) -> RequestOutput:
        now = time.perf_counter()
        return cls(
            request_id,
            prompt if isinstance(prompt, str) else None,
            list(prompt_token_ids or []),
            [],
            "",
            True,
            "error",
            error,
            RequestMetrics(arrival_time=now, finished_time=now),
        )


def with_decoded_tokens(entry: dict, tokenizer) -> dict:
    """``entry`` (``{token id: Logprob}``) with each Logprob's ``decoded_token`` set to the
    token's text (``tokenizer.decode([id])``); unchanged without a tokenizer."""
    if tokenizer is None:
        return entry
    return {t: Logprob(lp.logprob, lp.rank, tokenizer.decode([t])) for t, lp in entry.items()}
