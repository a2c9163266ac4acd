"""Latency of the reference ERNIE-4.5 model's packed paged forward (CPU, Paddle ops).

Kernels (CSV column `kernel`, x = batch):
  decode[<arch>,ctx=C]    one decode step (1 token per request) over C cached tokens per request
  prefill[<arch>,len=C]   a batch of C-token prompts from an empty cache (only when batch * C <= 4096)
Providers:
  paged_forward   the whole main-model forward (embedding .. final norm), host sync included
  attention       the part of it spent in PagedAttentionCPU.forward, summed over layers
Backends (--backend): "kernel" (default: the fused C++ op fd_mtp.ops.paged_attention) or
"paddle_ops" (PagedAttentionCPU(use_kernel=False): cache write, block gather, masked softmax in
Paddle ops; its CSV is bench_model_paddle_ops.csv).
<arch> is "dense" or "moe" on a tiny config (hidden 64, 2 layers, 4 query / 2 kv heads, vocab 300;
MoE: 4 experts, top-2, 1 shared expert, layer 1). Block size 16, blocks of a request are not
contiguous. --refcheck asserts that every request's decode row equals the dense no-cache oracle
(`dense_forward`) within 1e-4 before timing.

Usage: python benchmarks/bench_model.py [--quick] [--refcheck] [--batches 1,8,32] [--ctx 64,512]
       [--backend kernel|paddle_ops] [--out DIR]
Writes DIR/bench_model.csv (bench_ops' columns) and DIR/bench_model.png.
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks", ROOT / "tests" / "model"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import paddle  # noqa: E402

import fd_mtp  # noqa: E402
from bench_ops import CSV_COLUMNS, percentiles  # noqa: E402
from model_util import PagedHarness, make_models  # noqa: E402

from fd_mtp.model.attention import PagedAttentionCPU  # noqa: E402


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


class AttnTimer:
    def __init__(self, backend):
        self.backend, self.orig, self.total = backend, backend.forward, 0.0
        backend.forward = self

    def __call__(self, *a, **k):
        t0 = time.perf_counter_ns()
        r = self.orig(*a, **k)
        self.total += time.perf_counter_ns() - t0
        return r


def measure(model, meta, warmup, iters):
    timer = model.attn_backend.forward
    total, attn = [], []
    for i in range(warmup + iters):
        timer.total = 0.0
        t0 = time.perf_counter_ns()
        model(meta.ids_remove_padding, meta).numpy()
        if i >= warmup:
            total.append((time.perf_counter_ns() - t0) / 1e3)
            attn.append(timer.total / 1e3)
    return np.array(total), np.array(attn)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--refcheck", action="store_true")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--ctx", default="64,512")
    p.add_argument("--backend", choices=("kernel", "paddle_ops"), default="kernel")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    warmup, iters = (2, 10) if args.quick else (5, 40)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rows = []
    rng = np.random.default_rng(0)
    with paddle.no_grad():
        for arch in ("dense", "moe"):
            cfg, model, _ = make_models(moe=arch == "moe", seed=0, num_nextn_predict_layers=0)
            model.attn_backend = PagedAttentionCPU(use_kernel=args.backend == "kernel")
            AttnTimer(model.attn_backend)
            for c in _ints(args.ctx):
                for b in _ints(args.batches):
                    nb = -(-(c + 1) // 16)
                    h = PagedHarness(cfg, model, max_num_seqs=b, block_size=16, num_blocks=b * nb + 1,
                                     max_blocks=nb, seed=c + b)
                    prompts = {s: rng.integers(3, cfg.vocab_size, c).tolist() for s in range(b)}
                    pre_meta = h.meta(prompts)
                    if b * c <= 4096:  # prefill rows only for moderate token counts (memory, time)
                        kernel = f"prefill[{arch},len={c}]"
                        for prov, t in zip(("paged_forward", "attention"),
                                           measure(model, pre_meta, 1, max(iters // 4, 3))):
                            rows.append((kernel, prov, b, t))
                    else:
                        model(pre_meta.ids_remove_padding, pre_meta)
                    h.lens = [c] * b
                    toks = {s: [int(rng.integers(3, cfg.vocab_size))] for s in range(b)}
                    meta = h.meta(toks)
                    if args.refcheck:
                        got = model(meta.ids_remove_padding, meta).numpy()
                        for s in range(b):
                            want = model.dense_forward(paddle.to_tensor(prompts[s] + toks[s])).numpy()[-1]
                            err = float(np.abs(got[s] - want).max())
                            assert err < 1e-4, f"{arch} ctx={c} batch={b} request {s}: error {err}"
                    kernel = f"decode[{arch},ctx={c}]"
                    for prov, t in zip(("paged_forward", "attention"), measure(model, meta, warmup, iters)):
                        rows.append((kernel, prov, b, t))
                    r = {pr: np.median(t) for k, pr, x, t in rows if k == kernel and x == b}
                    print(f"{kernel:<26} batch {b:>3}: forward {r['paged_forward'] / 1e3:8.2f} ms, attention "
                          f"{r['attention'] / 1e3:7.2f} ms ({100 * r['attention'] / r['paged_forward']:.0f}%)",
                          flush=True)
    cfg_txt = f"hidden=64;layers=2;heads=4/2;vocab=300;block_size=16;float32;threads=1;backend={args.backend}"
    suffix = "" if args.backend == "kernel" else f"_{args.backend}"
    csv_path = out / f"bench_model{suffix}.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for kernel, prov, x, t in rows:
            p50, p20, p80 = percentiles(t)
            w.writerow(dict(kernel=kernel, provider=prov, metric="latency", unit="us", x=x, p50=f"{p50:.1f}",
                            p20=f"{p20:.1f}", p80=f"{p80:.1f}", config=cfg_txt, device="cpu", timestamp=stamp,
                            version=fd_mtp.__version__))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"wrote {csv_path} (no matplotlib: no plot)")
        return
    kernels = sorted({k for k, *_ in rows if k.startswith("decode")})
    fig, ax = plt.subplots(figsize=(7, 4))
    for kernel in kernels:
        for prov, style in (("paged_forward", "-o"), ("attention", "--x")):
            pts = sorted((x, np.median(t) / 1e3) for k, pr, x, t in rows if k == kernel and pr == prov)
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=f"{kernel} {prov}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (decode requests)")
    ax.set_ylabel("ms per step (p50)")
    ax.set_title(f"ERNIE-4.5 tiny, paged forward on CPU ({args.backend})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    png_path = out / f"bench_model{suffix}.png"
    fig.savefig(png_path, dpi=120)
    print(f"wrote {csv_path} and {png_path}")


if __name__ == "__main__":
    main()
