"""Tests of fd_mtp.ops.speculate_limit_thinking_content_length (spec §5.9) against its numpy
reference: one hand case per branch of the state machine, an odd-size grid and property tests
over random states, invariants, int32 limits and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from util import OpPair, assert_same, flags, grid_and_property, i32, i64, run_both

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import get as schema_op
from fd_mtp.schema import python_signature

OP = "speculate_limit_thinking_content_length"
NAMES = tuple(python_signature(schema_op(OP))[0])[:9]  # the tensors, from the schema
THINK_END, EOS, INJECT = 99, [2], [100, 101]


def run_pair(
    tokens, think, reply, step, status, accept, stop=None, eos=EOS, inject=INJECT, decode_node=False
):
    n = len(tokens)
    args = [
        i64(tokens),
        i32(think),
        i32(reply),
        i64(step),
        i32(status),
        i32(accept),
        flags(stop if stop is not None else [False] * n),
        i64(eos),
        i64(inject),
        THINK_END,
        decode_node,
    ]
    op_after, ref_after, _, _ = run_both(getattr(ops, OP), getattr(reference, OP), args)
    for name, got, want in zip(NAMES, op_after, ref_after):
        assert_same(got, want, f"{name} (op vs reference)")
    out = dict(zip(NAMES, op_after))
    return {
        k: out[k].tolist()
        for k in ("next_tokens", "max_reply_lens", "step_idx", "limit_status", "accept_num")
    }


def test_think_end_ends_thinking_and_the_reply_budget_starts_after_it():
    # J = 2: done = 3, reply_base = 4. think_end at o=1 (not counted, budget 1 + 2 = 3), then
    # two reply tokens: status 4 + 2 = 6.
    got = run_pair([[5, THINK_END, 7, 8]], [-1], [1], [10], [0], [4])
    assert got["next_tokens"] == [[5, THINK_END, 7, 8]]
    assert got["max_reply_lens"] == [3] and got["limit_status"] == [6] and got["accept_num"] == [4]


def test_thinking_budget_starts_the_injection_and_cuts_the_step():
    got = run_pair([[11, 12, 13, 14]], [7], [-1], [9], [0], [4])  # step 8 - 1 == 7 at o=2
    assert got == {
        "next_tokens": [[11, 12, 100, 14]],
        "max_reply_lens": [-1],
        "step_idx": [8],
        "limit_status": [2],
        "accept_num": [3],
    }


def test_injection_goes_on_next_step_then_thinking_is_done():
    got = run_pair([[20, 21]], [7], [-1], [10], [2], [2])  # status 2: inject[1]
    assert got["next_tokens"] == [[101, 21]] and got["limit_status"] == [3]
    assert got["accept_num"] == [1] and got["step_idx"] == [9]


def test_eos_while_thinking_is_replaced_by_the_injection():
    got = run_pair([[5, 2, 6]], [1000], [-1], [3], [0], [3])
    assert got["next_tokens"] == [[5, 100, 6]] and got["accept_num"] == [2]


def test_full_reply_gets_the_eos_and_stops_the_step():
    # reply phase (status 4 = reply_base, 0 replied), budget 2: third token forced to EOS.
    got = run_pair([[30, 31, 32, 33]], [-1], [2], [20], [4], [4])
    assert got["next_tokens"] == [[30, 31, 2, 33]]
    assert got["limit_status"] == [6] and got["accept_num"] == [3] and got["step_idx"] == [19]


def test_zero_thinking_budget_on_mixed_and_decode_nodes():
    mixed = run_pair([[40, 41]], [0], [-1], [5], [0], [2])
    decode = run_pair([[40, 41]], [0], [-1], [5], [0], [2], decode_node=True)
    assert mixed["next_tokens"] == [[100, 41]] and mixed["limit_status"] == [2]
    assert decode["next_tokens"] == [[101, 41]] and decode["limit_status"] == [3]


def test_no_injection_tokens():
    got = run_pair([[11, 12, 13]], [6], [-1], [8], [0], [3], inject=[])  # J = 0: done = 1
    assert got["next_tokens"] == [[11, 12, 13]] and got["limit_status"] == [1]
    assert got["accept_num"] == [3]


def test_requests_that_do_not_run_are_untouched():
    tokens = [[5, 6], [7, 8], [9, 10]]
    got = run_pair(
        tokens, [0, -1, 0], [0, -1, 0], [4, 4, 4], [0, 0, 0], [2, 2, 0], stop=[True, False, False]
    )
    assert got["next_tokens"] == tokens and got["accept_num"] == [2, 2, 0]
    assert got["limit_status"] == [0, 0, 0]


def _batch(rng, n, width=5):
    tokens = rng.integers(0, 8, (n, width)).astype(np.int64)
    tokens[rng.random((n, width)) < 0.1] = THINK_END
    tokens[rng.random((n, width)) < 0.05] = EOS[0]
    return [
        tokens,
        rng.integers(-2, 12, n + 1).astype(np.int32),
        rng.integers(-2, 6, n).astype(np.int32),
        rng.integers(0, 16, n).astype(np.int64) + width,
        rng.integers(-1, 9, n).astype(np.int32),
        rng.integers(-1, width + 1, n).astype(np.int32),
        rng.random(n) < 0.1,
        np.array(EOS[: int(rng.integers(0, 2))], np.int64),
        np.array(INJECT[: int(rng.integers(0, 3))], np.int64),
        THINK_END,
        bool(rng.integers(0, 2)),
    ]


def check(args):
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    op_after, ref_after, _, _ = run_both(getattr(ops, OP), getattr(reference, OP), args)
    for name, got, want in zip(NAMES, op_after, ref_after):
        assert_same(got, want, f"{name} (op vs reference)")
    accept0, accept1 = before[5], op_after[5]
    assert (accept1 <= np.maximum(accept0, accept1)).all()
    ran = accept0 > 0
    assert (accept1[ran] <= accept0[ran]).all() and (accept1[ran] >= 1).all()
    assert_same(before[3] - op_after[3], (accept0 - accept1).astype(np.int64), "step_idx drop")
    for b in range(args[0].shape[0]):  # tokens after the (new) accepted ones keep their values
        keep = max(int(accept1[b]), 0)
        assert_same(op_after[0][b, keep:], before[0][b, keep:], f"next_tokens[{b}] tail")


test_grid, test_property = grid_and_property(check, _batch, grid_seed=59, max_n=40)


def test_a_state_past_int32_is_refused_and_nothing_written():
    args = [i64([[30, 31]]), i32([-1]), i32([2**31 - 1]), i64([9]), i32([2**31 - 1]), i32([2])]
    args += [flags([False]), i64(EOS), i64(INJECT), THINK_END, False]
    message = r"limit_status \(request 0\) would become"
    OpPair(OP, NAMES).expect_args_error(args[:9], message, extra=args[9:], data=True)


def test_accept_num_past_the_row_is_refused():
    args = [i64([[1, 2]]), i32([5]), i32([-1]), i64([9]), i32([0]), i32([3]), flags([False])]
    args += [i64(EOS), i64(INJECT), THINK_END, False]
    message = r"accept_num \(request 0\) is 3; it must be"
    OpPair(OP, NAMES).expect_args_error(args[:9], message, extra=args[9:])


@pytest.mark.parametrize(
    "index, bad, name",
    [
        (0, np.zeros((2, 3), np.int32), "next_tokens"),
        (1, np.zeros(1, np.int32), "max_think_lens"),
        (2, np.zeros(2, np.int64), "max_reply_lens"),
        (4, np.zeros(2, np.float32), "limit_status"),
        (6, np.zeros(2, np.int32), "stop_flags"),
        (7, np.zeros(1, np.int32), "eos_token_ids"),
    ],
)
def test_bad_input_names_the_argument_and_writes_nothing(index, bad, name):
    args = [np.ones((2, 3), np.int64), i32([5, 5]), i32([-1, -1]), i64([9, 9]), i32([0, 0])]
    args += [i32([3, 3]), flags([0, 0]), i64(EOS), i64(INJECT), THINK_END, False]
    OpPair(OP, NAMES).expect_replaced_error(args[:9], (index, bad, name), extra=args[9:])
