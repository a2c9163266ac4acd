"""`pack_step`: FastDeploy's per-step ``pre_process`` over a buffer dict (spec/ops.md §4.1 step 1.2)."""

from __future__ import annotations

from .. import ops


def pack_step(buffers: dict, caches: list, block_size: int):
    """Pack the scheduled tokens of a buffer dict (a runner's ``share_inputs`` or a proposer's
    ``model_inputs``): ``input_ids`` rows of prefilling requests, ``draft_tokens`` rows of decoding
    ones. Stores ``ids_remove_padding``, ``batch_id_per_token``, ``cu_seqlens_q/k``,
    ``output_cum_offsets`` and ``output_padding_offset`` back into ``buffers`` (the role of
    FastDeploy's ``copy_``: the entries are rebound to the op's results) and returns the step's
    ``ForwardMeta`` over the dict's lengths, block tables and the given KV caches."""
    from ..model.attention import ForwardMeta

    this_time = buffers["seq_lens_this_time"].reshape([-1])
    enc = buffers["seq_lens_encoder"].reshape([-1])
    dec = buffers["seq_lens_decoder"].reshape([-1])
    ids, bid, cu_q, cu_k, out_cum, out_pad = ops.pre_process(
        buffers["input_ids"], this_time, True, buffers["draft_tokens"], enc, dec
    )
    buffers.update(
        ids_remove_padding=ids,
        batch_id_per_token=bid,
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        output_cum_offsets=out_cum,
        output_padding_offset=out_pad,
    )
    return ForwardMeta(
        ids_remove_padding=ids,
        cu_seqlens_q=cu_q,
        batch_id_per_token=bid,
        seq_lens_this_time=this_time,
        seq_lens_encoder=enc,
        seq_lens_decoder=dec,
        block_tables=buffers["block_tables"],
        caches=caches,
        block_size=block_size,
    )
