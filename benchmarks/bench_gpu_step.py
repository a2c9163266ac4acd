"""Device time of the spec step captured as CUDA graphs and replayed, beside the same step driven
op by op from Python, beside its goal (issue 35 §2): "1.5x the sum of its kernels' floors + 3 us
per kernel".

The step is fd_mtp.testing.gpu_step's (target side and one MTP substep: 16 ops in their
fixed-capacity forms, device not_need_stop flags, persistent outputs), split at the model's
forwards into segments, one graph each (fd_mtp/cuda/graph.py). Per batch (default 8 and 256;
V = 100,000 by default; K = 3, max_model_len 2048, hidden 1024 float32):

  provider       metric   what
  step-graph     device   CUDA events around the segments' graphs replayed back to back (the
                          forwards' gaps left out), median over --iters replays
  step-op-by-op  device   the same ops launched one by one from Python on the same buffers
                          (events around them: the device timeline, launch gaps included)
  step-graph / step-op-by-op   host   the host's wall time of the same, each ending in a sync
  step-floor     device   the sum over the ops of bytes moved (the model `op_bytes` below) over
                          the device-to-device copy bandwidth measured in the same run
  step-goal      device   1.5 x step-floor + 3 us x the kernels in the graphs (cudaGraphGetNodes)

Inputs are rotated over --sets buffer sets (one set of graphs each, so that at batch 8 the
vocabulary rows do not stay in L2) and restored from device copies before every timed replay,
outside the events (the ops write their arguments in place). After timing, check_pending()
confirms that the ops recorded no error.

Usage (needs CuPy, a CUDA GPU and the fd_mtp_cuda module; tools/gpu_check.sh runs it):
    python benchmarks/bench_gpu_step.py [--batches 8,256] [--vocab 100000] [--hidden 1024]
                                        [--iters 20] [--sets 3] [--out DIR] [--simt]
Without a GPU it refuses (exit 2). --simt runs the code paths on the CPU emulator instead
(tools/simt: a smoke run; kernel counts and floors arithmetic only, no device time). Writes
DIR/bench_gpu_step.csv (the harness's columns; x = batch) and, with matplotlib, DIR/bench_gpu_step.png.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import (  # noqa: E402
    can_plot,
    device_name,
    plot_bars,
    row,
    timestamp,
    use_simt,
    write_csv,
)

GOAL_FACTOR = 1.5  # x the sum of the floors
GOAL_US_PER_KERNEL = 3.0
COPY_BYTES = 1 << 30  # the bandwidth probe: a 1 GiB device-to-device copy

# ------------------------------------------------------------------------------------------
# The bytes-moved model: the fewest bytes each op of the step must read and write.
# ------------------------------------------------------------------------------------------
# [bsz, max_model_len] token histories: a step touches the K + 1 newest entries of a row.
HISTORIES = {"input_ids", "pre_ids", "pre_ids_all"}
# The step's host-known shape constants (fd_mtp.testing.op_inputs).
_K = 3


def op_bytes(name, case, outs=()):
    """Bytes op ``name`` must move on ``case`` (a fd_mtp.testing.op_inputs Case at the shapes
    the step runs) writing the persistent outputs ``outs`` (arrays or shapes with nbytes): every
    argument read once (history rows: K + 1 entries per request; the penalty op's pre_ids: each
    request's generated tokens, cur_len of them; the block tables and the free list: two
    entries per request), the arguments the op writes in place once more, the outputs once."""
    total = 0
    values = dict(zip(case.names, case.args))
    written = {case.names[i] for i in case.written}
    for n, a in values.items():
        if not isinstance(a, np.ndarray):
            continue
        if name == "speculate_get_token_penalty_multi_scores" and n == "pre_ids":
            b = int(np.asarray(values["cur_len"]).sum()) * a.itemsize
        elif n in HISTORIES and a.ndim == 2:
            b = a.shape[0] * min(a.shape[1], _K + 1) * a.itemsize
        elif n in ("block_tables", "free_list"):
            rows = values["stop_flags"].shape[0] if "stop_flags" in values else a.shape[0]
            b = min(a.nbytes, 2 * rows * a.itemsize)
        else:
            b = a.nbytes
        total += b * (2 if n in written else 1)
    return total + sum(int(o.nbytes) for o in outs)


def step_bytes(step, cases):
    """[(op name, bytes)] of a gpu_step.PersistentStep's ops on ``cases`` (its shapes)."""
    return [(name, op_bytes(name, case, outs)) for (name, case), outs in zip(cases, step.outputs)]


def goal_us(floor_us, kernels):
    """The goal of issue 35 §2: 1.5x the sum of the floors plus 3 us per kernel."""
    return GOAL_FACTOR * floor_us + GOAL_US_PER_KERNEL * kernels


def kernel_count(node_counts):
    """The kernels of a CapturedStep.node_counts() (memset nodes are counted as kernels too: a
    launch each in the graph)."""
    return sum(c["kernel"] + c["memset"] for c in node_counts)


# ------------------------------------------------------------------------------------------
# Measurement
# ------------------------------------------------------------------------------------------
def copy_bandwidth(cp, stream, iters=10):
    """Device-to-device copy bandwidth in bytes/s (read + write of a 1 GiB copy, median of
    ``iters``, CUDA events)."""
    n = COPY_BYTES // 4
    src = cp.ones(n, cp.float32)
    dst = cp.empty_like(src)
    times = []
    with stream:
        for _ in range(iters + 2):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            cp.copyto(dst, src)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    return 2 * src.nbytes / float(np.median(times[2:]))


class _Set:
    """One buffer set: a PersistentStep, its CapturedStep and device copies of its arrays."""

    def __init__(self, cp, cases):
        from fd_mtp.cuda.graph import CapturedStep
        from fd_mtp.testing.gpu_step import PersistentStep

        self.step = PersistentStep(cases)
        self.runner = CapturedStep(self.step.segments())
        self.cases = cases
        self.step.write(cases, self.runner.stream)
        for gap in self.step.gaps(cases):
            with self.runner.stream:
                gap()
        self.pristine = [(a, a.copy()) for _, a in self.step.arrays()]

    def restore(self, cp):
        with self.runner.stream:
            for a, copy in self.pristine:
                cp.copyto(a, copy)


def _timed(cp, stream, fn, device):
    """(device us or None, host us) of fn() on ``stream``, ending with a sync."""
    t0 = time.perf_counter_ns()
    if not device:
        fn()
        stream.synchronize()
        return None, (time.perf_counter_ns() - t0) / 1e3
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    fn()
    end.record(stream)
    end.synchronize()
    host = (time.perf_counter_ns() - t0) / 1e3
    return cp.cuda.get_elapsed_time(start, end) * 1e3, host


def bench_batch(cp, batch, vocab, hidden, iters, sets, bandwidth, device, stamp, log):
    import fd_mtp.cuda as fcuda
    from fd_mtp.testing.gpu_step import capacity_cases, step_cases

    on_gpu = not getattr(cp, "SIMT_STANDIN", False)
    t0 = time.perf_counter()
    variants = capacity_cases(
        [step_cases(batch, vocab, hidden, variant=n) for n in range(max(sets, 1))]
    )
    log(f"batch {batch}: inputs built ({time.perf_counter() - t0:.1f} s)")
    with fcuda.errors("deferred"):
        buffers = [_Set(cp, cases) for cases in variants]
        for s in buffers:
            s.runner.capture()  # warm-up run, check_pending, capture
            s.restore(cp)
        counts = buffers[0].runner.node_counts()
        kernels = kernel_count(counts)
        floor_bytes = step_bytes(buffers[0].step, variants[0])
        floor_us = sum(b for _, b in floor_bytes) / bandwidth * 1e6
        measured = {"step-graph": ([], []), "step-op-by-op": ([], [])}
        for i in range(iters + 2):
            for provider, (dev, host) in measured.items():
                s = buffers[i % len(buffers)]
                s.restore(cp)
                fn = s.runner.replay if provider == "step-graph" else s.runner.run_eager
                d, h = _timed(cp, s.runner.stream, fn, on_gpu)
                if i >= 2:  # two warm-up rounds
                    host.append(h)
                    if d is not None:
                        dev.append(d)
        for s in buffers:
            s.runner.check_pending()
    config = (
        f"V={vocab};H={hidden};K={_K};kernels={kernels};segments={len(counts)};"
        f"floor_bytes={sum(b for _, b in floor_bytes)};copy_GBps={bandwidth / 1e9:.0f};"
        f"sets={len(buffers)}"
    )

    rows = []
    for provider, (dev, host) in measured.items():
        if dev:
            rows.append(
                row(
                    "step",
                    provider,
                    batch,
                    dev,
                    metric="device",
                    config=config,
                    device=device,
                    stamp=stamp,
                )
            )
        rows.append(
            row(
                "step",
                provider,
                batch,
                host,
                metric="host",
                config=config,
                device=device,
                stamp=stamp,
            )
        )
    for provider, value in (("step-floor", floor_us), ("step-goal", goal_us(floor_us, kernels))):
        rows.append(
            row(
                "step",
                provider,
                batch,
                [value],
                metric="device",
                config=config,
                device=device,
                stamp=stamp,
            )
        )
    log(
        f"batch {batch}: {kernels} kernels in {len(counts)} graphs "
        f"({[c['kernel'] + c['memset'] for c in counts]}), floor {floor_us:.1f} us, goal "
        f"{goal_us(floor_us, kernels):.1f} us"
    )
    return rows, counts, floor_bytes


def _ints(text):
    return [int(v) for v in text.split(",") if v]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="8,256")
    p.add_argument("--vocab", type=int, default=100_000)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--sets", type=int, default=3, help="buffer sets the replays rotate over")
    p.add_argument("--simt", action="store_true", help="the CPU emulator: a smoke run")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    if args.simt:
        use_simt()
    try:
        import cupy as cp

        import fd_mtp.cuda as fcuda

        simt = getattr(cp, "SIMT_STANDIN", False)
        if not simt and cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        fcuda.load()
    except Exception as exc:  # noqa: BLE001 (ImportError, CUDA's errors: the same refusal)
        print(
            f"bench_gpu_step: needs CuPy, a CUDA GPU and the fd_mtp_cuda module ({exc}); "
            "no figures without a GPU (--simt: a smoke run on the CPU emulator)",
            file=sys.stderr,
        )
        return 2

    device = device_name(cp)
    stamp = timestamp()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

    print(f"device: {device}")
    stream = cp.cuda.Stream(non_blocking=True)
    if simt:
        bandwidth = 1e12  # not measured on the emulator: a placeholder unit for the arithmetic
        log("simt: device times and the copy bandwidth are not measured (1 TB/s assumed)")
    else:
        bandwidth = copy_bandwidth(cp, stream)
        log(f"device-to-device copy: {bandwidth / 1e9:.0f} GB/s")
    rows = []
    for batch in _ints(args.batches):
        r, _, _ = bench_batch(
            cp,
            batch,
            args.vocab,
            args.hidden,
            args.iters,
            args.sets,
            bandwidth,
            device,
            stamp,
            log,
        )
        rows += r
    csv_path = write_csv(rows, out / "bench_gpu_step.csv")
    print(f"wrote {csv_path}")
    print(f"\n{'batch':>6s} {'provider':>14s} {'metric':>7s} {'p50 us':>10s}  config")
    for r in rows:
        print(f"{r['x']:6d} {r['provider']:>14s} {r['metric']:>7s} {r['p50']:10.1f}  {r['config']}")
    for batch in _ints(args.batches):
        by = {(r["provider"], r["metric"]): r["p50"] for r in rows if r["x"] == batch}
        if ("step-graph", "device") in by:
            g, goal = by[("step-graph", "device")], by[("step-goal", "device")]
            verdict = "meets" if g <= goal else "misses"
            print(
                f"batch {batch}: replay {g:.1f} us vs goal {goal:.1f} us ({g / goal:.2f}x): {verdict}"
            )
    if not can_plot():
        print("matplotlib is not installed: no PNG (the CSV holds every figure)")
        return 0
    shown = ["step-graph", "step-op-by-op", "step-goal", "step-floor"]
    panels = [
        (
            "device",
            [s for s in shown if any(r["provider"] == s and r["metric"] == "device" for r in rows)],
            "device time p50 [us]",
            "device time (CUDA events)",
        ),
        (
            "host",
            ["step-graph", "step-op-by-op"],
            "host wall time p50 [us]",
            "host time, sync included",
        ),
    ]
    png = plot_bars(
        rows,
        out / "bench_gpu_step.png",
        panels,
        _ints(args.batches),
        title=f"fd_mtp spec step, captured vs op by op, V={args.vocab}, {device}",
    )
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
