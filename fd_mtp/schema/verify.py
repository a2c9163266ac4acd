"""Schemas of the verify ops: spec ../shared/spec/ops.md §5.7 (see fd_mtp/schema/__init__.py for the
format)."""

from . import Attr, Check, Op, Status, Tensor, Workspace

_ROWS = "row {value} is read but there are {limit} rows"
_REJECTION = "strategy == 4"  # "rejection"
_NON_FINITE = "holds NaN or inf at row {value}, column {limit}; it must be finite"

OPS = [
    Op(
        name="speculate_verify",
        entry="SpeculateVerify",
        spec="§5.7",
        doc="""Verify each request's draft tokens against the target and emit the accepted ones (spec §5.7).

        ``bsz = seq_lens_this_time.shape[0]``. Request b (skipped when ``is_block_step[b]`` or
        ``stop_flags[b]``: nothing written, ``accept_num`` keeps its old value) verifies
        ``n = seq_lens_this_time[b]`` tokens ``draft_tokens[b, 0..n-1]`` (column 0 = the last
        accepted token, 1.. = drafts) against the target's output rows ``start .. start+n-1``,
        ``start = b * max_seq_len - output_cum_offsets[b]``. Drafts are accepted left to right while
        the strategy's test passes; then one more token is emitted: the *bonus* token (all drafts
        accepted) or the *correction* token (sampled at the first rejected position). Every emitted
        token advances ``step_idx`` by one; an end token or ``step_idx >= max_dec_len`` stops the
        request (the latter writes ``end_tokens[0]`` in its place). ``accept_num[b]`` = emitted tokens
        (accepted drafts + 1, except when a draft stopped the request: then the drafts up to it).
        Prefill rows (``seq_lens_encoder[b] != 0``) and ``benchmark_mode`` emit exactly one token
        from row ``start``; ``accept_all_drafts`` accepts every draft.

        Strategies (``verify_strategy``):
            "topp" (FastDeploy's default): accept a draft in the row's top-p candidates
                (``verify_tokens[row, :actual_candidate_len[row]]``); the top-2 window rule (a draft
                equal to candidate 1 followed by ``verify_window`` top-1 matches accepts
                ``verify_window + 1`` drafts at once; a stop inside the window undoes one count of
                ``accept_num`` and ``step_idx``, as upstream). Bonus: top-p sample over the row's
                candidates (``enable_topp``) else candidate 0.
            "topk" (``SPECULATE_VERIFY_USE_TOPK``): accept iff draft == candidate 0; bonus as "topp".
            "target_match" (``SPECULATE_VERIFY_USE_TARGET_SAMPLING``): accept iff draft ==
                ``sampled_token_ids[row]``; bonus = ``sampled_token_ids[row]``.
            "greedy": accept iff draft == candidate 0 (the argmax); bonus = candidate 0; no
                randomness. Speculative output then equals plain greedy decoding.
            "rejection": lossless speculative sampling (Leviathan et al. 2023, Chen et al. 2023).
                At position i with draft d: accept iff ``u * q(d) <= p(d)`` (u = draw 2i, p =
                ``target_probs[row]``, q = ``draft_probs[row]`` or one-hot on d when None); on
                rejection the correction token is sampled from ``max(0, p - q)`` (draw 2i+1); the
                bonus token is sampled from p (draw 2i+1), by an inverse CDF over blockwise float32
                sums (see Cost). Emitted tokens are distributed as p.

        Args (per-request tensors are ``[bsz]`` or ``[bsz, 1]`` with at least bsz entries; **W** =
        written in place):
            sampled_token_ids: ``[T]`` or ``[T, 1]`` int64, read: the target's sampled tokens, one
                per output row ("target_match").
            accept_tokens: ``[Bm, Wa]`` int64, **W**: the emitted tokens at columns ``0..acc-1``;
                later columns are left stale.
            accept_num: int32, **W**: tokens emitted this step (running requests only).
            step_idx: int64, **W**. stop_flags: bool, **W**.
            seq_lens_encoder: int32, read. seq_lens_decoder: unused (any dtype and shape).
            draft_tokens: ``[>=bsz, D]`` int64, read.
            seq_lens_this_time: int32 ``[bsz]``, read; defines bsz.
            verify_tokens: ``[T, C]`` int64, read: top-p candidates (``top_p_candidates``), argmax
                in column 0. verify_scores: ``[T, C]`` float32, read: their probabilities.
            max_dec_len: int64, read. end_tokens: ``[E >= 1]`` or ``[E, 1]`` int64, read.
            is_block_step: bool, read. output_cum_offsets: int32, read.
            actual_candidate_len: ``[T]`` int32, read. actual_draft_token_nums: unused (any tensor).
            topp: float32, read: per-request top-p threshold of TOPP.
            max_seq_len (int): the ``L_in`` the offsets were built with. verify_window (int, >= 0).
            enable_topp, benchmark_mode, accept_all_drafts (bool).
            seed, offset: keyword-only RNG position (Philox4x32-10, key = seed, counter = (draw,
                request, offset)); draws are uniform in (0, 1]. Default: the op's call counter of
                the layer (fd_mtp.ops, fd_mtp.cuda and fd_mtp.reference each keep one: the calls
                before this one, advanced by every call; seed = offset = counter), like upstream's
                global host counters. Pass both to reproduce outputs exactly.
            verify_strategy: keyword-only, see above. Default: FastDeploy's environment variables,
                read by fd_mtp.envs at each call (never in the kernel):
                SPECULATE_VERIFY_USE_TARGET_SAMPLING != 0 -> "target_match", else
                SPECULATE_VERIFY_USE_TOPK != 0 -> "topk", else "topp".
            prefill_one_step_stop: keyword-only; stop every request after its step-3 token.
                Default: ``PREFILL_NODE_ONE_STEP_STOP`` starts with "1" (read by fd_mtp.envs).
            target_probs: keyword-only ``[T, V]`` float32, required by "rejection" (ignored
                otherwise): row r = the target's sampling distribution (after temperature/top-k/p).
            draft_probs: keyword-only ``[T, V]`` float32 or None ("rejection" only): row ``start+i``
                = the distribution draft ``i+1`` was drawn from; None = greedy drafter. A
                ``draft_probs`` with no rows while ``target_probs`` has rows is refused (Paddle would
                hand it to the op as absent, i.e. as a greedy drafter).

        Returns:
            None. Raises ValueError naming the argument on bad shapes/dtypes/places, when a request
            would read or write outside its rows (draft/accept width, output rows), or a draft id is
            outside ``[0, V)`` for "rejection"; nothing is written then.

        NaN / inf (refused, nothing written; the reference raises the same): a float a running
        request's decision reads must be finite: ``topp[b]`` and the request's ``verify_scores``
        rows (every column) when the bonus token is a TOPP sample ("topp" / "topk" with
        ``enable_topp``); for "rejection" the entries its accept walk reads (``target_probs[row,
        d]`` and ``draft_probs[row, d]`` of each tested draft d, in position order), then every
        column of the one row it samples from (the rejected position's target row and, with
        ``draft_probs``, its draft row; or the bonus position's target row), unless an accepted
        draft stopped the request. Floats no decision reads (other strategies, stopped /
        block-stepped requests, rows of accepted positions, rows after the first rejection, rows of
        no request) are not inspected.

        Differences from upstream: the RNG is Philox4x32-10 instead of curand XORWOW (same role,
        different numbers; reproducible on CPU and GPU); ``accept_tokens`` uses its own row width
        (upstream strides it with ``draft_tokens.shape[1]``; equal for FastDeploy's ``[B, K+1]``
        buffers); no ``bsz <= 512`` cap; out-of-range reads are errors instead of undefined; the
        "greedy" and "rejection" strategies are new.

        Cost: one thread per request (CPU loop / CUDA grid-stride), except "rejection": it reads the
        drafts' entries of the rows it accepts and one sampled row per request (two rows for a
        residual with ``draft_probs``), once: the check of a request scans that row for NaN / inf
        and sums it in the same pass, keeping the token until every request passed (the CPU sums 32
        lanes at once, vectorised; the CUDA kernel runs one block per request, with fd_mtp.cuda's
        per-stream workspace; the Paddle GPU branch has none yet and reads the row a second time).
        The sampling sums are defined blockwise (chunks of 1024 ids, 32 lanes of 32 steps;
        ``fd_mtp.reference.verify``'s docstring), identical on the CPU, the GPU and in the
        reference, so the sampled token is reproducible bit for bit.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> acc_tok, acc_num = i64([[0, 0, 0]]), i32([0])
            >>> step, stop = i64([5]), paddle.to_tensor([False])
            >>> vt = i64([[7, 1], [8, 1], [9, 1]])  # argmax of the 3 output rows: 7, 8, 9
            >>> ops.speculate_verify(
            ...     i64([7, 8, 9]), acc_tok, acc_num, step, stop, i32([0]), i32([0]),
            ...     i64([[4, 7, 3]]), i32([3]), vt, paddle.zeros([3, 2]), i64([100]), i64([2]),
            ...     paddle.to_tensor([False]), i32([0]), i32([1, 1, 1]), i32([2]),
            ...     paddle.to_tensor([1.0]), 3, 2, True, False, False, verify_strategy="greedy")
            >>> acc_tok.tolist(), acc_num.tolist(), step.tolist()
            ([[7, 8, 0]], [2], [7])
""",
        batch="seq_lens_this_time",
        kernel="speculate_verify",
        cpu="speculate_verify_cpu",
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
            Attr("seed", "int64", min=0, kw=True, counter=True, doc="None: the call counter"),
            Attr("offset", "int64", min=0, kw=True, counter=True, doc="None: the call counter"),
            # None: the first of FastDeploy's variables that is not 0 picks (fd_mtp.envs), else
            # "topp"; the kernel takes the index (VerifyStrategy, speculate_verify.h)
            Attr(
                "strategy",
                "int",
                min=0,
                max=4,
                kw=True,
                py="verify_strategy",
                choices=("topp", "topk", "target_match", "greedy", "rejection"),
                env_choices=(
                    ("SPECULATE_VERIFY_USE_TARGET_SAMPLING", "target_match"),
                    ("SPECULATE_VERIFY_USE_TOPK", "topk"),
                ),
            ),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP"),
            # "rejection" (strategy 4) only: the wrappers pass None otherwise
            Tensor("target_probs", "float32[Tp, V]", optional=True, kw=True, only_if=_REJECTION),
            Tensor("draft_probs", "float32[Tq, Vq]", optional=True, kw=True, only_if=_REJECTION),
        ),
        # the CUDA kernel of "rejection" samples in its check pass and keeps the tokens here
        workspaces=(Workspace("sample_tokens", "int64[B]", "verify_sample_tokens", cpu=False),),
        checks=(
            Check(
                "draft_probs",
                "not given(target_probs) or not given(draft_probs) or dims.Vq == dims.V",
                "must have {dims.V} columns, got shape {shape(draft_probs)}",
            ),
        ),
        # Paddle hands a zero-size optional tensor to the op as absent (a greedy drafter)
        python_checks=(
            Check(
                "target_probs",
                f"not ({_REJECTION}) or given(target_probs)",
                'is required by the "rejection" strategy',
            ),
            Check(
                "draft_probs",
                "not given(draft_probs) or rank(draft_probs) != 2 or dim(draft_probs, 0) > 0 "
                "or rank(target_probs) != 2 or dim(target_probs, 0) == 0",
                "has no rows (shape {shape(draft_probs)}) but target_probs has "
                "{dim(target_probs, 0)}; pass None for a greedy drafter",
            ),
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
