"""Schemas of the target-side update ops of one engine step: spec ../shared/spec/ops.md §5.8, §5.10,
§5.12, §5.16 (see fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Check, Op, Status, Tensor  # noqa: F401

# A tensor the op never reads (FastDeploy passes it): any dtype the schema knows, any shape.
ANY = "any[]"  # an unused argument: any dtype and shape

_ACCEPT_NUM_RANGE = "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"

# speculate_set_stop_value_multi_seqs' two forms of the stop sequences: stop_seqs [>=bs, S, Ls]
# with stop_seqs_len [>=bs, S], or [>=bs, Ls] (one stop sequence per request, S = 1) with
# stop_seqs_len [>=bs] or [>=bs, 1]. Checked in this order by every layer (`Check`).
_NUM_STOP_SEQS = "dim(stop_seqs, 1) if rank(stop_seqs) == 3 else 1"
_STOP_SEQS_FORMS = (
    Check(
        "stop_seqs",
        "rank(stop_seqs) == 2 or rank(stop_seqs) == 3",
        "must have shape [bs, S, Ls] or [bs, Ls] (one stop sequence per request), got "
        "{shape(stop_seqs)}",
    ),
    Check(
        "stop_seqs",
        "dim(stop_seqs, 0) >= dims.B",
        "has {dim(stop_seqs, 0)} rows but accept_tokens has {dims.B}",
    ),
    Check(
        "stop_seqs_len",
        f"(rank(stop_seqs_len) == 1 and ({_NUM_STOP_SEQS}) == 1) or (rank(stop_seqs_len) == 2 "
        f"and dim(stop_seqs_len, 1) == ({_NUM_STOP_SEQS}))",
        f"must have shape [bs, {{{_NUM_STOP_SEQS}}}]{{' or [bs]' if ({_NUM_STOP_SEQS}) == 1 else ''}}"
        " for stop_seqs of shape {shape(stop_seqs)}, got {shape(stop_seqs_len)}",
    ),
    Check(
        "stop_seqs_len",
        "dim(stop_seqs_len, 0) >= dims.B",
        "has {dim(stop_seqs_len, 0)} rows but accept_tokens has {dims.B}",
    ),
)

OPS = [
    Op(
        name="speculate_clear_accept_nums",
        entry="SpeculateClearAcceptNums",
        spec="§5.16",
        doc="""Zero accept_num of the requests whose seq_lens_decoder is 0 (spec §5.16).

        Args:
            accept_num: ``[>=bsz]`` int32, **written** (``accept_num[b] = 0`` where
                ``seq_lens_decoder[b] == 0``, b < bsz).
            seq_lens_decoder: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.

        Returns:
            None. No batch cap (upstream: one block of 1024 threads).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> n = paddle.to_tensor([3, 2, 1], dtype="int32")
            >>> ops.speculate_clear_accept_nums(n, paddle.to_tensor([7, 0, 5], dtype="int32"))
            >>> n.tolist()
            [3, 0, 1]
        """,
        batch="seq_lens_decoder",
        kernel="speculate_clear_accept_nums",
        cpu="clear_accept_nums_cpu",
        params="ClearAcceptNumsParams",
        extra_params={"bsz": "B"},
        args=(
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[B]"),
        ),
    ),
    Op(
        name="speculate_set_stop_value_multi_seqs",
        entry="SpeculateSetStopValueMultiSeqs",
        spec="§5.8",
        doc="""Stop requests whose output completes one of their stop sequences (spec §5.8).

        ``bs = accept_tokens.shape[0]``. For a running request b with ``a = accept_num[b]``
        accepted tokens and ``t = step_idx[b]`` (already advanced by verify, so the previous
        step's last token is ``pre_ids[b, t - a]``), each stop sequence ``stop_seqs[b, s, :len]``
        (``len = stop_seqs_len[b, s] > 0``) is tested at the candidate ends idx = 0 .. a-1: the
        sequence must end just before ``accept_tokens[b, idx]`` (idx 0: at ``pre_ids[b, t - a]``;
        idx > 0: at ``accept_tokens[b, idx - 1]``), its earlier tokens continuing backwards into
        pre_ids. Candidates with ``t - a + idx + 1 < len`` are skipped, and a pre_ids index <= 0
        fails the comparison (column 0 holds no token). On a hit the token after the sequence is
        replaced: ``accept_tokens[b, idx] = end_ids[0]``, ``accept_num[b] = idx + 1``,
        ``stop_flags[b] = True``; ``step_idx`` is left as verify set it. A sequence completed by the
        last accepted token is only seen at the next step (as idx 0).

        Args (**W** = written in place):
            accept_tokens: ``[bs, Wa]`` int64, **W**; defines bs.
            accept_num: ``[>=bs]`` (or ``[>=bs, 1]``) int32, **W**.
            pre_ids: ``[>=bs, Lp]`` int64, read (target convention: token k at column k).
            step_idx: ``[>=bs]`` int64, read.
            stop_flags: ``[>=bs]`` bool, **W**.
            seq_lens: unused (kept for the signature): any shape; any dtype fd_mtp knows (int64,
                int32, bool, uint8, float32, float16, bfloat16).
            stop_seqs: ``[>=bs, S, Ls]`` int64, read; or ``[>=bs, Ls]``: one stop sequence per
                request (S = 1; FastDeploy's own tests pass this form).
            stop_seqs_len: ``[>=bs, S]`` int32, read, each in ``[0, Ls]``; ``[>=bs]`` (or
                ``[>=bs, 1]``) with a 2-D ``stop_seqs``.
            end_ids: ``[E >= 1]`` int64, read (only ``end_ids[0]``).

        Returns:
            None. Raises ValueError naming the argument, writing nothing, on bad shapes/dtypes or,
            for a running request, an accept_num outside ``[0, Wa]``, a stop_seqs_len outside
            ``[0, Ls]`` or a compared pre_ids column ``t - a >= Lp``.

        Deliberate differences: upstream reads ``stop_seqs.shape[2]`` even of a 2-D stop_seqs
        (past the shape's end) and indexes ``stop_seqs_len`` by ``b * S + s`` with ``S =
        stop_seqs.shape[1]``, past a ``[bs]`` stop_seqs_len; here a 2-D stop_seqs is one stop
        sequence per request. Upstream runs one thread per (request, stop sequence), and several
        hits in one request race (last writer wins). Here the earliest hit idx over all the
        request's stop sequences wins, deterministically.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> acc = paddle.to_tensor([[7, 8, 9]], dtype="int64")
            >>> n = paddle.to_tensor([3], dtype="int32")
            >>> pre = paddle.to_tensor([[-1, 5, 6, -1, -1, -1]], dtype="int64")
            >>> step = paddle.to_tensor([5], dtype="int64")
            >>> stop = paddle.to_tensor([False])
            >>> seqs = paddle.to_tensor([[[6, 7]]], dtype="int64")
            >>> lens = paddle.to_tensor([[2]], dtype="int32")
            >>> ops.speculate_set_stop_value_multi_seqs(acc, n, pre, step, stop, n, seqs, lens,
            ...                                         paddle.to_tensor([2], dtype="int64"))
            >>> acc.tolist(), n.tolist(), stop.tolist()
            ([[7, 2, 9]], [2], [True])
        """,
        # bs is accept_tokens' row count (a matrix, so not an Op.batch vector): it binds B itself.
        kernel="speculate_set_stop_value_multi_seqs",
        cpu="set_stop_value_cpu",
        params="SetStopValueParams",
        extra_params={
            "accept_tokens_cols": "Wa",
            "pre_ids_cols": "Lp",
            "bs": "B",
            "num_stop_seqs": _NUM_STOP_SEQS,
            "stop_seq_cols": "dim(stop_seqs, -1)",
        },
        checks=_STOP_SEQS_FORMS,
        args=(
            Tensor("accept_tokens", "int64[B, Wa>=0]", "written", doc="defines bs"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("pre_ids", "int64[>=B, Lp]"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens", ANY, "unused", param=None),
            Tensor("stop_seqs", "int64[]", doc="[>=bs, S, Ls], or [>=bs, Ls]: one per request"),
            Tensor("stop_seqs_len", "int32[]", doc="[>=bs, S], or [>=bs] with a 2-D stop_seqs"),
            Tensor("end_ids", "int64[>=1]", doc="only end_ids[0] is read"),
        ),
        status=(
            Status("kStopAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kStopSeqLen",
                2,
                "stop_seqs_len",
                "is {value}; it must be in [0, {limit}] (Ls, the last dim of stop_seqs)",
            ),
            Status(
                "kStopPreIdsColumn",
                3,
                "pre_ids",
                "column {value} (step_idx - accept_num) is compared but the row has {limit} columns",
            ),
        ),
    ),
    Op(
        name="speculate_update",
        entry="SpeculateUpdate",
        spec="§5.10",
        doc="""Advance the target's lengths by what verify accepted (spec §5.10).

        ``real_bsz = seq_lens_this_time.shape[0]`` (the running slice), ``max_bsz =
        stop_flags.shape[0]``, ``D = draft_tokens.shape[1]``. For b < real_bsz not block-stepped,
        with ``a = accept_num[b]`` accepted tokens and the entry values of enc / this_time:

        1. stopped: counts as stopped, ``mask_rollback = 0``; decoding (enc == 0):
           ``seq_lens_decoder += a``, ``mask_rollback = this_time - a`` (the rejected positions);
           prefilling: ``mask_rollback = 0``.
        2. ``this_time > 1`` and enc == 0 (stopped requests too): with ``n =
           actual_draft_token_nums[b]``, all n drafts accepted (``a - 1 == n``) grows it to n+2, or
           n+1, capped at D-1; otherwise it shrinks to ``max(n - 1, 1)``.
        3. prefilling: ``seq_lens_decoder += enc``, ``seq_lens_encoder = 0``.
        4. ``draft_tokens[b, 0] = accept_tokens[b, a - 1]`` (the last accepted token, stopped
           requests too).

        Slots in ``[real_bsz, max_bsz)`` count as stopped; block-stepped requests are left alone
        and count 0. ``not_need_stop[0] = (stopped count) < stop_nums[0]``.

        Args (**W** = written in place; per-request tensors ``[n]`` or ``[n, 1]``):
            seq_lens_encoder, seq_lens_decoder: ``[>=real_bsz]`` int32, **W**.
            not_need_stop: ``[1]`` bool on the CPU, **W**.
            draft_tokens: ``[>=real_bsz, D]`` int64, **W** (column 0).
            actual_draft_token_nums: ``[>=real_bsz]`` int32, **W**.
            accept_tokens: ``[>=real_bsz, Wa]`` int64, read.
            accept_num: ``[>=real_bsz]`` int32, read; in ``[0, Wa]``.
            stop_flags: ``[max_bsz >= real_bsz]`` bool, read; defines max_bsz.
            seq_lens_this_time: ``[real_bsz]`` int32, read; defines real_bsz.
            is_block_step: ``[>=real_bsz]`` bool, read.
            stop_nums: ``[1]`` int64 on the device of seq_lens_this_time, read on the host.
            mask_rollback: ``[>=real_bsz]`` int32, **W**.

        Returns:
            None. Raises ValueError naming the argument, writing nothing, on bad shapes/dtypes or an
            accept_num outside ``[0, Wa]`` (for b < real_bsz not block-stepped).

        Deliberate differences: ``accept_num == 0`` leaves ``draft_tokens[b, 0]`` unchanged
        (upstream reads the element before the row); accept_tokens is read with its own row width
        (upstream uses D, the same on FastDeploy's inputs); no batch cap (upstream: 512).

        Example (spec §13, K = 1: d1 accepted plus bonus t3 = 23):
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> enc, dec, actual, rollback = i32([0]), i32([4]), i32([1]), i32([0])
            >>> flag = paddle.to_tensor([False], place=paddle.CPUPlace())
            >>> draft = paddle.to_tensor([[21, 31]], dtype="int64")
            >>> acc = paddle.to_tensor([[31, 23]], dtype="int64")
            >>> ops.speculate_update(enc, dec, flag, draft, actual, acc, i32([2]),
            ...                      paddle.to_tensor([False]), i32([2]), paddle.to_tensor([False]),
            ...                      paddle.to_tensor([1], dtype="int64"), rollback)
            >>> dec.tolist(), rollback.tolist(), actual.tolist(), draft.tolist(), flag.tolist()
            ([6], [0], [1], [[23, 31]], [True])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_update",
        cpu="speculate_update_cpu",
        flag=("not_need_stop", "count < host.stop_nums"),
        params="SpeculateUpdateParams",
        extra_params={
            "draft_tokens_cols": "Dd",
            "accept_tokens_cols": "Wa",
            "real_bsz": "B",
            "max_bsz": "rows(stop_flags)",
        },
        args=(
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="column 0 written"),
            Tensor("actual_draft_token_nums", "int32[>=B]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]"),
            Tensor("accept_num", "int32[>=B]"),
            Tensor("stop_flags", "bool[>=B]", doc="defines max_bsz"),
            Tensor("seq_lens_this_time", "int32[B]", doc="defines real_bsz"),
            Tensor("is_block_step", "bool[>=B]"),
            Tensor("stop_nums", "int64[1]", any_place=True, param=None, doc="read on the host"),
            Tensor("mask_rollback", "int32[>=B]", "written"),
        ),
        status=(
            Status("kSpecUpdateAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kSpecUpdateThisTime",
                2,
                "seq_lens_this_time",
                "is {value} for a running decode request; it must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="speculate_set_value_by_flags_and_idx",
        entry="SpeculateSetValueByFlagsAndIdx",
        spec="§5.12",
        doc="""Append the accepted tokens to the target's history, reset stopped requests (spec §5.12).

        ``bs = seq_lens_this_time.shape[0]``. For b < bs: stopped -> ``accept_num = 0``,
        ``seq_lens_decoder = 0``. Running with dec != 0 or enc != 0 and ``step_idx > 0`` ->
        ``pre_ids_all[b, step_idx - i] = accept_tokens[b, accept_num - 1 - i]`` for
        i < accept_num: the accepted tokens land at columns ``step_idx - accept_num + 1 ..
        step_idx`` (target convention, generated token k at column k).

        Args (**W** = written in place):
            pre_ids_all: ``[>=bs, Lp]`` int64, **W**.
            accept_tokens: ``[>=bs, Wa]`` int64, read.
            accept_num: ``[>=bs]`` int32, **W**.
            stop_flags: ``[>=bs]`` bool, read.
            seq_lens_this_time: ``[bs]`` int32, only its length is used (defines bs).
            seq_lens_encoder: ``[>=bs]`` int32, read.
            seq_lens_decoder: ``[>=bs]`` int32, **W**.
            step_idx: ``[>=bs]`` int64, read.

        Returns:
            None. Raises ValueError naming the argument, writing nothing, on bad shapes/dtypes or,
            for a request that writes pre_ids, an accept_num outside ``[0, Wa]`` or a column outside
            ``[0, Lp)`` (upstream writes out of bounds).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> pre = paddle.full([2, 6], -1, dtype="int64")
            >>> acc = paddle.to_tensor([[31, 23], [9, 9]], dtype="int64")
            >>> n = paddle.to_tensor([2, 1], dtype="int32")
            >>> dec = paddle.to_tensor([6, 5], dtype="int32")
            >>> ops.speculate_set_value_by_flags_and_idx(
            ...     pre, acc, n, paddle.to_tensor([False, True]), n,
            ...     paddle.to_tensor([0, 0], dtype="int32"), dec, paddle.to_tensor([3, 4], dtype="int64"))
            >>> pre.tolist(), n.tolist(), dec.tolist()
            ([[-1, -1, 31, 23, -1, -1], [-1, -1, -1, -1, -1, -1]], [2, 0], [6, 0])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_set_value_by_flags_and_idx",
        cpu="set_value_cpu",
        params="SetValueByFlagsParams",
        extra_params={"pre_ids_cols": "Lp", "accept_tokens_cols": "Wa", "bs": "B"},
        args=(
            Tensor("pre_ids_all", "int64[>=B, Lp]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("stop_flags", "bool[>=B]"),
            Tensor("seq_lens_this_time", "int32[B]", param=None, doc="only its length is used"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]"),
        ),
        status=(
            Status("kSetValueAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kSetValuePreIdsColumn",
                2,
                "pre_ids_all",
                "accepted tokens go to column {value} (from step_idx and accept_num) but the row has {limit} columns",
            ),
        ),
    ),
    Op(
        name="speculate_calcu_accept_ratio",
        entry="SpeculateCalcuAcceptRatio",
        spec="§5.16",
        doc="""Add this step's drafted and accepted token counts to two running totals.

        FastDeploy's acceptance-ratio counter (spec §5.16): a server divides
        ``sum_accept_num`` by ``sum_draft_num`` to report how many drafts the target accepted.
        ``bsz = seq_lens_this_time.shape[0]``. Request b counts

        * when it verified drafts this step (``seq_lens_decoder[b] > 0`` and
          ``seq_lens_this_time[b] != seq_lens_decoder[b]``): drafted ``seq_lens_this_time[b] - 1``,
          accepted ``accept_nums[b] - 1`` (the bonus / correction token is not a draft);
        * otherwise when it stopped this step (``seq_lens_this_time[b] > 0`` and
          ``stop_flags[b]``): drafted ``seq_lens_this_time[b] - 1``, accepted ``accept_nums[b]``.

        The batch's sums are added to the totals only when the drafted sum is not zero (upstream's
        rule: a step that drafted nothing leaves both totals alone).

        Args (per-request tensors are ``[bsz]`` or ``[bsz, 1]`` with at least bsz entries;
        **W** = written in place):
            sum_draft_num: ``[1]`` int32, **W**: running total of drafted tokens.
            sum_accept_num: ``[1]`` int32, **W**: running total of accepted drafts.
            accept_nums: int32, read: tokens emitted this step (``accept_num`` of speculate_verify).
            seq_lens_this_time: ``[bsz]`` int32, read; defines bsz.
            seq_lens_decoder: int32, read. stop_flags: bool, read.

        Returns:
            None. Raises ValueError naming the argument on bad shapes / dtypes / places, or when a
            total would leave int32 (nothing written then).

        Differences from upstream: no ``bsz <= 512`` cap (upstream's single 512-thread block
        ignores later requests); the sums are int64 and a total that would overflow int32 is
        refused instead of wrapping; the two block reductions are separated by a barrier (upstream
        reuses CUB's shared storage without one).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> drafted, accepted = i32([10]), i32([6])
            >>> ops.speculate_calcu_accept_ratio(
            ...     drafted, accepted, i32([3, 1, 2]), i32([4, 0, 3]), i32([20, 0, 3]),
            ...     paddle.to_tensor([False, False, True]))
            >>> drafted.tolist(), accepted.tolist()  # request 0: 3 drafted, 2 accepted; 2: 2, 2
            ([15], [10])
        """,
        batch="seq_lens_this_time",
        kernel="speculate_calcu_accept_ratio",
        cpu="calcu_accept_ratio_cpu",
        params="AcceptRatioParams",
        extra_params={"bsz": "B"},
        args=(
            Tensor("sum_draft_num", "int32[1]", "written"),
            Tensor("sum_accept_num", "int32[1]", "written"),
            Tensor("accept_nums", "int32[>=B]"),
            Tensor("seq_lens_this_time", "int32[B]"),
            Tensor("seq_lens_decoder", "int32[>=B]"),
            Tensor("stop_flags", "bool[>=B]"),
        ),
        status=(
            Status(
                "kAcceptRatioDraftOverflow",
                1,
                "sum_draft_num",
                "would become {value}, outside int32 (limit {limit})",
            ),
            Status(
                "kAcceptRatioAcceptOverflow",
                2,
                "sum_accept_num",
                "would become {value}, outside int32 (limit {limit})",
            ),
        ),
    ),
    Op(
        name="speculate_limit_thinking_content_length",
        entry="SpeculateLimitThinkingContentLength",
        spec="§5.9",
        doc="""Apply reasoning models' thinking and reply budgets to this step's tokens (spec §5.9).

        ``bs = next_tokens.shape[0]`` (FastDeploy passes ``accept_tokens``). Request b runs when
        ``accept_num[b] > 0``, it is not stopped and ``max_think_lens[b] >= 0`` or
        ``max_reply_lens[b] >= 0``. Its ``a = accept_num[b]`` tokens ``next_tokens[b, :a]`` (token
        o at absolute step ``step_idx[b] - a + 1 + o``) walk the state machine in
        ``limit_status[b]`` (J = ``len(inject_token_ids)``, ``done = J + 1`` or 1 when J = 0,
        ``reply_base = done + 1``):

        1. thinking (status 0) and the token is ``think_end_id``: status = done, and a limited
           reply budget grows by 2;
        2. with a thinking budget (``max_think_lens[b] >= 0``) and status < reply_base: thinking
           reaches the budget (``step - 1 == max_think`` when it is > 0; at once when it is 0,
           status 2 instead of 1 on a decode node of a prefill/decode split) or emits an EOS (J >
           0): injection starts; while ``1 <= status <= J`` the token is replaced by
           ``inject_token_ids[status - 1]`` and status advances (at most to done);
        3. with a reply budget, from the token after the one that ended thinking: status done
           becomes reply_base; at ``status - reply_base >= max_reply`` the token becomes
           ``eos_token_ids[0]`` and status stays at ``reply_base + max_reply``; otherwise the
           reply count (status) advances.

        A replaced token (injected, or the forced EOS) is the request's last this step:
        ``accept_num[b]`` becomes its index + 1 and ``step_idx[b]`` drops by the tokens cut.
        ``stop_flags`` are not touched (speculate_set_stop_value_multi_seqs stops on the EOS).

        Args (per-request tensors are ``[bs]`` or ``[bs, 1]`` with at least bs entries;
        **W** = written in place):
            next_tokens: ``[bs, W]`` int64, **W**: the step's tokens (``accept_tokens``).
            max_think_lens: int32, read: thinking budget (< 0: not cut, think_end_id still ends
                thinking).
            max_reply_lens: int32, **W**: reply budget (< 0: unlimited).
            step_idx: int64, **W**. limit_status: int32, **W**: the state. accept_num: int32, **W**.
            stop_flags: bool, read.
            eos_token_ids: ``[E]`` int64, read (E may be 0: no EOS is forced).
            inject_token_ids: ``[J]`` int64, read (J may be 0).
            think_end_id (int): the token that ends thinking.
            splitwise_role_is_decode (bool): this is the decode node of a prefill/decode split.

        Returns:
            None. Raises ValueError naming the argument on bad shapes / dtypes / places, when a
            running request's ``accept_num`` exceeds ``W``, or when ``limit_status`` or
            ``max_reply_lens`` would leave int32; nothing is written then.

        Differences from upstream: no cap of 1024 blocks (262,144 requests); state arithmetic is
        int64 and a value that would overflow int32 is refused instead of wrapping; a running
        request's ``accept_num`` is checked against the row width.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
            >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
            >>> tokens, accept, step = i64([[11, 12, 13, 14]]), i32([4]), i64([9])
            >>> status, reply = i32([0]), i32([-1])
            >>> ops.speculate_limit_thinking_content_length(  # thinking budget: 7 tokens
            ...     tokens, i32([7]), reply, step, status, accept, paddle.to_tensor([False]),
            ...     i64([2]), i64([100, 101]), 99, False)
            >>> tokens.tolist(), accept.tolist(), step.tolist(), status.tolist()
            ([[11, 12, 100, 14]], [3], [8], [2])
        """,
        kernel="speculate_limit_thinking_content_length",
        cpu="limit_thinking_cpu",
        params="LimitThinkingParams",
        extra_params={
            "tokens_per_step": "W",
            "eos_len": "numel(eos_token_ids)",
            "inject_len": "numel(inject_token_ids)",
            "bs": "B",
        },
        args=(
            Tensor("next_tokens", "int64[B, W>=0]", "written", doc="defines bs"),
            Tensor("max_think_lens", "int32[>=B]"),
            Tensor("max_reply_lens", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]", "written"),
            Tensor("limit_status", "int32[>=B]", "written"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("stop_flags", "bool[>=B]"),
            Tensor("eos_token_ids", "int64[]"),
            Tensor("inject_token_ids", "int64[]"),
            Attr("think_end_id", "int64"),
            Attr("splitwise_role_is_decode", "bool"),
        ),
        status=(
            Status(
                "kLimitAcceptNum",
                1,
                "accept_num",
                "is {value}; it must be at most {limit} (columns of next_tokens)",
            ),
            Status(
                "kLimitStatusOverflow", 2, "limit_status", "would become {value} (limit {limit})"
            ),
            Status(
                "kLimitReplyOverflow", 3, "max_reply_lens", "would become {value} (limit {limit})"
            ),
        ),
    ),
    Op(
        name="speculate_update_input_ids_cpu",
        entry="SpeculateUpdateInputIdsCpu",
        spec="§5.16",
        doc="""Copy a new task's prompt ids into the flat host buffer input_ids_cpu (spec §5.16).

        ``input_ids_cpu.reshape(-1)[bid * max_seq_len + i] = task_input_ids[i]`` for every i: the
        n-gram drafter's haystack (``ngram_match`` reads ``input_ids_cpu``) gets the prompt of
        the request inserted at slot ``bid``. A host op: ``input_ids_cpu`` must be a CPU tensor.

        Args:
            input_ids_cpu: int64 CPU tensor of any shape, **written in place** (flat indexing).
            task_input_ids (list of int): the prompt ids.
            bid (int, >= 0): the slot. max_seq_len (int, >= 0): the slot stride.

        Returns:
            None. Raises ValueError naming the argument on a bad dtype / place, a negative bid or
            max_seq_len, or a copy that would run past the end of ``input_ids_cpu`` (nothing is
            written then).

        Differences from upstream: the copy's range is checked (upstream writes past the buffer).

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> buf = paddle.zeros([3, 4], dtype="int64")
            >>> ops.speculate_update_input_ids_cpu(buf, [7, 8, 9], 1, 4)
            >>> buf.tolist()
            [[0, 0, 0, 0], [7, 8, 9, 0], [0, 0, 0, 0]]
        """,
        kernel="speculate_update_input_ids_cpu",
        cpu="update_input_ids_cpu",
        cuda=False,
        params="UpdateInputIdsParams",
        place="input_ids_cpu",
        extra_params={
            "numel": "numel(input_ids_cpu)",
            "task_input_ids": "data(task_input_ids)",
            "task_len": "size(task_input_ids)",
        },
        args=(
            Tensor("input_ids_cpu", "int64[]", "written", cpu=True),
            Attr("task_input_ids", "int64[]", param=None),
            Attr("bid", "int", min=0),
            Attr("max_seq_len", "int", min=0),
        ),
        status=(
            Status(
                "kUpdateInputIdsRange",
                1,
                "input_ids_cpu",
                "has {limit} elements but the copy writes up to element {value}",
            ),
        ),
    ),
]
