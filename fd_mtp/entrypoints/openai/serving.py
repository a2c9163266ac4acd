"""The handlers behind ``/v1/completions`` and ``/v1/chat/completions``: request -> `SamplingParams`
and prompts -> `AsyncLLM` -> an OpenAI response (JSON) or server-sent events.

Responses follow OpenAI's shapes; additions:

* every choice of a speculative server carries ``speculate_metrics`` (FastDeploy's name; on the
  last chunk of its stream): ``num_drafts`` (decode steps), ``num_draft_tokens``,
  ``num_accepted_tokens``, ``accepted_tokens_per_position``, ``draft_tokens_per_position``,
  ``acceptance_per_position``, ``acceptance_rate``, ``mean_accepted_length`` (tokens per decode
  step, bonus token included); the response (or its usage chunk) carries their sum as
  ``metrics.speculative_decoding`` (vLLM's name);
* with ``return_token_ids``: each choice / chunk has ``token_ids`` (the generated ids, or this
  chunk's), the response's choices also ``prompt_token_ids``.

A stream is ``data: {chunk}`` events and a final ``data: [DONE]``; with
``stream_options.include_usage`` the last chunk before it has ``"choices": []`` and ``usage``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...engine.request import SpeculativeMetrics
from ...engine.sampling_params import SamplingParams
from ..async_llm import AsyncLLM, EngineDeadError, QueueFullError
from .chat_template import ChatTemplate
from .protocol import ChatCompletionRequest, CompletionRequest, error_body

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
    """A request the server refuses: HTTP ``status``, OpenAI error ``type``, the field (``param``)
    and a ``code``."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = (
            message,
            param,
            status,
            type,
            code,
        )

    def response(self) -> JSONResponse:
        return JSONResponse(
            error_body(self.message, type=self.type, param=self.param, code=self.code),
            status_code=self.status,
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


def sampling_params(body, max_tokens: int, max_tokens_name: str = "max_tokens") -> SamplingParams:
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
        )
    except ValueError as exc:
        msg = str(exc)
        m = re.match(r"SamplingParams\.(\w+) (.*)", msg, re.S)
        if m is None:
            raise RequestError(msg) from None
        param = m.group(1)
        if param == "max_tokens":
            param = max_tokens_name
        raise RequestError(f"{param} {m.group(2)}", param=param, code="invalid_value") from None


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


class OpenAIServing:
    """Completions and chat completions over an `AsyncLLM`.

    Args:
        front: the running `AsyncLLM`.
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
        self.tokenizer = front.llm.tokenizer
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
        if body.n != 1:
            raise RequestError(
                f"n must be 1 (n > 1 is not supported by this server yet), got {body.n}",
                param="n",
                code="unsupported_parameter",
            )
        _refuse_unsupported(body, {"logit_bias": bool(body.logit_bias)})

    async def _start(self, prompts, params, rid: str, prompt_param: str):
        """Queue the prompts; RequestError for a full queue (503), a dead engine (503) or a prompt
        the engine refuses (400 naming ``prompt_param`` / ``max_tokens``)."""
        try:
            return await self.front.add_requests(
                [(f"{rid}-{i}", p, params) for i, p in enumerate(prompts)]
            )
        except QueueFullError as exc:
            self._count_rejected("queue_full")
            raise RequestError(
                str(exc), status=503, type="service_unavailable", code="queue_full"
            ) from None
        except EngineDeadError as exc:
            raise RequestError(
                str(exc), status=503, type="service_unavailable", code="engine_unavailable"
            ) from None
        except ValueError as exc:
            msg = str(exc)
            param = "max_tokens" if "KV blocks" in msg else prompt_param
            if len(prompts) > 1 and param == prompt_param and prompt_param == "prompt":
                param = f"prompt.{getattr(exc, 'index', 0)}"
            raise RequestError(f"{param}: {msg}", param=param) from None

    def _count_rejected(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.rejected_request(reason)

    async def _collect(self, streams, raw: Request):
        """Every stream's final output, in order; None when the client disconnected first (the
        requests are then aborted)."""

        async def gather():
            outs = []
            for s in streams:
                last = None
                async for ev in s:
                    last = ev
                outs.append(last.output)
            return outs

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
    def _usage(outputs) -> dict:
        p = sum(len(o.prompt_token_ids) for o in outputs)
        c = sum(len(o.token_ids) for o in outputs)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _metrics_field(self, outputs) -> dict | None:
        if not self.speculative:
            return None
        return {"speculative_decoding": spec_dict(SpeculativeMetrics.total(outputs))}

    @staticmethod
    def _sse(obj) -> str:
        return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"

    async def _stream(self, streams, make_chunk, head, include_usage: bool, first=None):
        """SSE over merged streams: ``first`` chunks (if any), one chunk per event
        (``make_chunk(index, event)``), the usage chunk, ``[DONE]``."""
        outputs: dict[int, object] = {}
        try:
            for chunk in first or ():
                yield self._sse(chunk)
            async for i, ev in self._merge(streams):
                yield self._sse(make_chunk(i, ev))
                if ev.finished:
                    outputs[i] = ev.output
            if include_usage:
                outs = [outputs[i] for i in sorted(outputs)]
                chunk = {**head, "choices": [], "usage": self._usage(outs)}
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
        _refuse_unsupported(
            body,
            {
                "logprobs": body.logprobs is not None,
                "echo": body.echo,
                "suffix": body.suffix is not None,
                "best_of": body.best_of not in (None, 1),
            },
        )
        prompt = body.prompt
        if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
            prompts = [prompt]
        else:
            prompts = list(prompt)
        if not prompts:
            raise RequestError("prompt: the prompt list is empty", param="prompt")
        max_tokens = 16 if body.max_tokens is None else body.max_tokens
        params = sampling_params(body, max_tokens)
        rid = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        streams = await self._start(prompts, params, rid, "prompt")
        head = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": self.model_name,
        }

        if body.stream:

            def chunk(i, ev):
                c = {"index": i, "text": ev.text, "logprobs": None, "finish_reason": None}
                if ev.finished:
                    c["finish_reason"] = ev.finish_reason
                return {**head, "choices": [self._choice_extras(c, ev, body, ev.finished)]}

            include = body.stream_options is not None and body.stream_options.include_usage
            return _EventStream(self._stream(streams, chunk, head, include), streams)

        outputs = await self._collect(streams, raw)
        if outputs is None:
            return Response(status_code=499)
        choices = []
        for i, o in enumerate(outputs):
            c = {"index": i, "text": o.text, "logprobs": None, "finish_reason": o.finish_reason}
            if body.return_token_ids:
                c["prompt_token_ids"] = list(o.prompt_token_ids)
            choices.append(self._choice_extras(c, o, body, True))
        resp = {**head, "choices": choices, "usage": self._usage(outputs)}
        metrics = self._metrics_field(outputs)
        if metrics is not None:
            resp["metrics"] = metrics
        return JSONResponse(resp)

    # -- /v1/chat/completions -----------------------------------------------------------------------
    def chat_prompt(self, body: ChatCompletionRequest) -> str:
        """The prompt text of the messages under the server's `ChatTemplate` (the checkpoint's,
        ``--chat-template``, or the default); RequestError when the template fails on them."""
        if self.tokenizer is None:
            raise RequestError(
                "chat completions need a tokenizer, and this checkpoint has none; use "
                "/v1/completions with token ids",
                param="messages",
            )
        messages = []
        for m in body.messages:
            content = m.content
            if content is None:
                content = ""
            elif not isinstance(content, str):
                content = "".join(part.text for part in content)
            messages.append((m.role, content))
        try:
            return self.chat_template.render(messages)
        except ValueError as exc:
            raise RequestError(f"messages: {exc}", param="messages") from None

    async def chat(self, body: ChatCompletionRequest, raw: Request) -> Response:
        self._check_common(body)
        _refuse_unsupported(
            body,
            {
                "logprobs": body.logprobs,
                "top_logprobs": body.top_logprobs is not None,
                "tools": bool(body.tools),
                "tool_choice": body.tool_choice not in (None, "none"),
            },
        )
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            raise RequestError(
                "give max_tokens or max_completion_tokens, not both", param="max_tokens"
            )
        name = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        max_tokens = body.max_completion_tokens if name != "max_tokens" else body.max_tokens
        # default: as many as max_model_len allows (the engine stops there with "length")
        params = sampling_params(
            body, self.front.max_model_len if max_tokens is None else max_tokens, name
        )
        prompt = self.chat_prompt(body)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        streams = await self._start([prompt], params, rid, "messages")
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
                return {**head, "choices": [self._choice_extras(c, ev, body, ev.finished)]}

            first = {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
            include = body.stream_options is not None and body.stream_options.include_usage
            return _EventStream(self._stream(streams, chunk, head, include, first=[first]), streams)

        outputs = await self._collect(streams, raw)
        if outputs is None:
            return Response(status_code=499)
        o = outputs[0]
        c = {
            "index": 0,
            "message": {"role": "assistant", "content": o.text},
            "logprobs": None,
            "finish_reason": o.finish_reason,
        }
        if body.return_token_ids:
            c["prompt_token_ids"] = list(o.prompt_token_ids)
        resp = {
            **head,
            "choices": [self._choice_extras(c, o, body, True)],
            "usage": self._usage(outputs),
        }
        metrics = self._metrics_field(outputs)
        if metrics is not None:
            resp["metrics"] = metrics
        return JSONResponse(resp)
