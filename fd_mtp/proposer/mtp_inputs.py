"""The MTP proposer's persistent ``model_inputs`` (spec/ops.md §3: clones of, aliases of and new
buffers beside the target's ``share_inputs``) and the insertion of requests into them (spec §4.2):
`build_model_inputs` and the `MTPInsertion` methods of `fd_mtp.proposer.mtp.MTPProposer`."""

from __future__ import annotations

import numpy as np

from ..batch import TaskKind

# share_inputs entries the proposer clones (its own copy) and aliases (the very same tensors)
CLONED = (
    "block_tables",
    "input_ids",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "step_idx",
    "stop_flags",
    "stop_nums",
    "pre_ids",
    "output_cum_offsets",
    "output_padding_offset",
    "ids_remove_padding",
    "batch_id_per_token",
    "cu_seqlens_q",
    "cu_seqlens_k",
    "encoder_block_lens",
)
ALIASED = (
    "prompt_lens",
    "top_p",
    "top_k",
    "temperature",
    "eos_token_id",
    "penalty_score",
    "frequency_score",
    "presence_score",
    "infer_seed",
    "max_dec_len",
    "min_dec_len",
    "bad_tokens",
    "accept_num",
    "accept_tokens",
)


def build_model_inputs(p) -> dict:
    """MTPProposer ``p``'s ``model_inputs`` (spec §3); also sets its FastDeploy-named buffers
    ``seq_lens_this_time_buffer``, ``last_seq_lens_this_time`` and ``input_ids_len``."""
    paddle = p._paddle
    t = p.target
    B, L = p.max_num_seqs, p.max_model_len
    mi = {key: t[key].clone() for key in CLONED}
    mi.update({key: t[key] for key in ALIASED})
    mi["base_model_draft_tokens"] = t["draft_tokens"]
    # the hybrid haystack, where the op runs: on the target's device (FastDeploy: on the CPU)
    place = t["draft_tokens"].place
    mi["input_ids_cpu"] = paddle.full([B, L], -1, "int64").to(place)
    mi["not_need_stop"] = paddle.full([1], False, "bool").cpu()
    cfg = p.model_config
    mi["target_hidden_states"] = paddle.zeros([0, cfg.hidden_size], dtype=cfg.dtype)
    mi["substep"] = 0
    mi["draft_tokens"] = paddle.full([B, p.K + 1], -1, "int64")
    mi.update(_free_list(p))
    mi.update(_new_buffers(p))
    mi["caches"] = p.caches
    # draft_sampling: q of each slot's draft at every substep (the verifier's draft_probs)
    V = cfg.vocab_size
    mi["draft_probs"] = paddle.zeros([B, p.K, V], "float32") if p.config.draft_sampling else None
    # Python attributes of FastDeploy's proposer
    p.seq_lens_this_time_buffer = t["seq_lens_this_time"].clone()
    mi["seq_lens_this_time"] = p.seq_lens_this_time_buffer  # always the full [B, 1] buffer
    p.last_seq_lens_this_time = paddle.full([B, 1], -1, "int32") if p.num_model_steps > 1 else None
    p.input_ids_len = paddle.full([B, 1], 0, "int64").to(place)
    return mi


def _free_list(p) -> dict:
    """The v0 free list of the MTP cache's own decode blocks (spec §11): ids num_gpu_blocks - 1
    down to int(N_main * kv_cache_ratio)."""
    paddle = p._paddle
    # the bottom is taken from the main cache's block count itself (dividing num_gpu_blocks by the
    # expand ratio again loses the int() truncation: N_main 4, ratio 1.1 gave bottom 2 instead of 3)
    top = p.num_gpu_blocks
    bottom = min(int(p.num_main_blocks * p.kv_cache_ratio), top)
    free = np.arange(top - 1, bottom - 1, -1, dtype=np.int32)
    return {
        "free_list": paddle.to_tensor(
            free if free.size else np.zeros([0], np.int32), dtype="int32"
        ),
        "free_list_len": paddle.to_tensor([free.size], dtype="int32"),
    }


def _new_buffers(p) -> dict:
    """The proposer's own per-slot buffers (spec §3 "new"), from is_block_step on."""
    paddle = p._paddle
    B, H = p.max_num_seqs, p.model_config.hidden_size
    return {
        "is_block_step": paddle.full([B, 1], False, "bool"),
        "batch_drop": paddle.full([B, 1], False, "bool"),
        "used_list_len": paddle.full([B], 0, "int32"),
        "first_token_hidden_states": paddle.full([B, H], -1.0, dtype=p.model_config.dtype),
        "batch_token_num": paddle.full([B], 0, "int32"),
        "next_token_num": paddle.full([B], 0, "int32"),
        "cu_batch_token_offset": paddle.full([B + 1], 0, "int32"),
        "cu_next_token_offset": paddle.full([B + 1], 0, "int32"),
        "mask_rollback": paddle.full([B, 1], 0, "int32"),
        "recompute_token_num": paddle.full([B, 1], p.num_model_steps - 1, "int32"),
    }


class MTPInsertion:
    """Insertion of requests into the proposer's ``model_inputs`` (spec §4.2): v1 tasks, v0
    prefills and v0 chunked prefill. Mixed into `MTPProposer`."""

    # -- insertion (spec §4.2) ----------------------------------------------------------------------
    def _write_row(self, key: str, b: int, values, fill=None) -> None:
        w = self._w[key]
        if fill is not None:
            w[b] = fill
        v = np.asarray(values, dtype=np.int64)
        if v.size:
            w[b, : v.size] = v

    def insert_tasks_v1(self, tasks) -> None:
        """Mirror the target's `insert_tasks_v1` for the draft model (spec §4.2, v1).

        PREFILL ``[s, e)`` of ``token_ids``: draft prompt ``input_ids[b, :e-s-1] = token_ids[s+1:e]``
        (the target's chunk shifted left by one); the hybrid haystack ``input_ids_cpu[b, :e-1] =
        token_ids[1:e]`` and ``input_ids_len = e-1``: every token so far, not only this chunk's
        (upstream writes the chunk), so that the n-gram drafts do not depend on how the prompt
        was chunked or how much of it came from the prefix cache; ``pre_ids`` row -1; block
        row = the request's; ``stop_flags`` / ``batch_drop`` False; ``seq_lens_encoder =
        this_time = e-s``, ``seq_lens_decoder = s``;
        ``step_idx`` as the target (generated tokens on the last chunk, else 0). Role "decode":
        ``seq_lens_encoder = 0``, ``recompute_token_num = 0``, ``mask_rollback = 1``; other roles
        start the slot afresh with ``recompute_token_num = num_model_steps - 1`` and
        ``mask_rollback = 0`` (not listed by spec §4.2; a slot a decode-role request used before
        would otherwise keep its values).
        DECODE: the block row is replaced. PREEMPTED: block row -1, stopped, this_time / enc / dec 0,
        ``is_block_step`` False.
        """
        mi, w = self.model_inputs, self._w
        for task in tasks:
            b = task.slot
            if task.kind is TaskKind.PREEMPTED:
                w["block_tables"][b] = -1
                w["stop_flags"][b] = True
                w["seq_lens_this_time"][b] = 0
                w["seq_lens_decoder"][b] = 0
                w["seq_lens_encoder"][b] = 0
                w["is_block_step"][b] = False
                continue
            self._write_row("block_tables", b, task.block_ids, fill=-1)
            if task.kind is TaskKind.DECODE:
                continue
            n = len(task.token_ids)
            length = task.end - task.start
            last_chunk = task.end >= n
            draft_prompt = task.token_ids[task.start + 1 : task.end]
            self.batch.stage(self.input_ids_len)[b] = task.end - 1
            w["pre_ids"][b] = -1
            self._write_row("input_ids", b, draft_prompt)
            self._write_row("input_ids_cpu", b, task.token_ids[1 : task.end], fill=-1)
            w["stop_flags"][b] = False
            w["batch_drop"][b] = False
            w["is_block_step"][b] = False
            w["seq_lens_encoder"][b] = length
            w["seq_lens_decoder"][b] = task.start
            w["seq_lens_this_time"][b] = length
            w["step_idx"][b] = task.num_output if last_chunk else 0
            if self.role == "decode":
                w["seq_lens_encoder"][b] = 0
                w["recompute_token_num"][b] = 0
                w["mask_rollback"][b] = 1
            else:
                w["recompute_token_num"][b] = self.num_model_steps - 1
                w["mask_rollback"][b] = 0
                self._inserted.add(b)
        mi["seq_lens_this_time"] = self.seq_lens_this_time_buffer

    def insert_prefill_inputs(
        self, slot: int, prompt_token_ids, *, block_ids, chunk_sizes=None, seq_lens_decoder: int = 0
    ) -> None:
        """v0 insertion of a new request (spec §4.2 ``insert_prefill_inputs``, normal request).

        ``input_ids[:n-1] = prompt[1:]`` (or the first chunk shifted, with chunked prefill:
        ``chunk_sizes`` lists the chunk lengths, summing to the prompt length), ``input_ids_cpu``
        likewise, ``pre_ids`` -1, ``step_idx`` 0, ``seq_lens_encoder = this_time`` = the first
        chunk (or the whole prompt), ``seq_lens_decoder``, stop / batch_drop False, the encoder
        block row. Role "decode" (a request prefilled elsewhere) is not offered on v0.
        """
        mi, w = self.model_inputs, self._w
        prompt = [int(t) for t in prompt_token_ids]
        n = len(prompt)
        if n < 1:
            raise ValueError("insert_prefill_inputs: prompt_token_ids is empty")
        if chunk_sizes is None:
            chunk_sizes = [n]
        chunk_sizes = [int(c) for c in chunk_sizes]
        if sum(chunk_sizes) != n or any(c < 1 for c in chunk_sizes):
            raise ValueError(
                f"insert_prefill_inputs: chunk_sizes {chunk_sizes} must be >= 1 and sum to the "
                f"prompt length {n}"
            )
        if self.role == "decode":
            raise ValueError(
                "insert_prefill_inputs: the decode role is only offered with the v1 scheduler"
            )
        b = int(slot)
        c0 = chunk_sizes[0]
        first = prompt[1 : c0 + 1] if len(chunk_sizes) > 1 else prompt[1:]
        self._write_row("input_ids", b, first)
        self._write_row("input_ids_cpu", b, prompt[1:], fill=-1)
        self.batch.stage(self.input_ids_len)[b] = n - 1
        w["pre_ids"][b] = -1
        w["step_idx"][b] = 0
        w["seq_lens_encoder"][b] = c0
        w["seq_lens_this_time"][b] = c0
        w["seq_lens_decoder"][b] = int(seq_lens_decoder)
        w["stop_flags"][b] = False
        w["batch_drop"][b] = False
        self._write_row("block_tables", b, block_ids, fill=-1)
        w["encoder_block_lens"][b] = len(block_ids)
        w["used_list_len"][b] = 0
        w["not_need_stop"][0] = True
        mi["seq_lens_this_time"] = self.seq_lens_this_time_buffer
        if len(chunk_sizes) > 1:
            self._chunks[b] = (prompt, chunk_sizes, 1)

    def update_task_chunk_prefill(self, slot: int, *, seq_lens_decoder: int = 0) -> None:
        """v0 chunked prefill, after a step (spec §4.2 ``_update_chunked_prefill``, proposer side).

        If the request's last chunk already ran: ``seq_lens_encoder = 0``, ``step_idx = 1``,
        ``seq_lens_decoder = start + seq_lens_decoder`` (start = the prompt length). Otherwise the next
        chunk c: ``input_ids[:c] = prompt[start+1 : start+c+1]`` (``[:c-1] = prompt[start+1 : start+c]``
        for the final chunk), ``this_time = encoder = c``, ``step_idx = 0``, ``seq_lens_decoder =
        start + seq_lens_decoder``. Slots without pending chunks are left alone.
        """
        entry = self._chunks.get(slot)
        if entry is None:
            return
        prompt, sizes, idx = entry
        w = self._w
        b = int(slot)
        start = sum(sizes[:idx])
        if idx >= len(sizes):
            w["seq_lens_encoder"][b] = 0
            w["step_idx"][b] = 1
            w["seq_lens_decoder"][b] = start + int(seq_lens_decoder)
            del self._chunks[b]
            return
        c = sizes[idx]
        final = idx == len(sizes) - 1
        ids = prompt[start + 1 : start + c] if final else prompt[start + 1 : start + c + 1]
        self._write_row("input_ids", b, ids)
        w["seq_lens_this_time"][b] = c
        w["seq_lens_encoder"][b] = c
        w["step_idx"][b] = 0
        w["seq_lens_decoder"][b] = start + int(seq_lens_decoder)
        self._chunks[b] = (prompt, sizes, idx + 1)
