"""benchmarks/bench_e2e.py end to end at a tiny size: --check passes, the CSV holds every metric."""

import csv

import pytest

from fd_mtp.testing.scripts import bench_results, load_script

pytest.importorskip("paddle")
pytest.importorskip("safetensors")
pytest.importorskip("matplotlib")


def test_bench_e2e_check_and_csv(tmp_path, capsys):
    bench = load_script("benchmarks/bench_e2e.py")
    bench.main(
        [
            *(
                "--modes plain,mtp_k2,hybrid_k3 --workloads greedy-heldout --batches 1,3"
                " --max-tokens 9 --prompt-len 6 --repeats 1 --check --context 0"
            ).split(),
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "check: passed" in out and "synthetic MTP head" in out
    rows, got = bench_results(tmp_path, "bench_e2e")
    for b in ("1", "3"):
        # context=0: MTP drafts always right, so every draft is accepted.
        assert got[("mtp_k2", b, "acceptance_pos0")] == got[("mtp_k2", b, "acceptance_pos1")] == 1.0
        assert got[("mtp_k2", b, "mean_accepted_length")] == 3.0
        assert (
            got[("plain", b, "mean_accepted_length")] == 1.0
            and ("plain", b, "acceptance_pos0") not in got
        )
        assert got[("mtp_k2", b, "steps")] < got[("plain", b, "steps")] == 9
        assert (
            got[("hybrid_k3", b, "proposer_host_ms_per_step")] > 0
            and got[("plain", b, "tokens_per_s")] > 0
        )
    assert {r["metric"] for r in rows if r["provider"] == "hybrid_k3"} == {
        "tokens_per_s",
        "step_latency",
        "steps",
        "mean_accepted_length",
        "acceptance_pos0",
        "acceptance_pos1",
        "acceptance_pos2",
        "proposer_host_ms_per_step",
        "t_step",
        "t_target",
        "t_draft",
        "substeps",
        "t_host",
    }
    for b in ("1", "3"):
        # the cost split adds up to the decode step; hybrid_k3 runs one MTP substep per step
        parts = got[("mtp_k2", b, "t_target")] + got[("mtp_k2", b, "t_host")]
        parts += got[("mtp_k2", b, "substeps")] * got[("mtp_k2", b, "t_draft")]
        assert parts == pytest.approx(got[("mtp_k2", b, "t_step")], rel=1e-3, abs=2e-3)
        assert got[("hybrid_k3", b, "substeps")] == 1.0 and got[("mtp_k2", b, "substeps")] == 2.0
        assert got[("plain", b, "t_draft")] == 0.0 and got[("plain", b, "t_step")] > 0
    assert (
        "forward: native; threads: paddle and the native kernel 1" in out
        and "pred" in out
        and "where speculation pays: mtp_k2" in out
    )


def test_bench_e2e_quick_workloads_with_adaptive_modes(tmp_path, capsys):
    """--quick over every workload: plain, a fixed K and both adaptive modes, one CSV row set
    per workload, the vs-best-K column, and --check on the greedy workloads."""
    bench = load_script("benchmarks/bench_e2e.py")
    bench.main(
        [
            *"--quick --modes plain,mtp_k1,adaptive,adaptive_ds --batches 1,2 --prompt-len 8".split(),
            "--check",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "check: passed" in out and "vs bestK" in out
    rows = list(csv.DictReader(open(tmp_path / "bench_e2e.csv")))  # figures per workload
    kernels = {r["kernel"] for r in rows}
    assert kernels == {f"e2e_decoding/{w}" for w in bench.WORKLOADS}
    for w in bench.WORKLOADS:
        got = {
            (r["provider"], r["x"])
            for r in rows
            if r["kernel"] == f"e2e_decoding/{w}" and r["metric"] == "tokens_per_s"
        }
        modes = ["plain", "mtp_k1", "adaptive"] + (["adaptive_ds"] if "sampled" in w else [])
        assert got == {(m, b) for m in modes for b in ("1", "2")}, w
        assert f"== {w} ==" in out
    assert (tmp_path / "bench_e2e_sampled-repeat.png").stat().st_size > 0
    assert "draft length k histogram" in out  # the adaptive modes report their choices
    # the repetitive workload repeats the prompt's first quarter
    assert bench.repetitive([1, 2, 3, 4, 5, 6, 7, 8]) == [1, 2] * 4


def test_bench_e2e_check_catches_a_difference(tmp_path, monkeypatch):
    bench = load_script("benchmarks/bench_e2e.py")
    orig = bench.fd_mtp.LLM.generate

    def corrupt_speculative(self, prompts, params, **kw):
        outs = orig(self, prompts, params, **kw)
        if self.speculative_config is not None:
            ids = outs[0].token_ids
            outs[0].token_ids = ids[:3] + [ids[3] + 1] + ids[4:]
        return outs

    monkeypatch.setattr(bench.fd_mtp.LLM, "generate", corrupt_speculative)
    with pytest.raises(
        AssertionError, match=r"mode mtp_k1, batch 1, request 0: .*first difference at token 3"
    ):
        bench.main(
            [
                *(
                    "--modes plain,mtp_k1 --workloads greedy-heldout --batches 1 --max-tokens 6"
                    " --prompt-len 4 --repeats 1 --check --out"
                ).split(),
                str(tmp_path),
            ]
        )
