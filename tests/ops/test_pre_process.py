"""Tests of fd_mtp.ops.pre_process (FastDeploy's glue, spec/ops.md §5.3 with §5.1-§5.2): the §13
traces and a mixed batch packed by hand, the non-speculative branch, the odd-size grid and
Hypothesis batches against fd_mtp.reference.pre_process, and the end-to-end selection of
pre_process followed by rebuild_padding (§5.4, §4.1 steps 1-3)."""

import numpy as np
import paddle
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packing_cases import batches, mixed_batch
from util import BATCH_GRID, assert_same, i32, i64, ragged, to_numpy, to_paddle

from fd_mtp import ops, reference
from fd_mtp.testing.op_inputs import PRE_PROCESS_OUTPUTS, pre_process_args

P0, P1, P2, P3, T1, T3, D1, D2 = 100, 101, 102, 103, 21, 23, 31, 32
NAMES = PRE_PROCESS_OUTPUTS


def run(input_ids, this_time, speculative, draft_tokens=None, enc=None, dec=None):
    """ops.pre_process and reference.pre_process on the same batch; returns the op's outputs."""
    args = [input_ids, i32(this_time) if isinstance(this_time, list) else this_time, speculative]
    extra = [] if draft_tokens is None else [draft_tokens, i32(enc), i32(dec)]
    tensors = [to_paddle(a) for a in args + extra]
    got = ops.pre_process(*tensors)
    expected = reference.pre_process(
        *[a.copy() if isinstance(a, np.ndarray) else a for a in args + extra]
    )
    assert len(got) == 6 and len(expected) == 6
    got = [None if g is None else to_numpy(g) for g in got]
    for name, g, e in zip(NAMES, got, expected):
        if e is None:
            assert g is None, f"{name}: expected None"
        else:
            assert_same(g, e, f"{name} (op vs reference)")
    for t, a in zip(tensors, args + extra):
        if isinstance(a, np.ndarray):
            assert_same(to_numpy(t), a, "input (read only)")
    return got


# ---------------------------------------------------------------------------------------------
# §13 traces (K = 1 and K = 2) and a mixed batch, by hand
# ---------------------------------------------------------------------------------------------
def test_trace_k1_target_prefill():
    # Step 1/2: target input_ids [p0 p1 p2 p3], this_time = enc = 4, dec 0: one output row (last).
    ids, bid, cu_q, cu_k, out_cum, pad = run(
        ragged([[P0, P1, P2, P3]], 8, 0), [4], True, ragged([[-1, -1]], 2), [4], [0]
    )
    assert_same(ids, i64([P0, P1, P2, P3]), "ids_remove_padding")
    assert_same(bid, i32([0, 0, 0, 0]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 4]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 4]), "cu_seqlens_k")
    assert_same(out_cum, i32([0]), "output_cum_offsets")
    assert_same(pad, i32([0]), "output_padding_offset")


def test_trace_k1_proposer_prefill_reads_the_shifted_prompt():
    # Step 3: proposer input_ids [p1 p2 p3 t1], this_time = enc = 4.
    ids, bid, cu_q, _, out_cum, pad = run(
        ragged([[P1, P2, P3, T1]], 8, 0), [4], True, ragged([[T1, -1]], 2), [4], [0]
    )
    assert_same(ids, i64([P1, P2, P3, T1]), "ids_remove_padding")
    assert_same(cu_q, i32([0, 4]), "cu_seqlens_q")
    assert_same(pad, i32([0]), "output_padding_offset")


def test_trace_k1_target_verify_t1_d1():
    # Step 4: target draft_tokens [t1 d1], this_time 2, enc 0, dec 4: two output rows.
    ids, bid, cu_q, _, out_cum, pad = run(
        ragged([[P0, P1, P2, P3]], 8, 0), [2], True, ragged([[T1, D1]], 2), [0], [4]
    )
    assert_same(ids, i64([T1, D1]), "ids_remove_padding")
    assert_same(bid, i32([0, 0]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 2]), "cu_seqlens_q")
    assert_same(out_cum, i32([0]), "output_cum_offsets")
    assert_same(pad, i32([0, 0]), "output_padding_offset")


def test_trace_k1_proposer_decode_d1_t3():
    # Step 5: proposer draft_tokens [d1 t3], this_time 2, dec 4.
    ids, _, cu_q, _, _, pad = run(
        ragged([[P1, P2, P3, T1]], 8, 0), [2], True, ragged([[D1, T3]], 2), [0], [4]
    )
    assert_same(ids, i64([D1, T3]), "ids_remove_padding")
    assert_same(cu_q, i32([0, 2]), "cu_seqlens_q")
    assert_same(pad, i32([0, 0]), "output_padding_offset")


def test_trace_k2_target_verify_t1_d1_d2():
    ids, bid, cu_q, _, out_cum, pad = run(
        ragged([[P0, P1, P2, P3]], 8, 0), [3], True, ragged([[T1, D1, D2]], 3), [0], [4]
    )
    assert_same(ids, i64([T1, D1, D2]), "ids_remove_padding")
    assert_same(pad, i32([0, 0, 0]), "output_padding_offset")


def test_mixed_prefill_empty_decode_batch():
    # b0 prefills p0..p3; b1 is an empty slot; b2 verifies [t1 d1]; width 8.
    ids, bid, cu_q, cu_k, out_cum, pad = run(
        ragged([[P0, P1, P2, P3], [], [7, 7, 7]], 8, 0),
        [4, 0, 2],
        True,
        ragged([[-1, -1], [-1, -1], [T1, D1]], 2),
        [4, 0, 0],
        [0, 0, 4],
    )
    assert_same(ids, i64([P0, P1, P2, P3, T1, D1]), "ids_remove_padding")
    assert_same(bid, i32([0, 0, 0, 0, 2, 2]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 4, 4, 6]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 4, 4, 6]), "cu_seqlens_k")
    # seq_lens_output [1, 0, 2] -> cumsum(8 - o) = [7, 15, 21]: request 2's rows start at 16 - 15 = 1.
    assert_same(out_cum, i32([0, 7, 15]), "output_cum_offsets")
    assert_same(pad, i32([0, 15, 15]), "output_padding_offset")


def test_non_speculative_takes_every_token_from_input_ids_and_returns_none_offsets():
    ids, bid, cu_q, cu_k, out_cum, pad = run(
        ragged([[1, 2, 3], [4], [5, 6]], 4, 0), [3, 1, 2], False
    )
    assert_same(ids, i64([1, 2, 3, 4, 5, 6]), "ids_remove_padding")
    assert_same(bid, i32([0, 0, 0, 1, 2, 2]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 3, 4, 6]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 3, 4, 6]), "cu_seqlens_k")
    assert out_cum is None and pad is None


def test_column_shaped_seq_lens_this_time():
    q = np.array([[2], [0], [1]], np.int32)
    ids, bid, cu_q, _, out_cum, pad = run(
        ragged([[1, 2], [3], [4]], 4, 0), q, True, ragged([[9], [9], [8]], 1), [2, 0, 0], [0, 0, 5]
    )
    assert_same(ids, i64([1, 2, 8]), "ids_remove_padding")
    assert_same(cu_q, i32([0, 2, 2, 3]), "cu_seqlens_q")
    assert_same(pad, i32([0, 7]), "output_padding_offset")  # o = [1, 0, 1]; tmp = [3, 7, 10]


def test_speculative_without_draft_tokens_is_refused():
    with pytest.raises(ValueError, match="pre_process: draft_tokens"):
        ops.pre_process(to_paddle(ragged([[1]], 2)), to_paddle(i32([1])), True)


def test_request_longer_than_its_source_row_is_refused():
    # The inner op's error, under pre_process's names (issue 38), the inner op in parentheses.
    with pytest.raises(
        ValueError,
        match=r"^pre_process: seq_lens_this_time \(request 1\).*draft_tokens.*"
        r"\(in speculate_get_padding_offset\)$",
    ):
        run(ragged([[1], [2]], 4), [1, 3], True, ragged([[1, 2], [3, 4]], 2), [1, 0], [0, 5])
    with pytest.raises(
        ValueError,
        match=r"^pre_process: seq_lens_this_time \(request 0\).*input_ids.*"
        r"\(in speculate_get_padding_offset\)$",
    ):
        run(ragged([[1], [2]], 4), [5, 0], False)


# ---------------------------------------------------------------------------------------------
# Grid and Hypothesis
# ---------------------------------------------------------------------------------------------
def run_batch(b, speculative):
    """`run` on a packing_cases batch; not speculative: every request's tokens in its input_ids
    row."""
    if speculative:
        run(*pre_process_args(b))
    else:
        run(b["input_ids"], np.minimum(b["seq_lens_this_time"], b["input_ids"].shape[1]), False)


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("speculative", [True, False])
def test_grid_matches_reference(bsz, speculative):
    b = mixed_batch(np.random.default_rng([bsz, speculative]), bsz, width=40, k=3, extra_rows=1)
    run_batch(b, speculative)


@given(batches(), st.booleans())
def test_hypothesis_matches_reference(b, speculative):
    run_batch(b, speculative)


# ---------------------------------------------------------------------------------------------
# End to end: pre_process -> (model) -> rebuild_padding selects the rows the spec names
# ---------------------------------------------------------------------------------------------
def expected_rows(b, speculative_branch):
    """(request, local token index) of every output row, or None for a zero row (plain branch)."""
    rows = []
    for r, role in enumerate(b["roles"]):
        q, enc = int(b["seq_lens_this_time"][r]), int(b["seq_lens_encoder"][r])
        if role == "prefill":
            rows.append((r, enc - 1))  # the chunk's last token
        elif role == "decode":
            rows.extend((r, i) for i in range(q) if speculative_branch or i == 0)  # every token
        elif not speculative_branch:
            rows.append(None)  # empty slot: a zero row of the [bsz, H] output
    return rows


def e2e(b, dtype, hidden=5):
    assert hidden >= 3
    width = b["input_ids"].shape[1]
    tensors = {k: to_paddle(v) for k, v in b.items() if k != "roles"}
    ids, bid, cu_q, cu_k, out_cum, pad = ops.pre_process(
        tensors["input_ids"],
        tensors["seq_lens_this_time"],
        True,
        tensors["draft_tokens"],
        tensors["seq_lens_encoder"],
        tensors["seq_lens_decoder"],
    )
    # Stand-in for the model output: packed row t holds (request % 256, request // 256, local index,
    # 7, 7, ...): integers below 256, exact in bfloat16.
    bid_np, cu_np = bid.numpy(), cu_q.numpy()
    t = bid_np.size
    tmp = np.full((t, hidden), 7.0, np.float32)
    tmp[:, 0] = bid_np % 256
    tmp[:, 1] = bid_np // 256
    tmp[:, 2] = np.arange(t) - cu_np[bid_np] if t else 0
    tmp_out = paddle.to_tensor(tmp).astype(dtype)
    spec = ops.rebuild_padding(
        tmp_out,
        cu_q,
        tensors["seq_lens_this_time"],
        tensors["seq_lens_decoder"],
        tensors["seq_lens_encoder"],
        pad,
        None,
        width,
        False,
    )
    plain = ops.rebuild_padding(
        tmp_out,
        cu_q,
        tensors["seq_lens_this_time"],
        tensors["seq_lens_decoder"],
        tensors["seq_lens_encoder"],
        None,
        None,
        width,
        False,
    )
    for out, speculative_branch in ((spec, True), (plain, False)):
        assert out.dtype == tmp_out.dtype
        rows = expected_rows(b, speculative_branch)
        want = np.zeros((len(rows), hidden), np.float32)  # None: a zero row
        for i, r in enumerate(rows):
            if r is not None:
                want[i] = [r[0] % 256, r[0] // 256, r[1]] + [7.0] * (hidden - 3)
        got = out.astype("float32").numpy()
        assert_same(
            got, want, f"rows selected ({'speculative' if speculative_branch else 'plain'} branch)"
        )


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("bsz", [1, 7, 99, 600])
def test_pre_process_then_rebuild_padding_selects_last_prefill_token_and_every_decode_token(
    dtype, bsz
):
    e2e(mixed_batch(np.random.default_rng([bsz, 17]), bsz, width=48, k=3), dtype)


@given(batches(max_bsz=24))
def test_pre_process_then_rebuild_padding_hypothesis(b):
    e2e(b, "float32", hidden=3)
