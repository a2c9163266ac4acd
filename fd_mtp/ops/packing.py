"""Packed ("padding removed") token layout of a step: spec ../shared/spec/ops.md §1.3, §5.1-§5.4.

A step's tokens are packed request after request: token i of request b sits at packed index
``sum(seq_lens_this_time[:b]) + i``. ``pre_process`` builds the packed ids and the offset tensors
before the forward pass; ``rebuild_padding`` picks the hidden rows that get logits after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._composite import renamed, require_bool, require_tensor
from ._loader import define_ops
from ._paddle_compat import sum_int64

if TYPE_CHECKING:  # fd_mtp.ops imports paddle on the first call only
    import paddle


def pre_process(
    input_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    speculative_decoding: bool,
    draft_tokens: paddle.Tensor | None = None,
    seq_lens_encoder: paddle.Tensor | None = None,
    seq_lens_decoder: paddle.Tensor | None = None,
) -> tuple[
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor,
    paddle.Tensor | None,
    paddle.Tensor | None,
]:
    """FastDeploy's ``pre_process`` glue (spec §5.3): pack the step's tokens and build the offsets.

    Speculative (``speculative_decoding=True``; needs draft_tokens, seq_lens_encoder,
    seq_lens_decoder): ``token_num = sum(seq_lens_this_time)``, ``cum_offsets = cumsum(L_in -
    seq_lens_this_time)`` with ``L_in = input_ids.shape[1]``, then
    ``speculate_get_padding_offset``, ``speculate_get_seq_lens_output``, ``cumsum(L_in -
    seq_lens_output)`` and ``speculate_get_output_padding_offset(..., L_in)``.

    Not speculative: every request's tokens come from ``input_ids`` (FastDeploy's
    ``get_padding_offset``): this passes ``input_ids`` as ``draft_tokens`` too, and
    ``seq_lens_this_time`` as ``seq_lens_encoder``, so token i of request b is ``input_ids[b, i]``
    whichever branch the kernel takes. The output offsets are not built and returned as None, as
    in FastDeploy's non-speculative branch.

    Args:
        input_ids: ``[>=bsz, L_in]`` int64, read (prefill chunks).
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.
        speculative_decoding (bool).
        draft_tokens: ``[>=bsz, K + 1]`` int64, read (decode tokens).
        seq_lens_encoder, seq_lens_decoder: ``[>=bsz]`` int32, read.

    Returns:
        ``(ids_remove_padding [T] int64, batch_id_per_token [T] int32, cu_seqlens_q [bsz + 1] int32,
        cu_seqlens_k [bsz + 1] int32, output_cum_offsets [bsz] int32 | None,
        output_padding_offset [To] int32 | None)``. Raises ValueError naming the argument as the
        ops do (e.g. a request with more tokens than its source row).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> ids = paddle.to_tensor([[5, 6, 7, 0], [9, 0, 0, 0]], dtype="int64")
        >>> drafts = paddle.to_tensor([[0, 0], [8, 4]], dtype="int64")
        >>> q = paddle.to_tensor([3, 2], dtype="int32")
        >>> enc = paddle.to_tensor([3, 0], dtype="int32")
        >>> dec = paddle.to_tensor([0, 9], dtype="int32")
        >>> out = ops.pre_process(ids, q, True, drafts, enc, dec)
        >>> [t.tolist() for t in out]
        [[5, 6, 7, 8, 4], [0, 0, 0, 1, 1], [0, 3, 5], [0, 3, 5], [0, 3], [0, 3, 3]]
    """
    speculative = _check_pre_process(
        input_ids,
        seq_lens_this_time,
        speculative_decoding,
        draft_tokens,
        seq_lens_encoder,
        seq_lens_decoder,
    )
    packed = _packed(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, speculative)
    if not speculative:
        return (*packed, None, None)
    max_len = input_ids.shape[1]
    return (
        *packed,
        *_output_offsets(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_len),
    )


def _packed(input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, speculative):
    """pre_process's packed tokens: ``(ids_remove_padding, batch_id_per_token, cu_seqlens_q,
    cu_seqlens_k)`` from ``speculate_get_padding_offset``."""
    import paddle

    from .packing import speculate_get_padding_offset  # generated from the schema

    token_num = sum_int64(seq_lens_this_time)
    cum_offsets_now = paddle.cumsum(input_ids.shape[1] - seq_lens_this_time, dtype="int32")
    if speculative:
        source, encoder, names = draft_tokens, seq_lens_encoder, _PADDING_NAMES
    else:
        # Every token comes from input_ids: it is also passed as draft_tokens, and seq_lens_this_time
        # as seq_lens_encoder (so a request with tokens reads input_ids[b, i] and errors name input_ids).
        source, encoder = input_ids, seq_lens_this_time
        names = _PADDING_NAMES | {
            "draft_tokens": "input_ids",
            "seq_lens_encoder": "seq_lens_this_time",
        }
    with renamed("pre_process", "speculate_get_padding_offset", names):
        return speculate_get_padding_offset(
            input_ids, source, cum_offsets_now, token_num, seq_lens_this_time, encoder
        )


# pre_process's inner ops get its arguments (or values computed from them): their errors are raised
# again under pre_process's names.
_PADDING_NAMES = dict.fromkeys(("seq_len", "cum_offsets", "token_num"), "seq_lens_this_time")
# The output rows come from seq_lens_this_time (every decode token, one row per prefill).
_OUTPUT_NAMES = dict.fromkeys(
    ("output_cum_offsets_tmp", "out_token_num", "seq_lens_output"), "seq_lens_this_time"
)


def _output_offsets(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_len):
    """pre_process's speculative output offsets: ``(output_cum_offsets, output_padding_offset)``."""
    import paddle

    from .packing import speculate_get_output_padding_offset, speculate_get_seq_lens_output

    with renamed("pre_process", "speculate_get_seq_lens_output"):
        seq_lens_output = speculate_get_seq_lens_output(
            seq_lens_this_time, seq_lens_encoder, seq_lens_decoder
        )
    output_token_num = sum_int64(seq_lens_output)
    output_cum_offsets_tmp = paddle.cumsum(max_len - seq_lens_output, dtype="int32")
    with renamed("pre_process", "speculate_get_output_padding_offset", _OUTPUT_NAMES):
        output_padding_offset, output_cum_offsets = speculate_get_output_padding_offset(
            output_cum_offsets_tmp, output_token_num, seq_lens_output, max_len
        )
    return output_cum_offsets, output_padding_offset


def _check_pre_process(
    input_ids, seq_lens_this_time, speculative_decoding, draft_tokens, enc, dec
) -> bool:
    """pre_process's own checks, by its argument names, before anything is computed; returns
    ``speculative_decoding`` as a bool. Given optional tensors must be Tensors in either branch;
    the speculative branch needs them, with at least bsz rows."""
    op = "pre_process"
    this_time = require_tensor(op, "seq_lens_this_time", seq_lens_this_time, "int32")
    require_tensor(op, "seq_lens_this_time", this_time, ranks=(1, "column"))
    bsz = this_time.shape[0]
    require_tensor(op, "input_ids", input_ids, "int64", ranks=(2,), rows=bsz)
    speculative = require_bool(op, "speculative_decoding", speculative_decoding)
    optional = {"draft_tokens": draft_tokens, "seq_lens_encoder": enc, "seq_lens_decoder": dec}
    for name, value in optional.items():
        if value is None:
            if speculative:
                raise ValueError(f"{op}: {name} is required when speculative_decoding is True")
        elif not speculative:
            require_tensor(op, name, value)
    if speculative:
        if input_ids.shape[1] < 1:
            raise ValueError(
                f"{op}: input_ids must have at least one column in the speculative branch (its "
                f"width is the output offsets' max_seq_len), got shape {list(input_ids.shape)}"
            )
        require_tensor(op, "draft_tokens", draft_tokens, "int64", ranks=(2,), rows=bsz)
        for name in ("seq_lens_encoder", "seq_lens_decoder"):
            require_tensor(op, name, optional[name], "int32", ranks=(1, "column"), rows=bsz)
    return speculative


# The ops not written above are declared and documented in fd_mtp/schema/packing.py.
__all__ = sorted({"pre_process", *define_ops(globals(), "packing")})
