"""Prefix caching: a shared system prompt and multi-turn chats, with and without the cache, side by
side in one run.

Workload (the shipped demo model unless ``--model DIR``, which needs a tokenizer): ``--conversations``
chats. Every chat opens with the same system prompt (the opening of a held-out standard-library
file, about ``--system-chars`` characters) followed by its own first user message (the opening of
another held-out file, about ``--user-chars``). Turn t + 1's prompt is turn t's prompt + its reply +
a new user message (the next held-out opening), as a chat client resends the history. Each turn of
every chat is submitted at once (``LLM.generate``; ``--max-num-seqs`` slots) and decodes
``--max-tokens`` greedy tokens (EOS ignored). A warm-up pass on other prompts runs first.

For each mode (``--modes``, names of ``fd_mtp.demo.MODES``; default plain, mtp_k3) it runs the
same chats with ``enable_prefix_caching`` False and True, one after the other, each on a fresh
`LLM`, and reports per turn: TTFT p50 / p99 (`RequestMetrics.ttft`: arrival to first token), the
prompt tokens computed and served from the cache, output tokens/s of the turn (its generated
tokens over its wall time) and the hit rate. Beside TTFT it prints the floor: the FLOPs of the
turn's computed prompt tokens (every request of the turn, since they share the steps) at the
matmul rate measured in the same run. ``--check`` asserts that the outputs with and without the
cache are equal, token for token.

Usage:
    python benchmarks/bench_prefix_cache.py [--modes plain,mtp_k3] [--conversations 8]
        [--turns 3] [--max-tokens 32] [--max-num-seqs 8] [--threads 1] [--check] [--out DIR]

Writes DIR/bench_prefix_cache.csv (benchmarks/harness.py's columns; kernel=prefix_cache,
provider=<mode>/cache or <mode>/no-cache, x=the turn; metrics ttft (ms, per request), ttft_p99,
tokens_per_s, computed_tokens, cached_tokens, hit_rate) and DIR/bench_prefix_cache.png, and prints a
table. The default run takes about two minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, Path(__file__).resolve().parent):  # fd_mtp; harness.py (also when loaded by path)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bench_profile import measure_rates, model_sizes  # noqa: E402
from harness import plot_bars, row, timestamp, write_csv  # noqa: E402


def build_chats(tokenizer, conversations: int, turns: int, system_chars: int, user_chars: int):
    """(system prompt ids, per chat: the user messages of every turn, as token ids)."""
    from fd_mtp.assets.corpus import held_out_prompts

    texts = [t for _, t in held_out_prompts(1 + conversations * turns + 4, chars=user_chars)]
    system = held_out_prompts(1, chars=system_chars)[0][1]
    # the system prompt ends with a newline: the first user message starts a new line
    sys_ids = tokenizer.encode(system if system.endswith("\n") else system + "\n")
    users = [
        [tokenizer.encode(texts[1 + c * turns + t]) for t in range(turns)]
        for c in range(conversations)
    ]
    warm = [tokenizer.encode(t) for t in texts[-4:]]
    return sys_ids, users, warm


def run_chats(llm, sys_ids, users, max_tokens: int, sizes: dict, rates: dict):
    """Every turn of every chat; -> (per-turn results, every output's token ids)."""
    from fd_mtp import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    history = [sys_ids + u[0] for u in users]
    turns, tokens = [], []
    for t in range(len(users[0])):
        before = llm.prefix_cache_stats
        t0 = time.perf_counter()
        outs = llm.generate(history, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        after = llm.prefix_cache_stats
        for o in outs:
            if o.error is not None:
                raise RuntimeError(f"turn {t + 1}: {o.error}")
        prompt = sum(len(h) for h in history)
        cached = sum(o.metrics.num_cached_tokens for o in outs)
        computed = prompt - cached
        flops = 2 * (sizes["main_linear"] + sizes["hidden"] * sizes["vocab"]) * computed
        turns.append(
            dict(
                turn=t + 1,
                ttft_ms=[o.metrics.ttft * 1e3 for o in outs],
                tokens_per_s=sum(len(o.token_ids) for o in outs) / wall,
                prompt=prompt,
                computed=computed,
                cached=cached,
                hit_rate=(after.hits - before.hits) / max(after.queries - before.queries, 1),
                floor_ms=flops / (rates["gflops"] * 1e9) * 1e3,
            )
        )
        tokens.append([o.token_ids for o in outs])
        if t + 1 < len(users[0]):
            history = [h + o.token_ids + u[t + 1] for h, o, u in zip(history, outs, users)]
    return turns, tokens


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="checkpoint directory (default: the demo model)")
    p.add_argument("--modes", default="plain,mtp_k3", help="names of fd_mtp.demo.MODES")
    p.add_argument("--conversations", type=int, default=8)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--system-chars", type=int, default=1200)
    p.add_argument("--user-chars", type=int, default=200)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument(
        "--threads", type=int, default=1, help="paddle's and the native kernel's threads"
    )
    p.add_argument("--check", action="store_true", help="assert equal outputs with and without")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    for name in ("conversations", "turns", "max_tokens", "max_num_seqs", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")

    import fd_mtp
    from fd_mtp.demo import MODES

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def make(mode, caching, max_model_len):
        return fd_mtp.LLM(
            args.model,
            speculative_config=MODES[mode],
            max_num_seqs=args.max_num_seqs,
            max_model_len=max_model_len,
            enable_prefix_caching=caching,
            cpu_threads=args.threads,
        )

    probe = make("plain", False, None)
    if probe.tokenizer is None:
        p.error("the checkpoint has no tokenizer (the chats are text)")
    sys_ids, users, warm = build_chats(
        probe.tokenizer, args.conversations, args.turns, args.system_chars, args.user_chars
    )
    longest = len(sys_ids) + max(sum(map(len, u)) for u in users) + args.turns * args.max_tokens
    max_model_len = longest + 8
    sizes = model_sizes(probe)
    rates = measure_rates(sizes["main_bytes"])
    del probe
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    print(
        f"{args.conversations} chats x {args.turns} turns; system prompt {len(sys_ids)} tokens; "
        f"{args.max_tokens} greedy tokens a turn; max_num_seqs {args.max_num_seqs}; "
        f"{args.threads} thread(s); matmul {rates['gflops']:.1f} GFLOP/s; load {load}"
    )

    stamp, rows, results = timestamp(), [], {}
    for mode in modes:
        outputs = {}
        for caching in (False, True):
            llm = make(mode, caching, max_model_len)
            llm.generate(
                [sys_ids[:8] + w for w in warm],
                fd_mtp.SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True),
                use_tqdm=False,
            )
            llm.engine.reset_prefix_cache()  # the warm-up's blocks do not help the chats
            turns, outputs[caching] = run_chats(llm, sys_ids, users, args.max_tokens, sizes, rates)
            provider = f"{mode}/{'cache' if caching else 'no-cache'}"
            results[provider] = turns
            cfg = f"chats={args.conversations} max_num_seqs={args.max_num_seqs} threads={args.threads}"
            for r in turns:
                x = r["turn"]
                rows.append(
                    row(
                        "prefix_cache",
                        provider,
                        x,
                        r["ttft_ms"],
                        metric="ttft",
                        unit="ms",
                        config=cfg,
                        stamp=stamp,
                    )
                )
                rows.append(
                    row(
                        "prefix_cache",
                        provider,
                        x,
                        [float(np.percentile(r["ttft_ms"], 99))],
                        metric="ttft_p99",
                        unit="ms",
                        config=cfg,
                        stamp=stamp,
                    )
                )
                for metric, unit, key in (
                    ("tokens_per_s", "tokens/s", "tokens_per_s"),
                    ("computed_tokens", "tokens", "computed"),
                    ("cached_tokens", "tokens", "cached"),
                    ("hit_rate", "ratio", "hit_rate"),
                    ("ttft_floor", "ms", "floor_ms"),
                ):
                    rows.append(
                        row(
                            "prefix_cache",
                            provider,
                            x,
                            [r[key]],
                            metric=metric,
                            unit=unit,
                            config=cfg,
                            stamp=stamp,
                        )
                    )
            del llm
        if args.check and outputs[True] != outputs[False]:
            raise SystemExit(f"{mode}: the outputs with and without the prefix cache differ")

    print()
    head = (
        f"{'provider':<18} {'turn':>4} {'TTFT p50 ms':>11} {'p99 ms':>8} {'floor ms':>8} "
        f"{'x floor':>7} {'computed':>8} {'cached':>7} {'hit rate':>8} {'tok/s':>8}"
    )
    print(head)
    print("-" * len(head))
    for provider, turns in results.items():
        for r in turns:
            p50 = float(np.median(r["ttft_ms"]))
            print(
                f"{provider:<18} {r['turn']:>4} {p50:>11.1f} {np.percentile(r['ttft_ms'], 99):>8.1f} "
                f"{r['floor_ms']:>8.2f} {p50 / max(r['floor_ms'], 1e-9):>7.1f} {r['computed']:>8} "
                f"{r['cached']:>7} {100 * r['hit_rate']:>7.1f}% {r['tokens_per_s']:>8.1f}"
            )
    if args.check:
        print("\ncheck: outputs with and without the prefix cache are equal, token for token")
    csv_path = write_csv(rows, out_dir / "bench_prefix_cache.csv")
    xs = list(range(1, args.turns + 1))
    providers = list(results)
    png = plot_bars(
        rows,
        out_dir / "bench_prefix_cache.png",
        [
            ("ttft", providers, "TTFT p50, ms", "time to first token"),
            ("tokens_per_s", providers, "output tokens/s", "throughput"),
        ],
        xs,
        xlabel="turn",
        title=f"prefix caching: {args.conversations} chats, system prompt {len(sys_ids)} tokens, "
        f"{args.threads} thread(s)",
    )
    print(f"wrote {csv_path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
