"""benchmarks/bench_distributed.py at a tiny size: TP=2 tokens equal TP=1's (--check), the CSV
holds every metric, and the PD hand-off moves exactly the request's KV blocks."""

import csv
import json

import pytest

from fd_mtp.testing.scripts import load_script

pytest.importorskip("matplotlib")


def test_bench_distributed_tiny(tmp_path):
    bench = load_script("benchmarks/bench_distributed.py")
    argv = ["--batches", "2", "--max-tokens", "4", "--repeats", "1", "--pd-lengths", "16,17"]
    bench.main(argv + ["--pd-requests", "1", "--check", "--out", str(tmp_path)])
    with open(tmp_path / "bench_distributed.csv") as f:
        rows = list(csv.DictReader(f))
    tp = {(r["provider"], r["x"]) for r in rows if r["kernel"] == "tp"}
    assert tp == {(f"tp{n}-{m}", "2") for n in (1, 2) for m in ("plain", "mtp")}
    from fd_mtp.assets import DEMO_MODEL

    cfg = json.loads((DEMO_MODEL / "config.json").read_text())
    block = 2 * cfg["num_key_value_heads"] * bench.BLOCK_SIZE * cfg["head_dim"] * 4  # K + V, fp32
    for r in rows:
        if r["kernel"] == "pd_handoff" and r["metric"] == "bytes":
            layers = cfg["num_hidden_layers"] + (r["provider"] == "mtp")
            blocks = -(-int(r["x"]) // bench.BLOCK_SIZE)  # whole blocks of the prompt
            assert float(r["p50"]) == layers * blocks * block
    metrics = {(r["provider"], r["metric"], r["x"]) for r in rows if r["kernel"] == "pd_handoff"}
    assert len(metrics) == 2 * 3 * 2
    assert (tmp_path / "bench_distributed_tp.png").stat().st_size > 0
    assert (tmp_path / "bench_distributed_pd.png").stat().st_size > 0
