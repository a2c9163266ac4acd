"""The pybind module of cmake/gen_ops.py: ``ops_gen.h`` (every op's Paddle entry point declared)
and ``pybind_gen.cc`` (the module ``fd_mtp_ops_pybind`` binding them, with the GPU branch's error
model)."""

from __future__ import annotations

from gen_ops_common import HEADER, Op, entry_signature


def gen_declarations(ops: list[Op]) -> str:
    out = [
        HEADER,
        "// The Paddle-level entry point of every op (one per PD_BUILD_OP).\n",
        "#pragma once\n\n",
    ]
    out.append(
        '#include <cstdint>\n#include <string>\n#include <vector>\n\n#include "paddle/extension.h"\n\n'
    )
    for op in ops:
        out.append(f"// {op.name} (spec {op.spec})\n{entry_signature(op)};\n\n")
    return "".join(out)


def gen_pybind(ops: list[Op]) -> str:
    out = [HEADER]
    out.append(
        """// fd_mtp_ops_pybind: the ops' Paddle entry points bound with pybind11, for dynamic mode.
// This is FastDeploy's own arrangement (its ops are called through a pybind module in dynamic mode,
// spec §1.1) and it matters: paddle 3.3's generic custom-op runner (_C_ops._run_custom_op) copies
// the registry of every loaded custom op on each call, which costs tens of microseconds once a
// library registers a few dozen ops; a direct pybind call costs about 2 us.
//
// Tensors convert through paddle's own caster (paddle/utils/pybind.h), which shares the Python
// tensor's storage, so in-place writes land in the caller's tensors. An exception from an argument
// check (PD_THROW) becomes ValueError. fd_mtp.ops checks Python types before calling, so a
// pybind11 "incompatible function arguments" TypeError only reaches code that bypasses it.
#include <exception>
#include <string>

#include "paddle/utils/pybind.h"
#include "paddle_compat.h"  // after pybind.h: the optional<Tensor> caster
#include "gpu_stream.h"
#include "ops_gen.h"

namespace py = pybind11;

PYBIND11_MODULE(fd_mtp_ops_pybind, m) {
  m.doc() = "fd_mtp ops for dynamic mode (see fd_mtp.ops; call those wrappers, not these)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

"""
    )
    for op in ops:
        out.append(f'  m.def("{op.name}", &{op.entry});\n')
    out.append(
        """
  // The GPU branch's error model (custom_ops/paddle/gpu_stream.h; fd_mtp.ops wraps these).
  m.def("_set_error_mode", &fd_mtp::gpu::set_error_mode, py::arg("mode"));
  m.def("_error_mode", &fd_mtp::gpu::error_mode_name);
  m.def("_check_pending", &fd_mtp::gpu::check_pending);
  m.attr("_with_cuda") =
#ifdef PADDLE_WITH_CUDA
      true;
#else
      false;
#endif
"""
    )
    out.append("}\n")
    return "".join(out)
