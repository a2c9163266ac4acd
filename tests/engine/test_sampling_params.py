"""SamplingParams validation: each bad field raises ValueError naming it; good values normalised."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_mtp.engine.sampling_params import SamplingParams

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize(
    "field, value",
    [
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("temperature", "1"),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -1),
        ("top_k", 2.5),
        ("max_tokens", 0),
        ("max_tokens", True),
        ("min_tokens", -1),
        ("min_tokens", 17),
        ("repetition_penalty", 0.0),
        ("frequency_penalty", 2.5),
        ("presence_penalty", -3.0),
        ("seed", -1),
        ("seed", 2**63),
        ("seed", 1.0),
        ("stop", 5),
        ("stop", [""]),
        ("stop", ["a", 3]),
        ("stop_token_ids", [-1]),
        ("stop_token_ids", "3"),
        ("ignore_eos", 1),
    ],
)
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"SamplingParams.{field} "):
        SamplingParams(**{field: value})


def test_defaults_and_normalisation():
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens, p.min_tokens) == (1.0, 1.0, 0, 16, 0)
    assert p.stop_list == [] and p.stop_token_ids == [] and not p.greedy
    p = SamplingParams(temperature=0, stop="x", stop_token_ids=(4, 5), seed=3, top_p=1)
    assert (
        p.greedy
        and p.stop_list == ["x"]
        and p.stop_token_ids == [4, 5]
        and isinstance(p.temperature, float)
    )
    assert SamplingParams(top_k=1).greedy


def test_import_is_light():
    code = (
        "import sys, fd_mtp; fd_mtp.SamplingParams(max_tokens=2); "
        "assert 'paddle' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ROOT})
