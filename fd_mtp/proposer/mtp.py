"""`MTPProposer`: the ERNIE MTP head drafting tokens for the target model (spec/ops.md §3, §4, §6, §10).

Its code is `DraftModelProposer`, the base it shares with `fd_mtp.proposer.eagle.EagleProposer`
(a separate EAGLE / EAGLE-3 head in the MTP block's place): everything below holds for both, with
"the MTP block" read as "the draft model"; a subclass names its methods and the target hidden
states its model reads at the first substep (`DraftModelProposer._target_hidden_states`).

The proposer owns a persistent ``model_inputs`` dict built from the target runner's
``share_inputs`` exactly as spec §3 lists (clones, aliases and new buffers), the MTP block (which
uses the main model's ``embed_tokens``, final ``norm`` and ``lm_head`` Layer objects) and its own
one-layer paged KV cache (``int(num_main_blocks * num_gpu_block_expand_ratio)`` blocks, the same
block size and block-table format as the target). Once per engine step, after the target has
verified and updated (spec §4.1 step 7), `run` does:

    _prepare_inputs: draft_model_preprocess -> eagle_get_hidden_states (target hidden rows ->
                     the draft's previous_hidden_states)
    _propose:        for substep in range(num_model_steps), while some request drafts:
                         pre_process -> MTP forward -> rebuild_padding -> logits -> penalties ->
                         argmax (greedy drafts) -> [tp broadcast] -> draft_model_update
                         [-> mtp_save_first_token on a prefill node]
                         -> eagle_get_self_hidden_states (not after the last substep)
    _update_status:  draft_model_postprocess (target seq_lens_this_time = 1 + drafts);
                     v0 scheduler: mtp_step_paddle (the proposer's own decode-block manager)
    hybrid mode:     hybrid_mtp_ngram fills the remaining K - num_model_steps draft slots

Insertion follows spec §4.2: `insert_tasks_v1` (v1 scheduler; called by the runner right after the
target's own insertion) and `insert_prefill_inputs` (v0 scheduler), with chunked prefill through
`update_task_chunk_prefill`. Every host write into ``model_inputs`` goes through the runner's
`fd_mtp.batch.InputBatch` (staged: the device tensors receive it with the next step's one
host-to-device transfer). `run` itself makes no transfer: every op works on the device tensors,
including the hybrid n-gram extension (``hybrid_mtp_ngram`` runs where its tensors are). Roles:
"mixed" (default), "prefill" (PD prefill node: drafts for the
first token only and sends [first token, first draft] with ``mtp_save_first_token``) and "decode"
(PD decode node: requests arrive prefilled; insertion sets encoder 0, recompute_token_num 0,
mask_rollback 1).

Deliberate differences from FastDeploy's ``mtp.py`` (each documented where it happens):
``target_hidden_states`` is rebound to the op result rather than ``copy_``-ed into a preallocated
bfloat16 buffer; the tensor-parallel broadcast of the drafted tokens is a hook (`tp_broadcast`)
instead of a collective call; on a prefill node the step_idx of stopped requests is zeroed after
``eagle_get_self_hidden_states``, not before it (see `_propose`); environment variables
(``PREFILL_NODE_ONE_STEP_STOP``, thresholds) are explicit constructor arguments; multimodal
attention-mask offsets, draft logprobs and CUDA
graphs are not implemented; between substeps, a request that prefilled in the substep is shown
to ``eagle_get_self_hidden_states`` with ``step_idx = 1`` (FastDeploy passes a re-prefilled request's
real step_idx, which the op mistakes for a decode and reads the wrong rows, spec §6.4 edge).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from .. import ops
from ..batch import InputBatch, ProposerStats, pack_step
from ..config import SpeculativeConfig
from .draft_sampling import sample_draft_rows
from .mtp_inputs import MTPInsertion, build_model_inputs

ROLES = ("mixed", "prefill", "decode")
SCHEDULERS = ("v1", "v0")
KV_CACHE_RATIO = {"v1": 1.0, "v0": 0.75}  # CacheConfig.kv_cache_ratio per scheduler (spec §11, §12)


def _check_arguments(who, methods, cfg, draft_model, input_batch, role, scheduler) -> None:
    if not isinstance(cfg, SpeculativeConfig) or cfg.method not in methods:
        allowed = " or ".join(repr(m) for m in methods)
        raise ValueError(
            f"{who}: speculative_config must be a SpeculativeConfig with method {allowed}, got "
            f"{getattr(cfg, 'method', cfg)!r}"
        )
    if not isinstance(input_batch, InputBatch):
        raise ValueError(
            f"{who}: input_batch must be the runner's InputBatch, got {type(input_batch).__name__}"
        )
    if role not in ROLES:
        raise ValueError(f"{who}: role must be one of {list(ROLES)}, got {role!r}")
    if scheduler not in SCHEDULERS:
        raise ValueError(f"{who}: scheduler must be one of {list(SCHEDULERS)}, got {scheduler!r}")
    if draft_model is None:
        raise ValueError(
            f"{who}: the draft model is None"
            + (
                " (the checkpoint has no MTP weights: num_nextn_predict_layers = 0)"
                if "mtp" in methods
                else " (speculative_config.model: the EAGLE head's directory)"
            )
        )


class DraftModelProposer(MTPInsertion):
    """Drafts tokens with a draft model (the ERNIE MTP block: `MTPProposer`; an EAGLE head:
    `fd_mtp.proposer.eagle.EagleProposer`) for the target runner whose ``share_inputs`` it reads.
    Everything above (ops, buffers, insertion, KV cache, substeps, draft sampling, hybrid n-gram
    fill) is shared; a subclass says which methods it serves (``METHODS``) and which target
    hidden states the draft model reads (`_target_hidden_states`).

    Args:
        speculative_config: a `SpeculativeConfig` whose method is in ``METHODS``.
        mtp_model: the draft model: ``forward(ids, previous_hidden_states, meta)``,
            ``compute_logits``, ``config`` (its layer's `ErnieConfig`, ``num_hidden_layers`` =
            its KV-cache layer index); an ``Ernie4_5MTP`` sharing the main model's embedding,
            norm and lm_head, or an `fd_mtp.model.eagle.EagleHead`.
        input_batch: the runner's `InputBatch`: its ``tensors`` are the target's ``share_inputs``
            (spec §2 keys, ``[max_num_seqs, ...]``, ``draft_tokens`` ``[B, K + 1]``); the
            proposer's own ``model_inputs`` are written through it.
        max_model_len: L, the width of ``input_ids`` the packing ops use.
        block_size: KV-cache block size (the target's).
        num_main_blocks: blocks of the target's cache; the MTP cache gets
            ``int(num_main_blocks * num_gpu_block_expand_ratio)``.
        role: "mixed", "prefill" or "decode" (FastDeploy's ``splitwise_role``).
        scheduler: "v1" (default; the engine owns every block, block tables are the target's) or
            "v0" (the proposer's decode blocks come from its own free list via ``mtp_step_paddle``).
        tp_broadcast: called with the drafted-token tensor of every substep before it is used
            (tensor parallelism: broadcast from the group's first rank); None for one rank.
        prefill_one_step_stop: a prefill node's requests stop after their first token
            (FastDeploy's PREFILL_NODE_ONE_STEP_STOP); default: ``role == "prefill"``.
        rank_id, msg_queue_id: where a prefill node sends its first tokens (mtp_save_first_token).
        ngram_threshold: ``hybrid_mtp_ngram``'s token budget (SPEC_TOKENUM_THRESHOLD; None = env/1024).
        draft_end_ids: the ``end_ids`` of ``draft_model_update`` (a drafted end id stops the draft);
            default the target's ``eos_token_id`` as FastDeploy. With ``stop_handling="engine"``
            (the default) fd_mtp's runner passes ``[-1]`` (matches nothing): its engine stops
            requests on the host, and a draft stop would send the next step through 2.4's
            stop-recovery branch, which rewinds by the target's seq_lens_this_time instead of
            accept_num (spec §14.5) and shifts the draft's positions. With ``stop_handling="ops"``
            it passes the real end ids and switches drafting off for a request whose draft
            stopped while the target goes on (see `fd_mtp.engine.spec_runner`).
    """

    #: the SpeculativeConfig methods this proposer serves
    METHODS: tuple = ("mtp",)

    def __init__(
        self,
        speculative_config: SpeculativeConfig,
        mtp_model,
        input_batch: InputBatch,
        *,
        max_model_len: int,
        block_size: int,
        num_main_blocks: int,
        role: str = "mixed",
        scheduler: str = "v1",
        tp_broadcast: Callable | None = None,
        prefill_one_step_stop: bool | None = None,
        rank_id: int = 0,
        msg_queue_id: int | None = None,
        ngram_threshold: int | None = None,
        draft_end_ids=None,
    ):
        import paddle

        cfg = speculative_config
        _check_arguments(
            type(self).__name__, self.METHODS, cfg, mtp_model, input_batch, role, scheduler
        )
        self._paddle = paddle
        self.config = cfg
        self.model = mtp_model
        self.model_config = mtp_model.config
        self.batch = input_batch
        self.target = input_batch.tensors
        self.K = cfg.num_speculative_tokens
        self.num_model_steps = cfg.num_model_steps
        self.max_model_len = int(max_model_len)
        self.block_size = int(block_size)
        self.role = role
        self.scheduler = scheduler
        self.tp_broadcast = tp_broadcast
        self.prefill_one_step_stop = (
            role == "prefill" if prefill_one_step_stop is None else bool(prefill_one_step_stop)
        )
        self.rank_id = int(rank_id)
        self.msg_queue_id = msg_queue_id
        self.ngram_threshold = ngram_threshold
        self.hybrid_mode = cfg.hybrid_mode
        self.draft_end_ids = self.target["eos_token_id"] if draft_end_ids is None else draft_end_ids
        self.stats = ProposerStats()
        self.draft_sampling = cfg.draft_sampling
        self._steps = self.num_model_steps  # substeps of the current `run`
        self._inserted: set[int] = set()  # slots (re)started since the last `run`
        self._draft_rng = None  # (greedy [B] bool, uniform [B, num_model_steps]) of the run
        draft = self.target["draft_tokens"]
        if draft.shape[1] != self.K + 1:
            raise ValueError(
                f"{type(self).__name__}: target draft_tokens has {draft.shape[1]} columns, "
                f"num_speculative_tokens + 1 = {self.K + 1}"
            )
        self.max_num_seqs = int(draft.shape[0])
        self._allocate_cache(num_main_blocks)
        self.model_inputs = build_model_inputs(self)
        input_batch.register_host(self.model_inputs["not_need_stop"])
        self._w = input_batch.writer(self.model_inputs)
        # v0 chunked prefill: slot -> (request token ids, chunk sizes, index of the next chunk)
        self._chunks: dict[int, tuple[list[int], list[int], int]] = {}

    def _allocate_cache(self, num_main_blocks) -> None:
        """The MTP block's own one-layer paged KV cache: int(num_main_blocks *
        num_gpu_block_expand_ratio) blocks."""
        from ..model.attention import allocate_kv_caches

        ratio = self.config.num_gpu_block_expand_ratio
        self.num_main_blocks = int(num_main_blocks)
        self.num_gpu_blocks = int(num_main_blocks * ratio)
        if self.scheduler == "v1" and self.num_gpu_blocks < num_main_blocks:
            raise ValueError(
                f"{type(self).__name__}: num_gpu_block_expand_ratio={ratio} gives the MTP cache "
                f"{self.num_gpu_blocks} blocks, fewer than the target's {num_main_blocks}; with "
                "the v1 scheduler the proposer uses the target's block ids, so it must be >= 1"
            )
        self.kv_cache_ratio = KV_CACHE_RATIO[self.scheduler]
        layer = self.model_config.num_hidden_layers
        mtp_cache = allocate_kv_caches(self.model_config, 1, self.num_gpu_blocks, self.block_size)
        self.caches = [None] * layer + mtp_cache  # the MTP block is layer `num_hidden_layers`

    # -- one step (spec §4.1 step 7) ----------------------------------------------------------------
    def prepare_steps(self, num_steps: int) -> None:
        """Announce, before the step's push, that the next `run` takes ``num_steps`` substeps:
        the slots inserted since the last run get ``recompute_token_num = num_steps - 1`` (the
        positions their first run's later substeps fill with drafts, which the next
        ``draft_model_preprocess`` rewinds; insertion assumed ``num_model_steps - 1``)."""
        steps = int(num_steps)
        if not 1 <= steps <= self.num_model_steps:
            raise ValueError(
                f"{type(self).__name__}.prepare_steps: num_steps must be in [1, {self.num_model_steps}], "
                f"got {num_steps!r}"
            )
        if self._inserted:
            self._w["recompute_token_num"][np.fromiter(self._inserted, np.int64)] = steps - 1
            self._inserted.clear()

    def drop(self, slots) -> None:
        """Stop drafting for ``slots`` until their next insertion: their ``batch_drop`` flag (the
        op's parameter; mtp.py's call site passes the Python ``is_block_step`` tensor there, spec
        §6.1 quirk) is set, so ``draft_model_preprocess`` stops their draft and
        ``draft_model_postprocess`` gives the target ``seq_lens_this_time = 1``: plain decoding
        through the ops' normal paths. Staged: takes effect with the next push."""
        slots = np.asarray(slots, np.int64).reshape(-1)
        if slots.size:
            self._w["is_block_step"][slots] = True

    def run(
        self,
        full_hidden_states,
        *,
        num_steps: int | None = None,
        draft_greedy=None,
        draft_uniform=None,
    ) -> None:
        """Draft the next tokens from the target's packed hidden states ``[sum(q), H]`` of this step
        (already final-normed). Writes the target's ``draft_tokens`` (row = [last accepted, drafts,
        -1 ...]) and ``seq_lens_this_time`` (1 + drafts for decoding requests).

        Args:
            num_steps: MTP substeps of this call, 1..num_model_steps (default num_model_steps):
                the ``num_model_step`` of ``draft_model_preprocess`` (which rewinds the next
                call by ``num_steps - 1`` positions) and the number of substeps. A value other
                than num_model_steps needs `prepare_steps` with it before the step's push.
            draft_greedy, draft_uniform: with ``draft_sampling``, device tensors ``[B]`` bool
                (greedy requests) and ``[B, >= num_steps]`` float32 in [0, 1) (the uniform of
                each slot's draft at each substep); required then.
        """
        steps = self.num_model_steps if num_steps is None else int(num_steps)
        if not 1 <= steps <= self.num_model_steps:
            raise ValueError(
                f"{type(self).__name__}.run: num_steps must be in [1, {self.num_model_steps}], got {num_steps!r}"
            )
        if self.draft_sampling and (draft_greedy is None or draft_uniform is None):
            raise ValueError(
                f"{type(self).__name__}.run: draft_sampling needs draft_greedy and draft_uniform tensors"
            )
        self._steps = steps
        self._draft_rng = (draft_greedy, draft_uniform) if self.draft_sampling else None
        t0 = time.perf_counter()
        self._prepare_inputs(full_hidden_states)
        self._propose()
        self._update_status()
        if self.hybrid_mode:
            self._extend_draft_token_with_ngram_match()
        self.stats.calls += 1
        self.stats.run += time.perf_counter() - t0

    def _prepare_inputs(self, full_hidden_states) -> None:
        mi, t = self.model_inputs, self.target
        # FastDeploy's call site passes batch_drop at the is_block_step position and is_block_step at
        # the batch_drop position (spec §6.1 "call-site quirk"); kept so the pipeline is the same.
        ops.draft_model_preprocess(
            mi["draft_tokens"],
            mi["input_ids"],
            mi["stop_flags"],
            mi["seq_lens_this_time"],
            mi["seq_lens_encoder"],
            mi["seq_lens_decoder"],
            mi["step_idx"],
            mi["not_need_stop"],
            mi["batch_drop"],
            mi["is_block_step"],
            mi["pre_ids"],
            mi["mask_rollback"],
            mi["recompute_token_num"],
            t["accept_tokens"],
            t["accept_num"],
            t["seq_lens_this_time"],
            t["seq_lens_encoder"],
            t["seq_lens_decoder"],
            t["step_idx"],
            t["stop_flags"],
            t["is_block_step"],
            t["draft_tokens"],
            self._steps,
            True,
            self.role == "prefill",
            self.scheduler == "v1",
        )
        mi["target_hidden_states"] = ops.eagle_get_hidden_states(
            self._target_hidden_states(full_hidden_states),
            mi["seq_lens_this_time"],
            mi["seq_lens_encoder"],
            mi["seq_lens_decoder"],
            mi["stop_flags"],
            t["accept_num"],
            t["seq_lens_this_time"],
            t["seq_lens_encoder"],
            self._steps,
        )

    def _target_hidden_states(self, full_hidden_states):
        """The target rows ``[sum(q), W]`` the draft model reads at its first substep: the
        target's final-normed hidden states (MTP, EAGLE-1)."""
        return full_hidden_states

    def _propose(self) -> None:
        mi = self.model_inputs
        for substep in range(self._steps):
            if not bool(mi["not_need_stop"].numpy()[0]):  # a host tensor: no transfer
                continue  # FastDeploy calls empty_input_forward here (EP lock-step); nothing to run
            mi["substep"] = substep
            rows, next_tokens = self._forward(substep)
            prefilled = mi["seq_lens_encoder"].reshape([-1, 1]) > 0  # before the update zeroes it
            if self.tp_broadcast is not None:
                self.tp_broadcast(next_tokens)
            ops.draft_model_update(
                next_tokens,
                mi["draft_tokens"],
                mi["pre_ids"],
                mi["seq_lens_this_time"],
                mi["seq_lens_encoder"],
                mi["seq_lens_decoder"],
                mi["step_idx"],
                mi["output_cum_offsets"],
                mi["stop_flags"],
                mi["not_need_stop"],
                mi["max_dec_len"],
                self.draft_end_ids,
                mi["base_model_draft_tokens"],
                self.max_model_len,
                substep,
                prefill_one_step_stop=self.prefill_one_step_stop,
            )
            self._after_update(substep, rows, prefilled)

    def _forward(self, substep: int):
        """One MTP forward over the packed draft step -> (its output rows, the drafted tokens)."""
        paddle = self._paddle
        mi = self.model_inputs
        meta = pack_step(mi, self.caches, self.block_size)
        ids, cu_q, this_time = (
            meta.ids_remove_padding,
            meta.cu_seqlens_q,
            meta.seq_lens_this_time,
        )
        enc, dec = meta.seq_lens_encoder, meta.seq_lens_decoder
        out_cum, out_pad = mi["output_cum_offsets"], mi["output_padding_offset"]
        if self.last_seq_lens_this_time is not None:
            paddle.assign(mi["seq_lens_this_time"], self.last_seq_lens_this_time)
        f0 = time.perf_counter()
        with paddle.no_grad():
            hidden = self.model(ids, mi["target_hidden_states"], meta)
            rows = ops.rebuild_padding(
                hidden, cu_q, this_time, dec, enc, out_pad, None, self.max_model_len, False
            )
            logits = self.model.compute_logits(rows)
        self.stats.forward += time.perf_counter() - f0
        self.stats.forwards += 1
        return rows, self._sample(logits, this_time, out_pad, out_cum, substep)

    def _after_update(self, substep: int, rows, prefilled) -> None:
        """After draft_model_update: a prefill node sends the first tokens; the next substep's
        hidden states (eagle_get_self_hidden_states), not after the last substep."""
        paddle = self._paddle
        mi = self.model_inputs
        sent_first = self.role == "prefill" and self.rank_id == 0
        if sent_first:
            ops.mtp_save_first_token(
                mi["base_model_draft_tokens"],
                mi["not_need_stop"],
                mi["seq_lens_decoder"],
                mi["prompt_lens"],
                mi["step_idx"],
                self.rank_id,
                False,
                self.scheduler == "v1",
                msg_queue_id=self.msg_queue_id,
            )
        if substep < self._steps - 1:
            # eagle_get_self_hidden_states recognises "came from a prefill" by step_idx == 1 (one
            # row); a re-prefilled (preempted) request has step_idx = its generated tokens + 1 and
            # would be taken for a decode (spec §6.4 edge). Requests that prefilled in this substep
            # are shown to the op with step_idx 1.
            step = mi["step_idx"]
            step = paddle.where(prefilled.reshape(step.shape), paddle.ones_like(step), step)
            mi["target_hidden_states"] = ops.eagle_get_self_hidden_states(
                rows, self.last_seq_lens_this_time, mi["seq_lens_this_time"], step
            )
        if sent_first:
            # Stopped requests' step_idx <- 0, so the first token is not sent twice. Done after
            # eagle_get_self_hidden_states (FastDeploy zeroes before it): that op walks a request that
            # stopped in this substep by its step_idx (1 after a prefill: its one output row); with
            # step_idx 0 it would skip last_seq_lens_this_time rows (the whole chunk), misaligning the
            # rows of every later request (our op raises; upstream read the wrong rows).
            step = mi["step_idx"]
            paddle.assign(
                paddle.where(mi["stop_flags"].reshape(step.shape), paddle.zeros_like(step), step),
                step,
            )

    def _sample(self, logits, this_time, out_pad, out_cum, substep: int = 0):
        """``MTPSampler`` (spec §9.2): the penalty op with the proposer's history, then argmax; with
        ``draft_sampling``: a draw from each row's distribution (`sample_draft_rows`), whose
        ``q`` for each slot's last row is kept in ``model_inputs["draft_probs"][:, substep]``."""
        paddle = self._paddle
        mi = self.model_inputs
        if logits.shape[0] == 0:
            return paddle.zeros([0], dtype="int64")
        ops.speculate_get_token_penalty_multi_scores(
            mi["pre_ids"],
            logits,
            mi["penalty_score"],
            mi["frequency_score"],
            mi["presence_score"],
            mi["temperature"],
            mi["bad_tokens"],
            mi["step_idx"],
            mi["min_dec_len"],
            mi["eos_token_id"],
            this_time,
            out_pad,
            out_cum,
            self.max_model_len,
        )
        if self._draft_rng is None:
            return paddle.argmax(logits, axis=-1).astype("int64")
        return self._sample_drafts(logits, out_pad, substep)

    def _sample_drafts(self, logits, out_pad, substep: int):
        """Draft sampling for the rows ``draft_model_update`` reads (each slot's last row): those
        rows' tokens are drawn from their ``q`` (kept in ``draft_probs[:, substep]``); the other
        rows (earlier accepted tokens of substep 0) keep the argmax, which nothing reads."""
        paddle = self._paddle
        mi = self.model_inputs
        greedy, uniform = self._draft_rng
        R = int(logits.shape[0])
        B = self.max_num_seqs
        # packed row r belongs to slot (r + output_padding_offset[r]) // L (spec §1.3); rows are
        # in slot order, so a slot's last row is the running count of rows up to it, minus one
        slot = (
            paddle.arange(R, dtype="int64") + out_pad.reshape([-1])[:R].astype("int64")
        ) // self.max_model_len
        counts = paddle.bincount(slot, minlength=B)
        has = counts > 0
        last = paddle.clip(paddle.cumsum(counts) - 1, 0, R - 1)
        tokens, q = sample_draft_rows(
            paddle.gather(logits, last),
            greedy.reshape([-1]),
            mi["top_k"].reshape([-1]),
            mi["top_p"].reshape([-1]),
            uniform[:, substep],
        )
        buf = mi["draft_probs"]
        buf[:, substep, :] = paddle.where(has.unsqueeze(-1), q, buf[:, substep, :])
        # every row: the argmax; each slot's last row: its sample (slots without rows write to a
        # sink entry past the end)
        out = paddle.concat(
            [paddle.argmax(logits, axis=-1).astype("int64"), paddle.zeros([1], "int64")]
        )
        index = paddle.where(has, last, paddle.full_like(last, R))
        out = paddle.scatter(out, index, tokens, overwrite=True)
        return out[:R]

    def _update_status(self) -> None:
        mi, t = self.model_inputs, self.target
        ops.draft_model_postprocess(
            t["draft_tokens"], t["seq_lens_this_time"], t["seq_lens_encoder"], t["stop_flags"]
        )
        if self.scheduler == "v0":
            ops.mtp_step_paddle(
                t["stop_flags"],
                mi["stop_flags"],
                mi["batch_drop"],
                mi["seq_lens_this_time"],
                mi["seq_lens_encoder"],
                mi["seq_lens_decoder"],
                mi["block_tables"],
                mi["encoder_block_lens"],
                mi["used_list_len"],
                mi["free_list"],
                mi["free_list_len"],
                self.block_size,
                self.K,
            )

    def _extend_draft_token_with_ngram_match(self) -> None:
        """Hybrid mode (spec §6.7): fill the draft slots after the MTP's with prompt/history n-gram
        matches. The op runs where the tensors are (its CPU driver or its CUDA kernels): the
        haystack (``input_ids_cpu``, ``input_ids_len``) is kept on the target's device for that,
        so no copy is made (upstream copies to the CPU and back)."""
        mi, t = self.model_inputs, self.target
        cfg = self.config
        ops.hybrid_mtp_ngram(
            mi["input_ids_cpu"],
            self.input_ids_len,
            mi["pre_ids"],
            mi["step_idx"],
            t["actual_draft_token_num"],
            t["draft_tokens"],
            t["seq_lens_this_time"],
            mi["seq_lens_decoder"],
            mi["max_dec_len"],
            cfg.max_ngram_size,
            cfg.min_ngram_size,
            self.K,
            threshold=self.ngram_threshold,
        )


class MTPProposer(DraftModelProposer):
    """Drafts tokens with the ERNIE MTP block (``speculative_config.method == "mtp"``; the
    arguments are `DraftModelProposer`'s, ``mtp_model`` an ``Ernie4_5MTP``)."""

    METHODS = ("mtp",)
