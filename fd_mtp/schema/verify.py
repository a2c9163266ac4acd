"""Schemas of the verify ops: spec ../shared/spec/ops.md §5.7 (see fd_mtp/schema/__init__.py for the
format)."""

from . import Attr, Op, Status, Tensor

_ROWS = "row {value} is read but there are {limit} rows"
_NON_FINITE = "holds NaN or inf at row {value}, column {limit}; it must be finite"

OPS = [
    Op(
        name="speculate_verify",
        entry="SpeculateVerify",
        spec="§5.7",
        batch="seq_lens_this_time",
        kernel="speculate_verify",
        cpu="speculate_verify_cpu",
        check=True,
        params="SpeculateVerifyParams",
        extra_params={
            "sampled_rows": "Ts",
            "accept_cols": "Wa",
            "draft_cols": "Dd",
            "verify_rows": "Tv",
            "score_rows": "Tsc",
            "num_candidates": "C",
            "num_end_tokens": "numel(end_tokens)",
            "candidate_len_rows": "Tc",
            "target_rows": "rows(target_probs)",
            "draft_prob_rows": "rows(draft_probs)",
            "vocab": "cols(target_probs)",
            "bsz": "B",
        },
        args=(
            Tensor("sampled_token_ids", "int64[Ts]", doc="one per output row (target_match)"),
            Tensor("accept_tokens", "int64[>=B, Wa]", "written"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]", "written"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "any[]", "unused", param=None),
            Tensor("draft_tokens", "int64[>=B, Dd]"),
            Tensor("seq_lens_this_time", "int32[B]"),
            Tensor("verify_tokens", "int64[Tv, C]"),
            Tensor("verify_scores", "float32[Tsc, C]"),
            Tensor("max_dec_len", "int64[>=B]"),
            Tensor("end_tokens", "int64[>=1]"),
            Tensor("is_block_step", "bool[>=B]"),
            Tensor("output_cum_offsets", "int32[>=B]"),
            Tensor("actual_candidate_len", "int32[Tc]"),
            Tensor("actual_draft_token_nums", "any[]", "unused", param=None),
            Tensor("topp", "float32[>=B]"),
            Attr("max_seq_len", "int", min=1),
            Attr("verify_window", "int", min=0),
            Attr("enable_topp", "bool"),
            Attr("benchmark_mode", "bool"),
            Attr("accept_all_drafts", "bool"),
            # Its default comes from two variables (SPECULATE_VERIFY_USE_TARGET_SAMPLING, then
            # SPECULATE_VERIFY_USE_TOPK), read through fd_mtp.envs by fd_mtp/_verify_options.py,
            # which also maps the Python strategy name to this code.
            Attr("strategy", "int", min=0, max=4, kw=True, py="verify_strategy"),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP"),
            Attr("seed", "int64", min=0, kw=True, doc="None: the wrapper's call counter"),
            Attr("offset", "int64", min=0, kw=True, doc="None: the wrapper's call counter"),
            # "rejection" only (the wrappers pass None otherwise). draft_probs' column count must
            # equal target_probs' (checked by hand: draft_probs alone is never read).
            Tensor("target_probs", "float32[Tp, V]", optional=True, kw=True),
            Tensor("draft_probs", "float32[Tq, Vq]", optional=True, kw=True),
        ),
        status=(
            Status(
                "kVerifyDraftWidth",
                1,
                "draft_tokens",
                "the request verifies {value} tokens (seq_lens_this_time) but the row has {limit} columns",
            ),
            Status(
                "kVerifyAcceptWidth",
                2,
                "accept_tokens",
                "the request may accept {value} tokens (seq_lens_this_time) but the row has {limit} columns",
            ),
            Status(
                "kVerifyRowStart",
                3,
                "output_cum_offsets",
                "gives first output row {value}; it must be >= {limit}",
            ),
            Status(
                "kVerifyRowsVerifyTokens",
                4,
                "verify_tokens",
                _ROWS + " (check output_cum_offsets, seq_lens_this_time and max_seq_len)",
            ),
            Status("kVerifyRowsVerifyScores", 5, "verify_scores", _ROWS),
            Status("kVerifyRowsCandidateLen", 6, "actual_candidate_len", _ROWS),
            Status("kVerifyRowsSampled", 7, "sampled_token_ids", _ROWS),
            Status("kVerifyRowsTargetProbs", 8, "target_probs", _ROWS),
            Status("kVerifyRowsDraftProbs", 9, "draft_probs", _ROWS),
            Status(
                "kVerifyDraftId",
                10,
                "draft_tokens",
                "holds token id {value}, outside the vocabulary [0, {limit}) of target_probs",
            ),
            Status("kVerifyToppValue", 11, "topp", "is NaN or infinite; it must be finite"),
            Status("kVerifyScoresValue", 12, "verify_scores", _NON_FINITE),
            Status("kVerifyTargetProbsValue", 13, "target_probs", _NON_FINITE),
            Status("kVerifyDraftProbsValue", 14, "draft_probs", _NON_FINITE),
            # The CUDA kernel keeps a sampled row's chunk sums in shared memory (kVerifyMaxChunks
            # chunks of 1024 ids); the CPU driver takes any vocabulary.
            Status(
                "kVerifyVocabTooLarge",
                15,
                "target_probs",
                'has {value} columns; the CUDA kernel of "rejection" takes at most {limit}',
            ),
        ),
    ),
]
