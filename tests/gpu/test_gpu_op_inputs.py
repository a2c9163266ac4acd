"""Parity of every op's CUDA kernel (fd_mtp.cuda, on CuPy) with its numpy reference on the realistic
valid batches of fd_mtp.testing.op_inputs: the benchmark's inputs (max_model_len 2048, mixed
decode / prefill / stopped / resync requests, block managers with blocks to spare, vocabularies of
32k and 100k), at several batch sizes, and in the dtypes, hidden sizes, candidate counts and
verify strategies the kernels specialise on. Every array argument and every output must match
exactly (gpu_util.run_case).

The other test_gpu_*.py modules keep their own seeded random batches (small widths and
vocabularies, per-request buffers longer than the batch, [B] / [B, 1] shapes) and their hand and
bad-input cases; this module is where the GPU tests take a realistic batch of an op.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import pytest
from gpu_util import run_case, skip_module_without_gpu

skip_module_without_gpu()

from fd_mtp.testing import op_inputs  # noqa: E402
from fd_mtp.testing.op_inputs import BUILDERS  # noqa: E402

BATCHES = [1, 33, 600]
LARGE_VOCAB_BATCHES = [1, 33]  # [T, 100k] float32 rows: the numpy reference is the slow side
DTYPES = ["float32", "float16", "bfloat16"]
STRATEGIES = ["topp", "topk", "target_match", "greedy"]


def op_of(name):
    return name.split("[")[0]


def has_cuda(name):
    """False for a host op (schema cuda=False: no CUDA launcher, no fd_mtp.cuda wrapper)."""
    from fd_mtp import schema

    op = schema.all_ops().get(op_of(name))
    return op is None or op.cuda  # pre_process is no schema op; it runs on the device


def batches_of(name):
    return LARGE_VOCAB_BATCHES if "V=100000" in name else BATCHES


@pytest.mark.parametrize(
    "name, batch",
    [(name, batch) for name in BUILDERS if has_cuda(name) for batch in batches_of(name)],
)
def test_op_inputs_parity(name, batch):
    run_case(op_of(name), BUILDERS[name](batch))


@pytest.mark.parametrize("batch", [1, 600])
@pytest.mark.parametrize("hidden", [129, 1024])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op, build",
    [
        ("eagle_get_hidden_states", op_inputs.build_eagle_hidden),
        ("eagle_get_self_hidden_states", op_inputs.build_self_hidden),
        ("rebuild_padding", op_inputs.build_rebuild_padding),
    ],
)
def test_hidden_state_ops_dtypes(op, build, dtype, hidden, batch):
    run_case(op, build(batch, hidden=hidden, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 33])
def test_penalty_dtypes(batch, dtype):
    run_case(
        "speculate_get_token_penalty_multi_scores",
        op_inputs.build_penalty(batch, 32_000, dtype=dtype),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("candidates", [1, 10, 100])
def test_top_p_dtypes_and_candidates(dtype, candidates):
    run_case(
        "top_p_candidates", op_inputs.build_top_p(33, 32_000, dtype=dtype, candidates=candidates)
    )


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_verify_strategies(strategy, batch):
    case = op_inputs.build_verify(batch)
    case.kwargs["verify_strategy"] = strategy
    run_case("speculate_verify", case)


@pytest.mark.parametrize("batch", [1, 33])
def test_verify_rejection_with_draft_probs(batch):
    run_case("speculate_verify", op_inputs.build_verify_rejection(batch, 32_000, draft_probs=True))
