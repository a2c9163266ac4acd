"""The OpenAI-compatible server: FastAPI + uvicorn over `AsyncLLM` (``fd-mtp serve``).

    fd-mtp serve [--model DIR] [--port 8188] [--speculative-config '{"method": "mtp",
        "num_speculative_tokens": 3}'] [--max-num-seqs 8] [--max-model-len N] ...
    python -m fd_mtp.entrypoints.openai.api_server [same options]

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /v1/models/{id}``, ``POST /tokenize`` and ``POST /detokenize`` (vLLM's shapes),
``GET /version``, ``GET /health`` (200 while the engine thread runs, else 503), ``GET /metrics``
(Prometheus text).

Errors use OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 for invalid JSON,
wrong types, unknown fields, unknown model, out-of-range values, unsupported options, prompts the
engine refuses and batches that can never be admitted (the message and ``param`` name the
field); 404 for an unknown model id (``/v1/models/{id}``) and unknown routes, 405 for wrong
methods; 413 for a body over ``--max-request-bytes`` (by Content-Length, or counted as it
streams in); 503 with ``Retry-After`` when the waiting queue is full, 503 when the engine is down
or the server shuts down; 500 for a bug (the server keeps serving).

Prompt work (JSON body aside) never runs in the engine thread: text prompts are tokenized and chat
templates rendered in `AsyncLLM`'s thread pool, so a huge prompt does not stall running streams.

``--pd`` serves with prefill / decode disaggregation: `build_llm` starts a prefill and a decode
process (`fd_mtp.distributed.pd.PDEngineClient`) that `AsyncLLM` drives as it drives an engine;
tokens stream per decode step. A dead instance ends every in-flight stream with an error event
(the engine is then down: 503). After the drain below, both processes are stopped and reaped and
the SysV queue and the shared-memory segments removed.

SIGTERM (or Ctrl-C) drains: the listening socket closes and running requests may finish for
``--shutdown-timeout`` seconds; then every request still in flight is aborted: a stream gets an
error event (``data: {"error": {...}}``), its last chunk with ``finish_reason: "abort"`` and
``data: [DONE]``; a non-streaming request gets a 503; each is logged once (``aborted request
ID ...``). Then the engine thread stops and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..async_llm import AsyncLLM
from .chat_template import load_chat_template
from .metrics import CONTENT_TYPE, ServerMetrics
from .params import RequestError
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    error_body,
)
from .serving import OpenAIServing

logger = logging.getLogger("fd_mtp.serve")

#: the default of --max-request-bytes
MAX_REQUEST_BYTES = 8 * 1024 * 1024
#: a body over the limit is read (and dropped) up to this many bytes before the 413, so that the
#: client, still sending, reads the answer; beyond it the connection is closed after the 413
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024
#: seconds uvicorn waits for the aborted requests' responses after --shutdown-timeout before it
#: cancels their tasks (a backstop: the aborted streams end at the engine's next step)
ABORT_GRACE_S = 10.0


class BodyTooLarge(Exception):
    """A request body over ``--max-request-bytes`` (413)."""

    def __init__(self, limit: int):
        super().__init__(
            f"the request body is larger than this server's limit of {limit} bytes "
            "(--max-request-bytes)"
        )
        self.limit = limit


def _too_large(exc: BodyTooLarge) -> JSONResponse:
    return JSONResponse(
        error_body(str(exc), type="invalid_request_error", code="request_too_large"),
        status_code=413,
    )


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``max_bytes``, by its Content-Length (before
    the app runs) or counted as it streams in (a chunked body: `BodyTooLarge` raised from
    ``receive``, answered by the app's handler). The rest of the body is drained (up to
    `DRAIN_LIMIT_BYTES`) first, so the client reads the answer."""

    def __init__(self, app, max_bytes: int, metrics=None):
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_bytes
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._drain(receive, 0)
            if self.metrics is not None:
                self.metrics.rejected_request("invalid")
            return await _too_large(BodyTooLarge(limit))(scope, receive, send)
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    if message.get("more_body", False):
                        await self._drain(receive, received)
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)

    @staticmethod
    async def _drain(receive, received: int) -> None:
        while received < DRAIN_LIMIT_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            received += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


#: friendly messages for fields whose type is a union (pydantic reports one error per member)
_UNION_MESSAGES = {
    "prompt": "must be a string, a list of token ids, or a list of strings or of token-id lists",
    "stop": "must be a string or a list of strings",
    "content": "must be a string or a list of {'type': 'text', 'text': ...} parts",
}


def validation_error(exc: ValidationError | RequestValidationError) -> RequestError:
    """A 400 `RequestError` naming the (first) offending field of a pydantic error."""
    errors = exc.errors()
    if not errors:
        return RequestError("invalid request body")
    err = errors[0]
    if err["type"] == "json_invalid":
        return RequestError(f"the request body is not valid JSON: {err['msg']}", param=None)
    if err["type"] == "model_type" and not err["loc"]:
        return RequestError("the request body must be a JSON object")
    # drop union-member tags ('str', 'list[int]', ...) from the location
    path = [
        str(p)
        for p in err["loc"]
        if p != "body" and not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float")))
    ]
    param = ".".join(path) or None
    field = path[-1] if path and not path[-1].isdigit() else (path[-2] if len(path) > 1 else None)
    if err["type"] == "extra_forbidden":
        return RequestError(f"unknown field {param!r}", param=param, code="unknown_field")
    if err["type"] == "missing":
        return RequestError(f"{param} is required", param=param, code="missing_field")
    tagged = any(isinstance(p, str) and "[" in p or p in ("str",) for p in err["loc"])
    if tagged and field in _UNION_MESSAGES:
        base = ".".join(path[: path.index(field) + 1])
        return RequestError(f"{base} {_UNION_MESSAGES[field]}", param=base, code="invalid_type")
    return RequestError(f"{param}: {err['msg']}", param=param, code="invalid_type")


async def _parse(raw: Request, model):
    body = await raw.body()
    try:
        return model.model_validate_json(body or b"")
    except ValidationError as exc:
        raise validation_error(exc) from None


async def _parse_tokenize(raw: Request):
    """``/tokenize``'s body: `TokenizeChatRequest` when it has ``messages``, else
    `TokenizeCompletionRequest`."""
    body = await raw.body()
    try:
        data = json.loads(body or b"")
    except ValueError as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    model = (
        TokenizeChatRequest
        if isinstance(data, dict) and "messages" in data
        else TokenizeCompletionRequest
    )
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    """Every error as an OpenAI error body; rejected requests counted in ``metrics``."""

    @app.exception_handler(BodyTooLarge)
    async def _body_too_large(request, exc: BodyTooLarge):
        metrics.rejected_request("invalid")
        return _too_large(exc)

    @app.exception_handler(RequestError)
    async def _request_error(request, exc: RequestError):
        if exc.status == 400:
            metrics.rejected_request("invalid")
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc):
        metrics.rejected_request("invalid")
        return validation_error(exc).response()

    @app.exception_handler(HTTPException)
    async def _http(request, exc: HTTPException):
        return JSONResponse(
            error_body(str(exc.detail), type="invalid_request_error", code=str(exc.status_code)),
            status_code=exc.status_code,
        )

    @app.exception_handler(Exception)
    async def _bug(request, exc: Exception):
        logger.exception("unexpected error in %s", request.url.path)
        return JSONResponse(
            error_body(f"internal error: {type(exc).__name__}: {exc}", type="server_error"),
            status_code=500,
        )


def _add_routes(app: FastAPI, front, serving, model_name: str, metrics: ServerMetrics) -> None:
    """The endpoints: health, metrics, models, version, tokenize / detokenize, completions and
    chat completions (the last four through ``serving``)."""
    from ... import __version__

    @app.get("/health")
    async def health():
        if front.is_running:
            return Response(status_code=200)
        return JSONResponse(
            error_body("the engine is not running", type="service_unavailable"), status_code=503
        )

    @app.get("/metrics")
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    card = {
        "id": model_name,
        "object": "model",
        "created": 0,
        "owned_by": "fd_mtp",
        "max_model_len": front.max_model_len,
    }

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != model_name:
            return JSONResponse(
                error_body(
                    f"model {model_id!r} does not exist; this server serves {model_name!r}",
                    param="model",
                    code="model_not_found",
                ),
                status_code=404,
            )
        return card

    @app.get("/version")
    async def version():
        return {"version": __version__}

    @app.post("/tokenize")
    async def tokenize(raw: Request):
        return await serving.tokenize(await _parse_tokenize(raw))

    @app.post("/detokenize")
    async def detokenize(raw: Request):
        return await serving.detokenize(await _parse(raw, DetokenizeRequest))

    @app.post("/v1/completions")
    async def completions(raw: Request):
        return await serving.completions(await _parse(raw, CompletionRequest), raw)

    @app.post("/v1/chat/completions")
    async def chat(raw: Request):
        return await serving.chat(await _parse(raw, ChatCompletionRequest), raw)


def build_app(
    front: AsyncLLM,
    model_name: str,
    metrics: ServerMetrics,
    chat_template=None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> FastAPI:
    """The FastAPI app over a started or startable ``front``: its lifespan starts the engine
    thread and, at shutdown, drains it. ``chat_template``: a `ChatTemplate` (default: the
    default template); ``max_request_bytes``: the largest request body (larger: 413)."""
    serving = OpenAIServing(front, model_name, metrics, chat_template)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if not front.started:
            front.start()
        try:
            yield
        finally:
            # uvicorn has already let in-flight requests finish; stop the thread without blocking
            # the loop
            await asyncio.get_running_loop().run_in_executor(None, front.shutdown, 30.0)

    app = FastAPI(title="fd_mtp", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.front = front
    app.state.metrics = metrics
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes, metrics=metrics)

    _add_error_handlers(app, metrics)
    _add_routes(app, front, serving, model_name, metrics)
    return app


def build_llm(args):
    """The `fd_mtp.LLM` of the parsed options; with ``--pd`` a
    `fd_mtp.distributed.pd.PDEngineClient` (its prefill and decode processes started)."""
    from ...llm import LLM

    tp = getattr(args, "tensor_parallel_size", 1)
    options = dict(
        speculative_config=args.speculative_config,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks_override,
        enable_prefix_caching=args.enable_prefix_caching,
        max_num_batched_tokens=args.max_num_batched_tokens,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
        forward=getattr(args, "forward", "eager"),
        cpu_threads=getattr(args, "cpu_threads", None),
    )
    if getattr(args, "pd", False):
        if tp != 1:
            raise ValueError(
                f"--pd with --tensor-parallel-size {tp} is not supported (prefill / decode "
                "disaggregation runs one process per instance)"
            )
        from ...distributed.pd import PDEngineClient

        try:
            return PDEngineClient(
                args.model, msg_queue_id=args.pd_msg_queue_id, fail_fast=True, **options
            )
        except ValueError as exc:
            raise ValueError(f"--pd: {exc}") from None
    if getattr(args, "pd_msg_queue_id", None) is not None:
        raise ValueError("--pd-msg-queue-id is only used with --pd")
    return LLM(args.model, tensor_parallel_size=tp, **options)


def model_dir(args) -> Path:
    """The checkpoint directory served (the demo model's without --model)."""
    if args.model:
        return Path(args.model)
    from ...assets import DEMO_MODEL

    return DEMO_MODEL


def served_name(args) -> str:
    if args.served_model_name:
        return args.served_model_name
    if args.model:
        return Path(args.model).resolve().name
    from ...assets import DEMO_MODEL

    return DEMO_MODEL.name


def serve(args) -> int:
    """Load the model, start the server, serve until SIGTERM / Ctrl-C; the exit status."""
    import uvicorn

    llm = None
    try:
        llm = build_llm(args)
        front_stats = ServerMetrics(
            served_name(args),
            0 if llm.speculative_config is None else llm.speculative_config.num_speculative_tokens,
        )
        front = AsyncLLM(llm, max_waiting_requests=args.max_waiting_requests, stats=front_stats)
        chat_template = load_chat_template(model_dir(args), args.chat_template)
    except (ValueError, FileNotFoundError, TypeError, NotImplementedError) as exc:
        if getattr(args, "pd", False) and llm is not None:
            llm.close()
        print(f"fd-mtp serve: {exc}", file=sys.stderr)
        return 2
    front_stats.bind(front)
    _configure_logging(args.log_level)
    app = build_app(
        front,
        served_name(args),
        front_stats,
        chat_template,
        max_request_bytes=getattr(args, "max_request_bytes", MAX_REQUEST_BYTES),
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # our own abort ends the requests at --shutdown-timeout; uvicorn's cancel is the backstop
        timeout_graceful_shutdown=args.shutdown_timeout + ABORT_GRACE_S,
        access_log=False,
    )
    server = uvicorn.Server(config)
    _announce(server, args)
    _abort_after_timeout(server, front, args.shutdown_timeout)
    # uvicorn handles SIGTERM / SIGINT while it runs (graceful drain) and re-raises the signal it
    # caught once it is done: with these no-op handlers in place the drained server exits 0
    # instead of dying by that signal
    previous = {s: signal.signal(s, _drained) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if getattr(args, "pd", False):
            llm.close()  # stop and reap both instances, remove the queue and the segments
    return 0


def _configure_logging(level: str) -> None:
    """``fd_mtp.serve``'s records (aborted requests, bugs) on stderr at ``--log-level``, one line
    each, as uvicorn writes its own."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level.upper())


def _abort_after_timeout(server, front: AsyncLLM, timeout: float) -> None:
    """Once the server starts shutting down (SIGTERM / Ctrl-C), abort every in-flight request
    after ``timeout`` seconds (`AsyncLLM.abort_all`: streams end with an error event and
    ``finish_reason: "abort"``, non-streaming requests get a 503)."""
    shutdown = server.shutdown

    async def shutdown_with_abort(sockets=None):
        reason = (
            f"the server is shutting down: the request did not finish within --shutdown-timeout "
            f"({timeout:g} s)"
        )
        timer = asyncio.get_running_loop().call_later(timeout, front.abort_all, reason)
        try:
            await shutdown(sockets=sockets)
        finally:
            timer.cancel()

    server.shutdown = shutdown_with_abort


def _drained(signum, frame) -> None:
    """The handler uvicorn's re-raised SIGTERM / SIGINT lands in after the drain: nothing to do."""


def _announce(server, args) -> None:
    """Print ``fd-mtp serve: listening on http://HOST:PORT`` once the socket is bound (the real
    port when --port 0)."""
    startup = server.startup

    async def startup_and_announce(sockets=None):
        await startup(sockets=sockets)
        if server.started:
            for s in server.servers:
                for sock in s.sockets:
                    host, port = sock.getsockname()[:2]
                    print(f"fd-mtp serve: listening on http://{host}:{port}", flush=True)

    server.startup = startup_and_announce


def main(argv=None) -> int:
    from .cli_args import make_parser

    return serve(make_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
