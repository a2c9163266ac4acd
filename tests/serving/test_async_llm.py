"""`AsyncLLM` in process (no HTTP): events equal offline generation, closing a stream aborts the
request and frees its slot and KV blocks, the waiting queue is bounded, refused prompts raise
ValueError naming the request, an engine failure fails every stream, shutdown drains."""

from __future__ import annotations

import asyncio

import pytest

import fd_mtp
from fd_mtp.entrypoints.async_llm import AsyncLLM, EngineDeadError, QueueFullError, StatsListener

TIMEOUT = 60


@pytest.fixture(scope="module")
def llm():
    return fd_mtp.LLM(max_num_seqs=1, max_model_len=512)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


class Recorder(StatsListener):
    def __init__(self):
        self.finished = []
        self.tokens_seen = 0

    def request_finished(self, request_id, finish_reason, now):
        self.finished.append((request_id, finish_reason))

    def tokens(self, request_id, num_tokens, now):
        self.tokens_seen += num_tokens


def params(n, **kw):
    return fd_mtp.SamplingParams(temperature=0, max_tokens=n, **kw)


def test_events_equal_offline_and_closing_a_stream_aborts(llm):
    ref = llm.generate("def main():\n", params(12), use_tqdm=False)[0].token_ids
    stats = Recorder()
    front = AsyncLLM(llm, max_waiting_requests=4, stats=stats)
    front.start()

    async def main():
        [s] = await front.add_requests([("a", "def main():\n", params(12))])
        ids, last = [], None
        async for ev in s:
            ids += ev.token_ids
            last = ev
        assert ids == ref and last.finished and last.output.token_ids == ref
        # a long request, closed after its second event: aborted at the next step boundary
        [s] = await front.add_requests([("b", "x = [", params(400, ignore_eos=True))])
        seen = 0
        async for ev in s:
            seen += 1
            if seen == 2:
                break
        for _ in range(int(TIMEOUT / 0.01)):
            if ("b", "abort") in stats.finished and front.num_running == 0:
                break
            await asyncio.sleep(0.01)

    try:
        run(main())
        assert ("b", "abort") in stats.finished and ("a", "length") in stats.finished
        engine = llm.engine
        assert front.num_running == 0 and front.num_waiting == 0
        assert engine.block_manager.num_free == engine.block_manager.num_blocks
        assert front.kv_cache_usage == 0
        assert "b" not in engine.requests and "a" not in engine.requests
        assert stats.tokens_seen < 400 + len(ref)
    finally:
        assert front.shutdown(TIMEOUT)


def test_queue_bound_and_refused_prompts(llm):
    front = AsyncLLM(llm, max_waiting_requests=1)
    front.start()

    async def main():
        [long] = await front.add_requests([("long", "x = [", params(300, ignore_eos=True))])
        it = long.__aiter__()
        await it.__anext__()  # running in the only slot
        [waiting] = await front.add_requests([("w", "def f(", params(3))])
        with pytest.raises(QueueFullError, match="waiting queue is full"):
            await front.add_requests([("full", "x", params(2))])
        await it.aclose()  # abort the long one: the waiting request runs
        events = [ev async for ev in waiting]
        assert events[-1].finished and len(events[-1].output.token_ids) == 3
        front.max_waiting_requests = 2
        with pytest.raises(ValueError, match="max_model_len") as info:
            await front.add_requests([("ok", "x", params(2)), ("too-long", [5] * 600, params(2))])
        assert info.value.index == 1
        # the accepted first request of that call is aborted (at the next step boundary)
        for _ in range(int(TIMEOUT / 0.01)):
            if front.num_running == 0 and not llm.engine.requests:
                break
            await asyncio.sleep(0.01)

    try:
        run(main())
        assert front.num_running == 0 and front.num_waiting == 0
        assert llm.engine.requests == {}
    finally:
        assert front.shutdown(TIMEOUT)


def test_shutdown_drains_and_then_refuses(llm):
    front = AsyncLLM(llm)
    front.start()

    async def main():
        [s] = await front.add_requests([("d", "def main():\n", params(20, ignore_eos=True))])
        stopped = asyncio.get_running_loop().run_in_executor(None, front.shutdown, TIMEOUT)
        ids = [t async for ev in s for t in ev.token_ids]
        assert len(ids) == 20
        assert await stopped
        with pytest.raises(EngineDeadError):
            await front.add_requests([("late", "x", params(2))])

    run(main())
    assert not front.is_running


def test_an_engine_failure_fails_every_stream(llm, monkeypatch):
    front = AsyncLLM(llm)

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(llm.engine, "step", broken)
    front.start()

    async def main():
        [s] = await front.add_requests([("e", "x", params(4))])
        with pytest.raises(EngineDeadError, match="boom"):
            async for _ in s:
                pass
        with pytest.raises(EngineDeadError, match="boom"):
            await front.add_requests([("e2", "x", params(4))])

    run(main())
    assert not front.is_running
    monkeypatch.undo()
    # the LLM itself is intact: abort what the failed step left behind and it generates again
    for rid in list(llm.engine.requests):
        llm.engine.abort_request(rid)
        llm.engine.pop_output(rid)
    assert llm.generate("x", params(2), use_tqdm=False)[0].finish_reason == "length"


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_waiting_requests"):
        AsyncLLM(object.__new__(fd_mtp.LLM), max_waiting_requests=0)
