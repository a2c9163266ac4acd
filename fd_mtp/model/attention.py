"""Paged KV-cache attention: ``ForwardMeta``, the ``AttentionBackend`` interface and a CPU backend.

Cache layout (FastDeploy's): per layer a pair ``(key_cache, value_cache)``, each
``[num_blocks, num_kv_heads, block_size, head_dim]``. Position ``p`` of request ``b`` lives in block
``block_tables[b, p // block_size]`` at offset ``p % block_size``.

One call of :meth:`AttentionBackend.forward` handles a packed batch mixing prefills, prefill chunks
and decodes (spec §1.3): token ``i`` of request ``b`` has position ``seq_lens_decoder[b] + i``; its
key/value are written to that position's slot, then it attends causally over positions
``0 .. seq_lens_decoder[b] + i`` of its own request (cached plus new tokens).

``PagedAttentionCPU`` runs float32 CPU tensors through the fused C++ kernel
``fd_mtp.ops.paged_attention`` (cache write + online-softmax attention, no gathered context) and
everything else (other dtypes or places, or ``use_kernel=False``) through the correct-first
implementation in Paddle ops, which stays as the fallback and the test oracle. The per-step
validation and index bookkeeping (slots to write, slots to gather, masks; only the kernel's int32
metadata on the kernel path) is built once per ``ForwardMeta`` on the host with numpy and reused by
every layer (and by the MTP block's layer when the same meta is passed).

RoPE lives here too, behind the backend: :meth:`AttentionBackend.rope` builds the step's
:class:`Rope` from the tokens' positions, and the model only calls ``rope.apply(x)``. There is one
RoPE definition, :func:`rope_tables` (angles ``pos * theta ** (-2i / D)`` in float64 on the host,
cos / sin rounded once to float32), and two forms of applying it that consume the same tables: a
batched per-token rotation-matrix matmul for decode-sized steps and the elementwise form
(:func:`apply_rope_interleaved`) for large ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import paddle


@dataclass
class ForwardMeta:
    """One packed, variable-length batch (spec §1.3). ``B`` = number of request slots, ``T`` = tokens.

    ids_remove_padding: ``[T]`` int64. cu_seqlens_q: ``[B+1]`` int32. batch_id_per_token: ``[T]`` int32.
    seq_lens_this_time / seq_lens_encoder / seq_lens_decoder: ``[B]`` (or ``[B, 1]``) int32;
    ``seq_lens_decoder[b]`` = tokens of request b already in the cache = position of its first query
    token. block_tables: ``[B, NB]`` int32, -1 = no block. caches: per layer index
    ``(key_cache, value_cache)``, written in place by the backend. block_size: int.
    ``attn_metadata`` is the backend's per-step cache of index tensors (built on first use).
    """

    ids_remove_padding: paddle.Tensor
    cu_seqlens_q: paddle.Tensor
    batch_id_per_token: paddle.Tensor
    seq_lens_this_time: paddle.Tensor
    seq_lens_encoder: paddle.Tensor
    seq_lens_decoder: paddle.Tensor
    block_tables: paddle.Tensor
    caches: list
    block_size: int
    attn_metadata: object = field(default=None, repr=False)


def token_positions(meta: ForwardMeta, num_tokens: int) -> paddle.Tensor:
    """``[T]`` int64 position of every packed token: ``seq_lens_decoder[b] + i`` for token i of request b
    (``batch_id_per_token`` may be a longer buffer: its first ``num_tokens`` entries are used)."""
    t = int(num_tokens)
    bid = meta.batch_id_per_token.reshape([-1])[:t].astype("int64")
    cu = meta.cu_seqlens_q.reshape([-1]).astype("int64")
    dec = meta.seq_lens_decoder.reshape([-1]).astype("int64")
    if t == 0:
        return paddle.zeros([0], dtype="int64")
    local = paddle.arange(t, dtype="int64") - paddle.gather(cu, bid)
    return paddle.gather(dec, bid) + local


# --------------------------------------------------------------------------- RoPE
def _rope_cos_sin64(
    positions: np.ndarray, head_dim: int, theta: float
) -> tuple[np.ndarray, np.ndarray]:
    d = int(head_dim)
    inv_freq = float(theta) ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.asarray(positions, dtype=np.float64).reshape(-1, 1) * inv_freq[None, :]  # [T, D/2]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


_ROPE_TABLE_MIN = 1024  # positions in the smallest cached table
_ROPE_TABLE_MAX = 1 << 15  # beyond this position the step's rows are computed directly


@functools.lru_cache(maxsize=4)
def _rope_table(head_dim: int, theta: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin ``[size, D/2]`` of positions ``0 .. size-1`` (a pure function, memoised)."""
    cos, sin = _rope_cos_sin64(np.arange(size), head_dim, theta)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rope_tables(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """The model's RoPE: ``[T, D/2]`` float32 host arrays ``cos`` / ``sin`` of the angles
    ``pos_t * theta ** (-2i / D)`` of pair ``(x[2i], x[2i+1])`` (interleaved RoPE, see
    :mod:`fd_mtp.model.ernie`). The angles and their cos / sin are computed in float64 and rounded
    once to float32, so the tables are exact to float32 rounding at any position (a float32 angle
    would be off by up to ``|angle| * 2**-24`` rad: ~1e-2 rad at position 131071).

    ``positions``: ``[T]`` (numpy array, list or Paddle tensor). Integer positions below
    ``_ROPE_TABLE_MAX`` are rows of a memoised table of positions ``0 .. 2**k - 1`` (the same
    float64-derived values, computed once per size), so a step costs a row gather, not T * D/2
    float64 cos / sin."""
    if isinstance(positions, paddle.Tensor):
        positions = positions.numpy()
    pos = np.asarray(positions).reshape(-1)
    if pos.size == 0 or pos.dtype.kind not in "iu" or pos.min() < 0 or pos.max() >= _ROPE_TABLE_MAX:
        return _rope_cos_sin64(pos, head_dim, theta)
    size = max(_ROPE_TABLE_MIN, 1 << int(pos.max()).bit_length())
    cos, sin = _rope_table(int(head_dim), float(theta), size)
    return cos[pos], sin[pos]


def _pair_sign(head_dim: int) -> np.ndarray:
    """``[-1, 1, -1, 1, ...]`` (``[D]`` float32): the sign of sin in the rotated pair."""
    return np.tile(np.array([-1.0, 1.0], np.float32), int(head_dim) // 2)


def _rotate_elementwise(x, cos, signed_sin):
    """``x * cos + swap(x) * signed_sin`` in float32 (``swap`` exchanges each pair), cast back to x's
    dtype: ``(a, b) -> (a cos - b sin, b cos + a sin)``. cos / signed_sin broadcast against x."""
    xf = x if x.dtype == paddle.float32 else x.astype("float32")
    shape = list(xf.shape)
    swapped = paddle.flip(xf.reshape(shape[:-1] + [shape[-1] // 2, 2]), axis=[-1]).reshape(shape)
    out = xf * cos + swapped * signed_sin
    return out if x.dtype == paddle.float32 else out.astype(x.dtype)


def rope_cos_sin(positions, head_dim: int, theta: float):
    """:func:`rope_tables` as ``[T, D]`` float32 Paddle tensors, each frequency repeated for its
    pair: the layout :func:`apply_rope_interleaved` takes."""
    cos, sin = rope_tables(positions, head_dim, theta)
    both = paddle.to_tensor(np.stack([np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)]))
    return both[0], both[1]


def apply_rope_interleaved(x, cos, sin):
    """The elementwise form on ``x [..., T, H, D]`` with ``cos`` / ``sin`` ``[T, D]`` from
    :func:`rope_cos_sin` (any leading batch dims: the demo model's training script uses
    ``[B, S, H, D]``); computed in float32, returned in x's dtype. Differentiable in x."""
    sign = paddle.to_tensor(_pair_sign(x.shape[-1]))
    return _rotate_elementwise(x, cos.unsqueeze(-2), (sin * sign).unsqueeze(-2))


class Rope:
    """The RoPE of one packed step (tokens at ``positions``), applied by ``apply(x [T, H, D])``.

    Both forms consume the same :func:`rope_tables`. Decode-sized steps (``T * D * D`` at most
    :attr:`MAX_MATRIX_ELEMENTS`) use one batched matmul with per-token ``[D, D]`` rotation matrices
    (2x2 blocks ``[[cos, sin], [-sin, cos]]`` acting on row vectors): a single op, where the
    elementwise form costs a chain of small ops that bounds a forward of a few tokens. Larger steps
    use the elementwise form (:func:`apply_rope_interleaved`'s maths). ``matrix_form`` forces one.
    ``rotation`` is the ``[T, D, D]`` tensor of the matrix form, else None.
    """

    MAX_MATRIX_ELEMENTS = 1 << 21  # 8 MB of float32 rotation matrices

    def __init__(self, positions, head_dim: int, theta: float, matrix_form: bool | None = None):
        d = int(head_dim)
        cos, sin = rope_tables(positions, d, theta)  # [T, D/2]
        t = cos.shape[0]
        if matrix_form is None:
            matrix_form = t * d * d <= self.MAX_MATRIX_ELEMENTS
        self.rotation = self.cos = self.signed_sin = None
        if matrix_form:
            rot = np.zeros((t, d, d), np.float32)
            i = np.arange(d // 2)
            rot[:, 2 * i, 2 * i] = cos
            rot[:, 2 * i + 1, 2 * i + 1] = cos
            rot[:, 2 * i, 2 * i + 1] = sin
            rot[:, 2 * i + 1, 2 * i] = -sin
            self.rotation = paddle.to_tensor(rot)
        else:
            both = paddle.to_tensor(
                np.stack([np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1) * _pair_sign(d)])
            )
            self.cos, self.signed_sin = both[0].unsqueeze(1), both[1].unsqueeze(1)  # [T, 1, D]

    def apply(self, x):
        if self.rotation is None:
            return _rotate_elementwise(x, self.cos, self.signed_sin)
        xf = x if x.dtype == paddle.float32 else x.astype("float32")
        out = paddle.matmul(xf, self.rotation)  # [T, H, D]
        return out if x.dtype == paddle.float32 else out.astype(x.dtype)


class AttentionBackend:
    """Interface: per step ``init_attention_metadata(meta, layer_ids)`` and ``rope(meta, ...)``
    (the step's :class:`Rope`, whose ``apply`` the model calls on q and k), then per layer
    ``forward(q, k, v, layer_id, meta)``.

    q: ``[T, Hq, D]``, k / v: ``[T, Hkv, D]`` (RoPE already applied to q and k), all of the cache's
    dtype. Writes k/v of token i of request b into the slot of position ``seq_lens_decoder[b] + i``
    of ``meta.caches[layer_id]`` (in place), then returns ``[T, Hq * D]``: causal attention of every
    token over positions ``0 .. seq_lens_decoder[b] + i`` of its request, scaled by ``1/sqrt(D)``,
    with grouped-query heads (q head h reads kv head ``h // (Hq // Hkv)``).
    """

    def init_attention_metadata(
        self, meta: ForwardMeta, layer_ids=None
    ) -> None:  # pragma: no cover
        """Build per-step bookkeeping once for the layers ``layer_ids`` (optional)."""

    def rope(self, meta: ForwardMeta, num_tokens: int, head_dim: int, theta: float) -> Rope:
        """The step's :class:`Rope` for its first ``num_tokens`` packed tokens (positions from
        :func:`token_positions`); called once per step, after :meth:`init_attention_metadata`. A
        backend may override it to reuse its host metadata or choose the form."""
        return Rope(token_positions(meta, num_tokens).numpy(), head_dim, theta)

    def forward(
        self, q, k, v, layer_id: int, meta: ForwardMeta
    ) -> paddle.Tensor:  # pragma: no cover
        raise NotImplementedError


@dataclass
class _PagedMetadata:
    num_tokens: int
    # [T] int64 host array: position of every packed token (seq_lens_decoder[b] + i)
    positions: np.ndarray
    # the kernel's metadata: block_tables [B, NB], cu_seqlens_q [B+1], batch_id_per_token [T],
    # seq_lens_decoder [B], int32 CPU tensors
    kernel_args: tuple
    # Paddle-ops path only (None when built for the kernel path):
    # write: one (block, offset) per packed token
    write_block: paddle.Tensor = None  # [T] int64
    write_offset: paddle.Tensor = None  # [T] int64
    # read: active requests only (seq_lens_this_time > 0); nbm = most context blocks of any of them
    gather_blocks: paddle.Tensor = (
        None  # [Ba * nbm] int64 block ids (padding -> block 0, masked out)
    )
    q_rows: paddle.Tensor = None  # [T] int64: row of token t in the padded [Ba * Qmax] query layout
    bias: paddle.Tensor = None  # [Ba, nbm, 1, Qmax, 1, block_size] float32: 0 visible, -inf masked
    num_active: int = 0
    max_q: int = 0
    max_blocks: int = 0


def _flat_host(x, name):
    if x is None:
        raise ValueError(f"ForwardMeta.{name} is None")
    return np.asarray(x.numpy()).reshape(-1).astype(np.int64)


@dataclass
class _HostMetadata:
    """A step's ForwardMeta on the host, validated (int64 arrays)."""

    q_lens: np.ndarray  # [B] seq_lens_this_time
    dec: np.ndarray  # [B] seq_lens_decoder
    cu: np.ndarray  # [B+1] cu_seqlens_q
    bid: np.ndarray  # [>= T] batch_id_per_token
    bt: np.ndarray  # [>= B, NB] block_tables
    bsz: int
    t: int  # packed tokens
    bid_expected: np.ndarray  # [T] the request of every packed token
    bs: int  # block size
    num_blocks: int  # the smallest block count of the layers' caches


def _host_metadata(meta: ForwardMeta, layer_ids) -> _HostMetadata:
    """``meta``'s index tensors on the host, checked against each other (ValueError naming the
    ForwardMeta field)."""
    q_lens = _flat_host(meta.seq_lens_this_time, "seq_lens_this_time")
    dec = _flat_host(meta.seq_lens_decoder, "seq_lens_decoder")
    cu = _flat_host(meta.cu_seqlens_q, "cu_seqlens_q")
    bid = _flat_host(meta.batch_id_per_token, "batch_id_per_token")
    bt = meta.block_tables.numpy()
    if bt.ndim != 2:
        raise ValueError(f"ForwardMeta.block_tables must be [B, NB], got shape {list(bt.shape)}")
    bsz = q_lens.shape[0]
    if bt.shape[0] < bsz:
        raise ValueError(
            f"ForwardMeta.block_tables has {bt.shape[0]} rows, fewer than the batch ({bsz})"
        )
    if cu.shape[0] != bsz + 1:
        raise ValueError(
            f"ForwardMeta.cu_seqlens_q must have B+1 = {bsz + 1} entries, got {cu.shape[0]}"
        )
    if (q_lens < 0).any() or (dec < 0).any():
        raise ValueError("ForwardMeta.seq_lens_this_time / seq_lens_decoder must be non-negative")
    if cu[0] != 0 or not np.array_equal(np.diff(cu), q_lens):
        raise ValueError(
            "ForwardMeta.cu_seqlens_q must be the exclusive prefix sum of seq_lens_this_time, "
            f"got {cu.tolist()} for seq_lens_this_time {q_lens.tolist()}"
        )
    t = int(cu[-1])
    expect_bid = np.repeat(np.arange(bsz), q_lens)
    if bid.shape[0] < t or not np.array_equal(bid[:t], expect_bid):
        raise ValueError(
            "ForwardMeta.batch_id_per_token does not match cu_seqlens_q "
            f"(expected {expect_bid.tolist()[:16]}..., got {bid.tolist()[:16]}...)"
        )
    bs = int(meta.block_size)
    if bs <= 0:
        raise ValueError(f"ForwardMeta.block_size must be positive, got {bs}")
    if layer_ids is None:
        layer_ids = [i for i, c in enumerate(meta.caches) if c is not None]
    try:
        num_blocks = min(int(meta.caches[i][0].shape[0]) for i in layer_ids)
    except (IndexError, TypeError, ValueError):
        raise ValueError(
            f"ForwardMeta.caches has no (key_cache, value_cache) for layers {list(layer_ids)} "
            f"({len(meta.caches)} entries)"
        ) from None
    return _HostMetadata(q_lens, dec, cu, bid, bt, bsz, t, expect_bid, bs, num_blocks)


class _Context:
    """The context the active requests (seq_lens_this_time > 0) read: every position's block,
    checked against block_tables' width and the caches' block count."""

    def __init__(self, host: _HostMetadata):
        bs, bt, nb = host.bs, host.bt, host.bt.shape[1]
        self.active = active = np.nonzero(host.q_lens > 0)[0]
        self.lens = ctx = host.dec[active] + host.q_lens[active]  # [Ba] context lengths
        self.max_q = int(host.q_lens[active].max()) if active.size else 0
        self.max_ctx = max_ctx = int(ctx.max()) if active.size else 0
        ba = active.size
        pos = np.arange(max_ctx)
        self.need = need = pos[None, :] < ctx[:, None]  # [Ba, L]
        col = np.minimum(pos // bs, max(nb - 1, 0))
        self.blocks = blocks = bt[active][:, col] if nb else np.full((ba, max_ctx), -1)  # [Ba, L]
        bad = need & ((pos[None, :] // bs >= nb) | (blocks < 0) | (blocks >= host.num_blocks))
        if bad.any():
            r, p = map(int, np.argwhere(bad)[0])
            b = int(active[r])
            entry = "beyond the table width" if p // bs >= nb else f"= {int(blocks[r, p])}"
            raise ValueError(
                f"ForwardMeta.block_tables: request {b} needs position {p} (block column {p // bs}) but "
                f"block_tables[{b}, {p // bs}] is {entry}; valid block ids are [0, {host.num_blocks})"
            )


def _i32(a):
    return paddle.to_tensor(np.ascontiguousarray(a, dtype=np.int32))


def _i64(a):
    return paddle.to_tensor(np.ascontiguousarray(a, dtype=np.int64).reshape(-1))


def _kernel_args(meta: ForwardMeta, host: _HostMetadata) -> tuple:
    """The kernel's int32 CPU tensors: the metadata tensor itself when it already is one (no
    host copy), else the host array."""

    def as_i32(tensor, array):
        if tensor.dtype == paddle.int32 and tensor.place.is_cpu_place():
            return tensor.reshape([-1]) if tensor.ndim != 1 else tensor
        return _i32(array)

    return (
        meta.block_tables
        if meta.block_tables.dtype == paddle.int32 and meta.block_tables.place.is_cpu_place()
        else _i32(host.bt[: host.bsz]),
        as_i32(meta.cu_seqlens_q, host.cu),
        as_i32(meta.batch_id_per_token, host.bid),
        as_i32(meta.seq_lens_decoder, host.dec),
    )


def _ops_path_metadata(host: _HostMetadata, ctx: _Context, positions, kernel_args):
    """The metadata with the Paddle-ops path's index tensors (see `_PagedMetadata`)."""
    bs, t, dec, active = host.bs, host.t, host.dec, ctx.active
    ba, max_q, max_ctx = active.size, ctx.max_q, ctx.max_ctx
    gather_block = np.where(ctx.need, ctx.blocks, 0)  # [Ba, L]

    row_of_req = np.full(host.bsz, -1)
    row_of_req[active] = np.arange(ba)
    tok_req = host.bid_expected
    tok_local = np.arange(t) - host.cu[tok_req]
    tok_pos = dec[tok_req] + tok_local
    tok_row = row_of_req[tok_req]
    write_block = gather_block[tok_row, tok_pos] if t else np.zeros(0, np.int64)
    write_offset = tok_pos % bs
    q_rows = tok_row * max_q + tok_local

    # the context is read whole blocks at a time: block column n holds positions n*bs .. n*bs+bs-1
    nbm = -(-max_ctx // bs)
    gather_blocks = gather_block[:, ::bs] if ba else np.zeros((0, 0), np.int64)  # [Ba, nbm]
    kpos = (np.arange(nbm)[:, None] * bs + np.arange(bs)[None, :]).reshape(1, nbm, 1, bs)
    qpos = (dec[active][:, None] + np.arange(max_q)[None, :]).reshape(ba, 1, max_q, 1)
    visible = (kpos <= qpos) & (kpos < ctx.lens.reshape(ba, 1, 1, 1))  # [Ba, nbm, Qmax, bs]
    bias = np.where(visible, 0.0, -np.inf).astype(np.float32).reshape(ba, nbm, 1, max_q, 1, bs)
    return _PagedMetadata(
        num_tokens=t,
        positions=positions,
        kernel_args=kernel_args,
        write_block=_i64(write_block),
        write_offset=_i64(write_offset),
        gather_blocks=_i64(gather_blocks),
        q_rows=_i64(q_rows),
        bias=paddle.to_tensor(bias),
        num_active=ba,
        max_q=max_q,
        max_blocks=nbm,
    )


class PagedAttentionCPU(AttentionBackend):
    """Paged attention: the fused kernel ``fd_mtp.ops.paged_attention`` for float32 CPU tensors
    (``use_kernel=True``, the default), else plain Paddle ops (gather the context, masked softmax,
    scatter the outputs; any dtype and place; ``use_kernel=False`` forces it, e.g. as an oracle).

    Bad metadata raises ValueError naming the field: a position needed this step whose block-table
    entry is -1, outside ``[0, num_blocks)``, or beyond the table's width names ``block_tables``;
    inconsistent lengths name ``cu_seqlens_q`` / ``batch_id_per_token`` / ``seq_lens_this_time``.
    """

    def __init__(self, use_kernel: bool = True):
        self.use_kernel = bool(use_kernel)

    def init_attention_metadata(self, meta: ForwardMeta, layer_ids=None) -> None:
        """Validate ``meta`` and build the step's index tensors (before any cache is written).
        ``layer_ids``: the cache layers this step will use (block ids are checked against the
        smallest of their block counts); default: every layer in ``meta.caches``."""
        meta.attn_metadata = self._build(meta, layer_ids)

    def rope(self, meta: ForwardMeta, num_tokens: int, head_dim: int, theta: float) -> Rope:
        """:class:`Rope` from the positions already on the host in the step's metadata."""
        md = meta.attn_metadata
        if not isinstance(md, _PagedMetadata):
            return super().rope(meta, num_tokens, head_dim, theta)
        return Rope(md.positions[: int(num_tokens)], head_dim, theta)

    def _metadata(self, meta: ForwardMeta, layer_id: int) -> _PagedMetadata:
        md = meta.attn_metadata
        if not isinstance(md, _PagedMetadata):
            md = self._build(meta, [layer_id])
            meta.attn_metadata = md
        return md

    def _build(self, meta: ForwardMeta, layer_ids=None, ops_path=None) -> _PagedMetadata:
        """Validate and build the metadata; the Paddle-ops index tensors only when ``ops_path``
        (default: when the kernel is not used)."""
        if ops_path is None:
            ops_path = not self.use_kernel
        host = _host_metadata(meta, layer_ids)
        ctx = _Context(host)
        positions = host.dec[host.bid_expected] + (np.arange(host.t) - host.cu[host.bid_expected])
        kernel_args = _kernel_args(meta, host)
        if not ops_path:
            return _PagedMetadata(num_tokens=host.t, positions=positions, kernel_args=kernel_args)
        return _ops_path_metadata(host, ctx, positions, kernel_args)

    def forward(self, q, k, v, layer_id: int, meta: ForwardMeta) -> paddle.Tensor:
        md = self._metadata(meta, layer_id)
        t, hq, d = q.shape
        hkv = k.shape[1]
        g = hq // hkv
        if t != md.num_tokens:
            raise ValueError(f"q has {t} tokens but ForwardMeta.cu_seqlens_q says {md.num_tokens}")
        if t == 0:
            return paddle.zeros([0, hq * d], dtype=q.dtype)
        key_cache, value_cache = meta.caches[layer_id]
        if (
            self.use_kernel
            and q.dtype == paddle.float32
            and k.dtype == paddle.float32
            and v.dtype == paddle.float32
            and key_cache.dtype == paddle.float32
            and value_cache.dtype == paddle.float32
            and q.place.is_cpu_place()
            and key_cache.place.is_cpu_place()
        ):
            from fd_mtp.ops import paged_attention

            return paged_attention(q, k, v, key_cache, value_cache, *md.kernel_args)
        if md.bias is None:  # built for the kernel path: add the Paddle-ops index tensors
            md = self._build(meta, [layer_id], ops_path=True)
            meta.attn_metadata = md
        bs = key_cache.shape[2]
        # 1. append this step's k/v into their slots (in place)
        key_cache[md.write_block, :, md.write_offset, :] = k.astype(key_cache.dtype)
        value_cache[md.write_block, :, md.write_offset, :] = v.astype(value_cache.dtype)
        # 2. every active request's context blocks, [Ba, nbm, Hkv, bs, D]: a row gather of the cache
        #    (no transpose of the context; scores are formed block by block)
        ba, mq, nbm = md.num_active, md.max_q, md.max_blocks
        kc = (
            paddle.gather(key_cache, md.gather_blocks)
            .astype("float32")
            .reshape([ba, nbm, hkv, bs, d])
        )
        vc = (
            paddle.gather(value_cache, md.gather_blocks)
            .astype("float32")
            .reshape([ba, nbm, hkv, bs, d])
        )
        # 3. queries padded per request: [Ba * Qmax, Hq, D] -> [Ba, 1, Hkv, Qmax * G, D]
        qp = paddle.zeros([ba * mq, hq, d], dtype="float32")
        qp = paddle.scatter(qp, md.q_rows, q.astype("float32"), overwrite=True)
        qp = (
            qp.reshape([ba, mq, hkv, g, d])
            .transpose([0, 2, 1, 3, 4])
            .reshape([ba, 1, hkv, mq * g, d])
        )
        scores = paddle.matmul(qp, kc, transpose_y=True) * (
            1.0 / float(d) ** 0.5
        )  # [Ba, nbm, Hkv, Qmax*G, bs]
        scores = scores.reshape([ba, nbm, hkv, mq, g, bs]) + md.bias
        # softmax over the whole context = over (block, offset): axes 1 and 5
        scores = paddle.exp(scores - paddle.max(scores, axis=[1, 5], keepdim=True))
        probs = (scores / paddle.sum(scores, axis=[1, 5], keepdim=True)).reshape(
            [ba, nbm, hkv, mq * g, bs]
        )
        out = paddle.matmul(probs, vc).sum(axis=1)  # [Ba, Hkv, Qmax*G, D]
        out = out.reshape([ba, hkv, mq, g, d]).transpose([0, 2, 1, 3, 4]).reshape([ba * mq, hq * d])
        return paddle.gather(out, md.q_rows).astype(q.dtype)


def kv_cache_shape(config, num_blocks: int, block_size: int) -> list[int]:
    """``[num_blocks, num_key_value_heads, block_size, head_dim]`` (one of a layer's two caches)."""
    return [int(num_blocks), int(config.num_key_value_heads), int(block_size), int(config.head_dim)]


def allocate_kv_caches(
    config, num_layers: int, num_blocks: int, block_size: int, dtype=None
) -> list[tuple]:
    """Zero-filled ``(key_cache, value_cache)`` per layer index ``0 .. num_layers-1`` (the MTP block
    uses index ``config.num_hidden_layers``, so pass ``num_hidden_layers + 1`` to include it)."""
    shape = kv_cache_shape(config, num_blocks, block_size)
    dtype = dtype or config.dtype
    return [
        (paddle.zeros(shape, dtype=dtype), paddle.zeros(shape, dtype=dtype))
        for _ in range(num_layers)
    ]
