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

import numpy as np

from ..batch import Task, TaskKind
from ..config import MAX_STOP_SEQS, SchedulerConfig
from ..model.tokenizer import encode_prompt
from .block_manager import BlockManager, PrefixCacheStats, block_keys, blocks_for
from .outputs import EngineOutputs
from .request import (
    Request,
    RequestOutput,
    RequestStatus,
    SpeculativeMetrics,
    StreamDelta,
)
from .runner import ModelRunner
from .sampler import _splitmix64
from .sampling_params import SEED_MODULUS, SamplingParams
from .step_stats import StepStats, fold_drafts


class LLMEngine(EngineOutputs):
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
        self.block_manager = BlockManager(
            runner.num_blocks,
            runner.block_size,
            enable_caching=runner.cache_config.enable_prefix_caching,
        )
        #: prefix cache (vLLM's counters): tokens of admitted requests looked up, and found
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
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
        """The token ids of a text prompt (`fd_mtp.model.tokenizer.encode_prompt`); ValueError
        without a tokenizer or for text it cannot encode."""
        return encode_prompt(self.tokenizer, text)

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
        """Finish a request now (``finish_reason = "abort"``), freeing its slot and blocks."""
        req = self.requests[request_id]
        if req.finished:
            return
        if req.status is RequestStatus.RUNNING:
            self._release(req)
        else:
            self.waiting.remove(req)
        if self.tokenizer is not None and not self.stream_text and req.output_token_ids:
            self._update_text(req)
        self._finish(req, "abort")

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def is_alive(self) -> bool:
        """Whether the engine can serve: an in-process engine always can (the multi-process
        fronts, `fd_mtp.distributed`'s TP and PD clients, check their processes)."""
        return True

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
        ib.cached_blocks[b] = req.num_cached_blocks
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
            fold_drafts(m.spec, ib.spec_drafted[b], ib.spec_accepted[b], int(ib.spec_emitted[b]))
            ib.spec_emitted[b] = 0
            ib.spec_drafted[b] = ib.spec_accepted[b] = 0

    def _release(self, req: Request) -> None:
        self._sync_metrics(req)
        b = req.slot
        if (
            self.block_manager.enable_caching
            and req.cacheable
            and self.runner.prefix_cacheable(np.array([b]))[0]
        ):
            self._cache_blocks(req, min(int(self.ib.num_computed[b]), req.num_tokens))
        self.ib.running[b] = False
        self.ib.requests[b] = None
        # last block first: the tail of a chain is evicted before the head that more requests share
        self.block_manager.free(req.block_ids[::-1])
        req.block_ids = []
        req.num_cached_blocks = 0
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
        bm, bs = self.block_manager, self.runner.block_size
        pending: set[bytes] = set()  # blocks the requests admitted in this step will compute
        while self.waiting and self.free_slots and budget > 0 and not preempted:
            req = self.waiting[0]
            hits = self._cached_prefix(req)
            if len(hits) < len(req.block_keys) and req.block_keys[len(hits)] in pending:
                # its next block is being computed in this step by a request just admitted
                # (n > 1, a burst behind one system prompt): wait one step and share it
                break
            start = len(hits) * bs
            n = min(req.num_tokens - start, budget)
            bm.acquire(hits)
            req.block_ids = list(hits)
            if not bm.grow(req.block_ids, start + n + extra):
                bm.free(hits[::-1])
                req.block_ids = []
                break
            self.waiting.pop(0)
            req.num_computed = req.num_cached_tokens = start
            req.num_cached_blocks = len(hits)
            if bm.enable_caching and req.cacheable:
                self.prefix_cache_queries += req.num_tokens
                self.prefix_cache_hits += start
                if req.metrics.first_scheduled_time is None:
                    req.metrics.num_cached_tokens = start
            req.slot = self.free_slots.pop()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            budget -= n
            plan[req.slot] = (req, start + n)
            tasks.append(self._prefill_task(req, start + n))
            if bm.enable_caching and req.cacheable:
                pending.update(req.block_keys[len(hits) : (start + n) // bs])
        return tasks, decode_slots, plan

    # -- prefix cache -------------------------------------------------------------------------------
    def _cached_prefix(self, req: Request) -> list[int]:
        """The cached blocks a request about to be admitted can start from: the longest run of
        its leading full blocks in the cache, short of its last token (a step must feed at
        least one token to sample from)."""
        if (
            not self.block_manager.enable_caching
            or not req.cacheable
            or req.sampling_params.prompt_logprobs is not None  # every prompt row is needed
        ):
            return []
        upto = (req.num_tokens - 1) // self.runner.block_size
        block_keys(req.all_token_ids, self.runner.block_size, req.block_keys, upto)
        return self.block_manager.lookup(req.block_keys[:upto])

    def _cache_blocks(self, req: Request, valid: int) -> None:
        """Register the request's full blocks whose K/V are final: those ending at least
        ``runner.prefix_cache_margin`` positions before ``valid`` (its tokens in the cache that
        are still its tokens: a stop may have cut the output after they were computed)."""
        bs = self.runner.block_size
        upto = min((valid - self.runner.prefix_cache_margin) // bs, len(req.block_ids))
        if upto <= req.num_cached_blocks:
            return
        block_keys(req.all_token_ids, bs, req.block_keys, upto)
        for i in range(req.num_cached_blocks, upto):
            self.block_manager.register(req.block_ids[i], req.block_keys[i])
        req.num_cached_blocks = upto
        if req.slot >= 0:
            self.ib.cached_blocks[req.slot] = upto

    def _cache_step(self, slots: np.ndarray) -> None:
        """After a step: register the blocks its running requests completed (per event: a
        request crosses a block boundary once every ``block_size`` tokens)."""
        ib, margin, bs = self.ib, self.runner.prefix_cache_margin, self.runner.block_size
        slots = slots[ib.running[slots]]
        full = (ib.num_computed[slots] - margin) // bs
        todo = slots[full > ib.cached_blocks[slots]]
        if not todo.size:
            return
        for b in todo[self.runner.prefix_cacheable(todo)].tolist():
            req = ib.requests[b]
            if req.cacheable:
                self._cache_blocks(req, int(ib.num_computed[b]))

    @property
    def prefix_cache_stats(self) -> PrefixCacheStats:
        """The prefix cache's counters (`PrefixCacheStats`)."""
        bm = self.block_manager
        return PrefixCacheStats(
            bm.enable_caching,
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            bm.num_cached,
            bm.num_evictions,
        )

    def reset_prefix_cache(self) -> int:
        """Forget the cached blocks no request holds (vLLM's ``reset_prefix_cache``); returns
        how many were dropped."""
        return self.block_manager.reset_cache()

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
            num_cached=req.num_cached_tokens,
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
        if self.runner.last_prompt_logprobs:
            self._deliver_prompt_logprobs()
        deltas = self._finish_step(out, decode_only=fast is not None)
        if self.block_manager.enable_caching:
            self._cache_step(slots)
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
            fold_drafts(spec, self._pending_drafted, self._pending_accepted, self._pending_emitted)
            self._pending_drafted[...] = self._pending_accepted[...] = 0
            self._pending_emitted = 0
        return spec

    @spec_metrics.setter
    def spec_metrics(self, value: SpeculativeMetrics | None) -> None:
        self._spec_metrics = value
        self._pending_drafted[...] = self._pending_accepted[...] = 0
        self._pending_emitted = 0
