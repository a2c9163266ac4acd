"""Schemas of the n-gram drafting ops: spec ../shared/spec/ops.md §5.17 (ngram_match) and §6.7
(hybrid_mtp_ngram) (see fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Check, Op, Status, Tensor, Workspace

# Both ops run the same kernel (custom_ops/kernels/ngram.h) and share its status table.
_STATUS = (
    Status(
        "kNgramInputIdsLen",
        1,
        "input_ids_len",
        "is {value}; it must be in [0, {limit}] (the columns of input_ids)",
    ),
    Status(
        "kNgramStepIdx",
        2,
        "step_idx",
        "is {value}; the query ends at pre_ids[step_idx] but the row has {limit} columns",
    ),
    Status(
        "kNgramDraftTokensCols",
        3,
        "draft_tokens",
        "row needs {value} columns for the drafts this request may receive but has {limit}",
    ),
    Status(
        "kNgramThisTime",
        4,
        "seq_lens_this_time",
        "is {value} for a request that drafts; it must be >= 1",
    ),
)
_EXTRA = {"input_ids_cols": "Li", "pre_ids_cols": "Lp", "draft_tokens_cols": "Dd", "bsz": "B"}
# Both ops run the same CPU driver and CUDA launcher (Params.hybrid picks the variant).
_DISPATCH = dict(
    cpu="ngram_cpu",
    launcher="ngram_cuda",
    # the CUDA search's winning positions (the CPU driver searches request by request)
    workspaces=(Workspace("hits", "int64[B]", "ngram_hits", cpu=False),),
)
_ANY = "int64|int32|bool|float32|float16|bfloat16|uint8[]"

OPS = [
    Op(
        name="ngram_match",
        entry="NgramMatch",
        spec="§5.17",
        doc="""Propose drafts by matching each request's last tokens in its prompt or history (spec §5.17).

        ``bsz = seq_lens_this_time.shape[0]``; requests are processed in order. For request b let
        ``q = min(draft_token_num[b], max_dec_len[b] - step_idx[b] - 1)``.

        * prefilling (``seq_lens_encoder[b] > 0``): untouched;
        * idle (``seq_lens_decoder[b] == 0``): ``seq_lens_this_time[b] = 0``;
        * decoding: ``seq_lens_this_time[b] = 1``; one fewer request is "remaining" (initially the
          number of requests with encoder or decoder length > 0); with ``sum`` the sum of
          ``seq_lens_this_time[0..b]`` (current values, earlier requests' drafts included):
          if ``sum + q + remaining > threshold`` then ``q = min(q, threshold - sum - remaining)``;
          if ``sum + remaining >= threshold - 1`` the request keeps 1 token. Otherwise, for
          ``n = max_ngram_size .. 1`` (first success wins; needs ``step_idx[b] >= n``), the query
          ``pre_ids[b, step_idx-n+1 .. step_idx]`` is looked for in the prompt windows
          ``input_ids[b, i:i+n]`` (``i = 0 .. input_ids_len[b] - n``), then, only if none is usable,
          in the generated windows ``pre_ids[b, i:i+n]`` (``i = 0 .. step_idx - n``; window 0 includes
          the unused slot ``pre_ids[b, 0]``). The first window with ``s = i + n < e = min(s + q, len)``
          (``len`` = ``input_ids_len[b]`` or ``step_idx[b]``) wins: its ``e - s`` following tokens go
          to ``draft_tokens[b, 1:1 + e - s]`` and ``seq_lens_this_time[b] = 1 + e - s``.

        Runs where the tensors are: on the CPU like FastDeploy, or on a GPU with CUDA kernels (no
        host copies; the search is parallel over requests and windows, the budget is one
        sequential pass over requests). Both give identical results.

        Args (``[bsz]`` per-request tensors may also be ``[bsz, 1]`` and longer than bsz;
        **W** = written in place):
            input_ids: ``[>=bsz, Li]`` int64, read: the prompt haystack (``input_ids_cpu``).
            input_ids_len: ``[>=bsz]`` int64, read: prompt lengths, in ``[0, Li]``.
            pre_ids: ``[>=bsz, Lp]`` int64, read: generated token k at column k (target convention).
            step_idx: ``[>=bsz]`` int64, read: tokens generated so far, ``< Lp``.
            draft_token_num: ``[>=bsz]`` int32, read (``actual_draft_token_num``).
            draft_tokens: ``[>=bsz, Dd]`` int64, **W**: columns ``1 .. 1 + copied``.
            seq_lens_this_time: ``[bsz]`` int32, **W**; defines bsz.
            seq_lens_encoder, seq_lens_decoder: ``[>=bsz]`` int32, read.
            max_dec_len: ``[>=bsz]`` int64, read.
            max_ngram_size (int): largest n, ``>= 1``.
            max_draft_tokens (int): ignored, as upstream (q comes from ``draft_token_num``).
            threshold: keyword-only token budget of the batch (int32). Default: the environment
                variable ``INFER_WITH_REFERENCE_TOKENUM_THRESHOLD`` (FastDeploy's), else 128; read by
                fd_mtp.envs at each call, never in the kernel.

        Returns:
            None (like FastDeploy's op).

        Differences from upstream: bad input raises ValueError naming the argument and writes
        nothing, where FastDeploy reads or writes outside the rows: for a decoding request with
        ``q >= 1``, ``input_ids_len`` must be in ``[0, Li]``, ``step_idx < Lp`` and ``1 + q <= Dd``
        (refused even when no match would need the room; FastDeploy writes past the row). The
        budget arithmetic is int64 (FastDeploy's int overflows only far outside valid input).
        FastDeploy's wrapper also writes ``seq_lens_encoder`` back; the op never changes it.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> t = lambda v, d="int64": paddle.to_tensor(v, dtype=d)
            >>> prompt = t([[5, 6, 7, 8, 9, 0]])
            >>> pre = t([[-1, 11, 5, 6, 0, 0]])          # generated: 11 5 6 (step_idx 3)
            >>> draft, this_time = t([[4, -1, -1, -1]]), t([1], "int32")
            >>> ops.ngram_match(prompt, t([6]), pre, t([3]), t([3], "int32"), draft, this_time,
            ...                 t([0], "int32"), t([9], "int32"), t([100]), 2, 3)
            >>> draft.tolist(), this_time.tolist()
            ([[4, 7, 8, 9]], [4])
        """,
        batch="seq_lens_this_time",
        kernel="ngram",
        params="NgramParams",
        # max_draft_tokens is ignored, as upstream
        extra_params={**_EXTRA, "min_ngram_size": "1", "hybrid": "false"},
        **_DISPATCH,
        args=(
            Tensor("input_ids", "int64[>=B, Li]", doc="the prompt haystack"),
            Tensor("input_ids_len", "int64[>=B]"),
            Tensor("pre_ids", "int64[>=B, Lp]", doc="generated token k at column k"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor("draft_token_num", "int32[>=B]"),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="columns 1 .. q"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "int32[>=B]"),
            Tensor("max_dec_len", "int64[>=B]"),
            Attr("max_ngram_size", "int", min=1),
            Attr("max_draft_tokens", "int", doc="ignored, as upstream"),
            Attr("threshold", "int", kw=True, env="INFER_WITH_REFERENCE_TOKENUM_THRESHOLD"),
        ),
        status=_STATUS,
    ),
    Op(
        name="hybrid_mtp_ngram",
        entry="HybridMtpNgram",
        spec="§6.7",
        doc="""Extend the MTP drafts with n-gram matches up to K drafts per request (spec §6.7).

        ``bsz = seq_lens_this_time.shape[0]``, ``K = max_draft_tokens``; requests are processed in
        order. For request b let ``q0 = seq_lens_this_time[b]`` (1 + MTP drafts) and
        ``q = min(K - q0 + 1, max_dec_len[b] - step_idx[b] - 1)``; skip it if ``q0 == 0`` or
        ``q <= 0``. Otherwise one fewer request is "remaining" (initially the number with
        ``seq_lens_decoder > 0``); with ``sum`` the sum of ``seq_lens_this_time[0..b]`` (current
        values): if ``sum + q + remaining > threshold`` then ``q = min(q, threshold - sum -
        remaining)``; if ``sum + remaining >= threshold - 1`` skip. Then for
        ``n = max_ngram_size .. min_ngram_size`` (first success wins; needs ``step_idx >= n``) the
        query ``pre_ids[b, step_idx-n+1 .. step_idx]`` is looked for in the prompt windows
        (``i = 0 .. input_ids_len - n``), then in the history windows (``i = 0 .. step_idx - n``);
        the first window with ``s = i + n < e = min(s + q, len)`` wins: ``e - s`` tokens go to
        ``draft_tokens[b, q0 : q0 + e - s]`` and ``seq_lens_this_time[b] = q0 + e - s``.

        Runs on the CPU like FastDeploy, or on a GPU with CUDA kernels (identical results).

        Args (``[bsz]`` per-request tensors may also be ``[bsz, 1]`` and longer than bsz;
        **W** = written in place):
            input_ids: ``[>=bsz, Li]`` int64, read: the proposer's prompt haystack (prompt[1:]).
            input_ids_len: ``[>=bsz]`` int64, read: in ``[0, Li]``.
            pre_ids: ``[>=bsz, Lp]`` int64, read: the proposer's history (token k at column k-1,
                ending with the MTP drafts).
            step_idx: ``[>=bsz]`` int64, read: the proposer's, ``< Lp``.
            draft_token_num: unused (kept for the signature; any tensor).
            draft_tokens: ``[>=bsz, Dd]`` int64, **W**: the target's draft rows, columns ``q0 ..``.
            seq_lens_this_time: ``[bsz]`` int32, **W**: the target's; defines bsz.
            seq_lens_decoder: ``[>=bsz]`` int32, read (the proposer's).
            max_dec_len: ``[>=bsz]`` int64, read.
            max_ngram_size, min_ngram_size (int): ``1 <= min <= max``.
            max_draft_tokens (int): K.
            threshold: keyword-only token budget (int32). Default: the environment variable
                ``SPEC_TOKENUM_THRESHOLD`` (FastDeploy's), else 1024; read by fd_mtp.envs at each
                call, never in the kernel.

        Returns:
            None.

        Differences from upstream: bad input raises ValueError naming the argument and writes
        nothing: for a request that drafts (``q0 != 0``, ``q >= 1``), ``seq_lens_this_time`` must
        be >= 1 (a negative count would write before the row), ``q0 + q <= Dd``, ``input_ids_len``
        in ``[0, Li]`` and ``step_idx < Lp``; ngram sizes must satisfy ``1 <= min <= max``.
        Budget arithmetic is int64.

        Example:
            >>> import paddle, fd_mtp.ops as ops
            >>> t = lambda v, d="int64": paddle.to_tensor(v, dtype=d)
            >>> prompt = t([[5, 6, 7, 8, 9, 0]])
            >>> pre = t([[9, 5, 6, 0]])                  # history 9 5 6 (step_idx 2)
            >>> draft, this_time = t([[3, 6, -1, -1]]), t([2], "int32")   # 1 + one MTP draft
            >>> ops.hybrid_mtp_ngram(prompt, t([6]), pre, t([2]), t([3], "int32"), draft, this_time,
            ...                      t([9], "int32"), t([100]), 2, 1, 3)
            >>> draft.tolist(), this_time.tolist()
            ([[3, 6, 7, 8]], [4])
        """,
        batch="seq_lens_this_time",
        kernel="ngram",
        params="NgramParams",
        # draft_token_num and seq_lens_encoder are not read
        extra_params={**_EXTRA, "hybrid": "true"},
        **_DISPATCH,
        checks=(
            Check(
                "min_ngram_size",
                "min_ngram_size <= max_ngram_size",
                "must be <= max_ngram_size ({max_ngram_size}), got {min_ngram_size}",
            ),
        ),
        args=(
            Tensor("input_ids", "int64[>=B, Li]", doc="the proposer's prompt haystack"),
            Tensor("input_ids_len", "int64[>=B]"),
            Tensor("pre_ids", "int64[>=B, Lp]", doc="the proposer's history"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor(
                "draft_token_num",
                _ANY,
                "unused",
                param=None,
                doc="kept for the signature; any tensor",
            ),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="columns q0 .. K"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]"),
            Tensor("max_dec_len", "int64[>=B]"),
            Attr("max_ngram_size", "int", min=1),
            Attr("min_ngram_size", "int", min=1, doc="<= max_ngram_size (a Check)"),
            Attr("max_draft_tokens", "int"),
            Attr("threshold", "int", kw=True, env="SPEC_TOKENUM_THRESHOLD"),
        ),
        status=_STATUS,
    ),
]
