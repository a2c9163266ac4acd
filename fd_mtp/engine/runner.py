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
`insert_tasks_v1` (spec §4.2) and `execute_model`. Host mirrors (numpy) of the small per-slot
integers are the engine's truth and are written into the tensors before every step.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from .block_manager import blocks_for
from .sampler import Sampler, SamplingRows, uniforms
from .sampling_params import SamplingParams

ENC_DEC_BLOCK_NUM = 2  # FD_ENC_DEC_BLOCK_NUM default: extra block-table columns (spec §2)


def pack_step(buffers: dict, caches: list, block_size: int):
    """FastDeploy's per-step ``pre_process`` over a buffer dict (the runner's ``share_inputs`` or the
    proposer's ``model_inputs``): packs the scheduled tokens (``input_ids`` rows of prefilling
    requests, ``draft_tokens`` rows of decoding ones), stores ``ids_remove_padding``,
    ``batch_id_per_token``, ``cu_seqlens_q/k``, ``output_cum_offsets`` and ``output_padding_offset``
    back into ``buffers`` (as FastDeploy's ``copy_``), and returns the step's ``ForwardMeta`` over the
    dict's lengths, block tables and the given KV caches."""
    from ..model.attention import ForwardMeta

    this_time = buffers["seq_lens_this_time"].reshape([-1])
    enc = buffers["seq_lens_encoder"].reshape([-1])
    dec = buffers["seq_lens_decoder"].reshape([-1])
    ids, bid, cu_q, cu_k, out_cum, out_pad = ops.pre_process(
        buffers["input_ids"], this_time, True, buffers["draft_tokens"], enc, dec)
    buffers.update(ids_remove_padding=ids, batch_id_per_token=bid, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                   output_cum_offsets=out_cum, output_padding_offset=out_pad)
    return ForwardMeta(ids_remove_padding=ids, cu_seqlens_q=cu_q, batch_id_per_token=bid, seq_lens_this_time=this_time,
                       seq_lens_encoder=enc, seq_lens_decoder=dec, block_tables=buffers["block_tables"],
                       caches=caches, block_size=block_size)


class TaskKind(enum.Enum):
    PREFILL = "prefill"      # a (chunk of a) prompt, or a preempted request's prompt + output
    DECODE = "decode"        # new KV blocks granted to a decoding request: its block-table row is replaced
    PREEMPTED = "preempted"  # the slot is emptied (preempted or finished): row -1, stopped, no tokens


@dataclass
class Task:
    """One entry of ``insert_tasks_v1`` (spec §4.2, v1 scheduler).

    PREFILL: ``token_ids`` = prompt + already generated output, ``start``/``end`` = the chunk
    ``token_ids[start:end]`` fed this step (``start`` tokens are already cached), ``num_output`` =
    how many of ``token_ids`` are generated tokens, ``params``/``seed`` = sampling of the slot.
    DECODE and PREFILL: ``block_ids`` = the request's whole block-table row.
    """

    kind: TaskKind
    slot: int
    block_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    start: int = 0
    end: int = 0
    num_output: int = 0
    params: SamplingParams | None = None
    seed: int = 0


class ModelRunner:
    """Owns the model, the paged KV cache and ``share_inputs``; runs one packed step at a time.

    Args:
        model: an ``Ernie4_5ForCausalLM`` (``forward(ids_remove_padding, meta)``,
            ``compute_logits(hidden)``, ``config``).
        max_num_seqs: B, the number of request slots.
        max_model_len: L, the longest sequence (prompt + output); the width of ``input_ids`` /
            ``pre_ids`` and the ``max_seq_len`` given to the packing ops.
        block_size: KV-cache block size (positions per block).
        num_blocks: KV-cache blocks per layer.
    """

    #: drafts verified per step (0: plain decoding; the speculative runner sets K)
    num_speculative_tokens = 0
    #: KV positions a step may write beyond the tokens it feeds (the drafts' substeps)
    lookahead = 0

    def __init__(self, model, *, max_num_seqs: int, max_model_len: int, block_size: int, num_blocks: int):
        import paddle

        from ..model.attention import allocate_kv_caches

        self.model = model
        self.config = model.config
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.vocab_size = self.config.vocab_size
        eos = self.config.eos_token_id
        self.eos_token_ids = [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]
        self.max_block_num_per_seq = blocks_for(max_model_len + self.max_extra_positions, block_size) + ENC_DEC_BLOCK_NUM
        self.caches = allocate_kv_caches(self.config, self.config.num_hidden_layers, num_blocks, block_size,
                                         self.config.dtype)
        self.sampler = Sampler()
        self.share_inputs = self._init_share_inputs(max_num_seqs)
        B = max_num_seqs
        # host mirrors of the per-slot integers (the engine's truth, written before every step)
        self.this_time = np.zeros(B, np.int32)
        self.enc = np.zeros(B, np.int32)
        self.dec = np.zeros(B, np.int32)
        self.step_idx = np.zeros(B, np.int64)
        self.stop = np.ones(B, bool)
        self.chunk = np.zeros(B, bool)
        self.block_tables = np.full((B, self.max_block_num_per_seq), -1, np.int32)
        self.greedy = np.ones(B, bool)
        self.top_k = np.zeros(B, np.int64)
        self.top_p = np.ones(B, np.float64)
        self.seed = np.zeros(B, np.int64)
        self.min_tokens = np.zeros(B, np.int64)
        self.stop_token_ids: list[list[int]] = [[] for _ in range(B)]
        self._pushed: dict[str, np.ndarray] = {}
        self._paddle = paddle

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
            "eos_token_id": paddle.to_tensor(np.array(self.eos_token_ids, np.int64).reshape([-1, 1])),
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

    def _set_row(self, key: str, slot: int, values, dtype):
        t = self.share_inputs[key]
        v = np.asarray(values, dtype=dtype)
        t[slot, : v.shape[0]] = self._paddle.to_tensor(v)

    def _set_scalar(self, key: str, slot: int, value):
        self.share_inputs[key][slot] = value

    def _push(self, key: str, host: np.ndarray):
        """Copy a host mirror into its tensor when it changed since the last copy. In plain decoding
        the runner is the only writer of these tensors; code that writes them in place (an op of a
        proposer) must call `invalidate_mirrors` so the next step copies everything again."""
        last = self._pushed.get(key)
        if last is not None and np.array_equal(last, host):
            return
        t = self.share_inputs[key]
        t.set_value(host.reshape(t.shape))
        self._pushed[key] = host.copy()

    def invalidate_mirrors(self) -> None:
        """Forget what was copied: the next `_sync` writes every host mirror again."""
        self._pushed.clear()

    def _sync(self) -> None:
        """Write the host mirrors of the per-slot integers into ``share_inputs``."""
        self._push("seq_lens_this_time", self.this_time)
        self._push("seq_lens_encoder", self.enc)
        self._push("seq_lens_decoder", self.dec)
        self._push("step_idx", self.step_idx)
        self._push("stop_flags", self.stop)
        self._push("block_tables", self.block_tables)
        # FastDeploy's CPU flag: some slot still runs
        self.share_inputs["not_need_stop"][0] = bool((~self.stop).any())

    # -- insertion (spec §4.2, v1) ------------------------------------------------------------------
    def insert_tasks_v1(self, tasks: list[Task]) -> None:
        """Write tasks into their slots (spec §4.2 ``insert_tasks_v1``; see `Task`).

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
        for t in tasks:
            b = t.slot
            if not 0 <= b < self.max_num_seqs:
                raise ValueError(f"insert_tasks_v1: slot {b} outside [0, {self.max_num_seqs})")
            if t.kind is TaskKind.PREEMPTED:
                self.block_tables[b] = -1
                self.stop[b] = True
                self.this_time[b] = self.enc[b] = self.dec[b] = 0
                self.share_inputs["is_block_step"][b] = False
                continue
            if len(t.block_ids) > self.max_block_num_per_seq:
                raise ValueError(f"insert_tasks_v1: slot {b} has {len(t.block_ids)} blocks, the row holds "
                                 f"{self.max_block_num_per_seq}")
            self.block_tables[b] = -1
            self.block_tables[b, : len(t.block_ids)] = t.block_ids
            if t.kind is TaskKind.DECODE:
                continue
            n = len(t.token_ids)
            length = t.end - t.start
            if not (0 <= t.start < t.end <= n <= self.max_model_len):
                raise ValueError(f"insert_tasks_v1: bad chunk [{t.start}, {t.end}) of {n} tokens "
                                 f"(max_model_len {self.max_model_len})")
            last_chunk = t.end >= n
            self._set_row("input_ids", b, t.token_ids[t.start:t.end], np.int64)
            self.this_time[b] = self.enc[b] = length
            self.dec[b] = t.start
            self.step_idx[b] = t.num_output if last_chunk else 0
            self.stop[b] = False
            self._set_scalar("step_seq_lens_decoder", b, 0)
            self._set_scalar("prompt_lens", b, n)
            self.share_inputs["is_block_step"][b] = False
            self.share_inputs["is_chunk_step"][b] = not last_chunk
            self.chunk[b] = not last_chunk
            self._set_scalar("first_token_ids", b, int(t.token_ids[t.start]))
            # the history row is rebuilt for every chunk: a speculative step writes the (discarded)
            # token of a non-final chunk into it
            pre = np.full([1 + t.num_output], -1, np.int64)
            pre[1:] = t.token_ids[n - t.num_output:]
            self.share_inputs["pre_ids"][b] = -1
            self._set_row("pre_ids", b, pre, np.int64)
            if t.start == 0:
                prompt = t.token_ids[: n - t.num_output]
                self._set_row("prompt_ids", b, prompt, np.int64)
                self._set_params(b, t.params, t.seed, n - t.num_output)
        self._sync()

    def _max_dec_len(self, p: SamplingParams, prompt_len: int) -> int:
        """The ``max_dec_len`` entry of a request (the ops' own length limit)."""
        return p.max_tokens

    def _set_params(self, b: int, p: SamplingParams, seed: int, prompt_len: int):
        greedy = p.greedy
        self._set_scalar("temperature", b, 1.0 if greedy else p.temperature)
        self._set_scalar("top_p", b, p.top_p)
        self._set_scalar("top_k", b, p.top_k)
        self._set_scalar("penalty_score", b, p.repetition_penalty)
        self._set_scalar("frequency_score", b, p.frequency_penalty)
        self._set_scalar("presence_score", b, p.presence_penalty)
        self._set_scalar("min_dec_len", b, p.min_tokens)
        self._set_scalar("max_dec_len", b, self._max_dec_len(p, prompt_len))
        self._set_scalar("infer_seed", b, seed)
        self.greedy[b] = greedy
        self.top_k[b] = p.top_k
        self.top_p[b] = p.top_p
        self.seed[b] = seed
        self.min_tokens[b] = p.min_tokens
        self.stop_token_ids[b] = list(p.stop_token_ids)

    # -- one step -----------------------------------------------------------------------------------
    def _forward(self):
        """Pack the step (`pack_step`), run the model over the paged cache, pick the rows that get
        logits (``rebuild_padding``: a prefill chunk's last token, every fed token of a decode) and
        compute them. Returns ``(meta, hidden [T, H], logits [R, V] float32)``."""
        paddle = self._paddle
        si = self.share_inputs
        meta = pack_step(si, self.caches, self.block_size)
        with paddle.no_grad():
            hidden = self.model(meta.ids_remove_padding, meta)
            rows = ops.rebuild_padding(hidden, meta.cu_seqlens_q, meta.seq_lens_this_time, meta.seq_lens_decoder,
                                       meta.seq_lens_encoder, si["output_padding_offset"], None, self.max_model_len,
                                       False)
            logits = self.model.compute_logits(rows).astype("float32")
        return meta, hidden, logits

    def execute_model(self, decode_slots) -> dict[int, int]:
        """Run one packed step.

        ``decode_slots``: the decoding slots that run this step (``seq_lens_this_time = 1``, token
        ``draft_tokens[b, 0]``); other decoding slots sit out (0 tokens). Slots given a PREFILL task
        since the last step run their chunk.

        Returns:
            ``{slot: sampled token}`` for every slot that ran, including non-final prefill chunks
            (whose token the engine discards, as FastDeploy does).
        """
        decode_slots = np.asarray(sorted(decode_slots), dtype=np.int64)
        prefill = (self.enc > 0) & ~self.stop
        decoding = (self.enc == 0) & ~self.stop
        self.this_time[decoding] = 0
        self.this_time[decode_slots] = 1
        if np.any(self.enc[decode_slots] > 0) or np.any(self.stop[decode_slots]):
            raise ValueError("execute_model: a decode slot is prefilling or stopped")
        ran = np.flatnonzero(self.this_time > 0)
        if ran.size == 0:
            return {}
        si = self.share_inputs
        self._sync()
        meta, _, logits = self._forward()
        this_time = meta.seq_lens_this_time
        out_cum, out_pad = si["output_cum_offsets"], si["output_padding_offset"]
        tokens = self.sampler(
            logits, self._rows(ran), pre_ids=si["pre_ids"], penalty_score=si["penalty_score"],
            frequency_score=si["frequency_score"], presence_score=si["presence_score"],
            temperature=si["temperature"], bad_tokens=si["bad_tokens"], step_idx=si["step_idx"],
            min_dec_len=si["min_dec_len"], eos_token_id=si["eos_token_id"], seq_lens_this_time=this_time,
            output_padding_offset=out_pad, output_cum_offsets=out_cum, max_seq_len=self.max_model_len)
        self._update(ran, tokens, prefill)
        self._sync()
        return {int(b): int(t) for b, t in zip(ran, tokens)}

    def _rows(self, ran: np.ndarray) -> SamplingRows:
        rows_b, rows_t = [], []
        for r, b in enumerate(ran):
            if self.stop_token_ids[b] and self.step_idx[b] < self.min_tokens[b]:
                ids = [t for t in self.stop_token_ids[b] if t < self.vocab_size]
                rows_b += [r] * len(ids)
                rows_t += ids
        return SamplingRows(
            greedy=self.greedy[ran].copy(), top_k=self.top_k[ran].copy(), top_p=self.top_p[ran].copy(),
            uniform=(np.zeros(ran.size) if self.greedy[ran].all() else uniforms(self.seed[ran], self.step_idx[ran])),
            banned_rows=np.asarray(rows_b, np.int64), banned_ids=np.asarray(rows_t, np.int64))

    def _update(self, ran: np.ndarray, tokens: np.ndarray, prefill: np.ndarray) -> None:
        """After sampling (FastDeploy's update_inputs role): caches advanced by this_time; a slot whose
        last prompt token ran (or that decoded) records its token; a non-final chunk records none."""
        paddle = self._paddle
        final = ~(prefill[ran] & self.chunk[ran])
        self.dec[ran] += self.this_time[ran]
        self.enc[ran] = 0
        self.this_time[ran] = 0
        got = ran[final]
        if got.size:
            toks = tokens[final].astype(np.int64)
            self.step_idx[got] += 1
            b_idx = paddle.to_tensor(got)
            paddle.index_put_(self.share_inputs["pre_ids"], [b_idx, paddle.to_tensor(self.step_idx[got])],
                              paddle.to_tensor(toks))
            paddle.index_put_(self.share_inputs["draft_tokens"], [b_idx, paddle.zeros_like(b_idx)],
                              paddle.to_tensor(toks))
