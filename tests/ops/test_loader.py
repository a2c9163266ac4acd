"""The two ways fd_mtp's ops can be run: the pybind11 module that fd_mtp.ops uses in dynamic mode,
and paddle's generic runner over the registered name ``fd_mtp_<op>`` (what a program that only
knows the registered op uses). Both must run the same C++ entry point with the same checks."""

import numpy as np
import pytest
from util import assert_same, to_paddle

from fd_mtp.ops import _loader


def postprocess_args():
    draft = np.array([[7, 8, -1], [5, -1, 6], [1, 2, 3]], np.int64)
    return [draft, np.array([9, 9, 9], np.int32), np.array([0, 0, 4], np.int32), np.zeros(3, bool)]


def test_registered_runner_and_pybind_module_agree_and_write_in_place():
    a, b = [to_paddle(x) for x in postprocess_args()], [to_paddle(x) for x in postprocess_args()]
    assert _loader.call("draft_model_postprocess", *a) is None
    _loader.run_registered("draft_model_postprocess", *b)
    assert_same(a[1].numpy(), np.array([2, 2, 9], np.int32), "this_time (pybind)")
    assert_same(b[1].numpy(), np.array([2, 2, 9], np.int32), "this_time (registered)")


def test_declared_outputs_have_the_same_values_dtypes_and_shapes_on_both_paths():
    """An op whose returned tensors are declared in its schema (fd_mtp.schema.Out): the
    registered runner goes through the generated shape / dtype inference, the pybind path does
    not; both return the same tensors."""
    q = np.array([3, 2, 0], np.int32)
    args = [
        np.array([[5, 6, 7, 0], [9, 0, 0, 0], [1, 1, 1, 1]], np.int64),
        np.array([[0, 0], [8, 4], [0, 0]], np.int64),
        np.cumsum(4 - q).astype(np.int32),
        np.array([5], np.int64),
        q,
        np.array([3, 0, 0], np.int32),
    ]
    a = _loader.call("speculate_get_padding_offset", *[to_paddle(x) for x in args])
    b = _loader.run_registered("speculate_get_padding_offset", *[to_paddle(x) for x in args])
    assert len(a) == len(b) == 4
    for x, y, dt, shape in zip(
        a, b, (np.int64, np.int32, np.int32, np.int32), ([5], [5], [4], [4])
    ):
        assert_same(y.numpy(), x.numpy(), "registered output")
        assert y.numpy().dtype == dt and list(y.shape) == shape
    assert a[0].numpy().tolist() == [5, 6, 7, 8, 4]


@pytest.mark.parametrize("runner", [_loader.call, _loader.run_registered])
def test_both_paths_raise_value_error_naming_the_argument_without_source_location(runner):
    args = [to_paddle(x) for x in postprocess_args()]
    args[1] = to_paddle(np.array([9, 9, 9], np.int64))
    with pytest.raises(ValueError) as info:
        runner("draft_model_postprocess", *args)
    msg = str(info.value)
    assert msg.startswith("draft_model_postprocess: base_model_seq_lens_this_time must be int32")
    assert ".h:" not in msg and ".cc:" not in msg


def test_every_schema_op_is_registered_and_bound():
    """The build generates one PD_BUILD_OP and one pybind entry per schema op (cmake/gen_ops.py):
    both lists must be exactly the schema's."""
    from paddle.base import core

    from fd_mtp import schema

    module = _loader._module()
    declared = set(schema.all_ops())
    bound = {name for name in dir(module) if not name.startswith("_")}
    assert declared == bound, (sorted(declared - bound), sorted(bound - declared))
    registered = {
        name[len("fd_mtp_") :] for name in core.get_all_op_names() if name.startswith("fd_mtp_")
    }
    assert declared == registered, (sorted(declared - registered), sorted(registered - declared))


def test_a_written_strided_view_is_refused_and_left_alone():
    """paddle hands a custom op a contiguous copy of a strided view, so an in-place op would
    write the copy and the view would silently keep its values: every op refuses a written
    tensor that is not contiguous, by the op's and the argument's name, before running."""
    import paddle

    import fd_mtp.ops as ops

    draft, this_time, enc, stop = (to_paddle(x) for x in postprocess_args())
    wide = paddle.to_tensor(np.arange(6, dtype=np.int32).reshape(3, 2) + 9)
    column = wide[:, 0]  # [9, 11, 13], a strided view
    if column.is_contiguous():
        pytest.skip("this paddle copies on column slicing")
    with pytest.raises(
        ValueError, match=r"^draft_model_postprocess: base_model_seq_lens_this_time"
    ):
        ops.draft_model_postprocess(draft, column, enc, stop)
    assert column.tolist() == [9, 11, 13]
    ops.draft_model_postprocess(draft, column.contiguous(), enc, stop)  # the remedy runs
