"""Beyond one process: tensor parallelism TP=1 vs TP=2 (tokens/s) and the prefill / decode
hand-off cost per request (bytes of KV moved, milliseconds on each side), on the CPU.

TP runs the same greedy requests with ``fd_mtp.LLM(..., tensor_parallel_size=N)`` (N worker
processes, gloo on 127.0.0.1; TP=1 is the single-process engine), plain and MTP, and checks that
TP=2 emits TP=1's tokens. On a CPU, and on the shared 2-core machines this project runs on, TP=2 is
not a speed-up: both ranks compete for the same cores and every layer adds two gloo all-reduces
over loopback TCP; the figure is honest, not a promise. PD runs `fd_mtp.distributed.pd.PDCluster`
over prompts of several lengths and reports, per handed-off request, the KV bytes (every target
layer and the MTP layer, whole blocks), the prefill side's time to gather and publish them and the
decode side's time to attach, copy and insert.

    python benchmarks/bench_distributed.py            # demo model, CSV + PNG in benchmarks/results
    python benchmarks/bench_distributed.py --quick

CSV rows as every benchmark (harness.py): kernel ``tp`` (metric tokens_per_s, x = batch, provider
``tp1-plain`` / ``tp2-plain`` / ``tp1-mtp`` / ``tp2-mtp``) and kernel ``pd_handoff`` (metrics
``bytes`` / ``prefill_ms`` / ``decode_ms``, x = prompt length, provider ``plain`` / ``mtp``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness import plot_bars, row, timestamp, write_csv  # noqa: E402

MTP = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
BLOCK_SIZE = 16


def _prompts(n: int, length: int, vocab: int) -> list[list[int]]:
    return [[(7 + 31 * i + 17 * j) % (vocab - 10) + 5 for j in range(length)] for i in range(n)]


def bench_tp(model, batches, max_tokens, repeats, degrees, stamp, device, check):
    import fd_mtp
    from fd_mtp.model.config import ErnieConfig

    vocab = ErnieConfig.from_file(Path(model) / "config.json").vocab_size
    rows, tokens_of = [], {}
    for mode, spec in (("plain", None), ("mtp", MTP)):
        for n in degrees:
            llm = fd_mtp.LLM(
                str(model),
                device=device,
                max_num_seqs=max(batches),
                max_model_len=32 + max_tokens + 8,
                block_size=BLOCK_SIZE,
                speculative_config=spec,
                tensor_parallel_size=n,
            )
            try:
                params = fd_mtp.SamplingParams(
                    temperature=0, max_tokens=max_tokens, ignore_eos=True
                )
                llm.generate(_prompts(1, 16, vocab), params, use_tqdm=False)  # warm-up
                for b in batches:
                    prompts = _prompts(b, 32, vocab)
                    rates = []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        outs = llm.generate(prompts, params, use_tqdm=False)
                        dt = time.perf_counter() - t0
                        rates.append(sum(len(o.token_ids) for o in outs) / dt)
                    tokens_of[(mode, n, b)] = [o.token_ids for o in outs]
                    rows.append(
                        row(
                            "tp",
                            f"tp{n}-{mode}",
                            b,
                            rates,
                            metric="tokens_per_s",
                            unit="tokens/s",
                            config=f"max_tokens={max_tokens} prompt=32 repeats={repeats}",
                            device=device,
                            stamp=stamp,
                        )
                    )
                    print(f"tp={n} {mode:5s} batch={b:3d}: {rows[-1]['p50']:8.1f} tokens/s")
            finally:
                llm.close()
    if check:
        for (mode, n, b), toks in tokens_of.items():
            if toks != tokens_of[(mode, 1, b)]:
                raise SystemExit(f"--check: TP={n} {mode} batch {b} differs from TP=1")
        print("check: TP=N tokens == TP=1 tokens")
    return rows


def bench_pd(model, lengths, per_length, stamp, device):
    from fd_mtp import SamplingParams
    from fd_mtp.distributed.pd import PDCluster
    from fd_mtp.model.config import ErnieConfig

    vocab = ErnieConfig.from_file(Path(model) / "config.json").vocab_size
    rows = []
    for mode, spec in (("plain", None), ("mtp", MTP)):
        pd = PDCluster(
            model,
            speculative_config=spec,
            max_num_seqs=4,
            max_model_len=max(lengths) + 16,
            block_size=BLOCK_SIZE,
            device=device,
        )
        try:
            params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
            pd.generate(_prompts(1, 8, vocab), params)  # warm-up
            for length in lengths:
                pd.handoff_costs.clear()
                pd.generate(_prompts(per_length, length, vocab), params)
                costs = list(pd.handoff_costs)
                cfg = f"block_size={BLOCK_SIZE} requests={per_length}"
                for metric, unit, key, scale in (
                    ("bytes", "bytes", "bytes", 1.0),
                    ("prefill_ms", "ms", "prefill_s", 1e3),
                    ("decode_ms", "ms", "decode_s", 1e3),
                ):
                    rows.append(
                        row(
                            "pd_handoff",
                            mode,
                            length,
                            [c[key] * scale for c in costs],
                            metric=metric,
                            unit=unit,
                            config=cfg,
                            device=device,
                            stamp=stamp,
                        )
                    )
                b, p, d = (rows[-3]["p50"], rows[-2]["p50"], rows[-1]["p50"])
                print(
                    f"pd {mode:5s} prompt={length:4d}: {b / 1024:8.1f} KiB/request, "
                    f"prefill side {p:6.2f} ms, decode side {d:6.2f} ms"
                )
        finally:
            pd.close()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint directory (default: the demo model)")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--degrees", default="1,2", help="tensor-parallel degrees to compare")
    p.add_argument("--pd-lengths", default="16,64,256")
    p.add_argument("--pd-requests", type=int, default=4, help="hand-offs measured per length")
    p.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    p.add_argument("--check", action="store_true", help="TP=N tokens must equal TP=1's")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)
    if args.quick:
        args.batches, args.max_tokens, args.repeats = "1,4", 12, 1
        args.pd_lengths, args.pd_requests = "16,48", 2
    from fd_mtp.assets import default_model_path

    model = Path(args.model) if args.model else default_model_path()
    batches = [int(b) for b in args.batches.split(",") if b]
    degrees = [int(d) for d in args.degrees.split(",") if d]
    lengths = [int(n) for n in args.pd_lengths.split(",") if n]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = timestamp()
    rows = bench_tp(
        model, batches, args.max_tokens, args.repeats, degrees, stamp, args.device, args.check
    )
    rows += bench_pd(model, lengths, args.pd_requests, stamp, args.device)
    csv_path = write_csv(rows, out / "bench_distributed.csv")
    providers = [f"tp{n}-{m}" for m in ("plain", "mtp") for n in degrees]
    plot_bars(
        [r for r in rows if r["kernel"] == "tp"],
        out / "bench_distributed_tp.png",
        [("tokens_per_s", providers, "tokens/s (p50, p20-p80)", "TP=N on CPU (gloo)")],
        batches,
        title=f"fd_mtp TP on {args.device}, {model.name} (ranks share the cores)",
        title_fontsize=9,
    )
    plot_bars(
        [r for r in rows if r["kernel"] == "pd_handoff"],
        out / "bench_distributed_pd.png",
        [
            ("bytes", ["plain", "mtp"], "KV bytes per request", "KV moved"),
            ("prefill_ms", ["plain", "mtp"], "ms per request", "prefill side: gather + publish"),
            (
                "decode_ms",
                ["plain", "mtp"],
                "ms per request",
                "decode side: attach + copy + insert",
            ),
        ],
        lengths,
        xlabel="prompt length",
        title=f"fd_mtp PD hand-off per request ({model.name}, block size {BLOCK_SIZE})",
        title_fontsize=9,
    )
    print(
        f"wrote {csv_path}, {out / 'bench_distributed_tp.png'}, {out / 'bench_distributed_pd.png'}"
    )
    return rows


if __name__ == "__main__":
    main()
