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


def step_cases(batch=STEP_BATCH, vocab=STEP_VOCAB, hidden=STEP_HIDDEN):
    """The ops of one MTP step with one substep, in the engine's order: (op name, Case)."""
    b, v, h = batch, vocab, hidden
    return [
        # target model: packing, logits rows, sampling, verification, update
        ("pre_process", op_inputs.build_pre_process(b)),
        ("rebuild_padding", op_inputs.build_rebuild_padding(b, hidden=h, dtype="float32")),
        ("speculate_get_token_penalty_multi_scores", op_inputs.build_penalty(b, v)),
        ("top_p_candidates", op_inputs.build_top_p(b, v)),
        ("speculate_verify", op_inputs.build_verify(b)),
        ("speculate_update", op_inputs.build_speculate_update(b)),
        ("speculate_set_value_by_flags_and_idx", op_inputs.build_set_value(b)),
        # MTP proposer, one substep
        ("draft_model_preprocess", op_inputs.build_preprocess(b)),
        ("eagle_get_hidden_states", op_inputs.build_eagle_hidden(b, hidden=h, dtype="float32")),
        ("pre_process", op_inputs.build_pre_process(b)),
        ("rebuild_padding", op_inputs.build_rebuild_padding(b, hidden=h, dtype="float32")),
        ("draft_model_update", op_inputs.build_update(b)),
        (
            "eagle_get_self_hidden_states",
            op_inputs.build_self_hidden(b, hidden=h, dtype="float32"),
        ),
        ("speculate_get_token_penalty_multi_scores", op_inputs.build_penalty(b, v)),
        ("draft_model_postprocess", op_inputs.build_postprocess(b)),
        ("mtp_step_paddle", op_inputs.build_mtp_step(b)),
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
        outputs += name == "pre_process"
    return outputs
