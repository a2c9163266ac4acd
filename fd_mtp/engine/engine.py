"""`LLMEngine`: request queue, scheduler (chunked prefill, KV blocks, preemption), stop checks, streaming.

One `step()`:

1. Schedule, oldest request first, under a token budget (``max_num_batched_tokens``): each running
   request decodes one token or continues its prefill with the next chunk; a request that needs a
   new KV block when none is free preempts the newest running request not yet scheduled this step
   (possibly itself): its blocks are freed, its slot emptied, and it goes back to the waiting queue
   to be re-prefilled later from prompt + generated tokens (nothing lost, nothing repeated). Then
   waiting requests are admitted (oldest first) while slots, budget and blocks last (none after a
   preemption in the same step).
2. `ModelRunner.insert_tasks_v1` with the PREFILL / DECODE / PREEMPTED tasks, `execute_model`.
3. Append the sampled tokens (a non-final prefill chunk's token is discarded), check stop
   conditions, free finished requests' blocks and slots, return the per-request `StreamDelta`s.
   With ``speculative_config.stop_handling = "ops"`` the ops end requests (the runner's
   ``last_stopped`` slots finish, with the tokens the ops kept; `_ops_stop_reason`) and the host
   checks stop strings only (`_check_host_stop`); plain decoding always stops on the host.

Text: each request's output is detokenized incrementally (`IncrementalDetokenizer`: a window of
its newest tokens per token, not the whole output), so ``text`` costs O(1) decode work per token;
stop strings are searched in it as before.

The engine meets the runner through `ModelRunner`'s attributes and methods (no probing): the
speculative runner overrides ``spec_config``, ``num_speculative_tokens``, ``lookahead`` and
``last_drafted``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from ..batch import Task, TaskKind
from ..config import MAX_STOP_SEQS, SchedulerConfig
from .block_manager import BlockManager, blocks_for
from .detokenizer import IncrementalDetokenizer
from .request import (
    Request,
    RequestOutput,
    RequestStatus,
    SpeculativeMetrics,
    StreamDelta,
    with_decoded_tokens,
)
from .runner import ModelRunner, StepOutput
from .sampler import _splitmix64
from .sampling_params import SEED_MODULUS, SamplingParams

_REASONS = (None, "stop", "length")  # finish-reason codes of the vectorized stop checks
_REASON_ARRAY = np.array(_REASONS, object)
_NO_HIT = np.iinfo(np.int64).max
_OUTPUT_IDS = attrgetter("output_token_ids")
_REQUEST_ID = attrgetter("request_id")


def _fold(spec: SpeculativeMetrics, drafted, accepted, emitted: int) -> None:
    """Add histograms of drafts verified / accepted per step (index = count) to ``spec``."""
    k = np.arange(drafted.size)
    spec.num_steps += int(drafted.sum())
    spec.num_emitted += int(emitted)
    spec.num_drafted += int((k * drafted).sum())
    spec.num_accepted += int((k * accepted).sum())
    # steps that reached position i: those with more than i drafts
    reach_d = drafted[::-1].cumsum()[::-1][1:]
    reach_a = accepted[::-1].cumsum()[::-1][1:]
    n = len(spec.drafted_per_position)
    spec.drafted_per_position = [x + int(y) for x, y in zip(spec.drafted_per_position, reach_d[:n])]
    spec.accepted_per_position = [
        x + int(y) for x, y in zip(spec.accepted_per_position, reach_a[:n])
    ]


@dataclass
class StepStats:
    """Where the engine's decode steps went (cumulative; the steps where every running request
    decoded, scheduled by `LLMEngine._schedule_fast`), for the cost split ``T_step = T_target +
    substeps x T_draft + T_host`` that benchmarks print:

    * ``steps``, ``requests`` (decoding requests summed over the steps), ``fed_tokens`` (tokens
      the target verified: 1 + drafts per request);
    * ``step_seconds``: whole `LLMEngine.step` calls; ``runner_seconds``: inside
      ``execute_model``; ``proposer_seconds``: inside the proposer's ``run`` (part of the
      runner's); ``draft_seconds``: inside its MTP forwards (part of the proposer's);
      ``substeps``: MTP forwards run.

    Derived: `target` (the runner minus the proposer: forward, sampling, verification, the
    step's ops and transfers), `draft` (one MTP substep), `host` (the rest: scheduling, stop
    checks, output delivery, the proposer's own bookkeeping), each in seconds per step."""

    steps: int = 0
    requests: int = 0
    fed_tokens: int = 0
    step_seconds: float = 0.0
    runner_seconds: float = 0.0
    proposer_seconds: float = 0.0
    draft_seconds: float = 0.0
    substeps: int = 0

    def _per(self, x: float) -> float:
        return x / self.steps if self.steps else float("nan")

    @property
    def step(self) -> float:
        return self._per(self.step_seconds)

    @property
    def target(self) -> float:
        return self._per(self.runner_seconds - self.proposer_seconds)

    @property
    def draft(self) -> float:
        return self.draft_seconds / self.substeps if self.substeps else 0.0

    @property
    def host(self) -> float:
        return self._per(
            self.step_seconds - self.runner_seconds + self.proposer_seconds - self.draft_seconds
        )

    def since(self, before: StepStats) -> StepStats:
        """The difference ``self - before`` (a window of steps)."""
        return StepStats(
            *(getattr(self, f) - getattr(before, f) for f in self.__dataclass_fields__)
        )


class LLMEngine:
    """Continuous-batching engine over a `ModelRunner`.

    Args:
        runner: the model runner (slots, KV cache, per-slot state); its ``scheduler_config``
            gives ``max_num_batched_tokens`` (tokens per step: decodes count 1 + K, prefills are
            chunked to fit).
        tokenizer: optional, with ``encode(text) -> list[int]`` (or ``__call__`` returning
            ``{"input_ids": ...}``) and ``decode(ids, skip_special_tokens=...)``; needed for text
            prompts, ``.text`` and stop strings.
        seed: the engine seed from which requests without ``SamplingParams.seed`` get theirs
            (``splitmix64(seed, arrival number)``).
    """

    def __init__(self, runner: ModelRunner, *, tokenizer=None, seed: int = 0):
        self.runner = runner
        self.tokenizer = tokenizer
        self.scheduler_config: SchedulerConfig = runner.scheduler_config
        self.max_num_batched_tokens = self.scheduler_config.max_num_batched_tokens
        self.seed = seed
        self.block_manager = BlockManager(runner.num_blocks, runner.block_size)
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.free_slots = list(range(runner.max_num_seqs - 1, -1, -1))
        self.requests: dict[str, Request] = {}
        self._arrivals = itertools.count()
        self.num_steps = 0
        self.num_preemptions = 0
        #: cost split of the decode steps (`StepStats`)
        self.stats = StepStats()
        #: with a tokenizer: decode every request's text every step (its deltas stream text);
        #: False: a request's text is decoded when it finishes (or read, or it has stop
        #: strings), its deltas carry "" until the last, which carries the whole text
        #: (`fd_mtp.LLM.generate` without a stream_callback sets it)
        self.stream_text = True
        # speculative decoding: every decoding request runs every step and may write drafts'
        # K/V past its tokens (runner.lookahead positions)
        self.speculative = runner.num_speculative_tokens > 0
        K = runner.num_speculative_tokens
        self._pending_drafted = np.zeros(K + 1, np.int64)
        self._pending_accepted = np.zeros(K + 1, np.int64)
        self._pending_emitted = 0
        self.spec_metrics = SpeculativeMetrics(K) if self.speculative else None
        # speculative_config.stop_handling "ops": the ops end requests (the runner's
        # last_stopped); the host keeps stop strings only
        spec = runner.spec_config
        self.ops_stop = spec is not None and spec.stop_handling == "ops"
        #: the runner's `InputBatch`: the per-slot arrays the step works on
        self.ib = runner.input_batch
        if self.speculative:
            self.ib.set_draft_positions(runner.num_speculative_tokens)
        self._eos = np.asarray(runner.eos_token_ids, np.int64)

    # -- requests -----------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError(
                "a text prompt needs a tokenizer; pass token ids or give the LLM a tokenizer"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"the prompt is not valid Unicode text: {exc.reason} {text[exc.start : exc.end]!r} "
                f"at character {exc.start}"
            ) from None
        tok = self.tokenizer
        try:
            if hasattr(tok, "encode"):
                ids = tok.encode(text)
                if isinstance(ids, dict):
                    ids = ids["input_ids"]
            else:
                ids = tok(text)["input_ids"]
            return [int(i) for i in ids]
        except Exception as exc:  # a tokenizer failing on this text fails this request only
            raise ValueError(
                f"the tokenizer could not encode the prompt: {type(exc).__name__}: {exc}"
            ) from exc

    def validate_prompt(self, prompt, params) -> list[int]:
        """The prompt's token ids, or ValueError saying what is wrong with this request."""
        if not isinstance(params, SamplingParams):
            raise ValueError(
                f"sampling params must be a SamplingParams, got {type(params).__name__}"
            )
        if isinstance(prompt, str):
            ids = self.encode(prompt)
        elif isinstance(prompt, (list, tuple, np.ndarray)):
            ids = list(prompt)
            for i, t in enumerate(ids):
                if not isinstance(t, (int, np.integer)) or isinstance(t, bool):
                    raise ValueError(f"prompt token {i} is {t!r}, not an int")
            ids = [int(t) for t in ids]
        else:
            raise ValueError(
                f"a prompt must be a string or a list of token ids, got {type(prompt).__name__}"
            )
        if not ids:
            raise ValueError("the prompt is empty")
        V = self.runner.vocab_size
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {V})")
        L = self.runner.max_model_len
        if len(ids) >= L:
            raise ValueError(
                f"the prompt has {len(ids)} tokens; max_model_len is {L} (prompt + at least one "
                "generated token must fit)"
            )
        spec = self.runner.spec_config
        if spec is not None and spec.verification == "greedy" and not params.greedy:
            raise ValueError(
                "speculative_config.verification='greedy' emits the argmax: it needs greedy sampling "
                "(temperature 0); use verification='target_match' or 'rejection' to sample"
            )
        if self.ops_stop:
            if params.ignore_eos:
                raise ValueError(
                    "ignore_eos=True: with speculative_config.stop_handling='ops' the ops end "
                    "every request at the model's EOS ids (one end-token list for the whole batch, as "
                    "FastDeploy); use stop_handling='engine' to ignore EOS"
                )
            if len(params.stop_token_ids) > MAX_STOP_SEQS:
                raise ValueError(
                    f"{len(params.stop_token_ids)} stop_token_ids: with speculative_config."
                    f"stop_handling='ops' a request has at most {MAX_STOP_SEQS} (FastDeploy's "
                    "FD_MAX_STOP_SEQS_NUM stop sequences)"
                )
        need = blocks_for(
            min(len(ids) + params.max_tokens, L) + self.runner.max_extra_positions,
            self.runner.block_size,
        )
        if need > self.block_manager.num_blocks:
            raise ValueError(
                f"the request needs up to {need} KV blocks; the cache has "
                f"{self.block_manager.num_blocks} (lower max_tokens or raise num_gpu_blocks)"
            )
        return ids

    def add_request(
        self, prompt, params: SamplingParams | None = None, request_id: str | None = None
    ) -> str:
        """Queue a request (text or token ids); it joins the running batch at the next `step`.

        Raises ValueError (nothing queued) for an empty prompt, ids outside the vocabulary, a
        prompt of ``max_model_len`` tokens or more, a request that could never fit the KV cache,
        a text prompt without tokenizer, a text the tokenizer cannot encode (e.g. a lone
        surrogate such as ``"\\ud800"``), a duplicate request_id, or params that are not a
        SamplingParams.
        """
        params = SamplingParams() if params is None else params
        ids = self.validate_prompt(prompt, params)
        arrival = next(self._arrivals)
        rid = str(arrival) if request_id is None else str(request_id)
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in use")
        if params.seed is not None:
            seed = params.seed
        else:
            mixed = _splitmix64(
                np.array([self.seed % SEED_MODULUS], np.uint64) ^ np.uint64(arrival)
            )[0]
            seed = int(mixed % np.uint64(SEED_MODULUS))
        req = Request(
            rid, ids, params, seed, arrival, prompt=prompt if isinstance(prompt, str) else None
        )
        req.metrics.arrival_time = time.perf_counter()
        if self.speculative:
            req.metrics.spec = SpeculativeMetrics(self.runner.num_speculative_tokens)
        req.metrics.num_prompt_tokens = len(ids)
        self.requests[rid] = req
        self.waiting.append(req)
        return rid

    def abort_request(self, request_id: str) -> None:
        """Finish a request now (``finish_reason = "aborted"``), freeing its slot and blocks."""
        req = self.requests[request_id]
        if req.finished:
            return
        if req.status is RequestStatus.RUNNING:
            self._release(req)
        else:
            self.waiting.remove(req)
        if self.tokenizer is not None and not self.stream_text and req.output_token_ids:
            self._update_text(req)
        self._finish(req, "aborted")

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def get_output(self, request_id: str) -> RequestOutput:
        req = self.requests[request_id]
        if req.status is RequestStatus.RUNNING:
            self._sync_metrics(req)
            if self.tokenizer is not None and not self.stream_text:
                self._update_text(req)
        return RequestOutput.from_request(req)

    def pop_output(self, request_id: str) -> RequestOutput:
        """The output of a finished request, forgetting the request."""
        req = self.requests[request_id]
        if not req.finished:
            raise ValueError(f"request {request_id!r} is not finished")
        del self.requests[request_id]
        return RequestOutput.from_request(req)

    # -- scheduling ---------------------------------------------------------------------------------
    def _bind(self, req: Request) -> None:
        """Mirror a request that holds a slot into the `InputBatch`'s per-slot arrays (when the
        general scheduler plans it, or a request arrives prefilled)."""
        ib, b = self.ib, req.slot
        ib.requests[b] = req
        ib.running[b] = True
        ib.prefilled[b] = req.prefilled
        ib.num_computed[b] = req.num_computed
        ib.num_output[b] = len(req.output_token_ids)
        ib.num_blocks[b] = len(req.block_ids)
        ib.prompt_len[b] = len(req.prompt_token_ids)
        ib.arrival[b] = req.arrival_index

    def _sync_metrics(self, req: Request) -> None:
        """Fold the slot's step counters into ``req.metrics`` (they are zeroed)."""
        ib, b, m = self.ib, req.slot, req.metrics
        m.num_generated_tokens = len(req.output_token_ids)
        if b < 0 or ib.requests[b] is not req:
            return
        m.num_steps += int(ib.steps[b])
        ib.steps[b] = 0
        if m.spec is not None and ib.spec_emitted[b]:
            _fold(m.spec, ib.spec_drafted[b], ib.spec_accepted[b], int(ib.spec_emitted[b]))
            ib.spec_emitted[b] = 0
            ib.spec_drafted[b] = ib.spec_accepted[b] = 0

    def _release(self, req: Request) -> None:
        self._sync_metrics(req)
        self.ib.running[req.slot] = False
        self.ib.requests[req.slot] = None
        self.block_manager.free(req.block_ids)
        req.block_ids = []
        self.runner.insert_tasks_v1([Task(TaskKind.PREEMPTED, req.slot)])
        self.free_slots.append(req.slot)
        req.slot = -1
        self.running.remove(req)

    def _preempt(self, req: Request) -> None:
        self._release(req)
        req.status = RequestStatus.WAITING
        req.num_computed = 0
        req.prefilled = False
        req.metrics.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.append(req)
        self.waiting.sort(key=lambda r: r.arrival_index)

    def _schedule(self):
        budget = self.max_num_batched_tokens
        tasks: list[Task] = []
        decode_slots: list[int] = []
        plan: dict[int, tuple[Request, int]] = {}  # slot -> (request, end of the fed tokens)
        preempted = False
        extra = self.runner.lookahead
        for req in sorted(self.running, key=lambda r: r.arrival_index):
            if req.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            decoding = req.prefilled
            if budget <= 0 and not (decoding and self.speculative):
                if self.speculative:
                    continue  # a later decoding request still runs (every one does, every step)
                break
            # a speculative decode feeds up to 1 + K tokens and always runs (its drafts are pending)
            n = (
                self.runner.decode_tokens
                if decoding
                else min(req.num_tokens - req.num_computed, budget)
            )
            old_len = len(req.block_ids)
            while not self.block_manager.grow(req.block_ids, req.num_computed + n + extra):
                victims = [r for r in self.running if r.slot not in plan]
                victim = max(victims, key=lambda r: r.arrival_index)
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            if req.status is not RequestStatus.RUNNING:
                continue
            budget -= n
            plan[req.slot] = (req, req.num_computed + (1 if decoding else n))
            if decoding:
                decode_slots.append(req.slot)
                if len(req.block_ids) != old_len:
                    tasks.append(Task(TaskKind.DECODE, req.slot, block_ids=list(req.block_ids)))
            else:
                tasks.append(self._prefill_task(req, req.num_computed + n))
        while self.waiting and self.free_slots and budget > 0 and not preempted:
            req = self.waiting[0]
            n = min(req.num_tokens, budget)
            if not self.block_manager.grow(req.block_ids, n + extra):
                break
            self.waiting.pop(0)
            req.slot = self.free_slots.pop()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            budget -= n
            plan[req.slot] = (req, n)
            tasks.append(self._prefill_task(req, n))
        return tasks, decode_slots, plan

    def _prefill_task(self, req: Request, end: int) -> Task:
        return Task(
            TaskKind.PREFILL,
            req.slot,
            block_ids=list(req.block_ids),
            token_ids=req.all_token_ids,
            start=req.num_computed,
            end=end,
            num_output=len(req.output_token_ids),
            params=req.sampling_params,
            seed=req.seed,
        )

    def _schedule_fast(self):
        """The scheduling of a step where every running request decodes and none is admitted,
        on the `InputBatch`'s arrays: ``(tasks, decode slots)``, or None when the step needs the
        general scheduler (`_schedule`: a prefill, an admission, a token budget that does not
        cover every decode, or a block shortage that may preempt). A request that crosses a KV
        block boundary gets its blocks here (per-event work: once every ``block_size`` tokens)."""
        if not self.running or (self.waiting and self.free_slots):
            return None
        ib, runner = self.ib, self.runner
        slots = ib.running.nonzero()[0]
        if slots.size != len(self.running) or not ib.prefilled[slots].all():
            return None  # (a request not mirrored yet: the general scheduler binds it)
        n = runner.decode_tokens
        if not self.speculative and slots.size * n > self.max_num_batched_tokens:
            return None
        need = -(-(ib.num_computed[slots] + n + runner.lookahead) // runner.block_size)
        short = need > ib.num_blocks[slots]
        tasks = []
        if short.any():
            if int((need - ib.num_blocks[slots])[short].sum()) > self.block_manager.num_free:
                return None
            grow = slots[short]
            for b in grow[np.argsort(ib.arrival[grow], kind="stable")]:
                req = ib.requests[b]
                self.block_manager.grow(
                    req.block_ids, int(ib.num_computed[b]) + n + runner.lookahead
                )
                ib.num_blocks[b] = len(req.block_ids)
                tasks.append(Task(TaskKind.DECODE, int(b), block_ids=list(req.block_ids)))
        return tasks, slots

    # -- one step -----------------------------------------------------------------------------------
    def step(self) -> list[StreamDelta]:
        """Schedule, run one packed forward, sample, stop-check; returns this step's deltas.

        A step where every running request decodes is scheduled and checked on whole-batch arrays
        (`_schedule_fast`, `_finish_step`); Python per request is then only the output delivery
        (tokens appended to the request, its `StreamDelta`), the detokenizing of requests with a
        tokenizer, and the per-token check of requests with stop strings."""
        ib = self.ib
        t0 = time.perf_counter()
        fast = self._schedule_fast()
        if fast is None:
            tasks, decode_slots, plan = self._schedule()
            if not plan:
                if self.running or self.waiting:
                    raise RuntimeError(
                        "the scheduler could not run any request (KV cache too small?)"
                    )
                return []
            now = time.perf_counter()
            for slot, (req, end) in plan.items():
                if req.metrics.first_scheduled_time is None:
                    req.metrics.first_scheduled_time = now
                self._bind(req)
                ib.end[slot] = end
            slots = np.fromiter(plan, np.int64, len(plan))
        else:
            tasks, slots = fast
            decode_slots = slots
        ib.steps[slots] += 1
        self.runner.insert_tasks_v1(tasks)
        prop = self.runner.proposer
        before = (prop.stats.run, prop.stats.forward, prop.stats.forwards) if prop else (0, 0, 0)
        t1 = time.perf_counter()
        out = self.runner.execute_model(decode_slots)
        t2 = time.perf_counter()
        self.num_steps += 1
        deltas = self._finish_step(out, decode_only=fast is not None)
        if fast is not None:
            st = self.stats
            st.steps += 1
            st.requests += int(slots.size)
            st.fed_tokens += int(slots.size + out.drafted.sum())
            st.step_seconds += time.perf_counter() - t0
            st.runner_seconds += t2 - t1
            if prop is not None:
                st.proposer_seconds += prop.stats.run - before[0]
                st.draft_seconds += prop.stats.forward - before[1]
                st.substeps += prop.stats.forwards - before[2]
        return deltas

    def _count_drafts(self, slots, drafted, emitted) -> None:
        """Speculative metrics of one step's decoding slots: histograms of drafts verified and
        accepted, per slot (folded into each request's metrics when it leaves its slot) and for
        the engine (folded into `spec_metrics` when it is read)."""
        ib = self.ib
        accepted = np.minimum(np.maximum(emitted - 1, 0), drafted)
        ib.spec_drafted[slots, drafted] += 1
        ib.spec_accepted[slots, accepted] += 1
        ib.spec_emitted[slots] += emitted
        n = ib.spec_drafted.shape[1]
        self._pending_drafted += np.bincount(drafted, minlength=n)
        self._pending_accepted += np.bincount(accepted, minlength=n)
        self._pending_emitted += int(emitted.sum())

    @property
    def spec_metrics(self) -> SpeculativeMetrics | None:
        """The engine's `SpeculativeMetrics` over every decode step so far (None: plain)."""
        spec = self._spec_metrics
        if spec is not None and self._pending_emitted:
            _fold(spec, self._pending_drafted, self._pending_accepted, self._pending_emitted)
            self._pending_drafted[...] = self._pending_accepted[...] = 0
            self._pending_emitted = 0
        return spec

    @spec_metrics.setter
    def spec_metrics(self, value: SpeculativeMetrics | None) -> None:
        self._spec_metrics = value
        self._pending_drafted[...] = self._pending_accepted[...] = 0
        self._pending_emitted = 0

    def _finish_step(self, out: StepOutput, decode_only: bool = False) -> list[StreamDelta]:
        """The step's results on whole-batch arrays: caches advanced, prefill chunks settled,
        stop checks (EOS, stop token ids after min_tokens, max_tokens / max_model_len; the ops'
        stops with ``stop_handling="ops"``), then the per-request output delivery.
        ``decode_only``: every slot that ran decoded (`_schedule_fast`'s steps)."""
        ib = self.ib
        now = time.perf_counter()
        slots, counts, flat = out.slots, out.counts, out.tokens
        starts = counts.cumsum() - counts
        if decode_only:
            ib.num_computed[slots] += counts
            if self.speculative:
                self._count_drafts(slots, out.drafted, counts)
            rows = ib.arrival[slots].argsort(kind="stable")  # arrival order
        else:
            counts = counts.copy()
            pre = ~ib.prefilled[slots]
            dec = ~pre
            ib.num_computed[slots[dec]] += counts[dec]
            if self.speculative and dec.any():
                self._count_drafts(slots[dec], out.drafted[dec], counts[dec])
            if pre.any():
                ps = slots[pre]
                ib.num_computed[ps] = ib.end[ps]
                final = ib.end[ps] >= ib.prompt_len[ps] + ib.num_output[ps]
                counts[pre] = np.where(final, np.minimum(counts[pre], 1), 0)
                ib.prefilled[ps[final]] = True
                for b, f in zip(ps.tolist(), final.tolist()):  # per prefill chunk (an event)
                    req = ib.requests[b]
                    req.num_computed = int(ib.num_computed[b])
                    if f:
                        req.prefilled = True
                        if req.metrics.first_token_time is None:
                            req.metrics.first_token_time = now
            rows = (counts > 0).nonzero()[0]  # slots that emit (not a non-final prefill chunk)
            if not rows.size:
                return []
            rows = rows[ib.arrival[slots[rows]].argsort(kind="stable")]  # arrival order
        s, c, st = slots[rows], counts[rows], starts[rows]
        if flat.size == slots.size:  # one token per slot (plain decoding, or no draft accepted)
            j = np.zeros(rows.size, np.int64)
            tok, sr = flat[st], s
        else:
            off = c.cumsum() - c  # each row's first token among the emitted ones
            j = np.arange(int(c.sum())) - off.repeat(c)  # position inside the row's run
            tok = flat[st.repeat(c) + j]
            sr = s.repeat(c)
        n = ib.num_output[sr] + j + 1  # output length once the token is appended
        if self.ops_stop:
            keep = c
            total = ib.num_output[s] + c
            limit = ib.max_output[s]
            stopped = out.stopped[rows]
            late = ~stopped & (total >= limit)
            if late.any():
                req = ib.requests[int(s[late][0])]
                raise RuntimeError(
                    f"request {req.request_id!r}: {int(total[late][0])} tokens, the limit is "
                    f"{int(limit[late][0])} and the ops did not stop it (stop_handling='ops': "
                    "speculate_verify stops at max_dec_len)"
                )
            code = np.where(stopped, np.where(total >= limit, 2, 1), 0)
            by_id = np.zeros(rows.size, bool)
        else:
            is_eos = np.logical_or.reduce(tok[:, None] == self._eos, axis=1)
            stop_hit = (n >= ib.min_tokens[sr]) & (
                (is_eos & ~ib.ignore_eos[sr])
                | np.logical_or.reduce(ib.stop_ids[sr] == tok[:, None], axis=1)
            )
            hit = stop_hit | (n >= ib.max_output[sr])
            if flat.size == slots.size:
                keep, by_id = c, stop_hit
                code = np.where(hit, np.where(stop_hit, 1, 2), 0)
            else:
                # each row's first hit (c if none): the minimum over its run
                first = np.minimum(np.minimum.reduceat(np.where(hit, j, _NO_HIT), off), c)
                ended = first < c
                keep = np.where(ended, first + 1, c)
                by_id = ended & stop_hit[off + np.minimum(first, c - 1)]
                code = np.where(ended, np.where(by_id, 1, 2), 0)
        slow = ib.has_stop_str[s] if self.tokenizer is not None else None
        any_slow = slow is not None and bool(slow.any())
        if any_slow:
            keep, code = keep.copy(), code.copy()
            for i in slow.nonzero()[0].tolist():  # requests with stop strings: per token
                keep[i], code[i] = self._stop_strings(
                    ib.requests[int(s[i])],
                    flat[st[i] : st[i] + c[i]].tolist(),
                    bool(out.stopped[rows[i]]),
                )
            fast = ~slow
            ib.num_output[s[fast]] += keep[fast]
        else:
            ib.num_output[s] += keep
        # output delivery (per request, in C-level loops): tokens, then finished requests,
        # then the deltas
        reqs = ib.requests[s].tolist()
        toks = list(map(flat.tolist().__getitem__, map(slice, st.tolist(), (st + keep).tolist())))
        if any_slow:
            reqs_f = ib.requests[s[fast]].tolist()
            toks_f = [toks[i] for i in fast.nonzero()[0].tolist()]
            computed = ib.num_computed[s[fast]].tolist()
        else:
            reqs_f, toks_f, computed = reqs, toks, ib.num_computed[s].tolist()
        list(map(list.extend, map(_OUTPUT_IDS, reqs_f), toks_f))
        list(map(setattr, reqs_f, itertools.repeat("num_computed"), computed))
        if self.runner.last_logprobs:
            self._deliver_logprobs(s, keep)
        done = code.nonzero()[0]
        if done.size:
            for i in done.tolist():  # finished requests
                req = reqs[i]
                self._release(req)
                self._finish(req, _REASONS[code[i]], now)
        if self.tokenizer is None:
            return list(
                map(
                    StreamDelta,
                    map(_REQUEST_ID, reqs),
                    itertools.repeat(-1),
                    toks,
                    itertools.repeat(""),
                    (code > 0).tolist(),
                    _REASON_ARRAY[code].tolist(),
                )
            )
        # detokenizing: requests with a tokenizer (per request: the text is the output), every
        # request when the text streams, else the finished ones
        todo = ~slow if any_slow else np.ones(len(reqs), bool)
        if not self.stream_text:
            todo &= code > 0
        for i in todo.nonzero()[0].tolist():
            self._update_text(reqs[i], drop_last=bool(by_id[i]))
        return [self._delta(q, t) for q, t in zip(reqs, toks)]

    def _stop_strings(self, req: Request, tokens: list[int], stopped: bool):
        """A request with stop strings: its step's tokens appended one by one with the host's
        checks after each (the text is searched); returns ``(tokens kept, reason code)``."""
        reason = None
        kept = 0
        for token in tokens:
            req.output_token_ids.append(token)
            kept += 1
            reason = self._check_host_stop(req) if self.ops_stop else self._check_stop(req, token)
            if reason is not None:
                break  # tokens a speculative step emitted past the stop are dropped
        if reason is None and self.ops_stop:
            reason = self._ops_stop_reason(req, stopped)
        req.num_computed = int(self.ib.num_computed[req.slot])
        self.ib.num_output[req.slot] = len(req.output_token_ids)
        return kept, _REASONS.index(reason)

    def _deliver_logprobs(self, s: np.ndarray, keep: np.ndarray) -> None:
        """``RequestOutput.logprobs`` of the requests that asked (the runner's ``last_logprobs``)."""
        kept = dict(zip(s.tolist(), keep.tolist()))
        for b, entries in self.runner.last_logprobs.items():
            req = self.ib.requests[b]
            if b in kept and req is not None and req.logprobs is not None:
                req.logprobs += [with_decoded_tokens(e, self.tokenizer) for e in entries[: kept[b]]]

    def _ops_stop_reason(self, req: Request, stopped: bool) -> str | None:
        """stop_handling "ops": the finish reason of a request after its step's tokens. The ops
        ended it (``stopped``): "length" when it has its limit of tokens, min(max_tokens,
        max_model_len - prompt length), the last one being the EOS id verify writes there (as
        FastDeploy's serving layer: "length" iff the token count is max_tokens), else "stop".
        RuntimeError when the ops let a request run past its limit (they must not)."""
        limit = min(
            req.sampling_params.max_tokens, self.runner.max_model_len - len(req.prompt_token_ids)
        )
        n = len(req.output_token_ids)
        if stopped:
            return "length" if n >= limit else "stop"
        if n >= limit:
            raise RuntimeError(
                f"request {req.request_id!r}: {n} tokens, the limit is {limit} and the ops did "
                "not stop it (stop_handling='ops': speculate_verify stops at max_dec_len)"
            )
        return None

    def _check_host_stop(self, req: Request) -> str | None:
        """stop_handling "ops": what the host still checks after each token, stop strings
        (the ops compare token ids only)."""
        p = req.sampling_params
        if self.tokenizer is not None:
            self._update_text(req)
            if p.stop_list and len(req.output_token_ids) >= p.min_tokens:
                cut = self._find_stop(req)
                if cut is not None:
                    req.text = req.text[:cut]
                    return "stop"
        return None

    def _check_stop(self, req: Request, token: int) -> str | None:
        p = req.sampling_params
        n = len(req.output_token_ids)
        if n >= p.min_tokens:
            if not p.ignore_eos and token in self.runner.eos_token_ids:
                return "stop"
            if token in p.stop_token_ids:
                return "stop"
        if self.tokenizer is not None:
            self._update_text(req)
            if p.stop_list and n >= p.min_tokens:
                cut = self._find_stop(req)
                if cut is not None:
                    req.text = req.text[:cut]
                    return "stop"
        if n >= p.max_tokens or req.num_tokens >= self.runner.max_model_len:
            return "length"
        return None

    def _update_text(self, req: Request, drop_last: bool = False) -> None:
        """``req.text`` = the decode of the output (a final EOS left out; ``drop_last``: the final
        token left out, a stop by EOS or stop token id), incrementally."""
        ids = req.output_token_ids
        n = len(ids)
        if drop_last or (
            ids and ids[-1] in self.runner.eos_token_ids and not req.sampling_params.ignore_eos
        ):
            n -= 1
        if req.detokenizer is None:
            req.detokenizer = IncrementalDetokenizer(
                self.tokenizer, req.sampling_params.skip_special_tokens
            )
        req.text = req.detokenizer.update(ids, n)

    def _find_stop(self, req: Request) -> int | None:
        """Where to cut ``req.text`` for the earliest stop string it contains (search from just
        before the already streamed text), or None."""
        p = req.sampling_params
        start = max(0, req.text_sent - max(len(s) for s in p.stop_list))
        best = None
        for s in p.stop_list:
            i = req.text.find(s, start)
            if i >= 0:
                cut = i + len(s) if p.include_stop_str_in_output else i
                best = cut if best is None else min(best, cut)
        return best

    def _finish(self, req: Request, reason: str, now: float | None = None) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.metrics.finished_time = time.perf_counter() if now is None else now

    def _delta(self, req: Request, new_ids: list[int]) -> StreamDelta:
        req.tokens_sent = len(req.output_token_ids)
        text_end = len(req.text)
        if not req.finished:
            # hold back what a stop string might still claim, and a trailing partial character
            hold = max((len(s) - 1 for s in req.sampling_params.stop_list), default=0)
            text_end = max(req.text_sent, text_end - hold)
            while text_end > req.text_sent and req.text[text_end - 1] == "\ufffd":
                text_end -= 1
        new_text = req.text[req.text_sent : text_end]
        req.text_sent = text_end
        return StreamDelta(req.request_id, -1, new_ids, new_text, req.finished, req.finish_reason)
