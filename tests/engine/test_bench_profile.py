"""benchmarks/bench_profile.py at a tiny size: every cell profiled, the split adds up to the
instrumented step, the op counter counts, the floor is positive, the CSV holds every metric."""

import csv

import pytest

from fd_mtp.testing.scripts import load_script

pytest.importorskip("paddle")
pytest.importorskip("matplotlib")
pytest.importorskip("sentencepiece")


def load_bench():
    return load_script("benchmarks/bench_profile.py")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from fd_mtp.testing import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt"), with_tokenizer=True, seed=2)


@pytest.mark.parametrize("forward", ["native", "eager"])
def test_profile_cells_and_csv(ckpt, tmp_path, capsys, forward):
    bench = load_bench()
    out = tmp_path / "out"
    rc = bench.main(
        [
            "--model",
            str(ckpt),
            *"--batches 1,2 --modes plain,mtp_k2 --max-tokens 6 --prompt-chars 60 --repeats 1".split(),
            "--out",
            str(out),
            "--forward",
            forward,
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    for b in (1, 2):
        for mode in ("plain", "mtp_k2"):
            assert f"== batch {b}, {mode} (1 thread(s))" in text
    assert "mtp forward" in text and "target forward" in text
    rows = list(csv.DictReader((out / "bench_profile.csv").open()))
    kernels = {r["kernel"] for r in rows}
    assert {"step_profile/step", "step_profile/floor", "step_profile/ops_per_step"} <= kernels
    # the native forward runs a dense layer as one kernel call; the eager one, op by op
    layer_cat = "native_layer" if forward == "native" else "matmul"
    assert f"step_profile/target/{layer_cat}" in kernels
    assert f"step_profile/mtp/{layer_cat}" in kernels
    floors = [float(r["p50"]) for r in rows if r["kernel"] == "step_profile/floor"]
    ops = [float(r["p50"]) for r in rows if r["kernel"] == "step_profile/ops_per_step"]
    assert len(floors) == 4 and all(f > 0 for f in floors)
    assert len(ops) == 4 and all(n > 10 for n in ops)  # embedding, layers, norm, lm_head, ops
    assert (out / "bench_profile.png").stat().st_size > 0


def test_split_adds_up_and_restores(ckpt):
    """The exclusive-time split sums to (at most) the instrumented wall time; the timers and the
    op counter leave the patched functions as they were."""
    import paddle

    import fd_mtp.model.ernie as ernie
    import fd_mtp.model.ernie_layers as layers

    bench = load_bench()
    from fd_mtp.engine.sampling_params import SamplingParams

    llm = bench._make_llm(str(ckpt), 2, "mtp_k1", 256)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    before = (
        ernie._mm,
        layers._mm,
        layers._row_parallel,
        ernie.RMSNorm.forward,
        paddle.Tensor.__mul__,
    )
    prof = bench.profile_cell(llm, prompts, params)
    assert (
        ernie._mm,
        layers._mm,
        layers._row_parallel,
        ernie.RMSNorm.forward,
        paddle.Tensor.__mul__,
    ) == before
    total = sum(prof["split_ms"].values())
    assert 0 < total <= prof["instrumented_step_ms"] * 1.0001
    assert prof["work"][("target", "tokens")] > 0 and prof["work"][("mtp", "tokens")] > 0
    assert prof["ops_per_step"] > 0 and prof["to_host_per_step"] > 0
