"""End-to-end plain-decoding throughput of fd_mtp's engine (``fd_mtp.LLM``) on a tiny random checkpoint.

For each batch size B: an LLM with ``max_num_seqs = B`` on a checkpoint written by
``fd_mtp.testing.write_random_checkpoint`` (default tiny config: hidden 64, 2 layers, vocab 300;
``--hidden``/``--layers``/``--vocab`` make it larger), B random prompts of ``--prompt-len`` tokens,
greedy decoding of ``--max-tokens`` tokens each (EOS ignored, so every request runs to the end).
One warm-up generate, then ``--repeats`` timed ones; reports p50 / p20 / p80 of

* ``throughput`` [tokens/s]: generated tokens / wall time of ``generate`` (prefill included),
* ``step_latency`` [ms]: wall time / engine steps.

``--check`` asserts before timing that every request's tokens equal the batch-1 run of the same
prompt (batching must not change greedy output).

Usage:
    python benchmarks/bench_e2e.py [--batches 1,8,32] [--quick] [--check] [--device cpu] [--out DIR]

Writes DIR/bench_e2e.csv (bench_ops.py's columns: kernel,provider,metric,unit,x,p50,p20,p80,config,
device,timestamp,version) and DIR/bench_e2e.png (tokens/s vs batch).
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fd_mtp  # noqa: E402

CSV_COLUMNS = ["kernel", "provider", "metric", "unit", "x", "p50", "p20", "p80", "config", "device",
               "timestamp", "version"]  # fmt: skip


def percentiles(values):
    a = np.asarray(values, dtype=np.float64)
    return float(np.percentile(a, 50)), float(np.percentile(a, 20)), float(np.percentile(a, 80))


def run_once(llm, prompts, params):
    steps0 = llm.engine.num_steps
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    return outs, elapsed, tokens, llm.engine.num_steps - steps0


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("throughput", "step_latency")):
        pts = sorted((r["x"], r["p50"], r["p20"], r["p80"], r["unit"]) for r in rows if r["metric"] == metric)
        if not pts:
            continue
        x, p50, p20, p80 = (np.array(v, dtype=np.float64) for v in list(zip(*pts))[:4])
        ax.errorbar(x, p50, yerr=[p50 - p20, p80 - p50], fmt="o-", capsize=3, label="fd_mtp plain decoding")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(int(v)) for v in x])
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"{metric} p50 [{pts[0][4]}] (p20-p80 bars)")
        ax.set_title(f"{metric} ({rows[0]['device']})", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(rows[0]["config"], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="1,8,32", help="comma-separated")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="2 repeats, 32 new tokens")
    p.add_argument("--check", action="store_true", help="assert batched greedy output == batch-1 output")
    p.add_argument("--hidden", type=int, default=None, help="hidden size override (default: the tiny config)")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--checkpoint", default=None, help="use this checkpoint instead of a random one")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.max_tokens = 2, min(args.max_tokens, 32)
    batches = [int(b) for b in args.batches.split(",") if b]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from fd_mtp.testing import write_random_checkpoint

    if args.checkpoint is None:
        overrides = {k: v for k, v in (("hidden_size", args.hidden), ("num_hidden_layers", args.layers),
                                       ("vocab_size", args.vocab)) if v is not None}
        if args.hidden is not None:
            overrides["intermediate_size"] = 2 * args.hidden
        ckpt = write_random_checkpoint(tempfile.mkdtemp(prefix="fd_mtp_bench_"), seed=0, **overrides)
    else:
        ckpt = Path(args.checkpoint)
    max_model_len = args.prompt_len + args.max_tokens + 1
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rng = np.random.default_rng(0)
    rows, config = [], None
    single: dict[int, list[int]] = {}
    all_prompts = None
    for batch in batches:
        llm = fd_mtp.LLM(str(ckpt), device=args.device, max_num_seqs=batch, max_model_len=max_model_len,
                         block_size=64)
        cfg = llm.model.config
        if all_prompts is None:
            all_prompts = [rng.integers(3, cfg.vocab_size, size=args.prompt_len).tolist() for _ in range(max(batches))]
        config = (f"hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} heads={cfg.num_attention_heads}/"
                  f"{cfg.num_key_value_heads} vocab={cfg.vocab_size} prompt={args.prompt_len} "
                  f"new_tokens={args.max_tokens} greedy block_size=64")
        prompts = all_prompts[:batch]
        params = fd_mtp.SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
        outs, _, _, _ = run_once(llm, prompts, params)  # warm-up
        if args.check:
            if not single:
                one = fd_mtp.LLM(str(ckpt), device=args.device, max_num_seqs=1, max_model_len=max_model_len)
                for i, pr in enumerate(all_prompts):
                    single[i] = one.generate([pr], params, use_tqdm=False)[0].token_ids
            for i, o in enumerate(outs):
                if o.token_ids != single[i]:
                    raise AssertionError(f"batch {batch}: request {i} differs from its batch-1 output")
        tps, lat = [], []
        for _ in range(args.repeats):
            _, elapsed, tokens, steps = run_once(llm, prompts, params)
            tps.append(tokens / elapsed)
            lat.append(1e3 * elapsed / steps)
        for metric, unit, vals in (("throughput", "tokens/s", tps), ("step_latency", "ms", lat)):
            p50, p20, p80 = percentiles(vals)
            rows.append(dict(kernel="e2e_plain_decoding", provider="fd_mtp", metric=metric, unit=unit, x=batch,
                             p50=p50, p20=p20, p80=p80, config=config, device=args.device, timestamp=stamp,
                             version=fd_mtp.__version__))
        print(f"batch {batch:>4}: {percentiles(tps)[0]:10.1f} tokens/s   {percentiles(lat)[0]:8.2f} ms/step",
              flush=True)

    csv_path = out / "bench_e2e.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**r, **{k: f"{r[k]:.3f}" for k in ("p50", "p20", "p80")}})
    png_path = out / "bench_e2e.png"
    plot(rows, png_path)
    print(f"{config}\ncheck: {'passed' if args.check else 'not run'}; wrote {csv_path} and {png_path}")


if __name__ == "__main__":
    main()
