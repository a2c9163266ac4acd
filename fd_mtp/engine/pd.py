"""Prefill / decode disaggregation: the engine side of the two roles (design §9, spec §4.2, §6.8).

A **prefill** engine (`PrefillEngine`, FastDeploy's ``splitwise_role = "prefill"``) runs each
request's prefill and one step: the target samples the first token and, with MTP, the proposer
(role "prefill": ``draft_model_preprocess`` in its splitwise mode, one-step stop) drafts once and
sends ``[first token, first draft]`` per slot with ``mtp_save_first_token`` (spec §6.8; a plain
engine sends the same message itself, draft -1). The request then ends on the prefill side; its KV
blocks are read before they can be reused (`PrefillEngine.handoffs`).

A **decode** engine (`DecodeEngine`, role "decode") receives the request prefilled: it takes
blocks of its own, writes the KV it was sent into them (every target layer, and the MTP layer),
and inserts the request with FastDeploy's decode-role fields (spec §4.2): target
``seq_lens_encoder = 0``, ``seq_lens_decoder = prompt length``, ``step_idx = 1``, ``pre_ids[1] =
first token``, ``draft_tokens = [first token, first draft]`` and ``seq_lens_this_time = 1 +
drafts``; proposer (role "decode") ``seq_lens_encoder = 0``, ``recompute_token_num = 0``,
``mask_rollback = 1``, ``seq_lens_decoder = prompt length``. From there it decodes as a mixed
engine does: greedy output (and any "target_match" output) is the mixed engine's, token for token.

Both are `LLMEngine`s (same scheduler, stop checks and outputs); the processes, the transport
(SysV queue + shared memory) and the front are in `fd_mtp.distributed.pd`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from .. import ops
from ..batch import Task, TaskKind
from .block_manager import blocks_for
from .engine import LLMEngine
from .request import Request, RequestStatus, SpeculativeMetrics

__all__ = [
    "Handoff",
    "PrefillEngine",
    "DecodeEngine",
    "kv_tensors",
    "gather_kv",
    "scatter_kv",
    "first_tokens",
]

#: the ``mtp_save_first_token`` message layout (spec §6.8): count of slot i at 2 + i, its
#: [first token, first draft] at 258 + 6 i
_COUNT0, _TOKENS0, _STRIDE = 2, 258, 6


@dataclasses.dataclass
class Handoff:
    """One prefilled request going from the prefill to the decode engine."""

    request_id: str
    prompt_token_ids: list[int]
    prompt: str | None
    params: object  # the request's own SamplingParams (the prefill side ran it for one token)
    seed: int
    first_token: int
    slot: int  # the prefill engine's slot (the index in the mtp_save_first_token message)
    block_ids: list[int]  # the prefill engine's blocks holding the prompt's KV


def kv_tensors(runner) -> list:
    """``[(key, value), ...]``: the runner's KV cache layers, then the MTP block's (if any)."""
    layers = list(runner.caches)
    proposer = getattr(runner, "proposer", None)
    if proposer is not None and hasattr(proposer, "model_config"):
        layers.append(proposer.caches[proposer.model_config.num_hidden_layers])
    return layers


def gather_kv(runner, block_ids):
    """``[layers, 2, len(block_ids), kv_heads, block_size, head_dim]``: copies of the blocks."""
    import paddle

    idx = paddle.to_tensor(np.asarray(block_ids, np.int64))
    return paddle.stack(
        [
            paddle.stack([paddle.gather(k, idx), paddle.gather(v, idx)])
            for k, v in kv_tensors(runner)
        ]
    )


def scatter_kv(runner, block_ids, kv) -> None:
    """Write ``kv`` (as `gather_kv` returns it, from an engine with the same model and block size)
    into the blocks ``block_ids`` of ``runner``'s caches, in place."""
    import paddle

    layers = kv_tensors(runner)
    want = [len(layers), 2, len(block_ids)] + list(layers[0][0].shape[1:])
    if list(kv.shape) != want:
        raise ValueError(
            f"scatter_kv: kv has shape {list(kv.shape)}, this engine's caches take {want} (the "
            "prefill and decode engines need the same model, tensor-parallel degree and block size)"
        )
    idx = paddle.to_tensor(np.asarray(block_ids, np.int64))
    for i, (k, v) in enumerate(layers):
        k.scatter_(idx, kv[i, 0], overwrite=True)
        v.scatter_(idx, kv[i, 1], overwrite=True)


def first_tokens(message: np.ndarray, slots) -> dict[int, tuple[int, int]]:
    """``{slot: (first token, first draft)}`` of the slots a ``mtp_save_first_token`` message
    carries (count 2), among ``slots``."""
    bs = int(message[1])
    out = {}
    for s in slots:
        if s < bs and int(message[_COUNT0 + s]) == 2:
            base = _TOKENS0 + _STRIDE * s
            out[int(s)] = (int(message[base]), int(message[base + 1]))
    return out


class PrefillEngine(LLMEngine):
    """An `LLMEngine` for the prefill role: `add_request` runs a request for its first token only
    (its own ``max_tokens`` travels with the `Handoff`); after each `step`, `handoffs` lists the
    requests to send on, with their blocks, until the next step frees them for reuse.

    Args:
        runner: a `ModelRunner`, or a `SpeculativeModelRunner` whose MTP proposer has role
            "prefill" (it sends the first-token message itself).
        msg_queue_id: the SysV queue of the first-token messages (plain runner: sent here).
    """

    def __init__(self, runner, *, tokenizer=None, seed: int = 0, msg_queue_id=None):
        super().__init__(runner, tokenizer=tokenizer, seed=seed)
        proposer = runner.proposer
        self._mtp = proposer is not None and hasattr(proposer, "model_config")
        if self._mtp and proposer.role != "prefill":
            raise ValueError(
                f"PrefillEngine: the MTP proposer must have role 'prefill', got {proposer.role!r}"
            )
        self.msg_queue_id = msg_queue_id
        self._own_params: dict[str, object] = {}
        self._released: dict[str, list[int]] = {}
        self.handoffs: list[Handoff] = []
        self._last_slots: dict[str, int] = {}  # request -> slot, of the last scheduled step
        #: first-token messages the last `step` sent on the queue (one per MTP substep)
        self.messages_sent = 0

    def add_request(self, prompt, params=None, request_id=None) -> str:
        from .sampling_params import SamplingParams

        params = SamplingParams() if params is None else params
        rid = super().add_request(
            prompt, dataclasses.replace(params, max_tokens=1), request_id=request_id
        )
        self._own_params[rid] = params
        return rid

    def _release(self, req: Request) -> None:
        self._released[req.request_id] = list(req.block_ids)
        super()._release(req)

    def step(self):
        forwards = self.runner.proposer.stats.forwards if self._mtp else 0
        self.handoffs = []
        self._released.clear()
        deltas = super().step()
        for d in deltas:
            if not d.finished:
                continue
            req = self.requests[d.request_id]
            params = self._own_params.pop(d.request_id)
            req.sampling_params = params
            blocks = self._released.get(d.request_id, [])
            if (
                req.finish_reason == "length"
                and len(req.output_token_ids) < params.max_tokens
                and req.num_tokens < self.runner.max_model_len
                and blocks
            ):
                n = len(req.prompt_token_ids)
                self.handoffs.append(
                    Handoff(
                        req.request_id,
                        list(req.prompt_token_ids),
                        req.prompt,
                        params,
                        req.seed,
                        req.output_token_ids[0],
                        self._last_slots[req.request_id],
                        blocks[: blocks_for(n, self.runner.block_size)],
                    )
                )
        if self._mtp:
            self.messages_sent = self.runner.proposer.stats.forwards - forwards
        elif self.handoffs:
            self._send_first_tokens()
            self.messages_sent = 1
        else:
            self.messages_sent = 0
        return deltas

    def _schedule(self):
        tasks, decode_slots, plan = super()._schedule()
        self._last_slots = {req.request_id: slot for slot, (req, _) in plan.items()}
        return tasks, decode_slots, plan

    def _schedule_fast(self):
        return None  # every step goes through `_schedule` (it records the slots handed off)

    def _send_first_tokens(self) -> None:
        """The plain engine's ``mtp_save_first_token`` message: [first token, -1] per handed-off
        slot (the same wire format the MTP proposer sends)."""
        import paddle

        B = self.runner.max_num_seqs
        x = np.full([B, 2], -1, np.int64)
        step = np.zeros(B, np.int64)
        for h in self.handoffs:
            x[h.slot, 0] = h.first_token
            step[h.slot] = 1
        ops.mtp_save_first_token(
            paddle.to_tensor(x),
            paddle.to_tensor([True]).cpu(),
            paddle.zeros([B], "int32"),
            paddle.zeros([B], "int64"),
            paddle.to_tensor(step),
            0,
            False,
            False,
            msg_queue_id=self.msg_queue_id,
        )


class DecodeEngine(LLMEngine):
    """An `LLMEngine` for the decode role: `add_prefilled` inserts a request prefilled elsewhere
    (module docstring); `step` decodes as usual. ``runner``: a `ModelRunner`, or a
    `SpeculativeModelRunner` whose MTP proposer has role "decode"."""

    def __init__(self, runner, *, tokenizer=None, seed: int = 0):
        super().__init__(runner, tokenizer=tokenizer, seed=seed)
        proposer = runner.proposer
        self._mtp = proposer is not None and hasattr(proposer, "model_config")
        if self._mtp and proposer.role != "decode":
            raise ValueError(
                f"DecodeEngine: the MTP proposer must have role 'decode', got {proposer.role!r}"
            )

    def add_prefilled(self, h: Handoff, kv, first_draft: int = -1) -> bool:
        """Insert the prefilled request ``h`` whose prompt KV is ``kv`` (`gather_kv` of the
        prefill engine's blocks). False (nothing changed) when no slot or not enough blocks are
        free now; ValueError for a request id in use or a KV of the wrong shape."""
        runner = self.runner
        rid = h.request_id
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in use")
        n = len(h.prompt_token_ids)
        blocks: list[int] = []
        if not self.free_slots or not self.block_manager.grow(
            blocks, n + runner.decode_tokens + runner.lookahead
        ):
            return False
        try:
            scatter_kv(runner, blocks[: blocks_for(n, runner.block_size)], kv)
        except ValueError:
            self.block_manager.free(blocks)
            raise
        slot = self.free_slots.pop()
        t0 = int(h.first_token)
        req = Request(rid, list(h.prompt_token_ids), h.params, int(h.seed), next(self._arrivals))
        req.prompt = h.prompt
        req.output_token_ids = [t0]
        req.status = RequestStatus.RUNNING
        req.slot, req.block_ids, req.num_computed, req.prefilled = slot, blocks, n, True
        # its prompt's K/V came from another engine (the draft model's were not handed over):
        # they do not enter this engine's prefix cache
        req.cacheable = False
        now = time.perf_counter()
        req.metrics.arrival_time = req.metrics.first_scheduled_time = now
        req.metrics.first_token_time = now
        req.metrics.num_prompt_tokens = n
        req.metrics.num_generated_tokens = 1
        if self.speculative:
            req.metrics.spec = SpeculativeMetrics(runner.num_speculative_tokens)
        self.requests[rid] = req
        self.running.append(req)
        self._bind(req)
        # the runner's own insertion (sampling rows, prompt, block row, pre_ids[1] = t0,
        # step_idx 1), then the decode-role state (spec §4.2)
        tokens = req.all_token_ids
        runner.insert_tasks_v1(
            [
                Task(
                    TaskKind.PREFILL,
                    slot,
                    block_ids=list(blocks),
                    token_ids=tokens,
                    start=0,
                    end=len(tokens),
                    num_output=1,
                    params=h.params,
                    seed=req.seed,
                )
            ]
        )
        ib = runner.input_batch
        w = ib.writer(runner.share_inputs)
        draft = int(first_draft) if self._mtp and first_draft >= 0 else None
        ib.enc[slot] = 0
        ib.dec[slot] = n
        ib.step_idx[slot] = 1
        ib.this_time[slot] = 1 if draft is None else 2
        w["prompt_lens"][slot] = n
        w["draft_tokens"][slot] = -1
        w["draft_tokens"][slot, 0] = t0
        if draft is not None:
            w["draft_tokens"][slot, 1] = draft
        if self._mtp:
            pw = runner.proposer._w
            pw["seq_lens_decoder"][slot] = n
            pw["pre_ids"][slot, 0] = t0
            if draft is not None:
                pw["pre_ids"][slot, 1] = draft
        if self.tokenizer is not None:
            self._update_text(req)
        return True
