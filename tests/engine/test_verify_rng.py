"""The speculative runner passes speculate_verify's randomness explicitly (``seed`` = the runner's
verify seed, ``offset`` = its step number) and never relies on a wrapper's global counter: the
same generation gives the same tokens whatever ran before it in the process."""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams, ops  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint  # noqa: E402

SPEC = {
    "method": "mtp",
    "num_speculative_tokens": 2,
    "num_model_steps": 2,
    "verification": "rejection",
}
PARAMS = SamplingParams(max_tokens=10, temperature=0.9, top_p=0.95, ignore_eos=True, seed=5)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_exact_draft_checkpoint(tmp_path_factory.mktemp("rng"), seed=3, context=0.3)


def run(ckpt, seed=11):
    llm = fd_mtp.LLM(
        str(ckpt),
        max_num_seqs=2,
        max_model_len=64,
        block_size=8,
        speculative_config=SPEC,
        seed=seed,
    )
    rng = np.random.default_rng(0)
    ps = [[int(t) for t in rng.integers(3, 300, n)] for n in (6, 9)]
    return llm, [o.token_ids for o in llm.generate(ps, PARAMS, use_tqdm=False)]


def test_verify_gets_seed_and_offset_explicitly(ckpt, monkeypatch):
    calls = []
    verify = ops.speculate_verify

    def spy(*args, **kwargs):
        calls.append((kwargs.get("seed"), kwargs.get("offset")))
        return verify(*args, **kwargs)

    monkeypatch.setattr(ops, "speculate_verify", spy)
    llm, _ = run(ckpt, seed=11)
    assert len(calls) == llm.runner.num_steps > 3
    assert [s for s, _ in calls] == [11] * len(calls)
    assert [o for _, o in calls] == list(range(len(calls)))  # the runner's step number


def test_same_generation_same_tokens_whatever_ran_before(ckpt):
    _, first = run(ckpt)
    run(ckpt, seed=12)  # other draws in between
    _, again = run(ckpt)
    assert again == first
