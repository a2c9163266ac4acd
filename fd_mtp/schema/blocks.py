"""Schemas of the target-side KV-block managers: spec ../shared/spec/ops.md §5.13-§5.15, §11 (see
fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Op, Status, Tensor, Together
from ._block_step import STEP_EXTRA, STEP_STATUS, step_args

OPS = [
    Op(
        name="recover_decode_task",
        entry="RecoverDecodeTask",
        spec="§5.15",
        doc="""Resume block-stepped requests whose next KV block was granted (v1 scheduler, spec §5.15).

        ``bsz = seq_lens_this_time.shape[0]``. For each b < bsz with ``is_block_step[b]``: the slot
        is ``(step_seq_lens_decoder[b] + 2 * max_draft_tokens + 1) // block_size`` (speculative
        variant) or ``step_seq_lens_decoder[b] // block_size`` (non-speculative variant: the three
        speculative tensors are None). When the block table holds a block there, the request
        resumes: ``is_block_step``/``stop_flags`` False, ``seq_lens_encoder`` 0,
        ``seq_lens_decoder = step_seq_lens_decoder``, and ``seq_lens_this_time =
        step_seq_lens_this_time`` with ``draft_tokens[b, :n] = step_draft_tokens[b, :n]`` (n = that
        count), or ``seq_lens_this_time = 1`` in the non-speculative variant.

        Deliberate difference: upstream clamps the slot with ``min(slot, NB)`` and so reads
        ``block_tables[b, NB]``, one past the row (the next row's first entry, or past the tensor
        for the last row). Here a slot at or past the end of the row (``slot >= NB``) counts as
        "no block left to wait for" and the request resumes, matching ``speculate_schedule_cache``,
        which never block-steps a request whose slot lies past the row (its slot
        ``(dec + 2K + 2) // block_size`` is >= this one, so a state it produced never needs the
        clamp). Nothing outside the row is read.

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            stop_flags: bool, **W**. seq_lens_this_time: **W**; defines bsz.
            seq_lens_encoder, seq_lens_decoder: **W**. step_seq_lens_decoder: read.
            block_tables: ``[>=bsz, NB]`` int32, read. is_block_step: bool, **W**.
            draft_tokens: ``[>=bsz, Dd]`` int64 or None, **W**.
            step_draft_tokens: ``[>=bsz, Ds]`` int64 or None, read.
            step_seq_lens_this_time: int32 or None, read; must be in ``[0, min(Dd, Ds)]`` for a
                request that resumes.
            block_size, max_draft_tokens (int): attributes.

        Returns:
            None. Raises ValueError naming the argument on bad input (nothing written): shapes and
            dtypes, only some of the three speculative tensors given, a negative
            ``step_seq_lens_decoder`` of a block-stepped request, a draft row that does not fit.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> stop = paddle.to_tensor([True, True]); this_time = i32([0, 0])
            >>> enc = i32([0, 0]); dec = i32([0, 0]); block_step = paddle.to_tensor([True, True])
            >>> draft = paddle.to_tensor([[0, 0], [0, 0]], dtype="int64")
            >>> step_draft = paddle.to_tensor([[5, 6], [7, 8]], dtype="int64")
            >>> ops.recover_decode_task(stop, this_time, enc, dec, i32([4, 4]), i32([[0, 9], [1, -1]]),
            ...     block_step, draft, step_draft, i32([2, 2]), 4, 1)
            >>> block_step.tolist(), stop.tolist(), dec.tolist(), this_time.tolist(), draft.tolist()
            ([False, True], [False, True], [4, 0], [2, 0], [[5, 6], [0, 0]])
        """,
        batch="seq_lens_this_time",
        kernel="recover_decode_task",
        cpu="recover_decode_cpu",
        together=(
            Together(
                ("draft_tokens", "step_draft_tokens", "step_seq_lens_this_time"),
                "speculative variant",
            ),
        ),
        params="RecoverDecodeParams",
        extra_params={
            "num_blocks_per_seq": "NB",
            "draft_cols": "cols(draft_tokens)",
            "step_draft_cols": "cols(step_draft_tokens)",
            "bsz": "B",
        },
        args=(
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_seq_lens_decoder", "int32[>=B]"),
            Tensor("block_tables", "int32[>=B, NB]"),
            Tensor("is_block_step", "bool[>=B]", "written"),
            # The speculative variant: all three given, or all None (checked in apply).
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", optional=True),
            Tensor("step_draft_tokens", "int64[>=B, Ds]", optional=True),
            Tensor("step_seq_lens_this_time", "int32[>=B]", optional=True),
            Attr("block_size", "int", min=1),
            Attr("max_draft_tokens", "int", min=0),
        ),
        status=(
            Status(
                "kRecoverSlot",
                1,
                "step_seq_lens_decoder",
                "is {value} for a block-stepped request; it must be >= {limit}",
            ),
            Status(
                "kRecoverThisTime",
                2,
                "step_seq_lens_this_time",
                "is {value}; the draft row it restores must fit [0, {limit}] columns of draft_tokens "
                "and step_draft_tokens",
            ),
        ),
    ),
    Op(
        name="speculate_schedule_cache",
        entry="SpeculateScheduleCache",
        spec="§5.14",
        doc="""Block-step decoding requests whose next KV block is missing (v1 scheduler, spec §5.14).

        ``bsz = seq_lens_this_time.shape[0]`` (the running slice), ``max_bsz = stop_flags.shape[0]``.
        For each request b < bsz that is not stopped:

        * ``seq_lens_decoder < prompt_lens`` (an unfinished chunked prefill), or
          ``prefill_one_step_stop``: stop it (``stop_flags`` True; ``seq_lens_this_time``,
          ``seq_lens_decoder``, ``seq_lens_encoder``, ``accept_num`` 0). The scheduler re-inserts it.
        * else, when slot ``(seq_lens_decoder + 2 * max_draft_tokens + 2) // block_size`` lies inside
          the block-table row and holds -1: **block step**. ``step_seq_lens_this_time`` /
          ``step_seq_lens_decoder`` take ``seq_lens_this_time`` / ``seq_lens_decoder`` (then 0),
          ``step_draft_tokens[b, :Dd] = draft_tokens[b]``, ``accept_num`` 0, ``accept_tokens`` row -1,
          ``stop_flags`` and ``is_block_step`` True. ``recover_decode_task`` undoes it once the
          scheduler has granted the block.

        ``not_need_stop = (stopped requests among b < bsz after the call + (max_bsz - bsz)) <
        stop_nums[0]``.

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            draft_tokens: ``[>=bsz, Dd]`` int64, read (the target's draft row).
            block_tables: ``[>=bsz, NB]`` int32, read (upstream lists it as an output but never
                writes it).
            stop_flags: ``[max_bsz]`` bool, **W**; defines max_bsz.
            prompt_lens: int64, read (v1: prompt + already generated tokens).
            seq_lens_this_time: **W**; defines bsz. seq_lens_encoder, seq_lens_decoder: **W**.
            step_seq_lens_decoder: **W**. step_draft_tokens: ``[>=bsz, >=Dd]`` int64, **W**.
            step_seq_lens_this_time: **W**. accept_num: **W**.
            accept_tokens: ``[>=bsz, Wa]`` int64, **W** (the row of a block-stepped request -> -1).
            is_block_step: bool, **W**.
            not_need_stop: ``[1]`` bool on the CPU, **W**.
            stop_nums: ``[1]`` int64 on the device of seq_lens_this_time, read on the host (copied
                from the GPU).
            block_size, max_draft_tokens (int): attributes.
            prefill_one_step_stop: keyword-only; stop every running request (a PD prefill node).
                Default (None): FastDeploy's environment variable ``PREFILL_NODE_ONE_STEP_STOP_V1``
                (on when it starts with "1"), read by fd_mtp.envs at each call, never in the kernel.

        Returns:
            None. Raises ValueError naming the argument on bad shapes/dtypes or a negative
            ``seq_lens_decoder`` for a decoding request (upstream reads before the row); nothing is
            written then. No batch cap (upstream: bsz <= 512).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> draft = i64([[5, 6], [7, 8]]); tables = i32([[0, 1, -1], [2, 3, 4]])  # slot (4 + 4) // 4 = 2
            >>> stop = paddle.to_tensor([False, False]); this_time = i32([2, 2])
            >>> dec = i32([4, 4]); step_dec = i32([0, 0]); step_draft = i64([[0, 0], [0, 0]])
            >>> step_this_time = i32([0, 0]); acc = i32([1, 2]); acc_tok = i64([[5, 0], [7, 8]])
            >>> block_step = paddle.to_tensor([False, False]); nns = paddle.to_tensor([True])
            >>> ops.speculate_schedule_cache(draft, tables, stop, i64([3, 3]), this_time, i32([0, 0]),
            ...     dec, step_dec, step_draft, step_this_time, acc, acc_tok, block_step, nns,
            ...     i64([2]), 4, 1, prefill_one_step_stop=False)
            >>> block_step.tolist(), step_draft.tolist(), step_dec.tolist(), dec.tolist()
            ([True, False], [[5, 6], [0, 0]], [4, 0], [0, 4])
            >>> acc_tok.tolist(), nns.tolist()
            ([[-1, -1], [7, 8]], [True])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_schedule_cache",
        cpu="schedule_cache_cpu",
        flag=("not_need_stop", "count + (p.max_bsz - p.bsz) < host.stop_nums"),
        params="ScheduleCacheParams",
        extra_params={
            "draft_cols": "Dd",
            "num_blocks_per_seq": "NB",
            "step_draft_cols": "cols(step_draft_tokens)",
            "accept_cols": "Wa",
            "bsz": "B",
            "max_bsz": "rows(stop_flags)",
        },
        args=(
            Tensor("draft_tokens", "int64[>=B, Dd]"),
            Tensor("block_tables", "int32[>=B, NB]", doc="read (upstream lists it as an output)"),
            Tensor("stop_flags", "bool[>=B]", "written", doc="defines max_bsz"),
            Tensor("prompt_lens", "int64[>=B]"),
            Tensor(
                "seq_lens_this_time", "int32[B]", "written", doc="defines bsz (the running slice)"
            ),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_seq_lens_decoder", "int32[>=B]", "written"),
            Tensor(
                "step_draft_tokens",
                "int64[>=B, >=Dd]",
                "written",
                doc="the first Dd columns written",
            ),
            Tensor("step_seq_lens_this_time", "int32[>=B]", "written"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]", "written"),
            Tensor("is_block_step", "bool[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("stop_nums", "int64[1]", any_place=True, param=None, doc="read on the host"),
            Attr("block_size", "int", min=1),
            Attr("max_draft_tokens", "int", min=0),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP_V1"),
        ),
        status=(
            Status(
                "kScheduleCacheSlot",
                1,
                "seq_lens_decoder",
                "is {value} for a decoding request; it must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="speculate_step_paddle",
        entry="SpeculateStepPaddle",
        spec="§5.13",
        doc="""The target's decode KV-block manager on the v0 scheduler (spec §5.13, §11).

        ``bsz = seq_lens_this_time.shape[0]``, ``NB = block_tables.shape[1]``,
        ``max_decoder_block_num = input_ids.shape[1] // block_size``; a request's decode blocks are
        ``block_tables[b, encoder_block_lens[b] : encoder_block_lens[b] + used_list_len[b]]``.

        1. Finished requests (stopped, not block-stepped) get ``first_token_ids`` -1 and, when they
           hold decode blocks, append them to the free list (entries -1 in the table,
           ``encoder_block_lens`` and ``used_list_len`` 0). Other requests with
           ``seq_lens_this_time != 0`` whose slot ``(seq_lens_decoder + max_draft_tokens + 1) //
           block_size`` is inside the row and -1 join the need list, in batch order.
        2. While the need list is longer than the free list: preempt the request with the most decode
           blocks among those not block-stepped (ties: lowest b), sparing those holding exactly
           ``max_decoder_block_num`` until nothing else holds a block. Its decode blocks are appended
           to the free list (``used_list_len`` is kept), it is pushed on ``step_block_list``, leaves
           the need list, and gets ``stop_flags``/``is_block_step`` True and
           ``seq_lens_this_time``/``seq_lens_decoder``/``accept_num`` 0.
        3. Each need-list entry still running pops the top of the free list into its slot
           (``used_list_len`` + 1). ``need_block_list`` entries are reset to -1.
        4. Recovery of at most one request per call, the last pushed (LIFO): with
           ``want = min(used_list_len + 1, max_decoder_block_num - encoder_block_lens)`` and at least
           ``want`` free blocks, it leaves ``step_block_list``, gets ``want`` blocks from the free-list
           top (block i = the i-th popped, at ``encoder_block_lens + i``), and is re-prefilled:
           ``seq_lens_this_time = seq_lens_encoder = ori_seq_lens_encoder + step_idx``,
           ``stop_flags`` False, ``input_ids[r, 0] = first_token_ids[r]`` and
           ``input_ids[r, ori + i] = pre_ids[r, i + 1]`` for ``i < step_idx`` (the row becomes prompt
           + generated tokens). ``need_block_len`` and ``recover_lens`` end at 0.

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            stop_flags: bool, **W**. seq_lens_this_time: **W**; defines bsz.
            ori_seq_lens_encoder: read (FastDeploy passes ``step_seq_lens_encoder``: prompt lengths).
            seq_lens_encoder, seq_lens_decoder: **W**. block_tables: ``[>=bsz, NB]``, **W**.
            encoder_block_lens: **W**. is_block_step: bool, **W**.
            step_block_list: ``[S]``, **W**. step_lens: ``[1]``, **W**.
            recover_block_list: ``[R]``, **W**. recover_lens: ``[1]``, **W** (must be 0 on entry).
            need_block_list: ``[N]``, **W**. need_block_len: ``[1]``, **W** (must be 0 on entry).
            used_list_len: **W**. free_list: ``[F]``, **W**. free_list_len: ``[1]``, **W**.
            input_ids: ``[>=bsz, L]`` int64, **W**. pre_ids: ``[>=bsz, Lp]`` int64, read.
            step_idx: int64, read. next_tokens: unused (any shape; any dtype fd_mtp knows: int64,
                int32, bool, uint8, float32, float16, bfloat16).
            first_token_ids: int64, **W**. accept_num: **W**.
            block_size (int), encoder_decoder_block_num (int, unused), max_draft_tokens (int).

        Returns:
            None. Deterministic, unlike upstream where atomics decide the order: the need list is
            in batch order, freed blocks are appended request by request in batch order, allocation
            pops in need-list order. No batch cap (upstream: bsz <= 256). Where upstream loops
            forever (blocks needed and nothing preemptible) this raises ValueError naming
            ``free_list``. Every list position (free, step, need and recover lists), block-table
            slot (``encoder_block_lens + used_list_len`` within the row, also for the blocks a
            recovery grants), pre_ids column and input_ids column of the re-prefill is range-checked
            first, as are ``seq_lens_decoder >= 0`` for running requests and ``need_block_len ==
            recover_lens == 0`` on entry (the op always leaves them 0; upstream would replay stale
            entries). ValueError names the argument; on any error nothing is written.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> # block_size 4, K 1: request 0's slot (3 + 1 + 1) // 4 = 1 is empty, so it pops
            >>> # block 7 from the free list; request 1's slot (1 + 2) // 4 = 0 holds its block 1.
            >>> tables = i32([[0, -1, -1], [1, -1, -1]]); free = i32([7, 0]); free_len = i32([1])
            >>> used = i32([0, 0]); dec = i32([3, 1]); this_time = i32([2, 2])
            >>> ops.speculate_step_paddle(paddle.to_tensor([False, False]), this_time, i32([3, 3]),
            ...     i32([0, 0]), dec, tables, i32([1, 1]), paddle.to_tensor([False, False]),
            ...     i32([-1, -1]), i32([0]), i32([-1, -1]), i32([0]), i32([-1, -1]), i32([0]),
            ...     used, free, free_len, i64([[1] * 8, [2] * 8]), i64([[-1] * 8] * 2), i64([1, 1]),
            ...     i64([0, 0]), i64([1, 2]), i32([1, 1]), 4, 2, 1)
            >>> tables.tolist(), used.tolist(), free_len.tolist()
            ([[0, 7, -1], [1, -1, -1]], [1, 0], [0])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_step",
        cpu="speculate_step_cpu",
        launcher="speculate_step_cuda",
        params="SpeculateStepParams",
        extra_params=STEP_EXTRA,
        args=step_args(),
        status=STEP_STATUS,
    ),
    Op(
        name="speculate_step_system_cache",
        entry="SpeculateStepSystemCache",
        spec="§5.13",
        doc="""The target's decode KV-block manager with prefix caching (v0 scheduler, spec §5.13).

        ``speculate_step_paddle`` with one more argument, ``ori_seq_lens_decoder`` (FastDeploy
        passes ``step_seq_lens_decoder``), after ``ori_seq_lens_encoder``. Phases 1-4 are the
        same (the same kernel runs). The one difference is the re-prefill of the recovered
        request r: besides ``seq_lens_this_time = seq_lens_encoder = ori_seq_lens_encoder[r] +
        step_idx[r]``, it sets ``seq_lens_decoder[r] = ori_seq_lens_decoder[r]`` (the part of the
        sequence whose KV is cached), where ``speculate_step_paddle`` leaves it at 0.

        Args: those of ``speculate_step_paddle`` (see there), plus
            ori_seq_lens_decoder: int32 ``[bsz]`` or ``[bsz, 1]``, read (copied as is).

        Returns:
            None. The same determinism, checks and errors as ``speculate_step_paddle`` (ValueError
            naming the argument, nothing written); no batch cap (upstream: bsz <= 256).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> # request 0 was preempted (block-stepped, 1 decode block); 3 blocks are free, so it
            >>> # recovers with min(1 + 1, 12 // 4 - 1) = 2 blocks and a cached prefix of 2.
            >>> stop = paddle.to_tensor([True, False]); this_time = i32([0, 2])
            >>> enc = i32([0, 0]); dec = i32([0, 1]); tables = i32([[0, -1, -1], [1, -1, -1]])
            >>> block_step = paddle.to_tensor([True, False]); step_list = i32([0, -1])
            >>> step_lens = i32([1]); used = i32([1, 0]); free = i32([5, 6, 7]); free_len = i32([3])
            >>> ids = i64([[0] * 12, [0] * 12]); pre = i64([[-1, 11, 12, 0], [-1, 0, 0, 0]])
            >>> ops.speculate_step_system_cache(stop, this_time, i32([3, 3]), i32([2, 0]), enc, dec,
            ...     tables, i32([1, 1]), block_step, step_list, step_lens, i32([-1, -1]), i32([0]),
            ...     i32([-1, -1]), i32([0]), used, free, free_len, ids, pre, i64([2, 1]),
            ...     i64([0, 0]), i64([9, 9]), i32([0, 2]), 4, 0, 1)
            >>> tables.tolist(), used.tolist(), free_len.tolist(), step_lens.tolist()
            ([[0, 7, 6], [1, -1, -1]], [2, 0], [1], [0])
            >>> this_time.tolist(), enc.tolist(), dec.tolist(), stop.tolist()
            ([5, 2], [5, 0], [2, 1], [False, False])
            >>> ids.tolist()[0][:6]
            [9, 0, 0, 11, 12, 0]
        """,
        batch="seq_lens_this_time",
        kernel="speculate_step",
        cpu="speculate_step_system_cache_cpu",
        launcher="speculate_step_system_cache_cuda",
        params="SpeculateStepParams",
        extra_params=STEP_EXTRA,
        args=step_args("system_cache"),
        status=STEP_STATUS,
    ),
    Op(
        name="speculate_step_reschedule",
        entry="SpeculateStepReschedule",
        spec="§5.13",
        doc="""The target's decode KV-block manager that hands preempted requests back to the
        scheduler (``FD_DISABLED_RECOVER=1``, v0 scheduler, spec §5.13).

        ``bsz = seq_lens_this_time.shape[0]``, ``NB = block_tables.shape[1]``; a request's decode
        blocks are ``block_tables[b, encoder_block_lens[b] : encoder_block_lens[b] +
        used_list_len[b]]``. Differences from ``speculate_step_paddle``:

        1. *Every* stopped request (block-stepped or not) gets ``first_token_ids`` -1 and, when it
           holds decode blocks, returns them to the free list (table entries -1,
           ``encoder_block_lens`` and ``used_list_len`` 0). Running requests whose slot
           ``(seq_lens_decoder + max_draft_tokens + 1) // block_size`` is inside the row and -1 join
           the need list, in batch order.
        2. While the need list is longer than the free list: the request holding the most decode
           blocks (ties: lowest b) is preempted, with no exemption (``is_block_step`` and
           ``max_decoder_block_num`` are not consulted). Its decode blocks return to the free list;
           ``stop_flags`` True; ``seq_lens_this_time``, ``seq_lens_decoder``,
           ``encoder_block_lens`` and ``used_list_len`` 0; it leaves the need list. It is *not*
           marked block-stepped, not pushed on ``step_block_list`` and keeps ``accept_num``.
        3. Each need-list entry still running pops the top of the free list into its slot
           (``used_list_len`` + 1); ``need_block_list`` entries and ``need_block_len`` end -1 / 0.
        4. No recovery and no re-prefill: the scheduler re-inserts the preempted requests.

        Never read (any dtype and shape, accepted for FastDeploy's signature):
        ``ori_seq_lens_encoder``, ``seq_lens_encoder``, ``is_block_step``, ``step_block_list``, ``step_lens``,
        ``recover_block_list``, ``recover_lens``, ``input_ids``, ``pre_ids``, ``step_idx``,
        ``next_tokens``, ``accept_num``, ``encoder_decoder_block_num``.

        Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
            stop_flags: bool, **W**. seq_lens_this_time: **W**; defines bsz.
            seq_lens_decoder: **W**. block_tables: ``[>=bsz, NB]``, **W**.
            encoder_block_lens: **W**. need_block_list: ``[N]``, **W**.
            need_block_len: ``[1]``, **W** (0 on entry and exit). used_list_len: **W**.
            free_list: ``[F]``, **W**. free_list_len: ``[1]``, **W**.
            first_token_ids: int64, **W**.
            block_size (int), max_draft_tokens (int): attributes.

        Returns:
            None. Deliberate differences: upstream also sends a SysV message (``-3`` for each
            preempted request) to the token processor on queue ``INFERENCE_MSG_QUEUE_ID`` (else
            the device id) and prints; fd_mtp's op sends nothing (the preempted requests are
            those whose ``stop_flags`` turned True with ``used_list_len`` 0). Where upstream loops
            forever (blocks needed and nobody holds one) this raises ValueError naming
            ``free_list``; list positions and block-table slots are range-checked first. Batch
            order instead of atomics; no batch cap (upstream: bsz <= 256). On any error nothing
            is written.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> # block_size 4, K 1: both slots (3 + 2) // 4 = 1 are empty and nothing is free, so
            >>> # request 0 (2 decode blocks, the most) is preempted; request 1 takes one of them.
            >>> stop = paddle.to_tensor([False, False]); this_time = i32([2, 2])
            >>> dec = i32([3, 3]); tables = i32([[0, -1, 8, 9], [1, -1, -1, -1]])
            >>> enc_blocks = i32([2, 1]); used = i32([2, 0]); free = i32([0, 0, 0]); free_len = i32([0])
            >>> ops.speculate_step_reschedule(stop, this_time, i32([3, 3]), i32([0, 0]), dec, tables,
            ...     enc_blocks, paddle.to_tensor([False, False]), i32([-1, -1]), i32([0]),
            ...     i32([-1, -1]), i32([0]), i32([-1, -1]), i32([0]), used, free, free_len,
            ...     i64([[0] * 8] * 2), i64([[0] * 8] * 2), i64([0, 0]), i64([0, 0]), i64([5, 6]),
            ...     i32([2, 2]), 4, 0, 1)
            >>> stop.tolist(), this_time.tolist(), dec.tolist()
            ([True, False], [0, 2], [0, 3])
            >>> tables.tolist(), enc_blocks.tolist(), used.tolist(), free_len.tolist()
            ([[0, -1, -1, -1], [1, 9, -1, -1]], [0, 1], [0, 1], [1])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_step",
        cpu="speculate_step_reschedule_cpu",
        launcher="speculate_step_reschedule_cuda",
        params="SpeculateStepParams",
        extra_params={
            "num_blocks_per_seq": "NB",
            "need_list_capacity": "numel(need_block_list)",
            "free_list_capacity": "numel(free_list)",
            "bsz": "B",
        },
        args=step_args("reschedule"),
        status=STEP_STATUS,
    ),
]
