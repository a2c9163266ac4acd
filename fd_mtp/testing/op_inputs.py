"""One input factory per op: realistic, valid batches of every op's arguments (numpy), shared by
the benchmarks (benchmarks/bench_ops.py), the bad-input fuzz test (tests/ops/test_fuzz.py) and any
test that needs a whole valid batch rather than a hand case.

``BUILDERS[name](batch)`` returns a `Case`: the positional arguments (numpy arrays and Python
scalars, in FastDeploy's order), their names, which are written, keyword arguments and a config
string. A batch mixes decode / prefill / stopped requests (K = 3 draft tokens, max_model_len 2048
for input_ids / pre_ids, hidden size 1024 in bfloat16 bits for the eagle ops, a block manager with
free blocks to spare). Entries named ``"op[variant]"`` run ``op``. Pure numpy: no paddle import.

The builders also take keyword parameters for the variants the GPU parity tests (tests/gpu) run
(the defaults are the benchmark's batches): ``hidden`` / ``dtype`` of the eagle ops and
rebuild_padding, ``dtype`` of the sampling ops and top_p_candidates' ``candidates``; the builders
of fd_mtp.testing.gpu_step's step take ``variant`` (0: the default batch; n: another mix of
requests drawn with other seeds, the shapes the same but for the packed token counts). A dtype is a
numpy dtype name or "bfloat16" (stored as its uint16 bit patterns, as fd_mtp.reference takes it).
"""

from __future__ import annotations

import functools

import numpy as np

from .. import reference as ref
from ..schema import get as _schema_op
from ..schema import python_signature as _python_signature
from ..schema import written_args as _written_args


def _positional(op: str) -> list[str]:
    """The op's positional argument names, in order, from its schema (fd_mtp/schema)."""
    return _python_signature(_schema_op(op))[0]


K = 3  # draft tokens per step (num_speculative_tokens)
THINK_END_ID = 31_000  # the reasoning models' think_end_id in build_limit_thinking
L = 2048  # max_model_len: width of input_ids / pre_ids, max_seq_len of the output offsets
H = 1024  # hidden size of the eagle ops
NUM_MODEL_STEP = 1
BLOCK_SIZE = 64
EOS_IDS = (2, 3)
VOCAB = (100, 100_000)
PREFILL_TOKEN_BUDGET = 2048  # chunked-prefill tokens per step, shared by the prefill requests

SAMPLING_VOCABS = (32_000, 100_000)  # vocab sizes of the sampling-op entries
CANDIDATES = 5  # top_p_candidates' C (FastDeploy's default max_candidate_len)


class Case:
    """One op call: positional args (numpy arrays and python scalars), kwargs, the names of the
    written array args (by position), and a config string for the CSV."""

    def __init__(self, args, names, written, config, kwargs=None, returns=False):
        self.args = args
        self.names = names
        self.written = [names.index(n) for n in written]
        self.config = config
        self.kwargs = kwargs or {}
        self.returns = returns


def _seed(base, variant):
    """The seed of a builder's generator: ``base`` for variant 0 (the benchmark's batch), else
    another batch of the same shapes per variant (tests/gpu/test_gpu_capture.py's changing
    batches: other requests decoding, prefilling, stopped, block-stepped)."""
    return base if variant == 0 else [base, int(variant)]


def _roles(batch, rng):
    """Per-request role: 'decode', 'prefill', 'stopped' (empty slot / target stopped), or
    'resync' (the draft stopped, e.g. on EOS, while the target went on)."""
    roles = np.array(["decode"] * batch, dtype=object)
    if batch == 1:
        return roles
    idx = rng.permutation(batch)
    n_pf = max(1, batch // 16)
    n_stop = max(1, batch // 10)
    n_resync = batch // 32
    roles[idx[:n_pf]] = "prefill"
    roles[idx[n_pf : n_pf + n_stop]] = "stopped"
    roles[idx[n_pf + n_stop : n_pf + n_stop + n_resync]] = "resync"
    return roles


def _tokens(rng, *shape):
    return rng.integers(*VOCAB, size=shape, dtype=np.int64)


def preprocess_state(batch, seed=0):
    """Draft + target state right after a target verify step (input of draft_model_preprocess)."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n_pf = int(np.sum(roles == "prefill"))
    chunk = min(128, max(8, PREFILL_TOKEN_BUDGET // max(n_pf, 1)))

    s = dict(
        draft_tokens=np.full((batch, K + 1), -1, np.int64),
        input_ids=_tokens(rng, batch, L),
        stop_flags=np.zeros((batch, 1), bool),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        step_idx=np.zeros((batch, 1), np.int64),
        not_need_stop=np.zeros(1, bool),
        is_block_step=np.zeros((batch, 1), bool),
        batch_drop=np.zeros((batch, 1), bool),
        pre_ids=np.full((batch, L), -1, np.int64),
        mask_rollback=np.zeros((batch, 1), np.int32),
        recompute_token_num=np.full((batch, 1), NUM_MODEL_STEP - 1, np.int32),
        accept_tokens=_tokens(rng, batch, K + 1),
        accept_num=np.zeros(batch, np.int32),
        base_model_seq_lens_this_time=np.zeros((batch, 1), np.int32),
        base_model_seq_lens_encoder=np.zeros((batch, 1), np.int32),
        base_model_seq_lens_decoder=np.zeros((batch, 1), np.int32),
        base_model_step_idx=np.zeros((batch, 1), np.int64),
        base_model_stop_flags=np.zeros((batch, 1), bool),
        base_model_is_block_step=np.zeros(batch, bool),
        base_model_draft_tokens=_tokens(rng, batch, K + 1),
    )
    for b, role in enumerate(roles):
        prompt = int(rng.integers(64, 512))
        gen = int(rng.integers(K + 2, L - prompt - 4 * (K + 1) - 8))  # tokens generated so far
        if role == "prefill":
            enc = int(rng.integers(max(1, chunk // 2), chunk + 1))
            s["seq_lens_encoder"][b] = enc
            s["seq_lens_this_time"][b] = enc
            s["base_model_seq_lens_this_time"][b] = enc
            s["base_model_seq_lens_decoder"][b] = enc
            s["base_model_step_idx"][b] = 1
            s["accept_num"][b] = 1
        elif role == "stopped":
            s["stop_flags"][b] = True
            s["base_model_stop_flags"][b] = True
        else:  # decode / resync: the target verified K + 1 tokens and accepted a of them
            a = int(rng.integers(1, K + 2))
            s["accept_num"][b] = a
            s["base_model_seq_lens_this_time"][b] = K + 1
            s["base_model_seq_lens_decoder"][b] = prompt + gen + a
            s["base_model_step_idx"][b] = gen + a
            s["seq_lens_decoder"][b] = prompt + gen - 1
            s["step_idx"][b] = gen - 1
            s["seq_lens_this_time"][b] = 1
            s["pre_ids"][b, :gen] = _tokens(rng, gen)
            if role == "resync":
                s["stop_flags"][b] = True
                s["seq_lens_this_time"][b] = 0
    return s, roles


def build_preprocess(batch, variant=0):
    s, _ = preprocess_state(batch, _seed(0, variant))
    names = list(s) + [
        "num_model_step",
        "truncate_first_token",
        "splitwise_prefill",
        "kvcache_scheduler_v1",
    ]
    args = list(s.values()) + [NUM_MODEL_STEP, True, False, True]
    written = [
        "draft_tokens",
        "input_ids",
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "not_need_stop",
        "is_block_step",
        "batch_drop",
        "pre_ids",
        "mask_rollback",
        "recompute_token_num",
        "base_model_draft_tokens",
    ]
    return Case(
        args,
        names,
        written,
        f"K={K};L={L};num_model_step={NUM_MODEL_STEP};v1=1;mix=dec/pf/stop/resync",
    )


def _after_preprocess(batch, variant=0):
    s, roles = preprocess_state(batch, _seed(0, variant))
    c = {k: v.copy() for k, v in s.items()}
    ref.draft_model_preprocess(*c.values(), NUM_MODEL_STEP, True, False, True)
    return c, roles


def _bf16_bits(rng, rows, hidden=H):
    """[rows, hidden] random bfloat16 values as their uint16 bit patterns (finite, |x| < 4)."""
    f = rng.standard_normal((rows, hidden), dtype=np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def _hidden_rows(rng, rows, hidden=H, dtype="bfloat16"):
    """[rows, hidden] random hidden states in ``dtype`` ("bfloat16": uint16 bit patterns)."""
    if dtype == "bfloat16":
        return _bf16_bits(rng, rows, hidden)
    return rng.standard_normal((rows, hidden), dtype=np.float32).astype(dtype)


def as_dtype(values, dtype):
    """float32 ``values`` in ``dtype``; "bfloat16": uint16 bit patterns, rounded to nearest even."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "bfloat16":
        u = values.view(np.uint32)
        return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def build_eagle_hidden(batch, hidden=H, dtype="bfloat16", variant=0):
    c, _ = _after_preprocess(batch, variant)
    enc = c["seq_lens_encoder"].ravel()
    base_this_time = c["base_model_seq_lens_this_time"].ravel()
    t_in = int(sum(int(enc[b]) if enc[b] > 0 else int(base_this_time[b]) for b in range(batch)))
    x = _hidden_rows(np.random.default_rng(_seed(1, variant)), t_in, hidden, dtype)
    names = _positional("eagle_get_hidden_states")
    args = [
        x,
        c["seq_lens_this_time"],
        c["seq_lens_encoder"],
        c["seq_lens_decoder"],
        c["stop_flags"],
        c["accept_num"],
        c["base_model_seq_lens_this_time"],
        c["base_model_seq_lens_encoder"],
        1,
    ]
    return Case(args, names, [], f"K={K};H={hidden};dtype={dtype};Tin={t_in}", returns=True)


def _update_args(batch, variant=0):
    """draft_model_update's args for substep 0 after preprocess (numpy), and the names."""
    c, roles = _after_preprocess(batch, variant)
    rng = np.random.default_rng(_seed(2, variant))
    this_time, enc = c["seq_lens_this_time"].ravel(), c["seq_lens_encoder"].ravel()
    stop = c["stop_flags"].ravel()
    # Output rows per request after rebuild_padding: 1 per prefill, q per decode, 0 when stopped.
    out_lens = [0 if stop[b] else (1 if enc[b] > 0 else int(this_time[b])) for b in range(batch)]
    offsets = np.concatenate([[0], np.cumsum([L - o for o in out_lens])[:-1]]).astype(np.int32)
    next_tokens = _tokens(rng, sum(out_lens))
    max_dec_len = np.full((batch, 1), L - 2 * (K + 1), np.int64)
    if batch > 1:  # a few requests propose EOS, a few reach max_dec_len this substep
        # (max_dec_len only on decodes: a prefill chunk would write end_ids[0] at column q - 1.)
        first_row = np.concatenate([[0], np.cumsum(out_lens)[:-1]])
        running = np.flatnonzero(~stop)
        decoding = np.flatnonzero(~stop & (enc == 0))
        for b in running[: max(1, len(running) // 50)]:
            next_tokens[first_row[b] + out_lens[b] - 1] = EOS_IDS[1]
        for b in decoding[-max(1, len(decoding) // 50) :]:
            max_dec_len[b] = int(c["step_idx"][b, 0]) + 1
    names = _positional("draft_model_update")
    args = [
        next_tokens,
        c["draft_tokens"],
        c["pre_ids"],
        c["seq_lens_this_time"],
        c["seq_lens_encoder"],
        c["seq_lens_decoder"],
        c["step_idx"],
        offsets.reshape(-1, 1),
        c["stop_flags"],
        c["not_need_stop"],
        max_dec_len,
        np.array(EOS_IDS, np.int64).reshape(-1, 1),
        c["base_model_draft_tokens"],
        L,
        0,
    ]
    return args, names


def build_update(batch, variant=0):
    args, names = _update_args(batch, variant)
    written = [
        "draft_tokens",
        "pre_ids",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "stop_flags",
        "not_need_stop",
        "base_model_draft_tokens",
    ]
    return Case(
        args, names, written, f"K={K};L={L};substep=0", kwargs={"prefill_one_step_stop": False}
    )


def build_self_hidden(batch, hidden=H, dtype="bfloat16", variant=0):
    args, names = _update_args(batch, variant)
    a = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in zip(names, args)}
    last = a["seq_lens_this_time"].copy()
    ref.draft_model_update(*a.values(), prefill_one_step_stop=False)
    this_time, step = a["seq_lens_this_time"].ravel(), a["step_idx"].ravel()
    q_last = last.ravel()
    t_in = 0  # rows of the substep's output consumed by the walk of spec §6.4
    for b in range(batch):
        if step[b] == 1:
            t_in += 1 if (this_time[b] > 0 or q_last[b] > 0) else 0
        else:
            t_in += int(q_last[b])
    x = _hidden_rows(np.random.default_rng(_seed(3, variant)), t_in, hidden, dtype)
    return Case(
        [x, last, a["seq_lens_this_time"], a["step_idx"]],
        ["input", "last_seq_lens_this_time", "seq_lens_this_time", "step_idx"],
        [],
        f"K={K};H={hidden};dtype={dtype};Tin={t_in}",
        returns=True,
    )


def build_draft_set_value(batch):
    """draft_model_set_value_by_flags: decodes carry 1..K+1 tokens at step_idx in [K+1, L-1);
    ~1/16 are on their first step (step_idx 1), ~1/10 stopped, ~1/20 idle."""
    rng = np.random.default_rng(69)
    this_time = rng.integers(1, K + 2, batch).astype(np.int32)
    step = rng.integers(K + 1, L - 1, batch).astype(np.int64)
    step[rng.random(batch) < 1 / 16] = 1
    this_time[rng.random(batch) < 1 / 20] = 0
    stop = rng.random(batch) < 0.1
    return Case(
        [
            _tokens(rng, batch, K + 1),
            np.full((batch, L), -1, np.int64),
            stop.reshape(-1, 1),
            this_time.reshape(-1, 1),
            np.zeros((batch, 1), np.int32),
            np.zeros((batch, 1), np.int32),
            step.reshape(-1, 1),
        ],
        _positional("draft_model_set_value_by_flags"),
        ["pre_ids_all", "seq_lens_this_time"],
        f"K={K};L={L}",
    )


def build_postprocess(batch, variant=0):
    s, roles = preprocess_state(batch, _seed(0, variant))
    rng = np.random.default_rng(_seed(4, variant))
    drafts = _tokens(rng, batch, K + 1)
    # After K substeps: some rows stopped early (trailing -1), a few have an inner -1.
    for b in range(batch):
        cut = int(rng.integers(1, K + 2))
        drafts[b, cut:] = -1
    enc = (
        np.where(roles == "prefill", s["seq_lens_encoder"].ravel(), 0)
        .astype(np.int32)
        .reshape(-1, 1)
    )
    stop = (roles == "stopped").reshape(-1, 1)
    this_time = s["base_model_seq_lens_this_time"].copy()
    return Case(
        [drafts, this_time, enc, stop],
        [
            "base_model_draft_tokens",
            "base_model_seq_lens_this_time",
            "base_model_seq_lens_encoder",
            "base_model_stop_flags",
        ],
        ["base_model_seq_lens_this_time"],
        f"K={K}",
    )


def build_mtp_step(batch, variant=0):
    """v0 block manager: NB = L / BLOCK_SIZE slots per request; each request holds the blocks of
    its positions (encoder blocks, then decode blocks); ~1/16 cross a block boundary this step;
    ~5% were just stopped by the target and give their decode blocks back; the free list has
    room for every block and more free blocks than needed (no preemption)."""
    rng = np.random.default_rng(_seed(5, variant))
    nb = L // BLOCK_SIZE
    base_stop = np.zeros((batch, 1), bool)
    if batch > 1:
        base_stop[rng.permutation(batch)[: max(1, batch // 20)]] = True
    dec = np.zeros((batch, 1), np.int32)
    tables = np.full((batch, nb), -1, np.int32)
    enc_blocks = np.zeros(batch, np.int32)
    used = np.zeros(batch, np.int32)
    next_id = 0
    for b in range(batch):
        prompt = int(rng.integers(64, 512))
        d = int(rng.integers(prompt + 1, L - 2 * BLOCK_SIZE))
        dec[b] = d
        e = -(-prompt // BLOCK_SIZE)
        held = -(-d // BLOCK_SIZE)
        tables[b, :held] = np.arange(next_id, next_id + held)
        next_id += held
        enc_blocks[b] = e
        used[b] = held - e
    n_free = 2 * batch + 8
    free_list = np.zeros(next_id + n_free, np.int32)
    free_list[:n_free] = np.arange(next_id, next_id + n_free)
    names = _positional("mtp_step_paddle")
    args = [
        base_stop,
        base_stop.copy(),
        np.zeros((batch, 1), bool),
        np.where(base_stop, 0, K + 1).astype(np.int32),
        np.zeros((batch, 1), np.int32),
        dec,
        tables,
        enc_blocks,
        used,
        free_list,
        np.array([n_free], np.int32),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "batch_drop",
        "seq_lens_this_time",
        "seq_lens_decoder",
        "block_tables",
        "encoder_block_lens",
        "used_list_len",
        "free_list",
        "free_list_len",
    ]
    return Case(args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};free={n_free}")


# ------------------------------------------------------------------------------------------------
# Target-side update ops (spec §5.8, §5.10, §5.12, §5.16): the state right after speculate_verify.
# ------------------------------------------------------------------------------------------------
NUM_STOP_SEQS, STOP_SEQ_LEN = 5, 8


def target_state(batch, seed=6):
    """Target share_inputs after verify: decodes verified K + 1 tokens and accepted a of them,
    prefills got their first token, ~10% of the slots are stopped, ~3% block-stepped."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    s = dict(
        accept_tokens=_tokens(rng, batch, K + 1),
        accept_num=np.zeros(batch, np.int32),
        pre_ids=np.full((batch, L), -1, np.int64),
        step_idx=np.zeros((batch, 1), np.int64),
        stop_flags=np.zeros((batch, 1), bool),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        draft_tokens=_tokens(rng, batch, K + 1),
        actual_draft_token_nums=np.full(batch, K, np.int32),
        is_block_step=np.zeros(batch, bool),
        mask_rollback=np.zeros((batch, 1), np.int32),
    )
    for b, role in enumerate(roles):
        prompt = int(rng.integers(64, 512))
        gen = int(rng.integers(K + 2, L - prompt - 4 * (K + 1) - 8))
        if role == "prefill":
            chunk = int(rng.integers(16, 128))
            s["seq_lens_encoder"][b] = s["seq_lens_this_time"][b] = chunk
            s["accept_num"][b], s["step_idx"][b] = 1, 1
        elif role == "stopped":
            s["stop_flags"][b] = True
        else:
            a = int(rng.integers(1, K + 2))
            s["accept_num"][b] = a
            s["seq_lens_this_time"][b] = K + 1
            s["seq_lens_decoder"][b] = prompt + gen - 1
            s["step_idx"][b] = gen + a
            s["pre_ids"][b, 1 : gen + 1] = _tokens(rng, gen)
            s["is_block_step"][b] = batch > 1 and rng.random() < 0.03
    return s, roles


def build_set_stop_value(batch):
    """Five stop sequences of length 1..8 per request; ~1/20 of the decodes hit one (planted to end
    inside this step's accepted tokens, spanning pre_ids)."""
    s, roles = target_state(batch)
    rng = np.random.default_rng(7)
    seqs = _tokens(rng, batch, NUM_STOP_SEQS, STOP_SEQ_LEN)
    lens = rng.integers(1, STOP_SEQ_LEN + 1, (batch, NUM_STOP_SEQS)).astype(np.int32)
    for b in np.flatnonzero(roles == "decode")[::20]:
        a, t = int(s["accept_num"][b]), int(s["step_idx"][b, 0])
        idx = a - 1  # the sequence ends at accept_tokens[a - 2] or, for a == 1, at pre_ids[t - 1]
        history = list(s["pre_ids"][b, 1 : t - a + 1]) + list(s["accept_tokens"][b, :idx])
        n = lens[b, 0] = min(int(lens[b, 0]), len(history))
        seqs[b, 0, :n] = history[-n:]
    names = _positional("speculate_set_stop_value_multi_seqs")
    args = [
        s["accept_tokens"],
        s["accept_num"],
        s["pre_ids"],
        s["step_idx"],
        s["stop_flags"],
        s["seq_lens_this_time"],
        seqs,
        lens,
        np.array(EOS_IDS, np.int64),
    ]
    return Case(
        args,
        names,
        ["accept_tokens", "accept_num", "stop_flags"],
        f"K={K};L={L};S={NUM_STOP_SEQS};Ls={STOP_SEQ_LEN}",
    )


def build_speculate_update(batch, variant=0):
    s, _ = target_state(batch, _seed(6, variant))
    names = _positional("speculate_update")
    s["not_need_stop"] = np.zeros(1, bool)
    s["stop_nums"] = np.array([batch], np.int64)
    written = [
        "seq_lens_encoder",
        "seq_lens_decoder",
        "not_need_stop",
        "draft_tokens",
        "actual_draft_token_nums",
        "mask_rollback",
    ]
    return Case([s[n] for n in names], names, written, f"K={K};real_bsz=max_bsz")


def build_set_value(batch, variant=0):
    s, _ = target_state(batch, _seed(6, variant))
    s["seq_lens_decoder"][s["seq_lens_encoder"] > 0] = (
        0  # after speculate_update: enc moved into dec
    )
    s["seq_lens_decoder"] += s["seq_lens_encoder"]
    s["seq_lens_encoder"][:] = 0
    names = _positional("speculate_set_value_by_flags_and_idx")
    s["pre_ids_all"] = s["pre_ids"]
    return Case(
        [s[n] for n in names],
        names,
        ["pre_ids_all", "accept_num", "seq_lens_decoder"],
        f"K={K};L={L}",
    )


def build_clear_accept_nums(batch):
    s, _ = target_state(batch)
    dec = np.where(s["stop_flags"], 0, s["seq_lens_decoder"]).astype(np.int32)
    return Case(
        [s["accept_num"], dec], ["accept_num", "seq_lens_decoder"], ["accept_num"], f"K={K}"
    )


def build_calcu_accept_ratio(batch):
    """After speculate_update: running decodes verified K + 1 tokens and emitted accept_num;
    ~10% of the slots stopped; totals far from int32's limit."""
    s, _ = target_state(batch)
    return Case(
        [
            np.array([1_000_000], np.int32),
            np.array([700_000], np.int32),
            s["accept_num"],
            s["seq_lens_this_time"],
            s["seq_lens_decoder"],
            s["stop_flags"],
        ],
        _positional("speculate_calcu_accept_ratio"),
        ["sum_draft_num", "sum_accept_num"],
        f"K={K}",
    )


def build_limit_thinking(batch):
    """After verify, a reasoning model: ~1/2 of the running requests think (budget 512, some
    reach it this step), ~1/4 reply (budget 256), the rest have no budgets; think_end_id and EOS
    tokens appear in a few rows; two injection tokens."""
    s, _ = target_state(batch)
    rng = np.random.default_rng(59)
    tokens = s["accept_tokens"].copy()
    tokens[rng.random(tokens.shape) < 0.02] = THINK_END_ID
    tokens[rng.random(tokens.shape) < 0.01] = EOS_IDS[0]
    phase = rng.random(batch)
    think = np.where(phase < 0.5, 512, -1).astype(np.int32)
    reply = np.where((phase >= 0.5) & (phase < 0.75), 256, -1).astype(np.int32)
    status = np.where(phase < 0.5, 0, 4).astype(np.int32)  # 4 = reply_base with 2 injection ids
    status += np.where(status > 0, rng.integers(0, 300, batch), 0).astype(np.int32)
    step = s["step_idx"].copy()
    near = (phase < 0.5) & (rng.random(batch) < 0.1)
    step[near, 0] = 512 + 1 + rng.integers(0, K + 1, int(near.sum()))  # reach the budget now
    return Case(
        [
            tokens,
            think,
            reply,
            step,
            status,
            s["accept_num"],
            s["stop_flags"],
            np.array(EOS_IDS, np.int64),
            np.array([THINK_END_ID + 1, THINK_END_ID + 2], np.int64),
            THINK_END_ID,
            False,
        ],
        _positional("speculate_limit_thinking_content_length"),
        ["next_tokens", "max_reply_lens", "step_idx", "limit_status", "accept_num"],
        f"K={K};think=512;reply=256;inject=2",
    )


def build_update_input_ids(batch):
    """A prompt of up to 512 tokens copied into slot batch - 1 of input_ids_cpu [batch, L]."""
    rng = np.random.default_rng(7)
    prompt = _tokens(rng, int(rng.integers(64, 512))).tolist()
    return Case(
        [np.zeros((batch, L), np.int64), prompt, batch - 1, L],
        _positional("speculate_update_input_ids_cpu"),
        ["input_ids_cpu"],
        f"L={L};prompt={len(prompt)}",
    )


def _decode_rows(batch, rng, nb):
    """Per request: prompt length, decoder length and a block-table row holding the blocks of
    its positions (prompt blocks first); block ids are unique across the batch."""
    prompt = rng.integers(64, 512, batch)
    dec = np.array([int(rng.integers(p + 1, L - 2 * BLOCK_SIZE)) for p in prompt], np.int32)
    tables = np.full((batch, nb), -1, np.int32)
    enc_blocks = (-(-prompt // BLOCK_SIZE)).astype(np.int32)
    next_id = 0
    for b in range(batch):
        held = -(-int(dec[b]) // BLOCK_SIZE)
        tables[b, :held] = np.arange(next_id, next_id + held)
        next_id += held
    return prompt.astype(np.int64), dec, tables, enc_blocks, next_id


def build_schedule_cache(batch):
    """v1, after the proposer: decoding requests hold the blocks of their positions; ~1/16 reach
    a missing slot (dec + 2K + 2) // block_size and block-step; ~1/20 are stopped; ~1/32 are
    unfinished chunked prefills (dec < prompt_lens) and are stopped."""
    rng = np.random.default_rng(6)
    nb = L // BLOCK_SIZE + 2
    prompt, dec, tables, _, _ = _decode_rows(batch, rng, nb)
    for b in range(batch):
        slot = (int(dec[b]) + 2 * K + 2) // BLOCK_SIZE
        if rng.random() < 1 / 16:
            tables[b, slot:] = -1
        elif slot < nb:
            tables[b, slot] = 10**6 + b  # granted ahead (the scheduler preallocates)
    stop = rng.random(batch) < 1 / 20
    chunk = rng.random(batch) < 1 / 32
    prompt_lens = np.where(chunk, dec.astype(np.int64) + 64, prompt)
    names = _positional("speculate_schedule_cache")
    args = [
        _tokens(rng, batch, K + 1),
        tables,
        stop.reshape(-1, 1),
        prompt_lens.reshape(-1, 1),
        np.where(stop, 0, K + 1).astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        dec.reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.zeros((batch, K + 1), np.int64),
        np.zeros((batch, 1), np.int32),
        rng.integers(1, K + 2, batch).astype(np.int32),
        _tokens(rng, batch, K + 1),
        np.zeros(batch, bool),
        np.zeros(1, bool),
        np.array([batch], np.int64),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_seq_lens_decoder",
        "step_draft_tokens",
        "step_seq_lens_this_time",
        "accept_num",
        "accept_tokens",
        "is_block_step",
        "not_need_stop",
    ]
    return Case(
        args,
        names,
        written,
        f"K={K};block_size={BLOCK_SIZE};NB={nb};v1=1",
        kwargs={"prefill_one_step_stop": False},
    )


def build_recover_decode(batch):
    """v1, start of a step: ~1/8 of the requests are block-stepped; half of those have been
    granted their block and resume with their parked lengths and draft row."""
    rng = np.random.default_rng(7)
    nb = L // BLOCK_SIZE + 2
    _, dec, tables, _, _ = _decode_rows(batch, rng, nb)
    parked = rng.random(batch) < 1 / 8
    for b in np.flatnonzero(parked):
        slot = (int(dec[b]) + 2 * K + 1) // BLOCK_SIZE
        tables[b, slot:] = -1
        if rng.random() < 0.5 and slot < nb:
            tables[b, slot] = 10**6 + b
    names = _positional("recover_decode_task")
    args = [
        parked.reshape(-1, 1),
        np.where(parked, 0, K + 1).astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.where(parked, 0, dec).astype(np.int32).reshape(-1, 1),
        np.where(parked, dec, 0).astype(np.int32).reshape(-1, 1),
        tables,
        parked.copy(),
        np.full((batch, K + 1), -1, np.int64),
        _tokens(rng, batch, K + 1),
        np.where(parked, K + 1, 0).astype(np.int32).reshape(-1, 1),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "is_block_step",
        "draft_tokens",
    ]
    return Case(args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};parked=1/8")


def build_speculate_step(batch):
    """v0 target block manager: requests hold the blocks of their positions (prompt blocks, then
    decode blocks); ~1/16 cross a block boundary and need one; ~5% finished and give their decode
    blocks back; ~2% are parked on step_block_list (decode blocks already returned) and the last
    one recovers with a re-prefill (prompt + step_idx generated tokens copied from pre_ids); the
    free list has more blocks than needed (no preemption)."""
    rng = np.random.default_rng(8)
    nb = L // BLOCK_SIZE + 2
    prompt, dec, tables, enc_blocks, next_id = _decode_rows(batch, rng, nb)
    used = np.array(
        [int((tables[b] != -1).sum()) - int(enc_blocks[b]) for b in range(batch)], np.int32
    )
    finished = np.zeros(batch, bool)
    parked = np.zeros(batch, bool)
    if batch > 1:
        idx = rng.permutation(batch)
        finished[idx[: max(1, batch // 20)]] = True
        parked[idx[max(1, batch // 20) : max(1, batch // 20) + max(1, batch // 50)]] = True
    for b in np.flatnonzero(parked):
        tables[b, enc_blocks[b] :] = -1  # decode blocks went back when it was preempted
    step_idx = (dec.astype(np.int64) - prompt + 1).clip(min=0)
    n_free = 2 * batch + 8 + int(used.max(initial=0)) + 1
    free_list = np.zeros(next_id + n_free + 8, np.int32)
    free_list[:n_free] = np.arange(next_id, next_id + n_free)
    stack = np.full(batch, -1, np.int32)
    stack[: int(parked.sum())] = np.flatnonzero(parked)
    stop = finished | parked
    names = _positional("speculate_step_paddle")
    args = [
        stop.reshape(-1, 1),
        np.where(stop, 0, K + 1).astype(np.int32).reshape(-1, 1),
        prompt.astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.where(parked, 0, dec).astype(np.int32).reshape(-1, 1),
        tables,
        enc_blocks,
        parked.copy(),
        stack,
        np.array([int(parked.sum())], np.int32),
        np.full(batch, -1, np.int32),
        np.zeros(1, np.int32),
        np.full(batch, -1, np.int32),
        np.zeros(1, np.int32),
        used,
        free_list,
        np.array([n_free], np.int32),
        _tokens(rng, batch, L),
        _tokens(rng, batch, L),
        step_idx.reshape(-1, 1),
        np.full((batch, 1), -1, np.int64),
        _tokens(rng, batch),
        rng.integers(1, K + 2, batch).astype(np.int32),
        BLOCK_SIZE,
        2,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "block_tables",
        "encoder_block_lens",
        "is_block_step",
        "step_block_list",
        "step_lens",
        "recover_block_list",
        "recover_lens",
        "need_block_list",
        "need_block_len",
        "used_list_len",
        "free_list",
        "free_list_len",
        "input_ids",
        "first_token_ids",
        "accept_num",
    ]
    return Case(
        args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};L={L};free={n_free};recover=1"
    )


# Packing ops (spec §5.1-§5.4): one target step's layout. Prefill chunks share the chunked-prefill
# token budget, decodes verify K + 1 tokens, stopped slots have none.
# ------------------------------------------------------------------------------------------------
def packing_state(batch, seed=7):
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n_pf = int(np.sum(roles == "prefill"))
    chunk = min(512, max(8, PREFILL_TOKEN_BUDGET // max(n_pf, 1)))
    this_time = np.zeros((batch, 1), np.int32)
    enc = np.zeros((batch, 1), np.int32)
    dec = np.zeros((batch, 1), np.int32)
    for b, role in enumerate(roles):
        if role == "prefill":
            c = int(rng.integers(max(1, chunk // 2), chunk + 1))
            this_time[b] = enc[b] = c
            dec[b] = int(rng.integers(0, 4)) * chunk
        elif role != "stopped":  # decode / resync: verify the last token and K drafts
            this_time[b] = K + 1
            dec[b] = int(rng.integers(64, L - 4 * (K + 1)))
    return dict(
        input_ids=_tokens(rng, batch, L),
        draft_tokens=_tokens(rng, batch, K + 1),
        seq_lens_this_time=this_time,
        seq_lens_encoder=enc,
        seq_lens_decoder=dec,
    )


def _packing_config(s):
    t = int(s["seq_lens_this_time"].sum())
    return f"K={K};L={L};T={t};mix=dec/pf/stop"


def build_padding_offset(batch):
    s = packing_state(batch)
    q = s["seq_lens_this_time"]
    cum = np.cumsum(L - q.astype(np.int64)).astype(np.int32)
    names = _positional("speculate_get_padding_offset")
    args = [
        s["input_ids"],
        s["draft_tokens"],
        cum,
        np.array(int(q.sum()), np.int64),
        q,
        s["seq_lens_encoder"],
    ]
    return Case(args, names, [], _packing_config(s), returns=True)


def build_seq_lens_output(batch):
    s = packing_state(batch)
    names = ["seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"]
    return Case([s[n] for n in names], names, [], _packing_config(s), returns=True)


def build_output_padding_offset(batch):
    s = packing_state(batch)
    o = ref.speculate_get_seq_lens_output(
        s["seq_lens_this_time"], s["seq_lens_encoder"], s["seq_lens_decoder"]
    )
    tmp = np.cumsum(L - o.astype(np.int64)).astype(np.int32)
    names = ["output_cum_offsets_tmp", "out_token_num", "seq_lens_output", "max_seq_len"]
    return Case(
        [tmp, np.array(int(o.sum()), np.int64), o, L],
        names,
        [],
        f"L={L};To={int(o.sum())}",
        returns=True,
    )


def build_pre_process(batch, variant=0):
    s = packing_state(batch, _seed(7, variant))
    names = [
        "input_ids",
        "seq_lens_this_time",
        "speculative_decoding",
        "draft_tokens",
        "seq_lens_encoder",
        "seq_lens_decoder",
    ]
    args = [
        s["input_ids"],
        s["seq_lens_this_time"],
        True,
        s["draft_tokens"],
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
    ]
    return Case(args, names, [], _packing_config(s) + ";speculative=1", returns=True)


def build_rebuild_padding(batch, hidden=H, dtype="bfloat16", variant=0):
    s = packing_state(batch, _seed(7, variant))
    pre = ref.pre_process(
        s["input_ids"],
        s["seq_lens_this_time"],
        True,
        s["draft_tokens"],
        s["seq_lens_encoder"],
        s["seq_lens_decoder"],
    )
    cu_q, opo = pre[2], pre[5]
    tmp_out = _hidden_rows(np.random.default_rng(_seed(8, variant)), int(cu_q[-1]), hidden, dtype)
    names = _positional("rebuild_padding")
    args = [
        tmp_out,
        cu_q,
        s["seq_lens_this_time"],
        s["seq_lens_decoder"],
        s["seq_lens_encoder"],
        opo,
        None,
        L,
        False,
    ]
    return Case(
        args,
        names,
        [],
        f"H={hidden};dtype={dtype};T={tmp_out.shape[0]};R={opo.size};speculative=1",
        returns=True,
    )


def _sampling_rows(batch):
    """Every request verifies K + 1 tokens: T = batch * (K + 1) logits rows, offsets for L."""
    out_rows = [K + 1] * batch
    cum = np.concatenate([[0], np.cumsum([L - o for o in out_rows])[:-1]]).astype(np.int32)
    pad = np.repeat(cum, out_rows).astype(np.int32)
    return sum(out_rows), pad, cum


def build_penalty(batch, vocab, dtype="float32", variant=0):
    """Target penalties on T = batch * (K + 1) rows of ``dtype`` logits (the penalty, frequency and
    presence scores in ``dtype`` too, temperatures float32): pre_ids [batch, L] holds each
    request's generated tokens (index 0 = -1, 16..1600 tokens), ~1/8 of the requests are below
    their min length, 8 bad words, 2 EOS ids."""
    rng = np.random.default_rng(_seed(6, variant))
    rows, pad, cum = _sampling_rows(batch)
    pre_ids = np.full((batch, L), -1, np.int64)
    gen = rng.integers(16, 1600, batch)
    for b in range(batch):
        pre_ids[b, 1 : 1 + gen[b]] = rng.integers(0, vocab, gen[b])
    min_len = np.where(rng.random(batch) < 0.125, gen + K + 1, 1).astype(np.int64)
    per = lambda lo, hi: rng.uniform(lo, hi, (batch, 1)).astype(np.float32)  # noqa: E731
    cast = (lambda v: v) if dtype == "float32" else functools.partial(as_dtype, dtype=dtype)
    names = _positional("speculate_get_token_penalty_multi_scores")
    args = [
        pre_ids,
        cast(rng.standard_normal((rows, vocab), dtype=np.float32)),
        cast(per(1.0, 1.5)),
        cast(per(0.0, 0.5)),
        cast(per(0.0, 0.5)),
        per(0.5, 1.2),
        rng.integers(0, vocab, (1, 8)),
        gen.reshape(-1, 1).astype(np.int64),
        min_len.reshape(-1, 1),
        np.array(EOS_IDS, np.int64).reshape(-1, 1),
        np.full((batch, 1), K + 1, np.int32),
        pad,
        cum,
        L,
    ]
    return Case(args, names, ["logits"], f"V={vocab};T={rows};K={K};L={L};dtype={dtype}")


def build_top_p(batch, vocab, dtype="float32", candidates=CANDIDATES, variant=0):
    """top_p_candidates on T = batch * (K + 1) softmax rows (probabilities and top_p in
    ``dtype``), C = ``candidates``."""
    rng = np.random.default_rng(_seed(7, variant))
    rows, pad, _ = _sampling_rows(batch)
    probs = rng.standard_normal((rows, vocab), dtype=np.float32) * np.float32(3)
    probs -= probs.max(axis=1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= probs.sum(axis=1, keepdims=True)
    top_p = rng.choice(np.array([0.7, 0.8, 0.95, 1.0], np.float32), (batch, 1))
    if dtype != "float32":
        probs, top_p = as_dtype(probs, dtype), as_dtype(top_p, dtype)
    return Case(
        [probs, top_p, pad, candidates, L],
        ["probs", "top_p", "output_padding_offset", "candidates_len", "max_seq_len"],
        [],
        f"V={vocab};T={rows};C={candidates};K={K};dtype={dtype}",
        returns=True,
    )


VERIFY_C = 5  # max_candidate_len of top_p_candidates
VERIFY_V = 100_000  # vocabulary of the candidate ids (topp strategy)


def _verify_state(batch, vocab, seed=6):
    """speculate_verify's inputs after a target forward: decodes verify K + 1 tokens (K drafts, 60%
    equal to the top candidate of their row, 10% to the second), prefills one row, stopped
    requests none; a few requests reach max_dec_len or meet an end token this step."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n = np.where(roles == "prefill", rng.integers(16, 128, batch), K + 1).astype(np.int32)
    outs = np.select([roles == "stopped", roles == "prefill"], [0, 1], K + 1)
    T = int(outs.sum())
    first = np.concatenate([[0], np.cumsum(outs)[:-1]])
    cands = rng.integers(3, vocab, (T, VERIFY_C), dtype=np.int64)
    scores = np.sort(rng.random((T, VERIFY_C), dtype=np.float32), axis=1)[:, ::-1]
    scores = (scores / scores.sum(1, keepdims=True)).astype(np.float32)
    draft = rng.integers(3, vocab, (batch, K + 1), dtype=np.int64)
    for b in np.flatnonzero(roles != "stopped"):
        for k in range(1, K + 1):
            u = rng.random()
            if roles[b] != "prefill" and u < 0.6:
                draft[b, k] = cands[first[b] + k - 1, 0]
            elif roles[b] != "prefill" and u < 0.7:
                draft[b, k] = cands[first[b] + k - 1, 1]
    step = rng.integers(10, 1000, batch).astype(np.int64)
    max_dec = np.full(batch, L, np.int64)
    some = rng.permutation(batch)[: max(1, batch // 50)]
    max_dec[some] = step[some] + 2
    eos_rows = rng.permutation(T)[: max(1, T // 100)] if T else []
    cands[eos_rows, 0] = EOS_IDS[0]
    s = dict(
        sampled_token_ids=cands[:, :1].copy(),
        accept_tokens=np.zeros((batch, K + 1), np.int64),
        accept_num=np.zeros(batch, np.int32),
        step_idx=step.reshape(-1, 1),
        stop_flags=(roles == "stopped").reshape(-1, 1),
        seq_lens_encoder=np.where(roles == "prefill", n, 0).astype(np.int32).reshape(-1, 1),
        seq_lens_decoder=rng.integers(64, 1024, (batch, 1)).astype(np.int32),
        draft_tokens=draft,
        seq_lens_this_time=np.where(roles == "stopped", 0, n).astype(np.int32).reshape(-1, 1),
        verify_tokens=cands,
        verify_scores=np.ascontiguousarray(scores),
        max_dec_len=max_dec.reshape(-1, 1),
        end_tokens=np.array(EOS_IDS, np.int64).reshape(-1, 1),
        is_block_step=np.zeros(batch, bool),
        output_cum_offsets=np.concatenate([[0], np.cumsum(L - outs)[:-1]])
        .astype(np.int32)
        .reshape(-1, 1),
        actual_candidate_len=rng.integers(1, VERIFY_C + 1, T).astype(np.int32),
        actual_draft_token_nums=np.full(batch, K, np.int32),
        topp=rng.uniform(0.5, 1.0, (batch, 1)).astype(np.float32),
    )
    return s, T


VERIFY_WRITTEN = ["accept_tokens", "accept_num", "step_idx", "stop_flags"]


def build_verify(batch, variant=0):
    s, T = _verify_state(batch, VERIFY_V, _seed(6, variant))
    names = list(s) + [
        "max_seq_len",
        "verify_window",
        "enable_topp",
        "benchmark_mode",
        "accept_all_drafts",
    ]
    args = list(s.values()) + [L, 2, True, False, False]
    kwargs = dict(verify_strategy="topp", seed=1, offset=2, prefill_one_step_stop=False)
    return Case(
        args, names, VERIFY_WRITTEN, f"strategy=topp;K={K};C={VERIFY_C};T={T}", kwargs=kwargs
    )


def build_verify_rejection(batch, vocab, draft_probs=False):
    """Greedy drafter (draft_probs None; ``draft_probs=True``: a sampling drafter whose rows put 0.5
    of the mass on the drafted token, the rest uniform); target rows: 0.6 of the mass on the row's
    top candidate, 0.3 spread over the other candidates, 0.1 uniform over the vocabulary."""
    s, T = _verify_state(batch, vocab, seed=7)
    rng = np.random.default_rng(8)
    probs = np.full((T, vocab), 0.1 / vocab, np.float32)
    rows = np.arange(T)
    probs[rows, s["verify_tokens"][:, 0]] += 0.6
    for c in range(1, VERIFY_C):
        probs[rows, s["verify_tokens"][:, c]] += np.float32(0.3 / (VERIFY_C - 1))
    probs *= rng.uniform(0.98, 1.02, (T, 1)).astype(np.float32)
    names = list(s) + [
        "max_seq_len",
        "verify_window",
        "enable_topp",
        "benchmark_mode",
        "accept_all_drafts",
    ]
    args = list(s.values()) + [L, 2, True, False, False]
    kwargs = dict(
        verify_strategy="rejection",
        seed=1,
        offset=2,
        prefill_one_step_stop=False,
        target_probs=probs,
    )
    if draft_probs:
        q = np.full((T, vocab), 0.5 / vocab, np.float32)
        # output rows: K + 1 per decode, 1 per prefill, none when stopped; draft_tokens[b, k] was
        # drafted from row first[b] + k - 1
        enc, stop = s["seq_lens_encoder"].ravel(), s["stop_flags"].ravel()
        outs = np.where(stop, 0, np.where(enc > 0, 1, K + 1))
        first = np.concatenate([[0], np.cumsum(outs)[:-1]])
        for b in np.flatnonzero(outs == K + 1):
            q[first[b] + np.arange(K), s["draft_tokens"][b, 1:]] += np.float32(0.5)
        kwargs["draft_probs"] = q * rng.uniform(0.98, 1.02, (T, 1)).astype(np.float32)
    return Case(
        args,
        names,
        VERIFY_WRITTEN,
        f"strategy=rejection;K={K};V={vocab};T={T};drafter={'sampling' if draft_probs else 'greedy'}",
        kwargs=kwargs,
    )


BUILDERS = {
    "speculate_verify": build_verify,
    "speculate_verify[rejection,V=32000]": functools.partial(build_verify_rejection, vocab=32_000),
    "speculate_verify[rejection,V=100000]": functools.partial(
        build_verify_rejection, vocab=100_000
    ),
    "draft_model_preprocess": build_preprocess,
    "eagle_get_hidden_states": build_eagle_hidden,
    "draft_model_update": build_update,
    "eagle_get_self_hidden_states": build_self_hidden,
    "draft_model_postprocess": build_postprocess,
    "mtp_step_paddle": build_mtp_step,
    "speculate_set_stop_value_multi_seqs": build_set_stop_value,
    "speculate_update": build_speculate_update,
    "speculate_set_value_by_flags_and_idx": build_set_value,
    "speculate_clear_accept_nums": build_clear_accept_nums,
    "speculate_calcu_accept_ratio": build_calcu_accept_ratio,
    "draft_model_set_value_by_flags": build_draft_set_value,
    "speculate_limit_thinking_content_length": build_limit_thinking,
    "speculate_update_input_ids_cpu": build_update_input_ids,
    "speculate_schedule_cache": build_schedule_cache,
    "recover_decode_task": build_recover_decode,
    "speculate_step_paddle": build_speculate_step,
    "speculate_get_padding_offset": build_padding_offset,
    "speculate_get_seq_lens_output": build_seq_lens_output,
    "speculate_get_output_padding_offset": build_output_padding_offset,
    "pre_process": build_pre_process,
    "rebuild_padding": build_rebuild_padding,
    **{
        f"speculate_get_token_penalty_multi_scores[V={v}]": functools.partial(
            build_penalty, vocab=v
        )
        for v in SAMPLING_VOCABS
    },
    **{
        f"top_p_candidates[V={v}]": functools.partial(build_top_p, vocab=v) for v in SAMPLING_VOCABS
    },
}
# Row buffers not restored between calls: their writes are the same each call (see module doc).
STEADY_BUFFERS = {"input_ids", "pre_ids", "pre_ids_all"}


# n-gram drafting (ngram_match, hybrid_mtp_ngram)
NGRAM_VOCAB = 32_000
NGRAM_K = 5
NGRAM_MAX, NGRAM_MIN = 5, 2
NGRAM_THRESHOLD = 1 << 30
NGRAM_PLANT = 0.5

NGRAM_ORDER = [
    "input_ids",
    "input_ids_len",
    "pre_ids",
    "step_idx",
    "draft_token_num",
    "draft_tokens",
    "seq_lens_this_time",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "max_dec_len",
]
HYBRID_ORDER = [
    "input_ids",
    "input_ids_len",
    "pre_ids",
    "step_idx",
    "draft_token_num",
    "draft_tokens",
    "seq_lens_this_time",
    "seq_lens_decoder",
    "max_dec_len",
]
NGRAM_WRITTEN = ("draft_tokens", "seq_lens_this_time")


def ngram_state(op, batch, history, seed=0):
    """(arrays by name, positional size args, config string) of one n-gram drafting batch: every
    request decoding with ``history`` tokens, half with a planted repeat to find (benchmarks/bench_ngram.py)."""
    hybrid = op == "hybrid_mtp_ngram"
    rng = np.random.default_rng(seed + batch + history)
    prompt = history // 2
    generated = history - prompt
    input_ids = rng.integers(0, NGRAM_VOCAB, (batch, prompt), dtype=np.int64)
    pre_ids = rng.integers(0, NGRAM_VOCAB, (batch, generated + 1), dtype=np.int64)
    step = np.full(batch, generated, np.int64)  # pre_ids[.., step] is the newest token
    if not hybrid:
        pre_ids[:, 0] = -1  # target convention: slot 0 unused
    for b in np.flatnonzero(rng.random(batch) < NGRAM_PLANT):
        g = int(rng.integers(1, NGRAM_MAX + 1))
        if hybrid:
            g = max(g, NGRAM_MIN)
        piece = np.concatenate(
            [pre_ids[b, generated - g + 1 :], rng.integers(0, NGRAM_VOCAB, NGRAM_K)]
        )
        if rng.random() < 0.5:
            at = int(rng.integers(0, prompt - len(piece)))
            input_ids[b, at : at + len(piece)] = piece
        else:
            at = int(rng.integers(1, generated - g - len(piece)))
            pre_ids[b, at : at + len(piece)] = piece
    d = dict(
        input_ids=input_ids,
        input_ids_len=np.full(batch, prompt, np.int64),
        pre_ids=pre_ids,
        step_idx=step,
        draft_token_num=np.full(batch, NGRAM_K, np.int32),
        draft_tokens=np.full((batch, NGRAM_K + 1), -1, np.int64),
        seq_lens_this_time=np.full(batch, 2 if hybrid else 1, np.int32),
        seq_lens_encoder=np.zeros(batch, np.int32),
        seq_lens_decoder=np.full(batch, history, np.int32),
        max_dec_len=np.full(batch, 1 << 40, np.int64),
    )
    d["draft_tokens"][:, 0] = 7
    if hybrid:
        d["draft_tokens"][:, 1] = 8
        del d["seq_lens_encoder"]
        sizes = (NGRAM_MAX, NGRAM_MIN, NGRAM_K)
    else:
        sizes = (NGRAM_MAX, NGRAM_K)
    config = (
        f"H={history};prompt={prompt};generated={generated};K={NGRAM_K};"
        f"ngram={NGRAM_MIN if hybrid else 1}..{NGRAM_MAX};planted={NGRAM_PLANT};vocab={NGRAM_VOCAB};"
        f"threshold={NGRAM_THRESHOLD}"
    )
    return d, sizes, config


def build_ngram(batch, op="ngram_match", history=64):
    d, sizes, config = ngram_state(op, batch, history)
    order = HYBRID_ORDER if op == "hybrid_mtp_ngram" else NGRAM_ORDER
    size_names = (
        ["max_ngram_size", "min_ngram_size", "max_draft_tokens"]
        if op == "hybrid_mtp_ngram"
        else [
            "max_ngram_size",
            "max_draft_tokens",
        ]
    )
    return Case(
        [d[n] for n in order] + list(sizes),
        order + size_names,
        list(NGRAM_WRITTEN),
        config,
        kwargs={"threshold": NGRAM_THRESHOLD},
    )


BUILDERS["ngram_match"] = functools.partial(build_ngram, op="ngram_match")
BUILDERS["hybrid_mtp_ngram"] = functools.partial(build_ngram, op="hybrid_mtp_ngram")


# speculate_step_paddle's variants (spec §5.13): the same state as build_speculate_step.
def build_speculate_step_system_cache(batch):
    """build_speculate_step plus ori_seq_lens_decoder (the cached prefix each request would
    resume from: half its prompt); the parked request on top of the stack recovers."""
    case = build_speculate_step(batch)
    names = _positional("speculate_step_system_cache")
    prompt = case.args[case.names.index("ori_seq_lens_encoder")]
    args = list(case.args)
    args.insert(names.index("ori_seq_lens_decoder"), (prompt // 2).astype(np.int32))
    written = [case.names[i] for i in case.written]
    return Case(args, names, written, case.config + ";cached=prompt/2")


def build_speculate_step_reschedule(batch):
    """build_speculate_step's state for the reschedule variant: parked requests hold no decode
    blocks (used_list_len 0) and, being stopped, are freed like finished ones; no recovery."""
    case = build_speculate_step(batch)
    names = _positional("speculate_step_reschedule")
    args = list(case.args)
    parked = args[names.index("is_block_step")]
    used = args[names.index("used_list_len")].copy()
    used[parked] = 0
    args[names.index("used_list_len")] = used
    written = list(_written_args("speculate_step_reschedule"))
    return Case(args, names, written, case.config.replace(";recover=1", ";recover=0"))


BUILDERS["speculate_step_system_cache"] = build_speculate_step_system_cache
BUILDERS["speculate_step_reschedule"] = build_speculate_step_reschedule


# logprob helpers (speculate_logprob_utils: speculate_get_logits, speculate_insert_first_token,
# speculate_get_target_logits; spec §5.18)
def _logprob_layout(batch, seed):
    """(seq_lens_this_time, seq_lens_encoder, accept_num) of a step with logprobs: decodes verified
    K + 1 tokens and accepted 1..K + 1 of them, prefills (~1/4) feed a chunk and get one token,
    stopped slots run nothing."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    prefill = roles == "prefill"
    running = roles != "stopped"
    enc = np.where(prefill, rng.integers(16, 512, batch), 0).astype(np.int32)
    this_time = np.where(prefill, enc, np.where(running, K + 1, 0)).astype(np.int32)
    accept = np.where(prefill, 1, np.where(running, rng.integers(1, K + 2, batch), 0))
    return this_time, enc, accept.astype(np.int32)


def build_get_logits(batch, vocab=SAMPLING_VOCABS[0]):
    """The MTP head's first substep with draft logprobs: a decode's K + 1 rows are copied, a
    prefill's first-token row and its own row (cu offsets start at 0, as FastDeploy passes)."""
    rng = np.random.default_rng(71)
    this_time, enc, _ = _logprob_layout(batch, 71)
    n_next = np.where(enc > 0, 1, this_time)
    n_batch = np.where(enc > 0, 2, this_time)
    return Case(
        [
            np.zeros((int(n_batch.sum()), vocab), np.float32),
            np.zeros(batch, np.int32),
            np.zeros(batch, np.int32),
            np.zeros(batch + 1, np.int32),
            np.zeros(batch + 1, np.int32),
            rng.standard_normal((int(n_next.sum()), vocab)).astype(np.float32),
            rng.standard_normal((batch, vocab)).astype(np.float32),
            this_time,
            enc,
        ],
        _positional("speculate_get_logits"),
        [
            "draft_logits",
            "next_token_num",
            "batch_token_num",
            "cu_next_token_offset",
            "cu_batch_token_offset",
        ],
        f"K={K};V={vocab}",
    )


def build_insert_first_token(batch):
    """Token ids matching build_get_logits' rows."""
    rng = np.random.default_rng(72)
    this_time, enc, _ = _logprob_layout(batch, 71)
    n_next = np.where(enc > 0, 1, this_time)
    n_batch = np.where(enc > 0, 2, this_time)
    return Case(
        [
            np.zeros(int(n_batch.sum()), np.int64),
            _tokens(rng, batch, K + 1),
            _tokens(rng, int(n_next.sum())),
            np.concatenate([[0], np.cumsum(n_next)]).astype(np.int32),
            np.concatenate([[0], np.cumsum(n_batch)]).astype(np.int32),
            this_time,
            enc,
        ],
        _positional("speculate_insert_first_token"),
        ["token_ids"],
        f"K={K}",
    )


def build_get_target_logits(batch, vocab=SAMPLING_VOCABS[0]):
    """The target's rows of the accepted tokens (FastDeploy's speculative sampler with logprobs):
    verified rows (1 per prefill, K + 1 per decode) -> accepted rows."""
    rng = np.random.default_rng(73)
    this_time, enc, accept = _logprob_layout(batch, 73)
    verified = np.where(enc > 0, 1, this_time)
    return Case(
        [
            np.zeros((int(accept.sum()), vocab), np.float32),
            rng.standard_normal((int(verified.sum()), vocab)).astype(np.float32),
            np.concatenate([[0], np.cumsum(accept)]).astype(np.int32),
            np.concatenate([[0], np.cumsum(verified)]).astype(np.int32),
            this_time,
            enc,
            accept,
        ],
        _positional("speculate_get_target_logits"),
        ["target_logits"],
        f"K={K};V={vocab}",
    )


BUILDERS.update(
    {
        f"speculate_get_logits[V={SAMPLING_VOCABS[0]}]": build_get_logits,
        "speculate_insert_first_token": build_insert_first_token,
        f"speculate_get_target_logits[V={SAMPLING_VOCABS[0]}]": build_get_target_logits,
    }
)
