"""The CUDA kernels on CuPy arrays, without paddle (for GPU tests and debugging).

``fd_mtp.cuda.<op>`` has the same positional signature as ``fd_mtp.ops.<op>`` and
``fd_mtp.reference.<op>``, takes CuPy arrays on the current device (``not_need_stop`` is a
host numpy bool array of one element, as the Paddle op takes a CPU tensor, or a one-element CuPy
bool array, then set on the device without a sync) and behaves like the
Paddle binding's GPU branch: bsz and row widths are derived the same way, bad shapes/dtypes and
data-dependent problems raise ValueError naming the argument (nothing written), and CUDA errors
raise RuntimeError.

Fixed-capacity variants (docs/gpu_errors.md): the shape ops take one extra keyword-only argument
here, listed in ``FIXED_CAPACITY`` (``pre_process(..., token_capacity=N)``, ``rebuild_padding`` and
the eagle gathers' ``padded=True``): outputs of a fixed number of rows, nothing read on the host.

Persistent outputs (``PERSISTENT_OUT``): the fixed-capacity variants and top_p_candidates take
``out=`` arrays to write instead of returning new ones, so that a step allocates nothing and can
be captured as CUDA graphs and replayed (``CapturedStep``, fd_mtp/cuda/graph.py).

Errors without a sync per op (docs/gpu_errors.md): by default (``deferred``) an op with data
checks does not synchronise; its error is recorded in the stream's persistent status record,
every later op on that stream skips on the device (writes nothing), and the ValueError (naming
the op and the argument, as in checked mode) raises at the next op that synchronises anyway (an op
with a host flag, a shape op) or at ``check_pending()``. ``set_error_mode("checked")`` /
``errors("checked")`` / ``FD_MTP_CUDA_ERRORS=checked`` synchronise and raise after each op;
``record`` never raises (``pending()`` reads the record).

The launchers live in the pybind11 module ``fd_mtp_cuda`` (custom_ops/cuda_module/), built
into ``fd_mtp/_lib`` by ``make cuda-module`` (or ``python cmake/fd_mtp_build.py cuda-module`` where
there is no paddle; see tools/gpu_check.sh). Set ``FD_MTP_CUDA_MODULE_DIR`` to load it
from another directory (an out-of-tree build's output dir).

Importing this module needs neither CuPy nor the compiled module; both load on first use.
"""

import importlib as _importlib
import importlib.util as _importlib_util

from ..ops import _loader as _ops_loader
from ..schema import FAMILIES as _FAMILIES
from ..schema import all_ops as _schema_ops
from ._common import (
    BUILD_HINT,
    ERROR_MODES,
    MODULE_DIR_ENV,
    check_pending,
    error_mode,
    errors,
    load,
    pending,
    set_error_mode,
)


def _check_pending_if_cupy() -> None:
    """fd_mtp.ops.check_pending's view of this layer: without CuPy no device stream of
    fd_mtp.cuda exists, so nothing can be pending (check_pending itself would need CuPy)."""
    if _importlib_util.find_spec("cupy") is not None:
        check_pending()


_ops_loader.register_pending_check(_check_pending_if_cupy)  # fd_mtp.ops.check_pending reaches it

# The keyword-only argument of each op's fixed-capacity variant, one of fd_mtp.cuda's two
# extensions of FastDeploy's signatures with PERSISTENT_OUT below (the off value is the default:
# None or False).
FIXED_CAPACITY = {
    "pre_process": "token_capacity",
    # the ops whose outputs' rows are data, with a capacity (fd_mtp.schema.Rows)
    **{name: "padded" for name, op in _schema_ops().items() if op.rows and op.rows.capacity},
}

# The ops that take ``out=`` (keyword-only, fd_mtp.cuda only): persistent output arrays written
# instead of new ones; with pre_process / rebuild_padding / the eagle gathers only in their
# fixed-capacity variant. Every op whose outputs are declared in its schema (fd_mtp.schema.Out)
# takes it too (its generated wrapper).
PERSISTENT_OUT = (
    "pre_process",
    *sorted(name for name, op in _schema_ops().items() if op.outputs and op.cuda),
)

from .graph import CapturedStep  # noqa: E402 (needs neither CuPy nor the module to import)

# One module per schema family that has CUDA kernels; the standard-dispatch wrappers in them are
# generated from the schema (fd_mtp/schema), the rest written there. This package offers every
# name in each family module's ``__all__``.
__all__ = [
    "BUILD_HINT",
    "CapturedStep",
    "ERROR_MODES",
    "FIXED_CAPACITY",
    "PERSISTENT_OUT",
    "MODULE_DIR_ENV",
    "check_pending",
    "error_mode",
    "errors",
    "load",
    "pending",
    "set_error_mode",
]
for _family in _FAMILIES:
    if _importlib_util.find_spec(f"{__name__}.{_family}") is None:
        continue  # a family without CUDA kernels (msgqueue) or without raw bindings (attention)
    _module = _importlib.import_module(f"{__name__}.{_family}")
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _family, _module, _name
