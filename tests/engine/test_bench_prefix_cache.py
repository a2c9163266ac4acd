"""benchmarks/bench_prefix_cache.py at a tiny size on the demo model: --check passes, the cache
serves the shared system prompt and the chat history, the CSV holds every metric."""

import pytest

from fd_mtp.testing.scripts import bench_results, load_script

pytest.importorskip("paddle")
pytest.importorskip("matplotlib")


def test_bench_prefix_cache_check_and_csv(tmp_path, capsys):
    load_script("benchmarks/bench_prefix_cache.py").main(
        "--modes plain,mtp_k2 --conversations 3 --turns 2 --max-tokens 6 --system-chars 400 "
        f"--user-chars 80 --max-num-seqs 2 --check --out {tmp_path}".split()
    )
    out = capsys.readouterr().out
    assert "outputs with and without the prefix cache are equal" in out
    rows, got = bench_results(tmp_path, "bench_prefix_cache")
    for mode in ("plain", "mtp_k2"):
        off, on = f"{mode}/no-cache", f"{mode}/cache"
        for turn in ("1", "2"):
            assert got[(off, turn, "cached_tokens")] == got[(off, turn, "hit_rate")] == 0
            prompt = got[(off, turn, "computed_tokens")]
            assert got[(on, turn, "computed_tokens")] + got[(on, turn, "cached_tokens")] == prompt
            assert got[(on, turn, "ttft_floor")] > 0 and got[(on, turn, "tokens_per_s")] > 0
        # turn 1: the third chat finds the system prompt the first two computed (2 slots);
        # turn 2: every chat finds its own history
        assert 0 < got[(on, "1", "cached_tokens")] < got[(on, "2", "cached_tokens")]
        assert got[(on, "2", "hit_rate")] > 0.5
