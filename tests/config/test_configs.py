"""SchedulerConfig / CacheConfig validation, dict parsing, and `LLM` parsing its keyword arguments
once into typed configs that the engine, the runner and the proposer share."""

import pytest

from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig


def assert_field_refused(cls, field, value, message):
    """``cls(field=value)`` and ``cls.from_value({field: value})`` raise a ValueError matching
    ``message``."""
    with pytest.raises(ValueError, match=message):
        cls(**{field: value})
    with pytest.raises(ValueError, match=message):
        cls.from_value({field: value})


@pytest.mark.parametrize(
    "cls,field,value,message",
    [
        (
            SchedulerConfig,
            "max_num_seqs",
            0,
            r"SchedulerConfig.max_num_seqs must be an int >= 1, got 0",
        ),
        (SchedulerConfig, "max_num_seqs", True, "SchedulerConfig.max_num_seqs must be an int"),
        (
            SchedulerConfig,
            "max_num_batched_tokens",
            1.5,
            "SchedulerConfig.max_num_batched_tokens must be an int >= 1",
        ),
        (
            SchedulerConfig,
            "max_model_len",
            1,
            r"SchedulerConfig.max_model_len must be an int >= 2, got 1",
        ),
        (CacheConfig, "block_size", 2048, r"CacheConfig.block_size must be an int in \[1, 1024\]"),
        (CacheConfig, "block_size", 0, r"CacheConfig.block_size must be an int in \[1, 1024\]"),
        (CacheConfig, "num_gpu_blocks", 0, "CacheConfig.num_gpu_blocks must be an int >= 1"),
        (CacheConfig, "enc_dec_block_num", -1, "CacheConfig.enc_dec_block_num must be an int >= 0"),
    ],
)
def test_bad_values_raise_naming_the_field(cls, field, value, message):
    assert_field_refused(cls, field, value, message)


def test_unknown_dict_keys_are_refused_by_name():
    with pytest.raises(ValueError, match=r"scheduler_config has unknown fields \['max_num_seq'\]"):
        SchedulerConfig.from_value({"max_num_seq": 4})
    with pytest.raises(ValueError, match=r"cache_config has unknown fields \['blocksize'\]"):
        CacheConfig.from_value({"blocksize": 16})
    with pytest.raises(ValueError, match="cache_config must be a CacheConfig, a dict or None"):
        CacheConfig.from_value(16)
    c = CacheConfig(block_size=16)
    assert CacheConfig.from_value(c) is c and CacheConfig.from_value(None) == CacheConfig()
    assert SchedulerConfig.from_value({"max_num_seqs": 3}).max_num_seqs == 3


def test_resolve_fills_the_model_dependent_defaults():
    s = SchedulerConfig(max_num_seqs=3).resolve(max_position_embeddings=512)
    assert s.max_model_len == 512 and SchedulerConfig().resolve(10**6).max_model_len == 4096
    with pytest.raises(
        ValueError, match="max_model_len 600 exceeds the model's max_position_embeddings 512"
    ):
        SchedulerConfig(max_model_len=600).resolve(512)
    c = CacheConfig(block_size=8).resolve(
        SchedulerConfig(max_num_seqs=3, max_model_len=40), extra_positions=3
    )
    assert c.num_gpu_blocks == 3 * 6  # ceil(43 / 8) per slot
    assert CacheConfig(block_size=8, num_gpu_blocks=5).resolve(s).num_gpu_blocks == 5
    spec = SpeculativeConfig(num_speculative_tokens=3, num_model_steps=2)
    assert (spec.lookahead, spec.extra_positions) == (1, 4)
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=3).extra_positions == 3


def test_llm_parses_once_and_passes_the_objects_down(tmp_path, monkeypatch):
    pytest.importorskip("paddle")
    import fd_mtp
    from fd_mtp.testing import write_exact_draft_checkpoint

    calls = []
    original = SpeculativeConfig.from_value.__func__

    def counted(cls, value):
        calls.append(value)
        return original(cls, value)

    monkeypatch.setattr(SpeculativeConfig, "from_value", classmethod(counted))
    ckpt = write_exact_draft_checkpoint(tmp_path, seed=0)
    llm = fd_mtp.LLM(
        str(ckpt),
        max_num_seqs=2,
        max_model_len=32,
        block_size=8,
        max_num_batched_tokens=16,
        speculative_config={"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2},
    )
    assert len(calls) == 1  # parsed once, in LLM.__init__
    spec, runner = llm.speculative_config, llm.runner
    assert runner.spec_config is spec and runner.proposer.config is spec
    assert runner.scheduler_config is llm.scheduler_config is llm.engine.scheduler_config
    assert runner.cache_config is llm.cache_config
    assert llm.scheduler_config == SchedulerConfig(
        max_num_seqs=2, max_num_batched_tokens=16, max_model_len=32
    )
    assert (
        llm.cache_config.block_size == 8 and llm.cache_config.num_gpu_blocks == 2 * 5
    )  # ceil((32 + 3) / 8)
    # below the LLM, a dict is not re-parsed: the runner wants the typed config
    from fd_mtp.engine.spec_runner import SpeculativeModelRunner

    with pytest.raises(ValueError, match="speculative_config must be a SpeculativeConfig"):
        SpeculativeModelRunner(
            runner.model,
            {"method": "mtp"},
            scheduler_config=llm.scheduler_config,
            cache_config=llm.cache_config,
        )
    assert len(calls) == 1
