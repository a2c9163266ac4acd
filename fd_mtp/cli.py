"""The ``fd-mtp`` command.

    fd-mtp generate [--model CKPT_DIR] --prompt "Hello" [--prompt-ids "1 2 3"] [--max-tokens 32]
                    [--temperature 0 --top-p 1 --top-k 0 --seed S] [--batch N] [--stream]
                    [--speculative-method mtp|ngram --num-speculative-tokens K --num-model-steps N
                     --mtp-strategy default|with_ngram --verification target_match]

prints every request's generated token ids (and text when the checkpoint has a tokenizer), then
``N requests, T tokens in S s: X tokens/s``. Exit status 1 when a request was rejected; 2 on a bad
option (a `SamplingParams` or `SpeculativeConfig` error names the field).

Without ``--speculative-method`` the engine decodes plainly. With it, ``speculative_config`` is passed
to `fd_mtp.LLM` as a dict (K: ``--num-speculative-tokens``, MTP substeps: ``--num-model-steps``;
for "mtp" K is raised to N when smaller; ``--mtp-strategy with_ngram`` with K > N is hybrid mode).
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
    g = sub.add_parser("generate", help="generate from prompts with a checkpoint (plain or speculative decoding)")
    g.add_argument("--model", default=None,
                   help="checkpoint directory (config.json + model.safetensors); default: the demo model "
                        "shipped with fd_mtp (fd_mtp/assets/ernie45_tiny_mtp)")
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
    s = g.add_argument_group("speculative decoding (fd_mtp.SpeculativeConfig; default: plain decoding)")
    s.add_argument("--speculative-method", choices=("mtp", "ngram"), default=None,
                   help="draft with the checkpoint's MTP head or with n-gram lookup")
    s.add_argument("--num-speculative-tokens", type=int, default=None, help="K, drafts verified per step (1..5)")
    s.add_argument("--num-model-steps", type=int, default=None, help="MTP substeps per step (1..5)")
    s.add_argument("--mtp-strategy", choices=("default", "with_ngram"), default=None,
                   help="with_ngram: extend MTP drafts with n-gram matches up to K (hybrid)")
    s.add_argument("--verification", choices=("greedy", "topp", "topk", "target_match", "rejection"),
                   default="target_match", help="draft acceptance rule (default: target_match)")
    return parser


def speculative_config(args) -> dict | None:
    """The ``speculative_config`` dict of the parsed options (None: plain decoding). Raises
    ValueError when speculative options are given without ``--speculative-method``."""
    opts = {"num_speculative_tokens": args.num_speculative_tokens, "num_model_steps": args.num_model_steps,
            "mtp_strategy": args.mtp_strategy}
    if args.speculative_method is None:
        given = [k for k, v in opts.items() if v is not None]
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ValueError(f"{flags} {'needs' if len(given) == 1 else 'need'} --speculative-method mtp or ngram")
        return None
    cfg = {"method": args.speculative_method, "verification": args.verification}
    cfg.update({k: v for k, v in opts.items() if v is not None})
    return cfg


def _print_speculative(llm) -> None:
    spec = llm.speculative_config
    metrics = llm.speculative_metrics
    head = (f"speculative ({spec.method}, K={spec.num_speculative_tokens}"
            + (f", model steps {spec.num_model_steps}" if spec.method == "mtp" else "")
            + (", hybrid n-gram" if spec.hybrid_mode else "") + f", verification {spec.verification})")
    print(f"{head}: {metrics.summary() if metrics is not None else 'no decode step'}")
    stats = llm.proposer_stats
    if stats is not None and stats.calls:
        per = 1e3 / stats.calls
        print(f"proposer: {stats.calls} calls, host {stats.host * per:.3f} ms/step "
              f"(run {stats.run * per:.3f} - forward {stats.forward * per:.3f} ms/step)")


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
        spec = speculative_config(args)
        llm = LLM(args.model, device=args.device, dtype=args.dtype,
                  max_num_seqs=args.max_num_seqs or min(len(requests), 64), max_model_len=args.max_model_len,
                  block_size=args.block_size, num_gpu_blocks=args.num_gpu_blocks,
                  max_num_batched_tokens=args.max_num_batched_tokens, speculative_config=spec)
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
        if spec is not None and o.metrics is not None and o.metrics.spec is not None:
            print(f"[{i}] spec: {o.metrics.spec.summary()}")
    total = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} requests, {total} tokens in {elapsed:.3f} s: {total / max(elapsed, 1e-9):.1f} tokens/s")
    if spec is not None:
        _print_speculative(llm)
    return 1 if failed else 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        return generate(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
