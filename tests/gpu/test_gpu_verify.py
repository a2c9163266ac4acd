"""Parity of the speculate_verify CUDA kernel (fd_mtp.cuda, on CuPy) with the numpy reference.

Random valid batches (seeded; batch sizes up to 1024, above upstream's 512 cap; every strategy;
mixed decode / prefill / stopped / block-stepped requests; max_dec_len and end tokens within
reach) run through fd_mtp.cuda.speculate_verify on CuPy copies and
fd_mtp.reference.speculate_verify on numpy copies with the same seed/offset; every written array
must match exactly (the Philox draws and the float32 sums are bit-identical by construction).
Also: the device Philox4x32-10 against the Random123 known answers, "rejection" with a real
vocabulary (V = 32000), and bad input (ValueError naming the argument, nothing written).

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import (
    arrays_of,
    assert_exact,
    assert_refused,
    assert_refused_at,
    call,
    compare_all,
    on_simt,
    run_case,
    skip_module_without_gpu,
    split,
)

skip_module_without_gpu()

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402
from fd_mtp.testing.op_inputs import positional  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024]
STRATEGIES = ["topp", "topk", "target_match", "greedy", "rejection"]
L = 64
ORDER = list(positional("speculate_verify"))


def verify_batch(
    rng,
    bsz,
    *,
    K=3,
    C=3,
    V=8,
    extra_rows=0,
    rejection=False,
    draft_probs=False,
    verify_window=2,
    enable_topp=True,
    benchmark_mode=False,
    accept_all_drafts=False,
):
    """A valid random batch (numpy). Output rows: n per decode, 1 per prefill, 0 when skipped."""
    n_req = bsz + extra_rows
    role = rng.choice(4, size=bsz, p=[0.7, 0.1, 0.12, 0.08])  # decode, prefill, stopped, block
    n = np.where(role == 0, rng.integers(1, K + 2, bsz), rng.integers(1, 40, bsz)).astype(np.int32)
    outs = np.select([role == 0, role == 1], [n, 1], 0)
    T = int(outs.sum())
    first = np.concatenate([[0], np.cumsum(outs)[:-1]])
    cands = np.argsort(rng.random((T, V)), axis=1)[:, :C].astype(np.int64)
    draft = rng.integers(0, V, (n_req, K + 1)).astype(np.int64)
    for b in np.flatnonzero(role == 0):
        for k in range(1, int(n[b])):
            u = rng.random()
            if u < 0.55:
                draft[b, k] = cands[first[b] + k - 1, 0]
            elif u < 0.75 and C > 1:
                draft[b, k] = cands[first[b] + k - 1, 1]
    scores = np.sort(rng.random((T, C)).astype(np.float32), axis=1)[:, ::-1]
    scores = (scores / (scores.sum(1, keepdims=True) * rng.uniform(1.0, 1.5, (T, 1)))).astype(
        np.float32
    )
    step = rng.integers(0, 30, n_req).astype(np.int64)
    max_dec = np.where(rng.random(n_req) < 0.3, step + rng.integers(1, K + 3, n_req), 1000).astype(
        np.int64
    )
    block = np.zeros(n_req, bool)
    block[:bsz] = role == 3
    stop = np.zeros(n_req, bool)
    stop[:bsz] = role == 2
    enc = np.zeros(n_req, np.int32)
    enc[:bsz] = np.where(role == 1, n, 0)
    sampled = np.where(rng.random(T) < 0.6, cands[:, 0], rng.integers(0, V, T)).astype(np.int64)
    args = dict(
        sampled_token_ids=sampled.reshape(T, 1),
        accept_tokens=rng.integers(0, V, (n_req, K + 1)).astype(np.int64),
        accept_num=rng.integers(0, 5, n_req).astype(np.int32),
        step_idx=step,
        stop_flags=stop,
        seq_lens_encoder=enc,
        seq_lens_decoder=rng.integers(0, 100, n_req).astype(np.int32),
        draft_tokens=draft,
        seq_lens_this_time=n,
        verify_tokens=np.ascontiguousarray(cands),
        verify_scores=np.ascontiguousarray(scores),
        max_dec_len=max_dec,
        end_tokens=np.array([2, 3], np.int64),
        is_block_step=block,
        output_cum_offsets=np.concatenate([[0], np.cumsum(L - outs)[:-1]]).astype(np.int32),
        actual_candidate_len=rng.integers(0, C + 2, T).astype(np.int32),
        actual_draft_token_nums=np.full(n_req, K, np.int32),
        topp=rng.uniform(0.05, 1.0, n_req).astype(np.float32),
        max_seq_len=L,
        verify_window=verify_window,
        enable_topp=enable_topp,
        benchmark_mode=benchmark_mode,
        accept_all_drafts=accept_all_drafts,
    )
    kw = {}
    if rejection:
        p = rng.dirichlet(np.full(V, 0.5), size=T).astype(np.float32)
        p[rng.random(p.shape) < 0.2] = 0
        kw["target_probs"] = p
        if draft_probs:
            kw["draft_probs"] = rng.dirichlet(np.full(V, 0.5), size=T).astype(np.float32)
    return args, kw


def run_parity(args, kw, **extra):
    host, dev = split(args)
    host_kw = {k: v.copy() for k, v in kw.items()}
    dev_kw = {k: split({k: v})[1][k] for k, v in kw.items()}
    call(ref.speculate_verify, host, ORDER, **host_kw, **extra)
    call(fcuda.speculate_verify, dev, ORDER, **dev_kw, **extra)
    compare_all(dev, host, arrays_of(args))


def test_philox_known_answers_on_device():
    counter = np.array(
        [[0, 0, 0, 0], [0xFFFFFFFF] * 4, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]],
        np.uint32,
    )
    key = np.array([[0, 0], [0xFFFFFFFF] * 2, [0xA4093822, 0x299F31D0]], np.uint32)
    want = np.array(
        [
            [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8],
            [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD],
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ],
        np.uint32,
    )
    assert_exact(fcuda.philox4x32_10(counter, key), want, "philox4x32_10 (device)")
    rng = np.random.default_rng(0)
    c = rng.integers(0, 2**32, (5000, 4), dtype=np.uint64).astype(np.uint32)
    k = rng.integers(0, 2**32, (5000, 2), dtype=np.uint64).astype(np.uint32)
    assert_exact(
        fcuda.philox4x32_10(c, k), ref.verify.philox4x32_10(c, k), "philox4x32_10 device vs numpy"
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_verify_parity(bsz, strategy):
    rng = np.random.default_rng([bsz, STRATEGIES.index(strategy)])
    args, kw = verify_batch(
        rng, bsz, extra_rows=bsz % 3, rejection=strategy == "rejection", draft_probs=bsz % 2 == 1
    )
    run_parity(args, kw, verify_strategy=strategy, seed=bsz * 7919, offset=2**33 + bsz)


@pytest.mark.parametrize(
    "mode",
    ["window0", "window3", "no_topp", "benchmark", "accept_all", "one_step_stop", "K5C1", "C10"],
)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_verify_parity_modes(mode, strategy):
    rng = np.random.default_rng([17, STRATEGIES.index(strategy), len(mode)])
    opts = dict(
        verify_window={"window0": 0, "window3": 3}.get(mode, 2),
        enable_topp=mode != "no_topp",
        benchmark_mode=mode == "benchmark",
        accept_all_drafts=mode == "accept_all",
        K=5 if mode == "K5C1" else 3,
        C={"K5C1": 1, "C10": 10}.get(mode, 3),
        V=16 if mode == "C10" else 8,
    )
    args, kw = verify_batch(rng, 600, rejection=strategy == "rejection", draft_probs=True, **opts)
    run_parity(
        args,
        kw,
        verify_strategy=strategy,
        seed=3,
        offset=4,
        prefill_one_step_stop=mode == "one_step_stop",
    )


@pytest.mark.parametrize("draft_probs", [False, True])
def test_rejection_parity_large_vocab(draft_probs):
    case = op_inputs.build_verify_rejection(64, 32_000, draft_probs=draft_probs)
    case.kwargs.update(seed=11, offset=12)
    run_case("speculate_verify", case)


def test_default_counter_advances():
    rng = np.random.default_rng(8)
    args, _ = verify_batch(rng, 600)
    c0 = fcuda._common.CALLS["speculate_verify"]
    host, dev = split(args)
    call(fcuda.speculate_verify, dev, ORDER, verify_strategy="topp")
    assert fcuda._common.CALLS["speculate_verify"] == c0 + 1
    call(ref.speculate_verify, host, ORDER, verify_strategy="topp", seed=c0, offset=c0)
    compare_all(dev, host, arrays_of(args))


@pytest.mark.parametrize(
    "case,argument",
    [
        ("draft_id", "draft_tokens"),
        ("rows", "verify_tokens"),
        ("width", "draft_tokens"),
        ("target_rows", "target_probs"),
    ],
)
def test_verify_bad_input_writes_nothing(case, argument):
    rng = np.random.default_rng(5)
    args, kw = verify_batch(rng, 257, rejection=True)
    b = int(
        np.flatnonzero(
            (args["seq_lens_this_time"] >= 2)
            & (args["seq_lens_encoder"][:257] == 0)
            & ~args["stop_flags"][:257]
            & ~args["is_block_step"][:257]
        )[-1]
    )
    if case == "draft_id":
        args["draft_tokens"][b, 1] = 8
    elif case == "rows":
        args["output_cum_offsets"][b] = -1000
    elif case == "width":
        args["seq_lens_this_time"][b] = args["draft_tokens"].shape[1] + 1
    else:
        kw["target_probs"] = np.ascontiguousarray(kw["target_probs"][:-1])
        b = int(
            np.flatnonzero(
                (args["seq_lens_this_time"] > 0)
                & ~args["stop_flags"][:257]
                & ~args["is_block_step"][:257]
            )[-1]
        )
    assert_refused_at(
        "speculate_verify",
        args,
        ORDER,
        argument,
        b,
        verify_strategy="rejection",
        seed=1,
        offset=1,
        **kw,
    )


# ------------------------------------------------------------------------------------------------
# "rejection": the block-parallel kernel (one block per request, blockwise sums) bit for bit, on
# both launcher paths: with fd_mtp.cuda's sample workspace (the check pass samples) and without
# (the Paddle GPU branch's path: the apply pass samples)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(params=["workspace", "no_workspace"])
def sample_path(request, monkeypatch):
    off = set() if request.param == "workspace" else {"verify_sample_tokens"}
    monkeypatch.setattr(fcuda._common, "NULL_WORKSPACES", off)
    return request.param


@pytest.mark.parametrize(
    "V", [1, 31, 32, 33, 1023, 1024, 1025, 4097, 32000, 100000], ids=lambda v: f"V{v}"
)
@pytest.mark.parametrize("draft_probs", [False, True], ids=["greedy_drafter", "draft_probs"])
def test_rejection_parity_vocab_sizes(V, draft_probs, sample_path):
    # Vocabularies around a lane (32) and a chunk (1024) of the blockwise sums, and real ones
    # (the large ones are left out of the Makefile's SIMT_FAST subset by their id).
    bsz = 40 if V < 32000 else 9
    rng = np.random.default_rng([V, draft_probs])
    args, kw = verify_batch(
        rng, bsz, K=3, C=1, V=V, extra_rows=1, rejection=True, draft_probs=draft_probs
    )
    for seed in range(2):
        run_parity(args, kw, verify_strategy="rejection", seed=seed, offset=V)


def _rejecting_batch(V=64):
    """Two decode requests, 3 rows each (drafts 1, 1 / 4, 5): request 0 rejects its first draft
    (p(1) = 0; residual from rows 0 of both matrices; rows 1-2 never read), request 1 accepts
    both (p = q = 1 on them; bonus from target row 5; its draft row 5 never read)."""
    rng = np.random.default_rng(3)
    args, _ = verify_batch(rng, 2, K=2, C=1, V=V)
    p = np.zeros((6, V), np.float32)
    p[0, 6] = p[1, 5] = p[2, 6] = 1
    p[3, 4] = p[4, 5] = 1
    p[5, 9:20] = 1 / 11
    q = np.zeros((6, V), np.float32)
    q[0:3, 1] = 1
    q[3, 4] = q[4, 5] = q[5, 6] = 1
    args.update(
        seq_lens_this_time=np.array([3, 3], np.int32),
        seq_lens_encoder=np.zeros(2, np.int32),
        stop_flags=np.zeros(2, bool),
        is_block_step=np.zeros(2, bool),
        step_idx=np.array([5, 5], np.int64),
        max_dec_len=np.array([100, 100], np.int64),
        draft_tokens=np.array([[0, 1, 1], [0, 4, 5]], np.int64),
        accept_tokens=np.full((2, 3), 77, np.int64),
        output_cum_offsets=np.array([0, L - 3], np.int32),
        sampled_token_ids=np.zeros((6, 1), np.int64),
        verify_tokens=np.zeros((6, 1), np.int64),
        verify_scores=np.ones((6, 1), np.float32),
        actual_candidate_len=np.ones(6, np.int32),
    )
    return args, dict(target_probs=p, draft_probs=q)


@pytest.mark.parametrize(
    "arg,index,refused",
    [
        ("target_probs", (0, 63), True),  # request 0's residual rows
        ("draft_probs", (0, 40), True),
        ("target_probs", (5, 0), True),  # request 1's bonus row
        ("target_probs", (3, 4), True),  # request 1's first draft entry
        ("draft_probs", (4, 5), True),  # request 1's second draft entry
        ("target_probs", (1, 5), False),  # after request 0's rejection
        ("draft_probs", (2, 3), False),
        ("target_probs", (3, 0), False),  # an accepted row: only its draft's entry is read
        ("draft_probs", (5, 1), False),  # the bonus samples p alone
    ],
)
def test_rejection_non_finite_only_where_read(arg, index, refused, sample_path):
    args, kw = _rejecting_batch()
    kw[arg][index] = np.nan
    if not refused:
        run_parity(args, kw, verify_strategy="rejection", seed=2, offset=3)
        return
    request = 0 if index[0] < 3 else 1
    want = rf"speculate_verify: {arg} \(request {request}\) holds NaN or inf at row {index[0]}, column {index[1]}"
    with pytest.raises(ValueError, match=want):
        call(
            ref.speculate_verify,
            split(args)[0],
            ORDER,
            verify_strategy="rejection",
            seed=2,
            offset=3,
            **kw,
        )
    assert_refused(
        "speculate_verify", args, ORDER, want, verify_strategy="rejection", seed=2, offset=3, **kw
    )


def test_rejection_first_non_finite_column_of_a_long_row(sample_path):
    # Several NaN / inf in the sampled row, spread over the threads of the block: the lowest
    # column is named, as on the CPU.
    args, kw = _rejecting_batch(V=5000)
    kw["target_probs"][5, [4999, 3001, 2500, 2600]] = [np.inf, np.nan, -np.inf, np.nan]
    want = r"target_probs \(request 1\) holds NaN or inf at row 5, column 2500"
    assert_refused(
        "speculate_verify", args, ORDER, want, verify_strategy="rejection", seed=1, offset=1, **kw
    )


@pytest.mark.skipif(not on_simt(), reason="counted by the simt emulator")
def test_rejection_call_launches_three_kernels_and_allocates_nothing(sample_path):
    # In deferred mode: reset_status, the check (+ sample) pass, the apply (or write) pass, plus
    # the stream record's begin and commit; the workspace (fd_mtp.cuda's, persistent per stream)
    # is allocated by the first call only, nothing waits for the device.
    import simt_counters

    rng = np.random.default_rng(21)
    args, kw = verify_batch(rng, 33, C=1, V=3000, rejection=True, draft_probs=True)
    host, dev = split(args)
    dev_kw = {k: split({k: v})[1][k] for k, v in kw.items()}
    opts = dict(verify_strategy="rejection", seed=4, offset=5)
    with fcuda.errors("deferred"):
        call(fcuda.speculate_verify, split(args)[1], ORDER, **opts, **dev_kw)  # warm-up
        fcuda.check_pending()
        before = simt_counters.snapshot()
        call(fcuda.speculate_verify, dev, ORDER, **opts, **dev_kw)
        used = simt_counters.since(before)
        fcuda.check_pending()
    for key in ("waits", "sync_calls", "host_reads", "mallocs", "array_allocations"):
        assert used[key] == 0, used
    assert used["launches"] == 5, used  # begin, reset_status, check, apply, commit
    call(ref.speculate_verify, host, ORDER, **opts, **kw)
    compare_all(dev, host, arrays_of(args))
