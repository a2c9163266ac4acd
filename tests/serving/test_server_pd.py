"""``fd-mtp serve --pd``: prefill / decode disaggregation behind one OpenAI endpoint (real servers
on 127.0.0.1, the official ``openai`` client). Each server runs a prefill and a decode process
(fd_mtp.distributed.pd); its greedy output equals offline ``fd_mtp.LLM.generate`` (plain and MTP),
streamed (per decode step) and not, completions and chat; a cancelled stream frees its slot on
the decode instance; /metrics counts; a killed decode instance ends the running stream with an
error event; SIGTERM drains (a stream still running after --shutdown-timeout gets the shutdown's
error event), stops and reaps both instances and leaves no SysV queue and no hand-off segment
behind, and so does a SIGKILLed server (its orphaned instances exit).

Two servers start once for the module, in parallel (plain and MTP; 2 slots each). Every request
has a timeout; every wait is bounded.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

import fd_mtp  # noqa: E402
from fd_mtp.distributed.pd import SEGMENT_PREFIX  # noqa: E402
from fd_mtp.entrypoints.openai.chat_template import default_chat_prompt  # noqa: E402
from fd_mtp.sysv_queue import remove_queue  # noqa: E402

from .server_util import FD_MTP_SERVE, GREEDY_IDS, ServerProcess, metrics, running, wait_for  # noqa: E402
from .test_server import MODEL, PROMPTS, client  # noqa: E402

MTP = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
SLOTS = 2
#: a stream that runs for several seconds (the demo model decodes ~300 tokens/s on this CPU)
LONG = 2000
#: a greedy stream of LONG tokens that does not stop at EOS (the prompt is added per request)
LONG_STREAM = dict(
    model=MODEL, max_tokens=LONG, temperature=0, stream=True, extra_body={"ignore_eos": True}
)
COMMON = ["--pd", "--max-num-seqs", str(SLOTS), "--max-model-len", "2048", "--block-size", "16"]
COMMON += ["--shutdown-timeout", "2"]
# this test process's own first-token queues (ftok keeps the low 8 bits: distinct there)
QIDS = {"plain": 0x7A00 + os.getpid() % 0x80, "mtp": 0x7A80 + os.getpid() % 0x80}


def _children(pid: int) -> list[int]:
    """The server's child processes (the prefill and the decode instance, and multiprocessing's
    resource tracker)."""
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            out += [int(c) for c in Path(path).read_text().split()]
        except OSError:
            pass
    return out


def _instances(pid: int) -> dict[str, int]:
    """``{"prefill": pid, "decode": pid}``: the server's instance processes, by their name."""
    out = {}
    for c in _children(pid):
        try:
            name = Path(f"/proc/{c}/comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("fd-mtp-"):
            out[name[len("fd-mtp-") :]] = c
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def _segments() -> list[str]:
    return glob.glob(f"/dev/shm{SEGMENT_PREFIX}.*")


@pytest.fixture(scope="module")
def servers():
    procs = {
        which: ServerProcess(
            *COMMON,
            "--pd-msg-queue-id",
            str(QIDS[which]),
            *(["--speculative-config", json.dumps(MTP)] if which == "mtp" else []),
            command=FD_MTP_SERVE,
        )
        for which in ("plain", "mtp")
    }
    with running(procs, timeout=60):
        yield procs


@pytest.fixture(scope="module")
def offline():
    """The mixed-role references: plain and MTP decoding of the same model in this process."""
    return {
        "plain": fd_mtp.LLM(max_num_seqs=4, max_model_len=2048),
        "mtp": fd_mtp.LLM(max_num_seqs=4, max_model_len=2048, speculative_config=MTP),
    }


def _reference(llm, prompts, max_tokens):
    params = [fd_mtp.SamplingParams(temperature=0, max_tokens=m) for m in max_tokens]
    return llm.generate(prompts, params, use_tqdm=False)


@pytest.mark.parametrize("which", ["plain", "mtp"])
def test_greedy_completions_and_chat_equal_offline(servers, offline, which):
    """Non-streamed and streamed completions and chat: the offline mixed-role engine's tokens and
    text; a stream arrives in several chunks (one per decode step), and its assembly equals the
    non-streamed answer."""
    url = servers[which].url
    c = client(url)
    before = metrics(url)
    max_tokens = [12, 20, 7]
    prompts = PROMPTS[: len(max_tokens)]
    want = _reference(offline[which], prompts, max_tokens)
    received = 0
    for p, m, w in zip(prompts, max_tokens, want):
        out = c.completions.create(prompt=p, max_tokens=m, **GREEDY_IDS)
        choice = out.choices[0]
        assert choice.token_ids == w.token_ids and choice.text == w.text
        assert choice.finish_reason == w.finish_reason
        assert out.usage.completion_tokens == len(w.token_ids)
        assert out.usage.prompt_tokens == len(w.prompt_token_ids)
        chunks = list(c.completions.create(prompt=p, max_tokens=m, stream=True, **GREEDY_IDS))
        ids = [
            t for ch in chunks for x in ch.choices for t in (getattr(x, "token_ids", None) or [])
        ]
        text = "".join(x.text for ch in chunks for x in ch.choices)
        assert ids == w.token_ids and text == choice.text
        # the first token (from the prefill instance), then the decode instance's steps
        with_tokens = [
            ch for ch in chunks if ch.choices and getattr(ch.choices[0], "token_ids", None)
        ]
        assert len(with_tokens) >= (3 if which == "plain" else 2), len(with_tokens)
        assert with_tokens[0].choices[0].token_ids == w.token_ids[:1]
        received += 2 * len(w.token_ids)

    messages = [{"role": "system", "content": "Write Python."}, {"role": "user", "content": "sort"}]
    prompt = default_chat_prompt([(m["role"], m["content"]) for m in messages])
    [ref] = _reference(offline[which], [prompt], [10])
    out = c.chat.completions.create(messages=messages, max_tokens=10, **GREEDY_IDS)
    assert out.choices[0].token_ids == ref.token_ids
    assert out.choices[0].message.content == ref.text
    streamed = c.chat.completions.create(
        messages=messages, max_tokens=10, stream=True, **GREEDY_IDS
    )
    ids, text = [], ""
    for chunk in streamed:
        for ch in chunk.choices:
            ids += getattr(ch, "token_ids", None) or []
            text += ch.delta.content or ""
    assert ids == ref.token_ids and text == ref.text
    received += 2 * len(ref.token_ids)

    # /metrics: the instances' counters behind the one endpoint
    after = metrics(url)
    delta = lambda k: after.get(k, 0) - before.get(k, 0)  # noqa: E731
    assert delta("fd_mtp:generation_tokens_total") == received
    assert delta('fd_mtp:request_success_total{finished_reason="length"}') + delta(
        'fd_mtp:request_success_total{finished_reason="stop"}'
    ) == 2 * (len(prompts) + 1)
    assert after["fd_mtp:num_requests_running"] == 0 and after["fd_mtp:num_requests_waiting"] == 0
    if which == "mtp":
        drafted = delta("fd_mtp:spec_decode_num_draft_tokens_total")
        accepted = delta("fd_mtp:spec_decode_num_accepted_tokens_total")
        assert drafted > 0 and 0 < accepted <= drafted
        mixed = sum(o.metrics.spec.num_accepted for o in want)
        assert mixed > 0


def test_prefix_cache_hits_on_the_prefill_instance(servers, offline):
    """A prompt sent twice: the prefill instance serves the second from its prefix cache;
    usage reports it (cached_tokens, merged into the decode instance's output) and /metrics
    counts it; the output is unchanged."""
    url = servers["plain"].url
    c = client(url)
    prompt = "".join(PROMPTS)  # well over one 16-token block
    [want] = _reference(offline["plain"], [prompt], [6])
    before = metrics(url)
    outs = [c.completions.create(prompt=prompt, max_tokens=6, **GREEDY_IDS) for _ in range(2)]
    assert [o.choices[0].token_ids for o in outs] == [want.token_ids] * 2
    cached = [o.usage.prompt_tokens_details.cached_tokens for o in outs]
    n = len(want.prompt_token_ids)
    assert cached[0] == 0 and 16 <= cached[1] < n and cached[1] % 16 == 0, cached
    after = metrics(url)
    hits = after["fd_mtp:prefix_cache_hits_total"] - before.get("fd_mtp:prefix_cache_hits_total", 0)
    assert hits == cached[1]


def test_logprobs_are_refused_naming_the_field(servers):
    c = client(servers["plain"].url)
    with pytest.raises(openai.BadRequestError, match="logprobs is not offered with prefill"):
        c.completions.create(model=MODEL, prompt="x = [", max_tokens=4, logprobs=1)


def test_cancelled_streams_free_their_slots(servers, offline):
    """Both slots hold long streams; the clients go away after a few chunks: the decode instance
    aborts them at once (the running gauge drops long before the requests could have finished),
    and two new requests get the slots and equal offline decoding."""
    url = servers["mtp"].url
    c = client(url)
    before = metrics(url)
    # the streams have ~2000 tokens to go (over 10 s for two): freed within 3 s is the abort
    streams = [c.completions.create(prompt=p, **LONG_STREAM) for p in PROMPTS[:SLOTS]]
    for s in streams:
        for k, _ in enumerate(s):
            if k == 3:
                break
    wait_for(lambda: metrics(url)["fd_mtp:num_requests_running"] == SLOTS, 20, what="both running")
    for s in streams:
        s.close()
    wait_for(
        lambda: (
            (x := metrics(url))["fd_mtp:num_requests_running"] == 0
            and x["fd_mtp:num_requests_waiting"] == 0
        ),
        timeout=3,
        what="the slots to be freed",
    )
    after = metrics(url)
    assert (
        after['fd_mtp:request_success_total{finished_reason="abort"}']
        - before.get('fd_mtp:request_success_total{finished_reason="abort"}', 0)
        == SLOTS
    )
    want = _reference(offline["mtp"], PROMPTS[2:4], [9, 9])
    box = {}

    def ask(i):
        box[i] = c.completions.create(prompt=PROMPTS[2 + i], max_tokens=9, **GREEDY_IDS)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [box[i].choices[0].token_ids for i in range(2)] == [w.token_ids for w in want]


def test_sigterm_drains_then_stops_both_instances_and_cleans_up(servers):
    """SIGTERM with a long stream in flight: the stream runs on for --shutdown-timeout (2 s), then
    ends with the shutdown's error event; the server exits 0, both instances are reaped, the SysV
    queue and every hand-off segment are removed."""
    proc = servers["mtp"]
    pids = list(_instances(proc.proc.pid).values())
    assert len(pids) == 2, pids
    stream = client(proc.url).completions.create(prompt=PROMPTS[1], **LONG_STREAM)
    it = iter(stream)
    next(it)
    proc.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    chunks = 0
    with pytest.raises(openai.APIError, match="shutting down"):
        for _ in it:
            chunks += 1
    assert chunks > 5 and 1.5 < time.monotonic() - t0 < 30  # it kept streaming, then was aborted
    assert proc.terminate(timeout=60) == 0
    wait_for(lambda: not any(_alive(p) for p in pids), 10, what="the instances to exit")
    assert remove_queue(QIDS["mtp"]) is False  # the server removed it
    assert not [s for s in _segments() if any(f".{p}." in s for p in pids)]


def test_dead_decode_instance_fails_streams_then_shutdown_cleans_up(servers):
    """The decode instance is killed mid-stream: the stream ends with an error event (no hang),
    the server reports its engine down (503); SIGTERM still exits 0 and cleans up."""
    proc = servers["plain"]
    url = proc.url
    instances = _instances(proc.proc.pid)
    assert sorted(instances) == ["decode", "prefill"], instances
    pids = list(instances.values())
    c = client(url)
    stream = c.completions.create(prompt=PROMPTS[0], **LONG_STREAM)
    it = iter(stream)
    for _ in range(3):
        next(it)
    os.kill(instances["decode"], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(openai.APIError, match="decode instance"):
        for _ in it:
            pass
    assert time.monotonic() - t0 < 30
    r = httpx.get(f"{url}/health", timeout=10)
    assert r.status_code == 503
    with pytest.raises(openai.APIStatusError) as err:
        c.completions.create(model=MODEL, prompt="x = [", max_tokens=4)
    assert err.value.status_code == 503
    assert proc.terminate(timeout=60) == 0
    wait_for(lambda: not any(_alive(p) for p in pids), 10, what="the instances to exit")
    assert remove_queue(QIDS["plain"]) is False
    assert not [s for s in _segments() if any(f".{p}." in s for p in pids)]


def test_idle_instance_death_shows_in_health_at_once():
    """With nothing in flight, a dead prefill instance turns /health into 503 and a new request
    gets 503 before anything is sent (the engine thread steps nothing while idle: the front's
    processes are checked, not only its thread); SIGTERM still exits 0 and cleans up."""
    qid = 0x7B80 + os.getpid() % 0x80  # the "mtp" server's low byte: that server is gone by now
    proc = ServerProcess(*COMMON, "--pd-msg-queue-id", str(qid), command=FD_MTP_SERVE)
    try:
        url = proc.launch().wait_ready().url
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        instances = _instances(proc.proc.pid)
        pids = list(instances.values())
        os.kill(instances["prefill"], signal.SIGKILL)
        wait_for(
            lambda: httpx.get(f"{url}/health", timeout=10).status_code == 503,
            10,
            what="/health to answer 503",
        )
        with pytest.raises(openai.APIStatusError) as err:
            client(url).completions.create(model=MODEL, prompt="x = [", max_tokens=4)
        assert err.value.status_code == 503
        assert proc.terminate(timeout=60) == 0
        wait_for(lambda: not any(_alive(p) for p in pids), 10, what="the instances to exit")
        assert remove_queue(qid) is False
    finally:
        proc.kill()
        remove_queue(qid)


def test_killed_server_leaves_no_instance_behind():
    """SIGKILL of the server itself (no cleanup of its own): the orphaned instances notice and
    exit, and the prefill one removes the first-token queue."""
    qid = 0x7B00 + os.getpid() % 0x80
    proc = ServerProcess(*COMMON, "--pd-msg-queue-id", str(qid), command=FD_MTP_SERVE)
    try:
        proc.launch().wait_ready()
        out = client(proc.url).completions.create(model=MODEL, prompt="x = [", max_tokens=3)
        assert out.usage.completion_tokens == 3
        pids = list(_instances(proc.proc.pid).values())
        assert len(pids) == 2, pids
        proc.kill()
        wait_for(lambda: not any(_alive(p) for p in pids), 15, what="the orphans to exit")
        assert remove_queue(qid) is False
        assert not [s for s in _segments() if any(f".{p}." in s for p in pids)]
    finally:
        proc.kill()
        remove_queue(qid)
