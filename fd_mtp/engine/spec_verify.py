"""Verification and the target's post-processing ops of one speculative step (the
`SpeculativeModelRunner`'s; spec/ops.md §4.1, §9.1): ``speculate_verify`` -> [stop sequences] ->
``speculate_update`` -> ``speculate_set_value_by_flags_and_idx``, on the runner's share_inputs.

Verification (``SpeculativeConfig.verification``):

* "greedy": ``speculate_verify``'s greedy rule (accept while draft == argmax). Only for greedy
  requests (the engine refuses sampled ones).
* "target_match": every output row is sampled exactly as plain decoding samples that token (the
  runner's `Sampler`, uniform = f(seed, index of the token)), and a draft is accepted while it equals
  the row's sample. Output is token-for-token the output of plain decoding with the same seeds,
  greedy or sampled: lossless by construction.
* "rejection": lossless speculative sampling on the rows' top-k / top-p distributions (the
  sampler's `probs`), Philox draws keyed by the runner seed and the step number; the greedy MTP
  drafter is a point mass. Same output distribution as plain sampling.
* "topp" / "topk": FastDeploy's candidate rules (``top_p_candidates``), not lossless.

Stopping (``SpeculativeConfig.stop_handling``; plain decoding, `ModelRunner`, always stops on the
host in the engine's own loop, with no stop op):

* "engine" (default): stopping is the engine's job, on the host, as in plain decoding (EOS unless
  ``ignore_eos``, stop token ids, stop strings, ``max_tokens``, ``max_model_len``): verify and
  draft_model_update get an end-token list that matches nothing, and ``max_dec_len`` is the
  request's real limit plus ``num_model_steps``, so the ops never end a request (or its draft)
  before the engine does, and tokens past a stop are dropped by the engine. Speculative steps
  therefore produce exactly what plain steps produce under greedy and "target_match"
  verification.
* "ops": FastDeploy's configuration. verify and draft_model_update get the model's EOS ids
  (``eos_token_ids``) and ``max_dec_len = min(max_tokens, max_model_len - prompt length)`` (the
  clamp FastDeploy's input processor applies to max_tokens); each stop token id is a one-token
  stop sequence (``stop_seqs`` ``[B, MAX_STOP_SEQS, 1]``, ``stop_seqs_len``) of
  ``speculate_set_stop_value_multi_seqs``, run between verify and update as upstream; the runner
  reports the slots whose ``stop_flags`` the step set in ``last_stopped`` (a non-final prefill
  chunk never: its next chunk's insertion restarts it, as upstream) and the engine finishes those
  requests with the tokens the ops kept. The host keeps what the ops cannot do: stop strings (text).
  ``min_tokens`` is the penalty op's ``min_len`` (EOS masked; fd_mtp's sampler also masks stop
  token ids until then, which upstream has no equivalent of). The divergences from "engine" mode
  that upstream's semantics force (each tested in tests/e2e/test_ops_stop_path.py):

  - ``step_idx`` counts generated tokens and verify stops at ``step_idx >= max_dec_len`` by
    writing ``end_tokens[0]`` over the token: max_tokens=n gives n-1 model tokens and the first
    EOS id (max_tokens=1: just the EOS id).
  - finish_reason is FastDeploy's serving rule: "length" iff the request has its limit of
    tokens, else "stop" (an EOS on the last allowed token is "length").
  - an EOS id inside an accepted run ends the request there, kept (as plain decoding); a drafted
    EOS also stops that request's draft (draft_model_update), so that step verifies fewer drafts.
  - a request whose draft stopped (a drafted EOS id, or the draft past max_dec_len, below) while
    the target goes on decodes on without drafts (`_drop_stopped_drafts`: the proposer's
    ``batch_drop`` until its next insertion): 2.4's stop-recovery branch of
    ``draft_model_preprocess`` rewinds the draft by the target's ``seq_lens_this_time`` instead
    of ``accept_num`` (spec §14.5), which leaves its positions behind by the rejected drafts and
    below zero for short sequences (one-token prompt, K = num_model_steps = 3, max_tokens 3).
    A fix belongs in that op (rewind by accept_num, as later upstream versions do).
  - a stop token id is kept and the token after it is replaced by the first EOS id (one step later
    when the stop token was the last of its step: the request runs one more step); it is missed
    when verify ends the request in the step that would see it (an EOS or max_dec_len in the same
    step or the next): the tokens after the stop token are then kept.
  - ``ignore_eos`` is refused (the end tokens are one list for the batch) and so are more than
    ``MAX_STOP_SEQS`` (5, FastDeploy's FD_MAX_STOP_SEQS_NUM) stop token ids.
  - draft_model_update also stops a draft at max_dec_len: the proposer counts one token less
    (token k at its step k - 1), so the draft one past the limit becomes the EOS id and nothing is
    drafted after it; verify ends the request at the limit before reaching it (same output,
    fewer drafts in the last step).
"""

from __future__ import annotations

from .. import ops
from .sampler import SamplingRows

__all__ = ["verify", "verify_and_update"]


def verify_and_update(runner, logits, rows, meta, raw, counts):
    """verify -> (stop sequences, "ops") -> update -> set_value_by_flags, FastDeploy's
    post-processing order. Returns verify's accept_num (a device copy: set_value_by_flags
    zeroes it for stopped requests) and, when logprobs were asked, the raw logit rows of the
    kept tokens."""
    si = runner.share_inputs
    this_time, enc, dec = meta.seq_lens_this_time, meta.seq_lens_encoder, meta.seq_lens_decoder
    verify(
        runner,
        logits,
        rows,
        this_time,
        enc,
        dec,
        si["output_padding_offset"],
        si["output_cum_offsets"],
        drafts=bool((counts > 1).any()),
    )
    if runner.ops_stop:
        ops.speculate_set_stop_value_multi_seqs(
            si["accept_tokens"],
            si["accept_num"],
            si["pre_ids"],
            si["step_idx"],
            si["stop_flags"],
            this_time,
            si["stop_seqs"],
            si["stop_seqs_len"],
            runner._end_tokens,
        )
    # logprobs: the raw rows of the tokens kept (after the stop sequences, which only shorten
    # a run: the rows stay laid out by the accept_num pulled later)
    accepted_rows = None if raw is None else runner._accepted_logits(raw, this_time, enc)
    ops.speculate_update(
        enc,
        dec,
        si["not_need_stop"],
        si["draft_tokens"],
        si["actual_draft_token_num"],
        si["accept_tokens"],
        si["accept_num"],
        si["stop_flags"],
        this_time,
        si["is_block_step"],
        si["stop_nums"],
        si["mask_rollback"],
    )
    accepted = si["accept_num"].clone()
    ops.speculate_set_value_by_flags_and_idx(
        si["pre_ids"],
        si["accept_tokens"],
        si["accept_num"],
        si["stop_flags"],
        this_time,
        enc,
        dec,
        si["step_idx"],
    )
    return accepted, accepted_rows


def verify(
    runner, logits, rows: SamplingRows, this_time, enc, dec, out_pad, out_cum, drafts=True
) -> None:
    import paddle

    si = runner.share_inputs
    cfg = runner.spec_config
    strategy = cfg.verification
    if strategy == "rejection" and not drafts:
        # no row verifies a draft (every request off or prefilling): each emits one token
        # sampled from the target's distribution either way; "target_match" takes the
        # sampler's draw, as plain decoding, and needs no target_probs
        strategy = "target_match"
    R = logits.shape[0]
    target_probs = None
    top_p = si["top_p"]
    if strategy in ("topp", "topk"):
        top_p = rows.device["verify_top_p"]
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        scores, tokens, lens = ops.top_p_candidates(
            probs, top_p, out_pad, cfg.max_candidate_len, runner.max_model_len
        )
        sampled = runner.sampler.sample_tensor(logits, rows).reshape([-1, 1])
    else:
        if strategy == "greedy" or bool(rows.greedy.all()):  # argmax rows
            sampled = paddle.argmax(logits, axis=-1).astype("int64").reshape([-1, 1])
        else:
            sampled = runner.sampler.sample_tensor(logits, rows).reshape([-1, 1])
        if strategy == "rejection":
            target_probs = runner.sampler.probs(logits, rows)
        tokens = sampled
        scores = paddle.zeros([R, 1], dtype="float32")
        lens = paddle.ones([R], dtype="int32")
    # the Philox key and counter are explicit: the runner's seed and its step number
    ops.speculate_verify(
        sampled,
        si["accept_tokens"],
        si["accept_num"],
        si["step_idx"],
        si["stop_flags"],
        enc,
        dec,
        si["draft_tokens"],
        this_time,
        tokens,
        scores,
        si["max_dec_len"],
        runner._end_tokens,
        si["is_block_step"],
        out_cum,
        lens,
        si["actual_draft_token_num"],
        top_p,
        runner.max_model_len,
        cfg.verify_window,
        True,
        cfg.benchmark_mode,
        False,
        seed=runner.verify_seed,
        offset=runner.num_steps,
        verify_strategy=strategy,
        prefill_one_step_stop=False,
        target_probs=target_probs,
        draft_probs=runner._draft_probs if strategy == "rejection" else None,
    )
