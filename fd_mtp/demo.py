"""``make demo``: the demo model generates with and without MTP speculative decoding, side by side.

The default model is the tiny ERNIE-4.5 + MTP checkpoint shipped in ``fd_mtp/assets`` (trained on
the Python standard library by ``tools/train_demo_model.py``). The prompts are the openings of
held-out standard-library files (files the model was not trained on). Every mode decodes the same prompts
greedily at batch 1; for each it prints tokens/s, the speedup over plain decoding, the mean accepted
length (tokens per target step, bonus token included), the acceptance per draft position, and
whether its output is token for token the plain output (it must be: greedy speculative decoding is
lossless). The eagle3_k3 mode drafts with the demo model's EAGLE-3 head (``fd_mtp/assets``, trained
by ``tools/train_eagle_head.py``) instead of its MTP block. Then it prints the greedy continuation
of the first ``--show`` prompts and a sampled one (``--temperature`` 0.7, ``--top-p`` 0.9,
``--seed``; MTP K = 3 speculative sampling, whose output follows the target model's distribution,
not plain decoding's tokens): a model this small falls into loops under greedy decoding, and
sampling shows better what it learnt.

    python -m fd_mtp.demo [--model DIR] [--max-tokens 128] [--prompts 6] [--modes plain,mtp_k1,...]
"""

from __future__ import annotations

import argparse
import sys
import time

#: mode -> speculative_config (None = plain decoding)
MODES = {
    "plain": None,
    "mtp_k1": {"method": "mtp", "num_speculative_tokens": 1, "num_model_steps": 1},
    "mtp_k2": {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2},
    "mtp_k3": {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3},
    "hybrid_k3": {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "num_model_steps": 1,
        "mtp_strategy": "with_ngram",
    },
    # the draft head's directory ("model") is filled in by `run` (`--eagle3-head`)
    "eagle3_k3": {"method": "eagle3", "num_speculative_tokens": 3, "num_model_steps": 3},
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fd_mtp.demo", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", default=None, help="checkpoint directory (default: the shipped demo model)"
    )
    p.add_argument(
        "--eagle3-head",
        default=None,
        help="EAGLE-3 head directory of the eagle3_k3 mode (default: the shipped demo model's "
        "head, when --model is the demo model; otherwise eagle3_k3 is left out)",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="tokens generated per prompt")
    p.add_argument("--prompts", type=int, default=6, help="number of held-out prompts")
    p.add_argument("--prompt-chars", type=int, default=400, help="characters per prompt")
    p.add_argument(
        "--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}"
    )
    p.add_argument(
        "--show", type=int, default=2, help="print the continuations of this many prompts"
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=0.7,
        help="temperature of the sampled continuations printed (0: print none)",
    )
    p.add_argument("--top-p", type=float, default=0.9, help="top_p of the sampled continuations")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled continuations")
    return p


def _fmt_positions(values) -> str:
    return " ".join("  - " if v is None else f"{v:.2f}" for v in values)


def _modes(args) -> list[str] | None:
    """The modes to run, "plain" first (the reference every other mode is compared with); None
    (after a message) when one is unknown."""
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        print(f"demo: unknown modes {unknown}; choose from {list(MODES)}", file=sys.stderr)
        return None
    if "plain" in modes:
        modes.remove("plain")
    return ["plain", *modes]


def _measure(llm, mode: str, texts, params, plain_ids):
    """Generates ``texts`` with ``llm`` after a warm-up (its metrics and proposer timings
    counted from then) -> (the outputs, the table row); an error ends the demo (None, None)."""
    from .engine.sampling_params import SamplingParams

    llm.generate(texts[:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)
    if llm.speculative_metrics is not None:
        llm.engine.spec_metrics = type(llm.speculative_metrics)(
            llm.speculative_metrics.num_speculative_tokens
        )
    stats = llm.proposer_stats
    calls0, host0 = (stats.calls, stats.host) if stats else (0, 0.0)
    t0 = time.perf_counter()
    outs = llm.generate(texts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    errors = [o.error for o in outs if o.error]
    if errors:
        print(f"demo: {mode}: {errors[0]}", file=sys.stderr)
        return None, None
    ids = [o.token_ids for o in outs]
    tokens = sum(len(t) for t in ids)
    m = llm.speculative_metrics
    host_ms = (stats.host - host0) / max(stats.calls - calls0, 1) * 1e3 if stats else None
    row = dict(
        mode=mode,
        tps=tokens / elapsed,
        tokens=tokens,
        seconds=elapsed,
        same=plain_ids is None or ids == plain_ids,
        mal=None if m is None else m.mean_accepted_length,
        pos=None if m is None else m.acceptance_per_position,
        host_ms=host_ms,
        ids=ids,
    )
    extra = "" if m is None else f", mean accepted length {row['mal']:.2f}"
    print(
        f"  {mode:<10} {tokens} tokens in {elapsed:.2f} s: {row['tps']:.1f} tokens/s{extra}",
        flush=True,
    )
    return outs, row


def _print_table(rows) -> None:
    base = rows[0]["tps"]
    k_max = max((len(r["pos"]) for r in rows if r["pos"]), default=0)
    print(
        f"\n{'mode':<10} {'tokens/s':>9} {'vs plain':>9} {'accepted len':>13}  "
        f"{'acceptance per position':<{max(24, 5 * k_max)}} {'proposer host ms/step':>21}  same as plain"
    )
    for r in rows:
        mal = "-" if r["mal"] is None else f"{r['mal']:.2f}"
        pos = "-" if r["pos"] is None else _fmt_positions(r["pos"])
        host = "-" if r["host_ms"] is None else f"{r['host_ms']:.2f}"
        print(
            f"{r['mode']:<10} {r['tps']:>9.1f} {r['tps'] / base:>8.2f}x {mal:>13}  {pos:<{max(24, 5 * k_max)}} "
            f"{host:>21}  {'yes' if r['same'] else 'NO'}"
        )


def _show(args, sample, engine) -> None:
    """The greedy continuations of the first ``args.show`` prompts, each with a sampled one (MTP
    K = 3) when ``args.temperature > 0``."""
    from .engine.sampling_params import SamplingParams

    shown = sample[: max(args.show, 0)]
    sampled = []
    if shown and args.temperature > 0:
        llm = engine(MODES["mtp_k3"])
        sp = SamplingParams(
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
            max_tokens=args.max_tokens,
        )
        sampled = llm.generate([o.prompt for o in shown], sp, use_tqdm=False)
    for i, o in enumerate(shown):
        print(f"\n--- prompt (held-out) ---\n{o.prompt}\n--- greedy continuation ---\n{o.text}")
        if i < len(sampled):
            print(
                f"--- sampled continuation (temperature {args.temperature:g}, top_p {args.top_p:g}, "
                f"seed {args.seed}, MTP K = 3) ---\n{sampled[i].error or sampled[i].text}"
            )


def _eagle3_head(args):
    """The eagle3_k3 mode's head directory, or None (after a note) when there is none."""
    from .assets import default_eagle3_head_path

    if args.eagle3_head is not None:
        return args.eagle3_head
    if args.model is not None:
        print("demo: eagle3_k3 left out: no --eagle3-head for this --model", file=sys.stderr)
        return None
    try:
        return default_eagle3_head_path()
    except FileNotFoundError as exc:
        print(f"demo: eagle3_k3 left out: {exc}", file=sys.stderr)
        return None


def run(args) -> int:
    from .assets import default_model_path
    from .assets.corpus import held_out_prompts
    from .engine.sampling_params import SamplingParams
    from .llm import LLM

    modes = _modes(args)
    if modes is None:
        return 2
    try:
        model = args.model or default_model_path()
    except FileNotFoundError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    prompts = held_out_prompts(args.prompts, chars=args.prompt_chars)
    if not prompts:
        print("demo: no held-out standard-library file found for prompts", file=sys.stderr)
        return 2
    texts = [t for _, t in prompts]
    configs = dict(MODES)
    if "eagle3_k3" in modes:
        head = _eagle3_head(args)
        if head is None:
            modes.remove("eagle3_k3")
        else:
            configs["eagle3_k3"] = {**MODES["eagle3_k3"], "model": str(head)}

    def engine(speculative_config):  # batch 1, as every figure of the demo
        return LLM(
            str(model),
            max_num_seqs=1,
            max_model_len=2048,
            block_size=64,
            speculative_config=speculative_config,
        )

    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    print(f"fd_mtp demo: {model}")
    print(
        f"{len(texts)} prompts from held-out standard-library files ({', '.join(r for r, _ in prompts)}), "
        f"greedy, up to {args.max_tokens} new tokens each, batch 1, CPU\n"
    )
    rows, sample = [], None
    for mode in modes:
        llm = engine(configs[mode])
        if llm.tokenizer is None:
            print("demo: the checkpoint has no tokenizer", file=sys.stderr)
            return 2
        outs, row = _measure(llm, mode, texts, params, rows[0]["ids"] if rows else None)
        if row is None:
            return 1
        sample = sample or outs
        rows.append(row)
    _print_table(rows)
    _show(args, sample, engine)
    if not all(r["same"] for r in rows):
        print("\ndemo: a speculative mode's output differs from plain decoding", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
