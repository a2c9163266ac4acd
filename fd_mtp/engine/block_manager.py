"""KV-cache block manager of the engine (FastDeploy's v1 ``ResourceManagerV1`` role, spec §11),
with automatic prefix caching.

With the v1 scheduler ``kv_cache_ratio`` is 1.0: every block of the paged cache is owned here (the
in-kernel free lists stay empty) and a request's block-table row is its list of block ids in
position order: position p of the request lives in block ``row[p // block_size]``, slot
``p % block_size``.

Prefix caching (vLLM's automatic prefix caching, FastDeploy's ``enable_prefix_caching``): a full
block whose K/V (the target's and, under MTP, the draft model's) are final is *registered* under a
key of its content and its place in the chain, `block_keys`; a later request whose tokens start
with the same blocks takes them (`lookup`, `acquire`) instead of computing them. Blocks are shared
read-only with reference counts. A block nobody holds any more stays cached and *evictable*; when
the uncached free list runs out, `allocate` evicts the least recently released one (its key is
forgotten). A request releases its blocks last-first, so the tail of a chain is evicted before its
head (which more requests share).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

#: the key of the (empty) chain before a request's first block
ROOT_KEY = b"fd_mtp-prefix-cache-v1"


@dataclass(frozen=True)
class PrefixCacheStats:
    """The prefix cache's counters: ``queries`` / ``hits``, tokens of admitted requests looked
    up / found in the cache (vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits``; a
    request preempted and admitted again counts again); ``cached_blocks`` registered now;
    ``evictions`` so far."""

    enabled: bool
    queries: int
    hits: int
    cached_blocks: int
    evictions: int

    @property
    def hit_rate(self) -> float | None:
        """hits / queries (None before any query)."""
        return self.hits / self.queries if self.queries else None

    def summary(self) -> str:
        if not self.enabled:
            return "off"
        rate = "-" if self.hit_rate is None else f"{100 * self.hit_rate:.1f} %"
        return (
            f"hit rate {rate} ({self.hits} of {self.queries} prompt tokens), "
            f"{self.cached_blocks} blocks cached, {self.evictions} evicted"
        )


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` positions: ``ceil(num_tokens / block_size)``."""
    return -(-num_tokens // block_size)


def block_keys(token_ids, block_size: int, keys: list[bytes], upto: int) -> list[bytes]:
    """Extend ``keys`` (the keys of a request's first ``len(keys)`` blocks) to ``upto`` keys.

    Block i's key is a 128-bit BLAKE2b digest of block i-1's key and the tokens at positions
    ``[i * block_size, (i + 1) * block_size]``: the block's own tokens *and the first token of
    the next block*. The extra token is what the MTP draft model read at the block's last
    position (its input at position p is the target's hidden state at p and token p + 1), so a
    key fixes every K/V entry the block holds, the draft's included. A key therefore needs
    ``(i + 1) * block_size + 1`` tokens; asking for more keys than ``token_ids`` allows raises.
    Digests, not Python's ``hash``: the same on every process (tensor-parallel ranks must agree).

    >>> ks = block_keys([5, 6, 7, 8, 9], 2, [], 2)
    >>> len(ks), ks == block_keys([5, 6, 7, 8, 1], 2, [], 2), ks[0] == block_keys([5, 6, 7, 0], 2, [], 1)[0]
    (2, False, True)
    """
    need = upto * block_size + 1 if upto > 0 else 0
    if need > len(token_ids):
        raise ValueError(
            f"block_keys: {upto} keys need {need} tokens, the request has {len(token_ids)}"
        )
    ids = np.asarray(token_ids[: max(need, 0)], dtype="<i8")
    prev = keys[-1] if keys else ROOT_KEY
    for i in range(len(keys), upto):
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(ids[i * block_size : (i + 1) * block_size + 1].tobytes())
        prev = h.digest()
        keys.append(prev)
    return keys


class BlockManager:
    """Free list of KV block ids ``0 .. num_blocks - 1``, with reference counts and (when
    ``enable_caching``) a cache of full blocks by content key.

    Blocks are handed out from the high end first, like FastDeploy's descending free lists
    (``N - 1, N - 2, ...``); freed blocks are reused first (LIFO). No hidden limits: allocation of
    more blocks than are free (uncached free plus evictable) returns None and changes nothing.

    Example:
        >>> bm = BlockManager(num_blocks=4, block_size=16)
        >>> bm.allocate(2), bm.num_free
        ([3, 2], 2)
        >>> bm.allocate(3) is None, bm.num_free
        (True, 2)
        >>> bm.free([3]); bm.allocate(1)
        [3]

    With caching, a registered block outlives its request until it is evicted:

        >>> bm = BlockManager(num_blocks=2, block_size=2, enable_caching=True)
        >>> [b] = bm.allocate(1); bm.register(b, b"k0")
        True
        >>> bm.free([b])
        >>> bm.lookup([b"k0", b"k1"]) == [b], bm.num_free, bm.num_cached
        (True, 2, 1)
        >>> bm.allocate(2) is not None, bm.num_cached       # evicted to serve the allocation
        (True, 0)
    """

    def __init__(self, num_blocks: int, block_size: int, *, enable_caching: bool = False):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = bool(enable_caching)
        self._free = list(range(num_blocks))  # uncached, unused; pop() takes the highest id
        self._ref = [0] * num_blocks
        self._key_of: dict[int, bytes] = {}  # registered block -> its key
        self._block_of: dict[bytes, int] = {}  # key -> registered block
        #: registered blocks no request holds, least recently released first
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks an allocation can take now: uncached free ones plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Registered blocks (held by requests or evictable)."""
        return len(self._key_of)

    @property
    def num_used(self) -> int:
        """Blocks some request holds."""
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[int] | None:
        """``n`` block ids, or None (nothing taken) when fewer than ``n`` are free. Uncached free
        blocks go first; then the least recently released cached blocks are evicted."""
        if n < 0:
            raise ValueError(f"allocate: n must be >= 0, got {n}")
        if n > self.num_free:
            return None
        ids = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._evictable.popitem(last=False)
                del self._block_of[self._key_of.pop(b)]
                self.num_evictions += 1
            self._ref[b] = 1
            ids.append(b)
        return ids

    def free(self, ids) -> None:
        """Drop one reference to each block; a block nobody holds goes back to the pool (a
        registered one stays cached, evictable, most recently released last). A block that is
        not held raises ValueError (double free) and nothing changes."""
        ids = list(ids)
        counts: dict[int, int] = {}
        for i in ids:
            counts[i] = counts.get(i, 0) + 1
            if not 0 <= i < self.num_blocks or counts[i] > self._ref[i]:
                raise ValueError(f"free: block {i} is not allocated")
        for i in ids:
            self._ref[i] -= 1
            if self._ref[i] == 0:
                if i in self._key_of:
                    self._evictable[i] = None
                else:
                    self._free.append(i)

    def lookup(self, keys) -> list[int]:
        """The registered blocks of the longest prefix of ``keys`` found in the cache (nothing
        is taken: `acquire` them)."""
        if not self.enable_caching:
            return []
        hits = []
        for k in keys:
            b = self._block_of.get(k)
            if b is None:
                break
            hits.append(b)
        return hits

    def acquire(self, ids) -> None:
        """Take a reference to each (registered) block of ``ids``, e.g. `lookup`'s hits."""
        for b in ids:
            if b not in self._key_of:
                raise ValueError(f"acquire: block {b} is not cached")
            if self._ref[b] == 0:
                del self._evictable[b]
            self._ref[b] += 1

    def register(self, block: int, key: bytes) -> bool:
        """Cache the held, full block ``block`` under ``key``; False when caching is off, the
        key is cached already (another block holds the same content: this one stays private)
        or the block is registered already."""
        if not self.enable_caching or key in self._block_of or block in self._key_of:
            return False
        if self._ref[block] < 1:
            raise ValueError(f"register: block {block} is not allocated")
        self._key_of[block] = key
        self._block_of[key] = block
        return True

    def reset_cache(self) -> int:
        """Forget every cached block nobody holds (vLLM's ``reset_prefix_cache``); held blocks
        stay registered. Returns the number of blocks freed from the cache."""
        n = len(self._evictable)
        for b in self._evictable:
            del self._block_of[self._key_of.pop(b)]
            self._free.append(b)
        self._evictable.clear()
        return n

    def grow(self, row: list[int], num_tokens: int) -> bool:
        """Append blocks to ``row`` until it holds ``num_tokens`` positions; False (row unchanged)
        when the pool cannot supply them."""
        need = blocks_for(num_tokens, self.block_size) - len(row)
        if need <= 0:
            return True
        ids = self.allocate(need)
        if ids is None:
            return False
        row.extend(ids)
        return True
