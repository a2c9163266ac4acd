"""One speculative decoding step of fd_mtp.cuda's ops on CuPy: the ops the engine runs for one
target step and one MTP substep, in its order (spec_runner, then the proposer), each on a valid
batch of `fd_mtp.testing.op_inputs`. tests/gpu/test_gpu_errors.py counts its host syncs and
allocations on the simt emulator; benchmarks/bench_gpu_ops.py times it on a GPU.

Two forms:
  * `prepare_step`: FastDeploy's exact-shape contracts (the shape ops read their counts on the host);
  * `padded_step`: the fixed-capacity variants (docs/gpu_errors.md): pre_process with a token
    capacity, rebuild_padding and the eagle gathers padded, the not_need_stop producers with a
    device flag: nothing read on the host until the step's end.

Both return fresh device copies: the ops write their arguments in place, so a prepared step runs
once. Needs CuPy (imported on first use) and fd_mtp.cuda's module.

The captured step (issue 35 §2, fd_mtp/cuda/graph.py): `PersistentStep` holds the padded step's
arrays at fixed capacity shapes (`capacity_cases`: every variant's arrays zero-padded to the
largest), its outputs in persistent ``out=`` arrays, and splits it into segments at the model's
forwards (`GAPS_AFTER`); `PersistentStep.write` writes one variant's batch into the buffers, as an
engine writes its slots, and its gaps write the forwards' outputs (hidden rows, logits, probs).
"""

from __future__ import annotations

import numpy as np

from fd_mtp.testing import op_inputs

STEP_BATCH = 8
STEP_VOCAB = 512
STEP_HIDDEN = 64


def _cp():
    import cupy

    return cupy


def device_args(op_name, case):
    """Device copies of a Case's arrays (the schema's CPU tensors stay numpy) and its kwargs."""
    from fd_mtp import schema

    cp = _cp()
    try:
        cpu = {t.name for t in schema.get(op_name).tensors if t.cpu}
    except KeyError:  # pre_process: no schema op, everything on the device
        cpu = set()
    args = [
        (a.copy() if n in cpu else cp.asarray(a)) if isinstance(a, np.ndarray) else a
        for a, n in zip(case.args, case.names)
    ]
    kwargs = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in case.kwargs.items()}
    return args, kwargs


def step_cases(batch=STEP_BATCH, vocab=STEP_VOCAB, hidden=STEP_HIDDEN, variant=0):
    """The ops of one MTP step with one substep, in the engine's order: (op name, Case).
    ``variant``: another batch of the same shapes (but the packed token counts), see
    fd_mtp.testing.op_inputs."""
    b, v, h, n = batch, vocab, hidden, variant
    f32 = "float32"
    return [
        # target model: packing, logits rows, sampling, verification, update
        ("pre_process", op_inputs.build_pre_process(b, variant=n)),
        ("rebuild_padding", op_inputs.build_rebuild_padding(b, hidden=h, dtype=f32, variant=n)),
        ("speculate_get_token_penalty_multi_scores", op_inputs.build_penalty(b, v, variant=n)),
        ("top_p_candidates", op_inputs.build_top_p(b, v, variant=n)),
        ("speculate_verify", op_inputs.build_verify(b, variant=n)),
        ("speculate_update", op_inputs.build_speculate_update(b, variant=n)),
        ("speculate_set_value_by_flags_and_idx", op_inputs.build_set_value(b, variant=n)),
        # MTP proposer, one substep
        ("draft_model_preprocess", op_inputs.build_preprocess(b, variant=n)),
        (
            "eagle_get_hidden_states",
            op_inputs.build_eagle_hidden(b, hidden=h, dtype=f32, variant=n),
        ),
        ("pre_process", op_inputs.build_pre_process(b, variant=n)),
        ("rebuild_padding", op_inputs.build_rebuild_padding(b, hidden=h, dtype=f32, variant=n)),
        ("draft_model_update", op_inputs.build_update(b, variant=n)),
        (
            "eagle_get_self_hidden_states",
            op_inputs.build_self_hidden(b, hidden=h, dtype=f32, variant=n),
        ),
        ("speculate_get_token_penalty_multi_scores", op_inputs.build_penalty(b, v, variant=n)),
        ("draft_model_postprocess", op_inputs.build_postprocess(b, variant=n)),
        ("mtp_step_paddle", op_inputs.build_mtp_step(b, variant=n)),
    ]


def prepare_step(cases=None):
    """[(op name, device args, kwargs)] of `step_cases` (or of ``cases``), exact shapes."""
    return [(name, *device_args(name, case)) for name, case in (cases or step_cases())]


def padded_step(cases=None):
    """The ops of `step_cases` (or of ``cases``) as the fixed-capacity variants, output_padding_offset
    widened to tmp_out's rows as pre_process's padded output is. Returns (prepared ops, the
    device not_need_stop flags)."""
    cp = _cp()
    prepared, flags = [], []
    for name, case in cases or step_cases():
        args, kwargs = device_args(name, case)
        if name == "pre_process":
            kwargs["token_capacity"] = int(case.args[0].size)
        elif name == "rebuild_padding":
            opo = cp.zeros(args[0].shape[0], dtype=cp.int32)
            opo[: args[5].size] = args[5]
            args[5] = opo
            kwargs["padded"] = True
        elif name in ("eagle_get_hidden_states", "eagle_get_self_hidden_states"):
            kwargs["padded"] = True
        for i, n in enumerate(case.names):
            if n == "not_need_stop":
                args[i] = cp.asarray(args[i])
                flags.append(args[i])
        prepared.append((name, args, kwargs))
    return prepared, flags


def run_step(prepared):
    """Runs the prepared ops; returns the number of arrays they returned (their outputs), with
    the intermediate output pre_process chains (speculate_get_seq_lens_output's)."""
    import fd_mtp.cuda as fcuda

    cp = _cp()
    outputs = 0
    for name, args, kwargs in prepared:
        out = getattr(fcuda, name)(*args, **kwargs)
        if isinstance(out, (list, tuple)):
            outputs += sum(isinstance(o, cp.ndarray) for o in out)
        elif isinstance(out, cp.ndarray) and not any(out is a for a in args):
            outputs += 1  # a new array (not an argument written in place and returned)
        # the intermediate of the exact form (the fixed-capacity one keeps it in a workspace)
        outputs += name == "pre_process" and kwargs.get("token_capacity") is None
    return outputs


# ------------------------------------------------------------------------------------------
# The captured step (fd_mtp/cuda/graph.py)
# ------------------------------------------------------------------------------------------
# The model's work between the spec ops: after each pre_process the (target / draft) forward
# writes the hidden rows rebuild_padding reads; after each rebuild_padding the LM head writes the
# logits (and probabilities) the sampling ops read. The step's segments end there.
GAPS_AFTER = ("pre_process", "rebuild_padding")
# The arrays a gap writes: (op, argument) of the ops of the next segment.
FORWARD_OUTPUTS = {
    ("rebuild_padding", "tmp_out"),
    ("speculate_get_token_penalty_multi_scores", "logits"),
    ("top_p_candidates", "probs"),
}


def capacity_cases(variants):
    """``variants`` (lists of `step_cases`, one per batch) with every array argument zero-padded
    at the end of each axis to the largest shape over the variants: the fixed capacity shapes of
    persistent buffers (the packed token rows of rebuild_padding's and the eagle gathers' inputs,
    draft_model_update's next tokens, the block free list). Scalars must agree."""
    first = variants[0]
    shapes = {}
    for cases in variants:
        if [n for n, _ in cases] != [n for n, _ in first]:
            raise ValueError("capacity_cases: the variants run different ops")
        for i, (name, case) in enumerate(cases):
            for j, a in enumerate(case.args):
                ref = first[i][1].args[j]
                if isinstance(a, np.ndarray):
                    old = shapes.get((i, j), a.shape)
                    if len(old) != a.ndim or a.dtype != ref.dtype:
                        raise ValueError(f"capacity_cases: {name}.{case.names[j]} changes rank")
                    shapes[(i, j)] = tuple(max(x, y) for x, y in zip(old, a.shape))
                elif not (a is ref or a == ref):
                    raise ValueError(
                        f"capacity_cases: {name}.{case.names[j]} is {a!r} in one variant and "
                        f"{ref!r} in another (host values are baked into a captured graph)"
                    )
    out = []
    for cases in variants:
        padded = []
        for i, (name, case) in enumerate(cases):
            args = [
                _pad_to(a, shapes[(i, j)]) if isinstance(a, np.ndarray) else a
                for j, a in enumerate(case.args)
            ]
            new = op_inputs.Case(args, case.names, [], case.config, case.kwargs, case.returns)
            new.written = case.written
            padded.append((name, new))
        out.append(padded)
    return out


def _pad_to(a, shape):
    if a.shape == tuple(shape):
        return a
    b = np.zeros(shape, a.dtype)
    b[tuple(slice(0, n) for n in a.shape)] = a
    return b


class PersistentStep:
    """The padded step (`padded_step`) on persistent device arrays: the ops' arguments, their
    outputs (``out=``) and the not_need_stop flags are allocated once, from ``cases`` (a
    `capacity_cases` entry: the shapes). `segments` split the ops at `GAPS_AFTER`; `gaps` write a
    variant's forward outputs; `write` writes a variant's inputs (the engine's slot writes);
    `snapshot` reads every array back (outputs and the arguments the ops wrote in place)."""

    def __init__(self, cases):
        cp = _cp()
        self.prepared, self.flags = padded_step(cases)
        self.names = [name for name, _ in cases]
        self.arg_names = [case.names for _, case in cases]
        self.outputs = []  # per op: its out arrays (or [])
        for (name, args, kwargs), (_, case) in zip(self.prepared, cases):
            outs = []
            if name == "pre_process":
                n, bsz = kwargs["token_capacity"], args[1].shape[0]
                outs = [
                    cp.zeros(n, cp.int64),
                    cp.zeros(n, cp.int32),
                    cp.zeros(bsz + 1, cp.int32),
                    cp.zeros(bsz + 1, cp.int32),
                    cp.zeros(bsz, cp.int32),
                    cp.zeros(n, cp.int32),
                ]
                kwargs["out"] = outs
            elif name in ("rebuild_padding", "eagle_get_hidden_states"):
                outs = [cp.zeros(args[0].shape, args[0].dtype)]
                kwargs["out"] = outs[0]
            elif name == "eagle_get_self_hidden_states":
                outs = [cp.zeros(args[0].shape, args[0].dtype)]
                kwargs["out"] = outs[0]
            elif name == "top_p_candidates":
                rows, c = args[0].shape[0], args[3]
                outs = [
                    cp.zeros((rows, c), args[0].dtype),
                    cp.zeros((rows, c), cp.int64),
                    cp.zeros(rows, cp.int32),
                ]
                kwargs["out"] = outs
            self.outputs.append(outs)
        bounds = [i + 1 for i, n in enumerate(self.names) if n in GAPS_AFTER]
        if not bounds or bounds[-1] != len(self.names):
            bounds.append(len(self.names))
        self.bounds = list(zip([0] + bounds[:-1], bounds))

    def _run(self, lo, hi):
        import fd_mtp.cuda as fcuda

        for name, args, kwargs in self.prepared[lo:hi]:
            getattr(fcuda, name)(*args, **kwargs)

    def segments(self):
        """One callable per segment: the ops between two forwards."""
        return [lambda lo=lo, hi=hi: self._run(lo, hi) for lo, hi in self.bounds]

    def _forward(self, i, j):
        return (self.names[i], self.arg_names[i][j]) in FORWARD_OUTPUTS

    def write(self, cases, stream=None):
        """Writes ``cases``' array arguments (a `capacity_cases` variant) into the buffers but
        for the forwards' outputs (`gaps` write those); flags back to their values. On
        ``stream`` (CuPy's current one by default)."""
        cp = _cp()
        with stream if stream is not None else _null_context():
            for i, ((_, args, _), (_, case)) in enumerate(zip(self.prepared, cases)):
                for j, a in enumerate(case.args):
                    if isinstance(a, np.ndarray) and not self._forward(i, j):
                        _write(cp, args[j], a)

    def gaps(self, cases):
        """The gap after each segment but the last: writes the forward outputs the next
        segment's ops read, from ``cases``."""
        cp = _cp()
        out = []
        for _, hi in self.bounds[:-1]:
            nxt = [b for b in self.bounds if b[0] == hi][0]
            writes = [
                (self.prepared[i][1][j], cases[i][1].args[j])
                for i in range(nxt[0], nxt[1])
                for j in range(len(cases[i][1].args))
                if self._forward(i, j)
            ]
            out.append(lambda writes=writes: [_write(cp, dst, src) for dst, src in writes])
        return out

    def arrays(self):
        """Every device array of the step: ((op index, name), array)."""
        found = []
        for i, (name, args, _) in enumerate(self.prepared):
            found += [
                ((i, f"{name}.{n}"), a) for n, a in zip(self.arg_names[i], args) if _is_dev(a)
            ]
            found += [((i, f"{name}.out[{k}]"), a) for k, a in enumerate(self.outputs[i])]
        return found

    def snapshot(self):
        """Host copies of `arrays` (reads every buffer back: after the step's end)."""
        cp = _cp()
        return {key: cp.asnumpy(a) for key, a in self.arrays()}


def _is_dev(a):
    cp = _cp()
    return isinstance(a, cp.ndarray)


def _write(cp, dst, src):
    """``src`` (host) into the leading block of device array ``dst``, the rest zeroed, on CuPy's
    current stream (a host numpy ``dst``: in place)."""
    if isinstance(dst, np.ndarray):  # a host argument: equal by capacity_cases' check
        dst[...] = 0
        dst[tuple(slice(0, n) for n in src.shape)] = src
        return
    host = np.zeros(dst.shape, dst.dtype)
    host[tuple(slice(0, n) for n in src.shape)] = src
    dst.set(host, stream=cp.cuda.get_current_stream())  # ordered on the step's stream


class _null_context:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
