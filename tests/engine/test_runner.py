"""ModelRunner.insert_tasks_v1 writes spec §4.2's fields (PREFILL chunk, DECODE, PREEMPTED)."""

import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.config import CacheConfig, SchedulerConfig  # noqa: E402
from fd_mtp.engine.runner import ModelRunner, Task, TaskKind  # noqa: E402
from fd_mtp.testing.tasks import prefill_task  # noqa: E402

from .util import tiny_model  # noqa: E402


def col(s, key):
    return s[key].numpy().reshape(-1).tolist()


def test_insert_tasks_v1_fields():
    r = ModelRunner(
        tiny_model(),
        scheduler_config=SchedulerConfig(max_num_seqs=3, max_model_len=16),
        cache_config=CacheConfig(block_size=4, num_gpu_blocks=12),
    )
    s = r.share_inputs
    params = SamplingParams(
        temperature=0.5,
        top_p=0.8,
        top_k=7,
        max_tokens=5,
        min_tokens=2,
        repetition_penalty=1.2,
        seed=9,
    )
    tokens = [11, 12, 13, 14, 15, 16, 40, 41]  # 6 prompt tokens + 2 generated (a preempted request)

    def prefill_chunk(start, end):
        r.insert_tasks_v1([prefill_task(1, tokens, [7, 3], params, start, end, 2, seed=9)])
        r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now

    prefill_chunk(0, 5)
    assert col(s, "seq_lens_this_time") == [0, 5, 0] and col(s, "seq_lens_encoder") == [0, 5, 0]
    assert col(s, "seq_lens_decoder") == [0, 0, 0] and col(s, "step_idx") == [
        0,
        0,
        0,
    ]  # not the last chunk
    assert col(s, "stop_flags") == [True, False, True] and col(s, "prompt_lens") == [0, 8, 0]
    assert (
        s["input_ids"][1, :5].tolist() == tokens[:5]
        and s["prompt_ids"][1, :6].tolist() == tokens[:6]
    )
    assert s["pre_ids"][1, :4].tolist() == [
        -1,
        40,
        41,
        -1,
    ]  # generated tokens restored (token k at index k)
    assert s["block_tables"][1].tolist() == [7, 3, -1, -1, -1, -1]
    assert bool(s["is_chunk_step"][1]) and bool(s["not_need_stop"][0])
    assert (
        col(s, "temperature")[1] == 0.5
        and col(s, "top_k")[1] == 7
        and col(s, "min_dec_len")[1] == 2
    )
    assert abs(col(s, "top_p")[1] - 0.8) < 1e-7 and abs(col(s, "penalty_score")[1] - 1.2) < 1e-6
    assert col(s, "infer_seed")[1] == 9 and col(s, "max_dec_len")[1] == 5
    # the last chunk: decoder = start, step_idx = generated count
    prefill_chunk(5, 8)
    assert col(s, "seq_lens_this_time")[1] == 3 and col(s, "seq_lens_decoder")[1] == 5
    assert col(s, "step_idx")[1] == 2 and not bool(s["is_chunk_step"][1])
    assert s["input_ids"][1, :3].tolist() == tokens[5:8]
    # DECODE: new blocks replace the row
    r.insert_tasks_v1([Task(TaskKind.DECODE, 1, block_ids=[7, 3, 0])])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert s["block_tables"][1].tolist() == [7, 3, 0, -1, -1, -1]
    # PREEMPTED: the slot is emptied
    r.insert_tasks_v1([Task(TaskKind.PREEMPTED, 1)])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert col(s, "seq_lens_this_time") == [0, 0, 0] and col(s, "seq_lens_decoder") == [0, 0, 0]
    assert col(s, "stop_flags") == [True, True, True] and int(s["block_tables"].max()) == -1
    assert not bool(s["not_need_stop"][0])
    with pytest.raises(ValueError, match="slot 3"):
        r.insert_tasks_v1([Task(TaskKind.PREEMPTED, 3)])
    with pytest.raises(ValueError, match="bad chunk"):
        r.insert_tasks_v1(
            [Task(TaskKind.PREFILL, 0, token_ids=[1, 2], start=1, end=3, params=params)]
        )
