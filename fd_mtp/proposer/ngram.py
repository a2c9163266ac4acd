"""`NgramProposer`: drafts by prompt / history lookup (FastDeploy's ``NgramProposer``, spec §5.17).

After the target's update, ``ngram_match`` looks for each decoding request's last n tokens
(``n = max_ngram_size .. 1``) in its prompt, then in its generated history, and proposes the tokens
that followed the match (at most ``num_speculative_tokens``, fewer near ``max_dec_len``). No model
runs: drafting costs a scan. The op runs where its tensors are (its CPU driver, or its CUDA
kernels on a GPU), so the proposer keeps its haystack (the prompts) on the target's device and
makes no copy (upstream copies to the CPU and back every step); its insertion writes go through
the runner's `fd_mtp.batch.InputBatch`.
"""

from __future__ import annotations

import time

import numpy as np

from .. import ops
from ..batch import InputBatch, ProposerStats, TaskKind
from ..config import SpeculativeConfig


class NgramProposer:
    """Drafts for the runner whose `InputBatch` it is given.

    Args:
        speculative_config: a `SpeculativeConfig` with ``method="ngram"``.
        input_batch: the runner's `InputBatch` (its ``tensors`` are the target's ``share_inputs``).
        max_model_len: L (width of the prompt buffer).
        threshold: ``ngram_match``'s token budget (INFER_WITH_REFERENCE_TOKENUM_THRESHOLD; None = env/128).
        **unused: the other arguments `fd_mtp.proposer.make_proposer` passes every proposer
            (``mtp_model``, ``block_size``, ``num_main_blocks``, ``draft_end_ids``).
    """

    def __init__(
        self,
        speculative_config: SpeculativeConfig,
        input_batch: InputBatch,
        *,
        max_model_len: int,
        threshold: int | None = None,
    ):
        import paddle

        cfg = speculative_config
        if not isinstance(cfg, SpeculativeConfig) or cfg.method != "ngram":
            raise ValueError(
                f"NgramProposer: speculative_config must be a SpeculativeConfig with method 'ngram', "
                f"got {getattr(cfg, 'method', cfg)!r}"
            )
        self.config = cfg
        self.batch = input_batch
        self.target = input_batch.tensors
        self.K = cfg.num_speculative_tokens
        self.threshold = threshold
        B = input_batch.max_num_seqs
        place = self.target["draft_tokens"].place
        self.input_ids_cpu = paddle.full([B, int(max_model_len)], -1, "int64").to(place)
        self.input_ids_len = paddle.full([B, 1], 0, "int64").to(place)
        self.stats = ProposerStats()

    def insert_tasks_v1(self, tasks) -> None:
        """A PREFILL task stores the request's prompt (``token_ids`` without generated tokens) as
        the haystack; other tasks change nothing here."""
        for t in tasks:
            if t.kind is not TaskKind.PREFILL or not t.first_chunk:
                continue
            prompt = np.asarray(t.token_ids[: len(t.token_ids) - t.num_output], np.int64)
            row = self.batch.stage(self.input_ids_cpu)
            row[t.slot] = -1
            row[t.slot, : prompt.size] = prompt
            self.batch.stage(self.input_ids_len)[t.slot] = prompt.size

    def run(self, full_hidden_states=None) -> None:
        """Write the next drafts into the target's ``draft_tokens[:, 1:]`` and ``seq_lens_this_time``
        (``full_hidden_states`` is not used: the signature is the `Proposer` protocol's)."""
        t0 = time.perf_counter()
        t = self.target
        ops.ngram_match(
            self.input_ids_cpu,
            self.input_ids_len,
            t["pre_ids"],
            t["step_idx"],
            t["actual_draft_token_num"],
            t["draft_tokens"],
            t["seq_lens_this_time"],
            t["seq_lens_encoder"],
            t["seq_lens_decoder"],
            t["max_dec_len"],
            self.config.max_ngram_size,
            self.K,
            threshold=self.threshold,
        )
        self.stats.calls += 1
        self.stats.run += time.perf_counter() - t0
