"""``fd-mtp serve`` under 256 concurrent clients (MTP speculative decoding, the prefix cache on):
shared prefixes, random lengths, random cancellations. Every stream that is not cancelled gets
exactly the tokens offline decoding gives (none lost, none repeated) and one ``[DONE]``; a
cancelled one frees its slot; after each round nothing runs, no KV block is held, and the
server's memory stays flat from round to round.

Bounded: three rounds of 256 requests of at most 20 tokens on the demo model, every request with
a timeout."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

import fd_mtp  # noqa: E402

from .server_util import ServerProcess, metrics, stop, wait_for  # noqa: E402

CLIENTS = 256
ROUNDS = 3
TIMEOUT = 120
SPEC = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
ARGS = (
    f"--max-num-seqs 16 --max-waiting-requests {CLIENTS} --max-model-len 256 --block-size 16 "
    "--speculative-config"
).split() + [json.dumps(SPEC)]


def workload(seed: int):
    """``CLIENTS`` requests: token-id prompts behind one of 4 shared prefixes (16-70 tokens) with
    random suffixes (1-40 tokens), 1-20 greedy tokens each (EOS ignored), a quarter cancelled after
    a random number of chunks."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(3, 2000) for _ in range(rng.randrange(16, 70))] for _ in range(4)]
    reqs = []
    for i in range(CLIENTS):
        prompt = rng.choice(prefixes) + [
            rng.randrange(3, 2000) for _ in range(rng.randrange(1, 40))
        ]
        cancel = rng.randrange(1, 4) if rng.random() < 0.25 else None
        reqs.append((prompt, rng.randrange(1, 21), cancel))
    return reqs


async def one(client, url, prompt, max_tokens, cancel_after):
    """-> (token ids, [DONE] count, finish reasons, cancelled)."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
    }
    tokens, done, reasons, chunks = [], 0, [], 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done += 1
                continue
            chunk = json.loads(data)
            assert "error" not in chunk, chunk
            for c in chunk["choices"]:
                tokens += c.get("token_ids") or []
                if c["finish_reason"] is not None:
                    reasons.append(c["finish_reason"])
            chunks += 1
            if cancel_after is not None and chunks >= cancel_after:
                return tokens, done, reasons, True  # leaving the block closes the connection
    return tokens, done, reasons, False


async def round_(url, reqs):
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        return await asyncio.wait_for(
            asyncio.gather(*(one(client, url, p, m, c) for p, m, c in reqs)), TIMEOUT * 2
        )


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_256_concurrent_clients_lose_and_repeat_nothing():
    reqs = workload(seed=1)
    offline = fd_mtp.LLM(max_num_seqs=16, max_model_len=256, enable_prefix_caching=False)
    want = [
        o.token_ids
        for o in offline.generate(
            [p for p, _, _ in reqs],
            [
                fd_mtp.SamplingParams(max_tokens=m, temperature=0, ignore_eos=True)
                for _, m, _ in reqs
            ],
            use_tqdm=False,
        )
    ]
    del offline
    srv = ServerProcess(*ARGS)
    try:
        srv.launch().wait_ready()
        url, rss = srv.url, []
        for r in range(ROUNDS):
            results = asyncio.run(round_(url, reqs))
            finished = 0
            for i, ((tokens, done, reasons, cancelled), ref) in enumerate(zip(results, want)):
                if cancelled:
                    assert tokens == ref[: len(tokens)], f"round {r}, request {i} (cancelled)"
                    continue
                finished += 1
                assert tokens == ref, f"round {r}, request {i}: {tokens} != {ref}"
                assert done == 1 and reasons == ["length"], (r, i, done, reasons)
            assert finished >= CLIENTS // 2
            # cancelled requests are aborted at the next step: nothing runs, no block is held
            # (cached blocks nobody holds do not count as used)
            wait_for(
                lambda: (
                    (m := metrics(url))["fd_mtp:num_requests_running"] == 0
                    and m["fd_mtp:kv_cache_usage_perc"] == 0
                    and m["fd_mtp:num_requests_waiting"] == 0
                ),
                timeout=30,
                what="an idle engine",
            )
            rss.append(rss_kib(srv.proc.pid))
        m = metrics(url)
        assert m["fd_mtp:prefix_cache_hits_total"] > 0
        assert m['fd_mtp:request_success_total{finished_reason="abort"}'] > 0
        # flat memory: the last round grows the server by less than 32 MiB over the one before
        assert rss[-1] - rss[-2] < 32 * 1024, rss
    finally:
        stop(srv)
