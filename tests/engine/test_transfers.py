"""One owner of per-slot state: at most one host-to-device and exactly one device-to-host transfer
per engine step, all made by the runner's `InputBatch` (design §7).

Two checks on full generations (plain and speculative, greedy and sampled, chunked prefill and
preemption): the `InputBatch` counts its own transfers per ``execute_model``; and every
transfer-shaped paddle call made from fd_mtp/engine, fd_mtp/proposer or fd_mtp/batch outside
``input_batch.py`` during a step (``paddle.to_tensor`` to the device, ``Tensor.numpy`` /
``tolist`` / ``item`` / ``bool()`` / ``int()`` / ``float()`` / ``cpu()``, ``Tensor.__setitem__`` /
``set_value`` / ``cuda()``) is counted as a stray: there must be none. Reads of the tensors
FastDeploy keeps on the CPU (``not_need_stop``: registered as host tensors) and host-only tensors
built with ``place=CPUPlace()`` are not transfers. (The model's attention backend builds its
metadata on the host: fd_mtp/model is outside this check.)
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint  # noqa: E402

SCOPES = ("/fd_mtp/engine/", "/fd_mtp/proposer/", "/fd_mtp/batch/")
H2D = ("set_value", "__setitem__", "cuda")
D2H = ("numpy", "tolist", "item", "__bool__", "__int__", "__float__", "cpu")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_exact_draft_checkpoint(tmp_path_factory.mktemp("transfers"), seed=3, context=0.3)


class StrayTransfers:
    """Counts transfer-shaped paddle calls from the engine / proposer / batch code (see the module
    docstring) while ``active``; ``batches`` are the `InputBatch`es whose host tensors are exempt."""

    def __init__(self, monkeypatch):
        self.active = False
        self.batches = []
        self.cpu_made: dict[int, object] = {}
        self.strays: list[str] = []
        orig_to_tensor = paddle.to_tensor

        def to_tensor(*args, **kwargs):
            out = orig_to_tensor(*args, **kwargs)
            place = kwargs.get("place")
            if isinstance(place, paddle.CPUPlace):
                self.cpu_made[id(out)] = out
            else:
                self._note("to_tensor")
            return out

        monkeypatch.setattr(paddle, "to_tensor", to_tensor)
        for name in H2D + D2H:
            orig = getattr(paddle.Tensor, name)
            monkeypatch.setattr(paddle.Tensor, name, self._wrap(name, orig))

    def _wrap(self, name, orig):
        def method(t, *args, **kwargs):
            if not (any(b.is_host(t) for b in self.batches) or id(t) in self.cpu_made):
                self._note(name)
            return orig(t, *args, **kwargs)

        return method

    def _note(self, name):
        if not self.active:
            return
        f = sys._getframe(2)
        fn = f.f_code.co_filename.replace("\\", "/")
        if any(s in fn for s in SCOPES) and not fn.endswith("batch/input_batch.py"):
            self.strays.append(f"{name} at {fn.split('fd_mtp/')[-1]}:{f.f_lineno}")


SAMPLED = dict(temperature=0.8, top_p=0.9, top_k=20, ignore_eos=True)
GREEDY = dict(temperature=0.0, ignore_eos=True)
CASES = {
    "plain-greedy": (None, GREEDY),
    "plain-sampled": (None, dict(SAMPLED, stop_token_ids=[7, 9], min_tokens=4)),
    "mtp-greedy": (
        {
            "method": "mtp",
            "num_speculative_tokens": 2,
            "num_model_steps": 2,
            "verification": "greedy",
        },
        GREEDY,
    ),
    "mtp-target-match": (
        {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 2},
        SAMPLED,
    ),
    "mtp-rejection": (
        {
            "method": "mtp",
            "num_speculative_tokens": 2,
            "num_model_steps": 1,
            "verification": "rejection",
        },
        SAMPLED,
    ),
    "mtp-topp": (
        {
            "method": "mtp",
            "num_speculative_tokens": 2,
            "num_model_steps": 2,
            "verification": "topp",
        },
        SAMPLED,
    ),
    "ngram": ({"method": "ngram", "num_speculative_tokens": 3, "verification": "greedy"}, GREEDY),
    "hybrid": (
        {
            "method": "mtp",
            "num_speculative_tokens": 3,
            "num_model_steps": 1,
            "mtp_strategy": "with_ngram",
            "verification": "greedy",
        },
        GREEDY,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_transfer_each_way_per_step(ckpt, case, monkeypatch):
    spec, sampling = CASES[case]
    # chunked prefill (8 tokens per step) and preemption (14 blocks of 4 for 4 slots)
    llm = fd_mtp.LLM(
        str(ckpt),
        max_num_seqs=4,
        max_model_len=64,
        block_size=4,
        num_gpu_blocks=14,
        max_num_batched_tokens=8,
        speculative_config=spec,
    )
    runner, ib = llm.runner, llm.runner.input_batch
    hook = StrayTransfers(monkeypatch)
    hook.batches.append(ib)
    per_step = []
    execute = runner.execute_model

    def counted(decode_slots):
        h2d, d2h = ib.stats.h2d, ib.stats.d2h
        hook.active = True
        try:
            out = execute(decode_slots)
        finally:
            hook.active = False
        per_step.append((ib.stats.h2d - h2d, ib.stats.d2h - d2h, bool(out)))
        return out

    monkeypatch.setattr(runner, "execute_model", counted)
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(3, 300, n)] for n in (5, 17, 3, 11, 9)]
    params = [SamplingParams(max_tokens=12, seed=i, **sampling) for i in range(len(prompts))]
    engine = llm.engine
    for p, sp in zip(prompts, params):
        engine.add_request(p, sp)
    steps = 0
    while engine.has_unfinished():
        hook.active = True  # the whole engine step: scheduling, insertion, bookkeeping
        try:
            engine.step()
        finally:
            hook.active = False
        steps += 1
    ran = [s for s in per_step if s[2]]
    assert steps == len(per_step) and len(ran) >= 8
    assert all(h2d <= 1 and d2h == 1 for h2d, d2h, _ in ran), per_step
    assert sum(h2d for h2d, _, _ in ran) >= len(ran) // 2  # the push carries real work
    assert not hook.strays, sorted(set(hook.strays))
    if case == "plain-greedy" or case == "mtp-greedy":
        assert engine.num_preemptions > 0


@pytest.mark.parametrize("path", ["buffer", "cpu_views"])
def test_push_and_pull_move_exactly_what_changed(path):
    """The InputBatch on its own: staged writes and changed mirrored arrays in one push (one buffer
    on a device; on CPU tensors zero-copy views, the path an all-CPU batch takes); the pull
    refreshes the mirrored arrays; integers beyond the buffer's exact range are refused by the
    buffer and written exactly through the views."""
    from fd_mtp.batch import InputBatch

    B = 3
    t = {
        "seq_lens_this_time": paddle.full([B, 1], 0, "int32"),
        "seq_lens_encoder": paddle.full([B, 1], 0, "int32"),
        "seq_lens_decoder": paddle.full([B, 1], 0, "int32"),
        "step_idx": paddle.full([B, 1], 0, "int64"),
        "stop_flags": paddle.full([B, 1], True, "bool"),
        "block_tables": paddle.full([B, 4], -1, "int32"),
        "pre_ids": paddle.full([B, 6], -1, "int64"),
        "top_p": paddle.full([B, 1], 1.0, "float32"),
        "not_need_stop": paddle.full([1], False, "bool").cpu(),
    }
    ib = InputBatch(t)
    assert ib._on_cpu()  # every tensor here is a CPU tensor
    ib._cpu = path == "cpu_views"  # "buffer": the device path, exercised on CPU tensors
    assert ib.push() == {} and ib.stats.h2d == 0  # nothing to send: no transfer
    ib.this_time[1] = 5
    ib.stop[1] = False
    ib.block_tables[1, :2] = [7, 3]
    w = ib.writer(t)
    w["pre_ids"][1] = -1
    w["pre_ids"][1, 1:3] = [40, 41]
    w["pre_ids"][2, 5] = 9
    w["pre_ids"][2, 5] = 10  # the last write wins
    w["top_p"][1] = 0.8
    with pytest.raises(ValueError, match="mirrored"):
        w["step_idx"][0] = 1
    dev = ib.push({"uniform": np.array([0.25, 0.5], np.float32), "greedy": np.array([True, False])})
    assert ib.stats.h2d == 1
    assert t["seq_lens_this_time"].numpy().ravel().tolist() == [0, 5, 0]
    assert t["stop_flags"].numpy().ravel().tolist() == [True, False, True] and bool(
        t["not_need_stop"][0]
    )
    assert t["block_tables"][1].tolist() == [7, 3, -1, -1]
    assert t["pre_ids"].numpy().tolist() == [[-1] * 6, [-1, 40, 41, -1, -1, -1], [-1] * 5 + [10]]
    assert abs(float(t["top_p"][1, 0]) - 0.8) < 1e-7
    assert dev["uniform"].numpy().tolist() == [0.25, 0.5] and dev["greedy"].numpy().tolist() == [
        True,
        False,
    ]
    assert ib.push() == {} and ib.stats.h2d == 1  # everything was sent
    # the ops write the tensors; the pull brings them back into the mirrored arrays
    paddle.assign(paddle.to_tensor([[1], [6], [0]], dtype="int32"), t["seq_lens_decoder"])
    out = ib.pull({"pre_ids": t["pre_ids"]}, mirrored=True)
    assert ib.stats.d2h == 1 and ib.dec.tolist() == [1, 6, 0] and out["pre_ids"].dtype == np.int64
    assert not ib.has_pending
    w["pre_ids"][0, 0] = 2**60
    if path == "buffer":
        with pytest.raises(ValueError, match="2\\*\\*53"):
            ib.push()
    else:
        ib.push()
        assert int(t["pre_ids"][0, 0]) == 2**60
