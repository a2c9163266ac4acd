"""FastDeploy's op module paths, served by fd_mtp.

    import fd_mtp.compat.fastdeploy  # noqa: F401
    from fastdeploy.model_executor.ops.gpu import speculate_verify, draft_model_preprocess

After this import, ``fastdeploy.model_executor.ops.gpu`` (where FastDeploy release/2.4's model
runner and MTP proposer import their speculative-decoding ops from) is a module whose attributes
are fd_mtp's ops (`fd_mtp.ops`): FastDeploy's names, positional argument orders and in-place
effects, so FastDeploy-style code runs unchanged. Upstream's pybind spelling
``hybird_mtp_ngram`` is offered next to ``hybrid_mtp_ngram``. An op fd_mtp does not implement
raises AttributeError naming it (``fd_mtp.compat.fastdeploy.MISSING`` lists FastDeploy's
speculative-decoding ops not offered yet).

FastDeploy's speculative sampler imports its logprob helpers from a Python module of its own,
``fastdeploy.model_executor.layers.sample.ops`` (file ``speculate_logprob_utils.py``):
``speculate_get_target_logits`` and ``speculate_insert_first_token`` there (and in the
``...sample.ops.speculate_logprob_utils`` submodule) are fd_mtp's ops too; that module's other
names (the penalty and top-k / top-p sampling wrappers) raise AttributeError naming them.

The alias is installed only where no real FastDeploy is importable: with FastDeploy installed,
importing this module warns and installs nothing, and `install` raises ImportError, instead of
shadowing it (call `install(force=True)` to shadow it on purpose, e.g. to compare the two in one
process). `uninstall` removes the alias modules again.
"""

from __future__ import annotations

import importlib.util
import sys
import types
import warnings

__all__ = ["MISSING", "MODULES", "SAMPLE_MODULES", "install", "installed", "uninstall"]

# The module path the ops are imported from upstream, and its parents.
MODULES = (
    "fastdeploy",
    "fastdeploy.model_executor",
    "fastdeploy.model_executor.ops",
    "fastdeploy.model_executor.ops.gpu",
)
# FastDeploy's sampler-side module of the logprob helpers (fastdeploy/model_executor/layers/sample/
# ops/__init__.py re-exports speculate_logprob_utils.py), under the "fastdeploy.model_executor"
# package of MODULES.
SAMPLE_MODULES = (
    "fastdeploy.model_executor.layers",
    "fastdeploy.model_executor.layers.sample",
    "fastdeploy.model_executor.layers.sample.ops",
    "fastdeploy.model_executor.layers.sample.ops.speculate_logprob_utils",
)
SAMPLE_OPS = ("speculate_get_target_logits", "speculate_insert_first_token")
# Names of upstream's sample.ops module fd_mtp does not offer (not custom ops: Python wrappers).
SAMPLE_MISSING = (
    "apply_penalty_multi_scores",
    "apply_speculative_penalty_multi_scores",
    "top_k_top_p_sampling",
    "min_p_sampling",
)
# Upstream names that differ from fd_mtp's.
ALIASES = {"hybird_mtp_ngram": "hybrid_mtp_ngram"}
# FastDeploy release/2.4 speculative-decoding ops fd_mtp does not offer yet: none now (every op of
# upstream's custom_ops/gpu_ops/speculate_decoding/ is offered; its ngram_match_mixed.cu is the file
# of hybrid_mtp_ngram). Kept so that code checking the list keeps working.
MISSING: tuple[str, ...] = ()
_MARK = "__fd_mtp_compat__"
_SHADOWED: dict[str, types.ModuleType] = {}  # real modules a forced install replaced


_REAL_MESSAGE = (
    "fd_mtp.compat.fastdeploy: a real FastDeploy is installed; its op module is not shadowed "
    "(call fd_mtp.compat.fastdeploy.install(force=True) to do it anyway)"
)


def _real_fastdeploy() -> bool:
    """True when a FastDeploy that is not this alias is imported or importable."""
    real = sys.modules.get("fastdeploy")
    if real is not None:
        return not getattr(real, _MARK, False)
    return importlib.util.find_spec("fastdeploy") is not None


def installed() -> bool:
    """True when ``fastdeploy.model_executor.ops.gpu`` is fd_mtp's alias module."""
    module = sys.modules.get(MODULES[-1])
    return module is not None and getattr(module, _MARK, False)


def _ops_module() -> types.ModuleType:
    import fd_mtp.ops as ops

    module = types.ModuleType(MODULES[-1], "fd_mtp's ops under FastDeploy's module path.")
    setattr(module, _MARK, True)
    for name in ops.__all__:
        setattr(module, name, getattr(ops, name))
    for upstream, ours in ALIASES.items():
        setattr(module, upstream, getattr(ops, ours))

    def __getattr__(name):  # noqa: N807 - the module-level hook
        if name in MISSING:
            raise AttributeError(
                f"fastdeploy.model_executor.ops.gpu.{name}: FastDeploy's op is not implemented by "
                "fd_mtp yet (fd_mtp.compat.fastdeploy.MISSING lists them)"
            )
        raise AttributeError(
            f"module 'fastdeploy.model_executor.ops.gpu' has no attribute {name!r}"
        )

    module.__getattr__ = __getattr__
    module.__all__ = sorted([*ops.__all__, *ALIASES])
    return module


def _sample_modules() -> list[types.ModuleType]:
    """The sampler-side alias modules (SAMPLE_MODULES), parents first."""
    import fd_mtp.ops as ops

    out = []
    for name in SAMPLE_MODULES:
        module = types.ModuleType(name, "fd_mtp.compat.fastdeploy alias (logprob helpers)")
        setattr(module, _MARK, True)
        if name != SAMPLE_MODULES[-1]:
            module.__path__ = []  # a package: submodules resolve through sys.modules
        if name.endswith(".ops") or name == SAMPLE_MODULES[-1]:
            for op in SAMPLE_OPS:
                setattr(module, op, getattr(ops, op))
            module.__all__ = list(SAMPLE_OPS)

            def __getattr__(attr, _name=name):  # noqa: N807 - the module-level hook
                if attr in SAMPLE_MISSING:
                    raise AttributeError(
                        f"{_name}.{attr}: FastDeploy's sampler function is not offered by fd_mtp"
                    )
                raise AttributeError(f"module {_name!r} has no attribute {attr!r}")

            module.__getattr__ = __getattr__
        out.append(module)
    return out


def install(force: bool = False) -> types.ModuleType:
    """Installs the alias modules in ``sys.modules`` and returns the ops module. Refuses (with
    ImportError) when a real FastDeploy is importable, unless ``force``."""
    if installed():
        return sys.modules[MODULES[-1]]
    if not force and _real_fastdeploy():
        raise ImportError(
            "fd_mtp.compat.fastdeploy: a real FastDeploy is installed; its op module is not "
            "shadowed (call fd_mtp.compat.fastdeploy.install(force=True) to do it anyway)"
        )
    parents = []
    for name in MODULES[:-1]:
        parent = types.ModuleType(name, "fd_mtp.compat.fastdeploy alias package")
        parent.__path__ = []  # a package: submodules resolve through sys.modules
        setattr(parent, _MARK, True)
        parents.append(parent)
    ops_module = _ops_module()
    chain = [*parents, ops_module]
    for parent, child in zip(chain, chain[1:]):
        setattr(parent, child.__name__.rsplit(".", 1)[1], child)
    sample = _sample_modules()
    for parent, child in zip([parents[1], *sample], sample):  # under fastdeploy.model_executor
        setattr(parent, child.__name__.rsplit(".", 1)[1], child)
    for module in [*chain, *sample]:
        previous = sys.modules.get(module.__name__)
        if previous is not None:
            _SHADOWED[module.__name__] = previous
        sys.modules[module.__name__] = module
    return ops_module


def uninstall() -> None:
    """Removes the alias modules installed by `install`; modules a forced install shadowed
    come back (real modules are never removed)."""
    for name in reversed([*MODULES, *SAMPLE_MODULES]):
        module = sys.modules.get(name)
        if module is not None and getattr(module, _MARK, False):
            del sys.modules[name]
            if name in _SHADOWED:
                sys.modules[name] = _SHADOWED.pop(name)


if _real_fastdeploy():
    warnings.warn(_REAL_MESSAGE, stacklevel=2)
else:
    install()
