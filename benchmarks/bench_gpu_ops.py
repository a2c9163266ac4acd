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

Usage (needs CuPy, a GPU and the fd_mtp_cuda module: tools/gpu_check.sh builds it and runs this):
    python benchmarks/bench_gpu_ops.py [--quick] [--batches 1,64,256] [--ops a,b] [--out DIR]
                                       [--step-batches 8,64,256] [--no-step] [--simt]

--simt runs on the CPU emulator of the kernels instead (tools/simt, `make simt`): a smoke run,
its times say nothing about a GPU. Writes DIR/bench_gpu_ops.csv (columns kernel, provider,
metric, unit, x, p50, p20, p80, config, device, timestamp, version; x = batch) and, where
matplotlib is installed, DIR/bench_gpu_ops.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from harness import can_plot, percentiles, plot_panels, time_calls, timestamp, write_csv  # noqa: E402

DEFAULT_BATCHES = (1, 64, 256)
DEFAULT_STEP_BATCHES = (8, 64, 256)
MODES = ("deferred", "checked")


def use_simt():
    """The emulated module and the numpy CuPy stand-in, as tests/gpu/conftest.py sets them up."""
    if "cupy" in sys.modules and not getattr(sys.modules["cupy"], "SIMT_STANDIN", False):
        raise SystemExit("--simt: the real CuPy is already imported")
    sys.path.insert(0, str(ROOT / "tools" / "simt" / "python"))
    os.environ.setdefault("FD_MTP_CUDA_MODULE_DIR", str(ROOT / "build" / "simt" / "lib"))


def device_name(cp):
    if getattr(cp, "SIMT_STANDIN", False):
        return "simt (CPU emulator)"
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return f"cuda:{name.decode() if isinstance(name, bytes) else name}"


def cuda_ops():
    """BUILDERS entries whose op has a CUDA kernel (host ops excluded), in BUILDERS' order."""
    from fd_mtp import schema
    from fd_mtp.testing.op_inputs import BUILDERS

    names = []
    for name in BUILDERS:
        op = schema.all_ops().get(name.split("[")[0])
        if op is None or op.cuda:  # pre_process is no schema op; it runs on the device
            names.append(name)
    return names


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
    from fd_mtp.testing.op_inputs import BUILDERS

    rows = []
    for name in ops:
        for batch in batches:
            case = BUILDERS[name](batch)
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
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    if args.simt:
        use_simt()
    try:
        import cupy as cp

        import fd_mtp.cuda as fcuda

        if not getattr(cp, "SIMT_STANDIN", False) and cp.cuda.runtime.getDeviceCount() < 1:
            raise SystemExit("bench_gpu_ops: no CUDA device")
        fcuda.load()
    except ImportError as exc:
        raise SystemExit(f"bench_gpu_ops: needs CuPy and the fd_mtp_cuda module ({exc})") from None

    available = cuda_ops()
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] or available
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
    if not args.no_step:
        rows += bench_step(cp, _ints(args.step_batches), warmup, iters, device, stamp, log)
        kernels.append("step")

    csv_path = write_csv(rows, out / "bench_gpu_ops.csv")
    print(f"wrote {csv_path}")
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
