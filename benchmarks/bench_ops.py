"""Latency of fd_mtp's ops against their numpy references (CPU).

For each op (draft side: spec ops.md §6.1-6.6; target side: §5.1-§5.16, the packing ops with
L_in = max_model_len and rebuild_padding at H = 1024 bfloat16) and each batch size, builds a realistic,
valid batch (mixed decode / prefill / stopped requests, K = 3 draft tokens, max_model_len 2048 for
input_ids / pre_ids, hidden size 1024 in bfloat16 for the eagle ops, a block manager with free
blocks to spare for mtp_step_paddle), then times fd_mtp's op and fd_mtp.reference's numpy version
on the same state: warm-up, then per-call wall times; reports p50 / p20 / p80 in microseconds.

The target-side sampling ops (spec §5.5, §5.6) have one entry per vocabulary size, e.g.
"top_p_candidates[V=32000]" and "top_p_candidates[V=100000]": every request of the batch verifies
K + 1 tokens, so a batch of B requests has T = B * (K + 1) float32 rows of V logits / probs
(batch 256: 1024 rows; at V = 100000 that is 400 MB per copy, and the runner keeps several).

State handling. The ops write their arguments in place, so every timed call starts from the same
state: before each call (OUTSIDE the timed region) the written tensors are restored from
preallocated pristine copies (paddle.assign for the op, np.copyto for the reference). The large
row buffers (input_ids, pre_ids, pre_ids_all: [B, 2048] int64) are not restored: given restored per-request
state, every call writes the same values at the same positions there, so they are steady. The
eagle ops write nothing and need no reset. Every timed call is therefore the same valid call; an
op exception (ValueError on invalid input) aborts the benchmark, and after timing the op's final
state is checked against its state after a single call.

Usage:
    python benchmarks/bench_ops.py [--refcheck] [--quick] [--batches 1,16,64] [--ops a,b] [--out DIR]

Writes DIR/bench_ops.csv (columns kernel,provider,metric,unit,x,p50,p20,p80,config,device,
timestamp,version) and DIR/bench_ops.png (latency vs batch, log-log, one panel per op).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness import percentiles, plot_panels, time_calls, timestamp, write_csv  # noqa: E402

import fd_mtp  # noqa: E402,F401  (before paddle: see fd_mtp._prefer_mkl_avx2)
import fd_mtp.reference as ref  # noqa: E402
from fd_mtp.testing.op_inputs import BUILDERS, SAMPLING_VOCABS, STEADY_BUFFERS  # noqa: E402  (shared input factories)

VOCAB_MAX_BATCH = 256  # larger batches of [4B, V] float32 state need several GB per copy
OPS = (
    (
        # draft side (spec §6)
        "draft_model_preprocess",
        "eagle_get_hidden_states",
        "draft_model_update",
        "eagle_get_self_hidden_states",
        "draft_model_postprocess",
        "mtp_step_paddle",
        # target side (spec §5), in step order
        "speculate_get_padding_offset",
        "speculate_get_seq_lens_output",
        "speculate_get_output_padding_offset",
        "pre_process",
        "rebuild_padding",
    )
    + tuple(
        f"{op}[V={v}]"
        for op in ("speculate_get_token_penalty_multi_scores", "top_p_candidates")
        for v in SAMPLING_VOCABS
    )
    + (
        "speculate_verify",
        "speculate_verify[rejection,V=32000]",
        "speculate_verify[rejection,V=100000]",
        "speculate_set_stop_value_multi_seqs",
        "speculate_update",
        "speculate_set_value_by_flags_and_idx",
        "speculate_clear_accept_nums",
        "speculate_schedule_cache",
        "recover_decode_task",
        "speculate_step_paddle",
        "speculate_step_system_cache",
        "speculate_step_reschedule",
    )
    + (
        # logprob helpers (spec §5.18)
        f"speculate_get_logits[V={SAMPLING_VOCABS[0]}]",
        "speculate_insert_first_token",
        f"speculate_get_target_logits[V={SAMPLING_VOCABS[0]}]",
    )
)
DEFAULT_BATCHES = (1, 16, 64, 256, 1024)


# ------------------------------------------------------------------------------------------------
# Running both providers
# ------------------------------------------------------------------------------------------------
def _to_paddle(a, name):
    import paddle

    if not isinstance(a, np.ndarray):
        return a
    if name in ("input", "tmp_out") and a.dtype == np.uint16:  # bfloat16 bits
        return paddle.to_tensor(a, place=paddle.CPUPlace()).view(paddle.bfloat16)
    return paddle.to_tensor(a, place=paddle.CPUPlace())


def _to_numpy(t):
    import paddle

    if isinstance(t, paddle.Tensor):
        return t.view(paddle.uint16).numpy() if t.dtype == paddle.bfloat16 else t.numpy()
    if isinstance(t, (list, tuple)):  # ops returning several tensors
        return [_to_numpy(x) for x in t]
    return t


def _returned(result):
    """{"<returned>": array} for one output, {"<returned>[i]": array} for a list of outputs."""
    if isinstance(result, (list, tuple)):
        return {f"<returned>[{i}]": r for i, r in enumerate(result)}
    return {"<returned>": result}


class Runner:
    """Holds both providers' argument sets for a case and restores written args between calls."""

    def __init__(self, op_name, case):
        import paddle

        import fd_mtp.ops as ops

        self.case = case
        base = op_name.split("[")[0]  # "top_p_candidates[V=32000]" -> top_p_candidates
        base = op_name.split("[")[0]  # "op[variant]" entries run the op itself
        self.op = getattr(ops, base)
        self.ref = getattr(ref, base)
        self.np_args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
        self.pd_args = [_to_paddle(a, n) for a, n in zip(case.args, case.names)]
        reset = [i for i in case.written if case.names[i] not in STEADY_BUFFERS]
        self.np_reset = [(self.np_args[i], case.args[i]) for i in reset]
        self.pd_reset = [(self.pd_args[i], _to_paddle(case.args[i], case.names[i])) for i in reset]
        self.pd_kwargs = {k: _to_paddle(v, k) for k, v in case.kwargs.items()}
        self._assign = paddle.assign

    def reset_np(self):
        for dst, src in self.np_reset:
            np.copyto(dst, src)

    def reset_pd(self):
        for dst, src in self.pd_reset:
            self._assign(src, output=dst)

    def call_op(self):
        return self.op(*self.pd_args, **self.pd_kwargs)

    def call_ref(self):
        return self.ref(*self.np_args, **self.case.kwargs)

    def op_state(self, result):
        out = {self.case.names[i]: _to_numpy(self.pd_args[i]) for i in self.case.written}
        if self.case.returns:
            out.update(_returned(_to_numpy(result)))
            _add_returned(out, result, _to_numpy)
        return out

    def ref_state(self, result):
        out = {self.case.names[i]: self.np_args[i].copy() for i in self.case.written}
        if self.case.returns:
            out.update(_returned(result))
            _add_returned(out, result, lambda a: a)
        return out


def _add_returned(out, result, convert):
    """A returned array, or each array of a returned list (ops with several outputs)."""
    if isinstance(result, (list, tuple)):
        for i, r in enumerate(result):
            out[f"<returned {i}>"] = convert(r)
    else:
        out["<returned>"] = convert(result)


def compare_states(got, expected, what):
    for name, e in expected.items():
        g = got[name]
        if g.dtype != e.dtype or g.shape != e.shape:
            raise AssertionError(
                f"{what}: {name}: got {g.dtype}{g.shape}, expected {e.dtype}{e.shape}"
            )
        diff = np.argwhere(g != e)
        if diff.size:
            shown = "; ".join(
                f"at {tuple(int(i) for i in d)}: got {g[tuple(d)]!r}, expected {e[tuple(d)]!r}"
                for d in diff[:5]
            )
            raise AssertionError(
                f"{what}: {name}: {len(diff)} of {g.size} elements differ: {shown}"
            )


def refcheck(runner, label):
    """Op and reference on identical inputs: every written array and the output must match exactly."""
    runner.reset_np()
    runner.reset_pd()
    expected = runner.ref_state(runner.call_ref())
    got = runner.op_state(runner.call_op())
    compare_states(got, expected, f"refcheck {label}")
    return expected


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--refcheck", action="store_true", help="check op == reference exactly before timing"
    )
    p.add_argument("--quick", action="store_true", help="fewer iterations")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated op names")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)

    batches = [int(b) for b in args.batches.split(",") if b]
    # Commas inside [...] belong to a variant name (e.g. "speculate_verify[rejection,V=32000]").
    ops = [o.strip() for o in re.split(r",(?![^\[]*\])", args.ops) if o.strip()]
    unknown = [o for o in ops if o not in BUILDERS]
    if unknown:
        p.error(f"unknown ops {unknown}; choose from {list(BUILDERS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    op_warmup, op_iters = (10, 50) if args.quick else (50, 300)
    ref_budget_s = 0.2 if args.quick else 1.2  # timing budget of the (slow) reference per case

    import fd_mtp.ops

    fd_mtp.ops.load()
    stamp = timestamp()
    rows = []
    t_start = time.perf_counter()
    skipped = []
    for op in ops:
        for batch in batches:
            if "[V=" in op and batch > VOCAB_MAX_BATCH:
                skipped.append(f"{op} batch={batch}")
                continue
            label = f"{op} batch={batch}"
            print(f"[{time.perf_counter() - t_start:6.1f}s] {label} ...", flush=True)
            case = BUILDERS[op](batch)
            runner = Runner(op, case)
            if args.refcheck:
                refcheck(runner, label)
            t_op, res = time_calls(runner.call_op, runner.reset_pd, op_warmup, op_iters)
            # Every timed call is the same call: its end state must equal one call's end state.
            once = Runner(op, case)
            once.reset_pd()
            compare_states(runner.op_state(res), once.op_state(once.call_op()), f"steady {label}")
            # Reference: size the iteration count from one call.
            runner.reset_np()
            t0 = time.perf_counter()
            runner.call_ref()
            one = time.perf_counter() - t0
            ref_iters = int(
                min(op_iters, max(5 if args.quick else 15, ref_budget_s / max(one, 1e-7)))
            )
            t_ref, _ = time_calls(runner.call_ref, runner.reset_np, 2, ref_iters)
            for provider, t in (("fd_mtp", t_op), ("numpy_ref", t_ref)):
                p50, p20, p80 = percentiles(t)
                rows.append(
                    dict(
                        kernel=op,
                        provider=provider,
                        metric="latency",
                        unit="us",
                        x=batch,
                        p50=p50,
                        p20=p20,
                        p80=p80,
                        config=case.config,
                        device="cpu",
                        timestamp=stamp,
                        version=fd_mtp.__version__,
                    )
                )

    csv_path = write_csv(rows, out / "bench_ops.csv")
    png_path = plot_panels(
        rows,
        out / "bench_ops.png",
        ops,
        title=f"fd_mtp {fd_mtp.__version__} ops vs numpy reference (CPU)",
    )
    print()
    print(
        f"{'op':<36} {'batch':>6} {'ours us':>10} {'(p20-p80)':>17} {'numpy us':>11} {'speedup':>9}"
    )
    by = {(r["kernel"], r["provider"], r["x"]): r for r in rows}
    for op in ops:
        for batch in batches:
            if (op, "fd_mtp", batch) not in by:
                continue
            a, b = by[(op, "fd_mtp", batch)], by[(op, "numpy_ref", batch)]
            band = f"({a['p20']:.1f}-{a['p80']:.1f})"
            print(
                f"{op:<36} {batch:>6} {a['p50']:>10.2f} {band:>17} {b['p50']:>11.1f} "
                f"{b['p50'] / a['p50']:>8.1f}x"
            )
    if skipped:
        print(
            f"\nskipped (vocabulary-sized state above batch {VOCAB_MAX_BATCH} needs several GB "
            f"per copy): {', '.join(skipped)}"
        )
    print(
        f"\nrefcheck: {'passed' if args.refcheck else 'not run'}; "
        f"total {time.perf_counter() - t_start:.1f}s; wrote {csv_path} and {png_path}"
    )


if __name__ == "__main__":
    main()
