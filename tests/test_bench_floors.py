"""benchmarks/bench_gpu_ops.py without a GPU: --floors-only prints and writes the bytes-moved
table (the measured columns "not measured"), the models count what the ops must move, and a run
that needs a GPU refuses clearly where there is none."""

import csv

import numpy as np
import pytest

from fd_mtp.testing.scripts import load_script


def load_bench():
    return load_script("benchmarks/bench_gpu_ops.py", "bench_gpu_ops_floors")


def test_op_names_keep_bracketed_variants():
    bench = load_bench()
    got = bench._op_names("a, speculate_verify[rejection,V=32000],top_p_candidates[V=100000]")
    assert got == ["a", "speculate_verify[rejection,V=32000]", "top_p_candidates[V=100000]"]


def test_floors_only_writes_the_table(tmp_path, capsys):
    bench = load_bench()
    ops = ["top_p_candidates[V=32000]", "speculate_get_logits[V=100000]", "paged_attention"]
    assert (
        bench.main(
            ["--floors-only", "--batches", "1,5", "--ops", ",".join(ops), "--out", str(tmp_path)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "not measured" in out and "floor bytes" in out
    with open(tmp_path / "bench_gpu_floors.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["kernel"], int(r["x"])) for r in rows] == [(o, b) for o in ops for b in (1, 5)]
    for r in rows:
        assert r["floor_us"] == r["device_us"] == r["ratio"] == "not measured"
        assert int(r["floor_bytes"]) > 0


def test_vocabulary_floors_count_the_rows():
    """top_p: every probs row read once plus C (score, token) pairs and a length per row; the
    gathers: every copied row read and written once; paged_attention: the cached context of each
    request once per kv head (K and V) dominates."""
    bench = load_bench()
    b = bench.all_builders()
    case = b["top_p_candidates[V=32000]"](7)
    probs = case.args[0]
    c = case.args[case.names.index("candidates_len")]
    rows = probs.shape[0]
    extra = case.args[1].nbytes + case.args[2].nbytes + rows * (c * 12 + 4)
    assert bench.floor_bytes("top_p_candidates[V=32000]", case)[0] == probs.nbytes + extra

    case = b["speculate_get_target_logits[V=32000]"](7)
    enc = case.args[case.names.index("seq_lens_encoder")].reshape(-1)
    acc = case.args[case.names.index("accept_num")].reshape(-1)
    copied = int(np.where(enc > 0, 1, np.maximum(acc, 0)).sum())
    fb = bench.floor_bytes("speculate_get_target_logits[V=32000]", case)[0]
    assert fb == 2 * copied * 32000 * 4 + 16 * 7

    case = b["paged_attention"](3)
    dec = case.args[case.names.index("seq_lens_decoder")]
    kv = 2 * int(dec.sum()) * bench.PAGED["kv_heads"] * bench.PAGED["head_dim"] * 4
    fb = bench.floor_bytes("paged_attention", case)[0]
    assert kv < fb < kv * 1.2


def test_refuses_without_a_gpu(tmp_path, monkeypatch):
    bench = load_bench()
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    monkeypatch.delenv("FD_MTP_SIMT", raising=False)
    with pytest.raises(SystemExit, match="needs CuPy, a CUDA GPU.*--floors-only"):
        bench.main(["--quick", "--out", str(tmp_path)])
