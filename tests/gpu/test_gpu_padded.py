"""The fixed-capacity (padded) variants of fd_mtp.cuda's shape ops (issue 20 §2, docs/gpu_errors.md):
``pre_process(..., token_capacity=N)``, ``rebuild_padding(..., padded=True)`` and the eagle gathers'
``padded=True``. They read nothing on the host: outputs have a fixed number of rows, the real
counts stay on the device.

For every batch the padded chain must give the exact chain's outputs on the live rows, zero on
the rows past them (also when the padded input rows hold garbage), and the same errors, raised by
name in checked mode and at ``check_pending`` in deferred mode. On the simt emulator the padded
ops are counted: no host wait, no host read, no cudaMalloc.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module, or the simt emulator (FD_MTP_SIMT=1).
"""

import numpy as np
import pytest
from gpu_util import arrays_of, assert_exact, call, compare_all, on_simt, skip_module_without_gpu
from gpu_util import split as split_args

skip_module_without_gpu()

import cupy as cp  # noqa: E402
from test_gpu_draft import EAGLE_ORDER, SELF_ORDER, eagle_batch, self_batch  # noqa: E402
from test_gpu_packing import WIDTH, hidden_rows, mixed_batch  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing.op_inputs import PRE_PROCESS_OUTPUTS, pre_process_args  # noqa: E402

PAD_NAMES = PRE_PROCESS_OUTPUTS
PACKED = {"ids_remove_padding", "batch_id_per_token", "output_padding_offset"}


def dev(a):
    return None if a is None else cp.asarray(a)


def host(a):
    return cp.asnumpy(a)


def assert_padded(got, expected, capacity, name):
    """``got`` ([capacity, ...]) holds ``expected`` in its first rows and zeros after them."""
    assert got.shape[0] == capacity, (
        f"{name}: {got.shape[0]} rows, expected the capacity {capacity}"
    )
    n = expected.shape[0]
    assert_exact(got[:n], expected, f"{name} (live rows)")
    assert not np.any(got[n:]), f"{name}: a row past the live {n} is not zero"


def pre_args(b, speculative):
    """(pre_process's first three arguments, the speculative ones: [] when not speculative)."""
    args = pre_process_args(b, speculative)
    return args[:3], args[3:]


# ------------------------------------------------------------------------------------------------
# pre_process(token_capacity=)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", [1, 33, 600])
@pytest.mark.parametrize("speculative", [True, False])
@pytest.mark.parametrize("slack", [0, 5, "full"])
def test_pre_process_padded_matches_exact(bsz, speculative, slack):
    b = mixed_batch(np.random.default_rng([bsz, 11]), bsz)
    args, extra = pre_args(b, speculative)
    expected = ref.pre_process(*args, *extra)
    tokens = int(b["seq_lens_this_time"].sum())
    capacity = b["input_ids"].size if slack == "full" else tokens + slack
    got = fcuda.pre_process(
        dev(args[0]), dev(args[1]), speculative, *[dev(a) for a in extra], token_capacity=capacity
    )
    for g, e, name in zip(got, expected, PAD_NAMES):
        if e is None:
            assert g is None, name
        elif name in PACKED:
            assert_padded(host(g), e, capacity, name)
        else:
            assert_exact(host(g), e, name)


@pytest.mark.parametrize("mode", ["checked", "deferred"])
def test_pre_process_padded_over_capacity(mode):
    """More tokens than the capacity: the kernel's error on token_num, nothing read on the host."""
    b = mixed_batch(np.random.default_rng(12), 40)
    args, extra = pre_args(b, True)
    tokens = int(b["seq_lens_this_time"].sum())
    with fcuda.errors(mode):
        if mode == "checked":
            with pytest.raises(ValueError, match="speculate_get_padding_offset: token_num"):
                fcuda.pre_process(
                    dev(args[0]),
                    dev(args[1]),
                    True,
                    *[dev(a) for a in extra],
                    token_capacity=tokens - 1,
                )
        else:
            fcuda.pre_process(
                dev(args[0]),
                dev(args[1]),
                True,
                *[dev(a) for a in extra],
                token_capacity=tokens - 1,
            )
            with pytest.raises(ValueError, match="speculate_get_padding_offset: token_num"):
                fcuda.check_pending()
            fcuda.check_pending()  # read once: the stream is clean again


@pytest.mark.parametrize("capacity", [-1, 2**31, 3.0, True])
def test_pre_process_padded_bad_capacity(capacity):
    b = mixed_batch(np.random.default_rng(13), 4)
    args, extra = pre_args(b, True)
    with pytest.raises(ValueError, match="pre_process: token_capacity"):
        fcuda.pre_process(
            dev(args[0]), dev(args[1]), True, *[dev(a) for a in extra], token_capacity=capacity
        )


# ------------------------------------------------------------------------------------------------
# rebuild_padding(padded=True), chained after the padded pre_process
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", [1, 7, 257, 600])
@pytest.mark.parametrize("hidden", [1, 13, 64])  # 2-byte, 4-byte and 16-byte copy units
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rebuild_padding_padded_chain(bsz, hidden, dtype):
    """The model's packed output has `capacity` rows (garbage past the live tokens); the padded
    rebuild_padding picks the same rows as the exact one, and zero rows after them."""
    rng = np.random.default_rng([bsz, hidden, 14])
    b = mixed_batch(rng, bsz)
    args, extra = pre_args(b, True)
    pre = ref.pre_process(*args, *extra)
    cu_q, opo = pre[2], pre[5]
    tokens = int(cu_q[-1])
    capacity = tokens + 3 + bsz % 5
    tmp = hidden_rows(rng, capacity, hidden, dtype)  # rows past `tokens` are garbage
    expected = ref.rebuild_padding(
        tmp[:tokens],
        cu_q,
        b["seq_lens_this_time"],
        b["seq_lens_decoder"],
        b["seq_lens_encoder"],
        opo,
        None,
        WIDTH,
        False,
    )
    padded = fcuda.pre_process(
        dev(args[0]), dev(args[1]), True, *[dev(a) for a in extra], token_capacity=capacity
    )
    got = fcuda.rebuild_padding(
        dev(tmp),
        padded[2],
        dev(b["seq_lens_this_time"]),
        dev(b["seq_lens_decoder"]),
        dev(b["seq_lens_encoder"]),
        padded[5],
        None,
        WIDTH,
        False,
        padded=True,
    )
    assert_padded(host(got), expected, capacity, "out")


def rebuild_padded_args(bsz=9, hidden=8):
    rng = np.random.default_rng([bsz, 15])
    b = mixed_batch(rng, bsz)
    args, extra = pre_args(b, True)
    pre = ref.pre_process(*args, *extra)
    tokens = int(pre[2][-1])
    opo = np.zeros(tokens, np.int32)
    opo[: pre[5].size] = pre[5]
    return [
        hidden_rows(rng, tokens, hidden, "float32"),
        pre[2],
        b["seq_lens_this_time"],
        b["seq_lens_decoder"],
        b["seq_lens_encoder"],
        opo,
    ]


def test_rebuild_padding_padded_refusals():
    a = rebuild_padded_args()
    d = [dev(x) for x in a]
    with pytest.raises(ValueError, match="rebuild_padding: output_padding_offset has"):
        fcuda.rebuild_padding(*d[:5], d[5][:-1], None, WIDTH, False, padded=True)
    with pytest.raises(ValueError, match="rebuild_padding: padded needs use_output_padding_offset"):
        fcuda.rebuild_padding(*d[:5], None, None, WIDTH, False, padded=True)


@pytest.mark.parametrize("mode", ["checked", "deferred"])
def test_rebuild_padding_padded_rows_out_of_capacity(mode):
    """cu_seqlens_q counting more tokens than tmp_out has rows: R > the capacity, found on the
    device (kRebuildRows), named, and nothing written."""
    a = rebuild_padded_args()
    a[1] = a[1].copy()
    a[1][-1] += 10_000  # more than the prefill excess: R > T
    d = [dev(x) for x in a]
    with fcuda.errors(mode):
        if mode == "checked":
            with pytest.raises(
                ValueError, match=r"rebuild_padding: seq_lens_encoder gives the output"
            ):
                fcuda.rebuild_padding(*d, None, WIDTH, False, padded=True)
        else:
            fcuda.rebuild_padding(*d, None, WIDTH, False, padded=True)
            with pytest.raises(
                ValueError, match=r"rebuild_padding: seq_lens_encoder gives the output"
            ):
                fcuda.check_pending()
    for x, y, name in zip(d, a, ["tmp_out", "cu_seqlens_q", "q", "dec", "enc", "opo"]):
        assert_exact(host(x), y, name)


# ------------------------------------------------------------------------------------------------
# eagle gathers (padded=True)
# ------------------------------------------------------------------------------------------------
GATHERS = [
    ("eagle_get_hidden_states", eagle_batch, EAGLE_ORDER),
    ("eagle_get_self_hidden_states", self_batch, SELF_ORDER),
]


@pytest.mark.parametrize("name, batch, order", GATHERS, ids=[g[0] for g in GATHERS])
@pytest.mark.parametrize("bsz", [1, 33, 600])
@pytest.mark.parametrize("hidden", [8, 129])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_eagle_padded_matches_exact(name, batch, order, bsz, hidden, dtype):
    rng = np.random.default_rng([bsz, hidden, 16])
    args = batch(rng, bsz, hidden, dtype, slack=7)  # 7 garbage rows past the consumed ones
    h, d = split_args(args)
    expected = call(getattr(ref, name), h, order)
    got = call(getattr(fcuda, name), d, order, padded=True)
    assert_padded(host(got), expected, args["input"].shape[0], "out")
    compare_all(d, h, arrays_of(args))  # inputs untouched


@pytest.mark.parametrize("mode", ["checked", "deferred"])
def test_eagle_padded_bad_input_named(mode):
    rng = np.random.default_rng(17)
    args = eagle_batch(rng, 600, 8, "float32")
    b = 500
    args["seq_lens_encoder"][b] = 0
    args["seq_lens_this_time"][b] = 1
    args["base_model_seq_lens_this_time"][b] = 2
    args["accept_nums"][b] = 3
    h, d = split_args(args)
    pattern = rf"eagle_get_hidden_states: accept_nums \(request {b}\)"
    with fcuda.errors(mode):
        if mode == "checked":
            with pytest.raises(ValueError, match=pattern):
                call(fcuda.eagle_get_hidden_states, d, EAGLE_ORDER, padded=True)
        else:
            call(fcuda.eagle_get_hidden_states, d, EAGLE_ORDER, padded=True)
            with pytest.raises(ValueError, match=pattern):
                fcuda.check_pending()
    compare_all(d, h, arrays_of(args))


# ------------------------------------------------------------------------------------------------
# The padded ops wait for nothing (counted by the emulator)
# ------------------------------------------------------------------------------------------------
@pytest.mark.skipif("not __import__('gpu_util').on_simt()", reason="counted by the simt emulator")
def test_padded_ops_neither_wait_nor_read_the_host():
    import simt_counters

    rng = np.random.default_rng(18)
    b = mixed_batch(rng, 33)
    args, extra = pre_args(b, True)
    capacity = b["input_ids"].size
    tmp = dev(hidden_rows(rng, capacity, 16, "float32"))
    e_args = eagle_batch(rng, 33, 16, "float32")
    s_args = self_batch(rng, 33, 16, "float32")
    _, e_dev = split_args(e_args)
    _, s_dev = split_args(s_args)
    d = [dev(a) for a in extra]
    q, ids = dev(args[1]), dev(args[0])

    def run():
        padded = fcuda.pre_process(ids, q, True, *d, token_capacity=capacity)
        fcuda.rebuild_padding(
            tmp, padded[2], q, d[2], d[1], padded[5], None, WIDTH, False, padded=True
        )
        call(fcuda.eagle_get_hidden_states, e_dev, EAGLE_ORDER, padded=True)
        call(fcuda.eagle_get_self_hidden_states, s_dev, SELF_ORDER, padded=True)

    with fcuda.errors("deferred"):
        run()  # warm-up: the stream's record, scratch rings, workspaces
        before = simt_counters.snapshot()
        run()
        used = simt_counters.since(before)
        fcuda.check_pending()
    assert used["waits"] == 0 and used["sync_calls"] == 0 and used["host_reads"] == 0, used
    assert used["mallocs"] == 0 and used["frees"] == 0, used
    assert on_simt()
