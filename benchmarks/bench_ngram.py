"""Latency of fd_mtp's n-gram drafting ops (ngram_match, hybrid_mtp_ngram) against numpy.

Providers (CSV column `provider`):
  fd_mtp         our CPU op (the Paddle op on CPU tensors; without paddle, the same C++ CPU driver
                 through fd_mtp.cuda.*_host). One pass over the haystack per request (see
                 custom_ops/kernels/ngram.h).
  numpy_ref      fd_mtp.reference: the straightforward numpy version of the same search, one
                 vectorised window comparison per n (sliding_window_view), n from the largest
                 down, prompt then history, first usable window.
  cuda           (GPU only) fd_mtp.cuda on device arrays: check + search (one block per request)
                 + budget kernels, status read back; nothing else crosses the bus.
  cpu+copies     (GPU only) what FastDeploy does each step: copy the GPU tensors the CPU op reads
                 to the host (pre_ids, step_idx, draft_tokens, seq_lens_*, max_dec_len, ...; the
                 prompt haystack input_ids_cpu already lives on the host), run the CPU op, copy
                 draft_tokens and seq_lens_this_time (ngram_match: also seq_lens_encoder) back.

Workload per (op, batch, history H): every request decodes; H = prompt haystack (H/2 tokens) +
generated tokens (H/2, pre_ids); tokens uniform over a 32000 vocabulary (no accidental matches);
for half of the requests (random) the last g in 1..5 tokens plus a continuation are planted at a
random earlier place of the prompt or of the history, so half the requests find a match (at a
random depth) and half scan everything. max_ngram_size 5 (hybrid: min_ngram_size 2), K = 5
drafts (hybrid: 1 MTP draft present, q0 = 2). The threshold is set high (2^30) so that every
request searches: with FastDeploy's defaults (128 / 1024) large batches skip most requests.

Every timed call is the same call: draft_tokens and seq_lens_this_time (the only written
tensors) are restored before each call, outside the timed region. --refcheck compares every
provider's written tensors with numpy_ref's exactly, per case, before timing.

Usage:
    python benchmarks/bench_ngram.py [--refcheck] [--quick] [--batches 1,16,64,256]
                                     [--histories 1024,8192,32768] [--ops a,b] [--out DIR]

Writes DIR/bench_ngram.csv (columns kernel,provider,metric,unit,x,p50,p20,p80,config,device,
timestamp,version; kernel = "<op>[H=<history>]", x = batch) and DIR/bench_ngram.png.
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

from harness import can_plot, percentiles, plot_panels, time_calls, write_csv  # noqa: E402

import fd_mtp  # noqa: E402
import fd_mtp.reference as ref  # noqa: E402

OPS = ("ngram_match", "hybrid_mtp_ngram")
DEFAULT_BATCHES = (1, 16, 64, 256)
DEFAULT_HISTORIES = (1024, 8192, 32768)
# The batches come from the shared input factory (fd_mtp.testing.op_inputs.ngram_state).
from fd_mtp.testing.op_inputs import HYBRID_ORDER, NGRAM_ORDER  # noqa: E402
from fd_mtp.testing.op_inputs import NGRAM_THRESHOLD as THRESHOLD  # noqa: E402
from fd_mtp.testing.op_inputs import NGRAM_WRITTEN as WRITTEN  # noqa: E402
from fd_mtp.testing.op_inputs import ngram_state as build  # noqa: E402


def order_of(op):
    return HYBRID_ORDER if op == "hybrid_mtp_ngram" else NGRAM_ORDER


# ------------------------------------------------------------------------------------------------
# Providers: each is (call, reset, state) on its own copy of the arrays.
# ------------------------------------------------------------------------------------------------
class NumpyRef:
    name = "numpy_ref"

    def __init__(self, op, d, sizes):
        self.fn = getattr(ref, op)
        self.order = order_of(op)
        self.pristine = d
        self.args = {n: d[n].copy() for n in self.order}
        self.sizes = sizes

    def reset(self):
        for n in WRITTEN:
            np.copyto(self.args[n], self.pristine[n])

    def call(self):
        self.fn(*[self.args[n] for n in self.order], *self.sizes, threshold=THRESHOLD)

    def state(self):
        return {n: self.args[n].copy() for n in WRITTEN}


class PaddleOp(NumpyRef):
    name = "fd_mtp"

    def __init__(self, op, d, sizes):
        import paddle

        import fd_mtp.ops as ops

        super().__init__(op, d, sizes)
        self.fn = getattr(ops, op)
        cpu = paddle.CPUPlace()
        self.args = {n: paddle.to_tensor(d[n], place=cpu) for n in self.order}
        self.reset_src = {n: paddle.to_tensor(d[n], place=cpu) for n in WRITTEN}
        self._assign = paddle.assign

    def reset(self):
        for n in WRITTEN:
            self._assign(self.reset_src[n], output=self.args[n])

    def state(self):
        return {n: self.args[n].numpy() for n in WRITTEN}


class HostDriver(NumpyRef):
    """The same C++ CPU driver through the CUDA module (where paddle is absent)."""

    name = "fd_mtp"

    def __init__(self, op, d, sizes):
        import fd_mtp.cuda as fcuda

        super().__init__(op, d, sizes)
        self.fn = getattr(fcuda, op + "_host")


def cpu_provider():
    """The class that runs our CPU op here, and a note for the config column."""
    try:
        import fd_mtp.ops

        fd_mtp.ops.load()
        return PaddleOp, "paddle op"
    except ImportError as exc:
        try:
            import fd_mtp.cuda

            fd_mtp.cuda.load()
        except ImportError:
            raise SystemExit(f"neither the paddle op nor fd_mtp.cuda is usable: {exc}") from None
        print(f"note: paddle op unavailable ({exc}); timing the CPU driver through fd_mtp.cuda")
        return HostDriver, "CPU driver via fd_mtp_cuda"


def gpu_available():
    """None when CuPy, a device and fd_mtp.cuda are usable, else the reason."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        import fd_mtp.cuda

        fd_mtp.cuda.load()
    except Exception as exc:  # ImportError, CUDA runtime errors
        return f"{type(exc).__name__}: {exc}"
    return None


class CudaKernel:
    name = "cuda"

    def __init__(self, op, d, sizes):
        import cupy as cp

        import fd_mtp.cuda as fcuda

        self.cp = cp
        self.fn = getattr(fcuda, op)
        self.order = order_of(op)
        self.sizes = sizes
        self.args = {n: cp.asarray(d[n]) for n in self.order}
        self.reset_src = {n: cp.asarray(d[n]) for n in WRITTEN}

    def reset(self):
        for n in WRITTEN:
            self.cp.copyto(self.args[n], self.reset_src[n])
        self.cp.cuda.get_current_stream().synchronize()

    def call(self):
        self.fn(
            *[self.args[n] for n in self.order], *self.sizes, threshold=THRESHOLD
        )  # synchronises

    def state(self):
        return {n: self.cp.asnumpy(self.args[n]) for n in WRITTEN}


class CpuWithCopies(CudaKernel):
    """FastDeploy's pattern: device tensors -> host, CPU op, results -> device."""

    name = "cpu+copies"

    def __init__(self, op, d, sizes):
        super().__init__(op, d, sizes)
        import fd_mtp.cuda as fcuda

        self.host_fn = getattr(fcuda, op + "_host")
        self.prompt_host = d["input_ids"].copy()  # input_ids_cpu: a host tensor upstream
        self.back = ["draft_tokens", "seq_lens_this_time"]
        if op == "ngram_match":
            self.back.append("seq_lens_encoder")

    def call(self):
        cp = self.cp
        host = {
            n: (self.prompt_host if n == "input_ids" else cp.asnumpy(self.args[n]))
            for n in self.order
        }
        self.host_fn(*[host[n] for n in self.order], *self.sizes, threshold=THRESHOLD)
        for n in self.back:
            self.args[n].set(host[n])
        cp.cuda.get_current_stream().synchronize()


def check_same(got, expected, label):
    for n, e in expected.items():
        g = got[n]
        if g.shape != e.shape or g.dtype != e.dtype or not np.array_equal(g, e):
            bad = np.argwhere(g != e)[:5] if g.shape == e.shape else "shape"
            raise AssertionError(f"refcheck {label}: {n} differs from numpy_ref at {bad}")


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------
def _ints(text):
    return [int(v) for v in text.split(",") if v]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--refcheck", action="store_true", help="check every provider == numpy_ref exactly"
    )
    p.add_argument("--quick", action="store_true", help="fewer iterations")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    p.add_argument("--histories", default=",".join(map(str, DEFAULT_HISTORIES)))
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    batches, histories = _ints(args.batches), _ints(args.histories)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if any(o not in OPS for o in ops):
        p.error(f"unknown ops in {ops}; choose from {list(OPS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warmup, iters = (3, 20) if args.quick else (10, 100)
    ref_budget_s = 0.3 if args.quick else 2.0

    CpuOp, cpu_note = cpu_provider()
    gpu_reason = gpu_available()
    gpu_name = None
    if gpu_reason is None:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        gpu_name = (
            props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        )
        print(f"GPU: {gpu_name}: timing the CUDA kernels and the CPU op with its copies")
    else:
        print(f"note: no GPU part ({gpu_reason}); CPU providers only")

    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rows = []
    t_start = time.perf_counter()
    for op in ops:
        for history in histories:
            for batch in batches:
                kernel = f"{op}[H={history}]"
                label = f"{kernel} batch={batch}"
                print(f"[{time.perf_counter() - t_start:7.1f}s] {label} ...", flush=True)
                d, sizes, config = build(op, batch, history)
                numpy_ref = NumpyRef(op, d, sizes)
                providers = [CpuOp(op, d, sizes), numpy_ref]
                if gpu_reason is None:
                    providers += [CudaKernel(op, d, sizes), CpuWithCopies(op, d, sizes)]
                expected = None
                if args.refcheck:
                    numpy_ref.reset()
                    numpy_ref.call()
                    expected = numpy_ref.state()
                    drafted = int(np.sum(expected["seq_lens_this_time"] != d["seq_lens_this_time"]))
                    print(f"           refcheck: {drafted}/{batch} requests drafted", flush=True)
                for prov in providers:
                    if expected is not None and prov is not numpy_ref:
                        prov.reset()
                        prov.call()
                        check_same(prov.state(), expected, f"{label} {prov.name}")
                    n_warm, n_iter = warmup, iters
                    if prov is numpy_ref:  # size the slow reference's iteration count from one call
                        prov.reset()
                        t0 = time.perf_counter()
                        prov.call()
                        one = time.perf_counter() - t0
                        n_warm = 1
                        n_iter = int(
                            min(iters, max(3 if args.quick else 10, ref_budget_s / max(one, 1e-7)))
                        )
                    t, _ = time_calls(prov.call, prov.reset, n_warm, n_iter)
                    p50, p20, p80 = percentiles(t)
                    device = "cpu" if prov.name in ("fd_mtp", "numpy_ref") else f"cuda:{gpu_name}"
                    note = f";{cpu_note}" if prov.name == "fd_mtp" else ""
                    rows.append(
                        dict(
                            kernel=kernel,
                            provider=prov.name,
                            metric="latency",
                            unit="us",
                            x=batch,
                            p50=p50,
                            p20=p20,
                            p80=p80,
                            config=config + note,
                            device=device,
                            timestamp=stamp,
                            version=fd_mtp.__version__,
                        )
                    )

    csv_path = write_csv(rows, out / "bench_ngram.csv")
    kernels = [f"{op}[H={h}]" for op in ops for h in histories]
    png_path = "no PNG (matplotlib is not installed)"
    if can_plot():
        png_path = plot_panels(
            rows,
            out / "bench_ngram.png",
            kernels,
            title=f"fd_mtp {fd_mtp.__version__} n-gram drafting: ours vs numpy (and CUDA)",
        )

    by = {(r["kernel"], r["provider"], r["x"]): r for r in rows}
    gpu = gpu_reason is None
    print()
    head = f"{'kernel':<30} {'batch':>6} {'ours us':>11} {'numpy us':>12} {'speedup':>8}"
    if gpu:
        head += f" {'cuda us':>10} {'cpu+copies us':>14} {'gpu gain':>9}"
    print(head)
    for kernel in kernels:
        for batch in batches:
            a, b = by[(kernel, "fd_mtp", batch)], by[(kernel, "numpy_ref", batch)]
            line = f"{kernel:<30} {batch:>6} {a['p50']:>11.1f} {b['p50']:>12.1f} {b['p50'] / a['p50']:>7.1f}x"
            if gpu:
                c, e = by[(kernel, "cuda", batch)], by[(kernel, "cpu+copies", batch)]
                line += f" {c['p50']:>10.1f} {e['p50']:>14.1f} {e['p50'] / c['p50']:>8.1f}x"
            print(line)
    print(
        f"\nrefcheck: {'passed' if args.refcheck else 'not run'}; "
        f"total {time.perf_counter() - t_start:.1f}s; wrote {csv_path} and {png_path}"
    )


if __name__ == "__main__":
    main()
