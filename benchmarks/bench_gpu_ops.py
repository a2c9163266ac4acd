"""Latency of fd_mtp's CUDA ops (fd_mtp.cuda on CuPy): each op in the deferred error mode (no sync
per op: the status stays on the device) beside the checked mode (a sync and a status read after
the op), and one whole speculative step (target step + one MTP substep, fd_mtp.testing.gpu_step)
with FastDeploy's exact-shape contracts beside the fixed-capacity variants (one wait per step).

Providers (CSV column `provider`):
  cuda-deferred  fd_mtp.cuda in errors("deferred"); the timed region ends with a stream sync, so
                 it holds the launches and the kernels, not a status read;
  cuda-checked   fd_mtp.cuda in errors("checked"): the op syncs and reads its status itself;
  step-exact-deferred / step-exact-checked / step-padded   the whole step (kernel "step").

Inputs: fd_mtp.testing.op_inputs (the CPU benchmark's batches: K = 3, max_model_len 2048, mixed
decode / prefill / stopped requests, vocabularies of 32k and 100k), copied to the device once;
the written arguments are restored from device copies before every call, outside the timed
region. The step runs on fresh device copies each time (prepared outside the timed region).
After timing, check_pending() confirms that no deferred call reported an error.

Device time beside the bytes-moved floor (provider `device` and `floor`, metric device_time):
for every op with a CUDA kernel (and paged_attention, the logits gathers at V = 100k too), the
op's kernels between two CUDA events, each call after a 512 MiB copy that evicts the L2 (so the
inputs come from DRAM) and keeps the stream busy while the host enqueues it, median of the calls;
its floor is the fewest bytes the op must read and write (a model per op: `floor_bytes` in
benchmarks/gpu_floors.py) over the device-to-device copy bandwidth measured in the same run.
DIR/bench_gpu_floors.csv has kernel, batch, floor bytes, model, floor us, device us and their
ratio; the table is printed.
`--floors-only` prints the bytes-moved table without a GPU (the measured columns "not measured").

Usage (needs CuPy, a GPU and the fd_mtp_cuda module: tools/gpu_check.sh builds it and runs this):
    python benchmarks/bench_gpu_ops.py [--quick] [--batches 1,64,256] [--ops a,b] [--out DIR]
                                       [--step-batches 8,64,256] [--no-step] [--no-device]
                                       [--simt] [--floors-only]

--simt runs on the CPU emulator of the kernels instead (tools/simt, `make simt`): a smoke run,
its times say nothing about a GPU. Writes DIR/bench_gpu_ops.csv (columns kernel, provider,
metric, unit, x, p50, p20, p80, config, device, timestamp, version; x = batch) and, where
matplotlib is installed, DIR/bench_gpu_ops.png.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from gpu_floors import (  # noqa: E402,F401  (all_builders, PAGED: the tests reach them here)
    PAGED,
    all_builders,
    build_case,
    floor_bytes,
    floor_ops,
    floor_table,
    print_floor_table,
    write_floor_csv,
)
from harness import (  # noqa: E402
    can_plot,
    device_name,
    percentiles,
    plot_panels,
    time_calls,
    timestamp,
    use_simt,
    write_csv,
)

DEFAULT_BATCHES = (1, 64, 256)
NO_GPU = (
    "bench_gpu_ops: needs CuPy, a CUDA GPU and the fd_mtp_cuda module; without a GPU use"
    " --floors-only (the bytes-moved table) or --simt (the emulator smoke run)"
)
DEFAULT_STEP_BATCHES = (8, 64, 256)
MODES = ("deferred", "checked")


class OpCall:
    """One op on device copies of a Case; reset() restores its written arguments."""

    def __init__(self, cp, name, case):
        import fd_mtp.cuda as fcuda
        from fd_mtp.testing.gpu_step import device_args
        from fd_mtp.testing.op_inputs import STEADY_BUFFERS

        self.cp = cp
        self.op = name.split("[")[0]
        self.fn = getattr(fcuda, self.op)
        self.args, self.kwargs = device_args(self.op, case)
        self.restore = [
            (self.args[i], self.args[i].copy())
            for i in case.written
            if case.names[i] not in STEADY_BUFFERS
        ]

    def reset(self):
        for arr, pristine in self.restore:
            if isinstance(arr, np.ndarray):
                np.copyto(arr, pristine)
            else:
                self.cp.copyto(arr, pristine)
        self.cp.cuda.get_current_stream().synchronize()

    def call(self):
        self.fn(*self.args, **self.kwargs)
        self.cp.cuda.get_current_stream().synchronize()


def bench_ops(cp, ops, batches, warmup, iters, device, stamp, log):
    import fd_mtp
    import fd_mtp.cuda as fcuda

    rows = []
    for name in ops:
        for batch in batches:
            case = build_case(name, batch)
            for mode in MODES:
                log(f"{name} batch={batch} {mode}")
                with fcuda.errors(mode):
                    op = OpCall(cp, name, case)
                    t, _ = time_calls(op.call, op.reset, warmup, iters)
                    fcuda.check_pending()  # a deferred error would raise here
                p50, p20, p80 = percentiles(t)
                rows.append(
                    dict(
                        kernel=name,
                        provider=f"cuda-{mode}",
                        metric="latency",
                        unit="us",
                        x=batch,
                        p50=p50,
                        p20=p20,
                        p80=p80,
                        config=case.config,
                        device=device,
                        timestamp=stamp,
                        version=fd_mtp.__version__,
                    )
                )
    return rows


def bench_step(cp, batches, warmup, iters, device, stamp, log):
    """The whole step: exact shapes (deferred, checked) and the fixed-capacity variants."""
    import fd_mtp
    import fd_mtp.cuda as fcuda
    from fd_mtp.testing.gpu_step import (
        STEP_HIDDEN,
        STEP_VOCAB,
        padded_step,
        prepare_step,
        step_cases,
    )
    from fd_mtp.testing.gpu_step import run_step as run

    forms = {
        "step-exact-deferred": ("deferred", prepare_step),
        "step-exact-checked": ("checked", prepare_step),
        "step-padded": ("deferred", lambda cases: padded_step(cases)[0]),
    }
    rows = []
    for batch in batches:
        cases = step_cases(batch)
        for provider, (mode, prepare) in forms.items():
            log(f"step batch={batch} {provider}")
            times = []
            with fcuda.errors(mode):
                for i in range(warmup + iters):
                    prepared = prepare(cases)
                    cp.cuda.get_current_stream().synchronize()
                    t0 = time.perf_counter_ns()
                    run(prepared)
                    fcuda.check_pending()  # the step's one wait (its errors)
                    cp.cuda.get_current_stream().synchronize()
                    if i >= warmup:
                        times.append((time.perf_counter_ns() - t0) / 1e3)
            p50, p20, p80 = percentiles(times)
            rows.append(
                dict(
                    kernel="step",
                    provider=provider,
                    metric="latency",
                    unit="us",
                    x=batch,
                    p50=p50,
                    p20=p20,
                    p80=p80,
                    config=f"ops={len(cases)};V={STEP_VOCAB};H={STEP_HIDDEN};float32",
                    device=device,
                    timestamp=stamp,
                    version=fd_mtp.__version__,
                )
            )
    return rows


# ------------------------------------------------------------------------------------------------
# Device times (the cases and their bytes-moved floors: gpu_floors.py)
# ------------------------------------------------------------------------------------------------
def copy_bandwidth(cp, nbytes=1 << 29, iters=20):
    """Device-to-device copy bandwidth (bytes read + written per second, median of `iters`
    cudaMemcpyAsync copies of `nbytes`, CUDA events)."""
    src = cp.zeros(nbytes // 4, cp.float32)
    dst = cp.empty_like(src)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(iters + 2):
        start.record()
        dst[...] = src
        end.record()
        end.synchronize()
        if i >= 2:
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * nbytes / float(np.median(times))


def bench_device(cp, names, batches, iters, device, stamp, log):
    """Device time per op call: the op's kernels between two CUDA events, after a 512 MiB copy
    that evicts the L2 (the inputs come from DRAM, as in a step) and keeps the stream busy while
    the host enqueues the call; median of `iters`. Written arguments are restored before the
    flush, outside the events. Returns (rows for the CSV, table entries)."""
    import fd_mtp
    import fd_mtp.cuda as fcuda

    bw = copy_bandwidth(cp)
    log(f"device-to-device copy: {bw / 1e9:.0f} GB/s (read + write)")
    flush_src = cp.zeros(1 << 27, cp.float32)  # 512 MiB
    flush_dst = cp.empty_like(flush_src)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    rows, table = [], []
    for name in names:
        for batch in batches:
            case = build_case(name, batch)
            fb, model = floor_bytes(name, case)
            log(f"{name} batch={batch} device time")
            with fcuda.errors("deferred"):
                op = OpCall(cp, name, case)
                times, slow_host = [], 0
                for i in range(iters + 3):
                    op.reset()
                    flush_dst[...] = flush_src
                    start.record()
                    t0 = time.perf_counter()
                    op.fn(*op.args, **op.kwargs)
                    host = time.perf_counter() - t0
                    end.record()
                    end.synchronize()
                    if i >= 3:
                        times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
                        slow_host += host * 1e6 > 200  # the flush covers about 250 us on an H200
                fcuda.check_pending()
            if slow_host:
                log(f"  warning: {slow_host} of {iters} enqueues took over 200 us (may be counted)")
            p50, p20, p80 = percentiles(times)
            floor_us = fb / bw * 1e6
            common = dict(
                kernel=name,
                metric="device_time",
                unit="us",
                x=batch,
                config=f"{case.config};floor_bytes={fb};copy_GBps={bw / 1e9:.0f}",
                device=device,
                timestamp=stamp,
                version=fd_mtp.__version__,
            )
            rows.append(dict(common, provider="device", p50=p50, p20=p20, p80=p80))
            rows.append(dict(common, provider="floor", p50=floor_us, p20=floor_us, p80=floor_us))
            table.append((name, batch, fb, model, floor_us, p50, p50 / floor_us))
    return rows, table, bw


def _op_names(text):
    """Comma-separated op names; commas inside a variant's brackets stay in its name."""
    return [m.strip() for m in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text) if m.strip()]


def _ints(text):
    return [int(v) for v in text.split(",") if v]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer iterations")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    p.add_argument(
        "--ops", default="", help="comma-separated BUILDERS names (default: all CUDA ops)"
    )
    p.add_argument("--step-batches", default=",".join(map(str, DEFAULT_STEP_BATCHES)))
    p.add_argument("--no-step", action="store_true", help="per-op rows only")
    p.add_argument("--simt", action="store_true", help="run on the CPU emulator (a smoke run)")
    p.add_argument(
        "--no-device", action="store_true", help="no device-time / floor rows (host latency only)"
    )
    p.add_argument(
        "--floors-only",
        action="store_true",
        help="print the bytes-moved floors (no GPU needed; measured columns: not measured)",
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    if args.floors_only:
        names = _op_names(args.ops) or floor_ops()
        table = floor_table(names, _ints(args.batches))
        print_floor_table(table)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = write_floor_csv(table, out / "bench_gpu_floors.csv", "not measured", timestamp())
        print(f"wrote {path}")
        return 0
    if args.simt:
        use_simt()
    try:
        import cupy as cp

        import fd_mtp.cuda as fcuda

        if not getattr(cp, "SIMT_STANDIN", False) and cp.cuda.runtime.getDeviceCount() < 1:
            raise SystemExit(NO_GPU + " (no CUDA device)")
        fcuda.load()
    except ImportError as exc:
        raise SystemExit(f"{NO_GPU} ({exc})") from None
    except Exception as exc:  # CuPy without a driver raises CUDARuntimeError
        if type(exc).__name__ != "CUDARuntimeError":
            raise
        raise SystemExit(f"{NO_GPU} ({exc})") from None

    available = floor_ops()
    ops = _op_names(args.ops) or available
    unknown = [o for o in ops if o not in available]
    if unknown:
        p.error(f"unknown or host-only ops {unknown}; choose from {available}")
    warmup, iters = (2, 10) if args.quick else (10, 100)
    device = device_name(cp)
    stamp = timestamp()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", flush=True)

    print(f"device: {device}")
    rows = bench_ops(cp, ops, _ints(args.batches), warmup, iters, device, stamp, log)
    kernels = list(ops)
    table = []
    if not args.no_device and not getattr(cp, "SIMT_STANDIN", False):
        names = list(ops)
        device_rows, table, bw = bench_device(
            cp, names, _ints(args.batches), 10 if args.quick else 100, device, stamp, log
        )
        rows += device_rows
        kernels += [n for n in names if n not in kernels]
    if not args.no_step:
        rows += bench_step(cp, _ints(args.step_batches), warmup, iters, device, stamp, log)
        kernels.append("step")

    csv_path = write_csv(rows, out / "bench_gpu_ops.csv")
    print(f"wrote {csv_path}")
    if table:
        print_floor_table(table, bw)
        print(f"wrote {write_floor_csv(table, out / 'bench_gpu_floors.csv', device, stamp)}")
    print(f"\n{'kernel':50s} {'batch':>6s} {'provider':>20s} {'p50 us':>10s}")
    for r in rows:
        print(f"{r['kernel']:50s} {r['x']:6d} {r['provider']:>20s} {r['p50']:10.1f}")
    if not can_plot():
        print("matplotlib is not installed: no PNG (the CSV holds every figure)")
        return 0
    png = plot_panels(
        rows, out / "bench_gpu_ops.png", kernels, title=f"fd_mtp CUDA ops, {device}", cols=4
    )
    print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
