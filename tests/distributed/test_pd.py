"""Prefill / decode disaggregation (fd_mtp.engine.pd, fd_mtp.distributed.pd) with two real
processes: the prefill instance hands each request's first token (mtp_save_first_token over a
SysV queue) and KV blocks (CPU shared memory) to the decode instance, whose greedy output equals
the mixed-role engine's, plain and MTP; killing the decode process mid-run leaves the prefill
side serving and no shared-memory segment behind."""

from __future__ import annotations

import glob
import os
import signal
import threading
import time

import numpy as np
import pytest

from fd_mtp import LLM, SamplingParams
from fd_mtp.assets import DEMO_MODEL
from fd_mtp.distributed.pd import SEGMENT_PREFIX, PDCluster
from fd_mtp.engine.pd import first_tokens
from fd_mtp.sysv_queue import MESSAGE_INTS, remove_queue
from fd_mtp.testing import write_random_checkpoint

MTP = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
BASE = ["def main(", "import os\n", "class Foo:", "for i in range(", "    return self._", "x = ["]
# prompt lengths from 3 to 20+ tokens across 16-position blocks; 6 requests on 3 slots: the decode
# side holds hand-offs until a slot frees
PROMPTS = [b * (1 + i % 3) for i, b in enumerate(BASE)]
KW = dict(max_num_seqs=3, max_model_len=192, block_size=16)
QID = 0x6100 + os.getpid() % 0x800  # this test process's own SysV queues


def _segments(pid: int) -> list[str]:
    return glob.glob(f"/dev/shm{SEGMENT_PREFIX}.{pid}.*") + glob.glob(f"/dev/shm/fd_mtp.{pid}.*")


def _mixed(path, prompts, params, spec):
    return LLM(path, speculative_config=spec, **KW).generate(prompts, params, use_tqdm=False)


@pytest.mark.parametrize("spec", [None, MTP], ids=["plain", "mtp"])
def test_pd_equals_mixed_greedy(spec):
    params = SamplingParams(temperature=0, max_tokens=32)
    want = _mixed(DEMO_MODEL, PROMPTS, params, spec)
    pd = PDCluster(DEMO_MODEL, speculative_config=spec, msg_queue_id=QID, **KW)
    try:
        got = pd.generate(PROMPTS, params)
        pids = dict(pd.pids)
    finally:
        pd.close()
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.finish_reason for o in got] == ["length"] * len(PROMPTS)
    assert [o.text for o in got] == [o.text for o in want]
    assert all(not p.is_alive() for p in (pd.prefill, pd.decode))
    assert _segments(pids["prefill"]) == []
    assert remove_queue(QID) is False  # close removed it
    if spec is not None:
        # the decode side drafts from the MTP state it was handed (KV of the MTP layer,
        # decode-role fields): as well as the mixed engine (observed equal; the first decode
        # step verifies the one draft the prefill side made instead of num_model_steps)
        acc = sum(o.metrics.spec.num_accepted for o in got)
        acc_mixed = sum(o.metrics.spec.num_accepted for o in want)
        assert acc >= 0.9 * acc_mixed > 0


def test_pd_moe_checkpoint_and_first_token_stops(tmp_path):
    """A random MoE checkpoint; a request whose first token ends it (max_tokens 1) is answered by
    the prefill side; the others by the decode side."""
    path = write_random_checkpoint(tmp_path / "moe", seed=5, moe_num_experts=4)
    prompts = [[5, 17, 33, 9], [100, 101, 102], [250, 3, 9, 44, 11, 12, 13] * 4, [7]]
    params = SamplingParams(temperature=0, max_tokens=12)
    want = _mixed(path, prompts, params, MTP)
    pd = PDCluster(path, speculative_config=MTP, msg_queue_id=QID + 1, **KW)
    try:
        got = pd.generate(prompts, params)
        one = pd.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=1))
    finally:
        pd.close()
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.token_ids for o in one] == [o.token_ids[:1] for o in want[:2]]


def test_first_tokens_reads_the_wire_format():
    m = np.zeros(MESSAGE_INTS, np.int32)
    m[1] = 4
    m[2 + 1], m[258 + 6], m[259 + 6] = 2, 41, 42
    m[2 + 3], m[258 + 18], m[259 + 18] = 2, 7, -1
    assert first_tokens(m, [0, 1, 2, 3, 5]) == {1: (41, 42), 3: (7, -1)}


def test_killing_decode_leaves_prefill_serving_and_no_segments():
    """The decode process is stopped first, so the prefill side's first-token messages fill the
    SysV queue (a few messages on Linux's default msgmnb) and its blocking msgsnd waits, holding
    its GIL; then it is killed: the front drains the queue of a dead decode side, so the prefill
    side comes back and answers."""
    pd = PDCluster(DEMO_MODEL, speculative_config=MTP, msg_queue_id=QID + 2, **KW)
    box: list = []
    long = SamplingParams(temperature=0, max_tokens=150)
    worker = threading.Thread(target=lambda: box.append(pd.generate(PROMPTS * 2, long)))
    try:
        worker.start()
        deadline = time.monotonic() + 120
        while not pd._at_decode and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pd._at_decode, "no request reached the decode instance"
        os.kill(pd.decode.pid, signal.SIGSTOP)
        time.sleep(2.0)  # the prefill side hands off the other requests' first tokens meanwhile
        os.kill(pd.decode.pid, signal.SIGKILL)
        worker.join(120)
        assert not worker.is_alive()
        outs = box[0]
        errors = [o for o in outs if o.finish_reason == "error"]
        assert errors and all("decode instance" in o.error for o in errors)
        assert pd.prefill.is_alive()
        # the prefill side still serves: a one-token request completes there; a longer one is
        # refused at once (no decode side to hand it to)
        quick = pd.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=1))
        assert quick[0].finish_reason == "length" and len(quick[0].token_ids) == 1
        refused = pd.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=5))
        assert refused[0].finish_reason == "error" and "decode instance" in refused[0].error
        # every segment it published is gone (released when it saw the decode side die)
        deadline = time.monotonic() + 30
        while _segments(pd.pids["prefill"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _segments(pd.pids["prefill"]) == []
    finally:
        pd.close()
        worker.join(10)
    assert all(not p.is_alive() for p in (pd.prefill, pd.decode))
    assert _segments(pd.pids["prefill"]) == []
    assert remove_queue(QID + 2) is False


# --------------------------------------------------------------------------- in one process
def _engines(spec, qid):
    from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig
    from fd_mtp.engine.pd import DecodeEngine, PrefillEngine
    from fd_mtp.engine.runner import ModelRunner
    from fd_mtp.engine.spec_runner import SpeculativeModelRunner
    from fd_mtp.model.loader import load_checkpoint

    spec = SpeculativeConfig.from_value(spec)
    out = []
    for role in ("prefill", "decode"):
        model, mtp, cfg = load_checkpoint(DEMO_MODEL)
        sch = SchedulerConfig(3, 2048, 192).resolve(cfg.max_position_embeddings)
        cache = CacheConfig(16).resolve(sch, 0 if spec is None else spec.extra_positions)
        if spec is None:
            runner = ModelRunner(model, scheduler_config=sch, cache_config=cache)
        else:
            options = {"role": role, **({"msg_queue_id": qid} if role == "prefill" else {})}
            runner = SpeculativeModelRunner(
                model,
                spec,
                scheduler_config=sch,
                cache_config=cache,
                mtp_model=mtp,
                proposer_options=options,
            )
        out.append(
            PrefillEngine(runner, msg_queue_id=qid) if role == "prefill" else DecodeEngine(runner)
        )
    return out


@pytest.mark.parametrize("spec", [None, MTP], ids=["plain", "mtp"])
def test_engines_hand_off_in_one_process(spec):
    """PrefillEngine -> (queue message, gather_kv) -> DecodeEngine.add_prefilled, no processes:
    the mixed engine's greedy tokens; the message carries the first token (and the first draft)."""
    from fd_mtp.engine.pd import gather_kv
    from fd_mtp.sysv_queue import receive_message

    qid = QID + 3
    remove_queue(qid)
    params = SamplingParams(temperature=0, max_tokens=24)
    prompts = [[5, 17, 33, 9, 40], [100, 101, 102] * 7, [250, 3, 9]]
    want = _mixed(DEMO_MODEL, prompts, params, spec)
    pre, dec = _engines(spec, qid)
    try:
        ids = [pre.add_request(p, params) for p in prompts]
        drafts = 0
        while pre.has_unfinished():
            pre.step()
            messages = [receive_message(qid) for _ in range(pre.messages_sent)]
            assert receive_message(qid) is None  # messages_sent counts them all
            for h in pre.handoffs:
                pairs = [first_tokens(m, [h.slot]).get(h.slot) for m in messages]
                pairs = [p for p in pairs if p is not None]
                assert pairs, f"no first-token message for slot {h.slot}"
                token, draft = pairs[0]
                assert token == h.first_token and (draft >= 0) == (spec is not None)
                drafts += draft >= 0
                assert dec.add_prefilled(h, gather_kv(pre.runner, h.block_ids), draft)
                pre.pop_output(h.request_id)
        while dec.has_unfinished():
            dec.step()
        got = [dec.pop_output(i) for i in ids]
    finally:
        remove_queue(qid)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert drafts == (len(prompts) if spec is not None else 0)


def test_decode_engine_refuses_a_foreign_kv_and_changes_nothing():
    import paddle

    pre, dec = _engines(None, QID + 4)
    from fd_mtp.engine.pd import Handoff

    h = Handoff("r", [5, 6, 7], None, SamplingParams(max_tokens=4), 0, 9, 0, [0])
    free_slots, free_blocks = list(dec.free_slots), dec.block_manager.num_free
    with pytest.raises(ValueError, match="scatter_kv: kv has shape"):
        dec.add_prefilled(h, paddle.zeros([1, 2, 1, 1, 16, 48]))
    assert dec.free_slots == free_slots and dec.block_manager.num_free == free_blocks
    assert not dec.requests and not dec.running


def test_pd_refusals():
    with pytest.raises(ValueError, match="'ngram' is not offered"):
        PDCluster(DEMO_MODEL, speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    # refused before any process starts, naming the argument
    for kw, what in (
        (dict(dtype="float16"), "dtype='float16' is not supported on device 'cpu'"),
        (dict(device="tpu"), "device must be one of"),
        (dict(seed=-1), "seed must be an int"),
        (dict(forward="fast"), "forward must be one of"),
        (dict(timeout=0), "timeout must be a number > 0"),
        (dict(max_num_seqs=0), "max_num_seqs"),
    ):
        with pytest.raises(ValueError, match=what):
            PDCluster(DEMO_MODEL, **kw)
    from fd_mtp.engine.pd import DecodeEngine

    pre, _ = _engines(MTP, QID + 5)
    with pytest.raises(ValueError, match="role 'decode'"):
        DecodeEngine(pre.runner)


def test_default_queue_ids_are_claimed_not_shared():
    """Without msg_queue_id a front claims the first queue key nobody uses (ftok keeps 8 bits of
    the id): a second front from the same start gets the next one, never the first's queue."""
    from fd_mtp.sysv_queue import claim_queue_id

    start = 0x7300 + os.getpid() % 0x40
    for q in range(start, start + 3):
        remove_queue(q)
    claimed = []
    try:
        claimed.append(claim_queue_id(start))
        claimed.append(claim_queue_id(start))
        assert claimed == [start, start + 1]
        remove_queue(start)
        claimed.append(claim_queue_id(start))  # freed: claimable again
        assert claimed[-1] == start
    finally:
        assert all(remove_queue(q) for q in set(claimed))


# --------------------------------------------------------------------------- the front's bookkeeping
class _Alive:
    exitcode = None

    def is_alive(self):
        return True


def _front_without_instances():
    """A `PDEngineClient` whose instances are a local queue the test fills (no processes)."""
    import queue as queue_mod

    from fd_mtp.distributed.pd import PDEngineClient

    front = PDEngineClient.__new__(PDEngineClient)
    front._init_requests()
    front._results = queue_mod.Queue()
    front._commands = {"prefill": queue_mod.Queue(), "decode": queue_mod.Queue()}
    front.prefill = front.decode = _Alive()
    front._closed, front.fail_fast, front.timeout = False, True, 60.0
    return front


def _stats(running=0):
    return dict(
        running=running,
        waiting=0,
        num_free=10 - running,
        num_blocks=10,
        preemptions=0,
        spec=None,
        prefix_queries=0,
        prefix_hits=0,
    )


def test_front_keeps_a_stream_in_order_when_the_decode_side_is_heard_first():
    """The instances' messages share one queue with a feeder per process: the decode side's
    deltas of a request may arrive before the prefill side's hand-off delta (the first token).
    The front holds them until it arrived: the stream is first token, then the rest, with the
    decode side's text (which covers the first token) and its output, metrics merged."""
    from fd_mtp.distributed.pd import _Live
    from fd_mtp.engine.request import RequestMetrics, RequestOutput, StreamDelta

    front = _front_without_instances()
    params = SamplingParams(temperature=0, max_tokens=3)
    front.requests["r"] = _Live("r", "p", [1, 2], params)
    front._unfinished.add("r")
    pre_out = RequestOutput(
        "r", None, [1, 2], [7], "A", True, "length", None, RequestMetrics(arrival_time=1.0)
    )
    pre_out.metrics.num_cached_tokens = 16
    dec_out = RequestOutput(
        "r", None, [1, 2], [7, 8, 9], "ABC", True, "length", None, RequestMetrics(arrival_time=5.0)
    )
    q = front._results
    q.put(
        ("step", "decode", ([(StreamDelta("r", -1, [8], "AB", False), "stream", None)], _stats(1)))
    )
    q.put(
        (
            "step",
            "decode",
            ([(StreamDelta("r", -1, [9], "C", True, "length"), "done", dec_out)], _stats()),
        )
    )
    assert front.step() == []  # held: the first token has not arrived
    assert front.has_unfinished() and len(front.running) == 0
    q.put(
        (
            "step",
            "prefill",
            ([(StreamDelta("r", -1, [7], "A", True, "length"), "handed", pre_out)], _stats()),
        )
    )
    got = front.step()
    assert [(d.new_token_ids, d.new_text, d.finished) for d in got] == [
        ([7], "", False),
        ([8], "AB", False),
        ([9], "C", True),
    ]
    assert not front.has_unfinished()
    out = front.pop_output("r")
    assert out.token_ids == [7, 8, 9] and out.text == "ABC" and out.prompt == "p"
    assert out.metrics.arrival_time == 1.0 and out.metrics.num_cached_tokens == 16
    assert "r" not in front.requests


def test_front_abort_is_answered_before_the_front_settles():
    """An aborted request ends at once in the front (its later deltas are dropped), goes to the
    prefill instance, and `has_unfinished` stays True until an instance answers the abort."""
    from fd_mtp.distributed.pd import _Live
    from fd_mtp.engine.request import StreamDelta

    front = _front_without_instances()
    front.requests["r"] = _Live("r", None, [1, 2], SamplingParams(max_tokens=9))
    front._unfinished.add("r")
    front.abort_request("r")
    assert front._commands["prefill"].get_nowait() == ("abort", "r")
    assert front.has_unfinished()
    front._results.put(
        ("step", "decode", ([(StreamDelta("r", -1, [8], "x", False), "stream", None)], _stats(1)))
    )
    assert front.step() == [] and front.has_unfinished() and len(front.running) == 1
    front._results.put(("aborted", "decode", ("r", _stats())))
    assert front.step() == [] and not front.has_unfinished() and len(front.running) == 0
    out = front.pop_output("r")
    assert out.finish_reason == "abort" and out.token_ids == []
