"""SpeculativeConfig: FastDeploy defaults, dict input, validation errors naming the field."""

import pytest
from test_configs import assert_field_refused

from fd_mtp.config import CANDIDATE_LENS, SpeculativeConfig


def test_defaults_follow_fastdeploy():
    c = SpeculativeConfig()
    assert (c.method, c.num_speculative_tokens, c.num_model_steps, c.mtp_strategy) == (
        "mtp",
        1,
        1,
        "default",
    )
    assert (c.max_candidate_len, c.verify_window, c.max_ngram_size, c.min_ngram_size) == (
        5,
        2,
        5,
        2,
    )
    assert c.num_gpu_block_expand_ratio == 1.0 and c.benchmark_mode is False and c.model is None
    assert not c.hybrid_mode


def test_dict_input_as_fastdeploy_accepts_it():
    c = SpeculativeConfig.from_value(
        {
            "method": "mtp",
            "num_speculative_tokens": 3,
            "num_model_steps": 2,
            "mtp_strategy": "with_ngram",
            "enable_draft_logprob": False,
        }
    )
    assert (c.num_speculative_tokens, c.num_model_steps, c.hybrid_mode) == (3, 2, True)
    assert c.extra == {"enable_draft_logprob": False}
    assert SpeculativeConfig.from_value(None) is None
    assert SpeculativeConfig.from_value({"method": None}) is None
    assert SpeculativeConfig.from_value(c) is c


def test_mtp_raises_k_to_num_model_steps_like_fastdeploy():
    assert (
        SpeculativeConfig(num_speculative_tokens=1, num_model_steps=3).num_speculative_tokens == 3
    )
    assert (
        SpeculativeConfig(
            method="ngram", num_speculative_tokens=1, num_model_steps=3
        ).num_speculative_tokens
        == 1
    )


def test_hybrid_mode_needs_more_drafts_than_substeps():
    assert not SpeculativeConfig(
        num_speculative_tokens=2, num_model_steps=2, mtp_strategy="with_ngram"
    ).hybrid_mode
    assert SpeculativeConfig(
        num_speculative_tokens=3, num_model_steps=2, mtp_strategy="with_ngram"
    ).hybrid_mode


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("method", "medusa", "method must be one of"),
        ("num_speculative_tokens", 0, r"num_speculative_tokens must be in \[1, 5\], got 0"),
        ("num_speculative_tokens", 6, r"num_speculative_tokens must be in \[1, 5\], got 6"),
        ("num_speculative_tokens", 2.0, "num_speculative_tokens must be an int"),
        ("num_speculative_tokens", True, "num_speculative_tokens must be an int"),
        ("num_model_steps", 0, "num_model_steps must be in"),
        ("mtp_strategy", "ngram_first", "mtp_strategy must be one of"),
        ("verification", "sampling", "verification must be one of"),
        ("max_candidate_len", 11, "max_candidate_len must be one of"),
        ("verify_window", -1, "verify_window must be >= 0"),
        ("min_ngram_size", 6, r"min_ngram_size must be in \[1, 5\]"),
        ("num_gpu_block_expand_ratio", 0, "num_gpu_block_expand_ratio must be a number > 0"),
        ("benchmark_mode", 1, "benchmark_mode must be a bool"),
        ("model", 3, "model must be a path string or None"),
        ("stop_handling", "host", r"stop_handling must be one of \['engine', 'ops'\], got 'host'"),
        ("stop_handling", None, "stop_handling must be one of"),
        ("stop_handling", True, "stop_handling must be one of"),
    ],
)
def test_bad_values_raise_naming_the_field(field, value, message):
    assert_field_refused(SpeculativeConfig, field, value, message)


def test_unknown_dict_fields_are_refused_not_ignored():
    with pytest.raises(ValueError, match=r"unknown fields \['num_speculative_token'\]"):
        SpeculativeConfig.from_value({"method": "mtp", "num_speculative_token": 3})
    with pytest.raises(ValueError, match="must be a SpeculativeConfig, a dict or None"):
        SpeculativeConfig.from_value("mtp")


def test_every_candidate_len_top_p_candidates_accepts_is_valid():
    for c in CANDIDATE_LENS:
        assert SpeculativeConfig(verification="topp", max_candidate_len=c).max_candidate_len == c


def test_a_separate_draft_model_is_refused_not_ignored():
    for value in ("/nonexistent", "baidu/ERNIE-4.5-0.3B-Paddle"):
        with pytest.raises(
            ValueError, match=r"SpeculativeConfig.model=.*MTP block of the main checkpoint"
        ):
            SpeculativeConfig.from_value({"method": "mtp", "model": value})
        with pytest.raises(ValueError, match="leave model unset"):
            SpeculativeConfig(model=value)
    assert SpeculativeConfig(model=None).model is None
    assert SpeculativeConfig.from_value({"method": "mtp", "model": ""}).model is None


def test_stop_handling_defaults_to_the_engine_and_accepts_ops():
    assert SpeculativeConfig().stop_handling == "engine"
    assert SpeculativeConfig(stop_handling="ops").stop_handling == "ops"
    c = SpeculativeConfig.from_value({"method": "ngram", "stop_handling": "ops"})
    assert (c.method, c.stop_handling, c.extra) == ("ngram", "ops", {})
