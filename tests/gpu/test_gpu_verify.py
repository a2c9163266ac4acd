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
    call,
    compare_all,
    run_case,
    skip_module_without_gpu,
    split,
)

skip_module_without_gpu()

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024]
STRATEGIES = ["topp", "topk", "target_match", "greedy", "rejection"]
L = 64
ORDER = [
    "sampled_token_ids",
    "accept_tokens",
    "accept_num",
    "step_idx",
    "stop_flags",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "draft_tokens",
    "seq_lens_this_time",
    "verify_tokens",
    "verify_scores",
    "max_dec_len",
    "end_tokens",
    "is_block_step",
    "output_cum_offsets",
    "actual_candidate_len",
    "actual_draft_token_nums",
    "topp",
    "max_seq_len",
    "verify_window",
    "enable_topp",
    "benchmark_mode",
    "accept_all_drafts",
]


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
    c0 = fcuda.verify._counter
    host, dev = split(args)
    call(fcuda.speculate_verify, dev, ORDER, verify_strategy="topp")
    assert fcuda.verify._counter == c0 + 1
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
    host, dev = split(args)
    dev_kw = {k: split({k: v})[1][k] for k, v in kw.items()}
    with pytest.raises(ValueError, match=rf"speculate_verify: {argument} \(request {b}\)"):
        call(
            fcuda.speculate_verify,
            dev,
            ORDER,
            verify_strategy="rejection",
            seed=1,
            offset=1,
            **dev_kw,
        )
    compare_all(dev, host, arrays_of(args))  # nothing written
