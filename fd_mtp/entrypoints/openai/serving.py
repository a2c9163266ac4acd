"""The handlers behind ``/v1/completions``, ``/v1/chat/completions``, ``/tokenize`` and
``/detokenize``: request -> `SamplingParams` and prompts -> `AsyncLLM` -> an OpenAI response (JSON)
or server-sent events.

Responses follow OpenAI's shapes:

* ``logprobs`` (completions, an int k in [0, 20]): ``{tokens, token_logprobs, top_logprobs,
  text_offset}``, ``top_logprobs[i]`` the k most likely tokens and the sampled one as
  ``{text: logprob}``; chat (``logprobs: true``, ``top_logprobs`` k): ``{"content": [{token,
  logprob, bytes, top_logprobs: [{token, logprob, bytes}] (the k most likely)}]}``. Values are
  the engine's (``log_softmax`` of the raw logits, `fd_mtp.SamplingParams.logprobs`), -inf as
  -9999.0; a token's text is the token decoded alone, ``text_offset`` the running sum of their
  lengths. Streamed chunks carry the logprobs of their own tokens;
* ``n`` > 1: n samples of every prompt (`sample_params`: seed ``s + j`` for sample j when the
  request has a seed), choice ``index`` = prompt position * n + j; ``usage`` counts each prompt's
  tokens once and every choice's generated tokens;

additions:

* every choice of a speculative server carries ``speculate_metrics`` (FastDeploy's name; on the
  last chunk of its stream): ``num_drafts`` (decode steps), ``num_draft_tokens``,
  ``num_accepted_tokens``, ``accepted_tokens_per_position``, ``draft_tokens_per_position``,
  ``acceptance_per_position``, ``acceptance_rate``, ``mean_accepted_length`` (tokens per decode
  step, bonus token included); the response (or its usage chunk) carries their sum as
  ``metrics.speculative_decoding`` (vLLM's name);
* with ``return_token_ids``: each choice / chunk has ``token_ids`` (the generated ids, or this
  chunk's), the response's choices also ``prompt_token_ids``.

A stream is ``data: {chunk}`` events and a final ``data: [DONE]``; with
``stream_options.include_usage`` the last chunk before it has ``"choices": []`` and ``usage``;
with ``stream_options.continuous_usage_stats`` every chunk carries the usage so far. A request
that `AsyncLLM.abort_all` ends (the server's ``--shutdown-timeout``) gets one error event
``data: {"error": {..., "code": "server_shutdown"}}``, then each choice's last chunk with
``finish_reason: "abort"`` (vLLM's reason), then ``[DONE]``; non-streaming, a 503; one log line
per HTTP request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...engine.request import SpeculativeMetrics
from ...engine.sampling_params import SEED_MODULUS, SamplingParams
from ..async_llm import AsyncLLM, EngineDeadError, QueueFullError, encode_prompt
from .chat_template import ChatTemplate
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    error_body,
)

logger = logging.getLogger("fd_mtp.serve")

#: how often a non-streaming request checks whether its client went away (seconds)
DISCONNECT_POLL_S = 0.1


class _EventStream(StreamingResponse):
    """Server-sent events of some `RequestStream`s, which are closed (their requests aborted
    unless finished) however the response ends: also when the client went away before the first
    event was written (the body generator then never started, so its own cleanup cannot run)."""

    def __init__(self, content, streams):
        super().__init__(content, media_type="text/event-stream")
        self._streams = streams

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:
            for s in self._streams:
                s.close()


class RequestError(Exception):
    """A request the server refuses: HTTP ``status``, OpenAI error ``type``, the field (``param``),
    a ``code`` and extra response ``headers`` (``Retry-After`` of a 503)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = (
            message,
            param,
            status,
            type,
            code,
        )
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse(
            error_body(self.message, type=self.type, param=self.param, code=self.code),
            status_code=self.status,
            headers=self.headers,
        )


def spec_dict(m: SpeculativeMetrics | None) -> dict | None:
    """The JSON form of a request's (or a sum of) `SpeculativeMetrics`; None without one."""
    if m is None:
        return None
    return {
        "num_drafts": m.num_steps,
        "num_draft_tokens": m.num_drafted,
        "num_accepted_tokens": m.num_accepted,
        "accepted_tokens_per_position": list(m.accepted_per_position),
        "draft_tokens_per_position": list(m.drafted_per_position),
        "acceptance_per_position": m.acceptance_per_position,
        "acceptance_rate": m.acceptance_rate,
        "mean_accepted_length": m.mean_accepted_length,
    }


def sampling_params(
    body,
    max_tokens: int,
    max_tokens_name: str = "max_tokens",
    logprobs: int | None = None,
    logprobs_name: str = "logprobs",
) -> SamplingParams:
    """`SamplingParams` of a request body; RequestError naming the field when a value is out of
    range (SamplingParams' own checks)."""
    try:
        return SamplingParams(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=0 if body.top_k == -1 else body.top_k,
            max_tokens=max_tokens,
            min_tokens=body.min_tokens,
            stop=body.stop,
            stop_token_ids=body.stop_token_ids,
            ignore_eos=body.ignore_eos,
            repetition_penalty=body.repetition_penalty,
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
            seed=body.seed,
            include_stop_str_in_output=body.include_stop_str_in_output,
            skip_special_tokens=body.skip_special_tokens,
            logprobs=logprobs,
        )
    except ValueError as exc:
        msg = str(exc)
        m = re.match(r"SamplingParams\.(\w+) (.*)", msg, re.S)
        if m is None:
            raise RequestError(msg) from None
        param = {"max_tokens": max_tokens_name, "logprobs": logprobs_name}.get(
            m.group(1), m.group(1)
        )
        raise RequestError(f"{param} {m.group(2)}", param=param, code="invalid_value") from None


def sample_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The `SamplingParams` of the ``n`` samples of one prompt: with a seed ``s``, sample j draws
    with seed ``(s + j) mod 2**63 - 2`` (vLLM's derivation), so a seeded ``n > 1`` request is
    reproducible and its sample j equals a request with ``n = 1`` and seed ``s + j``; without a
    seed each sample gets the engine's own (a different one per request)."""
    if params.seed is None:
        return [params] * n
    return [dataclasses.replace(params, seed=(params.seed + j) % SEED_MODULUS) for j in range(n)]


def _refuse_unsupported(body, fields: dict) -> None:
    """400 for fields the engine does not support yet: ``fields`` maps a name to whether the body
    uses it."""
    for name, used in fields.items():
        if used:
            raise RequestError(
                f"{name} is not supported by this server yet (the engine has no {name} support)",
                param=name,
                code="unsupported_parameter",
            )


def _finite(x: float) -> float:
    """A log-probability JSON can carry: -inf as OpenAI's -9999.0."""
    return max(float(x), -9999.0)


def _token_text(token_id: int, lp) -> str:
    """A token's text in logprobs: the engine's ``decoded_token`` (the token decoded alone), or
    ``token_id:N`` without a tokenizer (vLLM's spelling)."""
    return lp.decoded_token if lp.decoded_token is not None else f"token_id:{token_id}"


def _by_rank(entry: dict) -> list:
    return sorted(entry.items(), key=lambda kv: kv[1].rank)


def completion_logprobs(token_ids, entries, offset: int) -> tuple[dict, int]:
    """OpenAI's completions ``logprobs`` of some tokens: ``tokens`` (each token's text),
    ``token_logprobs``, ``top_logprobs`` (per token ``{text: logprob}``: the ``logprobs`` most
    likely tokens and the sampled one, most likely first) and ``text_offset`` (where each token's
    text starts, counting from ``offset``: the sum of the previous tokens' lengths). Returns the
    dict and the offset after the last token."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for tid, entry in zip(token_ids, entries):
        lp = entry[tid]
        text = _token_text(tid, lp)
        tokens.append(text)
        token_lps.append(_finite(lp.logprob))
        tops.append({_token_text(t, v): _finite(v.logprob) for t, v in _by_rank(entry)})
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }, offset


def chat_logprobs(token_ids, entries, top: int) -> dict:
    """OpenAI's chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``,
    ``bytes`` the UTF-8 bytes of the token's text, ``top_logprobs`` the ``top`` most likely tokens
    (most likely first)."""

    def item(tid, lp):
        text = _token_text(tid, lp)
        return {"token": text, "logprob": _finite(lp.logprob), "bytes": list(text.encode())}

    content = []
    for tid, entry in zip(token_ids, entries):
        c = item(tid, entry[tid])
        c["top_logprobs"] = [item(t, v) for t, v in _by_rank(entry)[:top]]
        content.append(c)
    return {"content": content}


class OpenAIServing:
    """Completions, chat completions, tokenize and detokenize over an `AsyncLLM`.

    Args:
        front: the running `AsyncLLM` (its tokenizer and thread pool do the prompt work).
        model_name: the served model name (``/v1/models``; requests naming another get a 400).
        metrics: the server's `ServerMetrics` (counts rejected requests), or None.
        chat_template: the `ChatTemplate` of chat prompts (default: the default template).
    """

    def __init__(
        self,
        front: AsyncLLM,
        model_name: str,
        metrics=None,
        chat_template: ChatTemplate | None = None,
    ):
        self.front = front
        self.model_name = model_name
        self.metrics = metrics
        self.chat_template = chat_template if chat_template is not None else ChatTemplate(None)
        self.tokenizer = front.tokenizer
        self.speculative = front.engine.spec_metrics is not None

    # -- shared -------------------------------------------------------------------------------------
    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise RequestError(
                f"model {model!r} does not exist; this server serves {self.model_name!r}",
                param="model",
                code="model_not_found",
            )

    def _check_common(self, body) -> None:
        self._check_model(body.model)
        if body.n < 1:
            raise RequestError(f"n must be >= 1, got {body.n}", param="n", code="invalid_value")
        if body.stream_options is not None and not body.stream:
            raise RequestError(
                "stream_options is only allowed with stream: true",
                param="stream_options",
                code="invalid_value",
            )
        fmt = body.response_format
        if fmt is not None and fmt.type != "text":
            raise RequestError(
                f"response_format type {fmt.type!r} is not supported: this server has no "
                "structured output (guided decoding); only {'type': 'text'} is served",
                param="response_format",
                code="unsupported_parameter",
            )
        _refuse_unsupported(body, {"logit_bias": bool(body.logit_bias)})

    def _need_tokenizer(self, param: str, what: str) -> None:
        if self.tokenizer is None:
            raise RequestError(
                f"{what} needs a tokenizer, and this checkpoint has none", param=param
            )

    def _check_capacity(self, num_prompts: int, n: int, prompt_param: str) -> None:
        """RequestError when ``n`` samples of ``num_prompts`` prompts cannot be admitted: never
        (more than ``max_num_seqs + max_waiting_requests``: 400 naming ``prompt_param`` when the
        prompts alone are too many, else ``n``) or not now (503 with Retry-After)."""
        try:
            self.front.check_capacity(num_prompts * n)
        except QueueFullError as exc:
            raise self._queue_full(exc) from None
        except ValueError as exc:
            limit = self.front.max_num_seqs + self.front.max_waiting_requests
            param = prompt_param if num_prompts > limit else "n"
            raise RequestError(f"{param}: {exc}", param=param, code="too_many_requests") from None

    def _queue_full(self, exc: QueueFullError) -> RequestError:
        """The 503 of a full queue, with ``Retry-After`` (`QueueFullError.retry_after`)."""
        self._count_rejected("queue_full")
        return RequestError(
            str(exc),
            status=503,
            type="service_unavailable",
            code="queue_full",
            headers={"Retry-After": str(exc.retry_after)},
        )

    async def _start(self, prompts, params, n: int, rid: str, prompt_param: str):
        """Queue ``n`` samples of each prompt (engine request ``{rid}-{i * n + j}``: prompt i,
        sample j; text prompts are tokenized in the front's thread pool); RequestError as
        `_check_capacity`, for a dead engine (503) or a prompt the engine refuses (400 naming
        ``prompt_param`` / ``max_tokens``)."""
        # before tokenizing: a request the queue cannot take costs no tokenizer time
        self._check_capacity(len(prompts), n, prompt_param)
        per_sample = sample_params(params, n)
        requests = [
            (f"{rid}-{i * n + j}", p, per_sample[j])
            for i, p in enumerate(prompts)
            for j in range(n)
        ]
        try:
            return await self.front.add_requests(requests)
        except QueueFullError as exc:  # the places went while the prompts were tokenized
            raise self._queue_full(exc) from None
        except EngineDeadError as exc:
            raise RequestError(
                str(exc), status=503, type="service_unavailable", code="engine_unavailable"
            ) from None
        except ValueError as exc:
            msg = str(exc)
            index = getattr(exc, "index", None) or 0
            param = "max_tokens" if "KV blocks" in msg else prompt_param
            if len(prompts) > 1 and param == prompt_param and prompt_param == "prompt":
                param = f"prompt.{index // n}"
            raise RequestError(f"{param}: {msg}", param=param) from None

    def _count_rejected(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.rejected_request(reason)

    async def _collect(self, streams, raw: Request):
        """Every stream's last event, in order; None when the client disconnected first (the
        requests are then aborted)."""

        async def gather():
            last_events = []
            for s in streams:
                last = None
                async for ev in s:
                    last = ev
                last_events.append(last)
            return last_events

        task = asyncio.create_task(gather())
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
                if done:
                    return task.result()
                if await raw.is_disconnected():
                    return None
        finally:
            if not task.done():
                task.cancel()
            for s in streams:
                s.close()

    def _aborted(self, rid: str, events, how: str) -> RequestError | None:
        """The 503 of a request `AsyncLLM.abort_all` ended (one log line), or None."""
        errors = [ev.error for ev in events if ev is not None and ev.error is not None]
        if not errors:
            return None
        logger.warning("aborted request %s (%s): %s", rid, how, errors[0])
        return RequestError(
            errors[0], status=503, type="service_unavailable", code="server_shutdown"
        )

    @staticmethod
    async def _merge(streams):
        """``(index, RequestEvent)`` of several streams as they come (each stream in order)."""
        if len(streams) == 1:
            async for ev in streams[0]:
                yield 0, ev
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i, s):
            try:
                async for ev in s:
                    queue.put_nowait((i, ev))
            except Exception as exc:  # EngineDeadError: surfaced to the reader
                queue.put_nowait((i, exc))
            finally:
                queue.put_nowait((i, None))

        tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
        try:
            done = 0
            while done < len(streams):
                i, ev = await queue.get()
                if ev is None:
                    done += 1
                elif isinstance(ev, Exception):
                    raise ev
                else:
                    yield i, ev
        finally:
            for t in tasks:
                t.cancel()
            for s in streams:
                s.close()

    @staticmethod
    def _usage(outputs, n: int) -> dict:
        """Usage of ``n`` choices per prompt: each prompt's tokens count once, every choice's
        generated tokens count; ``prompt_tokens_details.cached_tokens`` (OpenAI's field): the
        prompt tokens the prefix cache served to each prompt's first sample (the others share
        what it computed)."""
        first = [o for o in outputs[::n] if o is not None]
        p = sum(len(o.prompt_token_ids) for o in first)
        c = sum(len(o.token_ids) for o in outputs if o is not None)
        cached = sum(o.metrics.num_cached_tokens for o in first)
        return {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def _metrics_field(self, outputs) -> dict | None:
        if not self.speculative:
            return None
        outputs = [o for o in outputs if o is not None]
        return {"speculative_decoding": spec_dict(SpeculativeMetrics.total(outputs))}

    @staticmethod
    def _sse(obj) -> str:
        return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"

    async def _stream(self, streams, make_chunk, head, options, n: int, first=None):
        """SSE over merged streams: ``first`` chunks (if any), one chunk per event
        (``make_chunk(index, event)``), the usage chunk (``stream_options.include_usage``),
        ``[DONE]``. With ``continuous_usage_stats`` every chunk carries the usage so far. A
        request ended by `AsyncLLM.abort_all` gets one error event, then its last chunk
        (``finish_reason`` "abort"), then ``[DONE]`` (and one log line)."""
        include = options is not None and options.include_usage
        continuous = options is not None and options.continuous_usage_stats
        outputs: dict[int, object] = {}
        prompt_tokens = sum(s.num_prompt_tokens for s in streams[::n])
        generated = 0
        error_sent = False

        def usage():
            return {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": generated,
                "total_tokens": prompt_tokens + generated,
            }

        try:
            for chunk in first or ():
                if continuous:
                    chunk = {**chunk, "usage": usage()}
                yield self._sse(chunk)
            async for i, ev in self._merge(streams):
                generated += len(ev.token_ids)
                if ev.error is not None and not error_sent:
                    error_sent = True
                    logger.warning("aborted request %s (stream): %s", head["id"], ev.error)
                    yield self._sse(
                        error_body(ev.error, type="service_unavailable", code="server_shutdown")
                    )
                chunk = make_chunk(i, ev)
                if continuous:
                    chunk["usage"] = usage()
                yield self._sse(chunk)
                if ev.finished:
                    outputs[i] = ev.output
            if include:
                outs = [outputs.get(i) for i in range(len(streams))]
                chunk = {**head, "choices": [], "usage": self._usage(outs, n)}
                metrics = self._metrics_field(outs)
                if metrics is not None:
                    chunk["metrics"] = metrics
                yield self._sse(chunk)
        except EngineDeadError as exc:
            yield self._sse(error_body(str(exc), type="server_error", code="engine_unavailable"))
        yield "data: [DONE]\n\n"

    def _choice_extras(self, choice: dict, ev_or_out, body, final: bool) -> dict:
        if body.return_token_ids:
            choice["token_ids"] = list(getattr(ev_or_out, "token_ids"))
        if final and self.speculative:
            out = ev_or_out.output if hasattr(ev_or_out, "output") else ev_or_out
            choice["speculate_metrics"] = spec_dict(out.metrics.spec if out else None)
        return choice

    # -- /v1/completions ----------------------------------------------------------------------------
    async def completions(self, body: CompletionRequest, raw: Request) -> Response:
        self._check_common(body)
        if body.echo:
            raise RequestError(
                "echo is not supported yet: echo returns the prompt with the completion and, with "
                "logprobs, the log-probabilities of the prompt tokens, which the engine does not "
                "compute (it has log-probabilities of generated tokens only)",
                param="echo",
                code="unsupported_parameter",
            )
        _refuse_unsupported(
            body,
            {"suffix": body.suffix is not None, "best_of": body.best_of not in (None, 1)},
        )
        prompt = body.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            prompts = [prompt]
        else:
            prompts = list(prompt)
        if not prompts:
            raise RequestError("prompt: the prompt list is empty", param="prompt")
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        params = sampling_params(body, max_tokens, logprobs=body.logprobs)
        n = body.n
        rid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        streams = await self._start(prompts, params, n, rid, "prompt")
        head = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": self.model_name,
        }

        if body.stream:
            offsets = [0] * len(streams)

            def chunk(i, ev):
                c = {"index": i, "text": ev.text, "logprobs": None, "finish_reason": None}
                if ev.logprobs is not None and ev.token_ids:
                    c["logprobs"], offsets[i] = completion_logprobs(
                        ev.token_ids, ev.logprobs, offsets[i]
                    )
                if ev.finished:
                    c["finish_reason"] = ev.finish_reason
                return {**head, "choices": [self._choice_extras(c, ev, body, ev.finished)]}

            return _EventStream(self._stream(streams, chunk, head, body.stream_options, n), streams)

        events = await self._collect(streams, raw)
        if events is None:
            return Response(status_code=499)
        aborted = self._aborted(rid, events, "non-streaming")
        if aborted is not None:
            return aborted.response()
        outputs = [ev.output for ev in events]
        choices = []
        for i, o in enumerate(outputs):
            c = {"index": i, "text": o.text, "logprobs": None, "finish_reason": o.finish_reason}
            if o.logprobs is not None:
                c["logprobs"], _ = completion_logprobs(o.token_ids, o.logprobs, 0)
            if body.return_token_ids:
                c["prompt_token_ids"] = list(o.prompt_token_ids)
            choices.append(self._choice_extras(c, o, body, True))
        resp = {**head, "choices": choices, "usage": self._usage(outputs, n)}
        metrics = self._metrics_field(outputs)
        if metrics is not None:
            resp["metrics"] = metrics
        return JSONResponse(resp)

    # -- /v1/chat/completions -----------------------------------------------------------------------
    def _messages(self, messages) -> list[dict]:
        """The messages as the template sees them; RequestError for a tool message without
        ``tool_call_id``."""
        out = []
        for i, m in enumerate(messages):
            content = m.content
            if content is None:
                content = ""
            elif not isinstance(content, str):
                content = "".join(part.text for part in content)
            if m.role == "tool" and m.tool_call_id is None:
                raise RequestError(
                    f"messages.{i}.tool_call_id is required for a message with role 'tool'",
                    param=f"messages.{i}.tool_call_id",
                    code="missing_field",
                )
            d = {"role": m.role, "content": content}
            for key in ("name", "tool_call_id", "tool_calls"):
                if getattr(m, key) is not None:
                    d[key] = getattr(m, key)
            out.append(d)
        return out

    def chat_prompt(self, body, add_generation_prompt: bool = True) -> str:
        """The prompt text of the messages under the server's `ChatTemplate` (the checkpoint's,
        ``--chat-template``, or the default); RequestError when the template fails on them."""
        self._need_tokenizer("messages", "chat completions (use /v1/completions with token ids)")
        try:
            return self.chat_template.render(self._messages(body.messages), add_generation_prompt)
        except ValueError as exc:
            raise RequestError(f"messages: {exc}", param="messages") from None

    def _chat_ids(self, body) -> list[int]:
        """Render and tokenize (the front's thread pool); RequestError naming ``messages``."""
        prompt = self.chat_prompt(body)
        try:
            return encode_prompt(self.tokenizer, prompt)
        except ValueError as exc:
            raise RequestError(f"messages: {exc}", param="messages") from None

    async def chat(self, body: ChatCompletionRequest, raw: Request) -> Response:
        self._check_common(body)
        _refuse_unsupported(
            body,
            {
                "tools": bool(body.tools),
                "tool_choice": body.tool_choice not in (None, "none"),
            },
        )
        if body.top_logprobs not in (None, 0) and not body.logprobs:
            raise RequestError(
                "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value"
            )
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            raise RequestError(
                "give max_tokens or max_completion_tokens, not both", param="max_tokens"
            )
        name = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        max_tokens = body.max_completion_tokens if name != "max_tokens" else body.max_tokens
        top = body.top_logprobs or 0
        # default: as many as max_model_len allows (the engine stops there with "length")
        params = sampling_params(
            body,
            self.front.max_model_len if max_tokens is None else max_tokens,
            name,
            logprobs=top if body.logprobs else None,
            logprobs_name="top_logprobs",
        )
        self._messages(body.messages)  # a tool message without tool_call_id: 400 before queueing
        n = body.n
        # capacity first (a full queue costs no template or tokenizer work), then the prompt off
        # the event loop and the engine thread
        self._check_capacity(1, n, "messages")
        prompt = await self.front.offload(self._chat_ids, body)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        streams = await self._start([prompt], params, n, rid, "messages")
        head = {
            "id": rid,
            "object": "chat.completion.chunk" if body.stream else "chat.completion",
            "created": created,
            "model": self.model_name,
        }

        if body.stream:

            def chunk(i, ev):
                c = {
                    "index": i,
                    "delta": {"content": ev.text},
                    "logprobs": None,
                    "finish_reason": ev.finish_reason if ev.finished else None,
                }
                if ev.logprobs is not None and ev.token_ids:
                    c["logprobs"] = chat_logprobs(ev.token_ids, ev.logprobs, top)
                return {**head, "choices": [self._choice_extras(c, ev, body, ev.finished)]}

            first = {
                **head,
                "choices": [
                    {
                        "index": j,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                    for j in range(n)
                ],
            }
            return _EventStream(
                self._stream(streams, chunk, head, body.stream_options, n, first=[first]),
                streams,
            )

        events = await self._collect(streams, raw)
        if events is None:
            return Response(status_code=499)
        aborted = self._aborted(rid, events, "non-streaming")
        if aborted is not None:
            return aborted.response()
        outputs = [ev.output for ev in events]
        choices = []
        for j, o in enumerate(outputs):
            c = {
                "index": j,
                "message": {"role": "assistant", "content": o.text},
                "logprobs": None,
                "finish_reason": o.finish_reason,
            }
            if o.logprobs is not None:
                c["logprobs"] = chat_logprobs(o.token_ids, o.logprobs, top)
            if body.return_token_ids:
                c["prompt_token_ids"] = list(o.prompt_token_ids)
            choices.append(self._choice_extras(c, o, body, True))
        resp = {**head, "choices": choices, "usage": self._usage(outputs, n)}
        metrics = self._metrics_field(outputs)
        if metrics is not None:
            resp["metrics"] = metrics
        return JSONResponse(resp)

    # -- /tokenize, /detokenize ---------------------------------------------------------------------
    async def tokenize(self, body) -> dict:
        """vLLM's ``/tokenize``: ``{count, max_model_len, tokens}`` of a prompt (``prompt``) or
        of chat messages under the chat template (``messages``), in the front's thread pool.
        ``add_special_tokens`` as vLLM (default True for a prompt, False for messages)."""
        self._check_model(body.model)
        chat = isinstance(body, TokenizeChatRequest)
        param = "messages" if chat else "prompt"
        self._need_tokenizer(param, "/tokenize")

        def work():
            text = self.chat_prompt(body, body.add_generation_prompt) if chat else body.prompt
            try:
                return encode_prompt(self.tokenizer, text, body.add_special_tokens)
            except ValueError as exc:
                raise RequestError(f"{param}: {exc}", param=param) from None

        ids = await self.front.offload(work)
        return {"count": len(ids), "max_model_len": self.front.max_model_len, "tokens": ids}

    async def detokenize(self, body: DetokenizeRequest) -> dict:
        """vLLM's ``/detokenize``: ``{"prompt": text}`` of ``tokens``, special tokens written
        out (``skip_special_tokens=False``, so that ``/tokenize`` of the text gives the ids back
        where the tokenizer round-trips)."""
        self._check_model(body.model)
        self._need_tokenizer("tokens", "/detokenize")
        vocab = self.front.vocab_size
        for i, t in enumerate(body.tokens):
            if t < 0 or (vocab is not None and t >= vocab):
                bound = f"[0, {vocab})" if vocab is not None else ">= 0"
                raise RequestError(
                    f"tokens.{i}: token id {t} is outside the vocabulary {bound}",
                    param=f"tokens.{i}",
                    code="invalid_value",
                )
        text = await self.front.offload(
            lambda: self.tokenizer.decode(body.tokens, skip_special_tokens=False)
        )
        return {"prompt": text}
