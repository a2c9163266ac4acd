"""End-to-end engine tests on a tiny random ERNIE model: greedy generation equals a naive
full-recompute loop token for token, under batching, mid-run arrivals, chunked prefill and
preemption; streaming order; stop conditions; seeded sampling; bad input."""

import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402

from .util import GREEDY, CharTokenizer, make_llm, naive_greedy, prompts, tiny_model  # noqa: E402


def check_greedy(llm, ps, max_tokens):
    params = [SamplingParams(max_tokens=n, **GREEDY) for n in max_tokens]
    outs = llm.generate(ps, params, use_tqdm=False)
    for p, n, o in zip(ps, max_tokens, outs):
        assert o.error is None and o.finished
        assert o.token_ids == naive_greedy(tiny_model(), p, n), (len(p), n)
        assert o.finish_reason == "length" and o.metrics.num_generated_tokens == n
    return outs


def test_greedy_mixed_lengths_equals_naive():
    ps = prompts([1, 5, 13, 30, 7, 2])
    check_greedy(make_llm(), ps, [6, 9, 4, 7, 1, 8])  # 6 prompts, 4 slots: queueing too


def test_chunked_prefill_equals_naive():
    llm = make_llm(max_num_batched_tokens=5)
    ps = prompts([23, 11, 3], seed=1)
    outs = check_greedy(llm, ps, [5, 5, 5])
    # a 23-token prompt with a 5-token budget takes at least 5 prefill steps
    assert outs[0].metrics.num_steps >= 5 + 4
    # a budget below the number of running requests: some decodes sit a step out
    tight = make_llm(max_num_batched_tokens=2)
    outs = check_greedy(tight, prompts([3, 1, 4, 2], seed=11), [4, 4, 4, 4])
    assert tight.engine.num_steps >= (10 + 4 * 3) // 2  # 10 prompt tokens + 12 decodes, 2 per step


def test_moe_checkpoint_greedy_equals_naive(tmp_path):
    from fd_mtp.model.loader import load_checkpoint
    from fd_mtp.testing import write_random_checkpoint

    ckpt = write_random_checkpoint(
        tmp_path / "moe", seed=5, moe_num_experts=4, moe_k=2, moe_intermediate_size=32
    )
    llm = fd_mtp.LLM(ckpt, max_num_seqs=3, max_model_len=48, block_size=8, max_num_batched_tokens=8)
    model, _, cfg = load_checkpoint(ckpt)
    assert cfg.moe_num_experts == 4
    ps = prompts([7, 12, 2, 5], seed=12)
    outs = llm.generate(ps, SamplingParams(max_tokens=5, **GREEDY), use_tqdm=False)
    for p, o in zip(ps, outs):
        assert o.token_ids == naive_greedy(model, p, 5)


def test_abandoned_stream_frees_everything():
    llm = make_llm()
    gen = llm.generate_stream(prompts([5, 6, 7], seed=13), SamplingParams(max_tokens=20, **GREEDY))
    next(gen)
    gen.close()
    assert (
        not llm.engine.has_unfinished()
        and llm.engine.block_manager.num_free == llm.runner.num_blocks
    )
    assert llm.engine.free_slots and len(llm.engine.free_slots) == 4


def test_requests_arriving_mid_run():
    llm = make_llm(max_num_batched_tokens=16)
    engine = llm.engine
    ps = prompts([9, 4, 17, 6, 12], seed=2)
    n = [7, 5, 6, 4, 8]
    ids = [
        engine.add_request(ps[0], SamplingParams(max_tokens=n[0], **GREEDY)),
        engine.add_request(ps[1], SamplingParams(max_tokens=n[1], **GREEDY)),
    ]
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        if steps in (2, 3, 6):
            i = len(ids)
            ids.append(engine.add_request(ps[i], SamplingParams(max_tokens=n[i], **GREEDY)))
    assert len(ids) == 5
    for p, k, rid in zip(ps, n, ids):
        assert engine.pop_output(rid).token_ids == naive_greedy(tiny_model(), p, k)


def test_blocks_running_out_preempt_and_recover():
    # 4 slots, block_size 4, 14 blocks: four requests growing to 10..16 tokens need up to 16 blocks
    llm = make_llm(block_size=4, num_gpu_blocks=14, max_num_batched_tokens=64)
    ps = prompts([6, 8, 5, 7], seed=3)
    deltas = []
    outs = llm.generate(
        ps,
        [SamplingParams(max_tokens=k, **GREEDY) for k in (9, 8, 10, 9)],
        use_tqdm=False,
        stream_callback=deltas.append,
    )
    assert llm.engine.num_preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outs) == llm.engine.num_preemptions
    for p, k, o in zip(ps, (9, 8, 10, 9), outs):
        assert o.token_ids == naive_greedy(tiny_model(), p, k)
    # no lost or repeated tokens in the stream either
    for i, o in enumerate(outs):
        streamed = [t for d in deltas if d.index == i for t in d.new_token_ids]
        assert streamed == o.token_ids
    assert llm.engine.block_manager.num_free == 14 and not llm.engine.running


def test_preemption_with_chunked_prefill_and_seeded_sampling():
    ps = prompts([10, 12, 9], seed=4)

    def seeded(seed):
        return SamplingParams(
            temperature=0.8,
            top_p=0.9,
            top_k=50,
            max_tokens=10,
            seed=seed,
            ignore_eos=True,
            repetition_penalty=1.3,
        )

    params = [seeded(s) for s in (1, 2, 3)]
    roomy = make_llm().generate(ps, params, use_tqdm=False)
    tight = make_llm(block_size=4, num_gpu_blocks=12, max_num_batched_tokens=6)
    squeezed = tight.generate(ps, params, use_tqdm=False)
    assert tight.engine.num_preemptions > 0
    assert [o.token_ids for o in squeezed] == [o.token_ids for o in roomy]
    alone = make_llm(max_num_seqs=1).generate(ps[1:2], params[1:2], use_tqdm=False)
    assert alone[0].token_ids == roomy[1].token_ids
    # another seed gives another continuation
    other = make_llm().generate(ps[1:2], [seeded(99)], use_tqdm=False)
    assert other[0].token_ids != roomy[1].token_ids


def test_unseeded_requests_are_reproducible_per_engine_seed():
    ps = prompts([5, 6], seed=5)
    sp = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)
    a = [o.token_ids for o in make_llm(seed=7).generate(ps, sp, use_tqdm=False)]
    b = [o.token_ids for o in make_llm(seed=7).generate(ps, sp, use_tqdm=False)]
    c = [o.token_ids for o in make_llm(seed=8).generate(ps, sp, use_tqdm=False)]
    assert a == b and a != c


def test_streaming_order():
    llm = make_llm(max_num_seqs=2)
    ps = prompts([4, 9, 3], seed=6)
    ks = [5, 3, 4]
    events = list(llm.generate_stream(ps, [SamplingParams(max_tokens=k, **GREEDY) for k in ks]))
    for i, (p, k) in enumerate(zip(ps, ks)):
        mine = [d for d in events if d.index == i]
        assert [t for d in mine for t in d.new_token_ids] == naive_greedy(tiny_model(), p, k)
        assert all(len(d.new_token_ids) == 1 for d in mine)  # plain decoding: one token per step
        assert [d.finished for d in mine] == [False] * (len(mine) - 1) + [True]
        assert mine[-1].finish_reason == "length"
    # with 2 slots the third request starts only after the second finishes (shorter than the first)
    first_of_third = next(j for j, d in enumerate(events) if d.index == 2)
    end_of_second = next(j for j, d in enumerate(events) if d.index == 1 and d.finished)
    assert first_of_third > end_of_second


def test_stop_token_ids_eos_min_tokens_and_max_model_len():
    p = prompts([6], seed=7)[0]
    ref = naive_greedy(tiny_model(), p, 12)
    llm = make_llm()
    stop_tok = ref[3]
    first = ref.index(stop_tok)
    o = llm.generate(
        [p], SamplingParams(max_tokens=12, temperature=0, stop_token_ids=[stop_tok]), use_tqdm=False
    )[0]
    assert o.token_ids == ref[: first + 1] and o.finish_reason == "stop"
    # the model's EOS: a model whose eos_token_id is a token greedy decoding produces
    eos_llm = fd_mtp.LLM(tiny_model(eos=ref[2]), max_num_seqs=2, max_model_len=64, block_size=8)
    o = eos_llm.generate([p], SamplingParams(max_tokens=12, temperature=0), use_tqdm=False)[0]
    assert o.token_ids == ref[: ref.index(ref[2]) + 1] and o.finish_reason == "stop"
    o = eos_llm.generate(
        [p], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True), use_tqdm=False
    )[0]
    assert o.token_ids == ref and o.finish_reason == "length"
    # min_tokens masks EOS until reached
    o = eos_llm.generate(
        [p], SamplingParams(max_tokens=12, min_tokens=5, temperature=0), use_tqdm=False
    )[0]
    assert len(o.token_ids) >= 5 and ref[2] not in o.token_ids[:4]
    # max_model_len ends generation with "length"
    short = make_llm(max_model_len=10)
    o = short.generate([p], SamplingParams(max_tokens=12, **GREEDY), use_tqdm=False)[0]
    assert o.token_ids == ref[:4] and o.finish_reason == "length"


def test_stop_strings_and_text():
    p = prompts([6], seed=8)[0]
    ref = naive_greedy(tiny_model(), p, 10)
    tok = CharTokenizer()
    full = tok.decode(ref)
    llm = fd_mtp.LLM(tiny_model(), tokenizer=tok, max_num_seqs=2, max_model_len=64, block_size=8)
    o = llm.generate([p], SamplingParams(max_tokens=10, **GREEDY), use_tqdm=False)[0]
    assert o.text == full
    stop = full[4:6]
    cut = full.find(stop)
    deltas = []
    o = llm.generate(
        [p],
        SamplingParams(max_tokens=10, stop=[stop], **GREEDY),
        use_tqdm=False,
        stream_callback=deltas.append,
    )[0]
    assert (
        o.finish_reason == "stop" and o.text == full[:cut] and o.token_ids == ref[: cut + len(stop)]
    )
    assert "".join(d.new_text for d in deltas) == o.text
    o = llm.generate(
        [p],
        SamplingParams(max_tokens=10, stop=stop, include_stop_str_in_output=True, **GREEDY),
        use_tqdm=False,
    )[0]
    assert o.text == full[: cut + len(stop)]
    # a text prompt goes through the tokenizer
    o = llm.generate("hello", SamplingParams(max_tokens=3, **GREEDY), use_tqdm=False)[0]
    assert o.prompt == "hello" and o.prompt_token_ids == tok.encode("hello")
    assert o.token_ids == naive_greedy(tiny_model(), tok.encode("hello"), 3)


def test_bad_input_is_a_per_request_error():
    llm = make_llm(max_model_len=32)
    good = prompts([5, 7], seed=9)
    batch = [good[0], [], list(range(3, 35)), [5, 300, 6], [4, -1], "text", good[1], [1.5, 2], 7]
    outs = llm.generate(batch, SamplingParams(max_tokens=4, **GREEDY), use_tqdm=False)
    assert len(outs) == len(batch)
    for i, g in ((0, good[0]), (6, good[1])):
        assert outs[i].error is None and outs[i].token_ids == naive_greedy(tiny_model(), g, 4)
    expect = {
        1: "empty",
        2: "max_model_len is 32",
        3: "token id 300 is outside the vocabulary",
        4: "token id -1 is outside",
        5: "needs a tokenizer",
        7: "not an int",
        8: "must be a string or a list",
    }
    for i, msg in expect.items():
        assert outs[i].finish_reason == "error" and msg in outs[i].error and outs[i].token_ids == []
    # a request that could never fit the KV cache
    tiny_cache = make_llm(block_size=4, num_gpu_blocks=3)
    o = tiny_cache.generate([good[0]], SamplingParams(max_tokens=20, **GREEDY), use_tqdm=False)[0]
    assert "KV blocks" in o.error
    with pytest.raises(ValueError, match="sampling params for"):
        llm.generate(good, [SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="SamplingParams.top_k"):
        SamplingParams(top_k=-2)
    with pytest.raises(ValueError, match="must be a SamplingParams"):
        llm.engine.add_request(good[0], {"max_tokens": 3})
    with pytest.raises(ValueError, match="needs an MTP block"):
        fd_mtp.LLM(
            tiny_model(), speculative_config={"method": "mtp"}
        )  # a model instance without mtp_model
    # the engine is still usable
    assert llm.generate([good[1]], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=False)[
        0
    ].token_ids == naive_greedy(tiny_model(), good[1], 2)


def test_share_inputs_layout():
    llm = make_llm(max_num_seqs=3, max_model_len=40, block_size=8)
    s = llm.runner.share_inputs
    for key in ("pre_ids", "input_ids", "prompt_ids"):
        assert s[key].shape == [3, 40]
    for key in (
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "stop_flags",
        "top_p",
        "temperature",
        "max_dec_len",
        "min_dec_len",
    ):
        assert s[key].shape == [3, 1], key
    assert s["block_tables"].shape == [3, 5 + 2]  # ceil(40 / 8) + enc_dec_block_num
    assert bool(s["stop_flags"].all()) and int(s["pre_ids"].min()) == -1
    llm.generate(prompts([5], seed=10), SamplingParams(max_tokens=3, **GREEDY), use_tqdm=False)
    llm.runner.input_batch.flush()  # the slot's release reaches the tensors with the next step; show it now
    # after a finished request the slot is empty again
    assert bool(s["stop_flags"].all()) and int(s["seq_lens_this_time"].abs().sum()) == 0
    assert int(s["block_tables"].max()) == -1 and not bool(s["not_need_stop"][0])


def test_mid_run_arrivals_with_preemption_and_chunks():
    llm = make_llm(block_size=4, num_gpu_blocks=9, max_num_batched_tokens=6)
    engine = llm.engine
    ps = prompts([7, 3, 9, 5, 6], seed=14)
    n = [9, 10, 6, 8, 7]
    ids = []
    step = 0
    while len(ids) < len(ps) or engine.has_unfinished():
        if len(ids) < len(ps) and step in (0, 1, 2, 5, 8):
            ids.append(
                engine.add_request(ps[len(ids)], SamplingParams(max_tokens=n[len(ids)], **GREEDY))
            )
        engine.step()
        step += 1
    assert engine.num_preemptions > 0
    for p, k, rid in zip(ps, n, ids):
        assert engine.pop_output(rid).token_ids == naive_greedy(tiny_model(), p, k)
    assert engine.block_manager.num_free == 9


def test_text_streamed_or_decoded_once_at_the_end():
    """With a tokenizer, a request's text is the same whether it streams (deltas carry it step
    by step) or not (``LLMEngine.stream_text`` False, as `LLM.generate` without a callback: one
    decode when it finishes, the last delta carries it all); a stop by a stop token id leaves
    that token's text out, as an EOS."""
    tok = CharTokenizer()
    ps = prompts([6, 3, 9], seed=8)
    refs = [naive_greedy(tiny_model(), p, 10) for p in ps]
    params = [
        SamplingParams(max_tokens=10, **GREEDY),
        SamplingParams(max_tokens=10, stop_token_ids=[refs[1][4]], temperature=0.0),
        SamplingParams(max_tokens=7, **GREEDY),
    ]
    llm = fd_mtp.LLM(tiny_model(), tokenizer=tok, max_num_seqs=4, max_model_len=64, block_size=8)
    deltas = []
    streamed = llm.generate(ps, params, use_tqdm=False, stream_callback=deltas.append)
    quiet = llm.generate(ps, params, use_tqdm=False)
    for s, q in zip(streamed, quiet):
        assert s.token_ids == q.token_ids and s.text == q.text
    assert quiet[0].text == tok.decode(refs[0]) and quiet[2].text == tok.decode(refs[2][:7])
    assert quiet[1].finish_reason == "stop" and quiet[1].text == tok.decode(quiet[1].token_ids[:-1])
    for i, o in enumerate(streamed):
        mine = [d for d in deltas if d.index == i]
        assert "".join(d.new_text for d in mine) == o.text
        assert sum(bool(d.new_text) for d in mine) > 1 or len(o.token_ids) < 3  # it streamed
    engine = llm.engine
    engine.stream_text = False
    rid = engine.add_request(ps[0], params[0])
    got = []
    while engine.has_unfinished():
        got += engine.step()
    assert all(d.new_text == "" for d in got[:-1]) and got[-1].new_text == quiet[0].text
    assert engine.pop_output(rid).text == quiet[0].text
