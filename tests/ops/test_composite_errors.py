"""Bad input to the composite wrappers of fd_mtp.ops: the functions that compute on their arguments
or call other ops (pre_process, shared_empty / shared_zeros / share_external_data, paged_attention
and decoder_layer, the ``_dynamic`` message-queue ops). One argument at a time is replaced by None,
a value of the wrong type (numpy, a list), another dtype, another rank, or too few requests; every
case must raise ValueError or TypeError whose message starts with ``"<wrapper>: <argument>"`` (the
wrapper's own name and argument, never an inner op's), never AttributeError / IndexError, and
leave every input unchanged (issue 38)."""

import numpy as np
import paddle
import pytest

import fd_mtp.ops as ops
from fd_mtp.testing.op_inputs import build_pre_process

BATCH = 5


def _pre_process_inputs(speculative: bool) -> dict:
    case = build_pre_process(BATCH)
    values = {
        n: paddle.to_tensor(a) if isinstance(a, np.ndarray) else a
        for n, a in zip(case.names, case.args)
    }
    values["speculative_decoding"] = speculative
    return values


def _mutations(value):
    """(kind, replacement) for a tensor argument."""
    yield "none", None
    yield "numpy", value.numpy()
    yield "list", value.numpy().tolist()
    yield "dtype", value.astype("float64")
    yield "rank-up", paddle.stack([value, value, value], axis=-1)
    yield "rank-0", value.reshape([-1])[0]
    if value.shape[0] > 1:
        yield "short", value[:1].contiguous()


PRE_PROCESS_TENSORS = (
    "input_ids",
    "seq_lens_this_time",
    "draft_tokens",
    "seq_lens_encoder",
    "seq_lens_decoder",
)


def _pre_process_cases():
    for speculative in (True, False):
        base = _pre_process_inputs(speculative)
        # Unused by the plain branch: a given one must only be a Tensor (None is fine).
        used = PRE_PROCESS_TENSORS if speculative else PRE_PROCESS_TENSORS[:2]
        for name in PRE_PROCESS_TENSORS:
            for kind, _ in _mutations(base[name]):
                if name == "seq_lens_this_time" and kind == "short":
                    continue  # it defines the batch: fewer requests is another valid batch
                if name not in used and kind not in ("numpy", "list"):
                    continue
                yield pytest.param(
                    speculative,
                    name,
                    kind,
                    id=f"{'spec' if speculative else 'plain'}-{name}:{kind}",
                )
        for kind in ("none", "str"):
            yield pytest.param(
                speculative,
                "speculative_decoding",
                kind,
                id=f"speculative_decoding:{kind}-{speculative}",
            )


def _snapshot(values: dict) -> dict:
    return {n: v.numpy().copy() for n, v in values.items() if isinstance(v, paddle.Tensor)}


def _assert_unchanged(before: dict, values: dict):
    for name, array in before.items():
        np.testing.assert_array_equal(values[name].numpy(), array, err_msg=f"{name} was written")


def _assert_names(exc_info, wrapper: str, argument: str):
    assert exc_info.type in (ValueError, TypeError), f"{exc_info.type.__name__}: {exc_info.value}"
    message = str(exc_info.value)
    assert message.startswith(f"{wrapper}: {argument}"), message


@pytest.mark.parametrize("speculative,name,kind", list(_pre_process_cases()))
def test_pre_process_refuses_bad_arguments_by_its_own_names(speculative, name, kind):
    inputs = _pre_process_inputs(speculative)
    before = _snapshot(inputs)
    values = dict(inputs)
    if name == "speculative_decoding":
        values[name] = None if kind == "none" else "yes"
    else:
        values[name] = dict(_mutations(values[name]))[kind]
    with pytest.raises(Exception) as info:
        ops.pre_process(**values)
    _assert_names(info, "pre_process", name)
    _assert_unchanged(before, inputs)


@pytest.mark.parametrize("speculative", [True, False])
def test_pre_process_translates_inner_errors(speculative):
    """A data error found by an inner op (a negative token count, a request longer than its
    source row) names pre_process's argument, and the inner op in parentheses."""
    values = _pre_process_inputs(speculative)
    values["seq_lens_this_time"][1] = -1
    with pytest.raises(
        ValueError, match=r"^pre_process: seq_lens_this_time \(request 1\) is -1"
    ) as info:
        ops.pre_process(**values)
    assert "(in speculate_get_padding_offset)" in str(info.value)
    values = _pre_process_inputs(speculative)
    values["seq_lens_this_time"][0] = values["input_ids"].shape[1] + 1
    values["seq_lens_encoder"][0] = 1  # a prefill chunk longer than input_ids' row
    with pytest.raises(ValueError, match=r"^pre_process: seq_lens_this_time \(request 0\)") as info:
        ops.pre_process(**values)
    assert "seq_len " not in str(info.value) and "token_num" not in str(info.value)


def test_pre_process_needs_a_column_in_the_speculative_branch():
    values = _pre_process_inputs(True)
    values["input_ids"] = paddle.zeros([BATCH, 0], "int64")
    values["seq_lens_this_time"] = paddle.zeros([BATCH], "int32")
    with pytest.raises(ValueError, match="^pre_process: input_ids must have at least one column"):
        ops.pre_process(**values)


SHAPE_CASES = [
    (None, "shape must be a list of ints, got NoneType"),
    (5, "shape must be a list of ints, got int"),
    ("ab", "shape must be a list of ints, got str"),
    (["x"], r"shape\[0\] must be an int, got str"),
    ([2, 2.5], r"shape\[1\] must be an int, got float"),
    ([True], r"shape\[0\] must be an int, got bool"),
    ([2, -1], "shape must have non-negative dimensions"),
]


@pytest.mark.parametrize("wrapper", ["shared_empty", "shared_zeros"])
@pytest.mark.parametrize("shape,problem", SHAPE_CASES)
def test_shared_tensors_refuse_bad_shapes_by_name(wrapper, shape, problem):
    with pytest.raises(ValueError, match=rf"^{wrapper}: {problem}"):
        getattr(ops, wrapper)(shape, "float32")


@pytest.mark.parametrize("wrapper", ["shared_empty", "shared_zeros"])
@pytest.mark.parametrize("dtype", ["foo", 5, object()])
def test_shared_tensors_refuse_bad_dtypes_by_name(wrapper, dtype):
    with pytest.raises(TypeError, match=rf"^{wrapper}: dtype must be a paddle dtype"):
        getattr(ops, wrapper)([2], dtype)


@pytest.mark.parametrize("shape,problem", SHAPE_CASES)
def test_share_external_data_refuses_bad_shapes_by_name(shape, problem):
    like = paddle.empty([0], "float32")
    with pytest.raises(ValueError, match=rf"^share_external_data: {problem}"):
        ops.share_external_data(like, "/fd_mtp_test_composite_none", shape)


def _attention_inputs():
    i32 = lambda x: paddle.to_tensor(x, dtype="int32")  # noqa: E731
    return dict(
        q=paddle.ones([2, 1, 2]),
        k=paddle.ones([2, 1, 2]),
        v=paddle.ones([2, 1, 2]),
        key_cache=paddle.zeros([2, 1, 2, 2]),
        value_cache=paddle.zeros([2, 1, 2, 2]),
        block_tables=i32([[1, -1]]),
        cu_seqlens_q=i32([0, 2]),
        batch_id_per_token=i32([0, 0]),
        seq_lens_decoder=i32([0]),
    )


@pytest.mark.parametrize("name", ["q", "k", "v", "key_cache", "value_cache"])
@pytest.mark.parametrize("bad", [None, "numpy"])
def test_paged_attention_checks_types_before_reading_attributes(name, bad):
    inputs = _attention_inputs()
    before = _snapshot(inputs)
    values = dict(inputs)
    values[name] = None if bad is None else values[name].numpy()
    with pytest.raises(TypeError) as info:
        ops.paged_attention(**values)
    _assert_names(info, "paged_attention", name)
    _assert_unchanged(before, inputs)


@pytest.mark.parametrize("name", ["key_cache", "value_cache"])
def test_decoder_layer_checks_its_caches_before_reading_attributes(name):
    t, h, d = 1, 8, 4
    z = lambda *s: paddle.zeros(list(s))  # noqa: E731
    i32 = lambda x: paddle.to_tensor(x, dtype="int32")  # noqa: E731
    args = dict(
        hidden=paddle.ones([t, h]),
        residual=z(t, h),
        input_norm_weight=paddle.ones([h]),
        q_weight=z(h, 2 * d),
        k_weight=z(h, d),
        v_weight=z(h, d),
        o_weight=z(2 * d, h),
        post_norm_weight=paddle.ones([h]),
        gate_weight=z(h, 16),
        up_weight=z(h, 16),
        down_weight=z(16, h),
        key_cache=z(1, 1, 2, d),
        value_cache=z(1, 1, 2, d),
        block_tables=i32([[0]]),
        cu_seqlens_q=i32([0, 1]),
        batch_id_per_token=i32([0]),
        seq_lens_decoder=i32([0]),
        rope_cos=paddle.ones([t, d // 2]),
        rope_sin=z(t, d // 2),
        eps=1e-6,
    )
    args[name] = None
    with pytest.raises(TypeError) as info:
        ops.decoder_layer(**args)
    _assert_names(info, "decoder_layer", name)


@pytest.mark.parametrize(
    "wrapper,call",
    [
        (
            "speculate_get_output_dynamic",
            lambda x: ops.speculate_get_output_dynamic(x, 0, False, 97, False),
        ),
        (
            "speculate_save_output_dynamic",
            lambda x: ops.speculate_save_output_dynamic(
                x,
                paddle.zeros([1], "int32"),
                paddle.to_tensor([True]),
                paddle.zeros([1], "int32"),
                paddle.zeros([1], "int64"),
                0,
                97,
                True,
                False,
            ),
        ),
    ],
)
def test_dynamic_queue_ops_name_themselves(wrapper, call):
    with pytest.raises(TypeError) as info:
        call(None)
    first = "x" if wrapper.startswith("speculate_get") else "accept_tokens"
    _assert_names(info, wrapper, first)
