"""The report of benchmarks/bench_e2e.py: the metrics' units, the plots, the table per workload
with each mode's measured and predicted speed-up, where speculation pays, and where an adaptive
mode falls short of plain decoding or the best fixed K."""

from __future__ import annotations

import numpy as np
from harness import plot_bars

FIXED_K = ("mtp_k1", "mtp_k2", "mtp_k3")  # the fixed K an adaptive mode is compared with
UNITS = {
    "t_step": "ms",
    "t_target": "ms",
    "t_draft": "ms",
    "substeps": "substeps/step",
    "t_host": "ms",
    "tokens_per_s": "tokens/s",
    "step_latency": "ms",
    "steps": "steps",
    "mean_accepted_length": "tokens/step",
    "proposer_host_ms_per_step": "ms",
}


def plot(rows, modes, batches, path, synthetic: bool, all_modes):
    """tokens/s and mean accepted length per batch, one bar per mode (one colour per mode of
    ``all_modes``, every mode of the benchmark in order)."""
    speculative = [m for m in modes if m != "plain"] or modes
    panels = [
        (metric, shown, f"p50 [{UNITS[metric]}], p20-p80 bars", panel_title)
        for metric, shown, panel_title in (
            ("tokens_per_s", modes, f"throughput ({rows[0]['device']})"),
            (
                "mean_accepted_length",
                speculative,
                "mean accepted length"
                + (" (synthetic MTP head: not meaningful)" if synthetic else ""),
            ),
        )
    ]
    colors = {m: f"C{i}" for i, m in enumerate(all_modes)}  # one colour per mode in both panels
    plot_bars(rows, path, panels, batches, colors=colors, title=rows[0]["config"], figsize=(11, 4))


def predicted(by, mode, b):
    """``E[L] x T1 / (T_target + S x T_draft + T_host)`` of ``mode`` at batch ``b`` (T1: plain's
    decode step), with the terms in units of T1; None without the figures."""
    t1 = by.get(("plain", "t_step", b))
    get = {
        m: by.get((mode, m, b))
        for m in ("mean_accepted_length", "t_target", "t_draft", "substeps", "t_host")
    }
    if t1 is None or any(v is None or np.isnan(v) for v in get.values()) or not t1:
        return None
    drafts = get["substeps"] * get["t_draft"]
    cost = get["t_target"] + drafts + get["t_host"]
    return {
        "speedup": get["mean_accepted_length"] * t1 / cost,
        "E[L]": get["mean_accepted_length"],
        "target": get["t_target"] / t1,
        "drafts": drafts / t1,
        "host": get["t_host"] / t1,
    }


def table(rows, modes, batches, threads: str = "") -> str:
    """The figures of one workload's rows, one line per (batch, mode)."""
    by = {(r["provider"], r["metric"], r["x"]): r["p50"] for r in rows}
    k = max(
        (
            int(r["metric"][len("acceptance_pos") :]) + 1
            for r in rows
            if r["metric"].startswith("acceptance_pos")
        ),
        default=0,
    )
    head = (
        f"{'mode':<11} {'batch':>5} {'tokens/s':>10} {'vs plain':>8} {'pred':>6} {'vs bestK':>8} "
        f"{'ms/step':>8} {'steps':>6} {'accept len':>10} {'T1 ms':>7} {'Ttgt ms':>8} "
        f"{'Tdraft ms':>9} {'S':>4} {'Thost ms':>8} {'acceptance per position':<24} "
        f"{'proposer host ms/step':>21}"
    )
    lines = ([threads] if threads else []) + [head, "-" * len(head)]

    def f(v, fmt):
        return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, fmt)

    for b in batches:
        for mode in modes:
            if (mode, "tokens_per_s", b) not in by:
                continue
            tps, plain = by[(mode, "tokens_per_s", b)], by.get(("plain", "tokens_per_s", b))
            fixed = [by[(m, "tokens_per_s", b)] for m in FIXED_K if (m, "tokens_per_s", b) in by]
            vs_best = tps / max(fixed) if fixed and mode.startswith("adaptive") else None
            pos = " ".join(
                f(by.get((mode, f"acceptance_pos{i}", b)), ".2f")
                for i in range(k)
                if (mode, f"acceptance_pos{i}", b) in by
            )
            pred = predicted(by, mode, b) if mode != "plain" else None
            lines.append(
                f"{mode:<11} {b:>5} {tps:>10.1f} {f(tps / plain if plain else None, '.2f'):>8} "
                f"{f(pred and pred['speedup'], '.2f'):>6} {f(vs_best, '.2f'):>8} "
                f"{by[(mode, 'step_latency', b)]:>8.2f} {by[(mode, 'steps', b)]:>6.0f} "
                f"{f(by.get((mode, 'mean_accepted_length', b)), '.2f'):>10} "
                f"{f(by.get(('plain', 't_step', b)), '.3f'):>7} "
                f"{f(by.get((mode, 't_target', b)), '.3f'):>8} "
                f"{f(by.get((mode, 't_draft', b)), '.3f'):>9} "
                f"{f(by.get((mode, 'substeps', b)), '.1f'):>4} "
                f"{f(by.get((mode, 't_host', b)), '.3f'):>8} {pos or '-':<24} "
                f"{f(by.get((mode, 'proposer_host_ms_per_step', b)), '.3f'):>21}"
            )
    return "\n".join(lines)


def where_it_pays(rows, modes, batches) -> list[str]:
    """For each speculative mode: the batches where its measured costs let speculation pay
    (predicted speed-up > 1) and where it stops, with the terms of the prediction in units of
    T1 (E[L] against the verify step, the drafts and the host)."""
    by = {(r["provider"], r["metric"], r["x"]): r["p50"] for r in rows}
    out = []
    for mode in (m for m in modes if m != "plain"):
        preds = {b: predicted(by, mode, b) for b in batches}
        preds = {b: p for b, p in preds.items() if p is not None}
        if not preds:
            continue
        pays = [b for b, p in preds.items() if p["speedup"] > 1.0]
        stops = [b for b, p in preds.items() if p["speedup"] <= 1.0]
        terms = "; ".join(
            f"batch {b}: {p['speedup']:.2f}x = E[L] {p['E[L]']:.2f} / (verify {p['target']:.2f} "
            f"+ drafts {p['drafts']:.2f} + host {p['host']:.2f}) T1"
            for b, p in preds.items()
        )
        if not stops:
            verdict = f"pays at every batch measured ({', '.join(map(str, pays))})"
        elif not pays:
            verdict = f"pays at no batch measured ({', '.join(map(str, stops))})"
        else:
            verdict = (
                f"pays at batch {', '.join(map(str, pays))}, stops paying at batch "
                f"{', '.join(map(str, stops))}"
            )
        out.append(
            f"{mode}: {verdict} (it pays while E[L] > verify + drafts + host, in units of T1; "
            f"verify, the target step feeding 1 + K tokens per request, grows with the tokens "
            f"verified, so with the batch): {terms}"
        )
    return out


def shortfalls(rows, modes, batches) -> list[str]:
    """Where an adaptive mode is below 0.98x plain or 0.95x the best fixed K (one workload)."""
    by = {(r["provider"], r["x"]): r["p50"] for r in rows if r["metric"] == "tokens_per_s"}
    out = []
    for b in batches:
        plain = by.get(("plain", b))
        fixed = {m: by[(m, b)] for m in FIXED_K if (m, b) in by}
        for mode in (m for m in modes if m.startswith("adaptive") and (m, b) in by):
            tps = by[(mode, b)]
            if plain and tps < 0.98 * plain:
                out.append(f"{mode} batch {b}: {tps / plain:.2f}x plain (goal >= 0.98)")
            if fixed:
                best = max(fixed, key=fixed.get)
                if tps < 0.95 * fixed[best]:
                    out.append(
                        f"{mode} batch {b}: {tps / fixed[best]:.2f}x the best fixed K ({best}; goal >= 0.95)"
                    )
    return out
