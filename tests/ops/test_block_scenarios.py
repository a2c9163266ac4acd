"""Scripted multi-step scenarios of the block managers (spec ops.md §4.1 steps 1 and 9, §4.2,
§5.13-§5.15, §11), driven by a tiny numpy engine.

The "model": request q has a prompt and a fixed continuation; the token at position p of its
sequence is ``token(q, p)``. A prefill step over ``n`` tokens checks that its input row is exactly
the first ``n`` tokens of the sequence and emits the token at position n; a decode step at
``seq_lens_decoder = d`` (its first input token is the last accepted one, at position d) emits
the tokens of positions d+1 ... d+a, a = 1..K+1 decided by (q, tokens generated so far). The
engine then does what the target's verify / update / set_value ops would (seq_lens_decoder,
step_idx, pre_ids, accept_num, accept_tokens, draft_tokens; a few lines of numpy, no other fd_mtp
op). Every KV position a step writes must lie in a block the request owns.

(a) v0: speculate_step_paddle with a small free list: requests are preempted, recovered one per
    call with a re-prefill of prompt + generated tokens, and finish with exactly the tokens of a
    run with ample blocks.
(a') v0 variants: speculate_step_system_cache with no cached prefix runs exactly as (a);
    speculate_step_reschedule hands preempted requests back and the test, as the scheduler,
    re-inserts them as prefills of prompt + generated tokens; every request still finishes with
    exactly its tokens and every decode block comes back.
(b) v1: speculate_schedule_cache + recover_decode_task with the test acting as the Python
    scheduler (a small block pool, at most one grant per step): requests block-step when their
    next slot is missing, get a block later, resume with their parked lengths and draft row, and
    finish with the unconstrained run's tokens.

Each op call runs the Paddle op and the numpy reference on the same state and asserts equality.
Both scenarios run for three (block_size, K, pool size) settings. (With fewer free blocks than
one request's decode blocks, v0 preempts and recovers that request forever, as upstream would.)
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from util import assert_same, run_both

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.testing.op_inputs import positional

BS, K = 4, 2  # block_size >= K + 1: a decode step never crosses more than one block boundary
L = 64  # input_ids / pre_ids width (max_decoder_block_num = 16)
NB = L // BS + 1
PROMPT_LENS = (3, 5, 8, 4, 9, 6)
MAX_GEN = (20, 14, 26, 11, 17, 23)
NREQ = len(PROMPT_LENS)
BSZ = NREQ + 1  # one empty slot
MAX_STEPS = 400


def token(q, pos):
    if pos < PROMPT_LENS[q]:
        return 100 * (q + 1) + pos
    return 10_000 * (q + 1) + pos


def sequence(q, n):
    return [token(q, p) for p in range(n)]


def expected_generated(q):
    return np.array([token(q, PROMPT_LENS[q] + k - 1) for k in range(1, MAX_GEN[q] + 1)], np.int64)


def n_emit(q, generated):
    return 1 + (7 * q + 3 * generated) % (K + 1)


def call_both(op, names, state, *attrs, **kwargs):
    """Runs the op ``op`` (a name) and its reference on copies of state[names]; asserts they agree;
    stores the op's."""
    op_args, ref_args, _, _ = run_both(
        lambda *a: getattr(ops, op)(*a, *attrs, **kwargs),
        lambda *a: getattr(reference, op)(*a, *attrs, **kwargs),
        [state[n] for n in names],
    )
    for n, a, e in zip(names, op_args, ref_args):
        if e is not None:
            assert_same(a, e, n)
            state[n] = a


def assert_covered(state, b, first, count, what):
    for pos in range(first, first + count):
        assert state["block_tables"][b, pos // BS] != -1, (
            f"{what}: request {b} writes KV position {pos} without a block"
        )


def assert_unique_owners(tables, free):
    live = np.concatenate([tables[tables != -1], np.asarray(free, np.int32)])
    values, counts = np.unique(live, return_counts=True)
    assert np.all(counts == 1), f"block ids owned twice: {values[counts > 1].tolist()}"


def engine_step(s, v1):
    """Target forward + verify/update/set_value for every running request (numpy)."""
    for b in range(NREQ):
        if s["stop_flags"][b]:
            if (
                v1
            ):  # a stopped row is clobbered upstream (preprocess/update); recovery must restore it
                s["draft_tokens"][b, :] = -1
            continue
        q = b
        step = int(s["step_idx"][b])
        if s["seq_lens_encoder"][b] > 0:  # prefill (first one, or v0 re-prefill after recovery)
            n = int(s["seq_lens_encoder"][b])
            assert_covered(s, b, 0, n, "prefill")
            assert s["input_ids"][b, :n].tolist() == sequence(q, n), (
                f"request {b}: prefill row is not the sequence"
            )
            tokens = [token(q, n)]
            s["seq_lens_decoder"][b] = n
            s["seq_lens_encoder"][b] = 0
        else:
            d = int(s["seq_lens_decoder"][b])
            assert d == PROMPT_LENS[q] + step - 1, (
                f"request {b}: decoder length {d} with step_idx {step}"
            )
            assert_covered(s, b, d, int(s["seq_lens_this_time"][b]), "decode")
            if v1:
                assert s["draft_tokens"][b, 0] == token(q, d), (
                    f"request {b}: first input token is not the last accepted"
                )
            a = min(n_emit(q, step), MAX_GEN[q] - step)
            tokens = [token(q, d + 1 + i) for i in range(a)]
            s["seq_lens_decoder"][b] = d + a
            s["input_ids"][b, 0] = tokens[
                -1
            ]  # as upstream's update does; the v0 recovery restores column 0
        a = len(tokens)
        s["pre_ids"][b, step + 1 : step + 1 + a] = tokens  # target convention: token k at index k
        s["step_idx"][b] = step + a
        s["accept_num"][b] = a
        s["seq_lens_this_time"][b] = K + 1
        if v1:
            s["accept_tokens"][b, :a] = tokens
            d = int(s["seq_lens_decoder"][b])
            s["draft_tokens"][b, 0] = tokens[-1]
            s["draft_tokens"][b, 1:] = [token(q, d + 1 + i) for i in range(K)]
        if s["step_idx"][b] >= MAX_GEN[q]:
            s["stop_flags"][b] = True
    for b in range(BSZ):  # set_value_by_flags: stopped requests
        if s["stop_flags"][b]:
            s["accept_num"][b] = 0
            s["seq_lens_decoder"][b] = 0


def finished(s, q):
    return (
        bool(s["stop_flags"][q])
        and not bool(s["is_block_step"][q])
        and int(s["step_idx"][q]) >= MAX_GEN[q]
    )


def prefilling_state(**fields):
    """The arrays every scenario's ops share, all slots empty and stopped, with ``fields`` (the
    other arguments of the scenario's ops)."""
    return dict(
        stop_flags=np.ones(BSZ, bool),
        seq_lens_this_time=np.zeros(BSZ, np.int32),
        seq_lens_encoder=np.zeros(BSZ, np.int32),
        seq_lens_decoder=np.zeros(BSZ, np.int32),
        block_tables=np.full((BSZ, NB), -1, np.int32),
        is_block_step=np.zeros(BSZ, bool),
        accept_num=np.zeros(BSZ, np.int32),
        input_ids=np.zeros((BSZ, L), np.int64),
        pre_ids=np.full((BSZ, L), -1, np.int64),
        step_idx=np.zeros(BSZ, np.int64),
        **fields,
    )


def insert_prefills(s, blocks):
    """Inserts request q (slot q) as a prefill of its whole prompt (spec §4.2), with the block ids
    ``blocks(prompt length)`` at the start of its table row."""
    for q, plen in enumerate(PROMPT_LENS):
        s["input_ids"][q, :plen] = sequence(q, plen)
        s["seq_lens_encoder"][q] = s["seq_lens_this_time"][q] = plen
        s["stop_flags"][q] = False
        ids = blocks(plen)
        s["block_tables"][q, : len(ids)] = ids


def scenario_steps(s, scenario):
    """The steps of ``scenario`` on state ``s`` until every request has finished; fails the test
    when that takes more than MAX_STEPS."""
    for step in range(MAX_STEPS):
        if all(finished(s, q) for q in range(NREQ)):
            return
        yield step
    pytest.fail(f"{scenario} scenario did not finish in {MAX_STEPS} steps")


# ------------------------------------------------------------------------------------------------
# (a) v0: speculate_step_paddle
# ------------------------------------------------------------------------------------------------
V0_NAMES = tuple(positional("speculate_step_paddle")[:23])  # the tensors, from the schema


def v0_state(n_free):
    z32 = lambda: np.zeros(BSZ, np.int32)  # noqa: E731
    s = prefilling_state(
        ori_seq_lens_encoder=z32(),
        encoder_block_lens=z32(),
        step_block_list=np.full(BSZ, -1, np.int32),
        step_lens=np.zeros(1, np.int32),
        recover_block_list=np.full(BSZ, -1, np.int32),
        recover_lens=np.zeros(1, np.int32),
        need_block_list=np.full(BSZ, -1, np.int32),
        need_block_len=np.zeros(1, np.int32),
        used_list_len=z32(),
        # decode blocks: ids n_free-1 ... 0 (descending, spec §11), popped from the end
        free_list=np.zeros(n_free + 8, np.int32),
        free_list_len=np.array([n_free], np.int32),
        next_tokens=np.full((BSZ, 1), -1, np.int64),
        first_token_ids=np.full(BSZ, -1, np.int64),
    )
    s["free_list"][:n_free] = np.arange(n_free - 1, -1, -1)
    enc_ids = iter(range(1000, 2000))  # the scheduler's prompt blocks
    # insert_prefill_inputs, unchunked: prompt blocks + one spare (enc_dec_block_num)
    insert_prefills(s, lambda plen: [next(enc_ids) for _ in range(-(-plen // BS) + 1)])
    s["first_token_ids"][:NREQ] = s["input_ids"][:NREQ, 0]
    s["ori_seq_lens_encoder"][:] = s["seq_lens_encoder"]
    s["encoder_block_lens"][:] = np.sum(s["block_tables"] != -1, axis=1)
    return s


def run_v0(n_free):
    s = v0_state(n_free)
    log = dict(preempted=[], recovered=[])
    for step in scenario_steps(s, "v0"):
        engine_step(s, v1=False)
        before = {n: a.copy() for n, a in s.items()}
        call_both("speculate_step_paddle", V0_NAMES, s, BS, 2, K)
        assert_unique_owners(s["block_tables"], s["free_list"][: int(s["free_list_len"][0])])
        assert s["need_block_len"][0] == 0 and s["recover_lens"][0] == 0
        newly = np.flatnonzero(s["is_block_step"] & ~before["is_block_step"])
        for b in newly:
            assert (
                s["stop_flags"][b] and s["accept_num"][b] == 0 and s["seq_lens_this_time"][b] == 0
            )
            assert s["seq_lens_decoder"][b] == 0 and s["step_idx"][b] == before["step_idx"][b]
            log["preempted"].append((step, int(b)))
        back = np.flatnonzero(before["is_block_step"] & ~s["is_block_step"])
        assert len(back) <= 1, "at most one recovery per call"
        for r in back:
            assert r == before["step_block_list"][before["step_lens"][0] - 1] or r in newly, "LIFO"
            n = PROMPT_LENS[r] + int(s["step_idx"][r])
            assert (
                s["seq_lens_encoder"][r] == s["seq_lens_this_time"][r] == n
                and not s["stop_flags"][r]
            )
            gen = s["pre_ids"][r, 1 : int(s["step_idx"][r]) + 1].tolist()
            assert s["input_ids"][r, :n].tolist() == sequence(int(r), PROMPT_LENS[r]) + gen, (
                "re-prefill row"
            )
            log["recovered"].append((step, int(r)))
    return s, log


def configure(monkeypatch, block_size, k):
    """Runs the scenario with another block size / K (block_size >= K + 1, see BS above)."""
    assert block_size >= k + 1
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "BS", block_size)
    monkeypatch.setattr(module, "K", k)
    monkeypatch.setattr(module, "NB", L // block_size + 1)


@pytest.mark.parametrize("block_size, k, n_free", [(4, 2, 8), (2, 1, 14), (8, 3, 3)])
def test_v0_preemption_and_recovery_lose_and_repeat_no_token(monkeypatch, block_size, k, n_free):
    configure(monkeypatch, block_size, k)
    ample, ample_log = run_v0(n_free=200)
    assert not ample_log["preempted"] and not ample_log["recovered"]
    tight, log = run_v0(n_free=n_free)
    assert len(log["preempted"]) >= 3, log
    assert len(log["recovered"]) >= 3, log
    assert len({r for _, r in log["preempted"]}) >= 2, "more than one request is preempted"
    for q in range(NREQ):
        gen = tight["pre_ids"][q, 1 : MAX_GEN[q] + 1]
        assert_same(gen, expected_generated(q), f"request {q} tokens")
        assert_same(gen, ample["pre_ids"][q, 1 : MAX_GEN[q] + 1], f"request {q} vs ample run")
        assert tight["step_idx"][q] == MAX_GEN[q]
    # everything finished: every decode block is back in the free list
    assert int(tight["free_list_len"][0]) == n_free
    assert sorted(tight["free_list"][:n_free].tolist()) == list(range(n_free))


# ------------------------------------------------------------------------------------------------
# (a') v0 variants: speculate_step_system_cache (no cached prefix: identical to (a)) and
# speculate_step_reschedule with the test as the scheduler that re-inserts preempted requests
# ------------------------------------------------------------------------------------------------
SYSTEM_CACHE_NAMES = V0_NAMES[:3] + ("ori_seq_lens_decoder",) + V0_NAMES[3:]


def run_reschedule(n_free):
    """v0 with speculate_step_reschedule: a preempted request is handed back; the scheduler (the
    test) re-inserts it at once as a prefill of prompt + generated tokens, with fresh prompt blocks
    from its own pool (its old ones, still in the row, go back to that pool)."""
    s = v0_state(n_free)
    pool = list(range(3000, 4000))
    log = []
    for step in scenario_steps(s, "reschedule"):
        engine_step(s, v1=False)
        before = {n: a.copy() for n, a in s.items()}
        call_both("speculate_step_reschedule", V0_NAMES, s, BS, 2, K)
        assert_unique_owners(s["block_tables"], s["free_list"][: int(s["free_list_len"][0])])
        assert s["need_block_len"][0] == 0
        for name in ("step_block_list", "step_lens", "recover_block_list", "is_block_step"):
            assert_same(s[name], before[name], name + " (never written)")
        for b in np.flatnonzero(s["stop_flags"] & ~before["stop_flags"]):
            assert s["seq_lens_this_time"][b] == 0 and s["seq_lens_decoder"][b] == 0
            assert s["used_list_len"][b] == 0 and s["encoder_block_lens"][b] == 0
            assert s["accept_num"][b] == before["accept_num"][b], "a victim keeps accept_num"
            log.append((step, int(b)))
            q, g = int(b), int(s["step_idx"][b])
            n = PROMPT_LENS[q] + g
            row = s["block_tables"][b]
            pool.extend(int(x) for x in row[row != -1])  # its prompt blocks (decode ones: freed)
            row[:] = -1
            n_enc = -(-n // BS) + 1
            row[:n_enc] = [pool.pop(0) for _ in range(n_enc)]
            s["encoder_block_lens"][b] = n_enc
            s["input_ids"][b, :n] = (
                sequence(q, PROMPT_LENS[q]) + s["pre_ids"][b, 1 : g + 1].tolist()
            )
            s["seq_lens_encoder"][b] = s["seq_lens_this_time"][b] = n
            s["stop_flags"][b] = False
            s["first_token_ids"][b] = s["input_ids"][b, 0]
    return s, log


@pytest.mark.parametrize("block_size, k, n_free", [(4, 2, 8), (2, 1, 14), (8, 3, 3)])
def test_v0_reschedule_hands_back_and_loses_no_token(monkeypatch, block_size, k, n_free):
    configure(monkeypatch, block_size, k)
    tight, log = run_reschedule(n_free)
    assert len(log) >= 3, log
    for q in range(NREQ):
        gen = tight["pre_ids"][q, 1 : MAX_GEN[q] + 1]
        assert_same(gen, expected_generated(q), f"request {q} tokens")
        assert tight["step_idx"][q] == MAX_GEN[q]
    assert int(tight["free_list_len"][0]) == n_free  # every decode block came back
    assert sorted(tight["free_list"][:n_free].tolist()) == list(range(n_free))


def test_v0_system_cache_without_a_cached_prefix_runs_as_speculate_step_paddle(monkeypatch):
    configure(monkeypatch, 4, 2)
    plain, plain_log = run_v0(n_free=8)
    monkeypatch.setattr(
        sys.modules[__name__],
        "call_both",
        _as_system_cache(call_both),
    )
    cached, log = run_v0(n_free=8)
    assert log == plain_log and len(log["recovered"]) >= 3
    for name in V0_NAMES:
        assert_same(cached[name], plain[name], name)


def _as_system_cache(call):
    """call_both that runs speculate_step_system_cache (ori_seq_lens_decoder all 0) where the v0
    scenario runs speculate_step_paddle."""

    def run(op, names, state, *attrs, **kwargs):
        if op != "speculate_step_paddle":
            return call(op, names, state, *attrs, **kwargs)
        state.setdefault("ori_seq_lens_decoder", np.zeros(BSZ, np.int32))
        return call("speculate_step_system_cache", SYSTEM_CACHE_NAMES, state, *attrs, **kwargs)

    return run


# ------------------------------------------------------------------------------------------------
# (b) v1: speculate_schedule_cache + recover_decode_task, the test as the scheduler
# ------------------------------------------------------------------------------------------------
SCHEDULE_NAMES = tuple(positional("speculate_schedule_cache")[:15])  # the tensors, from the schema
RECOVER_NAMES = tuple(positional("recover_decode_task")[:10])  # the tensors, from the schema


def v1_state(pool, prealloc):
    s = prefilling_state(
        step_seq_lens_decoder=np.zeros(BSZ, np.int32),
        draft_tokens=np.zeros((BSZ, K + 1), np.int64),
        step_draft_tokens=np.zeros((BSZ, K + 1), np.int64),
        step_seq_lens_this_time=np.zeros(BSZ, np.int32),
        prompt_lens=np.zeros(BSZ, np.int64),
        accept_tokens=np.zeros((BSZ, K + 1), np.int64),
        not_need_stop=np.array([False]),
        stop_nums=np.array([BSZ], np.int64),
    )
    # insert_tasks_v1, PREFILL task: prompt blocks + one extra block for speculative decoding;
    # `prealloc`: the whole row
    insert_prefills(
        s, lambda plen: [pool.pop() for _ in range(NB if prealloc else -(-plen // BS) + 1)]
    )
    s["prompt_lens"][:] = s["seq_lens_encoder"]
    s["not_need_stop"][0] = True
    return s


def run_v1(pool_size, grants_per_step, prealloc=False):
    pool = list(range(pool_size - 1, -1, -1))
    s = v1_state(pool, prealloc)
    released = set()
    parked_since = {}
    log = dict(block_steps=[], recoveries=[], waits=[])
    for step in scenario_steps(s, "v1"):
        # 1. recover_decode_task at the start of the step
        before = {n: a.copy() for n, a in s.items()}
        call_both("recover_decode_task", RECOVER_NAMES, s, BS, K)
        for b in np.flatnonzero(before["is_block_step"] & ~s["is_block_step"]):
            assert not s["stop_flags"][b] and s["seq_lens_encoder"][b] == 0
            assert s["seq_lens_decoder"][b] == before["step_seq_lens_decoder"][b]
            assert s["seq_lens_this_time"][b] == before["step_seq_lens_this_time"][b] == K + 1
            assert_same(s["draft_tokens"][b], before["step_draft_tokens"][b], "restored draft row")
            log["recoveries"].append((step, int(b)))
            log["waits"].append(step - parked_since.pop(int(b)))
        # 2. target step
        engine_step(s, v1=True)
        # 3. speculate_schedule_cache after the proposer
        before = {n: a.copy() for n, a in s.items()}
        call_both("speculate_schedule_cache", SCHEDULE_NAMES, s, BS, K, prefill_one_step_stop=False)
        for b in np.flatnonzero(s["is_block_step"] & ~before["is_block_step"]):
            slot = (int(before["seq_lens_decoder"][b]) + 2 * K + 2) // BS
            assert before["block_tables"][b, slot] == -1
            assert (
                s["stop_flags"][b]
                and s["seq_lens_this_time"][b] == 0
                and s["seq_lens_decoder"][b] == 0
            )
            assert s["step_seq_lens_decoder"][b] == before["seq_lens_decoder"][b]
            assert s["accept_num"][b] == 0 and np.all(s["accept_tokens"][b] == -1)
            assert_same(s["step_draft_tokens"][b], before["draft_tokens"][b], "parked draft row")
            log["block_steps"].append((step, int(b)))
            parked_since[int(b)] = step
        running = sum(1 for q in range(BSZ) if not s["stop_flags"][q])
        assert bool(s["not_need_stop"][0]) == (BSZ - running < BSZ)
        # 4. the scheduler: free finished rows, grant blocks to parked requests (batch order, budget)
        for q in range(NREQ):
            if finished(s, q) and q not in released:
                row = s["block_tables"][q]
                pool.extend(int(x) for x in row[row != -1])
                row[:] = -1
                released.add(q)
        budget = grants_per_step
        for b in np.flatnonzero(s["is_block_step"]):
            if budget == 0 or not pool:
                break
            row = s["block_tables"][b]
            free_slots = np.flatnonzero(row == -1)
            if free_slots.size:
                row[free_slots[0]] = pool.pop()
                budget -= 1
        assert_unique_owners(s["block_tables"], pool)
    return s, log


@pytest.mark.parametrize("block_size, k, pool", [(4, 2, 36), (2, 1, 40), (8, 3, 16)])
def test_v1_block_step_and_recovery_lose_and_repeat_no_token(monkeypatch, block_size, k, pool):
    configure(monkeypatch, block_size, k)
    ample, ample_log = run_v1(pool_size=NREQ * NB, grants_per_step=0, prealloc=True)
    assert not ample_log["block_steps"] and not ample_log["recoveries"]
    tight, log = run_v1(pool_size=pool, grants_per_step=1)
    assert len(log["block_steps"]) >= 5 and len(log["recoveries"]) >= 5, log
    assert max(log["waits"]) >= 2, "some request waits several steps for its block"
    for q in range(NREQ):
        gen = tight["pre_ids"][q, 1 : MAX_GEN[q] + 1]
        assert_same(gen, expected_generated(q), f"request {q} tokens")
        assert_same(gen, ample["pre_ids"][q, 1 : MAX_GEN[q] + 1], f"request {q} vs ample run")
