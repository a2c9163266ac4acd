"""Parity of the packing CUDA kernels (fd_mtp.cuda, on CuPy) with the numpy references (fd_mtp.reference):
speculate_get_padding_offset, speculate_get_seq_lens_output, speculate_get_output_padding_offset,
pre_process and rebuild_padding (spec §5.1-§5.4).

Seeded random mixed batches (prefill chunks, speculative decodes, empty slots; per-request buffers
longer than bsz) of several sizes, including ones above upstream's launch shapes and ones large enough
to make the grid-stride loops wrap; rebuild_padding in float32, float16 and bfloat16 (uint16 bits)
with hidden sizes that take the 16-byte, 4-byte and 2-byte copy paths. Every output must match exactly.
Then bad input: ValueError naming the argument, inputs untouched.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped otherwise.
Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import assert_exact, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing.builders.packing import packing_arrays  # noqa: E402
from fd_mtp.testing.op_inputs import pre_process_args, reference_layout  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 1024, 10_000]  # 10_000 > the 8192 blocks of the per-request kernels
DTYPES = ["float32", "float16", "bfloat16"]
WIDTH, K = 48, 3


def mixed_batch(rng, bsz, *, width=WIDTH, k=K, extra_rows=2):
    """prefill (this_time = enc = chunk, dec = chunk start), decode (enc 0, dec > 0, this_time in
    [1, k + 1]) and empty slots (this_time 0); rows past bsz are noise."""
    n = bsz + extra_rows
    roles = rng.choice(3, size=bsz, p=[0.25, 0.6, 0.15])  # 0 prefill, 1 decode, 2 empty
    this_time = np.zeros(bsz, np.int32)
    enc = rng.integers(0, 5, n).astype(np.int32)
    dec = rng.integers(0, 500, n).astype(np.int32)
    chunk = rng.integers(1, width + 1, bsz)
    q = rng.integers(1, k + 2, bsz)
    for b in range(bsz):
        if roles[b] == 0:
            this_time[b] = enc[b] = chunk[b]
            dec[b] = 64 * (b % 3)
        elif roles[b] == 1:
            this_time[b], enc[b] = q[b], 0
            dec[b] = 1 + b % 400
        else:
            enc[b] = 0
            dec[b] = 0 if b % 2 else 7
    return packing_arrays(rng, this_time, enc, dec, width, k)


def dev(a):
    return cp.asarray(a)


def host(a):
    return cp.asnumpy(a)


def compare(got, expected, names):
    assert len(got) == len(expected)
    for g, e, name in zip(got, expected, names):
        if e is None:
            assert g is None, f"{name}: expected None"
        else:
            assert_exact(host(g), e, name)


def padding_args(b):
    q = b["seq_lens_this_time"]
    width = b["input_ids"].shape[1]
    cum = np.cumsum(width - q.astype(np.int64)).astype(np.int32)
    return [b["input_ids"], b["draft_tokens"], cum, np.int64(q.sum()), q, b["seq_lens_encoder"]]


PAD_NAMES = ["x_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"]


# ------------------------------------------------------------------------------------------------
# speculate_get_padding_offset / seq_lens_output / output_padding_offset / pre_process
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", [0, 1])
def test_padding_offset_parity(bsz, seed):
    args = padding_args(mixed_batch(np.random.default_rng([bsz, seed, 1]), bsz))
    expected = ref.speculate_get_padding_offset(*args)
    dargs = [dev(a) if isinstance(a, np.ndarray) else a for a in args]
    got = fcuda.speculate_get_padding_offset(*dargs)
    compare(got, expected, PAD_NAMES)
    for a, d in zip(args, dargs):
        if isinstance(a, np.ndarray):
            assert_exact(host(d), a, "input (read only)")


@pytest.mark.parametrize("bsz", BATCHES)
def test_padding_offset_gaps_parity(bsz):
    """cum_offsets with gaps between requests (FastDeploy's tests pass them): gap entries 0."""
    rng = np.random.default_rng([bsz, 17])
    args = padding_args(mixed_batch(rng, bsz))
    q = args[4].astype(np.int64)
    gaps = rng.integers(0, 3, q.size)
    args[2] = np.cumsum(WIDTH - q - gaps).astype(np.int32)
    args[3] = np.int64(int((q + gaps).sum()) + 2)
    expected = ref.speculate_get_padding_offset(*args)
    got = fcuda.speculate_get_padding_offset(
        *[dev(a) if isinstance(a, np.ndarray) else a for a in args]
    )
    compare(got, expected, PAD_NAMES)


def test_output_padding_offset_gaps_parity():
    rng = np.random.default_rng(18)
    o = rng.integers(0, 5, 700).astype(np.int32)
    gaps = rng.integers(0, 2, 700)
    width = 8
    tmp = np.cumsum(width - o.astype(np.int64) - gaps).astype(np.int32)
    count = int((o + gaps).sum()) + 1
    expected = ref.speculate_get_output_padding_offset(tmp, np.int64(count), o, width)
    got = fcuda.speculate_get_output_padding_offset(dev(tmp), count, dev(o), width)
    compare(got, expected, ["output_padding_offset", "output_cum_offsets"])


def test_padding_offset_long_prefills_and_no_tokens():
    # Prefill chunks longer than the 128 threads of a request's block; then a step with no tokens.
    rng = np.random.default_rng(3)
    b = mixed_batch(rng, 40, width=1000)
    args = padding_args(b)
    compare(
        fcuda.speculate_get_padding_offset(
            *[dev(a) if isinstance(a, np.ndarray) else a for a in args]
        ),
        ref.speculate_get_padding_offset(*args),
        PAD_NAMES,
    )
    b["seq_lens_this_time"][:] = 0
    args = padding_args(b)
    got = fcuda.speculate_get_padding_offset(
        *[dev(a) if isinstance(a, np.ndarray) else a for a in args]
    )
    compare(got, ref.speculate_get_padding_offset(*args), PAD_NAMES)
    assert got[0].size == 0 and host(got[2]).tolist() == [0] * 41


@pytest.mark.parametrize("bsz", BATCHES)
def test_seq_lens_output_and_output_padding_offset_parity(bsz):
    b = mixed_batch(np.random.default_rng([bsz, 2]), bsz)
    args = [b["seq_lens_this_time"], b["seq_lens_encoder"], b["seq_lens_decoder"]]
    o = ref.speculate_get_seq_lens_output(*args)
    assert_exact(
        host(fcuda.speculate_get_seq_lens_output(*[dev(a) for a in args])), o, "seq_lens_output"
    )
    for width in (WIDTH, 2048):
        tmp = np.cumsum(width - o.astype(np.int64)).astype(np.int32)
        expected = ref.speculate_get_output_padding_offset(tmp, np.int64(o.sum()), o, width)
        got = fcuda.speculate_get_output_padding_offset(dev(tmp), int(o.sum()), dev(o), width)
        compare(got, expected, ["output_padding_offset", "output_cum_offsets"])


@pytest.mark.parametrize("bsz", [1, 33, 600, 10_000])
@pytest.mark.parametrize("speculative", [True, False])
def test_pre_process_parity(bsz, speculative):
    b = mixed_batch(np.random.default_rng([bsz, 4]), bsz)
    args = pre_process_args(b, speculative)
    args, extra = args[:3], args[3:]
    expected = ref.pre_process(*args, *extra)
    got = fcuda.pre_process(dev(args[0]), dev(args[1]), speculative, *[dev(a) for a in extra])
    compare(got, expected, PAD_NAMES + ["output_cum_offsets", "output_padding_offset"])


# ------------------------------------------------------------------------------------------------
# rebuild_padding
# ------------------------------------------------------------------------------------------------
def hidden_rows(rng, rows, hidden, dtype):
    if dtype == "bfloat16":  # bfloat16 as its uint16 bit patterns: a row copy is bit exact
        return rng.integers(0, 2**16, (rows, hidden), dtype=np.uint16)
    return rng.standard_normal((rows, hidden)).astype(dtype)


def rebuild_case(rng, bsz, hidden, dtype):
    b = mixed_batch(rng, bsz)
    pre = reference_layout(b)
    cu_q, opo = pre[2], pre[5]
    tmp = hidden_rows(rng, int(cu_q[-1]), hidden, dtype)
    return [tmp, cu_q, b["seq_lens_this_time"], b["seq_lens_decoder"], b["seq_lens_encoder"], opo]


@pytest.mark.parametrize("bsz", [1, 7, 257, 1024])
@pytest.mark.parametrize("hidden", [1, 9, 13, 64, 1024])  # 16-byte, 4-byte and 2-byte copy units
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("speculative", [True, False])
def test_rebuild_padding_parity(bsz, hidden, dtype, speculative):
    rng = np.random.default_rng([bsz, hidden, DTYPES.index(dtype), 5])
    args = rebuild_case(rng, bsz, hidden, dtype)
    if not speculative:
        args[5] = None
    expected = ref.rebuild_padding(*args, None, WIDTH, False)
    dargs = [None if a is None else dev(a) for a in args]
    got = fcuda.rebuild_padding(*dargs, None, WIDTH, False)
    assert_exact(host(got), expected, "out")
    assert_exact(host(dargs[0]), args[0], "tmp_out (read only)")


def test_rebuild_padding_misaligned_rows_and_many_units():
    # A tmp_out view starting one element in (not 16-byte aligned), then a copy of more units than
    # one grid covers (grid-stride wrap): 20_000 decode rows of 1024 float32.
    rng = np.random.default_rng(6)
    args = rebuild_case(rng, 300, 64, "float16")
    base = cp.asarray(np.concatenate([np.zeros(1, np.float16), args[0].reshape(-1)]))
    tmp_dev = base[1:].reshape(args[0].shape)
    got = fcuda.rebuild_padding(tmp_dev, *[dev(a) for a in args[1:]], None, WIDTH, False)
    assert_exact(
        host(got), ref.rebuild_padding(*args, None, WIDTH, False), "out (misaligned input)"
    )

    bsz, q = 5000, 4
    this_time = np.full(bsz, q, np.int32)
    cu_q = np.arange(bsz + 1, dtype=np.int32) * q
    opo = np.repeat(np.arange(bsz, dtype=np.int64) * (WIDTH - q), q).astype(np.int32)
    dec = np.full(bsz, 9, np.int32)
    enc = np.zeros(bsz, np.int32)
    tmp = rng.standard_normal((bsz * q, 1024)).astype(np.float32)
    args = [tmp, cu_q, this_time, dec, enc, opo]
    got = fcuda.rebuild_padding(*[dev(a) for a in args], None, WIDTH, False)
    assert_exact(host(got), tmp, "out (every decode row, in order)")


def test_rebuild_padding_no_rows():
    empty = np.zeros(0, np.int32)
    got = fcuda.rebuild_padding(
        cp.zeros((0, 8), cp.float32),
        dev(np.zeros(3, np.int32)),
        dev(np.zeros(2, np.int32)),
        dev(np.zeros(2, np.int32)),
        dev(np.zeros(2, np.int32)),
        dev(empty),
        None,
        4,
        False,
    )
    assert got.shape == (0, 8)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "case, argument",
    [
        ("cum", "cum_offsets"),
        ("count", "token_num"),
        ("draft_row", "seq_len"),
        ("negative", "seq_len"),
    ],
)
def test_padding_offset_bad_input(case, argument):
    b = mixed_batch(np.random.default_rng(7), 700)
    q = b["seq_lens_this_time"]
    decode = int(np.flatnonzero((q > 0) & (b["seq_lens_encoder"][: q.size] == 0))[-1])
    if case == "draft_row":
        q[decode] = K + 2
    elif case == "negative":
        q[decode] = -1
    args = padding_args(b)
    if case == "cum":
        args[2][650] += 1
    elif case == "count":  # the layout passes token_num (a larger one leaves a trailing gap)
        args[3] = np.int64(args[3] - 1)
    dargs = [dev(a) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ValueError, match=rf"^speculate_get_padding_offset: {argument}\b"):
        fcuda.speculate_get_padding_offset(*dargs)
    with pytest.raises(ValueError, match=rf"^speculate_get_padding_offset: {argument}\b"):
        ref.speculate_get_padding_offset(*args)
    for a, d in zip(args, dargs):
        if isinstance(a, np.ndarray):
            assert_exact(host(d), a, "input (unchanged)")


@pytest.mark.parametrize(
    "case, argument",
    [("cum", "output_cum_offsets_tmp"), ("count", "out_token_num"), ("long", "seq_lens_output")],
)
def test_output_padding_offset_bad_input(case, argument):
    o = np.random.default_rng(8).integers(0, 5, 900).astype(np.int32)
    width = 8
    if case == "long":
        o[800] = width + 1
    tmp = np.cumsum(width - o.astype(np.int64)).astype(np.int32)
    count = int(o.sum()) - (1 if case == "count" else 0)
    if case == "cum":  # request 11's rows would overlap request 10's
        tmp[10] -= 1
    with pytest.raises(ValueError, match=rf"^speculate_get_output_padding_offset: {argument}\b"):
        fcuda.speculate_get_output_padding_offset(dev(tmp), count, dev(o), width)
    with pytest.raises(ValueError, match=rf"^speculate_get_output_padding_offset: {argument}\b"):
        ref.speculate_get_output_padding_offset(tmp, np.int64(count), o, width)


@pytest.mark.parametrize(
    "case, argument",
    [
        ("offset", "output_padding_offset"),
        ("cu", "cu_seqlens_q"),
        ("short", "output_padding_offset"),
    ],
)
def test_rebuild_padding_bad_input(case, argument):
    rng = np.random.default_rng(9)
    args = rebuild_case(rng, 600, 16, "float32")
    if case == "offset":
        args[5][-1] += 600 * WIDTH  # the last row maps past the batch
    elif case == "cu":
        last = int(np.flatnonzero(args[2] > 0)[-1])  # the last request with output rows
        args[1][last] = args[1][-1]  # its rows now start at T
    else:
        args[5] = args[5][:-1]
    dargs = [dev(a) for a in args]
    with pytest.raises(ValueError, match=rf"^rebuild_padding: {argument}\b"):
        fcuda.rebuild_padding(*dargs, None, WIDTH, False)
    with pytest.raises(ValueError, match=rf"^rebuild_padding: {argument}\b"):
        ref.rebuild_padding(*args, None, WIDTH, False)
    for a, d in zip(args, dargs):
        assert_exact(host(d), a, "input (unchanged)")
