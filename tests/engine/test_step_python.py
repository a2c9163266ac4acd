"""No per-request Python in the engine step (issue 36 §3): the Python lines one `LLMEngine.step`
executes do not grow with the batch, beyond a small per-request allowance for output delivery.

Method: ``sys.settrace`` counts "line" events inside one decode step (scheduling, insertion, the
runner's packing, the target's and the MTP block's forwards, sampling, verification, the
proposer's bookkeeping, stop checks, the hand-off to the engine and the stream deltas), at
batch 1, 8 and 32, plain and MTP (K = 2), on a tiny random checkpoint
(`fd_mtp.testing.write_random_checkpoint`). Nothing is excluded: the model forward (fd_mtp/model,
its attention metadata included) is counted too, and so are paddle's and numpy's own Python
wrappers (their work per call does not depend on the batch).

The allowance: `PER_REQUEST` lines per running request, the unavoidable output delivery of a
request that emitted tokens: its `StreamDelta` (the dataclass's generated ``__init__``, one line
per field; appending the tokens to the request's output runs in C-level ``map`` loops).
Measured on decode steps where no request crosses a KV block boundary (a block grant is
per-event work, once every ``block_size`` tokens of a request) and none finishes.

Measured when written, every frame counted (lines at batch 1 / 8 / 32): before, plain 3261 /
3814 / 5710 (79 per request) and MTP K = 2 8688 / 9745 / 13369 (151 per request); after, plain
3199 / 3248 / 3416 and MTP 8401 / 8450 / 8618 (7 per request: the StreamDelta).
"""

from __future__ import annotations

import sys

import pytest

paddle = pytest.importorskip("paddle")
pytest.importorskip("safetensors")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.testing import write_random_checkpoint  # noqa: E402

#: Python lines per running request allowed for output delivery (its StreamDelta)
PER_REQUEST = 8
BATCHES = (1, 8, 32)
MODES = {
    "plain": None,
    "mtp_k2": {
        "method": "mtp",
        "num_speculative_tokens": 2,
        "num_model_steps": 2,
        "verification": "greedy",
    },
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("step_python"), seed=5)


class LineCounter:
    """``sys.settrace`` line events of every Python frame, counted per function."""

    def __init__(self):
        self.lines = 0
        self.where: dict[str, int] = {}

    def _global(self, frame, event, arg):
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines += 1
            key = f"{frame.f_code.co_filename.split('/')[-1]}:{frame.f_code.co_name}"
            self.where[key] = self.where.get(key, 0) + 1
        return self._local

    def run(self, fn):
        sys.settrace(self._global)
        try:
            return fn()
        finally:
            sys.settrace(None)


def step_lines(ckpt, spec, batch: int) -> tuple[int, dict]:
    llm = fd_mtp.LLM(
        str(ckpt),
        max_num_seqs=max(BATCHES),
        max_model_len=128,
        block_size=64,
        speculative_config=spec,
    )
    engine = llm.engine
    for i in range(batch):
        engine.add_request(
            [3 + (7 * i + j) % 250 for j in range(8)],
            SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True),
        )
    for _ in range(4):  # prefill, then decode steps (shapes warm)
        engine.step()
    assert len(engine.running) == batch and all(r.prefilled for r in engine.running)
    counts = []
    for _ in range(2):
        c = LineCounter()
        deltas = c.run(engine.step)
        assert len(deltas) == batch and all(d.new_token_ids and not d.finished for d in deltas)
        counts.append((c.lines, c.where))
    return min(counts, key=lambda x: x[0])


@pytest.mark.parametrize("mode", list(MODES))
def test_step_python_lines_do_not_grow_with_the_batch(ckpt, mode):
    got = {b: step_lines(ckpt, MODES[mode], b) for b in BATCHES}
    lines = {b: n for b, (n, _) in got.items()}
    for b in BATCHES[1:]:
        extra = lines[b] - lines[1]
        allowed = PER_REQUEST * (b - 1)
        if extra > allowed:
            grew = {
                k: got[b][1].get(k, 0) - got[1][1].get(k, 0)
                for k in set(got[b][1]) | set(got[1][1])
            }
            top = sorted(grew.items(), key=lambda kv: -kv[1])[:12]
            pytest.fail(
                f"{mode}: one step runs {lines} Python lines at batch {list(lines)}; batch {b} "
                f"adds {extra} over batch 1, {extra / (b - 1):.1f} per request (allowed "
                f"{PER_REQUEST}). Grew most: {top}"
            )
