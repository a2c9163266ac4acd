"""The target side of a speculative step, op after op, as spec/ops.md §4.1 steps 1-6 run it.

A toy bigram "model" stands in for the target network: the hidden state of a packed token is the
token id itself and the logits of an output row are row `token` of a fixed random table. Around
it the real ops run in the runner's order (pre_process -> rebuild_padding -> penalties -> softmax
-> top_p_candidates -> speculate_verify -> speculate_set_stop_value_multi_seqs -> speculate_update
-> speculate_set_value_by_flags_and_idx); a toy drafter writes the next drafts (sometimes right,
sometimes wrong) as draft_model_postprocess would leave them. Two properties are checked:

* every op equals its numpy reference at every step (the whole chain, twice: ops and references);
* with greedy verification the emitted tokens equal plain greedy decoding of the same model, token
  for token, whatever the drafter proposes (spec §5.7 "greedy": accept while draft == argmax).
"""

import numpy as np
import pytest
from util import assert_same

from fd_mtp import ops, reference

V = 48  # vocabulary
L = 64  # max_model_len: width of input_ids / pre_ids
C = 5  # max_candidate_len
EOS = (1, 2)
STOP_SEQ = (7, 9)  # a stop sequence (the token after it becomes EOS)


def bigram_table(seed):
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, 3.0, (V, V)).astype(np.float32)
    # Make EOS rare but reachable so that some requests end on it.
    table[:, list(EOS)] -= 4.0
    return table


def plain_greedy(table, prompt, max_dec_len, stop_seqs=()):
    """Plain (non-speculative) greedy decoding of the bigram model with the ops' stop rules."""
    out, tok = [], prompt[-1]
    while True:
        tok = int(np.argmax(table[tok]))
        out.append(tok)
        if tok in EOS:
            return out
        if len(out) >= max_dec_len:
            out[-1] = EOS[0]
            return out
        for seq in stop_seqs:  # stop sequences match generated tokens only (spec §5.8)
            if len(out) > len(seq) and tuple(out[-len(seq) - 1 : -1]) == tuple(seq):
                out[-1] = EOS[0]  # the token after a completed stop sequence becomes EOS
                return out


class Engine:
    """The persistent buffers of spec §2 (the keys this chain touches), as numpy arrays."""

    def __init__(self, prompts, k, max_dec_lens, stop_seqs=()):
        b = len(prompts)
        self.k = k
        self.input_ids = np.zeros((b, L), np.int64)
        for i, p in enumerate(prompts):
            self.input_ids[i, : len(p)] = p
        n = np.array([len(p) for p in prompts], np.int32)
        self.seq_lens_this_time = n.copy()
        self.seq_lens_encoder = n.copy()
        self.seq_lens_decoder = np.zeros(b, np.int32)
        self.step_idx = np.zeros(b, np.int64)
        self.stop_flags = np.zeros(b, bool)
        self.pre_ids = np.full((b, L), -1, np.int64)
        self.draft_tokens = np.zeros((b, k + 1), np.int64)
        self.accept_tokens = np.zeros((b, k + 1), np.int64)
        self.accept_num = np.zeros(b, np.int32)
        self.actual_draft_token_num = np.full(b, k, np.int32)
        self.is_block_step = np.zeros(b, bool)
        self.mask_rollback = np.zeros(b, np.int32)
        self.not_need_stop = np.ones(1, bool)
        self.stop_nums = np.array([b], np.int64)
        self.max_dec_len = np.asarray(max_dec_lens, np.int64)
        self.min_dec_len = np.zeros(b, np.int64)
        self.end_ids = np.asarray(EOS, np.int64)
        self.top_p = np.full(b, 0.9, np.float32)
        self.penalty = np.ones(b, np.float32)
        self.frequency = np.zeros(b, np.float32)
        self.presence = np.zeros(b, np.float32)
        self.temperature = np.ones(b, np.float32)
        self.bad_tokens = np.full((1, 1), -1, np.int64)
        ls = max([len(s) for s in stop_seqs], default=1)
        self.stop_seqs = np.full((b, max(len(stop_seqs), 1), ls), -1, np.int64)
        self.stop_seqs_len = np.zeros((b, max(len(stop_seqs), 1)), np.int32)
        for s, seq in enumerate(stop_seqs):
            self.stop_seqs[:, s, : len(seq)] = seq
            self.stop_seqs_len[:, s] = len(seq)

    def arrays(self):
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}


def _pd(a):
    import paddle

    return paddle.to_tensor(a, place=paddle.CPUPlace())


def _np(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def target_step(e, table, lib, wrap, unwrap):
    """One target step through library `lib` (fd_mtp.ops or fd_mtp.reference) on state `e`.

    `wrap` turns the numpy state into lib's arrays and `unwrap` reads them back into `e`.
    """
    s = {k: wrap(v) for k, v in e.arrays().items()}
    ids, _, cu_q, _, out_cum, out_pad = lib.pre_process(
        s["input_ids"],
        s["seq_lens_this_time"],
        True,
        s["draft_tokens"],
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
    )
    hidden = wrap(_np(ids).astype(np.float32).reshape(-1, 1))  # the toy model: hidden = token id
    rows = lib.rebuild_padding(
        hidden,
        cu_q,
        s["seq_lens_this_time"],
        s["seq_lens_decoder"],
        s["seq_lens_encoder"],
        out_pad,
        None,
        L,
        False,
    )
    logits = wrap(table[_np(rows)[:, 0].astype(np.int64)])
    lib.speculate_get_token_penalty_multi_scores(
        s["pre_ids"],
        logits,
        s["penalty"],
        s["frequency"],
        s["presence"],
        s["temperature"],
        s["bad_tokens"],
        s["step_idx"],
        s["min_dec_len"],
        s["end_ids"],
        s["seq_lens_this_time"],
        out_pad,
        out_cum,
        L,
    )
    probs = wrap(softmax(_np(logits)))
    scores, tokens, lens = lib.top_p_candidates(probs, s["top_p"], out_pad, C, L)
    sampled = wrap(np.argmax(_np(probs), axis=-1).astype(np.int64).reshape(-1, 1))
    lib.speculate_verify(
        sampled,
        s["accept_tokens"],
        s["accept_num"],
        s["step_idx"],
        s["stop_flags"],
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
        s["draft_tokens"],
        s["seq_lens_this_time"],
        tokens,
        scores,
        s["max_dec_len"],
        s["end_ids"],
        s["is_block_step"],
        out_cum,
        lens,
        s["actual_draft_token_num"],
        s["top_p"],
        L,
        2,
        True,
        False,
        False,
        verify_strategy="greedy",
        seed=0,
        offset=0,
    )
    lib.speculate_set_stop_value_multi_seqs(
        s["accept_tokens"],
        s["accept_num"],
        s["pre_ids"],
        s["step_idx"],
        s["stop_flags"],
        s["seq_lens_this_time"],
        s["stop_seqs"],
        s["stop_seqs_len"],
        s["end_ids"],
    )
    lib.speculate_update(
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
        s["not_need_stop"],
        s["draft_tokens"],
        s["actual_draft_token_num"],
        s["accept_tokens"],
        s["accept_num"],
        s["stop_flags"],
        s["seq_lens_this_time"],
        s["is_block_step"],
        s["stop_nums"],
        s["mask_rollback"],
    )
    emitted = [
        list(_np(s["accept_tokens"])[b, : _np(s["accept_num"])[b]]) for b in range(len(e.step_idx))
    ]
    lib.speculate_set_value_by_flags_and_idx(
        s["pre_ids"],
        s["accept_tokens"],
        s["accept_num"],
        s["stop_flags"],
        s["seq_lens_this_time"],
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
        s["step_idx"],
    )
    for k, v in s.items():
        unwrap(e, k, v)
    return emitted


def toy_drafts(e, table, rng, p_right):
    """Next drafts: each running request proposes K tokens continuing from its last accepted token,
    each the model's greedy choice with probability p_right, else a random token; this_time = K+1
    (what draft_model_postprocess leaves for a running decode request)."""
    for b in range(len(e.step_idx)):
        if e.stop_flags[b]:
            e.seq_lens_this_time[b] = 0
            continue
        tok = int(e.draft_tokens[b, 0])
        for j in range(1, e.k + 1):
            right = int(np.argmax(table[tok]))
            tok = right if rng.random() < p_right else int(rng.integers(0, V))
            e.draft_tokens[b, j] = tok
        e.seq_lens_this_time[b] = e.k + 1


def _unwrap_np(e, k, v):
    setattr(e, k, v)


def _unwrap_pd(e, k, v):
    setattr(e, k, _np(v))


def run_chain(k, p_right, stops, seed):
    """Runs the op chain and the reference chain side by side until every request stops; checks
    that they agree at every step and returns (prompts, max_dec_len, emitted tokens, final state)."""
    table = bigram_table(seed)
    rng = np.random.default_rng(100 + seed)
    prompts = [[int(t) for t in rng.integers(3, V, n)] for n in (1, 4, 9, 2, 6, 13, 3)]
    max_dec = [12, 5, 20, 1, 17, 9, 30]
    e_op = Engine(prompts, k, max_dec, stops)
    e_ref = Engine(prompts, k, max_dec, stops)
    emitted = [[] for _ in prompts]
    draft_rng_op, draft_rng_ref = np.random.default_rng(7), np.random.default_rng(7)
    for step in range(200):
        got = target_step(e_op, table, ops, _pd, _unwrap_pd)
        want = target_step(e_ref, table, reference, lambda a: a.copy(), _unwrap_np)
        for name, arr in e_ref.arrays().items():
            assert_same(getattr(e_op, name), arr, f"step {step}: {name}")
        assert got == want
        for b, toks in enumerate(got):
            emitted[b].extend(int(t) for t in toks)
        if e_op.stop_flags.all():
            break
        toy_drafts(e_op, table, draft_rng_op, p_right)
        toy_drafts(e_ref, table, draft_rng_ref, p_right)
    else:
        pytest.fail("requests did not finish in 200 steps")
    return table, prompts, max_dec, emitted, e_op


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("p_right", [0.0, 0.6, 1.0])
def test_greedy_speculative_chain_equals_plain_greedy_and_the_references(k, p_right):
    table, prompts, max_dec, emitted, e = run_chain(k, p_right, (), seed=k)
    for b, prompt in enumerate(prompts):
        expected = plain_greedy(table, prompt, max_dec[b])
        assert emitted[b] == expected, f"request {b}: speculative {emitted[b]} != plain {expected}"
        # pre_ids holds the emitted tokens from index 1 on (spec §1.4, target convention); the
        # tokens of a request's last step are not written (set_value skips stopped requests).
        row = [int(t) for t in e.pre_ids[b, 1:]]
        m = row.index(-1) if -1 in row else len(row)
        assert row[:m] == expected[:m] and m <= len(expected)
        assert all(t == -1 for t in row[m:])


@pytest.mark.parametrize("k", [1, 3])
def test_chain_with_stop_sequences_matches_the_references(k):
    # Stop sequences taken from what plain decoding emits (a 2-gram of request 2, one token of
    # request 4), so that they fire. A stop sequence that completes in the same step as an EOS or
    # max_dec_len stop found by verify is not seen (set_stop_value skips stopped requests:
    # upstream semantics), so this test compares the ops with the references step by step and
    # checks that the two requests end early on EOS.
    seed = 10 + k
    table, prompts, max_dec, _, _ = run_chain(k, 1.0, (), seed=seed)
    plain = [plain_greedy(table, p, m) for p, m in zip(prompts, max_dec)]
    assert len(plain[2]) >= 6 and len(plain[4]) >= 6
    stops = (tuple(plain[2][2:4]), (plain[4][3],))
    table, prompts, max_dec, emitted, e = run_chain(k, 0.6, stops, seed=seed)
    for b in (2, 4):
        assert len(emitted[b]) < len(plain[b]) and emitted[b][-1] == EOS[0], (
            b,
            emitted[b],
            plain[b],
        )
    assert all(out and out[-1] in EOS for out in emitted)
