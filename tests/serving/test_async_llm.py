"""`AsyncLLM` in process (no HTTP): events equal offline generation (log-probabilities too), closing
a stream aborts the request and frees its slot and KV blocks, admission counts in-flight requests
beyond the slots, refused prompts raise ValueError naming the request (a huge one before the
engine sees it), the front tokenizes exactly as the engine, an engine failure fails every stream,
shutdown drains, abort_all ends every request with its reason."""

from __future__ import annotations

import asyncio

import pytest

import fd_mtp
from fd_mtp.entrypoints.async_llm import (
    AsyncLLM,
    EngineDeadError,
    QueueFullError,
    StatsListener,
    encode_prompt,
)

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


def test_front_encoding_equals_the_engines(llm):
    """The front tokenizes with its own copy of the tokenizer, exactly as the engine would."""
    front = AsyncLLM(llm)
    assert front.tokenizer is not llm.tokenizer and front.tokenizer is not None
    engine = llm.engine
    for text in ("def main():\n", "x</s>y  \t\n", "ünïcode ✓", " " * 7):
        assert encode_prompt(front.tokenizer, text) == engine.encode(text), text
    for bad in ("\ud800", "a\udfffb"):
        with pytest.raises(ValueError) as mine:
            encode_prompt(front.tokenizer, bad)
        with pytest.raises(ValueError) as theirs:
            engine.encode(bad)
        assert str(mine.value) == str(theirs.value)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        encode_prompt(None, "x")
    front.shutdown()


def test_add_special_tokens_false_drops_the_bos_id():
    from fd_mtp.assets import DEMO_MODEL
    from fd_mtp.model.tokenizer import SentencePieceTokenizer

    tok = SentencePieceTokenizer(DEMO_MODEL, add_bos_token=True)
    with_bos = encode_prompt(tok, "def f(")
    assert with_bos[0] == tok.bos_token_id
    assert encode_prompt(tok, "def f(", add_special_tokens=True) == with_bos
    assert encode_prompt(tok, "def f(", add_special_tokens=False) == with_bos[1:]

    class HF:  # a tokenizer whose encode takes add_special_tokens (Hugging Face's)
        def encode(self, text, add_special_tokens=True):
            return [9, 1, 2] if add_special_tokens else [1, 2]

    assert encode_prompt(HF(), "x") == [9, 1, 2]
    assert encode_prompt(HF(), "x", add_special_tokens=False) == [1, 2]


def test_admission_counts_requests_beyond_the_slots(llm):
    """1 slot, 1 waiting place: two requests are in flight, a third is refused with a whole
    Retry-After; a batch of 3 can never be admitted."""
    front = AsyncLLM(llm, max_waiting_requests=1)
    front.start()

    async def main():
        front.check_capacity(2)  # idle: one slot + one waiting place
        with pytest.raises(ValueError, match="can never be admitted") as info:
            await front.add_requests([(f"b{i}", "x", params(2)) for i in range(3)])
        assert info.value.index is None
        [a, b] = await front.add_requests(
            [("a", "x = [", params(300, ignore_eos=True)), ("b", "x", params(2))]
        )
        assert front.num_in_flight == 2 and front.queue_depth == 1
        with pytest.raises(QueueFullError) as full:
            await front.add_requests([("c", "x", params(2))])
        assert isinstance(full.value.retry_after, int) and 1 <= full.value.retry_after <= 60
        await a.__aiter__().aclose()  # abort the long one: b runs and finishes
        events = [ev async for ev in b]
        assert events[-1].finish_reason == "length"
        for _ in range(int(TIMEOUT / 0.01)):
            if front.num_in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert front.queue_depth == 0
        [c] = await front.add_requests([("c", "x", params(2))])
        assert [ev async for ev in c][-1].finished

    try:
        run(main())
    finally:
        assert front.shutdown(TIMEOUT)


def test_a_huge_prompt_is_refused_before_the_engine(llm, monkeypatch):
    front = AsyncLLM(llm)
    front.start()
    seen = []
    add = llm.engine.add_request
    monkeypatch.setattr(
        llm.engine, "add_request", lambda p, *a, **k: (seen.append(len(p)), add(p, *a, **k))[1]
    )

    async def main():
        with pytest.raises(ValueError, match="max_model_len is 512") as info:
            await front.add_requests([("ok", "x", params(2)), ("huge", "word " * 5000, params(2))])
        assert info.value.index == 1
        with pytest.raises(ValueError, match="the prompt has 512 tokens"):
            await front.add_requests([("ids", [5] * 512, params(2))])

    try:
        run(main())
        assert seen == []  # nothing reached the engine
    finally:
        assert front.shutdown(TIMEOUT)


def test_logprobs_stream_with_the_events(llm):
    ref = llm.generate("def main():\n", params(9, logprobs=2), use_tqdm=False)[0]
    front = AsyncLLM(llm)
    front.start()

    async def main():
        [s] = await front.add_requests([("lp", "def main():\n", params(9, logprobs=2))])
        ids, entries, last = [], [], None
        async for ev in s:
            assert len(ev.logprobs) == len(ev.token_ids)
            ids += ev.token_ids
            entries += ev.logprobs
            last = ev
        return ids, entries, last

    try:
        ids, entries, last = run(main())
    finally:
        assert front.shutdown(TIMEOUT)
    assert ids == ref.token_ids and entries == last.output.logprobs
    assert [sorted(e) for e in entries] == [sorted(e) for e in ref.logprobs]


def test_abort_all_ends_every_request_with_the_reason(llm):
    stats = Recorder()
    front = AsyncLLM(llm, stats=stats)
    front.start()

    async def main():
        streams = await front.add_requests(
            [(f"r{i}", "x = [", params(400, ignore_eos=True)) for i in range(3)]
        )
        it = streams[0].__aiter__()
        await it.__anext__()  # r0 runs in the only slot, r1 and r2 wait
        assert front.abort_all("closing time") == 3
        last = [ev async for ev in it][-1]
        rest = []
        for s in streams[1:]:
            rest.append([ev async for ev in s][-1])
        for ev in [last, *rest]:
            assert ev.finished and ev.finish_reason == "abort" and ev.error == "closing time"
        with pytest.raises(EngineDeadError):
            await front.add_requests([("late", "x", params(2))])

    try:
        run(main())
    finally:
        assert front.shutdown(TIMEOUT)
    assert sorted(stats.finished) == [("r0", "abort"), ("r1", "abort"), ("r2", "abort")]
    assert llm.engine.requests == {} and front.num_in_flight == 0
    engine = llm.engine
    assert engine.block_manager.num_free == engine.block_manager.num_blocks
