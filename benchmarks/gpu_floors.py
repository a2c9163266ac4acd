"""The cases and bytes-moved floors of benchmarks/bench_gpu_ops.py, without a GPU (pure numpy): the
CUDA ops of fd_mtp.testing.op_inputs.BUILDERS plus the extra cases (the logits gathers at V = 100k,
paged_attention), built once per run (`build_case`); per op a model of the fewest bytes it must
read and write (`floor_bytes`, `FLOORS`); the floors table, printed and written as CSV."""

from __future__ import annotations

import functools

import numpy as np


def cuda_ops():
    """BUILDERS entries whose op has a CUDA kernel (host ops excluded), in BUILDERS' order."""
    from fd_mtp import schema
    from fd_mtp.testing.op_inputs import BUILDERS

    names = []
    for name in BUILDERS:
        op = schema.all_ops().get(name.split("[")[0])
        if op is None or op.cuda:  # pre_process is no schema op; it runs on the device
            names.append(name)
    return names


PAGED = dict(context=1024, q_heads=16, kv_heads=2, head_dim=128, block_size=64)


def build_paged_attention(batch, context=PAGED["context"], seed=11):
    """A target verification step of paged_attention: every request attends K + 1 new tokens
    after `context` cached positions (fd_mtp.model's layout: Hq = 16, Hkv = 2, D = 128, blocks of
    64 positions, each request's blocks distinct)."""
    from fd_mtp import schema
    from fd_mtp.testing.op_inputs import Case, K

    rng = np.random.default_rng(seed)
    hq, hkv, dim, bs = (PAGED[k] for k in ("q_heads", "kv_heads", "head_dim", "block_size"))
    q_len = K + 1
    tokens = batch * q_len
    per_req = -(-(context + q_len) // bs)
    num_blocks = batch * per_req
    tables = rng.permutation(num_blocks).astype(np.int32).reshape(batch, per_req)
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    args = [
        f(tokens, hq, dim),
        f(tokens, hkv, dim),
        f(tokens, hkv, dim),
        f(num_blocks, hkv, bs, dim),
        f(num_blocks, hkv, bs, dim),
        tables,
        (np.arange(batch + 1) * q_len).astype(np.int32),
        np.repeat(np.arange(batch, dtype=np.int32), q_len),
        np.full(batch, context, np.int32),
    ]
    names = [t.name for t in schema.get("paged_attention").tensors]  # the op's argument order
    config = f"ctx={context};q_len={q_len};Hq={hq};Hkv={hkv};D={dim};block={bs};float32"
    return Case(args, names, ["key_cache", "value_cache"], config, returns=True)


def extra_builders():
    """Cases beyond op_inputs.BUILDERS: the logits gathers at V = 100k and paged_attention."""
    from fd_mtp.testing import op_inputs

    return {
        "speculate_get_logits[V=100000]": functools.partial(
            op_inputs.build_get_logits, vocab=100_000
        ),
        "speculate_get_target_logits[V=100000]": functools.partial(
            op_inputs.build_get_target_logits, vocab=100_000
        ),
        "paged_attention": build_paged_attention,
    }


def all_builders():
    from fd_mtp.testing.op_inputs import BUILDERS

    return {**BUILDERS, **extra_builders()}


_CASES = {}


def build_case(name, batch):
    """builders[name](batch), built once per run (the host-latency and device-time passes share
    it; the calls never write the numpy arrays: they run on device copies)."""
    key = (name, batch)
    if key not in _CASES:
        _CASES[key] = all_builders()[name](batch)
    return _CASES[key]


def _arg(case, name):
    return case.args[case.names.index(name)]


def _nbytes(a):
    return int(a.nbytes) if isinstance(a, np.ndarray) else 0


def _request_of_rows(pad, max_seq_len):
    return (np.arange(pad.size) + pad.astype(np.int64)) // max_seq_len


def floor_top_p(case):
    """Read every probs row once, the top_p / offset entries; write C scores, C tokens and the
    length per row."""
    probs, top_p, pad = (_arg(case, n) for n in ("probs", "top_p", "output_padding_offset"))
    rows = probs.shape[0]
    c = int(_arg(case, "candidates_len"))
    return _nbytes(probs) + _nbytes(top_p) + _nbytes(pad) + rows * (c * (probs.itemsize + 8) + 4)


def floor_penalty(case):
    """Read and write the rows whose request is in the batch, read each request's pre_ids up to
    the scan rule's stop (its non-negative prefix) and the per-request scalars."""
    logits, pre_ids, pad = (_arg(case, n) for n in ("logits", "pre_ids", "output_padding_offset"))
    bs = _arg(case, "cur_len").shape[0]
    req = _request_of_rows(pad, int(_arg(case, "max_seq_len")))
    owned = int(np.count_nonzero(req < bs))
    row_bytes = logits.shape[1] * logits.itemsize
    neg = pre_ids < 0
    prefix = np.where(neg.any(axis=1), neg.argmax(axis=1), pre_ids.shape[1])
    cur_len = _arg(case, "cur_len").reshape(-1)
    scanned = int(prefix[cur_len >= 0].sum()) * 8
    small = sum(
        _nbytes(_arg(case, n))
        for n in (
            "penalty_scores",
            "frequency_scores",
            "presence_scores",
            "temperatures",
            "bad_tokens",
            "cur_len",
            "min_len",
            "eos_token_id",
            "output_padding_offset",
        )
    )
    return 2 * owned * row_bytes + scanned + small


def _logits_rows_get_logits(case):
    enc = _arg(case, "seq_lens_encoder").reshape(-1)
    this = _arg(case, "seq_lens_this_time").reshape(-1)
    bsz = this.size
    return int(np.where(enc[:bsz] > 0, 2, np.maximum(this, 0)).sum())


def floor_get_logits(case):
    """Copy every written row once (read + write), the counts and offsets."""
    vocab = _arg(case, "logits").shape[1]
    bsz = _arg(case, "seq_lens_this_time").reshape(-1).size
    small = 4 * (2 * bsz + 4 * bsz)  # lens read; counts and offsets written
    return 2 * _logits_rows_get_logits(case) * vocab * 4 + small


def floor_get_target_logits(case):
    vocab = _arg(case, "logits").shape[1]
    enc = _arg(case, "seq_lens_encoder").reshape(-1)
    acc = _arg(case, "accept_num").reshape(-1)
    bsz = _arg(case, "seq_lens_this_time").reshape(-1).size
    rows = int(np.where(enc[:bsz] > 0, 1, np.maximum(acc[:bsz], 0)).sum())
    return 2 * rows * vocab * 4 + 4 * 4 * bsz


def floor_paged_attention(case):
    """Read q, k, v and each request's cached context once per kv head (K and V); write the new
    k/v rows into the cache and the output; the block-table entries the context needs."""
    q, k, v = (_arg(case, n) for n in ("q", "k", "v"))
    dec = _arg(case, "seq_lens_decoder").astype(np.int64)
    cu = _arg(case, "cu_seqlens_q").astype(np.int64)
    kc = _arg(case, "key_cache")
    hkv, bs, dim = kc.shape[1], kc.shape[2], kc.shape[3]
    ctx_old = int(dec.sum())
    ctx_all = dec + np.diff(cu)
    tables = int((-(-ctx_all // bs)).sum()) * 4
    return (
        _nbytes(q)
        + _nbytes(k)
        + _nbytes(v)
        + 2 * ctx_old * hkv * dim * 4
        + _nbytes(k)
        + _nbytes(v)
        + _nbytes(q)  # the output: [T, Hq * D]
        + tables
    )


def floor_generic(case):
    """Per-request ops: every argument of at most one entry per request (or per token) once, of
    2-D per-request buffers K + 2 columns (the entries a step reads or writes around step_idx),
    of 3-D and larger (hidden rows) every byte."""
    from fd_mtp.testing.op_inputs import K

    total = 0
    for a in case.args:
        if not isinstance(a, np.ndarray):
            continue
        if a.ndim <= 1 or a.ndim >= 3:
            total += _nbytes(a)
        else:
            total += a.shape[0] * min(a.shape[1], K + 2) * a.itemsize
    return total


def floor_verify(case):
    """The generic model, and under the rejection strategy at least one full target row per
    running request (the row where it rejects, or the bonus token's row; a rejection also needs
    the draft row when the drafter is sampled: not counted, so this is a lower bound)."""
    total = floor_generic(case)
    probs = case.kwargs.get("target_probs")
    if case.kwargs.get("verify_strategy") == "rejection" and isinstance(probs, np.ndarray):
        this = _arg(case, "seq_lens_this_time").reshape(-1)
        stop = _arg(case, "stop_flags").reshape(-1)
        running = int(np.count_nonzero((this > 0) & ~stop))
        total += running * probs.shape[-1] * probs.itemsize
    return total


FLOORS = {
    "speculate_verify": (floor_verify, "per-request model; rejection: + a target row per request"),
    "top_p_candidates": (floor_top_p, "rows read once, C candidates written"),
    "speculate_get_token_penalty_multi_scores": (
        floor_penalty,
        "owned rows read + written once, pre_ids prefix",
    ),
    "speculate_get_logits": (floor_get_logits, "written rows copied once"),
    "speculate_get_target_logits": (floor_get_target_logits, "accepted rows copied once"),
    "paged_attention": (floor_paged_attention, "q/k/v, each context once per kv head, out"),
}


def floor_bytes(name, case):
    """(bytes, model) of op `name` (a builders key) on `case`."""
    op = name.split("[")[0]
    fn, model = FLOORS.get(op, (floor_generic, "generic per-request model"))
    return int(fn(case)), model


def floor_table(names, batches, log=print):
    """[(name, batch, bytes, model, config)] for every op and batch (pure numpy: no GPU)."""
    out = []
    for name in names:
        for batch in batches:
            case = build_case(name, batch)
            b, model = floor_bytes(name, case)
            out.append((name, batch, b, model, case.config))
    return out


def print_floor_table(table, bw=None):
    print(
        f"\n{'op':48s} {'batch':>5s} {'floor bytes':>13s} {'floor us':>10s} {'device us':>10s}"
        f" {'ratio':>7s}"
    )
    for entry in table:
        name, batch, fb = entry[:3]
        if len(entry) > 5:
            floor_us, dev, ratio = entry[4:7]
            cols = f"{floor_us:10.2f} {dev:10.2f} {ratio:7.2f}"
        else:
            cols = f"{'not meas.':>10s} {'not meas.':>10s} {'-':>7s}"
        print(f"{name:48s} {batch:5d} {fb:13,d} {cols}")
    if bw is None:
        print("(no GPU: floor us, device us and ratio not measured; floor us = bytes / the")
        print(" device-to-device copy bandwidth measured in the same run)")
    else:
        print(f"(floor us = bytes / {bw / 1e9:.0f} GB/s, the device-to-device copy in this run)")


def write_floor_csv(table, path, device, stamp):
    import csv

    import fd_mtp

    cols = ["kernel", "x", "floor_bytes", "model", "floor_us", "device_us", "ratio"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*cols, "device", "timestamp", "version"])
        for e in table:
            name, batch, fb, model = e[:4]
            meas = [f"{v:.3f}" for v in e[4:7]] if len(e) > 5 else ["not measured"] * 3
            w.writerow([name, batch, fb, model, *meas, device, stamp, fd_mtp.__version__])
    return path


def floor_ops():
    """The ops of the floors table: every CUDA op of BUILDERS plus the extra cases."""
    return cuda_ops() + list(extra_builders())
