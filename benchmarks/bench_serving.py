"""Online serving benchmark (in the manner of ``vllm bench serve``): plain vs MTP vs hybrid speculative
decoding behind ``fd-mtp serve``, side by side in one run.

For each mode (``--modes``, names of ``fd_mtp.demo.MODES``; default plain, mtp_k3, hybrid_k3) the
benchmark starts a server on 127.0.0.1 (a free port; the model: ``--model DIR`` or the shipped demo
model), warms it up, then sends ``--num-prompts`` streaming completions (greedy, ``--max-tokens``
each, EOS ignored so every request runs to the end) built from held-out prompts (openings of
standard-library files the demo model was not trained on, about ``--prompt-chars`` characters):

* arrivals: a Poisson process of ``--request-rate`` requests/s (``inf``: all at once), seeded;
* at most ``--max-concurrency`` requests in flight (a client-side limit, as vLLM's); a comma list
  runs the load once per value on the same server (default ``1,8``: latency-bound and batched).

Per mode it measures, from the client side: TTFT (send to the first token), ITL (gap between
consecutive streamed chunks; one chunk is one engine step, which carries several tokens when drafts
are accepted), TPOT ((end-to-end - TTFT) / (tokens - 1) per request), end-to-end latency, and
output tokens/s and requests/s over the run; from the server's /metrics: the mean accepted length
(1 + accepted / drafts), the acceptance rate and the prefix cache's hit rate (hit / queried prompt
tokens). ``--check`` asserts that every mode's greedy output
equals plain decoding's, request for request, token for token.

Usage:
    python benchmarks/bench_serving.py [--modes plain,mtp_k3,hybrid_k3] [--num-prompts 32]
        [--max-tokens 64] [--request-rate inf] [--max-concurrency 1,8] [--max-num-seqs 8]
        [--model DIR] [--check] [--out DIR]

Writes DIR/bench_serving.csv (benchmarks/harness.py's columns: kernel=serving, provider=the mode,
metric, unit, x=max concurrency, p50/p20/p80, config, ...; latency metrics also as ``<m>_p99`` rows
whose p50/p20/p80 are the p99) and DIR/bench_serving.png (TTFT, ITL, end-to-end p50 and output
tokens/s per mode and concurrency), and prints a table. The default run takes about a minute on
2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, Path(__file__).resolve().parent):  # fd_mtp; harness.py (also when loaded by path)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness import plot_bars, row, timestamp, write_csv  # noqa: E402

from fd_mtp.demo import MODES  # noqa: E402

START_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 300
LATENCIES = ("ttft", "itl", "tpot", "e2e")


class Server:
    """``python -m fd_mtp.entrypoints.openai.api_server`` on 127.0.0.1 and a free port."""

    def __init__(self, args: list[str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fd_mtp.entrypoints.openai.api_server", "--port", "0", *args],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        self.url = None
        ready = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.output.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                if m:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or self.url is None:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "".join(self.output))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def scrape(url: str) -> dict[str, float]:
    """The server's counters (labels other than model_name kept)."""
    import httpx

    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[re.sub(r'model_name="[^"]*",?', "", key).replace("{}", "")] = float(value)
    return out


async def one_request(client, url, prompt, max_tokens, t_send):
    """Stream one completion; returns (token ids, ttft, chunk gaps, e2e) in seconds."""
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "return_token_ids": True,
    }
    ids, times = [], []
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode()}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            new = [t for c in chunk["choices"] for t in c.get("token_ids", [])]
            if new:
                ids += new
                times.append(time.perf_counter())
    end = time.perf_counter()
    ttft = times[0] - t_send if times else float("nan")
    return ids, ttft, list(np.diff(times)), end - t_send


async def run_load(url, prompts, max_tokens, rate, concurrency, seed):
    """Send every prompt (Poisson arrivals at ``rate``/s, at most ``concurrency`` in flight)."""
    import httpx

    rng = np.random.default_rng(seed)
    gaps = np.zeros(len(prompts)) if np.isinf(rate) else rng.exponential(1.0 / rate, len(prompts))
    limits = httpx.Limits(max_connections=concurrency + 4)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:

        async def send(p):
            async with sem:
                return await one_request(client, url, p, max_tokens, time.perf_counter())

        tasks = []
        t0 = time.perf_counter()
        for p, gap in zip(prompts, gaps):
            if gap:
                await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(send(p)))
        results = await asyncio.gather(*tasks)
        duration = time.perf_counter() - t0
    return results, duration


def measure(mode, args, prompts, stamp):
    """Start the mode's server, warm it up, run the load at each concurrency; ([rows], [summary],
    [outputs]) over the concurrencies."""
    spec = MODES[mode]
    server_args = [
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--max-model-len",
        str(args.max_model_len),
        "--max-waiting-requests",
        str(max(256, len(prompts))),
    ]
    if args.model:
        server_args += ["--model", args.model]
    if spec is not None:
        server_args += ["--speculative-config", json.dumps(spec)]
    server = Server(server_args)
    try:
        asyncio.run(run_load(server.url, prompts[:2], 8, float("inf"), 2, 0))  # warm-up
        done = []
        for concurrency in args.concurrencies:
            before = scrape(server.url)
            results, duration = asyncio.run(
                run_load(server.url, prompts, args.max_tokens, args.request_rate, concurrency, 0)
            )
            done.append(
                summarize(
                    mode,
                    args,
                    prompts,
                    stamp,
                    concurrency,
                    results,
                    duration,
                    before,
                    scrape(server.url),
                )
            )
    finally:
        server.stop()
    return [list(x) for x in zip(*done)]


def summarize(mode, args, prompts, stamp, concurrency, results, duration, before, after):
    """CSV rows, summary and outputs of one load run."""
    outputs = [r[0] for r in results]
    tokens = sum(len(o) for o in outputs)
    lat = {
        "ttft": [r[1] for r in results],
        "itl": [g for r in results for g in r[2]],
        "tpot": [(r[3] - r[1]) / (len(r[0]) - 1) for r in results if len(r[0]) > 1],
        "e2e": [r[3] for r in results],
    }

    def delta(key):
        return after.get(key, 0.0) - before.get(key, 0.0)

    drafts = delta("fd_mtp:spec_decode_num_drafts_total")
    drafted = delta("fd_mtp:spec_decode_num_draft_tokens_total")
    accepted = delta("fd_mtp:spec_decode_num_accepted_tokens_total")
    queries = delta("fd_mtp:prefix_cache_queries_total")
    hits = delta("fd_mtp:prefix_cache_hits_total")
    summary = {
        "mode": mode,
        "concurrency": concurrency,
        "duration_s": duration,
        "tokens": tokens,
        "output_tokens_per_s": tokens / duration,
        "requests_per_s": len(prompts) / duration,
        "mean_accepted_length": 1 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "prefix_cache_hit_rate": hits / queries if queries else None,
    }
    config = (
        f"{len(prompts)} prompts, {args.max_tokens} new tokens, rate {args.request_rate}/s, "
        f"concurrency {args.max_concurrency}, max_num_seqs {args.max_num_seqs}"
    )
    common = dict(config=config, stamp=stamp)
    x = concurrency
    rows = []
    for name in LATENCIES:
        values = np.asarray(lat[name], float) * 1e3
        values = values[~np.isnan(values)]
        if not len(values):
            continue
        rows.append(row("serving", mode, x, values, metric=f"{name}_ms", unit="ms", **common))
        p99 = float(np.percentile(values, 99))
        rows.append(row("serving", mode, x, [p99], metric=f"{name}_p99_ms", unit="ms", **common))
        summary[f"{name}_p50"] = float(np.percentile(values, 50))
        summary[f"{name}_p99"] = p99
    for metric, unit in (("output_tokens_per_s", "tokens/s"), ("requests_per_s", "requests/s")):
        rows.append(row("serving", mode, x, [summary[metric]], metric=metric, unit=unit, **common))
    if summary["prefix_cache_hit_rate"] is not None:
        rows.append(
            row(
                "serving",
                mode,
                x,
                [summary["prefix_cache_hit_rate"]],
                metric="prefix_cache_hit_rate",
                unit="ratio",
                **common,
            )
        )
    if summary["mean_accepted_length"] is not None:
        rows.append(
            row(
                "serving",
                mode,
                x,
                [summary["mean_accepted_length"]],
                metric="mean_accepted_length",
                unit="tokens/step",
                **common,
            )
        )
    return rows, summary, outputs


def table(summaries) -> str:
    head = (
        f"{'mode':<10} {'conc':>4} {'out tok/s':>9} {'req/s':>6} {'TTFT p50':>8} {'p99':>7} {'ITL p50':>7} "
        f"{'p99':>7} {'TPOT p50':>8} {'E2E p50':>8} {'p99':>7} {'accept len':>10} {'cache hits':>10}"
    )
    lines = [head + "   (latencies in ms)", "-" * len(head)]
    for s in summaries:
        acc = s["mean_accepted_length"]
        hit = s["prefix_cache_hit_rate"]
        lines.append(
            f"{s['mode']:<10} {s['concurrency']:>4} {s['output_tokens_per_s']:>9.1f} {s['requests_per_s']:>6.2f} "
            f"{s['ttft_p50']:>8.1f} {s['ttft_p99']:>7.1f} {s['itl_p50']:>7.1f} "
            f"{s['itl_p99']:>7.1f} {s['tpot_p50']:>8.2f} {s['e2e_p50']:>8.1f} "
            f"{s['e2e_p99']:>7.1f} {'-' if acc is None else format(acc, '.2f'):>10} "
            f"{'-' if hit is None else format(hit, '.1%'):>10}"
        )
    return "\n".join(lines)


def plot(rows, modes, xs, path):
    panels = [
        ("ttft_ms", modes, "p50 [ms], p20-p80 bars", "time to first token"),
        ("itl_ms", modes, "p50 [ms], p20-p80 bars", "inter-token (chunk) latency"),
        ("e2e_ms", modes, "p50 [ms], p20-p80 bars", "end-to-end latency"),
        ("output_tokens_per_s", modes, "tokens/s", "output throughput"),
    ]
    colors = {m: f"C{i}" for i, m in enumerate(MODES)}
    plot_bars(
        rows,
        path,
        panels,
        xs,
        colors=colors,
        title=rows[0]["config"],
        xlabel="max concurrency",
        figsize=(18, 4),
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--modes",
        default="plain,mtp_k3,hybrid_k3",
        help=f"comma-separated, from {', '.join(MODES)}",
    )
    p.add_argument("--num-prompts", type=int, default=32, help="requests per mode")
    p.add_argument("--prompt-chars", type=int, default=200, help="characters per held-out prompt")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per request")
    p.add_argument(
        "--request-rate",
        type=float,
        default=float("inf"),
        help="Poisson arrival rate, requests/s (default: inf, all at once)",
    )
    p.add_argument(
        "--max-concurrency",
        default="1,8",
        help="requests in flight at most; a comma list runs each (default: 1,8)",
    )
    p.add_argument("--max-num-seqs", type=int, default=8, help="the servers' slots (default: 8)")
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--model", default=None, help="checkpoint directory (default: the demo model)")
    p.add_argument(
        "--check",
        action="store_true",
        help="assert every mode's greedy output equals plain decoding's, token for token",
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        p.error(f"--modes: unknown {unknown}; choose from {list(MODES)}")
    if args.check and "plain" not in modes:
        p.error("--check compares with plain decoding: include plain in --modes")
    try:
        args.concurrencies = [int(c) for c in args.max_concurrency.split(",") if c]
    except ValueError:
        p.error(f"--max-concurrency wants comma-separated ints, got {args.max_concurrency!r}")
    if not args.concurrencies or min(args.concurrencies) < 1:
        p.error("--max-concurrency values must be >= 1")
    if args.num_prompts < 1 or args.max_tokens < 1:
        p.error("--num-prompts and --max-tokens must be >= 1")
    if not args.request_rate > 0:
        p.error("--request-rate must be > 0 (inf: all at once)")

    from fd_mtp.assets.corpus import held_out_prompts

    held = [text for _, text in held_out_prompts(args.num_prompts, chars=args.prompt_chars)]
    if not held:
        p.error("no held-out prompts: the Python standard library's sources are not installed")
    prompts = [held[i % len(held)] for i in range(args.num_prompts)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = timestamp()
    rows, summaries, outputs = [], [], {}
    for mode in modes:
        r, s, o = measure(mode, args, prompts, stamp)
        rows += [x for part in r for x in part]
        summaries += s
        outputs[mode] = o
        for one in s:
            print(
                f"{mode} (concurrency {one['concurrency']}): {one['tokens']} tokens in "
                f"{one['duration_s']:.2f} s",
                flush=True,
            )
    summaries.sort(key=lambda s: (s["concurrency"], modes.index(s["mode"])))
    print(table(summaries))
    if args.check:
        want = outputs["plain"][0]
        for mode in modes:
            for c, run in zip(args.concurrencies, outputs[mode]):
                for i, (got, ref) in enumerate(zip(run, want)):
                    assert got == ref, (
                        f"--check: {mode} at concurrency {c}, request {i} differs from plain decoding"
                    )
                assert all(len(o) == args.max_tokens for o in run), (mode, c)
        print(
            f"check: passed ({len(modes)} modes x {len(args.concurrencies)} concurrencies x "
            f"{len(prompts)} requests equal plain decoding)"
        )
    csv_path = write_csv(rows, out / "bench_serving.csv")
    png_path = out / "bench_serving.png"
    plot(rows, modes, args.concurrencies, png_path)
    print(f"wrote {csv_path} and {png_path}")
    return summaries


if __name__ == "__main__":
    main()
