"""KV-cache block manager of the engine (FastDeploy's v1 ``ResourceManagerV1`` role, spec §11).

With the v1 scheduler ``kv_cache_ratio`` is 1.0: every block of the paged cache is owned here (the
in-kernel free lists stay empty) and a request's block-table row is its list of block ids in
position order: position p of the request lives in block ``row[p // block_size]``, slot
``p % block_size``.
"""

from __future__ import annotations


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` positions: ``ceil(num_tokens / block_size)``."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Free list of KV block ids ``0 .. num_blocks - 1``.

    Blocks are handed out from the high end first, like FastDeploy's descending free lists
    (``N - 1, N - 2, ...``); freed blocks are reused first (LIFO). No hidden limits: allocation of
    more blocks than are free returns None and changes nothing.

    Example:
        >>> bm = BlockManager(num_blocks=4, block_size=16)
        >>> bm.allocate(2), bm.num_free
        ([3, 2], 2)
        >>> bm.allocate(3) is None, bm.num_free
        (True, 2)
        >>> bm.free([3]); bm.allocate(1)
        [3]
    """

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks))  # pop() takes the highest id first
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """``n`` block ids, or None (nothing taken) when fewer than ``n`` are free."""
        if n < 0:
            raise ValueError(f"allocate: n must be >= 0, got {n}")
        if n > len(self._free):
            return None
        ids = [self._free.pop() for _ in range(n)]
        self._used.update(ids)
        return ids

    def free(self, ids) -> None:
        """Return blocks to the pool; a block that is not allocated raises ValueError (double free)."""
        for i in ids:
            if i not in self._used:
                raise ValueError(f"free: block {i} is not allocated")
        for i in ids:
            self._used.remove(i)
            self._free.append(i)

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
