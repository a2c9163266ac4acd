"""benchmarks/bench_serving.py end to end at a tiny size: servers start, --check passes, the CSV holds
every metric of every mode and concurrency, the PNG is written."""

import pytest

from fd_mtp.testing.scripts import bench_results, load_script

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("matplotlib")


def test_bench_serving_check_and_csv(tmp_path, capsys):
    bench = load_script("benchmarks/bench_serving.py")
    summaries = bench.main(
        [
            *(
                "--modes plain,mtp_k1 --num-prompts 4 --max-tokens 6 --max-concurrency 1,4"
                " --request-rate 50 --check --out"
            ).split(),
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "check: passed (2 modes x 2 concurrencies x 4 requests" in out
    rows, got = bench_results(tmp_path, "bench_serving")
    for mode in ("plain", "mtp_k1"):
        for c in ("1", "4"):
            for m in ("ttft", "itl", "tpot", "e2e"):
                assert 0 < got[(mode, c, f"{m}_ms")] <= got[(mode, c, f"{m}_p99_ms")]
            assert got[(mode, c, "output_tokens_per_s")] > 0
            # from the server's prefix-cache counters (on by default)
            assert 0 <= got[(mode, c, "prefix_cache_hit_rate")] <= 1
    # the MTP server reports its mean accepted length (1 + accepted / drafts, at most 1 + K)
    assert 1.0 <= got[("mtp_k1", "1", "mean_accepted_length")] <= 2.0
    assert ("plain", "1", "mean_accepted_length") not in got
    assert [s["tokens"] for s in summaries] == [24] * 4
