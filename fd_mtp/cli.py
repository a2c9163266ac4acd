"""The ``fd-mtp`` command.

    fd-mtp generate --model CKPT_DIR --prompt "Hello" [--prompt-ids "1 2 3"] [--max-tokens 32]
                    [--temperature 0 --top-p 1 --top-k 0 --seed S] [--batch N] [--stream]

prints every request's generated token ids (and text when the checkpoint has a tokenizer), then
``N requests, T tokens in S s: X tokens/s``. Exit status 1 when a request was rejected.
"""
from __future__ import annotations

import argparse
import sys
import time


def _ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids wants integers separated by spaces or commas, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fd-mtp", description="fd_mtp reference engine")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate from prompts with a checkpoint (plain decoding)")
    g.add_argument("--model", required=True, help="checkpoint directory (config.json + model.safetensors)")
    g.add_argument("--prompt", action="append", default=[], help="a text prompt (needs a tokenizer); repeatable")
    g.add_argument("--prompt-ids", action="append", default=[], type=_ids,
                   help='a prompt as token ids, e.g. "1 2 3"; repeatable')
    g.add_argument("--batch", type=int, default=1, help="repeat the prompts to this many requests")
    g.add_argument("--max-tokens", type=int, default=32)
    g.add_argument("--min-tokens", type=int, default=0)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None, help="per-request seed (request i gets seed + i)")
    g.add_argument("--stop", action="append", default=None, help="stop string; repeatable")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--device", default="cpu")
    g.add_argument("--dtype", default=None)
    g.add_argument("--max-num-seqs", type=int, default=None, help="default: min(batch, 64)")
    g.add_argument("--max-model-len", type=int, default=None)
    g.add_argument("--block-size", type=int, default=64)
    g.add_argument("--num-gpu-blocks", type=int, default=None)
    g.add_argument("--max-num-batched-tokens", type=int, default=2048)
    g.add_argument("--stream", action="store_true", help="print tokens as they are generated")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def generate(args) -> int:
    from .engine.sampling_params import SamplingParams
    from .llm import LLM

    prompts = list(args.prompt) + list(args.prompt_ids)
    if not prompts:
        print("fd-mtp generate: give at least one --prompt or --prompt-ids", file=sys.stderr)
        return 2
    if args.batch < 1:
        print("fd-mtp generate: --batch must be >= 1", file=sys.stderr)
        return 2
    requests = [prompts[i % len(prompts)] for i in range(max(args.batch, len(prompts)))]
    try:
        params = [SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, max_tokens=args.max_tokens,
            min_tokens=args.min_tokens, repetition_penalty=args.repetition_penalty, stop=args.stop,
            ignore_eos=args.ignore_eos, seed=None if args.seed is None else args.seed + i)
            for i in range(len(requests))]
        llm = LLM(args.model, device=args.device, dtype=args.dtype,
                  max_num_seqs=args.max_num_seqs or min(len(requests), 64), max_model_len=args.max_model_len,
                  block_size=args.block_size, num_gpu_blocks=args.num_gpu_blocks,
                  max_num_batched_tokens=args.max_num_batched_tokens)
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"fd-mtp generate: {exc}", file=sys.stderr)
        return 2

    def on_delta(d):
        if args.stream and d.new_token_ids:
            shown = repr(d.new_text) if llm.tokenizer is not None else " ".join(map(str, d.new_token_ids))
            print(f"[{d.index}] +{shown}", flush=True)

    t0 = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=not args.no_progress, stream_callback=on_delta)
    elapsed = time.perf_counter() - t0
    failed = 0
    for i, o in enumerate(outputs):
        if o.error is not None:
            failed += 1
            print(f"[{i}] error: {o.error}")
            continue
        print(f"[{i}] token_ids: {o.token_ids}")
        if llm.tokenizer is not None:
            print(f"[{i}] text: {o.text!r}")
        print(f"[{i}] finish_reason: {o.finish_reason}")
    total = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} requests, {total} tokens in {elapsed:.3f} s: {total / max(elapsed, 1e-9):.1f} tokens/s")
    return 1 if failed else 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        return generate(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
