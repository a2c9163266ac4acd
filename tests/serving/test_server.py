"""``fd-mtp serve`` end to end: real uvicorn servers on 127.0.0.1 (free ports), the official ``openai``
client and raw HTTP, compared token for token with offline ``fd_mtp.LLM.generate``.

Three servers start once for the module (in parallel), all on the shipped demo model:

* ``plain``: plain decoding, 8 slots, max_model_len 256;
* ``mtp``: MTP speculative decoding (K = 3, 3 substeps), same sizes;
* ``small``: 1 slot, at most 1 waiting request, max_model_len 1024 (queue-full, disconnect and
  SIGTERM tests; the last test terminates it).

Every request has a timeout; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading

import pytest

pytest.importorskip("prometheus_client")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

import fd_mtp  # noqa: E402
from fd_mtp.entrypoints.openai.chat_template import default_chat_prompt  # noqa: E402

from .server_util import GREEDY_IDS, MODEL, ServerProcess, metrics, openai_client, running, wait_for  # noqa: E402

MTP_CONFIG = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}
TIMEOUT = 60

PROMPTS = [
    "def main():\n",
    "import os\nimport sys\n\n\ndef read_config(path):\n",
    "class Parser:\n    def __init__(self, text):\n        self.text = text\n",
    "for i in range(10):\n",
    "    return ",
    "# Copyright\n\nfrom collections import OrderedDict\n\n\ndef parse_args(argv=None):\n"
    '    """Parse the command line."""\n',
    "x = [",
    "if __name__ == '__main__':\n",
]


@pytest.fixture(scope="module")
def servers():
    common = ["--max-num-seqs", "8", "--max-model-len", "256", "--max-waiting-requests", "128"]
    procs = {
        "plain": ServerProcess(*common),
        "mtp": ServerProcess(*common, "--speculative-config", json.dumps(MTP_CONFIG)),
        "small": ServerProcess(
            "--max-num-seqs", "1", "--max-model-len", "1024", "--max-waiting-requests", "1"
        ),
    }
    with running(procs):
        yield procs


@pytest.fixture(scope="module")
def offline():
    """The offline reference: plain decoding of the same model in this process."""
    return fd_mtp.LLM(max_num_seqs=8, max_model_len=256)


def _reference(offline, prompts, max_tokens):
    params = [fd_mtp.SamplingParams(temperature=0, max_tokens=m) for m in max_tokens]
    return [o.token_ids for o in offline.generate(prompts, params, use_tqdm=False)]


def client(url) -> openai.OpenAI:
    return openai_client(url, TIMEOUT)


# -- greedy equality -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["plain", "mtp"])
def test_greedy_completions_equal_offline(servers, offline, which):
    url = servers[which].url
    c = client(url)
    max_tokens = [12, 5, 16, 9]
    prompts = PROMPTS[: len(max_tokens)]
    want = _reference(offline, prompts, max_tokens)
    for prompt, m, ref in zip(prompts, max_tokens, want):
        out = c.completions.create(prompt=prompt, max_tokens=m, **GREEDY_IDS)
        choice = out.choices[0]
        assert choice.token_ids == ref, (which, prompt)
        assert out.usage.completion_tokens == len(ref)
        assert choice.finish_reason in ("length", "stop")
        text = offline.tokenizer.decode(ref)
        assert choice.text == text or ref[-1] in offline.runner.eos_token_ids
        if which == "mtp":
            spec = choice.speculate_metrics
            assert spec["num_drafts"] >= 1 and len(spec["accepted_tokens_per_position"]) == 3
            assert out.metrics["speculative_decoding"]["num_draft_tokens"] >= 1
        # streamed: the chunks' token ids concatenate to the same output, text too
        ids, text, reasons = [], "", []
        stream = c.completions.create(
            prompt=prompt,
            max_tokens=m,
            stream=True,
            stream_options={"include_usage": True},
            **GREEDY_IDS,
        )
        usage = None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                ids += ch.token_ids
                text += ch.text
                reasons.append(ch.finish_reason)
        assert ids == ref, (which, prompt)
        assert text == choice.text
        assert reasons[-1] == choice.finish_reason and all(r is None for r in reasons[:-1])
        assert (
            usage.completion_tokens == len(ref) and usage.prompt_tokens == out.usage.prompt_tokens
        )


def test_batched_prompts_and_token_id_prompts(servers, offline):
    url = servers["plain"].url
    ids_prompt = offline.tokenizer.encode(PROMPTS[1])
    want = _reference(offline, [PROMPTS[0], ids_prompt], [6, 6])
    r = httpx.post(
        f"{url}/v1/completions",
        json={
            "prompt": [PROMPTS[0], PROMPTS[1]],
            "max_tokens": 6,
            "temperature": 0,
            "return_token_ids": True,
        },
        timeout=TIMEOUT,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["token_ids"] for c in body["choices"]] == want
    r = httpx.post(
        f"{url}/v1/completions",
        json={"prompt": ids_prompt, "max_tokens": 6, "temperature": 0, "return_token_ids": True},
        timeout=TIMEOUT,
    )
    assert r.json()["choices"][0]["token_ids"] == want[1]
    assert r.json()["choices"][0]["prompt_token_ids"] == ids_prompt


@pytest.mark.parametrize("which", ["plain", "mtp"])
def test_chat_equals_offline_on_the_default_template(servers, offline, which):
    c = client(servers[which].url)
    messages = [{"role": "system", "content": "Write Python."}, {"role": "user", "content": "sort"}]
    prompt = default_chat_prompt([(m["role"], m["content"]) for m in messages])
    [ref] = _reference(offline, [prompt], [10])
    out = c.chat.completions.create(messages=messages, max_tokens=10, **GREEDY_IDS)
    assert out.choices[0].token_ids == ref
    assert out.choices[0].message.role == "assistant"
    streamed = c.chat.completions.create(
        messages=messages, max_tokens=10, stream=True, **GREEDY_IDS
    )
    ids, text, roles = [], "", []
    for chunk in streamed:
        for ch in chunk.choices:
            ids += getattr(ch, "token_ids", None) or []
            text += ch.delta.content or ""
            roles.append(ch.delta.role)
    assert ids == ref and text == out.choices[0].message.content and roles[0] == "assistant"


def test_sampling_options_reach_the_engine(servers, offline):
    """Seeded sampling with top-k / top-p / penalties and a stop string: the server's output is
    the offline output of the same SamplingParams."""
    c = client(servers["plain"].url)
    kw = dict(
        temperature=0.8,
        top_p=0.9,
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=0.3,
        max_tokens=12,
    )
    out = c.completions.create(
        model=MODEL, prompt=PROMPTS[2], extra_body={"top_k": 20, "return_token_ids": True}, **kw
    )
    ref = offline.generate(PROMPTS[2], fd_mtp.SamplingParams(top_k=20, **kw), use_tqdm=False)[0]
    assert out.choices[0].token_ids == ref.token_ids
    # a stop string cuts the text: three non-blank characters from the middle of the offline
    # greedy output (whatever the demo model writes), cut before their first occurrence
    full = offline.generate(
        PROMPTS[0], fd_mtp.SamplingParams(max_tokens=12, temperature=0), use_tqdm=False
    )[0].text
    mid = len(full) // 2
    stop = next(full[i : i + 3] for i in range(mid, len(full) - 2) if full[i : i + 3].strip())
    out = c.completions.create(
        model=MODEL, prompt=PROMPTS[0], max_tokens=12, temperature=0, stop=[stop]
    )
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == full[: full.index(stop)]


def test_models_and_health(servers):
    url = servers["plain"].url
    models = client(url).models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


# -- 64 concurrent streams -----------------------------------------------------------------------


def test_64_concurrent_streams_get_exactly_the_offline_tokens(servers, offline):
    url = servers["mtp"].url
    n = 64
    prompts = [PROMPTS[i % len(PROMPTS)] * (1 + i % 3) for i in range(n)]
    max_tokens = [2 + (i * 7) % 15 for i in range(n)]
    want = _reference(offline, prompts, max_tokens)
    before = metrics(url)

    async def one(ac, i):
        stream = await ac.completions.create(
            prompt=prompts[i],
            max_tokens=max_tokens[i],
            stream=True,
            stream_options={"include_usage": True},
            **GREEDY_IDS,
        )
        ids, usage, finishes = [], None, 0
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                ids += ch.token_ids
                finishes += ch.finish_reason is not None
        return ids, usage, finishes

    async def run_all():
        ac = openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="none", timeout=TIMEOUT, max_retries=0
        )
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(one(ac, i) for i in range(n))), timeout=120
            )
        finally:
            await ac.close()

    results = asyncio.run(run_all())
    for i, (ids, usage, finishes) in enumerate(results):
        assert ids == want[i], f"stream {i}: got {ids}, want {want[i]}"
        assert finishes == 1 and usage.completion_tokens == len(ids)
    after = metrics(url)

    def delta(key):
        return after.get(key, 0.0) - before.get(key, 0.0)

    received = sum(len(ids) for ids, _, _ in results)
    assert delta("fd_mtp:generation_tokens_total") == received
    assert delta("fd_mtp:prompt_tokens_total") == sum(u.prompt_tokens for _, u, _ in results)
    finished = delta('fd_mtp:request_success_total{finished_reason="length"}') + delta(
        'fd_mtp:request_success_total{finished_reason="stop"}'
    )
    assert finished == n
    assert delta("fd_mtp:e2e_request_latency_seconds_count") == n
    assert delta("fd_mtp:time_to_first_token_seconds_count") == n
    # per-step ITL observations: at most one per token after the first
    assert 0 < delta("fd_mtp:inter_token_latency_seconds_count") <= received - n
    # speculative counters: accepted <= drafted; per-position counts sum to the accepted total
    acc = delta("fd_mtp:spec_decode_num_accepted_tokens_total")
    assert 0 < acc <= delta("fd_mtp:spec_decode_num_draft_tokens_total")
    per_pos = sum(
        delta(f'fd_mtp:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}}')
        for p in range(3)
    )
    assert per_pos == acc
    assert after["fd_mtp:num_requests_running"] == 0 and after["fd_mtp:kv_cache_usage_perc"] == 0


# -- bad requests --------------------------------------------------------------------------------

LONG_PROMPT = [5] * 300  # max_model_len is 256

BAD = [
    ("invalid JSON", "/v1/completions", b'{"prompt": "x",', None),
    ("not an object", "/v1/completions", [1, 2], None),
    ("max_tokens wrong type", "/v1/completions", {"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    (
        "temperature wrong type",
        "/v1/completions",
        {"prompt": "x", "temperature": "hot"},
        "temperature",
    ),
    ("prompt wrong type", "/v1/completions", {"prompt": 3}, "prompt"),
    ("stream wrong type", "/v1/completions", {"prompt": "x", "stream": "yes"}, "stream"),
    ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-4"}, "model"),
    ("max_tokens < 1", "/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("top_p out of range", "/v1/completions", {"prompt": "x", "top_p": 1.5}, "top_p"),
    (
        "penalty out of range",
        "/v1/completions",
        {"prompt": "x", "presence_penalty": 3},
        "presence_penalty",
    ),
    ("prompt too long", "/v1/completions", {"prompt": LONG_PROMPT}, "prompt"),
    ("empty prompt", "/v1/completions", {"prompt": ""}, "prompt"),
    ("token id outside the vocabulary", "/v1/completions", {"prompt": [10**7]}, "prompt"),
    ("unknown field", "/v1/completions", {"prompt": "x", "max_tokenz": 5}, "max_tokenz"),
    ("missing prompt", "/v1/completions", {"max_tokens": 5}, "prompt"),
    ("n < 1", "/v1/completions", {"prompt": "x", "n": 0}, "n"),
    ("logprobs > 20", "/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs"),
    ("logprobs < 0", "/v1/completions", {"prompt": "x", "logprobs": -1}, "logprobs"),
    (
        "stream_options without stream",
        "/v1/completions",
        {"prompt": "x", "stream_options": {"include_usage": True}},
        "stream_options",
    ),
    (
        "response_format json_object",
        "/v1/completions",
        {"prompt": "x", "response_format": {"type": "json_object"}},
        "response_format",
    ),
    (
        "response_format unknown type",
        "/v1/completions",
        {"prompt": "x", "response_format": {"type": "yaml"}},
        "response_format.type",
    ),
    (
        "service_tier unknown",
        "/v1/completions",
        {"prompt": "x", "service_tier": "gold"},
        "service_tier",
    ),
    (
        "metadata not strings",
        "/v1/completions",
        {"prompt": "x", "metadata": {"a": 1}},
        "metadata.a",
    ),
    ("chat: empty messages", "/v1/chat/completions", {"messages": []}, "messages"),
    (
        "chat: bad role",
        "/v1/chat/completions",
        {"messages": [{"role": "robot", "content": "x"}]},
        "messages.0.role",
    ),
    (
        "chat: content wrong type",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 5}]},
        "messages.0.content",
    ),
    (
        "chat: unknown field",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "foo": 1},
        "foo",
    ),
    (
        "chat: max_tokens < 1",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
        "max_tokens",
    ),
    (
        "chat: top_logprobs without logprobs",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        "top_logprobs",
    ),
    (
        "chat: top_logprobs > 20",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
        "top_logprobs",
    ),
    (
        "chat: response_format json_schema",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}},
        },
        "response_format",
    ),
    (
        "chat: stream_options with stream false",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "x"}],
            "stream": False,
            "stream_options": {"include_usage": True},
        },
        "stream_options",
    ),
    (
        "chat: tool message without tool_call_id",
        "/v1/chat/completions",
        {"messages": [{"role": "tool", "content": "42"}]},
        "messages.0.tool_call_id",
    ),
    (
        "chat: tools",
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        },
        "tools",
    ),
    (
        "chat: too long",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "word " * 400}]},
        "messages",
    ),
]


@pytest.mark.parametrize("name,path,body,param", BAD, ids=[b[0] for b in BAD])
def test_bad_request_is_400_naming_the_field(servers, name, path, body, param):
    url = servers["plain"].url
    if isinstance(body, bytes):
        r = httpx.post(
            f"{url}{path}",
            content=body,
            timeout=TIMEOUT,
            headers={"content-type": "application/json"},
        )
    else:
        r = httpx.post(f"{url}{path}", json=body, timeout=TIMEOUT)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    if param is not None:
        assert param.split(".")[0] in err["message"], err["message"]
    else:
        assert "JSON" in err["message"]
    # still serving
    ok = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=TIMEOUT)
    assert ok.status_code == 200, ok.text


def test_openai_client_sees_a_bad_request_error(servers):
    c = client(servers["plain"].url)
    with pytest.raises(openai.BadRequestError) as info:
        c.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert "max_tokens" in str(info.value)
    r = httpx.get(f"{servers['plain'].url}/v1/nothing", timeout=10)
    assert r.status_code == 404 and "error" in r.json()


# -- disconnect, queue full, drain (the small server: 1 slot, 1 waiting place) --------------------

KILLED_CLIENT = textwrap.dedent(
    """
    import sys, httpx
    body = {"prompt": "def main():\\n", "max_tokens": 1000, "ignore_eos": True, "stream": True,
            "temperature": 0}
    with httpx.stream("POST", sys.argv[1] + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                print("first chunk", flush=True)
                sys.stdin.read()  # hold the connection until killed
    """
)


def test_killed_client_is_aborted_and_a_full_queue_answers_503(servers):
    url = servers["small"].url
    before = metrics(url)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, url],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "first chunk"
        m = wait_for(
            lambda: (x := metrics(url))["fd_mtp:num_requests_running"] == 1 and x,
            what="the streaming request to run",
        )
        assert m["fd_mtp:kv_cache_usage_perc"] > 0
        # a second request waits for the only slot
        waiting_result = {}

        def second():
            waiting_result["r"] = httpx.post(
                f"{url}/v1/completions",
                json={"prompt": "x = [", "max_tokens": 3, "temperature": 0},
                timeout=TIMEOUT,
            )

        t = threading.Thread(target=second)
        t.start()
        wait_for(
            lambda: metrics(url)["fd_mtp:num_requests_waiting"] == 1,
            what="the second request to wait",
        )
        # a third finds the waiting queue full
        r = httpx.post(
            f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=TIMEOUT
        )
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "queue_full"
        assert proc.poll() is None  # the streaming client is still connected and running
    finally:
        proc.kill()
        proc.wait(10)
    # the killed client's request is aborted; the waiting one gets the slot and finishes
    t.join(TIMEOUT)
    assert waiting_result["r"].status_code == 200, waiting_result["r"].text
    after = wait_for(
        lambda: (
            (x := metrics(url))['fd_mtp:request_success_total{finished_reason="abort"}']
            == before['fd_mtp:request_success_total{finished_reason="abort"}'] + 1
            and x["fd_mtp:num_requests_running"] == 0
            and x
        ),
        what="the abort to be counted",
    )
    assert after["fd_mtp:kv_cache_usage_perc"] == 0
    assert after["fd_mtp:num_requests_waiting"] == 0
    assert after['fd_mtp:request_rejected_total{reason="queue_full"}'] == (
        before['fd_mtp:request_rejected_total{reason="queue_full"}'] + 1
    )
    # far fewer than 1000 tokens were generated for the aborted request
    assert after["fd_mtp:generation_tokens_total"] - before["fd_mtp:generation_tokens_total"] < 900
    # the next requests are served
    for _ in range(2):
        r = httpx.post(
            f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=TIMEOUT
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


KILLED_NON_STREAMING_CLIENT = textwrap.dedent(
    """
    import sys, httpx
    body = {"prompt": "def main():\\n", "max_tokens": 1000, "ignore_eos": True, "temperature": 0}
    httpx.post(sys.argv[1] + "/v1/completions", json=body, timeout=60)
    """
)


def test_killed_non_streaming_client_is_aborted(servers):
    url = servers["small"].url
    before = metrics(url)
    key = 'fd_mtp:request_success_total{finished_reason="abort"}'
    proc = subprocess.Popen([sys.executable, "-c", KILLED_NON_STREAMING_CLIENT, url])
    try:
        wait_for(
            lambda: (
                metrics(url)["fd_mtp:generation_tokens_total"]
                > before["fd_mtp:generation_tokens_total"]
            ),
            what="the request to run",
        )
    finally:
        proc.kill()
        proc.wait(10)
    after = wait_for(
        lambda: (
            (x := metrics(url))[key] == before[key] + 1
            and x["fd_mtp:num_requests_running"] == 0
            and x
        ),
        what="the abort",
    )
    assert after["fd_mtp:kv_cache_usage_perc"] == 0
    assert after["fd_mtp:generation_tokens_total"] - before["fd_mtp:generation_tokens_total"] < 900
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=TIMEOUT)
    assert r.status_code == 200


def test_sigterm_drains_running_requests_then_exits(servers):
    """The last test of the small server: SIGTERM while a stream runs; the stream still gets
    every token and [DONE], then the process exits 0."""
    srv = servers["small"]
    url = srv.url
    got = {"ids": [], "done": False}

    def stream():
        body = {
            "prompt": "def main():\n",
            "max_tokens": 300,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0,
            "return_token_ids": True,
        }
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=TIMEOUT) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    got["done"] = True
                elif line.startswith("data: "):
                    for ch in json.loads(line[6:])["choices"]:
                        got["ids"] += ch["token_ids"]

    t = threading.Thread(target=stream)
    t.start()
    wait_for(lambda: len(got["ids"]) > 0, what="the first streamed token")
    status = srv.terminate(timeout=60)
    t.join(TIMEOUT)
    assert got["done"] and len(got["ids"]) == 300
    assert status == 0, "".join(srv.output)
