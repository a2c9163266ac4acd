"""Request state inside the engine, and what the engine hands back (outputs, stream deltas, metrics)."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from .sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"        # not in a slot: new, or preempted (re-prefilled from prompt + output later)
    RUNNING = "running"        # holds a slot and KV blocks
    FINISHED = "finished"


@dataclass
class RequestMetrics:
    """Timings (``time.perf_counter`` seconds) and counts of one request.

    ``ttft`` (time to first token) and ``tokens_per_s`` (generated tokens over the time from the
    first scheduled step to the end) are derived. ``num_preemptions`` counts how often the request
    lost its KV blocks and was re-prefilled; ``num_steps`` the engine steps it took part in.
    """

    arrival_time: float = 0.0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    num_steps: int = 0

    @property
    def ttft(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def tokens_per_s(self) -> float | None:
        if self.finished_time is None or self.first_scheduled_time is None or self.num_generated_tokens == 0:
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
    prefilled: bool = False         # the last (re-)prefill chunk ran: the request decodes
    finish_reason: str | None = None
    text: str = ""
    text_sent: int = 0              # characters of ``text`` already streamed
    tokens_sent: int = 0            # output tokens already streamed
    stop_text_len: int | None = None  # text cut here by a stop string
    metrics: RequestMetrics = field(default_factory=RequestMetrics)

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

    @classmethod
    def from_request(cls, req: Request) -> "RequestOutput":
        return cls(req.request_id, req.prompt, list(req.prompt_token_ids), list(req.output_token_ids), req.text,
                   req.finished, req.finish_reason, None, req.metrics)

    @classmethod
    def rejected(cls, request_id: str, prompt, prompt_token_ids, error: str) -> "RequestOutput":
        now = time.perf_counter()
        return cls(request_id, prompt if isinstance(prompt, str) else None, list(prompt_token_ids or []), [], "",
                   True, "error", error, RequestMetrics(arrival_time=now, finished_time=now))
