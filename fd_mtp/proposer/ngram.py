"""`NgramProposer`: drafts by prompt / history lookup (FastDeploy's ``NgramProposer``, spec §5.17).

After the target's update, ``ngram_match`` looks for each decoding request's last n tokens
(``n = max_ngram_size .. 1``) in its prompt, then in its generated history, and proposes the tokens
that followed the match (at most ``num_speculative_tokens``, fewer near ``max_dec_len``). No model
runs: drafting costs a host scan. The op works on host tensors; on a GPU the buffers are copied to
the CPU and the results back, as upstream does.
"""
from __future__ import annotations

import time

import numpy as np

from .. import ops
from ..config import SpeculativeConfig
from .mtp import ProposerStats


class NgramProposer:
    """Drafts for the runner whose ``share_inputs`` it is given.

    Args:
        speculative_config: a `SpeculativeConfig` (or dict) with ``method="ngram"``.
        target_model_inputs: the runner's ``share_inputs``.
        max_model_len: L (width of the prompt buffer).
        threshold: ``ngram_match``'s token budget (INFER_WITH_REFERENCE_TOKENUM_THRESHOLD; None = env/128).
    """

    def __init__(self, speculative_config, target_model_inputs: dict, *, max_model_len: int,
                 threshold: int | None = None):
        import paddle

        cfg = SpeculativeConfig.from_value(speculative_config)
        if cfg is None or cfg.method != "ngram":
            raise ValueError(f"NgramProposer: speculative_config.method must be 'ngram', got "
                             f"{None if cfg is None else cfg.method!r}")
        self._paddle = paddle
        self.config = cfg
        self.target = target_model_inputs
        self.K = cfg.num_speculative_tokens
        self.threshold = threshold
        B = int(target_model_inputs["draft_tokens"].shape[0])
        self.input_ids_cpu = paddle.full([B, int(max_model_len)], -1, "int64").cpu()
        self.input_ids_len = paddle.full([B, 1], 0, "int64").cpu()
        self.stats = ProposerStats()

    def insert_tasks_v1(self, tasks) -> None:
        """A PREFILL task stores the request's prompt (``token_ids`` without generated tokens) as
        the haystack; other tasks change nothing here."""
        from ..engine.runner import TaskKind

        for t in tasks:
            if t.kind is not TaskKind.PREFILL or t.start != 0:
                continue
            prompt = np.asarray(t.token_ids[: len(t.token_ids) - t.num_output], np.int64)
            self.input_ids_cpu[t.slot] = -1
            self.input_ids_cpu[t.slot, : prompt.size] = self._paddle.to_tensor(prompt)
            self.input_ids_len[t.slot] = prompt.size

    def run(self, full_hidden_states=None) -> None:
        """Write the next drafts into the target's ``draft_tokens[:, 1:]`` and ``seq_lens_this_time``
        (``full_hidden_states`` is not used: the signature matches `MTPProposer.run`)."""
        paddle = self._paddle
        t0 = time.perf_counter()
        t = self.target

        def host(x):
            return x if x.place.is_cpu_place() else x.cpu()

        draft, this_time = host(t["draft_tokens"]), host(t["seq_lens_this_time"])
        ops.ngram_match(
            self.input_ids_cpu, self.input_ids_len, host(t["pre_ids"]), host(t["step_idx"]),
            host(t["actual_draft_token_num"]), draft, this_time, host(t["seq_lens_encoder"]),
            host(t["seq_lens_decoder"]), host(t["max_dec_len"]), self.config.max_ngram_size, self.K,
            threshold=self.threshold)  # fmt: skip
        if draft is not t["draft_tokens"]:
            paddle.assign(draft.to(t["draft_tokens"].place), t["draft_tokens"])
            paddle.assign(this_time.to(t["seq_lens_this_time"].place), t["seq_lens_this_time"])
        self.stats.calls += 1
        self.stats.run += time.perf_counter() - t0
