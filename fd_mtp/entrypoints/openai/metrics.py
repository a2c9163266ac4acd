"""Prometheus metrics of the server (``GET /metrics``), in a per-server ``CollectorRegistry`` (never
the global one, so one process can run several servers, e.g. in tests).

Names follow vLLM's with the prefix ``fd_mtp:``; every metric has the label ``model_name``:

* gauges: ``fd_mtp:num_requests_running``, ``fd_mtp:num_requests_waiting`` (queued + waiting for a
  slot), ``fd_mtp:kv_cache_usage_perc`` (fraction of KV blocks in use, 0..1);
* histograms (seconds): ``fd_mtp:time_to_first_token_seconds`` (arrival in the engine to the first
  token), ``fd_mtp:inter_token_latency_seconds`` (between consecutive steps that emitted tokens
  for a request; one observation per step, which may carry several tokens under speculative
  decoding), ``fd_mtp:e2e_request_latency_seconds`` (arrival to finish);
* counters: ``fd_mtp:prompt_tokens_total``, ``fd_mtp:generation_tokens_total`` (every token the
  engine emitted for a request, as streamed to its client), ``fd_mtp:request_success_total``
  (label ``finished_reason``: stop, length, abort), ``fd_mtp:request_rejected_total`` (label
  ``reason``: queue_full, invalid), ``fd_mtp:num_preemptions_total``;
* prefix cache (vLLM's counters, in tokens): ``fd_mtp:prefix_cache_queries_total`` (prompt tokens
  of the requests the engine admitted, looked up in the cache) and
  ``fd_mtp:prefix_cache_hits_total`` (those found); hit rate = ``rate(..._hits_total) /
  rate(..._queries_total)``. Read from the engine's own counters at every scrape;
* speculative decoding (vLLM's counters): ``fd_mtp:spec_decode_num_drafts_total`` (decode steps
  of a request that verified drafts), ``fd_mtp:spec_decode_num_draft_tokens_total``,
  ``fd_mtp:spec_decode_num_accepted_tokens_total``,
  ``fd_mtp:spec_decode_num_accepted_tokens_per_pos_total`` (label ``position``, 0 = first draft).

In PromQL: acceptance rate = ``rate(..._num_accepted_tokens_total) /
rate(..._num_draft_tokens_total)``; mean accepted length (bonus token included) = ``1 +
rate(..._num_accepted_tokens_total) / rate(..._num_drafts_total)``; acceptance at position i =
``..._per_pos_total{position="i"} / ..._num_drafts_total`` when every step drafts K tokens.
"""

from __future__ import annotations

import threading

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: N811
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

from ..async_llm import StatsListener

__all__ = ["ServerMetrics", "CONTENT_TYPE"]

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)


class ServerMetrics(StatsListener):
    """The server's metrics; an `fd_mtp.entrypoints.async_llm.StatsListener` fed by the engine
    thread. `bind` attaches the gauges to a running `AsyncLLM`; `render` is the ``/metrics`` body.

    Args:
        model_name: the ``model_name`` label.
        num_speculative_tokens: K (0 for plain decoding): the ``position`` labels 0..K-1.
    """

    def __init__(self, model_name: str, num_speculative_tokens: int = 0):
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        labels = ["model_name"]
        r = self.registry
        self.running = Gauge(
            "fd_mtp:num_requests_running", "Requests in a slot.", labels, registry=r
        )
        self.waiting = Gauge(
            "fd_mtp:num_requests_waiting", "Requests waiting for a slot.", labels, registry=r
        )
        self.kv_usage = Gauge(
            "fd_mtp:kv_cache_usage_perc", "Fraction of KV blocks in use (0..1).", labels, registry=r
        )
        self.ttft = Histogram(
            "fd_mtp:time_to_first_token_seconds",
            "Time to first token (seconds).",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "fd_mtp:inter_token_latency_seconds",
            "Time between consecutive token-emitting steps of a request (seconds).",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "fd_mtp:e2e_request_latency_seconds",
            "Request latency from arrival to finish (seconds).",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "fd_mtp:prompt_tokens", "Prompt tokens of queued requests.", labels, registry=r
        )
        self.generation_tokens = Counter(
            "fd_mtp:generation_tokens", "Generated tokens.", labels, registry=r
        )
        self.success = Counter(
            "fd_mtp:request_success",
            "Finished requests by finish reason.",
            labels + ["finished_reason"],
            registry=r,
        )
        self.rejected = Counter(
            "fd_mtp:request_rejected",
            "Requests answered with an error before they ran.",
            labels + ["reason"],
            registry=r,
        )
        self.preemptions = Counter(
            "fd_mtp:num_preemptions", "Preemptions (KV blocks ran out).", labels, registry=r
        )
        self.num_speculative_tokens = num_speculative_tokens
        if num_speculative_tokens:
            self.drafts = Counter(
                "fd_mtp:spec_decode_num_drafts",
                "Decode steps of a request that verified drafts.",
                labels,
                registry=r,
            )
            self.draft_tokens = Counter(
                "fd_mtp:spec_decode_num_draft_tokens", "Draft tokens verified.", labels, registry=r
            )
            self.accepted_tokens = Counter(
                "fd_mtp:spec_decode_num_accepted_tokens",
                "Draft tokens accepted.",
                labels,
                registry=r,
            )
            self.accepted_per_pos = Counter(
                "fd_mtp:spec_decode_num_accepted_tokens_per_pos",
                "Draft tokens accepted at each draft position.",
                labels + ["position"],
                registry=r,
            )
            for i in range(num_speculative_tokens):  # every position shows, 0 included
                self.accepted_per_pos.labels(model_name, str(i))
            for c in (self.drafts, self.draft_tokens, self.accepted_tokens):
                c.labels(model_name)
        for reason in ("stop", "length", "abort"):
            self.success.labels(model_name, reason)
        for reason in ("queue_full", "invalid"):
            self.rejected.labels(model_name, reason)
        for c in (self.prompt_tokens, self.generation_tokens, self.preemptions):
            c.labels(model_name)
        self._lock = threading.Lock()
        self._arrival: dict[str, float] = {}
        self._last: dict[str, float | None] = {}

    def bind(self, front) -> None:
        """Read the gauges and the prefix cache's counters from ``front`` (an `AsyncLLM`) at
        every scrape."""
        m = self.model_name
        self.running.labels(m).set_function(lambda: front.num_running)
        self.waiting.labels(m).set_function(lambda: front.num_waiting)
        self.kv_usage.labels(m).set_function(lambda: front.kv_cache_usage)
        self.registry.register(_PrefixCacheCollector(m, front.engine))

    def render(self) -> bytes:
        """The text exposition of every metric (the ``/metrics`` body)."""
        return generate_latest(self.registry)

    def rejected_request(self, reason: str) -> None:
        """A request answered with an error before it ran ("queue_full" or "invalid")."""
        self.rejected.labels(self.model_name, reason).inc()

    # -- StatsListener (engine thread) --------------------------------------------------------------
    def request_added(self, request_id: str, num_prompt_tokens: int, now: float) -> None:
        with self._lock:
            self._arrival[request_id] = now
            self._last[request_id] = None
        self.prompt_tokens.labels(self.model_name).inc(num_prompt_tokens)

    def tokens(self, request_id: str, num_tokens: int, now: float) -> None:
        m = self.model_name
        self.generation_tokens.labels(m).inc(num_tokens)
        with self._lock:
            last = self._last.get(request_id)
            arrival = self._arrival.get(request_id)
            self._last[request_id] = now
        if last is None:
            if arrival is not None:
                self.ttft.labels(m).observe(now - arrival)
        else:
            self.itl.labels(m).observe(now - last)

    def request_finished(self, request_id: str, finish_reason: str, now: float) -> None:
        m = self.model_name
        with self._lock:
            arrival = self._arrival.pop(request_id, None)
            self._last.pop(request_id, None)
        self.success.labels(m, finish_reason).inc()
        if arrival is not None:
            self.e2e.labels(m).observe(now - arrival)

    def speculative_step(self, delta) -> None:
        if not self.num_speculative_tokens:
            return
        m = self.model_name
        self.drafts.labels(m).inc(delta.num_steps)
        self.draft_tokens.labels(m).inc(delta.num_drafted)
        self.accepted_tokens.labels(m).inc(delta.num_accepted)
        for i, a in enumerate(delta.accepted_per_position):
            if a:
                self.accepted_per_pos.labels(m, str(i)).inc(a)

    def step(self, num_preemptions: int) -> None:
        if num_preemptions:
            self.preemptions.labels(self.model_name).inc(num_preemptions)


class _PrefixCacheCollector:
    """``fd_mtp:prefix_cache_queries`` / ``..._hits`` (counters, tokens), read from the engine's
    monotonic counters at each scrape (two ints: reading them from the event loop's thread while
    the engine steps is safe)."""

    def __init__(self, model_name: str, engine):
        self.model_name, self.engine = model_name, engine

    def collect(self):
        for name, doc, value in (
            (
                "fd_mtp:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache.",
                self.engine.prefix_cache_queries,
            ),
            (
                "fd_mtp:prefix_cache_hits",
                "Prompt tokens found in the prefix cache.",
                self.engine.prefix_cache_hits,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric([self.model_name], value)
            yield c
