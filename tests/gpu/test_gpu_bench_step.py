"""benchmarks/bench_gpu_step.py (the captured step vs the op-by-op step vs the goal of issue 35
§2): its bytes-moved model by hand, and a smoke run on the backend at hand that writes every row
with the goal computed from the graphs' kernel count and the floors. On the simt emulator the
kernels are counted from the emulator's graphs and device times are not measured; on a GPU the
figures are measured by tools/gpu_check.sh, never asserted here.

Needs CuPy, a CUDA GPU (or FD_MTP_SIMT=1) and the fd_mtp_cuda module; skipped otherwise (the
refusal without a GPU is tested in a subprocess where there is none)."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from gpu_util import on_simt, skip_module_without_gpu

skip_module_without_gpu()

from fd_mtp.testing import op_inputs  # noqa: E402
from fd_mtp.testing.scripts import ROOT, load_script  # noqa: E402


def load_bench():
    return load_script("benchmarks/bench_gpu_step.py")


def test_bytes_model_by_hand():
    bench = load_bench()
    b, v = 4, 1000
    top_p = op_inputs.build_top_p(b, v)
    probs, tp, opo = top_p.args[:3]
    rows, c = probs.shape[0], top_p.args[3]
    outs = [
        np.empty((rows, c), np.float32),
        np.empty((rows, c), np.int64),
        np.empty(rows, np.int32),
    ]
    assert bench.op_bytes("top_p_candidates", top_p, outs) == (
        probs.nbytes + tp.nbytes + opo.nbytes + rows * c * 12 + rows * 4
    )
    pen = op_inputs.build_penalty(b, v)
    a = dict(zip(pen.names, pen.args))
    rest = sum(x.nbytes for n, x in a.items() if isinstance(x, np.ndarray))
    rest -= a["pre_ids"].nbytes + a["logits"].nbytes
    # logits read and written in place; pre_ids: the generated tokens only (cur_len per request)
    want = 2 * a["logits"].nbytes + int(a["cur_len"].sum()) * 8 + rest
    assert bench.op_bytes("speculate_get_token_penalty_multi_scores", pen) == want
    sv = op_inputs.build_set_value(b)
    a = dict(zip(sv.names, sv.args))
    written = {sv.names[i] for i in sv.written}
    got = bench.op_bytes("speculate_set_value_by_flags_and_idx", sv)
    hist = a["pre_ids_all"].shape[0] * 4 * 8  # K + 1 = 4 entries per request, read and written
    small = sum(
        x.nbytes * (2 if n in written else 1)
        for n, x in a.items()
        if isinstance(x, np.ndarray) and n != "pre_ids_all"
    )
    assert got == 2 * hist + small
    assert bench.goal_us(100.0, 10) == 180.0


def test_bench_gpu_step_writes_every_row(tmp_path):
    bench = load_bench()
    args = ["--batches", "4", "--vocab", "128", "--hidden", "64", "--iters", "1", "--sets", "2"]
    assert bench.main([*args, *(["--simt"] if on_simt() else []), "--out", str(tmp_path)]) == 0
    with open(tmp_path / "bench_gpu_step.csv") as f:
        rows = list(csv.DictReader(f))
    got = {(r["provider"], r["metric"]) for r in rows}
    want = {(p, "host") for p in ("step-graph", "step-op-by-op")}
    want |= {("step-floor", "device"), ("step-goal", "device")}
    if not on_simt():
        want |= {(p, "device") for p in ("step-graph", "step-op-by-op")}
    assert got == want
    config = dict(kv.split("=") for kv in rows[0]["config"].split(";"))
    kernels, segments = int(config["kernels"]), int(config["segments"])
    assert segments == 5 and kernels > 16 * 3  # a begin, a check or apply and a commit per op
    by = {(r["provider"], r["metric"]): float(r["p50"]) for r in rows}
    floor = by[("step-floor", "device")]
    assert floor == pytest.approx(
        int(config["floor_bytes"]) / (float(config["copy_GBps"]) * 1e9) * 1e6, rel=1e-3
    )
    assert by[("step-goal", "device")] == pytest.approx(1.5 * floor + 3.0 * kernels, abs=1e-3)


@pytest.mark.skipif(not on_simt(), reason="a GPU is present: the benchmark would run")
def test_bench_gpu_step_refuses_without_a_gpu():
    """Without --simt the emulator is not a GPU: the benchmark refuses (exit 2) and says why."""
    env = {k: v for k, v in os.environ.items() if k not in ("FD_MTP_SIMT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu_step.py"), "--out", "/nonexistent"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "needs CuPy, a CUDA GPU" in run.stderr and "no figures without a GPU" in run.stderr
