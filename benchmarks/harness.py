"""The one benchmark harness of fd_mtp's benchmarks: timing, percentiles, Liger-style CSV rows
(kernel, provider, metric, unit, x, p50, p20, p80, config, device, timestamp, version) and the
p50-with-p20..p80-bars PNG panels (log-log lines: plot_panels; grouped bars: plot_bars).
bench_ops.py, bench_ngram.py, bench_model.py and bench_e2e.py use it."""

from __future__ import annotations

import csv
import datetime as _dt
import os
import sys
import time
from pathlib import Path

import numpy as np

CSV_COLUMNS = [
    "kernel",
    "provider",
    "metric",
    "unit",
    "x",
    "p50",
    "p20",
    "p80",
    "config",
    "device",
    "timestamp",
    "version",
]
STYLES = ("o-", "s--", "^-", "v:", "x-.", "d-")
ROOT = Path(__file__).resolve().parents[1]


def timestamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def time_calls(call, reset, warmup, iters):
    """Microseconds of ``iters`` calls of ``call()`` after ``warmup`` calls; ``reset()`` runs
    before every call, outside the timed region. Returns (times, the last call's result)."""
    clock = time.perf_counter_ns
    result = None
    for _ in range(warmup):
        reset()
        result = call()
    times = np.empty(iters)
    for i in range(iters):
        reset()
        t0 = clock()
        result = call()
        times[i] = clock() - t0
    return times / 1e3, result


def percentiles(values):
    """(p50, p20, p80) of ``values``."""
    p20, p50, p80 = np.percentile(np.asarray(values, dtype=float), [20, 50, 80])
    return float(p50), float(p20), float(p80)


def row(
    kernel, provider, x, values, *, metric="latency", unit="us", config="", device="cpu", stamp=None
):
    """One CSV row from raw measurements ``values`` (their p50 / p20 / p80)."""
    import fd_mtp

    p50, p20, p80 = percentiles(values)
    return dict(
        kernel=kernel,
        provider=provider,
        metric=metric,
        unit=unit,
        x=x,
        p50=p50,
        p20=p20,
        p80=p80,
        config=config,
        device=device,
        timestamp=stamp or timestamp(),
        version=fd_mtp.__version__,
    )


def write_csv(rows, path: Path, digits: int = 3) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**r, **{k: f"{r[k]:.{digits}f}" for k in ("p50", "p20", "p80")}})
    return path


def can_plot() -> bool:
    """Whether matplotlib is importable. It is a dependency of fd_mtp's benchmarks, but a GPU
    machine without network may lack it: the benchmarks that run there (bench_ngram,
    bench_gpu_ops) then write their CSV and skip the PNG."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_panels(
    rows,
    path: Path,
    kernels,
    *,
    title,
    xlabel="batch size",
    ylabel="latency p50 [us] (p20-p80 bars)",
    series=None,
    scale=1.0,
    xbase=10,
    cols=3,
):
    """One log-log panel per kernel; one line per series: ``series`` maps a label to a row filter
    (default: one series per provider). ``scale`` divides the values (e.g. 1e3: us -> ms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if series is None:
        providers = list(dict.fromkeys(r["provider"] for r in rows))
        series = {p: (lambda r, p=p: r["provider"] == p) for p in providers}
    n = len(kernels)
    cols = min(cols, n)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.8 * nrows), squeeze=False)
    for ax, kernel in zip(axes.ravel(), kernels):
        for (label, keep), style in zip(series.items(), STYLES * 4):
            pts = sorted(
                (r["x"], r["p50"], r["p20"], r["p80"])
                for r in rows
                if r["kernel"] == kernel and keep(r)
            )
            if not pts:
                continue
            x, p50, p20, p80 = (
                np.array(v, dtype=float) / (1 if i == 0 else scale) for i, v in enumerate(zip(*pts))
            )
            ax.errorbar(x, p50, yerr=[p50 - p20, p80 - p50], fmt=style, capsize=3, label=label)
        ax.set_xscale("log", base=xbase)
        ax.set_yscale("log")
        ax.set_title(kernel, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_bars(
    rows,
    path: Path,
    panels,
    xs,
    *,
    colors=None,
    title="",
    xlabel="batch size",
    figsize=None,
    dpi=120,
    title_fontsize=7,
):
    """Grouped bars side by side: one panel per ``(metric, providers, ylabel, panel_title)`` of
    ``panels``; one group per x of ``xs``, one bar per provider (its p50, p20-p80 bars; missing
    points are gaps). ``colors`` maps a provider to its colour (default: C0, C1, ... in order)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r["provider"], r["metric"], r["x"]): r for r in rows}
    if colors is None:
        providers = list(dict.fromkeys(p for _, shown, _, _ in panels for p in shown))
        colors = {p: f"C{i}" for i, p in enumerate(providers)}
    fig, axes = plt.subplots(
        1, len(panels), figsize=figsize or (5.5 * len(panels), 4), squeeze=False
    )
    pos = np.arange(len(xs))
    for ax, (metric, shown, ylabel, panel_title) in zip(axes[0], panels):
        width = 0.8 / len(shown)
        for j, provider in enumerate(shown):
            pts = [by.get((provider, metric, x)) for x in xs]
            p50 = np.array([np.nan if r is None else r["p50"] for r in pts])
            lo = np.array([0.0 if r is None else r["p50"] - r["p20"] for r in pts])
            hi = np.array([0.0 if r is None else r["p80"] - r["p50"] for r in pts])
            ax.bar(
                pos + (j - (len(shown) - 1) / 2) * width,
                p50,
                width,
                yerr=[lo, hi],
                capsize=2,
                label=provider,
                color=colors[provider],
            )
        ax.set_xticks(pos, [str(x) for x in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(panel_title, fontsize=10)
    fig.suptitle(title, fontsize=title_fontsize)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- GPU benchmarks
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
