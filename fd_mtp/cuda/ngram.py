"""fd_mtp.cuda versions of the n-gram drafting ops (spec §5.17 ngram_match, §6.7 hybrid_mtp_ngram).

The device wrappers run the CUDA kernels on CuPy arrays (no host copies of the token rows); they
are generated from the schema (fd_mtp/schema/ngram.py). ``<op>_host`` (``ngram_match_host``,
``hybrid_mtp_ngram_host``) runs the same C++ CPU driver as the Paddle op's CPU branch on numpy
arrays, through the fd_mtp_cuda module: the CPU op where paddle is absent (the GPU test machine),
used to compare and time both paths. Checks, Params fill and status messages come from the
schema, as in the Paddle binding.
"""

from __future__ import annotations

import numpy as np

from ._common import _fail, define_launchers, load, raise_status


def _run_host(op_name, values):
    """The op's CPU driver on host (numpy) arrays: the schema's checks, attribute defaults, rules
    and Params fill, then the module's ``ngram_host``."""
    from .. import schema
    from ..schema import arrays

    op = schema.get(op_name)
    values = dict(values)
    for t in op.tensors:
        x = values[t.name]
        if x is not None and not isinstance(x, np.ndarray):
            _fail(op.name, t.name, f"must be a host numpy array, got {type(x).__name__}")
    dims = arrays.check_arrays(op, values, lambda x: isinstance(x, np.ndarray), None)
    for a in op.attrs:
        values[a.name] = arrays.convert_attr(
            op, a, schema.resolve_kw(op_name, a.name, values[a.name])
        )
    schema.check_rules(op, {a.name: values[a.name] for a in op.attrs}, dims)
    p = getattr(load(), op.params)()
    arrays.fill_params(op, p, values, dims, lambda x: x.ctypes.data)
    raise_status(op, load().ngram_host(p))


def _define_host_variants(namespace):
    """``<op>_host`` for every op of the family, with the op's signature."""
    from .. import schema

    names = []
    for op in schema.family_ops("ngram"):
        name = f"{op.name}_host"
        doc = (
            f"The Paddle op's CPU driver on numpy arrays (no paddle needed): fd_mtp.ops.{op.name}."
        )
        schema.define_wrapper(op, namespace, "_run_host", doc, name=name)
        names.append(name)
    return names


__all__ = sorted({*define_launchers(globals(), "ngram"), *_define_host_variants(globals())})
