"""The options of ``fd-mtp serve`` / ``python -m fd_mtp.entrypoints.openai.api_server`` (FastDeploy's
flag names where it has them). Only argparse here: ``fd-mtp --help`` imports this module, not the
server's dependencies."""

from __future__ import annotations

import argparse
import json


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"--speculative-config wants a JSON object, e.g. "
            f'\'{{"method": "mtp", "num_speculative_tokens": 3}}\': {exc}'
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"--speculative-config wants a JSON object, got {type(value).__name__}"
        )
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants an int >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants an int >= 1, got {value}")
    return value


def add_serve_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the server's options to ``p`` (also used by ``fd-mtp serve``)."""
    p.add_argument(
        "--model",
        default=None,
        help="checkpoint directory (config.json + model.safetensors); default: the demo model "
        "shipped with fd_mtp (fd_mtp/assets/ernie45_tiny_mtp)",
    )
    p.add_argument(
        "--served-model-name",
        default=None,
        help="the model name of the API (/v1/models, the requests' 'model'); default: the "
        "checkpoint directory's name",
    )
    p.add_argument(
        "--chat-template",
        default=None,
        help="a Jinja chat template file for /v1/chat/completions (default: the checkpoint's "
        "chat_template.jinja or tokenizer_config.json chat_template, else 'Role: content' "
        "paragraphs ending in 'Assistant:')",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1, this machine only)",
    )
    p.add_argument("--port", type=int, default=8188, help="port (default: 8188; 0: any free one)")
    p.add_argument(
        "--speculative-config",
        type=_json_object,
        default=None,
        help='speculative decoding as JSON, e.g. \'{"method": "mtp", "num_speculative_tokens": 3}\' '
        "(fd_mtp.SpeculativeConfig fields; default: plain decoding)",
    )
    p.add_argument(
        "--max-num-seqs", type=int, default=8, help="request slots (batch size; default: 8)"
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="longest prompt + output (default: min(max_position_embeddings, 4096))",
    )
    p.add_argument("--block-size", type=int, default=64, help="KV-cache block size (default: 64)")
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        help="KV-cache blocks per layer (default: enough for every slot at --max-model-len)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV blocks of prompt prefixes computed earlier (default: on; "
        "/metrics counts fd_mtp:prefix_cache_queries_total and fd_mtp:prefix_cache_hits_total)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="tokens per engine step; longer prompts are prefilled in chunks (default: 2048)",
    )
    p.add_argument(
        "--max-waiting-requests",
        type=int,
        default=256,
        help="requests that may wait for a slot: in-flight requests beyond --max-num-seqs; more "
        "are answered 503 with Retry-After, a batch that can never fit (more than max-num-seqs "
        "+ this) 400 (default: 256)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=_positive_int,
        default=8 * 1024 * 1024,
        help="largest request body in bytes; larger bodies are answered 413 (default: 8388608, "
        "8 MiB)",
    )
    p.add_argument("--device", default="cpu", help='"cpu" or "gpu" (default: cpu)')
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="model dtype (default: the checkpoint's; float32 on cpu)",
    )
    p.add_argument("--seed", type=int, default=0, help="engine seed for requests without a seed")
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=60.0,
        help="on SIGTERM / Ctrl-C, seconds to let running requests finish; then each is aborted: "
        "a stream gets an error event, a last chunk with finish_reason 'abort' and [DONE], a "
        "non-streaming request a 503 (default: 60)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default: warning)",
    )
    return p


def make_parser(
    prog: str = "python -m fd_mtp.entrypoints.openai.api_server",
) -> argparse.ArgumentParser:
    """The standalone server's parser."""
    return add_serve_args(
        argparse.ArgumentParser(prog=prog, description="OpenAI-compatible server over fd_mtp.LLM")
    )
