"""Tests of the top-k (logprob) output messages: fd_mtp.ops.speculate_save_output_topk and
speculate_get_output_topk over a real SysV queue (docs/spec/logprobs.md): the wire layout byte for
byte against the reference encoder (fd_mtp.reference.speculate_save_output_topk), save -> get round
trips, a blocking get served by another process, the message size of upstream's layout, bad input
(ValueError naming the argument, nothing sent or written).

Every test uses its own queue (a fresh temporary directory keys it), removed afterwards. The
messages use a small ``max_bsz`` where the machine's ``kernel.msgmax`` (8192 by default) is below
upstream's 530448-byte layout.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import subprocess
import sys
import textwrap

import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgqueue_reader import sysv_libc
from util import flags, i32, i64

from fd_mtp import ops, reference

SLOT = 258  # words of one request's slot: 126 tokens, 126 scores, 6 ranks
IPC_CREAT, IPC_NOWAIT = 0o1000, 0o4000


@pytest.fixture
def queue(tmp_path):
    kw = {"msg_queue_id": 7, "ftok_path": str(tmp_path)}
    try:
        yield kw
    finally:
        ops.remove_queue(7, ftok_path=str(tmp_path))


def raw_receive(kw, max_bytes=600_000):
    """(bytes received, int32 words) of the next message, with libc (no fd_mtp); None if empty."""
    libc = sysv_libc()
    key = ops.queue_key(kw["msg_queue_id"], ftok_path=kw["ftok_path"])
    q = libc.msgget(key, IPC_CREAT | 0o600)
    buf = (ctypes.c_long * (1 + max_bytes // 8))()
    got = libc.msgrcv(q, buf, max_bytes, 0, IPC_NOWAIT)
    if got == -1:
        return None
    assert buf[0] == 1  # mtype
    words = np.frombuffer(bytes(buf)[8 : 8 + got], dtype=np.int32).copy()
    return got, words


def f32(v):
    return np.asarray(v, np.float32)


def hand_batch():
    """Two requests: request 0 decodes 2 tokens (rows 1, 2), request 1 is in its prompt (count
    sent as 0 whatever token_num says); C = 3 logprob columns (entries 3..20 are -1 / 0.0)."""
    return [
        i64([[70, 71, 72], [80, 81, 82]]),  # sampled_token_ids
        i64([[9, 9, 9], [70, 5, 6], [71, 7, 8]]),  # logprob_token_ids
        f32([[0, 0, 0], [-0.5, -1.5, -2.5], [-0.25, -3.0, -4.0]]),  # logprob_scores
        i64([9, 4, 1]),  # logprob_ranks
        i32([2, 3]),  # token_num_per_batch
        i32([1, 0]),  # cu_batch_token_offset
        flags([False]),  # not_need_stop
        i32([10, 1]),  # seq_lens_decoder
        i64([4, 5]),  # prompt_lens
        4,  # message_flag (draft)
        0,  # rank_id
        False,  # save_each_rank
    ]


def as_paddle(args):
    return [paddle.to_tensor(a) if isinstance(a, np.ndarray) else a for a in args]


def test_hand_layout_on_the_wire(queue):
    args = hand_batch()
    ops.speculate_save_output_topk(*as_paddle(args), msg_id=6, max_bsz=3, **queue)
    got, words = raw_receive(queue)
    assert got == ops.topk_message_bytes(3) == 4 * (3 + 3 + 3 * SLOT)  # even: no padding
    assert words[:6].tolist() == [-6, 4, 2, 2, 0, 0]  # -msg_id (stop), flag, bs, counts
    slot0 = words[6 : 6 + SLOT]
    tokens, scores = slot0[:126].reshape(6, 21), slot0[126:252].view(np.float32).reshape(6, 21)
    assert tokens[0, :4].tolist() == [70, 5, 6, -1] and tokens[1, :3].tolist() == [71, 7, 8]
    assert (tokens[0, 3:] == -1).all() and (tokens[2:] == 0).all()
    assert scores[0, :4].tolist() == [-0.5, -1.5, -2.5, 0.0]
    assert scores[1, :3].tolist() == [-0.25, -3.0, -4.0]
    assert slot0[252:].tolist() == [4, 1, 0, 0, 0, 0]  # ranks
    assert (words[6 + SLOT :] == 0).all()  # request 1 (in its prompt), the empty slot, padding
    ref = reference.speculate_save_output_topk(*args, msg_id=6, max_bsz=3)
    assert np.array_equal(words, ref)


def test_round_trip_save_get(queue):
    args = hand_batch()
    ops.speculate_save_output_topk(*as_paddle(args), msg_id=6, max_bsz=3, **queue)
    toks = paddle.full([3 + 3 * 127], 5, dtype="int64")
    scs = paddle.full([3 * 126], 5.0, dtype="float32")
    rks = paddle.full([3 * 6], 5, dtype="int64")
    ops.speculate_get_output_topk(toks, scs, rks, 1, 0, False, max_bsz=3, **queue)
    t, s, r = toks.numpy(), scs.numpy(), rks.numpy()
    base = 3 + 3
    assert t[:6].tolist() == [-6, 4, 2, 2, 0, 5]  # count of request 1 written, slot 2 untouched
    assert t[base : base + 3].tolist() == [70, 5, 5]  # real_k = 1: entries 0..1 only
    assert t[base + 21 : base + 23].tolist() == [71, 7]
    assert s[:2].tolist() == [-0.5, -1.5] and s[21:23].tolist() == [-0.25, -3.0]
    assert r[:3].tolist() == [4, 1, 5]
    # the reference decoder gives the same
    want = [
        np.full(3 + 3 * 127, 5, np.int64),
        np.full(378, 5.0, np.float32),
        np.full(18, 5, np.int64),
    ]
    words = reference.speculate_save_output_topk(*hand_batch(), msg_id=6, max_bsz=3)
    reference.msgqueue.speculate_get_output_topk_from_message(*want, 1, words, max_bsz=3)
    assert np.array_equal(t, want[0]) and np.array_equal(s, want[1]) and np.array_equal(r, want[2])


def random_batch(rng, bs, cols, width):
    counts = rng.integers(0, min(6, width) + 1, bs).astype(np.int32)
    rows = int(counts.sum()) + int(rng.integers(0, 3))
    in_prompt = rng.random(bs) < 0.2
    return [
        rng.integers(-(2**40), 2**40, (bs + 1, width)).astype(np.int64),
        rng.integers(0, 100_000, (rows, cols)).astype(np.int64),
        (-rng.random((rows, cols)) * 20).astype(np.float32),
        rng.integers(1, 100_000, rows).astype(np.int64),
        counts,
        np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32),
        flags([rng.random() < 0.7]),
        np.where(in_prompt, 1, 50).astype(np.int32),
        np.full(bs, 10, np.int64),
        int(rng.choice([3, 4])),
        0,
        False,
    ]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 5), st.integers(1, 21), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_op_sends_the_reference_payload(tmp_path_factory, bs, cols, width, seed):
    rng = np.random.default_rng(seed)
    args = random_batch(rng, bs, cols, width)
    kw = {"msg_queue_id": 9, "ftok_path": str(tmp_path_factory.mktemp("q"))}
    try:
        ops.speculate_save_output_topk(*as_paddle(args), max_bsz=5, msg_id=3, **kw)
        got, words = raw_receive(kw)
        want = reference.speculate_save_output_topk(*args, max_bsz=5, msg_id=3)
        assert got == 4 * want.size and np.array_equal(words, want)
        # and the reader op decodes what the reference decoder decodes
        ops.speculate_save_output_topk(*as_paddle(args), max_bsz=5, msg_id=3, **kw)
        k = int(rng.integers(0, 21))
        outs = [
            paddle.full([3 + 5 * 127], -7, "int64"),
            paddle.full([630], -7.0),
            paddle.full([30], -7, "int64"),
        ]
        ops.speculate_get_output_topk(*outs, k, 0, True, max_bsz=5, **kw)
        ref = [
            np.full(3 + 5 * 127, -7, np.int64),
            np.full(630, -7.0, np.float32),
            np.full(30, -7, np.int64),
        ]
        reference.msgqueue.speculate_get_output_topk_from_message(*ref, k, want, max_bsz=5)
        for o, r in zip(outs, ref):
            assert np.array_equal(o.numpy(), r)
    finally:
        ops.remove_queue(9, ftok_path=kw["ftok_path"])


def test_upstream_layout_size_and_the_kernel_limit(queue):
    """max_bsz 512 (default): 530448 bytes, upstream's sizeof(msgdata) - sizeof(long). Sent when
    the kernel allows messages that large; otherwise OSError naming kernel.msgmax, nothing sent."""
    assert ops.topk_message_bytes() == 530448
    assert reference.msgqueue.topk_sent_words(512) * 4 == 530448
    args = as_paddle(hand_batch())
    with open("/proc/sys/kernel/msgmax") as f:
        msgmax = int(f.read())
    if msgmax < 530448:
        with pytest.raises(OSError, match="kernel.msgmax"):
            ops.speculate_save_output_topk(*args, **queue)
        assert raw_receive(queue) is None
    else:
        ops.speculate_save_output_topk(*args, **queue)
        got, words = raw_receive(queue)
        assert got == 530448 and np.array_equal(
            words, reference.speculate_save_output_topk(*hand_batch())
        )


def test_default_key_directory_is_dev_shm():
    assert ops.TOPK_FTOK_PATH == "/dev/shm"


def test_rank_rules(queue):
    args = hand_batch()
    args[10] = 1  # rank_id > 0, save_each_rank False: nothing sent
    ops.speculate_save_output_topk(*as_paddle(args), max_bsz=3, **queue)
    assert raw_receive(queue) is None
    args[11] = True
    ops.speculate_save_output_topk(*as_paddle(args), max_bsz=3, **queue)
    assert raw_receive(queue) is not None
    assert reference.speculate_save_output_topk(*hand_batch()[:10], 1, False, max_bsz=3) is None


def test_empty_queue_non_blocking(queue):
    toks = paddle.full([3 + 2 * 127], 5, dtype="int64")
    scs, rks = paddle.full([252], 5.0), paddle.full([12], 5, dtype="int64")
    ops.speculate_get_output_topk(toks, scs, rks, 20, 0, False, max_bsz=2, **queue)
    assert toks.numpy()[:4].tolist() == [-2, 0, 0, 5]
    assert (scs.numpy() == 5.0).all() and (rks.numpy() == 5).all()


def test_blocking_get_served_by_another_process(queue):
    """A sender process writes the reference encoder's bytes with raw libc msgsnd after a delay;
    the blocked reader op receives them."""
    words = reference.speculate_save_output_topk(*hand_batch(), msg_id=6, max_bsz=3)
    key = ops.queue_key(queue["msg_queue_id"], ftok_path=queue["ftok_path"])
    sender = textwrap.dedent(
        f"""
        import ctypes, ctypes.util, time
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        q = libc.msgget({key}, 0o1000 | 0o600)
        payload = bytes.fromhex("{words.tobytes().hex()}")
        buf = ctypes.create_string_buffer(8 + len(payload))
        ctypes.memmove(buf, (1).to_bytes(8, "little") + payload, 8 + len(payload))
        time.sleep(0.5)
        assert libc.msgsnd(q, buf, len(payload), 0) == 0
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", sender])
    try:
        toks = paddle.zeros([3 + 3 * 127], dtype="int64")
        scs, rks = paddle.zeros([378]), paddle.zeros([18], dtype="int64")
        ops.speculate_get_output_topk(toks, scs, rks, 20, 0, True, max_bsz=3, **queue)
        assert proc.wait(timeout=20) == 0
    finally:
        with contextlib.suppress(Exception):
            proc.kill()
    t = toks.numpy()
    assert t[:5].tolist() == [-6, 4, 2, 2, 0] and t[6:10].tolist() == [70, 5, 6, -1]


def _bad(index, value):
    args = hand_batch()
    args[index] = value
    return args


def _wide():
    """22 logprob columns: one more than a message holds."""
    args = hand_batch()
    args[1], args[2] = np.zeros((3, 22), np.int64), np.zeros((3, 22), np.float32)
    return args


BAD = [
    ("token_num_per_batch", _bad(4, i32([7, 0])), {}),  # more than 6 tokens
    ("token_num_per_batch", _bad(0, i64([[70], [80]])), {}),  # more than the sampled columns
    ("token_num_per_batch", _bad(4, i32([-1, 0])), {}),
    ("token_num_per_batch", hand_batch(), {"max_bsz": 1}),  # bs 2 > max_bsz
    ("cu_batch_token_offset", _bad(5, i32([2, 0])), {}),  # rows 2..4 of 3
    ("cu_batch_token_offset", _bad(5, i32([-1, 0])), {}),
    ("logprob_token_ids", _wide(), {}),
    ("logprob_scores", _bad(2, np.zeros((3, 3), np.float64)), {}),
    ("logprob_scores", _bad(2, np.zeros((2, 3), np.float32)), {}),
    ("logprob_ranks", _bad(3, i64([1, 2])), {}),
    ("msg_id", hand_batch(), {"msg_id": 2}),
    ("max_bsz", hand_batch(), {"max_bsz": 513}),
]


@pytest.mark.parametrize("name, args, kw", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_save_bad_input_names_the_argument_and_sends_nothing(queue, name, args, kw):
    kw = {"max_bsz": 3, **kw}
    with pytest.raises(ValueError, match=rf"^speculate_save_output_topk: {name}\b"):
        ops.speculate_save_output_topk(*as_paddle(args), **kw, **queue)
    assert raw_receive(queue) is None
    if name not in ("msg_id", "max_bsz"):
        with pytest.raises(ValueError, match=name):
            reference.speculate_save_output_topk(*args, **kw)


@pytest.mark.parametrize(
    "name, sizes, k",
    [
        ("output_tokens", (3 + 2 * 127 - 1, 252, 12), 1),
        ("output_scores", (3 + 2 * 127, 251, 12), 1),
        ("output_ranks", (3 + 2 * 127, 252, 11), 1),
        ("real_k", (3 + 2 * 127, 252, 12), 21),
    ],
)
def test_get_bad_input_names_the_argument_and_writes_nothing(queue, name, sizes, k):
    ops.speculate_save_output_topk(*as_paddle(hand_batch()), max_bsz=2, **queue)
    outs = [
        paddle.full([sizes[0]], 5, "int64"),
        paddle.full([sizes[1]], 5.0),
        paddle.full([sizes[2]], 5, "int64"),
    ]
    with pytest.raises(ValueError, match=rf"speculate_get_output_topk: {name}\b"):
        ops.speculate_get_output_topk(*outs, k, 0, False, max_bsz=2, **queue)
    assert all((o.numpy() == 5).all() for o in outs)
    assert raw_receive(queue) is not None  # the message is still queued


def test_get_refuses_a_foreign_message(queue):
    """A message whose bs exceeds max_bsz (e.g. another layout): ValueError, nothing written."""
    words = reference.speculate_save_output_topk(*hand_batch(), max_bsz=2)
    words[2] = 9
    sender = ops.queue_key(queue["msg_queue_id"], ftok_path=queue["ftok_path"])
    libc = sysv_libc()
    q = libc.msgget(sender, IPC_CREAT | 0o600)
    buf = ctypes.create_string_buffer((1).to_bytes(8, "little") + words.tobytes())
    libc.msgsnd.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.msgsnd(q, buf, words.nbytes, 0) == 0
    outs = [paddle.full([257], 5, "int64"), paddle.full([252], 5.0), paddle.full([12], 5, "int64")]
    with pytest.raises(ValueError, match="speculate_get_output_topk: msg_queue_id"):
        ops.speculate_get_output_topk(*outs, 20, 0, False, max_bsz=2, **queue)
    assert all((o.numpy() == 5).all() for o in outs)


def test_docstring_example(monkeypatch, tmp_path):
    import doctest

    monkeypatch.chdir(tmp_path)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(ops.speculate_save_output_topk, "speculate_save_output_topk", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 8
