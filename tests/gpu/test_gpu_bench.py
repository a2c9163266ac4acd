"""benchmarks/bench_gpu_ops.py runs end to end on the backend at hand (a GPU, or the simt
emulator under FD_MTP_SIMT=1) and writes the rows it promises: per op both error modes, the step
in its three forms, positive latencies. A smoke run (--quick, small batches): the figures
themselves are measured on a GPU by tools/gpu_check.sh, never asserted.

Needs CuPy, a CUDA GPU (or FD_MTP_SIMT=1) and the fd_mtp_cuda module; skipped otherwise.
"""

import csv

from gpu_util import skip_module_without_gpu

skip_module_without_gpu()

from fd_mtp.testing.scripts import load_script  # noqa: E402


def load_bench():
    return load_script("benchmarks/bench_gpu_ops.py")


def test_bench_gpu_ops_writes_every_row(tmp_path):
    bench = load_bench()
    # a bracketed case name; not top_p_candidates, whose barriers make a random schedule take ~70 s
    ops = ["speculate_step_paddle", "pre_process", "speculate_get_logits[V=32000]"]
    args = ["--quick", "--batches", "1,3", "--ops", ",".join(ops), "--step-batches", "4"]
    assert bench.main([*args, "--out", str(tmp_path)]) == 0
    with open(tmp_path / "bench_gpu_ops.csv") as f:
        rows = list(csv.DictReader(f))
    got = {(r["kernel"], r["provider"], int(r["x"])) for r in rows}
    want = {
        (op, f"cuda-{mode}", b) for op in ops for mode in ("deferred", "checked") for b in (1, 3)
    }
    want |= {("step", p, 4) for p in ("step-exact-deferred", "step-exact-checked", "step-padded")}
    assert got == want
    assert len(rows) == len(want)
    for r in rows:
        assert 0 < float(r["p20"]) <= float(r["p50"]) <= float(r["p80"]), r
        assert r["unit"] == "us" and r["device"]


def test_bench_gpu_ops_rejects_unknown_and_host_ops(tmp_path, capsys):
    import pytest

    bench = load_bench()
    for op in ("no_such_op", "speculate_update_input_ids_cpu"):
        with pytest.raises(SystemExit):
            bench.main(["--quick", "--ops", op, "--out", str(tmp_path)])
        assert op in capsys.readouterr().err
