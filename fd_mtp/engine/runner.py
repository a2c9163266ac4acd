"""The plain-decoding model runner in FastDeploy's style (``GPUModelRunner``, spec §2, §4).

State lives in one dict of persistent Paddle tensors, ``share_inputs``, with FastDeploy's key names
and ``[max_num_seqs, ...]`` shapes, so that the MTP proposer of the next issue can clone or alias
entries exactly as spec §3 lists. Requests occupy slots; every op works on the whole batch.

The runner uses the *speculative* packed layout with no drafts (``K = 0``): a prefill chunk's tokens
come from ``input_ids[b, :this_time]``, a decode's single token from ``draft_tokens[b, 0]`` (the
last sampled token), and ``pre_process`` builds ``output_padding_offset`` / ``output_cum_offsets``
for ``rebuild_padding`` and the penalty op. One step (`execute_model`):

    pre_process -> model forward over the paged KV cache (ForwardMeta) -> rebuild_padding (one row
    per scheduled request: a prefill chunk's last token, or the decode token) -> compute_logits
    -> Sampler -> update (the role of FastDeploy's update_inputs: dec += this_time, enc = 0,
    step_idx += 1, pre_ids[b, step_idx] = token, draft_tokens[b, 0] = token)

Differences from FastDeploy's runner, by choice: ``seq_lens_this_time`` stays the full ``[B, 1]``
buffer (slots need not be contiguous, so it is not re-pointed to ``buffer[:num_running]``);
``infer_seed`` holds each request's fixed seed and the draw counter is ``step_idx`` (FastDeploy adds
an increment every step), which makes seeded sampling independent of batch composition and
preemption; ``bad_tokens`` is ``[B, 1]`` of -1 (no bad-words support); stop strings are checked on
the host on decoded text, not with ``stop_seqs`` token tensors.

The engine (`fd_mtp.engine.engine.LLMEngine`) decides what runs; it talks to the runner through
`insert_tasks_v1` (spec §4.2), `execute_model` and the attributes of this base class (the
speculative runner overrides them). Per-slot state has one owner, the runner's
`fd_mtp.batch.InputBatch` (``input_batch``): host arrays plus the device tensors, whose dict view is
``share_inputs``. Insertion writes go through it and wait for the step; a plain step makes one
host-to-device transfer (the changed per-slot integers, the staged insertion writes, last step's
tokens for ``pre_ids`` / ``draft_tokens`` and the sampling rows, in one buffer) and one
device-to-host transfer (the sampled tokens); the update after sampling runs on the host arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..batch import InputBatch, Task, TaskKind, pack_step
from ..config import CacheConfig, SchedulerConfig
from .block_manager import blocks_for
from .sampler import Sampler, SamplingRows, logprob_entries, token_logprobs, uniforms
from .sampling_params import SamplingParams

__all__ = ["ModelRunner", "StepOutput", "Task", "TaskKind", "pack_step"]


@dataclass
class StepOutput:
    """What one `ModelRunner.execute_model` call hands the engine, as whole-batch arrays.

    Attributes:
        slots: ``[n]`` int64, the slots that ran, ascending.
        counts: ``[n]`` int64, tokens each emitted (1 for plain decoding and a prefill chunk;
            accepted drafts + 1 for a speculative decode).
        tokens: ``[sum(counts)]`` int64, the emitted tokens, slot after slot.
        drafted: ``[n]`` int64, drafts each slot had verified (0: plain, prefill).
        stopped: ``[n]`` bool, the ops ended the slot's request (``stop_handling="ops"``).
    """

    slots: np.ndarray
    counts: np.ndarray
    tokens: np.ndarray
    drafted: np.ndarray = field(default=None)
    stopped: np.ndarray = field(default=None)

    def __post_init__(self):
        n = self.slots.size
        if self.drafted is None:
            self.drafted = np.zeros(n, np.int64)
        if self.stopped is None:
            self.stopped = np.zeros(n, bool)

    @classmethod
    def empty(cls) -> StepOutput:
        z = np.zeros(0, np.int64)
        return cls(z, z, z)

    def to_dict(self) -> dict[int, list[int]]:
        """``{slot: [tokens]}`` (tests, debugging)."""
        ends = np.cumsum(self.counts)
        flat = self.tokens.tolist()
        return {int(b): flat[e - c : e] for b, c, e in zip(self.slots, self.counts.tolist(), ends)}


class ModelRunner:
    """Owns the model, the paged KV cache and the per-slot state; runs one packed step at a time.

    Args:
        model: an ``Ernie4_5ForCausalLM`` (``forward(ids_remove_padding, meta)``,
            ``compute_logits(hidden)``, ``config``).
        scheduler_config: a `SchedulerConfig` with ``max_model_len`` resolved: B =
            ``max_num_seqs`` request slots; L = ``max_model_len``, the longest sequence (prompt +
            output), the width of ``input_ids`` / ``pre_ids`` and the ``max_seq_len`` of the ops.
        cache_config: a `CacheConfig` with ``num_gpu_blocks`` resolved (KV blocks per layer) and
            ``block_size`` (positions per block).

    What the engine reads (the speculative runner overrides them): ``max_num_seqs``,
    ``max_model_len``, ``block_size``, ``num_blocks``, ``vocab_size``, ``eos_token_ids``,
    ``num_speculative_tokens``, ``lookahead``, ``decode_tokens``, ``max_extra_positions``,
    ``spec_config`` (None) and ``proposer`` (None). `execute_model` returns a `StepOutput`.
    """

    #: drafts verified per step (0: plain decoding; the speculative runner sets K)
    num_speculative_tokens = 0
    #: KV positions a step may write beyond the tokens it feeds (the drafts' substeps)
    lookahead = 0
    #: the `SpeculativeConfig` (None: plain decoding)
    spec_config = None
    #: the drafter (None: plain decoding)
    proposer = None
    #: a full KV block enters the prefix cache once this many positions past its end are
    #: computed (1: the token after the block, which its cache key covers, is in the cache)
    prefix_cache_margin = 1

    def prefix_cacheable(self, slots: np.ndarray) -> np.ndarray:
        """Per slot of ``slots``: whether the K/V its request writes from now on may enter the
        prefix cache (always, for the target alone)."""
        return np.ones(len(slots), bool)

    def __init__(self, model, *, scheduler_config: SchedulerConfig, cache_config: CacheConfig):
        from ..model.attention import allocate_kv_caches

        if (
            not isinstance(scheduler_config, SchedulerConfig)
            or scheduler_config.max_model_len is None
        ):
            raise ValueError(
                "ModelRunner: scheduler_config must be a SchedulerConfig with max_model_len set "
                f"(SchedulerConfig.resolve), got {scheduler_config!r}"
            )
        if not isinstance(cache_config, CacheConfig) or cache_config.num_gpu_blocks is None:
            raise ValueError(
                "ModelRunner: cache_config must be a CacheConfig with num_gpu_blocks set "
                f"(CacheConfig.resolve), got {cache_config!r}"
            )
        self.scheduler_config = scheduler_config
        self.cache_config = cache_config
        self.model = model
        self.config = model.config
        self.max_num_seqs = scheduler_config.max_num_seqs
        self.max_model_len = scheduler_config.max_model_len
        self.block_size = cache_config.block_size
        self.num_blocks = cache_config.num_gpu_blocks
        self.vocab_size = self.config.vocab_size
        eos = self.config.eos_token_id
        self.eos_token_ids = [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]
        self.max_block_num_per_seq = (
            blocks_for(self.max_model_len + self.max_extra_positions, self.block_size)
            + cache_config.enc_dec_block_num
        )
        self.caches = allocate_kv_caches(
            self.config,
            self.config.num_hidden_layers,
            self.num_blocks,
            self.block_size,
            self.config.dtype,
        )
        self.sampler = Sampler()
        self.share_inputs = self._init_share_inputs(self.max_num_seqs)
        #: the one owner of per-slot state; ``share_inputs`` is its dict of device tensors
        self.input_batch = InputBatch(self.share_inputs)
        #: SamplingParams.logprobs of each slot (-1: off)
        self.logprobs_k = np.full(self.max_num_seqs, -1, np.int64)
        #: ``{slot: [{token id: Logprob}, ...]}``: one entry per token the last step returned, for
        #: the slots that asked for logprobs (empty when none did)
        self.last_logprobs: dict[int, list] = {}
        #: SamplingParams.prompt_logprobs of each slot (-1: off), and per slot prefilling with it
        #: this step: the chunk's prompt tokens after its first position (what its rows predict)
        self.prompt_logprobs_k = np.full(self.max_num_seqs, -1, np.int64)
        self._prompt_targets: dict[int, tuple[int, list]] = {}
        #: ``{slot: (index of the first prompt token, [{token id: Logprob}, ...])}`` of the last
        #: step's prefill chunks whose request asked for prompt logprobs
        self.last_prompt_logprobs: dict[int, tuple[int, list]] = {}

    @property
    def decode_tokens(self) -> int:
        """Tokens a decoding request feeds per step, at most (1 + K drafts)."""
        return 1 + self.num_speculative_tokens

    @property
    def max_extra_positions(self) -> int:
        """KV positions past ``max_model_len - 1`` a request may touch (rejected drafts, draft
        substeps): the block-table row is this much wider than ``max_model_len`` needs."""
        return self.num_speculative_tokens + self.lookahead

    # -- buffers ------------------------------------------------------------------------------------
    def _init_share_inputs(self, B: int) -> dict:
        """``share_inputs`` (spec §2): the keys plain decoding needs, plus the speculative keys of the
        packed layout with K = 0 (``draft_tokens`` [B, 1] etc.) so the proposer can extend them."""
        import paddle

        L, NB = self.max_model_len, self.max_block_num_per_seq
        pad = int(self.config.pad_token_id)
        K = self.num_speculative_tokens
        full = paddle.full
        s = {
            # speculative: spare columns, written when a last step's tokens run past the request's end
            "pre_ids": full([B, L + (K + 2 if K else 0)], -1, "int64"),
            "input_ids": full([B, L], pad, "int64"),
            "prompt_ids": full([B, L], pad, "int64"),
            "eos_token_id": paddle.to_tensor(
                np.array(self.eos_token_ids, np.int64).reshape([-1, 1])
            ),
            "top_p": full([B, 1], 1.0, "float32"),
            "temperature": full([B, 1], 1.0, "float32"),
            "penalty_score": full([B, 1], 1.0, "float32"),
            "frequency_score": full([B, 1], 0.0, "float32"),
            "presence_score": full([B, 1], 0.0, "float32"),
            "top_k": full([B, 1], 0, "int64"),
            "min_dec_len": full([B, 1], 0, "int64"),
            "max_dec_len": full([B, 1], L, "int64"),
            "seq_lens_this_time": full([B, 1], 0, "int32"),
            "seq_lens_encoder": full([B, 1], 0, "int32"),
            "seq_lens_decoder": full([B, 1], 0, "int32"),
            "step_seq_lens_encoder": full([B, 1], 0, "int32"),
            "step_seq_lens_decoder": full([B, 1], 0, "int32"),
            "prompt_lens": full([B, 1], 0, "int64"),
            "step_idx": full([B, 1], 0, "int64"),
            "not_need_stop": paddle.full([1], False, "bool").cpu(),
            "stop_flags": full([B, 1], True, "bool"),
            "stop_nums": full([1], B, "int64"),
            # bad words: the penalty op reads row 0 only (upstream quirk); per-request bad words are not
            # offered, so one -1 column instead of FastDeploy's [B, V]
            "bad_tokens": full([B, 1], -1, "int64"),
            "bad_tokens_len": full([B], 1, "int64"),
            "next_tokens": full([B, 1], -1, "int64"),
            "is_block_step": full([B], False, "bool"),
            "is_chunk_step": paddle.full([B], False, "bool").cpu(),
            "encoder_block_lens": full([B], 0, "int32"),
            "infer_seed": paddle.full([B, 1], 0, "int64").cpu(),
            "first_token_ids": full([B, 1], -1, "int64"),
            "ids_remove_padding": full([B * L], 0, "int64"),
            "batch_id_per_token": full([B * L, 1], 0, "int32"),
            "cu_seqlens_q": full([B + 1, 1], 0, "int32"),
            "cu_seqlens_k": full([B + 1, 1], 0, "int32"),
            "block_tables": full([B, NB], -1, "int32"),
            # speculative layout with K = 0 (decode token = draft_tokens[b, 0])
            "accept_tokens": full([B, K + 1], 0, "int64"),
            "accept_num": full([B], 0, "int32"),
            "draft_tokens": full([B, K + 1], -1, "int64"),
            "actual_draft_token_num": full([B], K, "int32"),
            "output_cum_offsets": full([B, 1], 0, "int32"),
            "output_padding_offset": full([B * (K + 1)], 0, "int32"),
        }
        return s

    # -- insertion (spec §4.2, v1) ------------------------------------------------------------------
    def insert_tasks_v1(self, tasks: list[Task]) -> None:
        """Write tasks into their slots (spec §4.2 ``insert_tasks_v1``; see `Task`), through the
        `InputBatch`: the device tensors receive the writes with the next step's transfer.

        PREFILL: ``input_ids[slot, :e-s] = token_ids[s:e]``, ``seq_lens_this_time = seq_lens_encoder
        = e - s``, ``seq_lens_decoder = s``, ``prompt_lens = len(token_ids)``, ``step_idx =
        num_output`` on the last chunk else 0, ``is_chunk_step = e < len(token_ids)``, the block
        row, stop_flags False, sampling parameters, ``first_token_ids``. Difference from upstream
        (which resets the ``pre_ids`` row to -1): the row is rebuilt with the already generated
        tokens (``pre_ids[slot, k] = output[k-1]``), so penalties after a preemption see the same
        history as without it.
        DECODE: the block-table row is replaced. PREEMPTED: row -1, stopped, this_time/enc/dec 0,
        ``is_block_step`` False.
        """
        ib = self.input_batch
        w = ib.writer(self.share_inputs)
        for t in tasks:
            b = t.slot
            if not 0 <= b < self.max_num_seqs:
                raise ValueError(f"insert_tasks_v1: slot {b} outside [0, {self.max_num_seqs})")
            if t.kind is TaskKind.PREEMPTED:
                ib.block_tables[b] = -1
                ib.stop[b] = True
                ib.this_time[b] = ib.enc[b] = ib.dec[b] = 0
                w["is_block_step"][b] = False
                continue
            if len(t.block_ids) > self.max_block_num_per_seq:
                raise ValueError(
                    f"insert_tasks_v1: slot {b} has {len(t.block_ids)} blocks, the row holds "
                    f"{self.max_block_num_per_seq}"
                )
            n = len(t.token_ids)
            if t.kind is not TaskKind.DECODE and not (
                0 <= t.start < t.end <= n <= self.max_model_len
            ):
                raise ValueError(
                    f"insert_tasks_v1: bad chunk [{t.start}, {t.end}) of {n} tokens "
                    f"(max_model_len {self.max_model_len})"
                )
            ib.block_tables[b] = -1
            ib.block_tables[b, : len(t.block_ids)] = t.block_ids
            if t.kind is TaskKind.DECODE:
                continue
            length = t.end - t.start
            last_chunk = t.end >= n
            w["input_ids"][b, :length] = t.token_ids[t.start : t.end]
            ib.this_time[b] = ib.enc[b] = length
            ib.dec[b] = t.start
            ib.step_idx[b] = t.num_output if last_chunk else 0
            ib.stop[b] = False
            w["step_seq_lens_decoder"][b] = 0
            w["prompt_lens"][b] = n
            w["is_block_step"][b] = False
            w["is_chunk_step"][b] = not last_chunk
            ib.chunk[b] = not last_chunk
            w["first_token_ids"][b] = int(t.token_ids[t.start])
            # the history row is rebuilt for every chunk: a speculative step writes the (discarded)
            # token of a non-final chunk into it
            w["pre_ids"][b] = -1
            w["pre_ids"][b, 1 : 1 + t.num_output] = t.token_ids[n - t.num_output :]
            if t.first_chunk:
                w["prompt_ids"][b, : n - t.num_output] = t.token_ids[: n - t.num_output]
                self._set_params(b, t.params, t.seed, n - t.num_output)
            if self.prompt_logprobs_k[b] >= 0 and t.num_output == 0:
                # row p of the chunk predicts token p + 1, a prompt token up to the prompt's end
                self._prompt_targets[b] = (
                    t.start + 1,
                    t.token_ids[t.start + 1 : min(t.end + 1, n)],
                )

    def _max_dec_len(self, p: SamplingParams, prompt_len: int) -> int:
        """The ``max_dec_len`` entry of a request (the ops' own length limit; plain decoding's ops
        never read it: capped at ``max_model_len``)."""
        return min(p.max_tokens, self.max_model_len)

    def _set_params(self, b: int, p: SamplingParams, seed: int, prompt_len: int):
        ib = self.input_batch
        w = ib.writer(self.share_inputs)
        greedy = p.greedy
        w["temperature"][b] = 1.0 if greedy else p.temperature
        w["top_p"][b] = p.top_p
        w["top_k"][b] = min(
            p.top_k, self.vocab_size
        )  # no op reads it; the sampler uses the host copy
        w["penalty_score"][b] = p.repetition_penalty
        w["frequency_score"][b] = p.frequency_penalty
        w["presence_score"][b] = p.presence_penalty
        w["min_dec_len"][b] = p.min_tokens
        w["max_dec_len"][b] = self._max_dec_len(p, prompt_len)
        w["infer_seed"][b] = seed
        ib.greedy[b] = greedy
        ib.top_k[b] = p.top_k
        ib.top_p[b] = p.top_p
        ib.seed[b] = seed
        ib.min_tokens[b] = p.min_tokens
        ib.set_stop_ids(b, p.stop_token_ids)
        ib.ignore_eos[b] = p.ignore_eos
        ib.has_stop_str[b] = bool(p.stop_list)
        ib.max_output[b] = min(p.max_tokens, self.max_model_len - prompt_len)
        self.logprobs_k[b] = -1 if p.logprobs is None else p.logprobs
        self.prompt_logprobs_k[b] = -1 if p.prompt_logprobs is None else p.prompt_logprobs

    # -- one step -----------------------------------------------------------------------------------
    def _forward(self):
        """Pack the step (`pack_step`), run the model over the paged cache, pick the rows that get
        logits (``rebuild_padding``: a prefill chunk's last token, every fed token of a decode) and
        compute them. Returns ``(meta, hidden [T, H], logits [R, V] float32)``."""
        import paddle

        si = self.share_inputs
        meta = pack_step(si, self.caches, self.block_size)
        with paddle.no_grad():
            hidden = self.model(meta.ids_remove_padding, meta)
            rows = ops.rebuild_padding(
                hidden,
                meta.cu_seqlens_q,
                meta.seq_lens_this_time,
                meta.seq_lens_decoder,
                meta.seq_lens_encoder,
                si["output_padding_offset"],
                None,
                self.max_model_len,
                False,
            )
            logits = self.model.compute_logits(rows).astype("float32")
        return meta, hidden, logits

    def _penalties(self, logits, rows: SamplingRows, meta) -> None:
        si = self.share_inputs
        self.sampler.apply_penalties(
            logits,
            rows,
            pre_ids=si["pre_ids"],
            penalty_score=si["penalty_score"],
            frequency_score=si["frequency_score"],
            presence_score=si["presence_score"],
            temperature=si["temperature"],
            bad_tokens=si["bad_tokens"],
            step_idx=si["step_idx"],
            min_dec_len=si["min_dec_len"],
            eos_token_id=si["eos_token_id"],
            seq_lens_this_time=meta.seq_lens_this_time,
            output_padding_offset=si["output_padding_offset"],
            output_cum_offsets=si["output_cum_offsets"],
            max_seq_len=self.max_model_len,
        )

    def execute_model(self, decode_slots) -> StepOutput:
        """Run one packed step.

        ``decode_slots``: the decoding slots that run this step (``seq_lens_this_time = 1``, token
        ``draft_tokens[b, 0]``); other decoding slots sit out (0 tokens). Slots given a PREFILL task
        since the last step run their chunk.

        Returns:
            a `StepOutput`: one sampled token for every slot that ran, including non-final
            prefill chunks (whose token the engine discards, as FastDeploy does).
        """
        ib = self.input_batch
        decode_slots = np.sort(np.asarray(decode_slots, dtype=np.int64).reshape(-1))
        prefill = (ib.enc > 0) & ~ib.stop
        decoding = (ib.enc == 0) & ~ib.stop
        ib.this_time[decoding] = 0
        ib.this_time[decode_slots] = 1
        if np.any(ib.enc[decode_slots] > 0) or np.any(ib.stop[decode_slots]):
            raise ValueError("execute_model: a decode slot is prefilling or stopped")
        ran = np.flatnonzero(ib.this_time > 0)
        if ran.size == 0:
            return StepOutput.empty()
        rows = self._rows(ran)
        rows.device = ib.push(rows.arrays())  # the step's one host-to-device transfer
        meta, hidden, logits = self._forward()
        self._prompt_logprobs(hidden, meta)
        raw = self._raw_logits(logits, ran)
        self._penalties(logits, rows, meta)
        tokens = ib.pull({"tokens": self.sampler.sample_tensor(logits, rows)})[
            "tokens"
        ]  # the one D2H
        self.last_logprobs = {} if raw is None else self._logprobs(raw, ran, tokens, [1] * ran.size)
        self._update(ran, tokens, prefill)
        return StepOutput(ran, np.ones(ran.size, np.int64), tokens.astype(np.int64))

    # -- logprobs (SamplingParams.logprobs, prompt_logprobs) ----------------------------------------
    def _prompt_logprobs(self, hidden, meta) -> None:
        """``last_prompt_logprobs`` of this step's prefill chunks that asked for prompt logprobs:
        their rows of the packed hidden states ``[T, H]`` through the lm_head, the log-probability
        of each next prompt token and the most likely ones. Costs nothing when no chunk asked."""
        self.last_prompt_logprobs = {}
        if not self._prompt_targets:
            return
        cu = meta.cu_seqlens_q.numpy()  # host offsets of each slot's rows (only on this path)
        for b, (first, targets) in sorted(self._prompt_targets.items()):
            if targets:
                k = int(self.prompt_logprobs_k[b])
                rows = hidden[int(cu[b]) : int(cu[b]) + len(targets)]
                lp = token_logprobs(self.model.compute_logits(rows).astype("float32"), targets, k)
                self.last_prompt_logprobs[b] = (
                    first,
                    logprob_entries(lp, targets, [k] * len(targets)),
                )
        self._prompt_targets = {}

    def _raw_logits(self, logits, ran: np.ndarray):
        """A copy of the step's raw logits (before the in-place penalties) when a running slot asked
        for logprobs, else None: requests without logprobs cost nothing."""
        if not (self.logprobs_k[ran] >= 0).any():
            return None
        return logits.clone()

    def _logprobs(self, rows, ran: np.ndarray, tokens, counts) -> dict[int, list]:
        """``{slot: entries}`` for the slots of ``ran`` with logprobs on: ``rows`` [n, V] are the raw
        logits of the ``n = sum(counts)`` tokens ``tokens`` (flat, in slot order), ``counts[i]`` of
        them for slot ``ran[i]``."""
        counts = np.asarray(counts, np.int64)
        ks = np.repeat(self.logprobs_k[ran], counts)
        lp = token_logprobs(rows, tokens, int(max(ks.max(), 0)))
        entries = logprob_entries(lp, tokens, np.maximum(ks, 0))
        out, start = {}, 0
        for b, c in zip(ran, counts):
            if self.logprobs_k[b] >= 0:
                out[int(b)] = entries[start : start + c]
            start += c
        return out

    def _accepted_logits(self, raw, this_time, enc):
        """The raw logits rows of the tokens verify accepted (FastDeploy's speculative sampler:
        ``speculate_get_target_logits``), ``[R, V]`` with the accepted rows first in slot order.
        Call right after ``speculate_verify`` (``accept_num`` as verify left it). A request's
        verified rows are 1 for a prefill, ``seq_lens_this_time`` for a decode; slots that did
        not run count 0 accepted tokens."""
        import paddle

        accept_num = self.share_inputs["accept_num"]
        n = accept_num.shape[0]
        this_time, enc = this_time.reshape([-1])[:n], enc.reshape([-1])[:n]
        zero = paddle.zeros([1], "int32")
        accepted = paddle.where(this_time > 0, accept_num, paddle.zeros_like(accept_num))
        verified = paddle.where(enc > 0, paddle.ones_like(this_time), this_time)
        ori = paddle.concat([zero, paddle.cumsum(verified).astype("int32")])
        cu = paddle.concat([zero, paddle.cumsum(accepted).astype("int32")])
        target = paddle.zeros_like(raw)
        ops.speculate_get_target_logits(target, raw, cu, ori, this_time, enc, accepted)
        return target

    def _banned(self, slots: np.ndarray, index: np.ndarray):
        """(row, token id) pairs masked while a request's ``min_tokens`` is not reached: its extra
        stop token ids (row r samples token number ``index[r]`` of request ``slots[r]``); rows in
        order, each row's ids in the request's order."""
        ib = self.input_batch
        ids = ib.stop_ids[slots]  # [R, S], -1 padded
        on = (ids >= 0) & (ids < self.vocab_size) & (index < ib.min_tokens[slots])[:, None]
        rows, cols = np.nonzero(on)
        return rows.astype(np.int64), ids[rows, cols]

    def _rows(self, ran: np.ndarray) -> SamplingRows:
        ib = self.input_batch
        banned_rows, banned_ids = self._banned(ran, ib.step_idx[ran])
        greedy = ib.greedy[ran].copy()
        return SamplingRows(
            greedy=greedy,
            top_k=ib.top_k[ran].copy(),
            top_p=ib.top_p[ran].copy(),
            uniform=np.zeros(ran.size)
            if greedy.all()
            else uniforms(ib.seed[ran], ib.step_idx[ran]),
            banned_rows=banned_rows,
            banned_ids=banned_ids,
        )

    def _update(self, ran: np.ndarray, tokens: np.ndarray, prefill: np.ndarray) -> None:
        """After sampling (FastDeploy's update_inputs role), on the host arrays: caches advanced by
        this_time; a slot whose last prompt token ran (or that decoded) records its token in
        ``pre_ids[b, step_idx]`` and ``draft_tokens[b, 0]`` (staged: they reach the device with the
        next step's transfer); a non-final chunk records none."""
        ib = self.input_batch
        final = ~(prefill[ran] & ib.chunk[ran])
        ib.dec[ran] += ib.this_time[ran]
        ib.enc[ran] = 0
        ib.this_time[ran] = 0
        got = ran[final]
        if got.size:
            toks = tokens[final].astype(np.int64)
            ib.step_idx[got] += 1
            w = ib.writer(self.share_inputs)
            w["pre_ids"][got, ib.step_idx[got]] = toks
            w["draft_tokens"][got, 0] = toks
