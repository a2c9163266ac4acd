"""The OpenAI-compatible server: FastAPI + uvicorn over `AsyncLLM` (``fd-mtp serve``).

    fd-mtp serve [--model DIR] [--port 8188] [--speculative-config '{"method": "mtp",
        "num_speculative_tokens": 3}'] [--max-num-seqs 8] [--max-model-len N] ...
    python -m fd_mtp.entrypoints.openai.api_server [same options]

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /health`` (200 while the engine thread runs, else 503), ``GET /metrics`` (Prometheus text).

Errors use OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400 for invalid JSON,
wrong types, unknown fields, unknown model, out-of-range values, prompts the engine refuses (the
message and ``param`` name the field); 503 when the waiting queue is full or the engine is down;
404 / 405 for unknown routes and methods; 500 for a bug (the server keeps serving).

SIGTERM (or Ctrl-C) drains: the listening socket closes, running requests finish (up to
``--shutdown-timeout`` seconds), then the engine thread stops and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from .protocol import ChatCompletionRequest, CompletionRequest, error_body
from .serving import OpenAIServing, RequestError

logger = logging.getLogger("fd_mtp.serve")

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


def build_app(
    front: AsyncLLM, model_name: str, metrics: ServerMetrics, chat_template=None
) -> FastAPI:
    """The FastAPI app over a started or startable ``front``: its lifespan starts the engine
    thread and, at shutdown, drains it. ``chat_template``: a `ChatTemplate` (default: the
    default template)."""
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

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "fd_mtp",
                    "max_model_len": front.max_model_len,
                }
            ],
        }

    @app.post("/v1/completions")
    async def completions(raw: Request):
        return await serving.completions(await _parse(raw, CompletionRequest), raw)

    @app.post("/v1/chat/completions")
    async def chat(raw: Request):
        return await serving.chat(await _parse(raw, ChatCompletionRequest), raw)

    return app


def build_llm(args):
    """The `fd_mtp.LLM` of the parsed options."""
    from ...llm import LLM

    return LLM(
        args.model,
        device=args.device,
        dtype=args.dtype,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks_override,
        max_num_batched_tokens=args.max_num_batched_tokens,
        speculative_config=args.speculative_config,
        seed=args.seed,
        tensor_parallel_size=getattr(args, "tensor_parallel_size", 1),
        forward=getattr(args, "forward", "eager"),
        cpu_threads=getattr(args, "cpu_threads", None),
    )


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

    try:
        llm = build_llm(args)
        front_stats = ServerMetrics(
            served_name(args),
            0 if llm.speculative_config is None else llm.speculative_config.num_speculative_tokens,
        )
        front = AsyncLLM(llm, max_waiting_requests=args.max_waiting_requests, stats=front_stats)
        chat_template = load_chat_template(model_dir(args), args.chat_template)
    except (ValueError, FileNotFoundError, TypeError, NotImplementedError) as exc:
        print(f"fd-mtp serve: {exc}", file=sys.stderr)
        return 2
    front_stats.bind(front)
    app = build_app(front, served_name(args), front_stats, chat_template)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=args.shutdown_timeout,
        access_log=False,
    )
    server = uvicorn.Server(config)
    _announce(server, args)
    # uvicorn handles SIGTERM / SIGINT while it runs (graceful drain) and re-raises the signal it
    # caught once it is done: with these no-op handlers in place the drained server exits 0
    # instead of dying by that signal
    previous = {s: signal.signal(s, _drained) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


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
