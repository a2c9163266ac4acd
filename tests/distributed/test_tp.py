"""Tensor parallelism (fd_mtp.model.parallel, fd_mtp.distributed.tp): TP = 2 in real worker
processes (paddle.distributed.spawn, gloo on 127.0.0.1) gives TP = 1's greedy tokens, plain and
MTP, on the demo model and on a random MoE checkpoint; shards reassemble the checkpoint; bad
degrees are refused before anything starts; a dead worker makes the front raise, not hang."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from fd_mtp import LLM, SamplingParams
from fd_mtp.assets import DEMO_MODEL
from fd_mtp.config import ParallelConfig
from fd_mtp.model.config import ErnieConfig
from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP
from fd_mtp.model.loader import load_checkpoint
from fd_mtp.model.parallel import TensorParallel, check_tp_config
from fd_mtp.testing import tiny_config, write_random_checkpoint

MTP = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
GREEDY = SamplingParams(temperature=0, max_tokens=20)


@pytest.fixture(scope="module")
def moe_ckpt(tmp_path_factory):
    # 4 experts (dense-combine path), an odd vocabulary (the last vocab shard is padded)
    return write_random_checkpoint(
        tmp_path_factory.mktemp("moe"), seed=3, moe_num_experts=4, vocab_size=301
    )


@pytest.fixture(scope="module")
def moe10_ckpt(tmp_path_factory):
    # 10 experts: the per-expert path (> dense_combine_max_experts)
    return write_random_checkpoint(
        tmp_path_factory.mktemp("moe10"), seed=4, moe_num_experts=10, num_hidden_layers=2
    )


def _outputs(llm, prompts):
    return [o.token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


def _compare(path, prompts, spec):
    kw = dict(max_num_seqs=4, max_model_len=128, block_size=16, speculative_config=spec)
    one = LLM(path, **kw)
    want = _outputs(one, prompts)
    llm = LLM(path, tensor_parallel_size=2, **kw)
    try:
        got = _outputs(llm, prompts)
        if spec is not None:  # the sharded drafter proposed (and had accepted) the same drafts
            m1, m2 = one.speculative_metrics, llm.speculative_metrics
            assert m2.num_drafted > 0
            assert (m2.num_drafted, m2.num_accepted) == (m1.num_drafted, m1.num_accepted)
    finally:
        llm.close()
    assert all(not p.is_alive() for p in llm.engine.processes)
    assert got == want
    assert all(len(t) == GREEDY.max_tokens for t in got)


DEMO_PROMPTS = ["def main(", "import os\n", "class Foo:", "for i in range("]
ID_PROMPTS = [[5, 17, 33, 2 + 7], [100, 101, 102], [250, 3, 9, 44, 11, 12, 13], [7]]


@pytest.mark.parametrize("spec", [None, MTP], ids=["plain", "mtp"])
def test_tp2_equals_tp1_demo_model(spec):
    _compare(DEMO_MODEL, DEMO_PROMPTS, spec)


@pytest.mark.parametrize("spec", [None, MTP], ids=["plain", "mtp"])
def test_tp2_equals_tp1_random_moe(moe_ckpt, spec):
    _compare(moe_ckpt, ID_PROMPTS, spec)


def test_tp2_equals_tp1_moe_per_expert_path(moe10_ckpt):
    _compare(moe10_ckpt, ID_PROMPTS, MTP)


# --------------------------------------------------------------------------- in one process
@pytest.mark.parametrize("which", ["demo", "moe"])
def test_shards_reassemble_the_checkpoint(which, moe_ckpt):
    """Each rank's parameters are its slice of the checkpoint; concatenated over the ranks (along
    the split axis, padding dropped) they are the whole tensors; replicated ones are equal."""
    path = DEMO_MODEL if which == "demo" else moe_ckpt
    ranks = [load_checkpoint(path, tp=TensorParallel(r, 2)) for r in range(2)]
    one = load_checkpoint(path)  # the single-process models (the loader's names and layout)
    cfg = one[2]
    for part in (0, 1):  # main model, MTP
        full = {n: v.numpy() for n, v in one[part].state_dict().items()}
        for local in ranks[0][part].state_dict():
            name0, _ = ranks[0][part].tp_sources()[local]
            name1, _ = ranks[1][part].tp_sources()[local]
            a = ranks[0][part].state_dict()[local].numpy()
            b = ranks[1][part].state_dict()[local].numpy()
            whole = full[name0]
            if name0 != name1:  # a routed expert: each rank holds other experts, whole
                assert np.array_equal(a, whole) and np.array_equal(b, full[name1])
            elif a.shape == whole.shape:
                assert np.array_equal(a, whole) and np.array_equal(b, whole), local
            else:
                axis = next(i for i, (x, y) in enumerate(zip(a.shape, whole.shape)) if x != y)
                joined = np.concatenate([a, b], axis=axis)
                joined = np.take(joined, np.arange(whole.shape[axis]), axis=axis)
                assert np.array_equal(joined, whole), local
    assert ranks[0][0].config.num_key_value_heads == cfg.num_key_value_heads // 2


def test_tp1_model_is_the_single_process_model():
    """TensorParallel(0, 1) takes the single-process code paths: same parameters, same output."""
    cfg = ErnieConfig.from_file(DEMO_MODEL / "config.json")
    a = Ernie4_5ForCausalLM(cfg)
    b = Ernie4_5ForCausalLM(cfg, tp=TensorParallel(0, 1))
    assert b.tp is None and b.config is cfg and b.tp_sources() is None
    assert {k: v.shape for k, v in a.state_dict().items()} == {
        k: v.shape for k, v in b.state_dict().items()
    }
    assert Ernie4_5MTP(cfg, b).tp is None


# --------------------------------------------------------------------------- refused
def test_degree_must_divide_heads_and_experts():
    cfg = ErnieConfig.from_file(DEMO_MODEL / "config.json")  # 4 heads, 2 kv heads
    with pytest.raises(ValueError, match="num_key_value_heads"):
        check_tp_config(cfg, 4)
    with pytest.raises(ValueError, match="num_attention_heads"):
        check_tp_config(cfg, 3)
    # 4 heads, 2 kv heads and the MLP widths divide by 2; 3 experts do not
    moe = tiny_config(moe_num_experts=3, moe_k=1, moe_intermediate_size=16)
    with pytest.raises(ValueError, match="moe_num_experts"):
        check_tp_config(moe, 2)
    check_tp_config(cfg, 2)
    check_tp_config(cfg, 1)


def test_llm_refuses_bad_tp_before_starting_workers(moe_ckpt):
    with pytest.raises(ValueError, match="tensor_parallel_size=4 does not divide.*num_key_value"):
        LLM(DEMO_MODEL, tensor_parallel_size=4)
    with pytest.raises(ValueError, match="tensor_parallel_size must be an int >= 1"):
        LLM(DEMO_MODEL, tensor_parallel_size=0)
    model, _, _ = load_checkpoint(moe_ckpt)
    with pytest.raises(ValueError, match="checkpoint directory"):
        LLM(model, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="not supported"):
        ParallelConfig(tensor_parallel_size=2, splitwise_role="decode")


def test_dead_worker_is_reported_and_reaped(moe_ckpt):
    from fd_mtp.distributed.tp import WorkerError

    llm = LLM(moe_ckpt, tensor_parallel_size=2, max_num_seqs=2, max_model_len=64, block_size=16)
    procs = llm.engine.processes
    try:
        assert _outputs(llm, [[5, 6, 7]])[0]
        os.kill(procs[1].pid, signal.SIGKILL)
        with pytest.raises(WorkerError, match=r"worker\(s\) \[1\] exited"):
            llm.generate([[5, 6, 7]], GREEDY, use_tqdm=False)
    finally:
        llm.close()
    for p in procs:
        p.join(15)
    assert all(not p.is_alive() for p in procs)


def test_cli_generate_tensor_parallel(capsys):
    from fd_mtp.cli import main

    argv = ["generate", "--prompt", "def main(", "--max-tokens", "12", "--no-progress"]
    argv += ["--max-model-len", "64", "--speculative-method", "mtp"]
    assert main(argv) == 0
    one = [ln for ln in capsys.readouterr().out.splitlines() if "token_ids" in ln]
    assert main(argv + ["--tensor-parallel-size", "2"]) == 0
    two = [ln for ln in capsys.readouterr().out.splitlines() if "token_ids" in ln]
    assert one == two and one
    assert main(argv + ["--tensor-parallel-size", "3"]) == 2
    err = capsys.readouterr().err
    assert "--tensor-parallel-size=3 does not divide the model's num_attention_heads (4)" in err


def test_async_front_over_tensor_parallel_workers():
    """The server's AsyncLLM drives the TP front from its engine thread (and reads its
    attributes from the event loop): the same tokens as one process."""
    import asyncio

    from fd_mtp.entrypoints.async_llm import AsyncLLM

    kw = dict(max_num_seqs=2, max_model_len=64, block_size=16)
    params = SamplingParams(temperature=0, max_tokens=10)
    want = _outputs(LLM(DEMO_MODEL, **kw), ["def f(", "import "])
    llm = LLM(DEMO_MODEL, tensor_parallel_size=2, **kw)
    front = AsyncLLM(llm)
    front.start()

    async def run():
        streams = await front.add_requests([("a", "def f(", params), ("b", "import ", params)])
        out = []
        for stream in streams:
            ids = []
            async for event in stream:
                ids += event.token_ids
                assert front.num_running <= 2 and 0.0 <= front.kv_cache_usage <= 1.0
            out.append(ids)
        return out

    try:
        got = asyncio.run(asyncio.wait_for(run(), 300))
    finally:
        front.shutdown(60)
        llm.close()
    assert got == [w[:10] for w in want]
