"""BlockManager: reference counts, the prefix cache (keys, lookup, registration, LRU eviction)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fd_mtp.engine.block_manager import ROOT_KEY, BlockManager, block_keys


def test_plain_pool_hands_out_high_ids_first_and_refuses_double_free():
    bm = BlockManager(4, 16)
    assert bm.allocate(3) == [3, 2, 1] and bm.num_free == 1
    assert bm.allocate(2) is None and bm.num_free == 1  # nothing taken
    bm.free([2])
    with pytest.raises(ValueError, match="block 2 is not allocated"):
        bm.free([2])
    with pytest.raises(ValueError, match="block 3 is not allocated"):
        bm.free([3, 3])  # one reference, freed twice in one call: nothing changes
    assert bm.num_free == 2 and bm.allocate(1) == [2]  # LIFO reuse


def test_caching_off_registers_and_finds_nothing():
    bm = BlockManager(4, 2)
    [b] = bm.allocate(1)
    assert bm.register(b, b"k") is False and bm.lookup([b"k"]) == [] and bm.num_cached == 0


def test_block_keys_chain_and_cover_the_next_token():
    ks = block_keys([5, 6, 7, 8, 9, 10, 11], 2, [], 3)
    # written out: key i = blake2b-128(key i-1, tokens [2i, 2i + 2] as little-endian int64)
    prev, want = ROOT_KEY, []
    for i in range(3):
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(np.asarray([5, 6, 7, 8, 9, 10, 11][2 * i : 2 * i + 3], "<i8").tobytes())
        prev = h.digest()
        want.append(prev)
    assert ks == want
    # the next block's first token is part of the key; a change there changes that key only
    other = block_keys([5, 6, 7, 8, 0, 10, 11], 2, [], 3)
    assert other[0] == ks[0] and other[1] != ks[1] and other[2] != ks[2]
    # an earlier block changes every later key (the chain)
    assert block_keys([9, 6, 7, 8, 9, 10, 11], 2, [], 3)[2] != ks[2]
    # extending a list of keys equals computing them at once
    part = block_keys([5, 6, 7, 8, 9, 10, 11], 2, [], 1)
    assert block_keys([5, 6, 7, 8, 9, 10, 11], 2, part, 3) == ks
    with pytest.raises(ValueError, match="3 keys need 7 tokens, the request has 6"):
        block_keys([5, 6, 7, 8, 9, 10], 2, [], 3)


def test_shared_blocks_are_reference_counted_and_evicted_least_recent_first():
    bm = BlockManager(4, 2, enable_caching=True)
    a = bm.allocate(2)
    assert [bm.register(b, k) for b, k in zip(a, [b"a0", b"a1"])] == [True, True]
    hits = bm.lookup([b"a0", b"a1", b"a2"])
    assert hits == a
    bm.acquire(hits)  # a second request shares both
    bm.free(a[::-1])  # the first leaves: still held by the second
    assert bm.num_free == 2 and bm.num_used == 2
    bm.free(hits[::-1])  # tail first: a1 is the least recently released
    assert bm.num_free == 4 and bm.num_cached == 2
    fresh = bm.allocate(3)  # two uncached blocks, then a1 is evicted
    assert a[1] in fresh and a[0] not in fresh and bm.num_evictions == 1
    assert bm.lookup([b"a0", b"a1"]) == [a[0]] and bm.num_cached == 1
    bm.acquire([a[0]])  # an evictable block taken back leaves the evictable list
    assert bm.num_free == 0 and bm.allocate(1) is None


def test_a_key_cached_twice_keeps_the_first_block():
    bm = BlockManager(3, 2, enable_caching=True)
    x, y = bm.allocate(2)
    assert bm.register(x, b"k") and not bm.register(y, b"k") and not bm.register(x, b"j")
    bm.free([y])
    assert bm.num_cached == 1 and bm.allocate(1) == [y]  # y stayed private: uncached free list


def test_register_and_acquire_refuse_blocks_in_the_wrong_state():
    bm = BlockManager(3, 2, enable_caching=True)
    with pytest.raises(ValueError, match="block 1 is not allocated"):
        bm.register(1, b"k")
    with pytest.raises(ValueError, match="block 0 is not cached"):
        bm.acquire([0])


def test_reset_cache_forgets_only_unheld_blocks():
    bm = BlockManager(4, 2, enable_caching=True)
    a, b = bm.allocate(2)
    bm.register(a, b"a")
    bm.register(b, b"b")
    bm.free([a])
    assert bm.reset_cache() == 1 and bm.lookup([b"a"]) == [] and bm.lookup([b"b"]) == [b]
    assert bm.num_free == 3


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), min_size=1, max_size=60))
def test_random_operations_keep_every_block_in_exactly_one_state(ops):
    """Allocate / share / release / register at random against a model of reference counts:
    every block is free, evictable (cached, unheld) or held, never two of them; lookups only
    return registered blocks; num_free counts the free and the evictable."""
    N = 6
    bm = BlockManager(N, 2, enable_caching=True)
    held: list[int] = []  # one entry per reference
    keys = [bytes([i]) for i in range(6)]
    for op, arg in ops:
        if op == 0:
            got = bm.allocate(arg % 3)
            if got is not None:
                held += got
        elif op == 1 and held:
            b = held.pop(arg % len(held))
            bm.free([b])
        elif op == 2 and held:
            bm.register(held[arg % len(held)], keys[arg])
        elif op == 3:
            hits = bm.lookup(keys[: arg + 1])
            bm.acquire(hits)
            held += hits
        elif op == 4:
            bm.reset_cache()
        ref = np.bincount(np.asarray(held, np.int64), minlength=N)
        assert list(ref) == bm._ref
        free, evict = set(bm._free), set(bm._evictable)
        assert not free & evict and len(free) == len(bm._free)
        for blk in range(N):
            states = [ref[blk] > 0, blk in free, blk in evict]
            assert sum(states) == 1, (blk, states)
            if blk in evict:
                assert blk in bm._key_of
        assert {bm._block_of[k]: k for k in bm._block_of} == bm._key_of
        assert bm.num_free == len(free) + len(evict) == N - int((ref > 0).sum())
