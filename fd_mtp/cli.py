"""The ``fd-mtp`` command.

    fd-mtp --version
    fd-mtp serve [--model CKPT_DIR] [--port 8188] [--speculative-config JSON] [--max-num-seqs N] ...
                    (the OpenAI-compatible server: fd_mtp/entrypoints/openai/api_server.py)
    fd-mtp generate [--model CKPT_DIR] --prompt "Hello" [--prompt-ids "1 2 3"] [--max-tokens 32]
                    [--temperature 0 --top-p 1 --top-k 0 --seed S] [--batch N] [--stream]
                    [--device cpu|gpu --dtype float32|bfloat16|float16]
                    [--speculative-method mtp|eagle|eagle3|ngram [--speculative-model HEAD_DIR]
                     --num-speculative-tokens K --num-model-steps N
                     --mtp-strategy default|with_ngram --verification target_match
                     --draft-policy fixed|adaptive --draft-sampling --stop-handling engine|ops]

prints every request's generated token ids (and text when the checkpoint has a tokenizer), then
``N requests, T tokens in S s: X tokens/s``. Exit status 1 when a request was rejected; 2 on a bad
option (the message names the option, or the `SamplingParams` / `SpeculativeConfig` field).

``--stream`` writes each request's text (its token ids, space separated, without a tokenizer) to
stdout as it is generated, flushing every piece, and ends the line when the request finishes; the
usual report follows. With several requests the lines stay whole and in prompt order: each line
starts with ``[i] ``; request i streams live once requests 0..i-1 have finished, and what it
generated before that is written at once when its turn comes (requests still run in one batch).

Ctrl-C (SIGINT) stops generation: the report shows what each request generated so far (finish
reason "abort"), stderr gets ``fd-mtp generate: interrupted``, and the exit status is 130.

``--dtype``: float32 everywhere; bfloat16 / float16 need ``--device gpu`` (Paddle's CPU build has
no half-precision matmul). Default: the checkpoint's dtype, loaded as float32 on CPU.

Without ``--speculative-method`` the engine decodes plainly, and the speculative options
(``--num-speculative-tokens``, ``--num-model-steps``, ``--mtp-strategy``, ``--verification``,
``--draft-policy``, ``--draft-sampling``, ``--stop-handling``) are refused. With it,
``speculative_config`` is passed to `fd_mtp.LLM` as a dict (K: ``--num-speculative-tokens``,
MTP substeps: ``--num-model-steps``; for "mtp" K is raised to N when smaller; ``--mtp-strategy with_ngram``
with K > N is hybrid mode). ``--num-model-steps`` and
``--mtp-strategy`` are MTP options: refused with ``--speculative-method ngram``, as are
``--draft-policy adaptive`` (draft length chosen per step and per request from measured
acceptance and costs) and ``--draft-sampling`` (drafts sampled from the MTP head, with
``--verification rejection``). ``--stop-handling ops`` lets the ops end requests as in
FastDeploy (EOS ids and max_tokens in speculate_verify; ``SpeculativeConfig.stop_handling``);
``fd-mtp serve`` takes it in ``--speculative-config`` (``"stop_handling": "ops"``).
``--speculative-method eagle`` / ``eagle3`` drafts with a separate EAGLE / EAGLE-3 head whose
directory ``--speculative-model`` gives (``SpeculativeConfig.model``; `fd_mtp.model.eagle`); the
MTP options apply to them too. ``fd-mtp serve`` takes the same in ``--speculative-config``
(``{"method": "eagle3", "model": DIR, "num_speculative_tokens": 3}``).
The default verification, "target_match", accepts a draft while it equals the token the target
emits at that position, so output equals plain decoding for greedy and for seeded sampled requests.
Then each request also prints ``[i] spec: <SpeculativeMetrics.summary()>``, and after the summary
line come the totals:

    speculative (mtp, K=3, model steps 3, verification target_match): mean accepted length 3.10
    tokens/step over 20 steps, accepted 42/60 drafts (70.0%), per position [0.90 0.70 0.50]
    proposer: 20 calls, host 0.41 ms/step (run 2.10 - forward 1.69 ms/step)

where "host" is the proposer's own time per call outside the MTP forwards (`ProposerStats`).
"""

from __future__ import annotations

import argparse
import re
import sys
import time


def _ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--prompt-ids wants integers separated by spaces or commas, got {text!r}"
        )


def _device(text: str) -> str:
    """--device: "cuda" is taken as "gpu" (as paddle does)."""
    text = text.strip().lower()
    return "gpu" if text == "cuda" else text


STREAM_HELP = (
    "write the generated text (token ids without a tokenizer) to stdout as it is produced; with "
    "several requests, one '[i] ' line per request, in prompt order: request i streams live once "
    "0..i-1 have finished, earlier output is written when its turn comes. The usual report follows"
)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .entrypoints.openai.cli_args import add_serve_args

    parser = argparse.ArgumentParser(prog="fd-mtp", description="fd_mtp reference engine")
    parser.add_argument("--version", action="version", version=f"fd-mtp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser(
        "generate",
        help="generate from prompts with a checkpoint (plain or speculative decoding)",
        epilog="Exit status: 0, 1 when a request was rejected, 2 on a bad option, 130 when "
        "interrupted (Ctrl-C stops generation and still reports what each request "
        "generated so far, finish_reason 'aborted').",
    )
    g.add_argument(
        "--model",
        default=None,
        help="checkpoint directory (config.json + model.safetensors); default: the demo model "
        "shipped with fd_mtp (fd_mtp/assets/ernie45_tiny_mtp)",
    )
    g.add_argument(
        "--prompt",
        action="append",
        default=[],
        help="a text prompt (needs a tokenizer); repeatable",
    )
    g.add_argument(
        "--prompt-ids",
        action="append",
        default=[],
        type=_ids,
        help='a prompt as token ids, e.g. "1 2 3"; repeatable',
    )
    g.add_argument("--batch", type=int, default=1, help="repeat the prompts to this many requests")
    g.add_argument(
        "--max-tokens",
        type=int,
        default=32,
        help="tokens to generate at most per request (default: 32; generation also ends at "
        "EOS, a stop string or --max-model-len)",
    )
    g.add_argument(
        "--min-tokens",
        type=int,
        default=0,
        help="EOS and stop token ids are ignored until this many tokens exist (default: 0)",
    )
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        help="nucleus sampling mass in (0, 1] (default: 1 = off)",
    )
    g.add_argument(
        "--top-k",
        type=int,
        default=0,
        help="sample among the k most likely tokens (default: 0 = off)",
    )
    g.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="> 0, penalises tokens already generated (default: 1 = off)",
    )
    g.add_argument(
        "--seed", type=int, default=None, help="per-request seed (request i gets seed + i)"
    )
    g.add_argument("--stop", action="append", default=None, help="stop string; repeatable")
    g.add_argument(
        "--ignore-eos", action="store_true", help="keep generating after EOS (up to --max-tokens)"
    )
    g.add_argument(
        "--device",
        type=_device,
        choices=("cpu", "gpu"),
        default="cpu",
        help='where the model runs (default: cpu; "cuda" is taken as gpu, which needs a CUDA build '
        "of PaddlePaddle)",
    )
    g.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default=None,
        help="model dtype; bfloat16 / float16 need --device gpu (default: the checkpoint's, "
        "float32 on cpu)",
    )
    g.add_argument(
        "--max-num-seqs",
        type=int,
        default=None,
        help="request slots, the batch size of a step (default: min(batch, 64))",
    )
    g.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="longest prompt + output (default: min(max_position_embeddings, 4096))",
    )
    g.add_argument(
        "--block-size", type=int, default=64, help="KV-cache block size, 1..1024 (default: 64)"
    )
    g.add_argument(
        "--num-gpu-blocks",
        type=int,
        default=None,
        help="KV-cache blocks per layer (default: enough for every slot at --max-model-len; fewer "
        "make the engine preempt requests)",
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV blocks of prompt prefixes computed earlier (default: on; the summary "
        "prints the hit rate)",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="tokens per step; longer prompts are prefilled in chunks (default: 2048)",
    )
    g.add_argument("--stream", action="store_true", help=STREAM_HELP)
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    s = g.add_argument_group(
        "speculative decoding (fd_mtp.SpeculativeConfig; default: plain decoding)"
    )
    s.add_argument(
        "--speculative-method",
        choices=("mtp", "eagle", "eagle3", "ngram"),
        default=None,
        help="draft with the checkpoint's MTP head, a separate EAGLE / EAGLE-3 head "
        "(--speculative-model) or n-gram lookup",
    )
    s.add_argument(
        "--speculative-model",
        default=None,
        metavar="HEAD_DIR",
        help="the EAGLE / EAGLE-3 head's checkpoint directory (methods eagle, eagle3)",
    )
    s.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=None,
        help="K, drafts verified per step (1..5)",
    )
    s.add_argument("--num-model-steps", type=int, default=None, help="MTP substeps per step (1..5)")
    s.add_argument(
        "--mtp-strategy",
        choices=("default", "with_ngram"),
        default=None,
        help="with_ngram: extend MTP drafts with n-gram matches up to K (hybrid)",
    )
    s.add_argument(
        "--verification",
        choices=("greedy", "topp", "topk", "target_match", "rejection"),
        default=None,
        help="draft acceptance rule (default: target_match)",
    )
    s.add_argument(
        "--draft-policy",
        choices=("fixed", "adaptive"),
        default=None,
        help="adaptive: choose the draft length per step and per request (mtp only)",
    )
    s.add_argument(
        "--draft-sampling",
        action="store_true",
        default=None,
        help="sample drafts from the MTP head (needs --verification rejection)",
    )
    s.add_argument(
        "--stop-handling",
        choices=("engine", "ops"),
        default=None,
        help="who ends requests: the engine on the host (default) or the ops, as FastDeploy "
        "(the token at max_tokens becomes EOS; no --ignore-eos)",
    )
    _add_parallel_args(g)
    serve = sub.add_parser(
        "serve",
        help="OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /metrics)",
        description="OpenAI-compatible HTTP server over fd_mtp.LLM (FastAPI + uvicorn); see "
        "fd_mtp/entrypoints/openai/api_server.py. SIGTERM drains running requests and exits.",
    )
    add_serve_args(serve)
    _add_parallel_args(serve)
    return parser


def _add_parallel_args(parser) -> None:
    parser.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="shard the model over N worker processes (paddle.distributed: gloo on CPU, NCCL on "
        "GPU); N must divide the heads, kv heads, MLP widths and experts (default 1)",
    )
    parser.add_argument(
        "--forward",
        choices=["native", "eager", "static"],
        default="native",
        help="native C++ decoder layers on the CPU (default), op by op (eager: the debugging "
        "switch) or a compiled Paddle program (static); outputs equal to float32 rounding",
    )
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="paddle's CPU math threads (MKL / OpenMP); default: paddle's setting (1)",
    )


def _flags(names) -> str:
    # the SpeculativeConfig field "model" is the option --speculative-model
    return ", ".join(
        "--" + ("speculative-model" if k == "model" else k.replace("_", "-")) for k in names
    )


def speculative_config(args) -> dict | None:
    """The ``speculative_config`` dict of the parsed options (None: plain decoding). Raises
    ValueError when speculative options are given without ``--speculative-method``, or MTP-only
    options (``--num-model-steps``, ``--mtp-strategy``) with ``--speculative-method ngram``."""
    opts = {
        "num_speculative_tokens": args.num_speculative_tokens,
        "num_model_steps": args.num_model_steps,
        "mtp_strategy": args.mtp_strategy,
        "verification": args.verification,
        "draft_policy": args.draft_policy,
        "draft_sampling": args.draft_sampling,
        "stop_handling": args.stop_handling,
        "model": args.speculative_model,
    }
    given = [k for k, v in opts.items() if v is not None]
    if args.speculative_method is None:
        if given:
            raise ValueError(
                f"{_flags(given)} {'needs' if len(given) == 1 else 'need'} "
                "--speculative-method mtp, eagle, eagle3 or ngram"
            )
        return None
    if args.speculative_method == "ngram":
        mtp_only = [
            k
            for k in ("num_model_steps", "mtp_strategy", "draft_policy", "draft_sampling")
            if k in given
        ]
        if mtp_only:
            raise ValueError(
                f"{_flags(mtp_only)} {'applies' if len(mtp_only) == 1 else 'apply'} to "
                "--speculative-method mtp, eagle or eagle3 only, not ngram"
            )
    cfg = {"method": args.speculative_method, "verification": args.verification or "target_match"}
    cfg.update({k: v for k, v in opts.items() if v is not None})
    return cfg


class _Streamer:
    """``--stream``: writes each request's new text (or token ids) to stdout as it comes, one line per
    request in prompt order (``[i] `` prefixes when there are several requests); see the module
    docstring."""

    def __init__(self, n: int, text: bool):
        self.n, self.text = n, text
        self.pending = [""] * n  # not yet written (a later request waits for its turn)
        self.started = [False] * n  # its line has begun (prefix written)
        self.finished = [False] * n
        self.current = 0  # the request whose line is being written
        self.open = False  # a line is open (no newline yet)

    def __call__(self, d) -> None:
        i = d.index
        if not 0 <= i < self.n:
            return
        if d.error is not None:
            piece = f"error: {d.error}"
        elif self.text:
            piece = d.new_text
        else:
            piece = " ".join(map(str, d.new_token_ids))
            if piece and (self.pending[i] or self.started[i]):
                piece = " " + piece
        self.pending[i] += piece
        self.finished[i] = self.finished[i] or d.finished
        self._drain()

    def _drain(self) -> None:
        out = sys.stdout
        wrote = False
        while self.current < self.n:
            i = self.current
            if not self.started[i]:
                if self.n > 1:
                    out.write(f"[{i}] ")
                self.started[i] = self.open = wrote = True
            if self.pending[i]:
                out.write(self.pending[i])
                self.pending[i] = ""
                wrote = True
            if not self.finished[i]:
                break
            out.write("\n")
            self.open, wrote = False, True
            self.current += 1
        if wrote:
            out.flush()

    def close(self) -> None:
        """Interrupted: end the open line (what other requests had pending is in the report)."""
        if self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False


def _print_speculative(llm) -> None:
    spec = llm.speculative_config
    metrics = llm.speculative_metrics
    head = (
        f"speculative ({spec.method}, K={spec.num_speculative_tokens}"
        + (f", model steps {spec.num_model_steps}" if spec.uses_draft_model else "")
        + (", hybrid n-gram" if spec.hybrid_mode else "")
        + f", verification {spec.verification})"
    )
    print(f"{head}: {metrics.summary() if metrics is not None else 'no decode step'}")
    stats = llm.proposer_stats
    if stats is not None and stats.calls:
        per = 1e3 / stats.calls
        print(
            f"proposer: {stats.calls} calls, host {stats.host * per:.3f} ms/step "
            f"(run {stats.run * per:.3f} - forward {stats.forward * per:.3f} ms/step)"
        )
    if spec.draft_policy != "fixed" or spec.draft_sampling:
        sampled = ", sampled drafts" if spec.draft_sampling else ""
        print(f"draft policy ({spec.draft_policy}{sampled}): {llm.draft_policy_metrics.summary()}")


def _device_dtype_error(args) -> str | None:
    """What is wrong with --device / --dtype on this paddle, in the CLI's words (None: nothing)."""
    if args.device == "gpu":
        import paddle

        if not paddle.is_compiled_with_cuda():
            return (
                f"--device gpu: this PaddlePaddle ({paddle.__version__}) is a CPU build (not compiled with "
                "CUDA); use --device cpu"
            )
    if args.device == "cpu" and args.dtype not in (None, "float32"):
        return (
            f"--dtype {args.dtype} is not supported with --device cpu (Paddle's CPU build has no "
            "half-precision matmul): on cpu use --dtype float32, or leave --dtype out (a bfloat16 / float16 "
            "checkpoint then runs in float32); bfloat16 and float16 need --device gpu"
        )
    return None


def _option_message(exc: Exception, parser_dests) -> str:
    """An `LLM` error ("LLM: block_size must be ...") worded with the option ("--block-size must be ...")."""
    msg = str(exc)
    m = re.match(r"LLM: (\w+)", msg)
    if m and m.group(1) in parser_dests:
        return "--" + m.group(1).replace("_", "-") + msg[m.end() :]
    return msg


# LLM arguments that come straight from the option of the same name (--device / --dtype are checked
# by _device_dtype_error in the CLI's own words first)
LLM_OPTIONS = (
    "max_num_seqs",
    "max_model_len",
    "block_size",
    "num_gpu_blocks",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "forward",
    "cpu_threads",
)


def _sampling_params(args, i: int):
    """The `SamplingParams` of request ``i`` (``--seed`` + i: each request its own stream)."""
    from .engine.sampling_params import SamplingParams

    return SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_tokens=args.max_tokens,
        min_tokens=args.min_tokens,
        repetition_penalty=args.repetition_penalty,
        stop=args.stop,
        ignore_eos=args.ignore_eos,
        seed=None if args.seed is None else args.seed + i,
    )


def _print_outputs(outputs, with_text: bool, speculative: bool) -> int:
    """One block of lines per output (tokens, text, finish reason, draft statistics); returns
    how many failed."""
    failed = 0
    for i, o in enumerate(outputs):
        if o.error is not None:
            failed += 1
            print(f"[{i}] error: {o.error}")
            continue
        print(f"[{i}] token_ids: {o.token_ids}")
        if with_text:
            print(f"[{i}] text: {o.text!r}")
        print(f"[{i}] finish_reason: {o.finish_reason}")
        if speculative and o.metrics is not None and o.metrics.spec is not None:
            print(f"[{i}] spec: {o.metrics.spec.summary()}")
    return failed


def generate(args) -> int:
    from .llm import LLM, GenerationInterrupted

    prompts = list(args.prompt) + list(args.prompt_ids)
    if not prompts:
        print("fd-mtp generate: give at least one --prompt or --prompt-ids", file=sys.stderr)
        return 2
    if args.batch < 1:
        print("fd-mtp generate: --batch must be >= 1", file=sys.stderr)
        return 2
    requests = [prompts[i % len(prompts)] for i in range(max(args.batch, len(prompts)))]
    try:
        params = [_sampling_params(args, i) for i in range(len(requests))]
        spec = speculative_config(args)
        problem = _device_dtype_error(args)
        if problem is not None:
            raise ValueError(problem)
        llm = LLM(
            args.model,
            device=args.device,
            dtype=args.dtype,
            max_num_seqs=min(len(requests), 64) if args.max_num_seqs is None else args.max_num_seqs,
            max_model_len=args.max_model_len,
            block_size=args.block_size,
            num_gpu_blocks=args.num_gpu_blocks,
            enable_prefix_caching=args.enable_prefix_caching,
            max_num_batched_tokens=args.max_num_batched_tokens,
            speculative_config=spec,
            tensor_parallel_size=args.tensor_parallel_size,
            forward=args.forward,
            cpu_threads=args.cpu_threads,
        )
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"fd-mtp generate: {_option_message(exc, LLM_OPTIONS)}", file=sys.stderr)
        return 2

    streamer = _Streamer(len(requests), llm.tokenizer is not None) if args.stream else None
    t0 = time.perf_counter()
    interrupted = False
    try:
        outputs = llm.generate(
            requests, params, use_tqdm=not args.no_progress, stream_callback=streamer
        )
    except GenerationInterrupted as exc:
        outputs, interrupted = exc.outputs, True
        if streamer is not None:
            streamer.close()
    elapsed = time.perf_counter() - t0
    failed = _print_outputs(outputs, llm.tokenizer is not None, spec is not None)
    total = sum(len(o.token_ids) for o in outputs)
    print(
        f"{len(outputs)} requests, {total} tokens in {elapsed:.3f} s: {total / max(elapsed, 1e-9):.1f} tokens/s"
    )
    print(f"prefix cache: {llm.prefix_cache_stats.summary()}")
    if spec is not None:
        _print_speculative(llm)
    if interrupted:
        sys.stdout.flush()
        print("fd-mtp generate: interrupted", file=sys.stderr)
        return 130
    return 1 if failed else 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return generate(args)
        if args.command == "serve":
            from .entrypoints.openai.api_server import serve

            return serve(args)
    except KeyboardInterrupt:  # while loading the model, or before generation started
        sys.stdout.flush()
        print(f"fd-mtp {args.command}: interrupted", file=sys.stderr)
        return 130
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
