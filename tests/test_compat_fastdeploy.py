"""fd_mtp.compat.fastdeploy: FastDeploy's op module path resolves to fd_mtp's ops, upstream-style
code runs through it, and a real FastDeploy is never shadowed by accident."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import paddle
import pytest

import fd_mtp.ops as ops
from fd_mtp.compat import fastdeploy as compat


@pytest.fixture
def alias():
    """The alias freshly installed; afterwards the state before the test (importing the module
    installed it, and other tests, e.g. the README's blocks, rely on that)."""
    was = compat.installed()
    compat.uninstall()
    module = compat.install()
    yield module
    compat.uninstall()
    if was:
        compat.install()


def assert_imports_are_ops(module, names):
    """``from <module> import <name>`` gives fd_mtp.ops.<name>, for each of ``names``."""
    upstream = importlib.import_module(module)
    for name in names:
        assert getattr(upstream, name) is getattr(ops, name), f"{module}.{name}"


def test_upstream_imports_resolve_to_fd_mtp_ops(alias):
    from fastdeploy.model_executor.ops.gpu import hybird_mtp_ngram

    # upstream mtp.py / gpu_model_runner.py
    assert_imports_are_ops(
        "fastdeploy.model_executor.ops.gpu",
        ["draft_model_preprocess", "speculate_verify", "mtp_step_paddle"],
    )
    assert hybird_mtp_ngram is ops.hybrid_mtp_ngram  # upstream's pybind spelling
    import fastdeploy.model_executor.ops.gpu as gpu

    assert set(ops.__all__) <= set(gpu.__all__)


def test_an_upstream_style_call_runs_in_place(alias):
    from fastdeploy.model_executor.ops.gpu import speculate_clear_accept_nums

    accept_num = paddle.to_tensor([3, 2, 1], dtype="int32")
    speculate_clear_accept_nums(accept_num, paddle.to_tensor([7, 0, 5], dtype="int32"))
    assert accept_num.tolist() == [3, 0, 1]


def test_missing_ops_are_named(alias, monkeypatch):
    import fastdeploy.model_executor.ops.gpu as gpu

    # every release/2.4 speculative-decoding op is offered now; the mechanism stays for the next
    assert compat.MISSING == ()
    monkeypatch.setattr(compat, "MISSING", ("an_upstream_op",))
    with pytest.raises(AttributeError, match="an_upstream_op: FastDeploy's op is not"):
        gpu.an_upstream_op  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'no_such_op'"):
        gpu.no_such_op  # noqa: B018
    for name in ("speculate_step_reschedule", "speculate_get_target_logits", "hybird_mtp_ngram"):
        assert callable(getattr(gpu, name))


def test_logprob_ops_resolve_from_both_upstream_paths(alias):
    # upstream spec_decode/mtp.py and pre_and_post_process.py: the custom ops
    # upstream layers/sample/sampler.py: its own Python module of the logprob helpers
    from fastdeploy.model_executor.layers.sample.ops.speculate_logprob_utils import (
        speculate_get_target_logits as utils_target,
    )

    assert_imports_are_ops(
        "fastdeploy.model_executor.ops.gpu",
        ["speculate_get_logits", "speculate_save_output_topk", "speculate_get_output_topk"],
    )
    assert_imports_are_ops(
        "fastdeploy.model_executor.layers.sample.ops",
        ["speculate_get_target_logits", "speculate_insert_first_token"],
    )
    assert utils_target is ops.speculate_get_target_logits
    import fastdeploy.model_executor.layers.sample.ops as sample_ops

    with pytest.raises(AttributeError, match="top_k_top_p_sampling: FastDeploy's sampler"):
        sample_ops.top_k_top_p_sampling  # noqa: B018


def test_an_upstream_style_logprob_gather_runs_in_place(alias):
    from fastdeploy.model_executor.layers.sample.ops import speculate_get_target_logits

    logits = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    target = paddle.zeros([3, 2])
    i32 = lambda v: paddle.to_tensor(v, dtype="int32")  # noqa: E731
    speculate_get_target_logits(
        target, logits, i32([0, 1]), i32([0, 1]), i32([5, 3]), i32([5, 0]), i32([1, 2])
    )
    assert target.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def test_uninstall_removes_only_the_alias(alias):
    assert compat.installed()
    compat.uninstall()
    assert not compat.installed()
    assert "fastdeploy" not in sys.modules
    assert not any(name in sys.modules for name in compat.SAMPLE_MODULES)


def test_a_real_fastdeploy_is_not_shadowed(tmp_path):
    """With a (stand-in) fastdeploy package importable, the import warns and installs nothing,
    install() refuses by name, and install(force=True) shadows it on purpose."""
    pkg = tmp_path / "fastdeploy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    code = textwrap.dedent(
        f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import fd_mtp.compat.fastdeploy as compat
        assert any("a real FastDeploy is installed" in str(w.message) for w in caught), caught
        import fastdeploy
        assert fastdeploy.REAL and not compat.installed()
        try:
            compat.install()
        except ImportError as exc:
            assert "a real FastDeploy is installed" in str(exc), exc
        else:
            raise SystemExit("install() shadowed the real package")
        gpu = compat.install(force=True)
        from fastdeploy.model_executor.ops.gpu import speculate_verify
        import fd_mtp.ops
        assert speculate_verify is fd_mtp.ops.speculate_verify
        compat.uninstall()
        assert sys.modules["fastdeploy"] is fastdeploy  # the real one is back
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
