"""Schemas of the draft-model (MTP proposer) ops: spec ../shared/spec/ops.md §6."""

from . import Attr, Check, Op, Out, Require, Rows, Status, Tensor, Workspace

# The eagle row gathers: the output's rows are data (counted by the plan, read back on a GPU;
# fd_mtp.cuda's padded=True keeps the input's T rows); the plan's source rows in a persistent
# per-stream workspace on the GPU.
GATHER_ROWS = Rows("R", param="out_rows", capacity="T", live="live_rows")
GATHER_PARAMS = {"bsz": "B", "input_rows": "T", "row_bytes": "row_bytes(input)"}
GATHER_SOURCES = Workspace("src_rows", "int64[T]", key="eagle_src_rows", cpu=False)

OPS = [
    Op(
        name="draft_model_postprocess",
        entry="DraftModelPostprocess",
        spec="§6.5",
        doc="""Set the target's per-request token count for the next verify step (spec §6.5).

        ``bsz = base_model_seq_lens_this_time.shape[0]``. For each request b:
        stopped -> 0; running with ``seq_lens_encoder[b] == 0`` -> the number of
        entries of ``base_model_draft_tokens[b]`` that are not -1 (the whole row, not
        a prefix); running and prefilling -> unchanged.

        Args:
            base_model_draft_tokens: ``[>=bsz, K+1]`` int64, read. Target's draft row
                ``[last accepted, d1, ..., dK]``, -1 where no draft.
            base_model_seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, **written**.
            base_model_seq_lens_encoder: ``[>=bsz]`` int32, read.
            base_model_stop_flags: ``[>=bsz]`` bool, read.

        Returns:
            None (like FastDeploy's op).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> draft = paddle.to_tensor([[7, 8, -1], [5, -1, 6], [1, 2, 3]], dtype="int64")
            >>> this_time = paddle.to_tensor([9, 9, 9], dtype="int32")
            >>> enc = paddle.to_tensor([0, 0, 4], dtype="int32")
            >>> stop = paddle.to_tensor([False, False, False])
            >>> ops.draft_model_postprocess(draft, this_time, enc, stop)
            >>> this_time.tolist()
            [2, 2, 9]
        """,
        batch="base_model_seq_lens_this_time",
        kernel="draft_model_postprocess",
        cpu="draft_model_postprocess_cpu",
        params="DraftModelPostprocessParams",
        extra_params={"draft_cols": "Db", "bsz": "B"},
        args=(
            Tensor("base_model_draft_tokens", "int64[>=B, Db]"),
            Tensor("base_model_seq_lens_this_time", "int32[B]", "written"),
            Tensor("base_model_seq_lens_encoder", "int32[>=B]"),
            Tensor("base_model_stop_flags", "bool[>=B]"),
        ),
    ),
    Op(
        name="draft_model_preprocess",
        entry="DraftModelPreprocess",
        spec="§6.1",
        doc="""Prepare the draft model's inputs from what the target accepted (spec §6.1).

        ``bsz = seq_lens_this_time.shape[0]``; every other per-request tensor needs at least
        ``bsz`` entries (pass full ``[max_num_seqs]`` buffers, not a ``[:num_running]`` slice).

        Mode A (``splitwise_prefill``, P node): prefilling requests get the target's first token
        written into their draft prompt and run; the others stop. Mode B (normal): the target's
        draft row is reset to ``[kept, -1, ...]``; block-stepped requests stop (v1 sets
        ``is_block_step``, v0 ``batch_drop``); prefills get the first token (also ``pre_ids[b, 0]``);
        decodes rewind ``recompute_token_num`` positions (or, when the draft had stopped, restart
        from the target's state) and take the ``accept_num`` accepted tokens as their input
        (``draft_tokens``) and history (``pre_ids``).

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            draft_tokens: ``[>=bsz, Dd]`` int64, **W**: the draft's input tokens.
            input_ids: ``[>=bsz, Li]`` int64, **W**: the draft prompt.
            stop_flags: bool, **W**.
            seq_lens_this_time: **W**; defines bsz. May be the same tensor as
                ``base_model_seq_lens_this_time`` (request b is read before it is written).
            seq_lens_encoder, seq_lens_decoder: **W**.
            step_idx: int64, **W**.
            not_need_stop: ``[1]`` bool on the CPU, **W**: True when any request drafts.
            is_block_step, batch_drop: bool, **W**. (FastDeploy's mtp.py passes its
                ``batch_drop`` at position 8 and ``is_block_step`` at 9; keep that at the call
                site to reproduce its pipeline.)
            pre_ids: ``[>=bsz, Lp]`` int64, **W**: the draft's history (token k at index k-1).
            mask_rollback, recompute_token_num: **W**.
            accept_tokens: ``[>=bsz, Wa]`` int64, read (target).
            accept_num: read (target); must be in ``[0, min(Dd, Wa)]`` for decoding requests.
            base_model_seq_lens_this_time, base_model_seq_lens_decoder: read.
            base_model_seq_lens_encoder: unused (kept for the signature; any dtype and shape).
            base_model_step_idx: int64, read. base_model_stop_flags, base_model_is_block_step:
                bool, read.
            base_model_draft_tokens: ``[>=bsz, Db]`` int64, **W**: columns 1.. set to -1.
            num_model_step (int), truncate_first_token, splitwise_prefill,
                kvcache_scheduler_v1 (bool): attributes.

        Returns:
            None. Raises ValueError naming the argument on bad shapes/dtypes, on an
            ``accept_num`` outside the rows, or on a write past ``input_ids``/``pre_ids``;
            in that case nothing is written. (Upstream writes out of bounds and caps bsz at 512.)
        """,
        batch="seq_lens_this_time",
        kernel="draft_model_preprocess",
        cpu="draft_model_preprocess_cpu",
        flag=("not_need_stop", "count > 0"),
        params="DraftModelPreprocessParams",
        extra_params={
            "draft_tokens_cols": "Dd",
            "input_ids_cols": "Li",
            "pre_ids_cols": "Lp",
            "accept_tokens_cols": "Wa",
            "base_model_draft_tokens_cols": "Db",
            "bsz": "B",
        },
        args=(
            Tensor("draft_tokens", "int64[>=B, Dd]", "written"),
            Tensor("input_ids", "int64[>=B, Li]", "written"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor(
                "seq_lens_this_time",
                "int32[B]",
                "written",
                doc="may be base_model_seq_lens_this_time itself",
            ),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("is_block_step", "bool[>=B]", "written"),
            Tensor("batch_drop", "bool[>=B]", "written"),
            Tensor("pre_ids", "int64[>=B, Lp]", "written"),
            Tensor("mask_rollback", "int32[>=B]", "written"),
            Tensor("recompute_token_num", "int32[>=B]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]"),
            Tensor("accept_num", "int32[>=B]"),
            Tensor("base_model_seq_lens_this_time", "int32[>=B]"),
            Tensor("base_model_seq_lens_encoder", "any[]", "unused", param=None),
            Tensor("base_model_seq_lens_decoder", "int32[>=B]"),
            Tensor("base_model_step_idx", "int64[>=B]"),
            Tensor("base_model_stop_flags", "bool[>=B]"),
            Tensor("base_model_is_block_step", "bool[>=B]"),
            Tensor(
                "base_model_draft_tokens",
                "int64[>=B, Db]",
                "written",
                doc="columns 1..Db-1 reset to -1",
            ),
            Attr("num_model_step", "int", min=1),
            Attr("truncate_first_token", "bool"),
            Attr("splitwise_prefill", "bool"),
            Attr("kvcache_scheduler_v1", "bool"),
        ),
        status=(
            Status(
                "kPreprocessInputIdsColumn",
                1,
                "input_ids",
                "the first accepted token goes to column {value} but the row has {limit} columns",
            ),
            Status(
                "kPreprocessPreIdsColumn",
                2,
                "pre_ids",
                "accepted tokens go to column {value} but the row has {limit} columns",
            ),
            Status(
                "kPreprocessAcceptNum",
                3,
                "accept_num",
                "is {value}; it must be in [0, {limit}] (columns of draft_tokens and accept_tokens)",
            ),
        ),
    ),
    Op(
        name="draft_model_update",
        entry="DraftModelUpdate",
        spec="§6.3",
        doc="""Record the token each request's draft sampled in substep ``substep`` (spec §6.3).

        ``bsz = seq_lens_this_time.shape[0]``. For a running request b, its token is
        ``inter_next_tokens[b * max_seq_len - output_cum_offsets[b] + (q - 1 if decoding else 0)]``
        (``q = seq_lens_this_time[b]``). It becomes ``draft_tokens[b, 0]`` and
        ``base_model_draft_tokens[b, substep + 1]``, is appended to ``pre_ids`` at the new
        ``step_idx``; a decode advances ``seq_lens_decoder``/``step_idx`` by q, a prefill moves
        ``seq_lens_encoder`` into ``seq_lens_decoder`` and advances ``step_idx`` by 1. An end id
        (which stays the proposed draft) or ``prefill_one_step_stop`` stops the request; reaching
        ``max_dec_len`` stops it and writes ``end_ids[0]`` at ``draft_tokens[b, q - 1]`` and in
        the target row. Stopped requests get -1 drafts. Finally running requests get
        ``seq_lens_this_time = 1``, stopped ones 0 (and ``seq_lens_encoder = 0``).

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            inter_next_tokens: int64, any shape (read flat): the sampled tokens, one per
                output row.
            draft_tokens: ``[>=bsz, Dd]`` int64, **W**.
            pre_ids: ``[>=bsz, Lp >= 2]`` int64, **W**.
            seq_lens_this_time: **W**; defines bsz. seq_lens_encoder, seq_lens_decoder: **W**.
            step_idx: int64, **W**.
            output_cum_offsets: read (from ``pre_process`` with ``max_seq_len``).
            stop_flags: bool, **W**.
            not_need_stop: ``[1]`` bool on the CPU, **W**: True unless every request is stopped.
            max_dec_len: int64, read. end_ids: ``[E]`` or ``[E, 1]`` int64, read (E >= 1).
            base_model_draft_tokens: ``[>=bsz, Db > substep + 1]`` int64, **W** (column
                ``substep + 1``).
            max_seq_len (int): the ``L_in`` the offsets were built with. substep (int).
            prefill_one_step_stop: keyword-only; stop every request after this update (a PD
                prefill node). Default: FastDeploy's environment variable
                ``PREFILL_NODE_ONE_STEP_STOP == "1"``, read here, never in the kernel.

        Returns:
            None. Raises ValueError naming the argument on bad input (nothing written). Unlike
            upstream, a long prefill chunk that reaches ``max_dec_len`` does not write
            ``end_ids[0]`` past the end of its ``draft_tokens`` row.
        """,
        batch="seq_lens_this_time",
        kernel="draft_model_update",
        cpu="draft_model_update_cpu",
        flag=("not_need_stop", "count < dims.B"),
        requires=(Require("base_model_draft_tokens", "Db", "substep + 2"),),
        params="DraftModelUpdateParams",
        extra_params={
            "num_next_tokens": "numel(inter_next_tokens)",
            "draft_tokens_cols": "Dd",
            "pre_ids_cols": "Lp",
            "num_end_ids": "numel(end_ids)",
            "base_model_draft_tokens_cols": "Db",
            "bsz": "B",
        },
        args=(
            Tensor("inter_next_tokens", "int64[]", doc="read flat: one token per output row"),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written"),
            Tensor("pre_ids", "int64[>=B, Lp>=2]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]", "written"),
            Tensor("output_cum_offsets", "int32[>=B]"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("max_dec_len", "int64[>=B]"),
            Tensor("end_ids", "int64[>=1]"),
            Tensor(
                "base_model_draft_tokens",
                "int64[>=B, Db]",
                "written",
                doc="column substep + 1 written",
            ),
            Attr("max_seq_len", "int", min=1),
            Attr("substep", "int", min=0),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP"),
        ),
        status=(
            Status(
                "kUpdateNextTokensRow",
                1,
                "inter_next_tokens",
                "row {value} is read but there are {limit} rows (check output_cum_offsets, "
                "seq_lens_this_time and max_seq_len)",
            ),
            Status(
                "kUpdatePreIdsColumn",
                2,
                "pre_ids",
                "the sampled token goes to column {value} but the row has {limit} columns",
            ),
            Status(
                "kUpdateEmptyRunningRequest",
                3,
                "seq_lens_this_time",
                "is {value} for a request that is not stopped (it must be >= {limit})",
            ),
            Status(
                "kUpdateDecoderOverflow",
                4,
                "seq_lens_decoder",
                "would become {value}, past the int32 range (at most {limit})",
            ),
        ),
    ),
    Op(
        name="eagle_get_hidden_states",
        entry="EagleGetHiddenStates",
        spec="§6.2",
        doc="""Gather the target hidden states the draft consumes (spec §6.2).

        Walks the requests in order over the target's packed rows: a prefilling draft request
        (``seq_lens_encoder[b] > 0``) takes its ``seq_lens_encoder[b]`` rows one to one; a request
        that does not draft skips its ``base_model_seq_lens_this_time[b]`` rows; a decoding one
        takes the first ``accept_nums[b]`` of its ``base_model_seq_lens_this_time[b]`` rows.

        Args:
            input: ``[Tin, H]`` float32, float16 or bfloat16: the target model's output.
            seq_lens_this_time: int32 ``[bsz]`` (draft, after ``draft_model_preprocess``);
                defines bsz. seq_lens_encoder: int32 (draft).
            seq_lens_decoder, stop_flags, base_model_seq_lens_encoder: unused (kept for the
                signature; any dtype and shape). actual_draft_token_num (int): unused.
            accept_nums: int32 (target). base_model_seq_lens_this_time: int32.

        Returns:
            A new ``[Tout, H]`` tensor of ``input``'s dtype. Raises ValueError naming the
            argument when the requests would read past ``input`` or ``accept_nums`` exceeds its
            request's rows.

        NaN / inf: a pure row copy; the values of ``input`` are never inspected, so NaN and inf pass
        through bit for bit, as in the numpy reference.
        """,
        batch="seq_lens_this_time",
        place="input",
        kernel="eagle_hidden_states",
        params="EagleHiddenStatesParams",
        cpu="eagle_get_hidden_states_cpu",
        extra_params=GATHER_PARAMS,
        rows=GATHER_ROWS,
        outputs=(Out("out", "any[R, H]", like="input"),),
        workspaces=(GATHER_SOURCES,),
        args=(
            Tensor(
                "input",
                "float32|float16|bfloat16[T, H>=0]",
                doc="the target's hidden states",
            ),
            Tensor("seq_lens_this_time", "int32[B]", doc="draft, after draft_model_preprocess"),
            Tensor("seq_lens_encoder", "int32[>=B]", doc="draft"),
            Tensor("seq_lens_decoder", "any[]", "unused", param=None),
            Tensor("stop_flags", "any[]", "unused", param=None),
            Tensor("accept_nums", "int32[>=B]", doc="target"),
            Tensor("base_model_seq_lens_this_time", "int32[>=B]"),
            Tensor("base_model_seq_lens_encoder", "any[]", "unused", param=None),
            Attr("actual_draft_token_num", "int", param=None, doc="unused"),
        ),
        status=(
            Status(
                "kEagleInputRows",
                1,
                "input",
                "the requests consume {value} rows but input has {limit} rows",
            ),
            Status(
                "kEagleAcceptNums",
                2,
                "accept_nums",
                "is {value}; it must be in [0, base_model_seq_lens_this_time] = [0, {limit}]",
            ),
            Status(
                "kEagleNegativeCount",
                4,
                "seq_lens",
                "a token count is {value}; counts must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="eagle_get_self_hidden_states",
        entry="EagleGetSelfHiddenStates",
        spec="§6.4",
        doc="""Keep each running request's last hidden row for the next substep (spec §6.4).

        Walks the requests over the rows of this substep's output (``input``): a running request
        with ``step_idx == 1`` (it came from prefill) has one row; another running request
        had ``last_seq_lens_this_time[b]`` rows and keeps the last; a stopped request contributes
        nothing and consumes 1 row (``step_idx == 1`` and it ran) or ``last_seq_lens_this_time[b]``.

        Args:
            input: ``[Tin, H]`` float32, float16 or bfloat16.
            last_seq_lens_this_time: int32 ``[>=bsz]``: this_time before the substep.
            seq_lens_this_time: int32 ``[bsz]`` after ``draft_model_update``; defines bsz.
            step_idx: int64 ``[>=bsz]`` after ``draft_model_update``.

        Returns:
            A new ``[Tout, H]`` tensor, one row per running request.

        NaN / inf: a pure row copy; the values of ``input`` are never inspected, so NaN and inf pass
        through bit for bit, as in the numpy reference.
        """,
        batch="seq_lens_this_time",
        place="input",
        kernel="eagle_hidden_states",
        params="EagleSelfHiddenStatesParams",
        cpu="eagle_get_self_hidden_states_cpu",
        extra_params=GATHER_PARAMS,
        rows=GATHER_ROWS,
        outputs=(Out("out", "any[R, H]", like="input"),),
        workspaces=(GATHER_SOURCES,),
        args=(
            Tensor(
                "input",
                "float32|float16|bfloat16[T, H>=0]",
                doc="this substep's hidden states",
            ),
            Tensor("last_seq_lens_this_time", "int32[>=B]", doc="this_time before the substep"),
            Tensor("seq_lens_this_time", "int32[B]", doc="after draft_model_update"),
            Tensor("step_idx", "int64[>=B]", doc="after draft_model_update"),
        ),
        status=(
            Status(
                "kEagleInputRows",
                1,
                "input",
                "the requests consume {value} rows but input has {limit} rows",
            ),
            Status(
                "kEagleLastSeqLens",
                3,
                "last_seq_lens_this_time",
                "is {value} for a request that runs this substep (it must be >= {limit})",
            ),
            Status(
                "kEagleNegativeCount",
                4,
                "seq_lens",
                "a token count is {value}; counts must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="mtp_step_paddle",
        entry="MtpStepPaddle",
        spec="§6.6",
        doc="""The proposer's decode KV-block manager on the v0 scheduler (spec §6.6).

        1. Requests stopped by the target or dropped return their ``used_list_len[b]`` decode
           blocks (``block_tables[b, encoder_block_lens[b]:...]``) to the free list.
        2. Running requests whose slot ``(seq_lens_decoder + max_draft_tokens + 1) // block_size``
           is -1 need a block.
        3. While more need one than are free, the request holding the most decode blocks (lowest
           index on ties) is dropped: its blocks are freed, ``stop_flags``/``batch_drop`` set,
           ``seq_lens_this_time``/``seq_lens_decoder`` zeroed.
        4. Each needy request not dropped pops a block from the end of the free list.

        Args (int32 ``[bsz]`` unless noted; **W** = written in place):
            base_model_stop_flags: bool, read. stop_flags, batch_drop: bool, **W**.
            seq_lens_this_time: **W**; defines bsz. seq_lens_encoder: unused (any tensor).
            seq_lens_decoder: **W**. block_tables: ``[>=bsz, NB]``, **W**.
            encoder_block_lens, used_list_len: **W**.
            free_list: ``[F]`` (1-D, as FastDeploy's; ``[F, 1]`` and other ranks are refused),
                **W**. free_list_len: ``[1]``, **W**.
            block_size, max_draft_tokens (int): attributes.

        Returns:
            None. Deterministic (batch order), unlike upstream's atomics. Where upstream would
            loop forever (blocks needed and none to preempt) or append past ``free_list``, raises
            ValueError naming ``free_list`` and writes nothing.
        """,
        batch="seq_lens_this_time",
        kernel="mtp_step",
        params="MtpStepParams",
        cpu="mtp_step_cpu",
        launcher="mtp_step_cuda",
        workspaces=(Workspace("need_list", "int32[B]", "mtp_step_need_list"),),
        checks=(  # FastDeploy's free lists are 1-D ([F], paddle.to_tensor of a list)
            Check(
                "free_list",
                "rank(free_list) == 1",
                "must have shape [F] (1-D), got {shape(free_list)}",
            ),
        ),
        extra_params={
            "num_blocks_per_seq": "NB",
            "free_list_capacity": "numel(free_list)",
            "bsz": "B",
        },
        args=(
            Tensor("base_model_stop_flags", "bool[>=B]"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("batch_drop", "bool[>=B]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "any[]", "unused", param=None),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("block_tables", "int32[>=B, NB]", "written"),
            Tensor("encoder_block_lens", "int32[>=B]", "written"),
            Tensor("used_list_len", "int32[>=B]", "written"),
            Tensor("free_list", "int32[]", "written"),
            Tensor("free_list_len", "int32[1]", "written"),
            Attr("block_size", "int", min=1),
            Attr("max_draft_tokens", "int", min=0),
        ),
        status=(
            Status(
                "kMtpStepOutOfBlocks",
                1,
                "free_list",
                "is exhausted: {value} requests need a decode block but at most {limit} can be "
                "freed, and no request holds a decode block to preempt",
            ),
            Status(
                "kMtpStepFreeListFull",
                2,
                "free_list",
                "is too small: returned blocks would fill {value} entries but it has {limit}",
            ),
            Status(
                "kMtpStepUsedListLen",
                3,
                "used_list_len",
                "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)",
            ),
            Status(
                "kMtpStepFreeListLen", 4, "free_list_len", "is {value}; it must be in [0, {limit}]"
            ),
            Status(
                "kMtpStepNegativeDecoder",
                5,
                "seq_lens_decoder",
                "is {value} for a running request; it must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="draft_model_set_value_by_flags",
        entry="DraftModelSetValueByFlags",
        spec="§6.9",
        doc="""Write each running request's tokens of this step into its history (spec §6.9).

        ``bsz = seq_lens_this_time.shape[0]``. For request b with ``seq_lens_this_time[b] != 0``
        and not ``stop_flags[b]``, with ``n = seq_lens_this_time[b]`` and ``s = step_idx[b]``:

        * decode step (``s > 1``): ``pre_ids_all[b, s - n + 1 .. s] = draft_tokens[b, 0 .. n - 1]``
          (the last token at column ``s``, the generated-token convention);
        * first step (``s == 1``): ``pre_ids_all[b, 1] = draft_tokens[b, 0]``;
        * then ``seq_lens_this_time[b] = 1`` (whatever ``s``).

        A custom op of FastDeploy that its MTP proposer does not call (spec §6.9); kept for
        FastDeploy-style code that does.

        Args (per-request tensors are ``[bsz]`` or ``[bsz, 1]`` with at least bsz entries;
        **W** = written in place):
            draft_tokens: ``[>=bsz, Dd]`` int64, read.
            pre_ids_all: ``[>=bsz, Lp]`` int64, **W**: the history rows.
            stop_flags: bool, read.
            seq_lens_this_time: ``[bsz]`` int32, **W** (upstream writes it although its inplace
                map does not say so); defines bsz.
            seq_lens_encoder, seq_lens_decoder: unused (any dtype and shape; FastDeploy passes
                them).
            step_idx: int64, read.

        Returns:
            None. Raises ValueError naming the argument on bad shapes / dtypes / places, or when a
            running request would read past its ``draft_tokens`` row (``n > Dd``) or write outside
            its ``pre_ids_all`` row; nothing is written then.

        Differences from upstream: no ``bsz <= 1024`` cap (upstream's single block); rows past
        the batch are checked instead of read or written out of bounds.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> pre = i64([[-1, 5, 6, 0, 0, 0], [-1, 0, 0, 0, 0, 0]])
            >>> this_time = paddle.to_tensor([2, 1], dtype="int32")
            >>> ops.draft_model_set_value_by_flags(
            ...     i64([[7, 8], [9, 0]]), pre, paddle.to_tensor([False, False]), this_time,
            ...     None, None, i64([4, 1]))
            >>> pre.tolist(), this_time.tolist()
            ([[-1, 5, 6, 7, 8, 0], [-1, 9, 0, 0, 0, 0]], [1, 1])
        """,
        batch="seq_lens_this_time",
        kernel="draft_model_set_value_by_flags",
        cpu="draft_set_value_cpu",
        params="DraftSetValueParams",
        extra_params={"draft_tokens_cols": "Dd", "pre_ids_cols": "Lp", "bs": "B"},
        args=(
            Tensor("draft_tokens", "int64[>=B, Dd]"),
            Tensor("pre_ids_all", "int64[>=B, Lp]", "written"),
            Tensor("stop_flags", "bool[>=B]"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "any[]", "unused", optional=True, param=None),
            Tensor("seq_lens_decoder", "any[]", "unused", optional=True, param=None),
            Tensor("step_idx", "int64[>=B]"),
        ),
        status=(
            Status(
                "kDraftSetValueDraftColumn",
                1,
                "draft_tokens",
                "row is read up to column {value} (seq_lens_this_time) but has {limit} columns",
            ),
            Status(
                "kDraftSetValuePreIdsColumn",
                2,
                "pre_ids_all",
                "column {value} would be written but the row has {limit} columns",
            ),
        ),
    ),
]
