"""Tests of the output-message host ops (spec/ops.md §5.11, §6.8): fd_mtp.ops.speculate_save_output,
mtp_save_first_token and speculate_get_output over a real SysV queue, read by a separate process
(tests/ops/msgqueue_reader.py) both through our reader op and through raw libc msgrcv.

Every test uses its own queue: keyed by a fresh temporary directory (ftok_path) and an id whose key
did not exist (created with IPC_EXCL), removed afterwards, so parallel runs and other users of the
machine do not collide.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import multiprocessing as mp
import os
import random
from dataclasses import dataclass

import msgqueue_reader
import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgqueue_reader import sysv_libc
from util import assert_same, flags, i32, i64

from fd_mtp import ops, reference

N = 1794  # 2 + 256 + 256 * 6 int32 words
TOK = 258  # mtext[258 + 6 i + j]: token j of request i
TIMEOUT = 20.0  # seconds for any single reader answer (paddle import excluded)


# ---------------------------------------------------------------------------------------------
# Queues and the reader process
# ---------------------------------------------------------------------------------------------


IPC_CREAT, IPC_EXCL = 0o1000, 0o2000


@dataclass
class Queue:
    id: int
    path: str

    @property
    def kw(self):
        return {"msg_queue_id": self.id, "ftok_path": self.path}


@contextlib.contextmanager
def fresh_queue(directory):
    """A queue no one else uses: key ftok(directory, id) for an id whose queue did not exist."""
    libc = sysv_libc()
    ids = list(range(1, 256))
    random.Random(os.getpid() ^ hash(str(directory))).shuffle(ids)
    for qid in ids:
        key = libc.ftok(os.fsencode(str(directory)), qid)
        assert key != -1, os.strerror(ctypes.get_errno())
        if libc.msgget(key, IPC_CREAT | IPC_EXCL | 0o600) != -1:
            break
        assert ctypes.get_errno() == errno.EEXIST, os.strerror(ctypes.get_errno())
    else:
        pytest.skip("no free SysV queue key")
    try:
        yield Queue(qid, str(directory))
    finally:
        ops.remove_queue(qid, ftok_path=str(directory))


@pytest.fixture
def queue(tmp_path):
    with fresh_queue(tmp_path) as q:
        yield q


@pytest.fixture(scope="module")
def shared_queue(tmp_path_factory):
    with fresh_queue(tmp_path_factory.mktemp("msgqueue")) as q:
        yield q


class Reader:
    """The reader process; a request that times out kills it (the next test starts a new one)."""

    def __init__(self):
        self.proc = None
        self.pending = False

    def _start(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=msgqueue_reader.serve, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(120):
            self.stop()
            pytest.fail("reader process did not start")
        assert self.conn.recv() == ("ready",)

    def stop(self):
        if self.proc is not None:
            if self.proc.is_alive() and not self.pending:
                self.conn.send(("quit",))
                self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.proc, self.pending = None, False

    def submit(self, *request):
        if self.proc is None or not self.proc.is_alive():
            self._start()
        assert not self.pending
        self.conn.send(request)
        self.pending = True

    def result(self, timeout=TIMEOUT):
        if not self.conn.poll(timeout):
            self.stop()
            pytest.fail(f"reader gave no answer within {timeout} s")
        self.pending = False
        return self.conn.recv()

    def ready(self, timeout):
        return self.conn.poll(timeout)

    # -- the two ways of reading ----------------------------------------------------------------
    def raw(self, q: Queue, wait=False):
        """The next message as int32 words via libc msgrcv, or None when the queue is empty."""
        self.submit("raw", q.path, q.id, wait)
        answer = self.result()
        if answer[0] == "none":
            assert answer[1] == errno.ENOMSG, f"msgrcv failed: {os.strerror(answer[1])}"
            return None
        _, mtype, nbytes, data = answer
        assert mtype == 1, f"mtype {mtype}"
        assert nbytes == 4 * N == 7176, f"message of {nbytes} bytes"
        return np.frombuffer(data, dtype="<i4").astype(np.int32)

    def start_op(
        self,
        q: Queue,
        rank_id=0,
        wait_flag=False,
        get_each_rank=False,
        fill=5,
        dynamic=False,
        shape=(N, 1),
    ):
        self.submit(
            "op", q.path, q.id, rank_id, wait_flag, get_each_rank, fill, dynamic, list(shape)
        )

    def op_result(self, timeout=TIMEOUT):
        answer = self.result(timeout)
        if answer[0] == "error":
            return answer
        return answer[1]

    def op(self, q: Queue, **kwargs):
        """x (int64, flat) after speculate_get_output in the reader process."""
        self.start_op(q, **kwargs)
        out = self.op_result()
        assert not (isinstance(out, tuple) and out[0] == "error"), out
        return out


@pytest.fixture(autouse=True)
def _no_id_env(monkeypatch):
    """Tests pass ids explicitly or set the variables themselves."""
    monkeypatch.delenv("INFERENCE_MSG_QUEUE_ID", raising=False)
    monkeypatch.delenv("INFERENCE_MSG_ID", raising=False)


@pytest.fixture(scope="module")
def reader():
    r = Reader()
    yield r
    r.stop()


def pd(a):
    return paddle.to_tensor(a, place=paddle.CPUPlace())


def save(
    q, tokens, num, go_on, dec, prompt, rank_id=0, save_each_rank=False, skip_prefill=False, **kw
):
    """speculate_save_output on queue ``q`` (None: the queue the keywords / environment name)."""
    ops.speculate_save_output(
        pd(tokens),
        pd(num),
        pd(flags([go_on])),
        pd(dec),
        pd(prompt),
        rank_id,
        save_each_rank,
        skip_prefill,
        **(q.kw if q is not None else {}),
        **kw,
    )


def first(
    q, x, go_on, dec, prompt, step, rank_id=0, save_each_rank=False, skip_chunk_prefill=False, **kw
):
    """mtp_save_first_token on queue ``q`` (None: the queue the keywords / environment name)."""
    ops.mtp_save_first_token(
        pd(x),
        pd(flags([go_on])),
        pd(dec),
        pd(prompt),
        pd(step),
        rank_id,
        save_each_rank,
        skip_chunk_prefill,
        **(q.kw if q is not None else {}),
        **kw,
    )


def message(header, bs, counts=(), tokens=()):
    """A message written by hand: counts[i] at 2 + i, tokens[i] (a list) at 258 + 6 i."""
    m = np.zeros(N, dtype=np.int32)
    m[0], m[1] = header, bs
    for i, c in enumerate(counts):
        m[2 + i] = c
    for i, row in enumerate(tokens):
        m[TOK + 6 * i : TOK + 6 * i + len(row)] = row
    return m


# ---------------------------------------------------------------------------------------------
# speculate_save_output: hand cases (§5.11)
# ---------------------------------------------------------------------------------------------
def test_save_output_narrow_rows_are_padded_with_zeros_on_the_wire(queue, reader):
    tokens, num = i64([[11, 12, 13], [21, 22, 23]]), i32([2, 3])
    save(queue, tokens, num, True, i32([9, 9]), i64([4, 4]), skip_prefill=True, msg_id=5)
    expected = message(5, 2, counts=[2, 3], tokens=[[11, 12, 13, 0, 0, 0], [21, 22, 23, 0, 0, 0]])
    assert_same(reader.raw(queue), expected, "raw message")
    assert reader.raw(queue) is None  # exactly one message
    ref = reference.speculate_save_output(
        tokens, num, flags([True]), i32([9, 9]), i64([4, 4]), 0, False, True, msg_id=5
    )
    assert_same(ref, expected, "reference")


def test_save_output_stop_sign_prefill_skip_and_our_reader(queue, reader):
    # request 0 is still in its prompt (dec 2 < prompt 5): count 0 but its tokens are still sent;
    # request 2 has dec == prompt (0 == 0): not in the prompt.
    tokens = i64([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]])
    save(
        queue,
        tokens,
        i32([3, 6, 1]),
        False,
        i32([2, 9, 0]),
        i64([5, 4, 0]),
        skip_prefill=True,
        msg_id=7,
    )
    expected = message(
        -7,
        3,
        counts=[0, 6, 1],
        tokens=[[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]],
    )
    assert_same(reader.op(queue), expected.astype(np.int64), "x after speculate_get_output")


def test_save_output_without_skip_prefill_sends_every_count(queue, reader):
    save(queue, i64([[5], [6]]), i32([1, 1]), True, i32([0, 0]), i64([8, 8]), skip_prefill=False)
    assert_same(reader.raw(queue), message(1, 2, counts=[1, 1], tokens=[[5], [6]]), "raw message")


def test_save_output_wide_rows_send_only_six_tokens_and_wrap_to_int32(queue, reader):
    tokens = i64([[1, 2, 3, 4, 5, 6, 7, 8], [2**31, -1, 2**32 + 9, 0, 0, 0, 99, 99]])
    save(queue, tokens, i32([6, 3]), True, i32([1, 1]), i64([1, 1]), msg_id=3)
    expected = message(3, 2, counts=[6, 3], tokens=[[1, 2, 3, 4, 5, 6], [-(2**31), -1, 9, 0, 0, 0]])
    assert_same(reader.raw(queue), expected, "raw message")


def test_save_output_full_batch_of_256(queue, reader):
    bs = 256
    tokens = np.arange(bs * 6, dtype=np.int64).reshape(bs, 6) + 1000
    num = (np.arange(bs) % 7).astype(np.int32)
    save(queue, tokens, num, True, i32([0] * bs), i64([0] * bs), msg_id=0)
    expected = np.concatenate([[0, bs], num, tokens.reshape(-1)]).astype(np.int32)
    assert_same(reader.raw(queue), expected, "raw message")


def test_save_output_rank_rules(queue, reader):
    args = (i64([[4, 5]]), i32([2]), True, i32([3]), i64([3]))
    save(queue, *args, rank_id=1, save_each_rank=False)
    assert reader.raw(queue) is None, "rank 1 without save_each_rank must send nothing"
    save(queue, *args, rank_id=1, save_each_rank=True)
    assert_same(reader.raw(queue), message(1, 1, counts=[2], tokens=[[4, 5]]), "raw message")
    assert (
        reference.speculate_save_output(
            i64([[4, 5]]), i32([2]), flags([True]), i32([3]), i64([3]), 1, False, False
        )
        is None
    )


def test_save_output_dynamic_positional_queue_id(queue, reader):
    ops.speculate_save_output_dynamic(
        pd(i64([[8, 9]])),
        pd(i32([1])),
        pd(flags([True])),
        pd(i32([0])),
        pd(i64([0])),
        0,
        queue.id,
        False,
        False,
        msg_id=4,
        ftok_path=queue.path,
    )
    x = reader.op(queue, dynamic=True)
    assert_same(x, message(4, 1, counts=[1], tokens=[[8, 9]]).astype(np.int64), "x")


def test_save_output_gpu_shaped_inputs_of_shape_bsz_1(queue, reader):
    # per-request tensors may be [bsz, 1], as in share_inputs
    save(queue, i64([[3, 4]]), i32([[2]]), True, i32([[1]]), i64([[1]]))
    assert_same(reader.raw(queue), message(1, 1, counts=[2], tokens=[[3, 4]]), "raw message")


# ---------------------------------------------------------------------------------------------
# mtp_save_first_token: hand cases (§6.8)
# ---------------------------------------------------------------------------------------------
FIRST_X = i64([[11, 31, -1], [12, 32, -1], [13, 33, -1], [14, 34, -1]])


def test_first_token_step_idx_rules_and_chunk_skip(queue, reader):
    # step_idx 0: nothing yet; 1: first token + first draft; 2: already sent; request 3 is a
    # prefill chunk (dec 2 < prompt 5) with step_idx 1, skipped by skip_chunk_prefill.
    dec, prompt, step = i32([4, 4, 4, 2]), i64([4, 4, 4, 5]), i64([0, 1, 2, 1])
    first(queue, FIRST_X, True, dec, prompt, step, skip_chunk_prefill=True, msg_id=6)
    expected = message(6, 4, counts=[0, 2, 0, 0], tokens=[[], [12, 32]])
    assert_same(reader.raw(queue), expected, "raw message")
    ref = reference.mtp_save_first_token(
        FIRST_X, flags([True]), dec, prompt, step, 0, False, True, msg_id=6
    )
    assert_same(ref, expected, "reference")
    first(queue, FIRST_X, False, dec, prompt, step, skip_chunk_prefill=False, msg_id=6)
    expected = message(-6, 4, counts=[0, 2, 0, 2], tokens=[[], [12, 32], [], [14, 34]])
    assert_same(reader.op(queue), expected.astype(np.int64), "x after speculate_get_output")


def test_first_token_no_stale_slots_across_messages(queue, reader):
    # message 1: both requests send their first tokens. message 2: request 0 moved on
    # (step_idx 2), request 1 is new again. message 3: bs shrinks to 1. Upstream's static message
    # would still carry [11, 31] in slot 0 of message 2 and [12, 32] in slot 1 of message 3.
    x = FIRST_X[:2]
    dec, prompt = i32([4, 4]), i64([4, 4])
    first(queue, x, True, dec, prompt, i64([1, 1]))
    assert_same(
        reader.raw(queue), message(1, 2, counts=[2, 2], tokens=[[11, 31], [12, 32]]), "message 1"
    )
    first(queue, x, True, dec, prompt, i64([2, 1]))
    assert_same(reader.raw(queue), message(1, 2, counts=[0, 2], tokens=[[], [12, 32]]), "message 2")
    first(queue, x[:1], True, dec, prompt, i64([2, 1]))
    assert_same(reader.raw(queue), message(1, 1), "message 3")


def test_first_token_rank_rules_and_dynamic_form(queue, reader):
    args = (FIRST_X[:1], True, i32([1]), i64([1]), i64([1]))
    first(queue, *args, rank_id=2)
    assert reader.raw(queue) is None, "rank 2 without save_each_rank must send nothing"
    ops.mtp_save_first_token_dynamic(
        pd(FIRST_X[:1]),
        pd(flags([True])),
        pd(i32([1])),
        pd(i64([1])),
        pd(i64([1])),
        2,
        queue.id,
        True,
        False,
        ftok_path=queue.path,
    )
    assert_same(reader.raw(queue), message(1, 1, counts=[2], tokens=[[11, 31]]), "raw message")


# ---------------------------------------------------------------------------------------------
# Random batches vs the reference
# ---------------------------------------------------------------------------------------------
def _random_save_args(rng, bs, width, skip):
    tokens = rng.integers(-(2**40), 2**40, size=(bs, width), dtype=np.int64)
    tokens[:, : width // 2] = rng.integers(0, 100_000, size=(bs, width // 2))
    extra = int(rng.integers(0, 3))
    num = rng.integers(0, min(width, 6) + 1, size=bs + extra, dtype=np.int32)
    dec = rng.integers(0, 20, size=bs + extra, dtype=np.int32)
    prompt = rng.integers(0, 20, size=bs + extra, dtype=np.int64)
    if skip:  # counts of requests in their prompt are sent as 0, whatever they are
        num[:bs][dec[:bs] < prompt[:bs]] = 9
    return tokens, num, flags([rng.random() < 0.5]), dec, prompt


@pytest.mark.parametrize("bs", [1, 7, 33, 99, 256])
def test_save_output_random_batches_match_reference(shared_queue, reader, bs):
    rng = np.random.default_rng(bs)
    for width in (1, 2, 6, 9):
        skip, msg_id = bool(rng.random() < 0.5), int(rng.choice([0, 1, 3, 1000]))
        tokens, num, go_on, dec, prompt = _random_save_args(rng, bs, width, skip)
        ops.speculate_save_output(
            pd(tokens),
            pd(num),
            pd(go_on),
            pd(dec),
            pd(prompt),
            0,
            False,
            skip,
            msg_id=msg_id,
            **shared_queue.kw,
        )
        expected = reference.speculate_save_output(
            tokens, num, go_on, dec, prompt, 0, False, skip, msg_id=msg_id
        )
        assert_same(reader.raw(shared_queue), expected, f"bs={bs} W={width}")


@pytest.mark.parametrize("bs", [1, 7, 33, 99, 256])
def test_first_token_random_batches_match_reference(shared_queue, reader, bs):
    rng = np.random.default_rng(1000 + bs)
    for width in (2, 3, 6):
        x = rng.integers(-(2**33), 2**33, size=(bs, width), dtype=np.int64)
        dec = rng.integers(0, 10, size=bs, dtype=np.int32)
        prompt = rng.integers(0, 10, size=bs, dtype=np.int64)
        step = rng.integers(0, 4, size=bs, dtype=np.int64)
        go_on, skip = flags([rng.random() < 0.5]), bool(rng.random() < 0.5)
        ops.mtp_save_first_token(
            pd(x), pd(go_on), pd(dec), pd(prompt), pd(step), 0, False, skip, **shared_queue.kw
        )
        expected = reference.mtp_save_first_token(x, go_on, dec, prompt, step, 0, False, skip)
        got = reader.op(shared_queue)
        assert_same(got, expected.astype(np.int64), f"bs={bs} W={width}")
        # invariants: counts are 0 or 2; every slot without count 2 is all zeros
        counts = got[2 : 2 + 256]
        assert set(np.unique(counts)) <= {0, 2}
        slots = got[TOK:].reshape(256, 6)
        assert not slots[counts == 0].any() and not slots[:, 2:].any()


@settings(max_examples=25)
@given(
    bs=st.integers(1, 256),
    width=st.integers(0, 8),
    seed=st.integers(0, 2**32 - 1),
    rank=st.sampled_from([(0, False), (1, False), (1, True)]),
)
def test_save_output_hypothesis(shared_queue, reader, bs, width, seed, rank):
    rng = np.random.default_rng(seed)
    skip = bool(seed & 1)
    tokens, num, go_on, dec, prompt = _random_save_args(rng, bs, width, skip)
    ops.speculate_save_output(
        pd(tokens), pd(num), pd(go_on), pd(dec), pd(prompt), *rank, skip, **shared_queue.kw
    )
    expected = reference.speculate_save_output(tokens, num, go_on, dec, prompt, *rank, skip)
    got = reader.raw(shared_queue)
    if expected is None:
        assert got is None
    else:
        assert_same(got, expected, "raw message")
        assert got[1] == bs and abs(got[0]) == 1 and (got[0] > 0) == bool(go_on[0])
        assert not got[2 + bs : TOK].any() and not got[TOK + 6 * bs :].any()


# ---------------------------------------------------------------------------------------------
# speculate_get_output
# ---------------------------------------------------------------------------------------------
def test_get_output_non_blocking_empty_queue_writes_minus_two(queue, reader):
    x = reader.op(queue, wait_flag=False, fill=5)
    assert_same(x[:4], i64([-2, 0, 5, 5]), "x")
    assert (x[2:] == 5).all()
    # the same in this process, on a flat [N] tensor
    y = paddle.full([N + 3], 7, dtype="int64")
    ops.speculate_get_output(y, 0, False, False, **queue.kw)
    assert y.numpy()[:3].tolist() == [-2, 0, 7]


def test_get_output_blocks_until_a_message_arrives(queue, reader):
    reader.start_op(queue, wait_flag=True)
    assert not reader.ready(0.5), "blocking speculate_get_output returned on an empty queue"
    save(queue, i64([[42, 43]]), i32([2]), True, i32([0]), i64([0]), msg_id=9)
    x = reader.op_result()
    assert_same(x, message(9, 1, counts=[2], tokens=[[42, 43]]).astype(np.int64), "x")


def test_get_output_rank_rules_leave_x_and_the_queue(queue, reader):
    save(queue, i64([[1, 2]]), i32([1]), True, i32([0]), i64([0]))
    x = reader.op(queue, rank_id=1, get_each_rank=False, fill=5)
    assert (x == 5).all(), "rank 1 without get_each_rank must not touch x"
    x = reader.op(queue, rank_id=1, get_each_rank=True)
    assert_same(x, message(1, 1, counts=[1], tokens=[[1, 2]]).astype(np.int64), "x")


def test_get_output_matches_reference_reader(queue, reader):
    msg = reference.speculate_save_output(
        i64([[5, 6, 7]]), i32([3]), flags([False]), i32([0]), i64([0]), 0, False, False
    )
    save(queue, i64([[5, 6, 7]]), i32([3]), False, i32([0]), i64([0]))
    x = reader.op(queue, fill=-9)
    x_ref = np.full(N, -9, dtype=np.int64)
    assert reference.msgqueue.speculate_get_output_from_message(x_ref, msg) is True
    assert_same(x, x_ref, "x")
    empty = np.full(N, 3, dtype=np.int64)
    assert reference.msgqueue.speculate_get_output_from_message(empty, None) is False
    assert empty[:3].tolist() == [-2, 0, 3]


def test_get_output_reference_receives_from_the_queue_as_the_op(queue):
    """reference.speculate_get_output (the op's signature) reads the real queue with libc msgrcv."""
    tokens, num = i64([[5, 6, 7], [8, 9, 10]]), i32([3, 2])
    for _ in range(2):  # the same message twice: one for each reader
        save(queue, tokens, num, True, i32([0, 0]), i64([0, 0]), msg_id=12)
    x_ref = np.full(N + 2, -9, dtype=np.int64)
    assert reference.speculate_get_output(x_ref, 0, False, False, **queue.kw) is True
    x = paddle.full([N + 2], -9, dtype="int64")
    ops.speculate_get_output(x, 0, False, False, **queue.kw)
    assert_same(x.numpy(), x_ref, "x")
    expected = message(12, 2, counts=[3, 2], tokens=[[5, 6, 7], [8, 9, 10]]).astype(np.int64)
    assert_same(x_ref[:N], expected, "reference x")
    assert (x_ref[N:] == -9).all()
    # the queue is empty now: both write -2, 0 and leave the rest
    for _ in range(2):
        ops.speculate_get_output(x, 0, False, False, **queue.kw)
        assert reference.speculate_get_output(x_ref, 0, False, False, **queue.kw) is False
    assert_same(x.numpy(), x_ref, "x after an empty queue")
    assert x_ref[:2].tolist() == [-2, 0]
    # rank rules: nothing is received
    save(queue, tokens, num, True, i32([0, 0]), i64([0, 0]))
    assert reference.speculate_get_output(x_ref, 1, False, False, **queue.kw) is False
    assert x_ref[:2].tolist() == [-2, 0]
    assert reference.speculate_get_output(x_ref, 1, False, True, **queue.kw) is True
    assert x_ref[:2].tolist() == [1, 2]


def test_get_output_queue_removed_while_blocked_raises_oserror(queue, reader):
    reader.start_op(queue, wait_flag=True)
    assert not reader.ready(0.5)
    assert ops.remove_queue(queue.id, ftok_path=queue.path) is True
    answer = reader.op_result()
    assert answer[0] == "error" and answer[1] == "OSError", answer
    assert answer[2] == errno.EIDRM and "msgrcv" in answer[3], answer
    assert ops.remove_queue(queue.id, ftok_path=queue.path) is False


# ---------------------------------------------------------------------------------------------
# Queue / message id resolution
# ---------------------------------------------------------------------------------------------
def test_env_queue_id_and_msg_id(queue, reader, monkeypatch):
    monkeypatch.setenv("INFERENCE_MSG_QUEUE_ID", str(queue.id))
    monkeypatch.setenv("INFERENCE_MSG_ID", "11")
    save(None, i64([[1]]), i32([1]), False, i32([0]), i64([0]), ftok_path=queue.path)
    assert_same(reader.raw(queue), message(-11, 1, counts=[1], tokens=[[1]]), "raw message")
    # explicit keywords win over the environment
    first(None, FIRST_X[:1], True, i32([0]), i64([0]), i64([1]), msg_id=3, ftok_path=queue.path)
    assert_same(reader.raw(queue), message(3, 1, counts=[2], tokens=[[11, 31]]), "raw message")
    assert ops.queue_key(ftok_path=queue.path) == ops.queue_key(queue.id, ftok_path=queue.path)


@pytest.mark.parametrize("value", ["2", "-1", "abc"])
def test_env_msg_id_invalid(queue, reader, monkeypatch, value):
    monkeypatch.setenv("INFERENCE_MSG_ID", value)
    with pytest.raises(ValueError, match="INFERENCE_MSG_ID"):
        save(queue, i64([[1]]), i32([1]), True, i32([0]), i64([0]))
    assert reader.raw(queue) is None


def test_env_queue_id_invalid(monkeypatch, tmp_path):
    monkeypatch.setenv("INFERENCE_MSG_QUEUE_ID", "one")
    with pytest.raises(ValueError, match="INFERENCE_MSG_QUEUE_ID"):
        ops.speculate_get_output(
            paddle.zeros([N], dtype="int64"), 0, False, False, ftok_path=str(tmp_path)
        )


def test_docstring_examples_are_exact(monkeypatch, tmp_path):
    # the examples key their queues on "./": run them in a fresh directory (a unique inode)
    import doctest

    import fd_mtp.ops.msgqueue as module

    monkeypatch.chdir(tmp_path)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 20 and result.failed == 0, result
    for qid in (97, 98, 99):  # the examples remove their queues; make sure
        assert ops.remove_queue(qid) is False


def test_default_ids(monkeypatch):
    monkeypatch.delenv("INFERENCE_MSG_QUEUE_ID", raising=False)
    monkeypatch.delenv("INFERENCE_MSG_ID", raising=False)
    from fd_mtp.ops.msgqueue import resolve_msg_id, resolve_msg_queue_id

    assert resolve_msg_queue_id() == 1 and resolve_msg_id() == 1
    assert resolve_msg_queue_id(300) == 300 and resolve_msg_id(0) == 0
    assert resolve_msg_queue_id(np.int64(7)) == 7 and resolve_msg_id(np.int32(3)) == 3
    for bad in (True, 1.5, "3"):
        with pytest.raises(ValueError, match="msg_id"):
            resolve_msg_id(bad)
    with pytest.raises(ValueError, match="msg_queue_id"):
        resolve_msg_queue_id(2**31)


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument, nothing sent
# ---------------------------------------------------------------------------------------------
GOOD_SAVE = dict(
    tokens=i64([[1, 2]]), num=i32([1]), go_on=flags([True]), dec=i32([0]), prompt=i64([0])
)
GOOD_FIRST = dict(
    x=i64([[1, 2]]), go_on=flags([True]), dec=i32([0]), prompt=i64([0]), step=i64([1])
)

BAD_SAVE = [
    (
        "accept_tokens",
        dict(
            tokens=np.zeros((257, 2), np.int64),
            num=i32([1] * 257),
            dec=i32([0] * 257),
            prompt=i64([0] * 257),
        ),
    ),
    ("accept_tokens", dict(tokens=i32([[1, 2]]))),
    ("accept_tokens", dict(tokens=i64([1, 2]))),
    ("accept_num", dict(num=i64([1]))),
    ("accept_num", dict(tokens=i64([[1, 2], [3, 4]]))),  # 2 rows, 1 count
    ("seq_lens_decoder", dict(dec=i64([0]))),
    ("prompt_lens", dict(prompt=i32([0]))),
    ("not_need_stop", dict(go_on=i32([1]))),
    ("not_need_stop", dict(go_on=flags([True, True]))),
    ("accept_num", dict(num=i32([3]))),  # 3 > 2 columns
    ("accept_num", dict(tokens=np.ones((1, 8), np.int64), num=i32([7]))),  # 7 > 6 slots
    ("accept_num", dict(num=i32([-1]))),
]


def bad_cases(cases):
    """pytest parameters ``arg, change`` of a list of (argument, changed inputs)."""
    return pytest.mark.parametrize(
        "arg,change", cases, ids=[f"{a}-{i}" for i, (a, _) in enumerate(cases)]
    )


def assert_both_refuse(queue, reader, op, arrays, arg):
    """``op`` (sending to ``queue``; rank 0, save_each_rank False, skip True) and its reference
    refuse ``arrays`` naming ``arg``, and nothing is sent."""
    with pytest.raises(ValueError, match=f"{op}: {arg}"):
        getattr(ops, op)(*[pd(a) for a in arrays], 0, False, True, **queue.kw)
    with pytest.raises(ValueError, match=arg):
        getattr(reference, op)(*arrays, 0, False, True)
    assert reader.raw(queue) is None, "nothing may be sent on bad input"


@bad_cases(BAD_SAVE)
def test_save_output_bad_input(queue, reader, arg, change):
    a = {**GOOD_SAVE, **change}
    arrays = [a[k] for k in ("tokens", "num", "go_on", "dec", "prompt")]
    assert_both_refuse(queue, reader, "speculate_save_output", arrays, arg)


BAD_FIRST = [
    (
        "x",
        dict(
            x=np.zeros((257, 2), np.int64),
            dec=i32([0] * 257),
            prompt=i64([0] * 257),
            step=i64([1] * 257),
        ),
    ),
    ("x", dict(x=i64([[1], [2]]), dec=i32([0, 0]), prompt=i64([0, 0]), step=i64([1, 1]))),
    ("x", dict(x=i32([[1, 2]]))),
    ("step_idx", dict(step=i32([1]))),
    ("step_idx", dict(x=i64([[1, 2], [3, 4]]), dec=i32([0, 0]), prompt=i64([0, 0]))),
    ("seq_lens_decoder", dict(dec=i64([0]))),
    ("prompt_lens", dict(prompt=i32([0]))),
    ("not_need_stop", dict(go_on=i64([1]))),
]


@bad_cases(BAD_FIRST)
def test_first_token_bad_input(queue, reader, arg, change):
    a = {**GOOD_FIRST, **change}
    arrays = [a[k] for k in ("x", "go_on", "dec", "prompt", "step")]
    assert_both_refuse(queue, reader, "mtp_save_first_token", arrays, arg)


@pytest.mark.parametrize("msg_id", [2, -1, -2])
def test_bad_msg_id_sends_nothing(queue, reader, msg_id):
    with pytest.raises(ValueError, match="msg_id"):
        save(queue, i64([[1]]), i32([1]), True, i32([0]), i64([0]), msg_id=msg_id)
    with pytest.raises(ValueError, match="msg_id"):
        first(queue, i64([[1, 2]]), True, i32([0]), i64([0]), i64([1]), msg_id=msg_id)
    with pytest.raises(ValueError, match="msg_id"):
        reference.speculate_save_output(
            i64([[1]]), i32([1]), flags([True]), i32([0]), i64([0]), 0, False, False, msg_id=msg_id
        )
    assert reader.raw(queue) is None


def test_counts_of_skipped_prefill_requests_are_not_checked(queue, reader):
    # request 0 is in its prompt (dec 1 < prompt 3) and skip_prefill: its count is sent as 0
    save(
        queue, i64([[1, 2], [3, 4]]), i32([9, 2]), True, i32([1, 5]), i64([3, 3]), skip_prefill=True
    )
    assert_same(
        reader.raw(queue), message(1, 2, counts=[0, 2], tokens=[[1, 2], [3, 4]]), "raw message"
    )
    with pytest.raises(ValueError, match=r"speculate_save_output: accept_num \(request 0\) is 9"):
        save(
            queue,
            i64([[1, 2], [3, 4]]),
            i32([9, 2]),
            True,
            i32([1, 5]),
            i64([3, 3]),
            skip_prefill=False,
        )
    assert reader.raw(queue) is None


def test_bad_input_is_checked_on_ranks_that_send_nothing(queue, reader):
    with pytest.raises(ValueError, match="accept_tokens"):
        save(queue, i32([[1]]), i32([1]), True, i32([0]), i64([0]), rank_id=1)
    with pytest.raises(ValueError, match="accept_num"):
        save(queue, i64([[1]]), i32([2]), True, i32([0]), i64([0]), rank_id=1)
    assert reader.raw(queue) is None


def test_get_output_bad_x(queue):
    for x, what in (
        (paddle.zeros([N], dtype="int32"), "must be"),
        (paddle.zeros([N - 1], dtype="int64"), "must hold at least 1794"),
    ):
        with pytest.raises(ValueError, match=f"speculate_get_output: x {what}"):
            ops.speculate_get_output(x, 0, False, False, **queue.kw)
    with pytest.raises(ValueError, match="x"):
        reference.msgqueue.speculate_get_output_from_message(np.zeros(N - 1, np.int64), None)
    with pytest.raises(ValueError, match="x"):
        reference.speculate_get_output(np.zeros(N - 1, np.int64), 0, False, False, **queue.kw)


def test_strided_views_are_refused_and_nothing_is_sent(queue, reader):
    wide = pd(i64([[1, 9, 2, 9], [3, 9, 4, 9]]))
    view = wide[:, ::2]  # [[1, 2], [3, 4]] as a strided view
    if view.is_contiguous():
        pytest.skip("this paddle copies on step slicing")
    args = (pd(i32([1, 1])), pd(flags([True])), pd(i32([0, 0])), pd(i64([0, 0])), 0, False, False)
    with pytest.raises(ValueError, match="speculate_save_output: accept_tokens must be contiguous"):
        ops.speculate_save_output(view, *args, **queue.kw)
    step = pd(i64([1, 1, 7, 7]))[::2]
    if not step.is_contiguous():
        with pytest.raises(ValueError, match="mtp_save_first_token: step_idx must be contiguous"):
            ops.mtp_save_first_token(
                pd(i64([[1, 2], [3, 4]])),
                pd(flags([True])),
                pd(i32([0, 0])),
                pd(i64([0, 0])),
                step,
                0,
                False,
                False,
                **queue.kw,
            )
    assert reader.raw(queue) is None, "nothing may be sent on bad input"
    x = paddle.full([2 * N], 5, dtype="int64")
    with pytest.raises(ValueError, match="speculate_get_output: x must be contiguous"):
        ops.speculate_get_output(x[::2], 0, False, False, **queue.kw)


def test_ftok_path_none_means_the_current_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with fresh_queue(tmp_path) as q:  # keyed on tmp_path, the current directory
        save(
            None, i64([[4]]), i32([1]), True, i32([0]), i64([0]), msg_queue_id=q.id, ftok_path=None
        )
        x = paddle.zeros([N], dtype="int64")
        ops.speculate_get_output(x, 0, False, False, msg_queue_id=q.id, ftok_path=q.path)
        assert x.numpy()[:3].tolist() == [1, 1, 1] and int(x.numpy()[TOK]) == 4
        assert (
            ops.queue_key(q.id)
            == ops.queue_key(q.id, ftok_path=None)
            == ops.queue_key(q.id, ftok_path=q.path)
        )


def test_missing_ftok_path(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="speculate_save_output: ftok_path"):
        save(
            None, i64([[1]]), i32([1]), True, i32([0]), i64([0]), msg_queue_id=1, ftok_path=missing
        )
    with pytest.raises(ValueError, match="ftok_path"):
        ops.remove_queue(1, ftok_path=missing)
