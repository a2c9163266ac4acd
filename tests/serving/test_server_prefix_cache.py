"""Prefix caching behind ``fd-mtp serve`` (the official ``openai`` client, real servers on 127.0.0.1):
a shared system prompt and a resent chat history are served from the cache, the output equals
offline decoding without the cache, usage reports ``cached_tokens`` and /metrics counts queried
and hit tokens; ``--no-enable-prefix-caching`` turns it off."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

import fd_mtp  # noqa: E402

from .server_util import ServerProcess, greedy_pair, metrics, openai_client, running  # noqa: E402

MODEL = "ernie45_tiny_mtp"
BS = 8
SYSTEM = (
    "# You are a careful Python programmer. Answer with code only.\n"
    "import os\nimport sys\nimport json\n\n\n"
)
QUESTIONS = ["def read_config(path):\n", "class Parser:\n", "def main(argv=None):\n"]
COMMON = ["--max-num-seqs", "4", "--max-model-len", "512", "--block-size", str(BS)]


@pytest.fixture(scope="module")
def servers():
    mtp = json.dumps({"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2})
    procs = {
        "cached": ServerProcess(*COMMON, "--speculative-config", mtp),
        "uncached": ServerProcess(*COMMON, "--no-enable-prefix-caching"),
    }
    with running(procs):
        yield procs


def client(url):
    return openai_client(url)


def test_shared_prefix_and_chat_history_hit_the_cache(servers):
    offline = fd_mtp.LLM(max_model_len=512, block_size=BS, enable_prefix_caching=False)
    url = servers["cached"].url
    c = client(url)
    before = metrics(url)
    queried = hit = 0
    history = []
    for k, q in enumerate(QUESTIONS):
        prompt = SYSTEM + "".join(history) + q  # each turn resends the conversation so far
        out, want = greedy_pair(c, offline, prompt, 12, MODEL)
        choice = out.choices[0]
        assert choice.token_ids == want.token_ids, k
        n_prompt = out.usage.prompt_tokens
        cached = out.usage.prompt_tokens_details.cached_tokens
        assert n_prompt == len(want.prompt_token_ids)
        assert cached % BS == 0 and cached < n_prompt
        # the first request finds nothing; every later one at least the system prompt's blocks
        assert (
            (cached == 0)
            if k == 0
            else (cached >= (len(offline.tokenizer.encode(SYSTEM)) - 1) // BS * BS)
        )
        queried += n_prompt
        hit += cached
        history += [q, choice.text + "\n"]
    after = metrics(url)
    assert (
        after["fd_mtp:prefix_cache_queries_total"]
        - before.get("fd_mtp:prefix_cache_queries_total", 0)
        == queried
    )
    assert (
        after["fd_mtp:prefix_cache_hits_total"] - before.get("fd_mtp:prefix_cache_hits_total", 0)
        == hit
        > 0
    )


def test_n_samples_share_the_prompt(servers):
    url = servers["cached"].url
    c = client(url)
    prompt = "def parse(text):\n" + "".join(f"    x{i} = {i}\n" for i in range(8))
    before = metrics(url)["fd_mtp:prefix_cache_hits_total"]
    out = c.completions.create(
        model=MODEL, prompt=prompt, max_tokens=6, n=3, temperature=0.8, seed=7
    )
    assert len(out.choices) == 3
    # samples 2 and 3 wait one step for the blocks sample 1 computes (all of them but perhaps
    # the last, which enters the cache once the draft model is num_model_steps past it)
    blocks = (out.usage.prompt_tokens - 1) // BS
    hits = metrics(url)["fd_mtp:prefix_cache_hits_total"] - before
    assert blocks >= 3 and 2 * (blocks - 1) * BS <= hits <= 2 * blocks * BS
    one = [
        c.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0.8, seed=7 + j)
        for j in range(3)
    ]
    # sample j is the n = 1 request with seed 7 + j, with or without shared blocks
    assert [ch.text for ch in sorted(out.choices, key=lambda ch: ch.index)] == [
        o.choices[0].text for o in one
    ]


def test_caching_off(servers):
    url = servers["uncached"].url
    c = client(url)
    for _ in range(2):
        out = c.completions.create(model=MODEL, prompt=SYSTEM + QUESTIONS[0], max_tokens=4)
        assert out.usage.prompt_tokens_details.cached_tokens == 0
    m = metrics(url)
    assert m["fd_mtp:prefix_cache_queries_total"] == m["fd_mtp:prefix_cache_hits_total"] == 0
