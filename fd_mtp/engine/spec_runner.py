"""`SpeculativeModelRunner`: the target side of speculative decoding (spec/ops.md §4.1, §9.1).

One step, in FastDeploy's order:

    pre_process (speculative layout: a decoding request feeds draft_tokens[b, :this_time], i.e. its
    last accepted token + drafts) -> target forward -> rebuild_padding (one row per prefilling
    request, every fed token of a decoding one) -> logits -> penalties (speculate_get_token_penalty_
    multi_scores) -> sampling -> [top_p_candidates] -> speculate_verify -> speculate_update ->
    speculate_set_value_by_flags_and_idx -> proposer.run(target hidden states)

The proposer (made by `fd_mtp.proposer.make_proposer`: `MTPProposer` or `NgramProposer`, seen
through the `fd_mtp.batch.Proposer` protocol) then leaves the next drafts in ``draft_tokens`` and
their count in ``seq_lens_this_time`` for the next step, with ops on the device tensors.

Transfers: one host-to-device (`InputBatch.push`: insertion writes, changed per-slot integers,
sampling rows) before the forward, one device-to-host (`InputBatch.pull`: the per-slot integers
the ops wrote, ``accept_num`` as verify left it and ``accept_tokens``) after the proposer.

Randomness: ``speculate_verify`` gets its Philox key and counter explicitly, ``seed`` =
the runner's ``verify_seed`` and ``offset`` = the runner's step count (``num_steps``); no wrapper
counter is involved.

Verification and stopping (`fd_mtp.engine.spec_verify`): the strategies of
``SpeculativeConfig.verification`` and the two ``stop_handling`` modes.

Draft length (``SpeculativeConfig.draft_policy``, `fd_mtp.engine.draft_policy`): before the
proposer drafts, the runner's policy gives a `DraftPlan`: the MTP substeps of this step, a cap per
slot on the drafts verified at the next step, applied by truncating the target's
``seq_lens_this_time`` (1 + drafts, as ``draft_model_postprocess`` / the n-gram fill left it) to
``1 + cap`` on the device, and the slots to switch off (`MTPProposer.drop`: the op's
``batch_drop`` flag). "fixed" caps a request at ``SamplingParams.max_draft_tokens`` only;
"adaptive" chooses from measured acceptance and step costs (the policy's ``clock``,
``time.perf_counter`` by default; decode steps only: the proposer's time, and the rest of the
step, i.e. the whole `execute_model` call minus the proposer plus the engine's time since the
previous call when steps run back to back; on a GPU the step's one device-to-host transfer is
where the device work is waited for). With ``draft_sampling`` the proposer samples its drafts
(uniforms: a pure function of the request seed, the step and the substep, pushed with the step's
transfer) and verification gets their probabilities as ``draft_probs``.

``pre_ids`` has ``K + 2`` spare columns for the positions a last step may write past the limit.
Differences from plain decoding that remain in both modes (upstream semantics): the penalty op
counts repeats over the accepted history only, not over the earlier drafts of the same step.
"""

from __future__ import annotations

import numpy as np

from ..config import MAX_STOP_SEQS, SpeculativeConfig
from ..proposer import make_proposer
from .draft_policy import make_draft_policy
from .runner import ModelRunner, StepOutput, Task, TaskKind
from .sampler import SamplingRows, uniforms
from .sampling_params import SEED_MODULUS
from .spec_verify import verify_and_update

_NO_END_TOKEN = -1  # end_tokens of speculate_verify: matches no token (the engine stops requests)
_DRAFT_SEED_SALT = (
    0x5DEECE66D  # draft-sampling uniforms: the request seed plus this, mod SEED_MODULUS
)


class SpeculativeModelRunner(ModelRunner):
    """A `ModelRunner` whose steps verify drafts (see the module docstring).

    Args:
        model: the main ``Ernie4_5ForCausalLM``.
        speculative_config: a `SpeculativeConfig` (method "mtp", "eagle", "eagle3" or "ngram"),
            parsed once by the caller (`SpeculativeConfig.from_value`).
        scheduler_config, cache_config: as `ModelRunner`.
        mtp_model: the draft model: the ``Ernie4_5MTP`` (method "mtp"), the
            `fd_mtp.model.eagle.EagleHead` ("eagle", "eagle3"; EAGLE-3's target keeps the aux
            hidden states its proposer reads); None for "ngram".
        seed: the key of the verify op's Philox draws ("rejection", "topp", "topk").
        proposer_options: extra keyword arguments of the proposer (`make_proposer`: role,
            scheduler, tp_broadcast...).
        draft_policy: the `FixedDraftPolicy` / `AdaptiveDraftPolicy` (default: made from the
            config by `make_draft_policy`; tests pass one with an injected cost model).
        proposer_factory: builds the drafter (default `fd_mtp.proposer.make_proposer`), called as
            ``factory(speculative_config, input_batch, mtp_model=..., max_model_len=...,
            block_size=..., num_main_blocks=..., draft_end_ids=..., **proposer_options)``
            (``draft_end_ids``: the runner's end tokens, the EOS ids with ``stop_handling="ops"``,
            else a list that matches nothing; ``proposer_options`` may override it).
    """

    def __init__(
        self,
        model,
        speculative_config: SpeculativeConfig,
        *,
        scheduler_config,
        cache_config,
        mtp_model=None,
        seed: int = 0,
        proposer_options: dict | None = None,
        proposer_factory=None,
        draft_policy=None,
    ):
        import paddle

        if not isinstance(speculative_config, SpeculativeConfig):
            raise ValueError(
                "SpeculativeModelRunner: speculative_config must be a SpeculativeConfig "
                f"(SpeculativeConfig.from_value parses a dict), got {type(speculative_config).__name__}"
            )
        cfg = speculative_config
        self.spec_config = cfg
        self.num_speculative_tokens = cfg.num_speculative_tokens
        self.lookahead = cfg.lookahead
        #: "ops": the ops end requests (FastDeploy's configuration); "engine": the host does
        self.ops_stop = cfg.stop_handling == "ops"
        super().__init__(model, scheduler_config=scheduler_config, cache_config=cache_config)
        # end tokens of speculate_verify and draft_model_update: the model's EOS ids ("ops"), or
        # a list that matches nothing ("engine")
        ends = self.eos_token_ids if self.ops_stop else [_NO_END_TOKEN]
        self._end_tokens = paddle.to_tensor(ends, dtype="int64")
        #: slots whose request the ops ended in the last step ("ops"; a non-final prefill chunk
        #: is never listed: its next chunk's insertion restarts it, as upstream)
        self.last_stopped: set[int] = set()
        # "ops": slots whose drafting `_drop_stopped_drafts` switched off, and how many times
        self._draft_dropped = np.zeros(self.max_num_seqs, bool)
        self.num_draft_stop_drops = 0
        self.verify_seed = int(seed)
        self.num_steps = 0
        self._last_step_end = None  # perf_counter at the end of the previous execute_model
        factory = make_proposer if proposer_factory is None else proposer_factory
        options = {"draft_end_ids": self._end_tokens, **(proposer_options or {})}
        self.proposer = factory(
            cfg,
            self.input_batch,
            mtp_model=mtp_model,
            max_model_len=self.max_model_len,
            block_size=self.block_size,
            num_main_blocks=self.num_blocks,
            **options,
        )
        self.draft_policy = (
            make_draft_policy(cfg, self.max_num_seqs) if draft_policy is None else draft_policy
        )
        # a draft model (MTP block or EAGLE head): substeps, its own K/V, drop / prepare_steps
        self._mtp = cfg.uses_draft_model
        # draft model: its K/V live in the same blocks; its substeps rewind by up to
        # num_model_steps - 1 positions, so a block is final that many positions later
        self.prefix_cache_margin = cfg.num_model_steps if self._mtp else 1

    def _init_share_inputs(self, B: int) -> dict:
        import paddle

        si = super()._init_share_inputs(B)
        K = self.num_speculative_tokens
        si.update(
            {
                "input_ids_cpu": paddle.full([B, self.max_model_len], 1, "int64").cpu(),
                "step_draft_tokens": paddle.full([B, K + 1], 0, "int64"),
                "step_seq_lens_this_time": paddle.full([B, 1], 0, "int32"),
                "mask_rollback": paddle.full([B, 1], 0, "int32"),
                "cu_batch_token_offset": paddle.full([B + 1], 0, "int32"),
            }
        )
        if self.ops_stop:
            # a request's stop token ids as one-token stop sequences (FastDeploy's stop_seqs /
            # stop_seqs_len, FD_MAX_STOP_SEQS_NUM of them)
            si["stop_seqs"] = paddle.full([B, MAX_STOP_SEQS, 1], -1, "int64")
            si["stop_seqs_len"] = paddle.full([B, MAX_STOP_SEQS], 0, "int32")
        return si

    # -- insertion ----------------------------------------------------------------------------------
    def _max_dec_len(self, p, prompt_len: int) -> int:
        limit = min(p.max_tokens, self.max_model_len - prompt_len)
        if self.ops_stop:
            # the real limit, as FastDeploy's input processor clamps max_tokens to
            # max_model_len - prompt length: the ops end the request there
            return limit
        # past the engine's own limit by the drafts' lead (num_model_steps): neither verify nor
        # draft_model_update stops a request the engine keeps running
        return limit + self.lookahead + 1

    def _set_params(self, b: int, p, seed: int, prompt_len: int):
        super()._set_params(b, p, seed, prompt_len)
        if self.ops_stop:
            ids = list(p.stop_token_ids)
            if len(ids) > MAX_STOP_SEQS:
                raise ValueError(
                    f"stop_handling='ops': {len(ids)} stop_token_ids, at most {MAX_STOP_SEQS} "
                    "(FastDeploy's FD_MAX_STOP_SEQS_NUM)"
                )
            w = self.input_batch.writer(self.share_inputs)
            w["stop_seqs"][b] = -1
            w["stop_seqs_len"][b] = 0
            w["stop_seqs"][b, : len(ids), 0] = ids
            w["stop_seqs_len"][b, : len(ids)] = 1

    def insert_tasks_v1(self, tasks: list[Task]) -> None:
        """The target's insertion (`ModelRunner.insert_tasks_v1`), then the proposer's on the same tasks."""
        super().insert_tasks_v1(tasks)
        self.proposer.insert_tasks_v1(tasks)
        w = self.input_batch.writer(self.share_inputs)
        policy = self.draft_policy
        for t in tasks:
            if t.kind is TaskKind.PREFILL:
                w["actual_draft_token_num"][t.slot] = self.num_speculative_tokens
                w["mask_rollback"][t.slot] = 0
                if t.first_chunk:
                    policy.start(t.slot, None if t.params is None else t.params.max_draft_tokens)
                if policy.off[t.slot] and self._mtp:
                    self.proposer.drop([t.slot])  # every chunk's insertion clears the flag
                self._draft_dropped[t.slot] = False
            elif t.kind is TaskKind.PREEMPTED:
                policy.release(t.slot)
                self._draft_dropped[t.slot] = False

    def prefix_cacheable(self, slots: np.ndarray) -> np.ndarray:
        """MTP: a request whose drafting is off (the draft policy, or `_drop_stopped_drafts`)
        no longer writes the draft model's K/V, so its blocks from then on stay out of the
        prefix cache; n-gram drafting keeps no K/V of its own."""
        if not self._mtp:
            return np.ones(len(slots), bool)
        return ~(self.draft_policy.off[slots] | self._draft_dropped[slots])

    def _drop_stopped_drafts(self, ran: np.ndarray, draft_stop: np.ndarray) -> None:
        """stop_handling "ops": switch drafting off (`MTPProposer.drop`, until the request's next
        insertion) for a running request whose draft draft_model_update stopped (a drafted EOS
        id, or the draft one past max_dec_len) while the target goes on. In 2.4 the next
        ``draft_model_preprocess`` would take its stop-recovery branch, which rewinds the draft
        by the target's ``seq_lens_this_time`` instead of ``accept_num`` (spec §14.5): the
        draft's positions then lag by the rejected drafts, below zero for a short sequence
        (upstream reads outside the KV cache; fd_mtp's attention refuses). The request decodes
        on without drafts; the output is unchanged."""
        ib, off = self.input_batch, self.draft_policy.off
        new = ran[
            draft_stop[ran].astype(bool)
            & ~ib.stop[ran]
            & ~ib.chunk[ran]
            & ~off[ran]
            & ~self._draft_dropped[ran]
        ]
        if new.size:
            self.proposer.drop(new)
            self._draft_dropped[new] = True
            self.num_draft_stop_drops += int(new.size)

    # -- one step -----------------------------------------------------------------------------------
    def execute_model(self, decode_slots) -> StepOutput:
        """Run one speculative step.

        ``decode_slots`` must list every decoding slot (each feeds its last token and its drafts).
        A slot between two prefill chunks that got no chunk this step sits out (it is marked
        stopped for the step; its next chunk re-activates it).

        Returns:
            a `StepOutput`: the tokens each running slot emitted (accepted drafts + the bonus or
            correction token; one token for a prefill chunk), the drafts each had verified
            (``drafted``) and, with ``stop_handling="ops"``, whether the ops ended it (``stopped``).
        """
        clock = self.draft_policy.clock
        t0 = clock()
        ib = self.input_batch
        self.last_stopped = set()
        ran = self._running_slots(decode_slots)
        if ran.size == 0:
            return StepOutput.empty()
        prefilling = ib.enc[ran] > 0
        counts = np.where(prefilling, 1, ib.this_time[ran]).astype(np.int64)
        rows = self._spec_rows(ran, counts)
        plan = self._push_step(rows, ran, counts)
        dev = rows.device
        meta, hidden, logits = self._forward()
        self._prompt_logprobs(hidden, meta)
        raw = self._raw_logits(logits, ran)  # logprobs: the raw logits (None when none asked)
        self._penalties(logits, rows, meta)
        if self.spec_config.draft_sampling and (counts > 1).any():
            self._draft_probs = self._gather_draft_probs(dev["draft_prob_rows"])
        else:
            self._draft_probs = None
        accepted, accepted_rows = verify_and_update(self, logits, rows, meta, raw, counts)
        stats = self.proposer.stats
        before = (stats.forward, stats.run, stats.forwards)
        self._draft(hidden, ran, plan, dev)
        out = self._step_output(ran, counts, prefilling, accepted, accepted_rows)
        self._observe(ran, counts, prefilling, out.counts, t0, before)
        self.num_steps += 1
        return out

    def _running_slots(self, decode_slots) -> np.ndarray:
        """The slots that run this step (a token or more to feed). ValueError when a decoding slot
        was not scheduled or has nothing to feed; a slot between two prefill chunks that got no
        chunk this step is parked (stopped, no tokens) until its next chunk."""
        ib = self.input_batch
        decoding = (ib.enc == 0) & ~ib.stop & ~ib.chunk
        scheduled = np.zeros(self.max_num_seqs, bool)
        scheduled[np.asarray(decode_slots, np.int64).reshape(-1)] = True
        missing = np.flatnonzero(decoding & ~scheduled)
        if missing.size:
            raise ValueError(
                f"execute_model: decoding slots {missing.tolist()} were not scheduled; speculative "
                "decoding runs every decoding request every step"
            )
        parked = (ib.enc == 0) & ~ib.stop & ib.chunk
        ib.stop[parked] = True
        ib.this_time[parked] = 0
        if np.any(ib.this_time[decoding] < 1):
            raise ValueError(
                "execute_model: a decoding slot has no token to feed (seq_lens_this_time 0)"
            )
        return np.flatnonzero(ib.this_time > 0)

    def _push_step(self, rows, ran: np.ndarray, counts: np.ndarray):
        """The draft policy's plan for the slots that will decode next step (their drafts are made
        now), then the step's arrays (rows, caps, draft sampling, verify's top_p) in the step's
        one host-to-device transfer (``rows.device``). Returns the plan."""
        ib = self.input_batch
        step = rows.arrays()
        plan = self.draft_policy.plan((ib.this_time > 0) & ~ib.chunk)
        if self._mtp:
            self.proposer.prepare_steps(plan.num_steps)
            if plan.drop:
                self.proposer.drop([b for b, _ in plan.drop])
        step["draft_cap"] = plan.caps.astype(np.int32).reshape(-1, 1) + 1
        if self.spec_config.draft_sampling:
            step.update(self._draft_sampling_arrays(ran, counts))
        if self.spec_config.verification in ("topp", "topk"):
            # greedy requests: top_p 0 keeps only the argmax candidate (and makes it the bonus token)
            step["verify_top_p"] = (
                np.where(ib.greedy, 0.0, ib.top_p).astype(np.float32).reshape(-1, 1)
            )
        rows.device = ib.push(step)
        return plan

    def _draft(self, hidden, ran: np.ndarray, plan, dev) -> None:
        """The proposer's drafts for the next step (none when every running request is off), then
        the plan's caps: each slot's seq_lens_this_time (1 + drafts) at most 1 + its cap."""
        import paddle

        if self._mtp and self.draft_policy.off[ran].all():
            # every running request is off: no draft to make, nothing of the proposer's to keep
            # (an off slot's draft state is rebuilt at its next insertion); each keeps
            # seq_lens_this_time 1 and its last token in draft_tokens[b, 0] (speculate_update)
            pass
        elif self._mtp:
            self.proposer.run(
                hidden,
                num_steps=plan.num_steps,
                draft_greedy=dev.get("draft_greedy"),
                draft_uniform=dev.get("draft_uniform"),
            )
        else:
            self.proposer.run(hidden)
        target_len = self.share_inputs["seq_lens_this_time"]
        paddle.assign(
            paddle.minimum(target_len, dev["draft_cap"].reshape(target_len.shape)), target_len
        )

    def _step_output(self, ran, counts, prefilling, accepted, accepted_rows) -> StepOutput:
        """The step's one device-to-host transfer (the per-slot integers the ops wrote and the
        accepted tokens) and its `StepOutput`; ``last_logprobs`` / ``last_stopped`` on the way."""
        ib = self.input_batch
        si = self.share_inputs
        pulled = {"accept_num": accepted, "accept_tokens": si["accept_tokens"]}
        if self.ops_stop and self._mtp:
            pulled["draft_stop"] = self.proposer.model_inputs["stop_flags"]
        host = ib.pull(pulled, mirrored=True)
        num, acc = host["accept_num"].reshape(-1), host["accept_tokens"]
        emitted = num[ran].astype(np.int64)
        tokens = acc[ran][np.arange(acc.shape[1])[None, :] < emitted[:, None]]  # slot after slot
        self.last_logprobs = (
            {}
            if accepted_rows is None
            else self._logprobs(accepted_rows[: int(emitted.sum())], ran, tokens, emitted)
        )
        # drafts compared by verify: all of them, unless the op ended the request inside the run
        # (max_dec_len, "ops": an end token or a stop sequence): then only those before the end.
        # (The proposer never writes the target's stop_flags, so the pulled flags are the verify
        # and stop-sequence ops'.)
        stopped = ib.stop[ran]
        if self.ops_stop:
            ended = stopped & ~ib.chunk[ran]
            self.last_stopped = set(ran[ended].tolist())
            if self._mtp:
                self._drop_stopped_drafts(ran, host["draft_stop"].reshape(-1))
        else:
            ended = np.zeros(ran.size, bool)
        drafted = np.where(
            prefilling, 0, np.where(stopped, np.minimum(counts - 1, emitted - 1), counts - 1)
        ).astype(np.int64)
        return StepOutput(ran, emitted, tokens.astype(np.int64), drafted, ended)

    def _observe(self, ran, counts, prefilling, emitted, t0: float, before) -> None:
        """What the draft policy learns from the step: acceptance of the decoding slots, and the
        step's cost (this call, plus the engine's time since the previous call when it ran back
        to back: scheduling and stop checks, paid once per step, plain or speculative)."""
        policy = self.draft_policy
        decoded = ~prefilling
        policy.observe_batch(ran[decoded], counts[decoded] - 1, emitted[decoded])
        stats = self.proposer.stats
        t_end = policy.clock()
        in_call = t_end - t0
        gap = 0.0 if self._last_step_end is None else t0 - self._last_step_end
        self._last_step_end = t_end
        if not prefilling.any():
            proposer_seconds = stats.run - before[1]
            policy.observe_costs(
                tokens=int(counts.sum()),
                target_seconds=in_call + (gap if 0.0 <= gap < in_call else 0.0) - proposer_seconds,
                substeps=stats.forwards - before[2],
                forward_seconds=stats.forward - before[0],
                proposer_seconds=proposer_seconds,
            )

    def _draft_sampling_arrays(self, ran: np.ndarray, counts: np.ndarray) -> dict:
        """The step arrays of draft sampling: ``draft_greedy`` [B], ``draft_uniform`` [B, S]
        (uniforms of (request seed + salt, step * S + substep)) and ``draft_prob_rows`` (for each
        output row of this step, the row of the proposer's ``draft_probs`` viewed as [B * K, V]
        holding the distribution of the draft it verifies)."""
        ib = self.input_batch
        B, S, K = self.max_num_seqs, self.spec_config.num_model_steps, self.num_speculative_tokens
        seeds = (ib.seed.astype(np.uint64) + np.uint64(_DRAFT_SEED_SALT)) % np.uint64(SEED_MODULUS)
        counter = self.num_steps * S + np.arange(S)
        u = uniforms(np.repeat(seeds.astype(np.int64), S), np.tile(counter, B)).reshape(B, S)
        row_b = np.repeat(ran, counts)
        row_j = np.arange(row_b.size) - np.repeat(np.cumsum(counts) - counts, counts)
        return {
            "draft_greedy": ib.greedy.copy(),
            "draft_uniform": u.astype(np.float32),
            "draft_prob_rows": (row_b * K + np.minimum(row_j, K - 1)).astype(np.int64),
        }

    def _gather_draft_probs(self, rows):
        """``[T, V]`` draft probabilities of this step's output rows (``speculate_verify``'s
        ``draft_probs``: row ``start + i`` = the distribution draft ``i + 1`` was drawn from)."""
        buf = self.proposer.model_inputs["draft_probs"]
        B, K, V = buf.shape
        import paddle

        return paddle.gather(buf.reshape([B * K, V]), rows)

    def _spec_rows(self, ran: np.ndarray, counts: np.ndarray) -> SamplingRows:
        """Sampling parameters of every output row: request b's row j samples its token number
        ``step_idx[b] + j`` (0-based), with the uniform plain decoding uses for that token."""
        ib = self.input_batch
        row_b = np.repeat(ran, counts)
        row_j = np.arange(row_b.size) - np.repeat(np.cumsum(counts) - counts, counts)
        index = ib.step_idx[row_b] + row_j
        banned_rows, banned_ids = self._banned(row_b, index)
        greedy = ib.greedy[row_b].copy()
        return SamplingRows(
            greedy=greedy,
            top_k=ib.top_k[row_b].copy(),
            top_p=ib.top_p[row_b].copy(),
            uniform=np.zeros(row_b.size) if greedy.all() else uniforms(ib.seed[row_b], index),
            banned_rows=banned_rows,
            banned_ids=banned_ids,
        )
