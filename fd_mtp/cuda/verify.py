"""fd_mtp.cuda version of the target-side verify op (spec §5.7) and the device Philox generator."""

from __future__ import annotations

from .._verify_options import STRATEGIES, resolve_verify_options
from ._common import _cupy, _fail, _ptr, _stream, _workspace, launch, load

__all__ = ["speculate_verify", "philox4x32_10"]

_counter = 0
# "rejection": hand the launcher its [bsz] int64 sample workspace (persistent per stream, grown
# only when a call has more requests than any before it on that stream), so that the check pass
# samples while it checks and each sampled row is read once. False: the launcher's path without
# a workspace (the Paddle GPU branch's today: the apply pass reads the rows again); tests set it.
SAMPLE_WORKSPACE = True


def speculate_verify(
    sampled_token_ids,
    accept_tokens,
    accept_num,
    step_idx,
    stop_flags,
    seq_lens_encoder,
    seq_lens_decoder,
    draft_tokens,
    seq_lens_this_time,
    verify_tokens,
    verify_scores,
    max_dec_len,
    end_tokens,
    is_block_step,
    output_cum_offsets,
    actual_candidate_len,
    actual_draft_token_nums,
    topp,
    max_seq_len,
    verify_window,
    enable_topp,
    benchmark_mode,
    accept_all_drafts,
    *,
    seed=None,
    offset=None,
    verify_strategy=None,
    prefill_one_step_stop=None,
    target_probs=None,
    draft_probs=None,
):
    """fd_mtp.ops.speculate_verify on CuPy arrays (own default seed/offset counter)."""
    global _counter
    strategy, prefill_one_step_stop, seed, offset = resolve_verify_options(
        verify_strategy, prefill_one_step_stop, seed, offset, _counter
    )
    _counter += 1
    if strategy != STRATEGIES["rejection"]:
        target_probs = draft_probs = None
    elif target_probs is None:
        _fail("speculate_verify", "target_probs", 'is required by the "rejection" strategy')
    elif _no_rows(draft_probs) and not _no_rows(target_probs):
        # As fd_mtp.ops.speculate_verify (where Paddle would see it as absent).
        _fail(
            "speculate_verify",
            "draft_probs",
            f"has no rows (shape {list(draft_probs.shape)}) but target_probs has "
            f"{target_probs.shape[0]}; pass None for a greedy drafter",
        )
    launch("speculate_verify", locals(), _check_vocabularies)


def _check_vocabularies(op, values, dims, p):
    """As speculate_verify_check (custom_ops/paddle/speculate_verify.cc): draft_probs has
    target_probs' vocabulary. Then the "rejection" sample workspace (SAMPLE_WORKSPACE)."""
    draft_probs = values["draft_probs"]
    if draft_probs is not None and dims["Vq"] != dims["V"]:
        _fail(
            op.name,
            "draft_probs",
            f"must have {dims['V']} columns, got shape {list(draft_probs.shape)}",
        )
    if values["target_probs"] is not None and SAMPLE_WORKSPACE:
        p.sample_tokens = _ptr(
            _workspace("speculate_verify.sample_tokens", (max(p.bsz, 1),), "int64")
        )


def _no_rows(a):
    shape = getattr(a, "shape", None)
    return shape is not None and len(shape) == 2 and shape[0] == 0


def philox4x32_10(counter, key):
    """Philox4x32-10 on the GPU: counter [n, 4] and key [n, 2] uint32 (host or device) -> [n, 4]
    uint32 host array (the device side of the Random123 known-answer test)."""
    cp = _cupy()
    m = load()
    inp = cp.ascontiguousarray(
        cp.concatenate(
            [
                cp.asarray(counter, cp.uint32).reshape(-1, 4),
                cp.asarray(key, cp.uint32).reshape(-1, 2),
            ],
            axis=1,
        )
    )
    out = cp.zeros((inp.shape[0], 4), dtype=cp.uint32)
    m.philox4x32_10(_ptr(inp), _ptr(out), inp.shape[0], _stream())
    return cp.asnumpy(out)
