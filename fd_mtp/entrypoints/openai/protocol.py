"""Request bodies of the OpenAI-compatible API (pydantic models; ``extra="forbid"``, strict types)
and the OpenAI error body.

Strict: a JSON string where a number is expected (``"max_tokens": "5"``) is a 400 naming the field,
as is a field the API does not define (``"max_tokenz"``). Ranges (``max_tokens >= 1``, ``top_p``
in (0, 1], penalties in [-2, 2], ``logprobs`` / ``top_logprobs`` in [0, 20], ...) are checked by
`fd_mtp.SamplingParams`, whose error names the field too. Fields of OpenAI's API that the engine
does not support yet are accepted by the schema and refused by the server with a 400 that says so
(``echo``, ``suffix``, ``logit_bias``, ``best_of > 1``, tools, structured output).

Accepted and ignored (OpenAI / vLLM fields that change nothing here): ``user``, ``store`` (nothing
is stored), ``metadata`` (kept only with ``store`` by OpenAI), ``service_tier`` (one tier),
``parallel_tool_calls`` (no tool calls). ``response_format`` ``{"type": "text"}`` is the default
plain text; ``json_object`` / ``json_schema`` / ``structural_tag`` are refused (no structured
output). Chat messages may have role ``tool`` (with ``tool_call_id``) and assistant messages
``tool_calls``: the chat template renders them.

Beyond OpenAI's fields, vLLM's sampling extras: ``top_k`` (0 or -1: off), ``min_tokens``,
``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``, ``include_stop_str_in_output``,
``skip_special_tokens``, and ``return_token_ids`` (each choice / chunk also carries its generated
``token_ids``; the response carries ``prompt_token_ids``). vLLM's ``/tokenize`` and
``/detokenize`` bodies (`TokenizeCompletionRequest`, `TokenizeChatRequest`, `DetokenizeRequest`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    """``include_usage``: a last chunk with ``"choices": []`` and the usage;
    ``continuous_usage_stats`` (vLLM): every chunk carries the usage so far."""

    include_usage: bool = False
    continuous_usage_stats: bool = False


class ResponseFormat(BaseModel):
    """``response_format``: only ``{"type": "text"}`` is served (the others' schemas are
    accepted as given and refused by the server)."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: Literal["text", "json_object", "json_schema", "structural_tag"]


class _Sampling(_Strict):
    """Fields shared by completions and chat completions."""

    model: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    response_format: ResponseFormat | None = None
    # accepted, ignored
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    # vLLM's extras
    top_k: int = 0
    min_tokens: int = 0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool = False


class CompletionRequest(_Sampling):
    """``POST /v1/completions``. ``prompt``: a string, a list of token ids, or a list of either
    (``n`` choices per prompt, ``index`` = prompt position * n + sample number)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = 16
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    """One message. ``tool_call_id``: the call a ``tool`` message answers (required there);
    ``tool_calls``: the calls an ``assistant`` message made (passed to the template as given)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict] | None = None


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``. ``max_tokens`` / ``max_completion_tokens`` default to what
    fits in ``max_model_len``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None


class TokenizeCompletionRequest(_Strict):
    """``POST /tokenize`` of a text (vLLM's): ``{count, max_model_len, tokens}``."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeChatRequest(_Strict):
    """``POST /tokenize`` of chat messages (vLLM's): the chat template's prompt, tokenized."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    add_special_tokens: bool = False


class DetokenizeRequest(_Strict):
    """``POST /detokenize`` (vLLM's): ``{"prompt": text}`` of ``tokens``."""

    model: str | None = None
    tokens: list[int]


def error_body(message: str, *, type: str = "invalid_request_error", param=None, code=None) -> dict:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}
