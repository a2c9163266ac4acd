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
from .runner import ModelRunner
from .sampler import _splitmix64
from .sampling_params import SEED_MODULUS, SamplingParams


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
        # speculative decoding: every decoding request runs every step and may write drafts'
        # K/V past its tokens (runner.lookahead positions)
        self.speculative = runner.num_speculative_tokens > 0
        self.spec_metrics = (
            SpeculativeMetrics(runner.num_speculative_tokens) if self.speculative else None
        )
        # speculative_config.stop_handling "ops": the ops end requests (the runner's
        # last_stopped); the host keeps stop strings only
        spec = runner.spec_config
        self.ops_stop = spec is not None and spec.stop_handling == "ops"

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
        self._finish(req, "aborted")

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def get_output(self, request_id: str) -> RequestOutput:
        return RequestOutput.from_request(self.requests[request_id])

    def pop_output(self, request_id: str) -> RequestOutput:
        """The output of a finished request, forgetting the request."""
        req = self.requests[request_id]
        if not req.finished:
            raise ValueError(f"request {request_id!r} is not finished")
        del self.requests[request_id]
        return RequestOutput.from_request(req)

    # -- scheduling ---------------------------------------------------------------------------------
    def _release(self, req: Request) -> None:
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

    # -- one step -----------------------------------------------------------------------------------
    def step(self) -> list[StreamDelta]:
        """Schedule, run one packed forward, sample, stop-check; returns this step's deltas."""
        tasks, decode_slots, plan = self._schedule()
        if not plan:
            if self.running or self.waiting:
                raise RuntimeError("the scheduler could not run any request (KV cache too small?)")
            return []
        now = time.perf_counter()
        for req, _ in plan.values():
            if req.metrics.first_scheduled_time is None:
                req.metrics.first_scheduled_time = now
            req.metrics.num_steps += 1
        self.runner.insert_tasks_v1(tasks)
        sampled = self.runner.execute_model(decode_slots)
        self.num_steps += 1
        now = time.perf_counter()
        deltas = []
        drafted = self.runner.last_drafted
        for slot, (req, end) in sorted(plan.items(), key=lambda kv: kv[1][0].arrival_index):
            tokens = sampled[slot]
            tokens = tokens if isinstance(tokens, list) else [tokens]
            logprobs = getattr(self.runner, "last_logprobs", {}).get(
                slot
            )  # SamplingParams.logprobs
            if req.prefilled:
                # a decode: the fed token and the accepted drafts are now in the cache
                req.num_computed += len(tokens)
                if self.speculative:
                    step = SpeculativeMetrics.of_step(
                        self.runner.num_speculative_tokens, drafted.get(slot, 0), len(tokens)
                    )
                    req.metrics.spec.add(step)
                    self.spec_metrics.add(step)
            else:
                req.num_computed = end
                if end < req.num_tokens:
                    continue  # a non-final prefill chunk: its sampled token is not used
                req.prefilled = True
                tokens = tokens[:1]
            if req.metrics.first_token_time is None:
                req.metrics.first_token_time = now
            reason = None
            for i, token in enumerate(tokens):
                req.output_token_ids.append(token)
                if req.logprobs is not None and logprobs is not None:
                    req.logprobs.append(with_decoded_tokens(logprobs[i], self.tokenizer))
                req.metrics.num_generated_tokens += 1
                reason = (
                    self._check_host_stop(req) if self.ops_stop else self._check_stop(req, token)
                )
                if reason is not None:
                    break  # tokens a speculative step emitted past the stop are dropped
            if reason is None and self.ops_stop:
                reason = self._ops_stop_reason(req, slot in self.runner.last_stopped)
            if reason is not None:
                self._release(req)
                self._finish(req, reason, now)
            deltas.append(self._delta(req))
        return deltas

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

    def _update_text(self, req: Request) -> None:
        """``req.text`` = the decode of the output (a final EOS left out), incrementally."""
        ids = req.output_token_ids
        n = len(ids)
        if ids and ids[-1] in self.runner.eos_token_ids and not req.sampling_params.ignore_eos:
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

    def _delta(self, req: Request) -> StreamDelta:
        new_ids = req.output_token_ids[req.tokens_sent :]
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
