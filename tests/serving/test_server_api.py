"""The OpenAI surface of ``fd-mtp serve`` beyond plain generation, through the official ``openai``
client and raw HTTP, against offline ``fd_mtp.LLM.generate``:

* ``logprobs`` (completions: ``{tokens, token_logprobs, top_logprobs, text_offset}``; chat:
  ``logprobs: true`` + ``top_logprobs``: ``{content: [{token, logprob, bytes, top_logprobs}]}``),
  streamed and not, on a speculative (MTP) server: the same token ids and log-probabilities as
  the offline plain engine with ``SamplingParams(logprobs=k)`` and the same seeds;
* ``echo`` (the prompt's text before the completion; with ``logprobs``, the prompt tokens' entries
  equal offline ``SamplingParams(prompt_logprobs=k)``), streamed and not;
* ``n > 1``: sample j of a seeded request equals a request with seed ``seed + j``, indices,
  usage, streamed and not, with several prompts;
* fields accepted and ignored (``user``, ``store``, ``metadata``, ``service_tier``,
  ``parallel_tool_calls``, ``response_format: text``), ``stream_options.continuous_usage_stats``,
  tool messages;
* ``GET /v1/models/{id}``, ``POST /tokenize``, ``POST /detokenize``, ``GET /version``.

One server (MTP, K = 3) starts for the module on 127.0.0.1; every request has a timeout.
"""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

import fd_mtp  # noqa: E402
from fd_mtp.entrypoints.openai.chat_template import default_chat_prompt  # noqa: E402

from .server_util import GREEDY_IDS, MODEL, ServerProcess, openai_client, running  # noqa: E402

MTP_CONFIG = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}
TIMEOUT = 60
PROMPT = "def main():\n"
#: the server (speculative: a verified run per step) and the offline engine (plain: one token per
#: step, other batch shapes) evaluate the same float32 function along different paths; their
#: log-probabilities differ by float32 round-off, measured at ~5e-6 on the demo model
#: (tests/engine/test_logprobs.py derives the bound); 1e-4 leaves a margin and is still far below
#: the gaps between the values compared (a wrong token or position is off by > 1e-2)
TOL = 1e-4
SEEDED = dict(temperature=0.8, top_p=0.95, seed=11)


@pytest.fixture(scope="module")
def server():
    srv = ServerProcess(
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "256",
        "--speculative-config",
        json.dumps(MTP_CONFIG),
    )
    with running(srv):
        yield srv


@pytest.fixture(scope="module")
def offline():
    return fd_mtp.LLM(max_num_seqs=8, max_model_len=256)


def client(url) -> openai.OpenAI:
    return openai_client(url, TIMEOUT)


def reference(offline, prompt, k, max_tokens, **kw):
    params = fd_mtp.SamplingParams(max_tokens=max_tokens, logprobs=k, **kw)
    return offline.generate(prompt, params, use_tqdm=False)[0]


def check_top(got: dict, entries, k: int, where: str):
    """A position's alternatives (``{text: logprob}``) against the offline ones (`Logprob`s):
    equal values for the texts both have; a text only one side has is a near-tie at the k-th
    place (the two forwards may order it differently)."""
    want = {lp.decoded_token: lp.logprob for lp in entries}
    kth = sorted(want.values(), reverse=True)[min(k, len(want)) - 1] if k else None
    for text in set(got) | set(want):
        if text in got and text in want:
            assert abs(got[text] - want[text]) <= TOL, (where, text, got[text], want[text])
        else:
            value = got.get(text, want.get(text))
            assert kth is not None and abs(value - kth) <= TOL, (where, text, got, want)


# -- logprobs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_completion_logprobs_equal_offline(server, offline, sampling):
    kw = dict(temperature=0) if sampling == "greedy" else SEEDED
    k = 3
    ref = reference(offline, PROMPT, k, 12, **kw)
    c = client(server.url)
    out = c.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=12,
        logprobs=k,
        extra_body={"return_token_ids": True},
        **kw,
    )
    choice = out.choices[0]
    assert choice.token_ids == ref.token_ids
    lp = choice.logprobs
    n = len(ref.token_ids)
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    offset = 0
    for i, (tid, entry) in enumerate(zip(ref.token_ids, ref.logprobs)):
        assert lp.tokens[i] == entry[tid].decoded_token
        assert abs(lp.token_logprobs[i] - entry[tid].logprob) <= TOL, i
        # the k most likely and the sampled token (k or k + 1 entries), most likely first
        assert len(lp.top_logprobs[i]) in (k, k + 1)
        values = list(lp.top_logprobs[i].values())
        assert values == sorted(values, reverse=True)
        check_top(lp.top_logprobs[i], entry.values(), k, f"token {i}")
        assert lp.text_offset[i] == offset
        offset += len(lp.tokens[i])
    assert "".join(lp.tokens) == choice.text  # this tokenizer decodes token by token losslessly

    # streamed: the chunks' logprobs concatenate to the same lists, offsets continue
    got = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    stream = c.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, logprobs=k, stream=True, **kw
    )
    for chunk in stream:
        for ch in chunk.choices:
            if ch.logprobs is not None:
                for key in got:
                    got[key] += getattr(ch.logprobs, key)
    assert got["tokens"] == lp.tokens and got["text_offset"] == lp.text_offset
    assert max(abs(a - b) for a, b in zip(got["token_logprobs"], lp.token_logprobs)) <= TOL


def test_completion_logprobs_zero_is_the_sampled_token_only(server, offline):
    ref = reference(offline, PROMPT, 0, 5, temperature=0)
    out = client(server.url).completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=0
    )
    lp = out.choices[0].logprobs
    for i, (tid, entry) in enumerate(zip(ref.token_ids, ref.logprobs)):
        assert lp.top_logprobs[i] == {lp.tokens[i]: lp.token_logprobs[i]}
        assert abs(lp.token_logprobs[i] - entry[tid].logprob) <= TOL


# -- echo ----------------------------------------------------------------------------------------


def streamed_choices(stream) -> dict:
    """Per choice index: its chunks' text joined and their logprobs lists concatenated."""
    got: dict = {}
    for chunk in stream:
        for ch in chunk.choices:
            g = got.setdefault(ch.index, {"text": "", "logprobs": None})
            g["text"] += ch.text
            if ch.logprobs is not None:
                lps = g["logprobs"] = g["logprobs"] or {key: [] for key in ECHO_KEYS}
                for key in ECHO_KEYS:
                    lps[key] += getattr(ch.logprobs, key)
    return got


ECHO_KEYS = ("tokens", "token_logprobs", "top_logprobs", "text_offset")


def test_echo_returns_the_prompt_before_the_completion(server, offline):
    """echo without logprobs: text prompts as sent (two prompts, n = 2: every choice), a token-id
    prompt decoded, before each choice's text, streamed and not; usage counts generated tokens."""
    c = client(server.url)
    greedy = fd_mtp.SamplingParams(max_tokens=6, temperature=0)
    texts = [PROMPT, "class Stack:\n"]
    ids = offline.tokenizer.encode("import numpy as np\n")
    ref = offline.generate(texts + [ids], greedy, use_tqdm=False)
    kw = dict(model=MODEL, max_tokens=6, temperature=0, echo=True)
    out = c.completions.create(prompt=texts, n=2, **kw)
    want = [texts[i // 2] + ref[i // 2].text for i in range(4)]
    assert [ch.text for ch in out.choices] == want
    assert out.usage.completion_tokens == 2 * sum(len(r.token_ids) for r in ref[:2])
    got = streamed_choices(c.completions.create(prompt=texts, n=2, stream=True, **kw))
    assert [got[i]["text"] for i in range(4)] == want
    assert all(got[i]["logprobs"] is None for i in range(4))
    want = offline.tokenizer.decode(ids) + ref[2].text
    assert c.completions.create(prompt=ids, **kw).choices[0].text == want
    assert streamed_choices(c.completions.create(prompt=ids, stream=True, **kw))[0]["text"] == want


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_echo_with_logprobs_equals_offline_prompt_logprobs(server, offline, sampling):
    """echo + logprobs k on the MTP server: the prompt's tokens first (the first with None, as
    nothing predicts it), each with the offline engine's prompt_logprobs entry, then the generated
    tokens' entries; offsets run over both; streamed chunks concatenate to the same lists."""
    kw = dict(temperature=0) if sampling == "greedy" else SEEDED
    k = 2
    params = fd_mtp.SamplingParams(max_tokens=8, logprobs=k, prompt_logprobs=k, **kw)
    ref = offline.generate(PROMPT, params, use_tqdm=False)[0]
    c = client(server.url)
    out = c.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, logprobs=k, echo=True, **kw
    )
    choice = out.choices[0]
    assert choice.text == PROMPT + ref.text
    lp = choice.logprobs
    ids = list(ref.prompt_token_ids) + list(ref.token_ids)
    entries = list(ref.prompt_logprobs) + list(ref.logprobs)
    assert len(lp.tokens) == len(ids) == len(lp.token_logprobs) == len(lp.text_offset)
    assert entries[0] is None and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[0] == offline.tokenizer.decode([ids[0]])
    offset = 0
    for i, (tid, entry) in enumerate(zip(ids, entries)):
        assert lp.text_offset[i] == offset
        offset += len(lp.tokens[i])
        if i == 0:
            continue
        assert lp.tokens[i] == entry[tid].decoded_token, i
        assert abs(lp.token_logprobs[i] - entry[tid].logprob) <= TOL, i
        check_top(lp.top_logprobs[i], entry.values(), k, f"token {i}")
    got = streamed_choices(
        c.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=8, logprobs=k, echo=True, stream=True, **kw
        )
    )[0]
    assert got["text"] == choice.text
    assert got["logprobs"]["tokens"] == lp.tokens
    assert got["logprobs"]["text_offset"] == lp.text_offset
    assert got["logprobs"]["token_logprobs"][0] is None
    diffs = [
        abs(a - b) for a, b in zip(got["logprobs"]["token_logprobs"][1:], lp.token_logprobs[1:])
    ]
    assert max(diffs) <= TOL


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
def test_chat_logprobs_equal_offline(server, offline, sampling):
    kw = dict(temperature=0) if sampling == "greedy" else SEEDED
    messages = [{"role": "user", "content": "sort a list"}]
    prompt = default_chat_prompt([(m["role"], m["content"]) for m in messages])
    top = 2
    ref = reference(offline, prompt, top, 10, **kw)
    c = client(server.url)
    request = dict(
        model=MODEL, messages=messages, max_tokens=10, logprobs=True, top_logprobs=top, **kw
    )
    out = c.chat.completions.create(**request, extra_body={"return_token_ids": True})
    choice = out.choices[0]
    assert choice.token_ids == ref.token_ids
    content = choice.logprobs.content
    assert len(content) == len(ref.token_ids)
    for i, (tid, entry, item) in enumerate(zip(ref.token_ids, ref.logprobs, content)):
        assert item.token == entry[tid].decoded_token
        assert item.bytes == list(item.token.encode("utf-8"))
        assert abs(item.logprob - entry[tid].logprob) <= TOL
        # exactly the top_logprobs most likely tokens, most likely first
        assert len(item.top_logprobs) == top
        values = [t.logprob for t in item.top_logprobs]
        assert values == sorted(values, reverse=True)
        best = sorted(entry.values(), key=lambda lp: lp.rank)[:top]  # without the sampled one
        check_top({t.token: t.logprob for t in item.top_logprobs}, best, top, f"token {i}")

    streamed = c.chat.completions.create(**request, stream=True)
    items = []
    for chunk in streamed:
        for ch in chunk.choices:
            if ch.logprobs is not None:
                items += ch.logprobs.content
    assert [t.token for t in items] == [t.token for t in content]
    assert max(abs(a.logprob - b.logprob) for a, b in zip(items, content)) <= TOL


def test_chat_logprobs_without_top_logprobs(server):
    out = client(server.url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        max_tokens=3,
        temperature=0,
        logprobs=True,
    )
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    assert all(item.top_logprobs == [] and item.logprob <= 0 for item in content)
    plain = client(server.url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=3, temperature=0
    )
    assert plain.choices[0].logprobs is None


# -- n > 1 ---------------------------------------------------------------------------------------------


def test_n_samples_are_seeded_samples(server, offline):
    """Sample j of a request with seed s is the offline output with seed s + j."""
    n, seed = 3, 5
    kw = dict(temperature=0.9, top_k=40, max_tokens=10)
    want = [
        offline.generate(
            PROMPT, fd_mtp.SamplingParams(seed=seed + j, logprobs=1, **kw), use_tqdm=False
        )[0]
        for j in range(n)
    ]
    assert len({tuple(w.token_ids) for w in want}) > 1  # the seeds give different samples
    c = client(server.url)
    out = c.completions.create(
        model=MODEL,
        prompt=PROMPT,
        n=n,
        seed=seed,
        logprobs=1,
        extra_body={"return_token_ids": True, "top_k": 40},
        temperature=0.9,
        max_tokens=10,
    )
    assert [ch.index for ch in out.choices] == list(range(n))
    for ch, w in zip(out.choices, want):
        assert ch.token_ids == w.token_ids
        got = ch.logprobs.token_logprobs
        assert max(abs(g - e[t].logprob) for g, e, t in zip(got, w.logprobs, w.token_ids)) <= TOL
    prompt_tokens = len(offline.tokenizer.encode(PROMPT))
    assert out.usage.prompt_tokens == prompt_tokens  # the prompt counts once
    assert out.usage.completion_tokens == sum(len(w.token_ids) for w in want)
    # the same request again: the same samples (reproducible)
    again = c.completions.create(
        model=MODEL,
        prompt=PROMPT,
        n=n,
        seed=seed,
        extra_body={"return_token_ids": True, "top_k": 40},
        temperature=0.9,
        max_tokens=10,
    )
    assert [ch.token_ids for ch in again.choices] == [w.token_ids for w in want]
    # streamed, with several prompts: index = prompt * n + sample
    prompts = [PROMPT, "x = ["]
    want2 = [
        offline.generate(p, fd_mtp.SamplingParams(seed=seed + j, **kw), use_tqdm=False)[0]
        for p in prompts
        for j in range(2)
    ]
    ids = {}
    finishes = {}
    usage = None
    stream = c.completions.create(
        model=MODEL,
        prompt=prompts,
        n=2,
        seed=seed,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_token_ids": True, "top_k": 40},
        temperature=0.9,
        max_tokens=10,
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            ids.setdefault(ch.index, []).extend(ch.token_ids)
            if ch.finish_reason is not None:
                finishes[ch.index] = ch.finish_reason
    assert sorted(ids) == [0, 1, 2, 3] and sorted(finishes) == [0, 1, 2, 3]
    assert [ids[i] for i in range(4)] == [w.token_ids for w in want2]
    assert usage.completion_tokens == sum(len(w.token_ids) for w in want2)
    assert usage.prompt_tokens == sum(len(offline.tokenizer.encode(p)) for p in prompts)


def test_chat_n_streamed_and_not(server, offline):
    messages = [{"role": "user", "content": "hello"}]
    prompt = default_chat_prompt([("user", "hello")])
    kw = dict(temperature=0.9, max_tokens=8)
    want = [
        offline.generate(prompt, fd_mtp.SamplingParams(seed=21 + j, **kw), use_tqdm=False)[0]
        for j in range(2)
    ]
    c = client(server.url)
    out = c.chat.completions.create(
        model=MODEL, messages=messages, n=2, seed=21, extra_body={"return_token_ids": True}, **kw
    )
    assert [ch.index for ch in out.choices] == [0, 1]
    assert [ch.token_ids for ch in out.choices] == [w.token_ids for w in want]
    assert [ch.message.content for ch in out.choices] == [w.text for w in want]
    texts, roles = {0: "", 1: ""}, {}
    for chunk in c.chat.completions.create(
        model=MODEL, messages=messages, n=2, seed=21, stream=True, **kw
    ):
        for ch in chunk.choices:
            if ch.delta.role is not None:
                roles[ch.index] = ch.delta.role
            texts[ch.index] += ch.delta.content or ""
    assert roles == {0: "assistant", 1: "assistant"}
    assert [texts[0], texts[1]] == [w.text for w in want]


# -- accepted fields -----------------------------------------------------------------------------


IGNORED = {"store": False, "service_tier": "default", "response_format": {"type": "text"}}


def test_ignored_fields_change_nothing(server):
    c = client(server.url)
    base = dict(model=MODEL, max_tokens=6, temperature=0, extra_body={"return_token_ids": True})
    plain = c.completions.create(prompt=PROMPT, **base)
    extra = c.completions.create(
        prompt=PROMPT,
        user="u1",
        **{**base, "extra_body": {**base["extra_body"], **IGNORED, "metadata": {"k": "v"}}},
    )
    assert extra.choices[0].token_ids == plain.choices[0].token_ids
    messages = [{"role": "user", "content": "hi"}]
    chat = c.chat.completions.create(messages=messages, **base)
    chat_extra = c.chat.completions.create(
        messages=messages,
        user="u1",
        store=True,
        metadata={"k": "v"},
        service_tier="auto",
        parallel_tool_calls=False,
        response_format={"type": "text"},
        **base,
    )
    assert chat_extra.choices[0].token_ids == chat.choices[0].token_ids


def test_continuous_usage_stats(server):
    c = client(server.url)
    chunks = list(
        c.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"continuous_usage_stats": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert all(ch.usage is not None for ch in chunks)
    prompt_tokens = {ch.usage.prompt_tokens for ch in chunks}
    assert len(prompt_tokens) == 1 and prompt_tokens.pop() > 0
    done = [ch.usage.completion_tokens for ch in chunks]
    assert done == sorted(done) and done[-1] == 8
    assert all(ch.choices for ch in chunks)  # no usage-only chunk without include_usage
    for ch in chunks:
        assert ch.usage.total_tokens == ch.usage.prompt_tokens + ch.usage.completion_tokens
    chat = list(
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"continuous_usage_stats": True, "include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert all(ch.usage is not None for ch in chat)
    assert chat[0].usage.completion_tokens == 0  # the role chunk
    assert chat[-1].choices == [] and chat[-1].usage.completion_tokens == 4


def test_tool_messages_are_rendered(server, offline):
    messages = [
        {"role": "user", "content": "what is 6 * 7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "mul", "arguments": '{"a": 6, "b": 7}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]
    prompt = default_chat_prompt([("user", "what is 6 * 7?"), ("assistant", ""), ("tool", "42")])
    assert "Tool: 42" in prompt
    r = httpx.post(f"{server.url}/tokenize", json={"messages": messages}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == offline.tokenizer.encode(prompt)
    ref = reference(offline, prompt, None, 6, temperature=0)
    out = client(server.url).chat.completions.create(messages=messages, max_tokens=6, **GREEDY_IDS)
    assert out.choices[0].token_ids == ref.token_ids


# -- endpoints -----------------------------------------------------------------------------------


def test_models_retrieve(server):
    c = client(server.url)
    m = c.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model"
    with pytest.raises(openai.NotFoundError) as info:
        c.models.retrieve("gpt-4")
    assert "gpt-4" in str(info.value)
    body = httpx.get(f"{server.url}/v1/models/gpt-4", timeout=10).json()
    assert body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"


def test_tokenize_and_detokenize(server, offline):
    url = server.url
    tok = offline.tokenizer
    text = "import os\nprint(os.getcwd())  # </s> ü"
    r = httpx.post(f"{url}/tokenize", json={"prompt": text}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    ids = tok.encode(text)
    assert r.json() == {"count": len(ids), "max_model_len": 256, "tokens": ids}
    # a prompt longer than max_model_len is counted, not refused
    long = httpx.post(f"{url}/tokenize", json={"prompt": "word " * 400}, timeout=TIMEOUT).json()
    assert long["count"] > 256
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    pairs = [(m["role"], m["content"]) for m in messages]
    chat = httpx.post(f"{url}/tokenize", json={"messages": messages}, timeout=TIMEOUT).json()
    assert chat["tokens"] == tok.encode(default_chat_prompt(pairs))
    no_gen = httpx.post(
        f"{url}/tokenize",
        json={"messages": messages, "add_generation_prompt": False},
        timeout=TIMEOUT,
    ).json()
    assert no_gen["tokens"] == tok.encode(default_chat_prompt(pairs, False))
    assert no_gen["count"] < chat["count"]
    r = httpx.post(f"{url}/detokenize", json={"tokens": ids}, timeout=TIMEOUT)
    assert r.status_code == 200 and r.json() == {"prompt": text}
    assert tok.decode(ids, skip_special_tokens=True) != text  # special tokens are written out
    bad = [
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"prompt": "x", "model": "gpt-4"}, "model"),
        ("/tokenize", {"messages": []}, "messages"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
        ("/detokenize", {"tokens": [1, 10**7]}, "tokens.1"),
        ("/detokenize", {"tokens": [-1]}, "tokens.0"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
    ]
    for path, body, param in bad:
        r = httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["param"] == param, (path, body, r.text)


def test_version(server):
    r = httpx.get(f"{server.url}/version", timeout=10)
    assert r.status_code == 200 and r.json() == {"version": fd_mtp.__version__}
