"""Where one engine step goes on the CPU: a profile of fd_mtp's decoding step, with its floor.

For each batch size B (``--batches``, default 1 and 8) and mode (``--modes``, default plain and MTP
with K = 1..3: ``plain``, ``mtp_k1``, ``mtp_k2``, ``mtp_k3``, and ``hybrid_k3``, as in ``make
demo``), one LLM with B slots on the model (default: the shipped demo model) decodes
``--max-tokens`` greedy tokens (EOS ignored) for each of ``max(B, 6)`` held-out prompts, after one
warm-up generate. Three passes per cell, all on the same LLM:

1. **timed**: wall time per engine step, no instrumentation (the figure the step really costs);
2. **split**: the same generate with timers wrapped around the functions below (exclusive time:
   a function's own time minus the timed functions it calls), reported in ms per step:

   * the target forward (scope ``target``) and the MTP forward (scope ``mtp``), each split into
     ``matmul`` (the linear layers), ``lm_head``, ``attention`` (the paged-attention op and its
     glue), ``attn_metadata`` (the step's host-side attention metadata), ``norm`` (RMSNorm),
     ``rope`` (building the step's rotation and applying it to q and k), ``mlp_act`` (SwiGLU's
     elementwise part), ``moe_routing``, ``mtp_project`` (the MTP block's embedding / hidden-state
     projection), ``layer_other`` (residual adds) and ``model_other`` (embedding lookup, final norm);
   * ``sampling`` (penalties, softmax / top-k / top-p, the draw), ``spec_ops`` (every other
     ``fd_mtp.ops`` call: packing, verify, update, the draft ops), ``transfers`` (InputBatch's one
     host-to-device and one device-to-host transfer), ``proposer`` (MTPProposer's own code),
     ``runner`` (the model runner's own code), ``engine`` (scheduling, stop checks, outputs) and
     ``detokenize``;

   the sum is the instrumented step, a little longer than the timed one (the timers' own cost,
   printed as ``overhead``);
3. **counted**: one generate under ``sys.setprofile`` that counts, per step, the framework ops
   dispatched (calls into Paddle's C++ op functions and fd_mtp's op module) and the host copies
   (``paddle.to_tensor``: host to tensor; ``Tensor.numpy`` / ``tolist`` / ``item``: tensor to host).

The floor of a step: its FLOPs (2 x the linear weights each fed token passes through, the lm_head
of each row that gets logits, attention's 4 x context x heads x head_dim per token and layer) over
the matmul rate measured in the same run (``paddle.matmul`` of [256, 1024] x [1024, 1024] float32,
best of several, at the run's thread count), and its bytes (every weight each forward reads once,
the KV cache it reads) over the read bandwidth measured in the same run on an array as large as the
model's weights; the floor is the larger of the two. Every per-step figure is printed beside it.

Run it on a quiet machine (it prints the load average before and after) and state the thread count
(``--threads``; paddle's default on CPU is 1). ``--baseline DIR`` (a checkout of another fd_mtp
revision, e.g. ``git worktree add /tmp/base <rev>``) runs the timed pass of that revision in a
subprocess in the same run, for a before/after table on one machine.

    python benchmarks/bench_profile.py [--model DIR] [--batches 1,8] [--modes plain,mtp_k1,...]
        [--max-tokens 64] [--threads 1] [--baseline DIR] [--out DIR]

Writes DIR/bench_profile.csv (the harness's columns; kernel ``step_profile/<category>``, provider
the mode, x the batch) and DIR/bench_profile.png (ms per step by category, stacked, per cell).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# the checkout this file is in, except for --baseline's child (it runs another checkout's fd_mtp,
# given by PYTHONPATH); harness.py, profile_timers.py and profile_floor.py beside this file
for _p in ([] if "--timed-only" in sys.argv else [ROOT]) + [Path(__file__).resolve().parent]:
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness import row, timestamp, write_csv  # noqa: E402
from profile_floor import floor_ms, measure_rates, model_sizes  # noqa: E402
from profile_timers import HOST_CATEGORIES, MODEL_SCOPES, OpCounter, install_timers  # noqa: E402

import fd_mtp  # noqa: E402,F401  before paddle: fd_mtp picks MKL's AVX2 code on AMD CPUs


# --------------------------------------------------------------------------------- runs
def _prompts(llm, batch: int, chars: int) -> list:
    """``max(batch, 6)`` held-out prompts (``make demo``'s six at batch 1: they run one after
    another; at batch 6 all at once)."""
    from fd_mtp.assets.corpus import held_out_prompts

    return [t for _, t in held_out_prompts(max(batch, 6), chars=chars)]


def _make_llm(
    model,
    batch: int,
    mode: str,
    max_model_len: int,
    forward: str | None = None,
    threads: int | None = None,
):
    from fd_mtp.demo import MODES

    spec = MODES[mode]
    if spec is not None:
        spec = dict(spec, verification="greedy")
    # None: the checkout's default (a baseline may predate the options)
    extra = {} if forward is None else {"forward": forward}
    if threads is not None:
        extra["cpu_threads"] = threads
    return fd_mtp.LLM(
        model,
        max_num_seqs=batch,
        max_model_len=max_model_len,
        speculative_config=spec,
        **extra,
    )


def timed_pass(llm, prompts, params, repeats: int) -> dict:
    """Best-of and median wall time per step over ``repeats`` generates (no instrumentation)."""
    per_step, rates = [], []
    for _ in range(repeats):
        steps0 = llm.engine.num_steps
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        steps = llm.engine.num_steps - steps0
        tokens = sum(len(o.token_ids) for o in outs)
        per_step.append(dt / steps * 1e3)
        rates.append(tokens / dt)
    return {
        "step_ms": float(np.median(per_step)),
        "step_ms_all": per_step,
        "tokens_per_s": float(np.median(rates)),
        "tokens_per_s_all": rates,
        "tokens": [len(o.token_ids) for o in outs],
        "token_ids": [list(o.token_ids) for o in outs],
    }


def profile_cell(llm, prompts, params) -> dict:
    timers = install_timers()
    try:
        steps0 = llm.engine.num_steps
        t0 = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        steps = llm.engine.num_steps - steps0
    finally:
        timers.restore()
    counter = OpCounter()
    steps1 = llm.engine.num_steps
    restore = counter.patch_operators()
    sys.setprofile(counter)
    try:
        llm.generate(prompts, params, use_tqdm=False)
    finally:
        sys.setprofile(None)
        restore()
    csteps = llm.engine.num_steps - steps1
    split = {f"{s}/{c}": v / steps * 1e3 for (s, c), v in timers.totals.items()}
    return {
        "instrumented_step_ms": wall / steps * 1e3,
        "split_ms": split,
        "work": dict(timers.work),
        "steps": steps,
        "ops_per_step": counter.ops / csteps,
        "to_tensor_per_step": counter.to_tensor / csteps,
        "to_host_per_step": counter.to_host / csteps,
        "top_ops": [
            (n, c / csteps) for n, c in sorted(counter.by_name.items(), key=lambda kv: -kv[1])
        ],
    }


def _baseline(args, out_json: Path, batch: int, mode: str) -> dict:
    """The timed pass of another checkout for one cell, in a subprocess (same machine, same run,
    right before this checkout's own pass of the cell, so drifting load hits both alike)."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--timed-only",
        str(out_json),
        "--batches",
        str(batch),
        "--modes",
        mode,
        "--max-tokens",
        str(args.max_tokens),
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
    ]
    if args.model:
        cmd += ["--model", args.model]
    env = dict(os.environ, PYTHONPATH=str(Path(args.baseline).resolve()))
    subprocess.run(cmd, env=env, check=True, cwd=str(Path(args.baseline).resolve()))
    return json.loads(out_json.read_text())[f"{batch}/{mode}"]


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="checkpoint directory (default: the demo model)")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--modes", default="plain,mtp_k1,mtp_k2,mtp_k3")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-chars", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3, help="timed generates per cell (median)")
    p.add_argument("--threads", type=int, default=1, help="paddle's CPU math threads")
    p.add_argument(
        "--forward",
        default="native",
        choices=["native", "eager", "static"],
        help="the model's forward (LLM(forward=...)): native C++ decoder layers, op by op, or "
        "the compiled program; a --baseline checkout runs its own default",
    )
    p.add_argument("--baseline", default=None, help="another checkout: its timed pass beside")
    p.add_argument("--timed-only", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)

    import paddle

    from fd_mtp.engine.sampling_params import SamplingParams

    paddle.base.core.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",") if b]
    modes = [m for m in args.modes.split(",") if m]
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    max_model_len = 1024

    if args.timed_only:
        res = {}
        for b in batches:
            for mode in modes:
                llm = _make_llm(args.model, b, mode, max_model_len)
                prompts = _prompts(llm, b, args.prompt_chars)
                llm.generate(prompts, params, use_tqdm=False)
                res[f"{b}/{mode}"] = timed_pass(llm, prompts, params, args.repeats)
                del llm
        Path(args.timed_only).write_text(json.dumps(res))
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"bench_profile: {timestamp()}  threads {args.threads}  forward {args.forward}  "
        f"load average {_loadavg()}"
    )
    if args.baseline:
        print(f"baseline: {args.baseline} (timed pass only, cell by cell before this checkout's)")
    rows, cells = [], {}
    rates = None
    for b in batches:
        for mode in modes:
            base = (
                _baseline(args, out / "bench_profile_baseline.json", b, mode)
                if args.baseline
                else None
            )
            llm = _make_llm(args.model, b, mode, max_model_len, args.forward, args.threads)
            sizes = model_sizes(llm)
            if rates is None:
                rates = measure_rates(sizes["main_bytes"])
                print(
                    f"rates (this machine, this run, {args.threads} thread(s)): matmul "
                    f"{rates['gflops']:.1f} GFLOP/s, read {rates['read_gbs']:.1f} GB/s over "
                    f"{rates['read_bytes'] / 2**20:.1f} MiB (the model's weights: "
                    f"{sizes['main_bytes'] / 2**20:.1f} MiB main, {sizes['mtp_bytes'] / 2**20:.1f} "
                    "MiB MTP incl. the shared lm_head)"
                )
            prompts = _prompts(llm, b, args.prompt_chars)
            llm.generate(prompts, params, use_tqdm=False)  # warm-up
            timed = timed_pass(llm, prompts, params, args.repeats)
            prof = profile_cell(llm, prompts, params)
            fl, f_ms, b_ms = floor_ms(prof["work"], prof["steps"], sizes, rates)
            cell = dict(timed=timed, prof=prof, floor=(fl, f_ms, b_ms), layers=sizes["layers"])
            if base is not None:
                cell["base"] = base
                same = cell["base"]["token_ids"] == timed["token_ids"]
                cell["same_output"] = same
            cells[(b, mode)] = cell
            _print_cell(b, mode, cell, args.threads)
            cfg = f"threads={args.threads};max_tokens={args.max_tokens}"
            x = b
            rows.append(
                row("step_profile/step", mode, x, timed["step_ms_all"], unit="ms", config=cfg)
            )
            rows.append(
                row(
                    "step_profile/tokens_per_s",
                    mode,
                    x,
                    timed["tokens_per_s_all"],
                    metric="throughput",
                    unit="tokens/s",
                    config=cfg,
                )
            )
            rows.append(row("step_profile/floor", mode, x, [fl], unit="ms", config=cfg))
            rows.append(
                row(
                    "step_profile/ops_per_step",
                    mode,
                    x,
                    [prof["ops_per_step"]],
                    metric="count",
                    unit="ops",
                    config=cfg,
                )
            )
            for key, v in prof["split_ms"].items():
                rows.append(row(f"step_profile/{key}", mode, x, [v], unit="ms", config=cfg))
            del llm
    print(f"load average after: {_loadavg()}")
    _summary(cells, args.threads)
    write_csv(rows, out / "bench_profile.csv")
    _plot(cells, out / "bench_profile.png", args.threads)
    print(f"wrote {out / 'bench_profile.csv'} and {out / 'bench_profile.png'}")
    return 0


def _print_cell(b, mode, cell, threads):
    timed, prof, (fl, f_ms, b_ms) = cell["timed"], cell["prof"], cell["floor"]
    step = timed["step_ms"]
    print(
        f"\n== batch {b}, {mode} ({threads} thread(s)): {timed['tokens_per_s']:.1f} tokens/s, "
        f"{step:.2f} ms/step; floor {fl:.3f} ms/step (FLOPs {f_ms:.3f}, bytes {b_ms:.3f}): "
        f"{step / fl:.1f}x the floor"
    )
    if "base" in cell:
        bs = cell["base"]
        print(
            f"   baseline: {bs['tokens_per_s']:.1f} tokens/s, {bs['step_ms']:.2f} ms/step -> "
            f"{timed['tokens_per_s'] / bs['tokens_per_s']:.2f}x; same output: "
            f"{'yes' if cell.get('same_output') else 'NO'}"
        )
    print(
        f"   framework ops/step {prof['ops_per_step']:.0f}; host copies/step: to_tensor "
        f"{prof['to_tensor_per_step']:.1f}, tensor->host {prof['to_host_per_step']:.1f}"
    )
    split = prof["split_ms"]
    total = sum(split.values())
    print(f"   {'where (ms/step)':<28}{'ms':>8}{'%':>7}  per layer (ms)")
    per_layer = {"matmul", "attention", "norm", "rope", "mlp_act", "moe_routing", "layer_other"}
    for scope in MODEL_SCOPES:
        sub = {k: v for k, v in split.items() if k.startswith(scope + "/")}
        if not sub:
            continue
        layers = cell["layers"] if scope == "target" else 1
        print(
            f"   {scope + ' forward':<28}{sum(sub.values()):8.3f}{100 * sum(sub.values()) / total:6.1f}%"
            f"  ({layers} layer{'s' if layers > 1 else ''})"
        )
        for k in sorted(sub, key=lambda k: -sub[k]):
            cat = k.split("/")[1]
            each = f"  {sub[k] / layers:8.3f}" if cat in per_layer else ""
            print(f"     {cat:<26}{sub[k]:8.3f}{100 * sub[k] / total:6.1f}%{each}")
    for cat in HOST_CATEGORIES:
        v = split.get(f"host/{cat}", 0.0)
        if v:
            print(f"   {cat:<28}{v:8.3f}{100 * v / total:6.1f}%")
    print(
        f"   {'instrumented step':<28}{prof['instrumented_step_ms']:8.3f}   (timers' overhead "
        f"{prof['instrumented_step_ms'] - step:+.3f} ms)"
    )
    print("   most dispatched ops: " + ", ".join(f"{n} {c:.0f}" for n, c in prof["top_ops"][:40]))


def _summary(cells, threads):
    print(f"\nsummary ({threads} thread(s)): ms per step (x the floor), tokens/s")
    head = f"{'batch':>5} {'mode':<8} {'step ms':>8} {'floor':>7} {'x floor':>8} {'tok/s':>8} {'ops/step':>9}"
    has_base = any("base" in c for c in cells.values())
    if has_base:
        head += f" {'base tok/s':>11} {'speedup':>8} {'same':>5}"
    print(head)
    for (b, mode), c in cells.items():
        t, fl = c["timed"], c["floor"][0]
        line = (
            f"{b:>5} {mode:<8} {t['step_ms']:8.2f} {fl:7.3f} {t['step_ms'] / fl:8.1f} "
            f"{t['tokens_per_s']:8.1f} {c['prof']['ops_per_step']:9.0f}"
        )
        if has_base and "base" in c:
            bs = c["base"]
            line += (
                f" {bs['tokens_per_s']:11.1f} {t['tokens_per_s'] / bs['tokens_per_s']:7.2f}x "
                f"{'yes' if c.get('same_output') else 'NO':>5}"
            )
        print(line)


def _plot(cells, path: Path, threads: int):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    keys = list(cells)
    cats = sorted({k for c in cells.values() for k in c["prof"]["split_ms"]})
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys)), 5))
    bottom = np.zeros(len(keys))
    cmap = plt.get_cmap("tab20")
    for i, cat in enumerate(cats):
        vals = np.array([cells[k]["prof"]["split_ms"].get(cat, 0.0) for k in keys])
        if vals.max() < 0.01:
            continue
        ax.bar(range(len(keys)), vals, bottom=bottom, label=cat, color=cmap(i % 20))
        bottom += vals
    ax.plot(
        range(len(keys)), [cells[k]["floor"][0] for k in keys], "k_", markersize=30, label="floor"
    )
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"b{b}\n{m}" for b, m in keys])
    ax.set_ylabel("ms per engine step")
    ax.set_title(f"Where a step goes ({threads} thread(s)); black: the step's floor")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
