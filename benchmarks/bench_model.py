"""Latency of the reference ERNIE-4.5 model's packed paged forward on the CPU, with the two attention
backends side by side in one run.

Backends (CSV column `provider`; --backend, default "both"):
  kernel      PagedAttentionCPU() (the default): the fused C++ op fd_mtp.ops.paged_attention
  paddle_ops  PagedAttentionCPU(use_kernel=False): cache write, block gather, masked softmax in
              Paddle ops
Kernels (CSV column `kernel`, x = batch):
  decode[<arch>,ctx=C]    one decode step (1 token per request) over C cached tokens per request
  prefill[<arch>,len=C]   a batch of C-token prompts from an empty cache (only when batch * C <= 4096)
Metrics (CSV column `metric`, unit us):
  forward_latency    the whole main-model forward (embedding .. final norm), host sync included
  attention_latency  the part of it spent in PagedAttentionCPU.forward, summed over layers
<arch> is "dense" or "moe" on fd_mtp.testing's tiny config (hidden 64, 2 layers, 4 query / 2 kv
heads, vocab 300; MoE: 4 experts, top-2, 1 shared expert, from layer 1) with random weights
(fd_mtp.testing.random_weights). Block size 16; a request's blocks are not contiguous. Both backends
run the same model, weights, prompts, block tables and KV cache (a prefill above 4096 tokens, not
timed, fills it once with the kernel). --refcheck first asserts that every request's
decode row of every backend equals the dense no-cache oracle (`dense_forward`) within 1e-4.

Usage: python benchmarks/bench_model.py [--backend both|kernel|paddle_ops] [--quick] [--refcheck]
       [--batches 1,8,32] [--ctx 64,512] [--out DIR]
Writes DIR/bench_model.csv (bench_ops.py's columns: kernel,provider,metric,unit,x,p50,p20,p80,config,
device,timestamp,version; one row per kernel, backend, metric and batch) and DIR/bench_model.png
(ms per forward and in attention per batch, one panel per kernel, one line per backend), and prints
the backends side by side. The full run takes about a minute on a 2-core CPU, --quick (fewer timed
iterations) about 20 s.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import paddle  # noqa: E402
from harness import percentiles, plot_panels, write_csv  # noqa: E402

import fd_mtp  # noqa: E402  (before paddle: MKL's CPU dispatch, see fd_mtp/__init__.py)
from fd_mtp.model import ForwardMeta, allocate_kv_caches  # noqa: E402
from fd_mtp.model.attention import PagedAttentionCPU  # noqa: E402
from fd_mtp.model.ernie import Ernie4_5ForCausalLM  # noqa: E402
from fd_mtp.model.loader import load_weights  # noqa: E402
from fd_mtp.testing import random_weights, tiny_config  # noqa: E402

BACKENDS = {"kernel": True, "paddle_ops": False}  # name -> PagedAttentionCPU(use_kernel=...)
METRICS = ("forward_latency", "attention_latency")
BLOCK_SIZE = 16
PREFILL_MAX_TOKENS = 4096  # prefill rows only up to this many tokens per forward (memory, time)


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def make_model(arch: str):
    """The tiny dense or MoE main model (no MTP block) with fd_mtp.testing's random weights."""
    cfg = tiny_config(
        num_nextn_predict_layers=0, **({"moe_num_experts": 4} if arch == "moe" else {})
    )
    model = Ernie4_5ForCausalLM(cfg)
    load_weights(model, random_weights(cfg, seed=0, mtp=False))
    model.eval()
    return cfg, model


def forward_meta(ids, cached: int, tables: np.ndarray, caches) -> ForwardMeta:
    """Every request of ``tables`` (one row each) runs ``ids[b]`` (all the same length) after ``cached``
    tokens already in the cache."""
    b = tables.shape[0]
    q = np.full(b, len(ids[0]), np.int32)
    dec = np.full(b, cached, np.int32)
    enc = q.copy() if cached == 0 else np.zeros(b, np.int32)
    t = paddle.to_tensor
    return ForwardMeta(
        ids_remove_padding=t(np.asarray(ids, np.int64).reshape(-1)),
        cu_seqlens_q=t(np.concatenate([[0], np.cumsum(q)]).astype(np.int32)),
        batch_id_per_token=t(np.repeat(np.arange(b), q).astype(np.int32)),
        seq_lens_this_time=t(q),
        seq_lens_encoder=t(enc),
        seq_lens_decoder=t(dec),
        block_tables=t(tables.astype(np.int32)),
        caches=caches,
        block_size=BLOCK_SIZE,
    )


class AttnTimer:
    """Wraps ``backend.forward`` and sums the time spent in it (``total``, ns)."""

    def __init__(self, backend):
        self.orig, self.total = backend.forward, 0.0
        backend.forward = self

    def __call__(self, *a, **k):
        t0 = time.perf_counter_ns()
        r = self.orig(*a, **k)
        self.total += time.perf_counter_ns() - t0
        return r


def measure(model, meta, warmup, iters):
    """us per forward and us in attention per forward, ``iters`` timed calls after ``warmup``."""
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


def plot(rows, backends, path):
    kernels = sorted(
        dict.fromkeys(r["kernel"] for r in rows), key=lambda k: not k.startswith("decode")
    )
    series = {
        f"{b} {m.split('_')[0]}": (lambda r, b=b, m=m: r["provider"] == b and r["metric"] == m)
        for b in backends
        for m in ("forward_latency", "attention_latency")
    }
    return plot_panels(
        rows,
        path,
        kernels,
        series=series,
        scale=1e3,
        xbase=2,
        cols=4,
        xlabel="batch (requests)",
        ylabel="ms per forward, p50 (p20-p80 bars)",
        title=f"fd_mtp {fd_mtp.__version__}: tiny ERNIE-4.5 paged forward on the CPU, "
        f"attention backends {' vs '.join(backends)}",
    )


def table(rows, backends) -> str:
    """One line per (kernel, batch): ms per forward (p50) and the attention share of every backend, and
    each other backend's time / the first backend's time."""
    by = {(r["kernel"], r["provider"], r["metric"], r["x"]): r["p50"] for r in rows}
    keys = sorted(
        dict.fromkeys((r["kernel"], r["x"]) for r in rows),  # run order, decode rows first
        key=lambda k: not k[0].startswith("decode"),
    )
    head = f"{'case':<24} {'batch':>5}" + "".join(f" {b + ' ms':>14} {'attn':>5}" for b in backends)
    if len(backends) > 1:
        head += "".join(f" {b + '/' + backends[0]:>20}" for b in backends[1:])
    lines = [head, "-" * len(head)]
    for kernel, x in keys:
        fwd = [by[(kernel, b, "forward_latency", x)] for b in backends]
        att = [by[(kernel, b, "attention_latency", x)] for b in backends]
        line = f"{kernel:<24} {x:>5}" + "".join(
            f" {f / 1e3:>14.2f} {100 * a / f:>4.0f}%" for f, a in zip(fwd, att)
        )
        line += "".join(f" {f / fwd[0]:>19.2f}x" for f in fwd[1:])
        lines.append(line)
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--backend",
        choices=("both", *BACKENDS),
        default="both",
        help="attention backend(s) to time (default: both, side by side)",
    )
    p.add_argument("--quick", action="store_true", help="fewer timed iterations")
    p.add_argument(
        "--refcheck",
        action="store_true",
        help="assert every backend's decode rows == the dense no-cache oracle before timing",
    )
    p.add_argument("--batches", default="1,8,32", help="comma-separated")
    p.add_argument(
        "--ctx",
        default="64,512",
        help="comma-separated cached tokens per request (decode) / prompt lengths (prefill)",
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)
    backends = list(BACKENDS) if args.backend == "both" else [args.backend]
    warmup, iters = (2, 10) if args.quick else (5, 40)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    rows = []

    def record(kernel, backend, batch, times, config):
        for metric, t in zip(METRICS, times):
            p50, p20, p80 = percentiles(t)
            rows.append(
                dict(
                    kernel=kernel,
                    provider=backend,
                    metric=metric,
                    unit="us",
                    x=batch,
                    p50=p50,
                    p20=p20,
                    p80=p80,
                    config=config,
                    device="cpu",
                    timestamp=stamp,
                    version=fd_mtp.__version__,
                )
            )

    rng = np.random.default_rng(0)
    with paddle.no_grad():
        for arch in ("dense", "moe"):
            cfg, model = make_model(arch)
            config = (
                f"{arch}: hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} heads="
                f"{cfg.num_attention_heads}/{cfg.num_key_value_heads} vocab={cfg.vocab_size} "
                f"block_size={BLOCK_SIZE} float32"
            )
            for c in _ints(args.ctx):
                for b in _ints(args.batches):
                    nb = -(
                        -(c + 1) // BLOCK_SIZE
                    )  # blocks per request: the prompt + the decode token
                    tables = (
                        np.random.default_rng(c + b).permutation(b * nb).reshape(b, nb)
                    )  # not contiguous
                    caches = allocate_kv_caches(
                        cfg, cfg.num_hidden_layers, b * nb, BLOCK_SIZE, "float32"
                    )
                    prompts = rng.integers(3, cfg.vocab_size, (b, c)).tolist()
                    toks = rng.integers(3, cfg.vocab_size, (b, 1)).tolist()
                    want = None
                    if args.refcheck:
                        want = [
                            model.dense_forward(paddle.to_tensor(prompts[s] + toks[s])).numpy()[-1]
                            for s in range(b)
                        ]
                    pre_meta = forward_meta(prompts, 0, tables, caches)
                    if (
                        b * c > PREFILL_MAX_TOKENS
                    ):  # fill the cache once, untimed, with the fast backend
                        model.attn_backend = PagedAttentionCPU(use_kernel=True)
                        model(pre_meta.ids_remove_padding, pre_meta)
                    for backend in backends:
                        model.attn_backend = PagedAttentionCPU(use_kernel=BACKENDS[backend])
                        AttnTimer(model.attn_backend)
                        if (
                            b * c <= PREFILL_MAX_TOKENS
                        ):  # writes the prompts' KV (the same values every time)
                            record(
                                f"prefill[{arch},len={c}]",
                                backend,
                                b,
                                measure(model, pre_meta, 1, max(iters // 4, 3)),
                                config,
                            )
                        meta = forward_meta(toks, c, tables, caches)
                        if want is not None:
                            got = model(meta.ids_remove_padding, meta).numpy()
                            for s in range(b):
                                err = float(np.abs(got[s] - want[s]).max())
                                assert err < 1e-4, (
                                    f"{backend}: {arch} ctx={c} batch={b} request {s}: error {err}"
                                )
                        fwd, attn = measure(model, meta, warmup, iters)
                        record(f"decode[{arch},ctx={c}]", backend, b, (fwd, attn), config)
                        print(
                            f"[{time.perf_counter() - t_start:6.1f}s] decode[{arch},ctx={c}] batch {b:>3} "
                            f"{backend:<10}: forward {np.median(fwd) / 1e3:7.2f} ms, attention "
                            f"{np.median(attn) / 1e3:7.2f} ms ({100 * np.median(attn) / np.median(fwd):.0f}%)",
                            flush=True,
                        )

    csv_path = write_csv(rows, out / "bench_model.csv", digits=1)
    print()
    print(table(rows, backends))
    try:
        png_path = out / "bench_model.png"
        plot(rows, backends, png_path)
        wrote = f"{csv_path} and {png_path}"
    except ImportError:
        wrote = f"{csv_path} (no matplotlib: no plot)"
    print(
        f"\nrefcheck: {'passed' if args.refcheck else 'not run'}; "
        f"total {time.perf_counter() - t_start:.1f}s; wrote {wrote}"
    )


if __name__ == "__main__":
    main()
