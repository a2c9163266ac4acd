"""The CUDA side of cmake/gen_ops.py: ``launchers_gen.h`` (the kernel headers and the standard-dispatch
launchers' declarations), ``cuda_launchers_gen.cc`` (the raw CUDA module's bindings of those
launchers) and ``cuda_params_gen.cc`` (the module's Python classes of the kernels' Params structs,
parsed from the kernel headers)."""

from __future__ import annotations

from pathlib import Path

from gen_ops_common import HEADER, Op, device_flag, params_type, stream_ops


def launcher_decl(op: Op) -> str:
    args = [f"const {params_type(op)}& p"]
    if op.rows is not None:  # the count and the checks are the rows launcher's (rows_decl)
        args.append("const fd_mtp::KernelStatus* preset")
    elif op.status:
        args.append("fd_mtp::KernelStatus* status")
    else:  # the stream's preset status (or null): the op writes nothing on a poisoned stream
        args.append("const fd_mtp::KernelStatus* preset")
    if op.flag is not None:
        args.append("int64_t* count")
    args.append("cudaStream_t stream")
    return f"cudaError_t {op.launcher_name}(" + ", ".join(args) + ")"


def gen_launchers(ops: list[Op]) -> str:
    """``launchers_gen.h``: the kernel headers and the CUDA launcher declarations of every
    standard-dispatch op (included by custom_ops/cuda/launchers.h)."""
    out = [HEADER, "#pragma once\n\n#include <cuda_runtime_api.h>\n\n#include <cstdint>\n\n"]
    kernels = sorted({op.kernel for op in ops if op.kernel and op.cuda})
    out.extend(f'#include "kernels/{k}.h"\n' for k in kernels)
    out.append("\nnamespace fd_mtp {\n\n")
    for op in ops:
        if not op.generated_dispatch or not op.cuda:
            continue
        what = "raw pointers, no allocation, no synchronisation"
        if op.status:
            what += "; *status: the first bad request (nothing written then)"
        else:
            what += "; nothing written while preset (if not null) has a nonzero code"
        if op.flag is not None:
            what += f"; *count: the count {op.flag[0]} is computed from"
        if op.rows is not None:
            out.append(rows_decl(op))
            what = "raw pointers, no synchronisation; after the rows launcher: writes the outputs"
            what += " (nothing while *preset has a nonzero code)"
        out.append(f"// {op.name} (spec {op.spec}): {what}.\n")
        out.append(launcher_decl(op).replace("fd_mtp::", "") + ";\n\n")
    out.append("}  // namespace fd_mtp\n")
    return "".join(out)


def gen_cuda_launchers(ops: list[Op]) -> str:
    """``cuda_launchers_gen.cc``: the raw CUDA module's bindings of every standard-dispatch
    launcher (``bind_launchers``) and ``STREAM_OPS``, the op names by id.

    An op with statuses takes ``status`` (and ``count`` with a flag): a nonzero address is a
    per-call slot; the call synchronises and returns the kernel status ``(code, request, value,
    limit)``, with the count: ``(status, count)``. Address 0 uses the stream's persistent
    StreamStatus (custom_ops/cuda/stream_status.h, docs/gpu_errors.md): no allocation, no sync
    (None). An op with a flag takes the device form of its flag (fd_mtp.schema.device_flag,
    derived here: the comparison is compiled in, an expression without a device form stops the
    generation): ``flag`` (the device address of a bool, or 0), ``offset`` and ``bound`` (the
    host-known ints of the call) and ``bound_ptr`` (the device address of the int64 the bound is
    read from, or 0: ``bound``). On the stream's record, a device ``flag`` is set by a kernel
    after the op (unchanged when the op failed or was skipped) and nothing synchronises (None);
    ``flag`` 0 computes it into the record and synchronises to return ``(status, count,
    flag)``. An op without statuses takes ``sync`` (default True) and skips on a poisoned
    stream (the record's preset)."""
    listed = stream_ops(ops)
    flags = {op.name: device_flag(op) for op in ops if op.flag is not None}
    ids = {op.name: i for i, op in enumerate(listed)}
    out = [HEADER, '#include "common.h"\n\n#include <cstring>\n\n']
    out.append("namespace fd_mtp {\nnamespace pybind {\n\n")
    out.append("namespace {\nconstexpr const char* kStreamOps[] = {\n")
    out.extend(f'    "{op.name}",\n' for op in listed)
    out.append("};\n}  // namespace\n\n")
    out.append(
        "int32_t stream_op_id(const char* name) {\n"
        "  for (size_t i = 0; i < sizeof(kStreamOps) / sizeof(kStreamOps[0]); ++i)\n"
        "    if (std::strcmp(kStreamOps[i], name) == 0) return static_cast<int32_t>(i);\n"
        '  throw std::logic_error(std::string("stream_op_id: no op ") + name);\n}\n\n'
    )
    out.append("void bind_launchers(py::module_& m) {\n")
    names = "".join(f'"{op.name}", ' for op in listed)
    out.append(f'  m.attr("STREAM_OPS") = py::make_tuple({names.rstrip(", ")});\n')
    for op in listed:
        if not op.generated_dispatch:
            continue
        op_id = ids[op.name]
        if op.rows is not None:
            out.append(rows_binding(op, op_id))
            continue
        params = ["const P& p"]
        pyargs = ['py::arg("params")']
        call = ["p"]
        persistent = ["p", "&s->current"]
        if op.status:
            params.append("uintptr_t status")
            pyargs.append('py::arg("status")')
            call.append("as_ptr<KernelStatus>(status)")
        if op.flag is not None:
            params.append("uintptr_t count")
            pyargs.append('py::arg("count")')
            call.append("as_ptr<int64_t>(count)")
            persistent.append("&s->count")
        params.append("uintptr_t stream")
        pyargs.append('py::arg("stream")' if op.flag is not None else 'py::arg("stream") = 0')
        call.append("as_stream(stream)")
        persistent.append("as_stream(stream)")
        if op.flag is not None:
            params += ["uintptr_t flag", "int64_t offset", "uintptr_t bound_ptr", "int64_t bound"]
            pyargs += ['py::arg("flag")', 'py::arg("offset")', 'py::arg("bound_ptr")']
            pyargs.append('py::arg("bound")')
            dflag = flags[op.name]
            flag_args = (
                "offset, kCompare, as_ptr<const int64_t>(bound_ptr), bound, {target}, "
                "as_stream(stream)"
            )
        if not op.status:
            params.append("bool sync_after")
            pyargs.append('py::arg("sync") = true')
        out.append(f"  {{\n    using P = {op.params};\n    m.def(\n")
        out.append(f'        "{op.name}",\n')
        out.append(f"        []({', '.join(params)}) -> py::object {{\n")
        out.append(f'          constexpr const char* op = "{op.name}";\n')
        if op.flag is not None:
            out.append(f"          // the flag {op.flag[0]} = {op.flag[1]} on the device\n")
            out.append(
                "          constexpr FlagCompare kCompare = "
                f"static_cast<FlagCompare>({dflag.compare_id});  // {dflag.compare}\n"
            )
        if op.status:
            out.append("          if (status == 0) {  // the stream's persistent record\n")
            out.append("            StreamStatus* s = stream_status_for(stream, op);\n")
            out.append("            throw_if(stream_status_begin(s, as_stream(stream)), op);\n")
            out.append(f"            throw_if({op.launcher_name}({', '.join(persistent)}), op);\n")
            if op.flag is not None:
                out.append(
                    "            bool* target = flag != 0 ? as_ptr<bool>(flag) : &s->flag;\n"
                )
                out.append(
                    "            throw_if(stream_flag(&s->current, &s->count, "
                    + flag_args.format(target="target")
                    + "), op);\n"
                )
            out.append(
                f"            throw_if(stream_status_commit(s, {op_id}, as_stream(stream)), op);\n"
            )
            if op.flag is None:
                out.append("            return py::none();\n")
            else:
                out.append("            if (flag != 0) return py::none();  // no sync\n")
                out.append(
                    "            const StreamStatus host = fetch_stream_status(s, stream, op);\n"
                )
                out.append(
                    "            return py::make_tuple(status_tuple(host.current), host.count, "
                    "host.flag);\n"
                )
            out.append("          }\n")
            out.append('          require(status, op, "status");\n')
        if op.flag is not None:
            out.append('          require(count, op, "count");\n')
        out.append(f"          throw_if({op.launcher_name}({', '.join(call)}), op);\n")
        if op.flag is not None:
            out.append("          if (flag != 0)\n")
            out.append(
                "            throw_if(stream_flag(as_ptr<KernelStatus>(status), "
                "as_ptr<int64_t>(count), "
                + flag_args.format(target="as_ptr<bool>(flag)")
                + "), op);\n"
            )
        if not op.status:
            out.append("          if (sync_after) sync(stream, op);\n")
            out.append("          return py::none();\n")
            doc = "Returns None; sync=False leaves the stream running."
        elif op.flag is None:
            out.append("          return status_tuple(fetch_status(status, stream, op));\n")
            doc = "Returns (code, request, value, limit); status=0: the stream's record, None."
        else:
            out.append("          const KernelStatus st = fetch_status(status, stream, op);\n")
            out.append(
                "          return py::make_tuple(status_tuple(st), fetch_int64(count, stream, op));\n"
            )
            doc = (
                "status=0: the stream's record; flag=0 synchronises and returns ((code, request, "
                "value, limit), count, flag), a device flag returns None (no sync). A per-call "
                "status: returns ((code, request, value, limit), count), the device flag set too."
            )
        out.append(f'        }},\n        {", ".join(pyargs)},\n        "{doc}");\n  }}\n')
    for op in ops:  # the standard-dispatch ops without statuses
        if not op.generated_dispatch or not op.cuda or op.status:
            continue
        out.append(f"  {{\n    using P = {op.params};\n    m.def(\n")
        out.append(f'        "{op.name}",\n')
        out.append("        [](const P& p, uintptr_t stream, bool sync_after) {\n")
        out.append(f'          constexpr const char* op = "{op.name}";\n')
        out.append("          // the stream's preset: on a poisoned stream the op writes nothing\n")
        out.append("          const StreamStatus* s = stream_status_for(stream, op);\n")
        out.append(
            f"          throw_if({op.launcher_name}(p, &s->preset, as_stream(stream)), op);\n"
        )
        out.append("          if (sync_after) sync(stream, op);\n")
        out.append(
            '        },\n        py::arg("params"), py::arg("stream") = 0, py::arg("sync") = true,\n'
        )
        out.append(
            '        "Returns None; sync=False leaves the stream running. Writes nothing on a "\n'
            '        "poisoned stream.");\n  }\n'
        )
    out.append("}\n\n}  // namespace pybind\n}  // namespace fd_mtp\n")
    return "".join(out)


def rows_decl(op: Op) -> str:
    """The declaration of the rows launcher of an op with fd_mtp.schema.Rows."""
    return (
        f"// {op.name}: counts the outputs' rows {op.rows.dim} into *rows and checks the input "
        "(*status: the first bad request).\n"
        f"cudaError_t {op.rows_launcher}(const {params_type(op).replace('fd_mtp::', '')}& p, "
        "KernelStatus* status, int64_t* rows, cudaStream_t stream);\n"
    )


def rows_binding(op: Op, op_id: int) -> str:
    """The raw module's two bindings of an op with fd_mtp.schema.Rows, on the stream's
    persistent record: ``<op>_rows(params, stream, read)`` runs the rows launcher and commits
    its status; ``read`` synchronises and returns ``((code, request, value, limit), rows)``
    (else None). ``<op>(params, live, stream, sync)`` writes the outputs: ``live`` 0 after
    ``<op>_rows`` (the stream's preset: nothing written on a poisoned stream); else the
    fixed-capacity variant in one call, the count kept on the device at ``live`` (the Params'
    own field too), nothing read on the host."""
    rows, launcher = op.rows_launcher, op.launcher_name
    begin = "StreamStatus* s = stream_status_for(stream, op);\n"
    begin += "          throw_if(stream_status_begin(s, as_stream(stream)), op);\n"
    commit = f"throw_if(stream_status_commit(s, {op_id}, as_stream(stream)), op);\n"
    return (
        f'  {{\n    using P = {op.params};\n    m.def(\n        "{op.name}_rows",\n'
        "        [](const P& p, uintptr_t stream, bool read) -> py::object {\n"
        f'          constexpr const char* op = "{op.name}";\n          {begin}'
        f"          throw_if({rows}(p, &s->current, &s->count, as_stream(stream)), op);\n"
        f"          {commit}          if (!read) return py::none();\n"
        "          const StreamStatus host = fetch_stream_status(s, stream, op);\n"
        "          return py::make_tuple(status_tuple(host.current), host.count);\n"
        '        },\n        py::arg("params"), py::arg("stream") = 0, py::arg("read") = true,\n'
        '        "Counts the rows and checks (the stream\'s record). read: synchronises and returns "\n'
        '        "((code, request, value, limit), rows), else None.");\n'
        f'    m.def(\n        "{op.name}",\n'
        "        [](const P& p, uintptr_t live, uintptr_t stream, bool sync_after) {\n"
        f'          constexpr const char* op = "{op.name}";\n'
        "          if (live == 0) {  // after <op>_rows: the stream's preset\n"
        "            const StreamStatus* s = stream_status_for(stream, op);\n"
        f"            throw_if({launcher}(p, &s->preset, as_stream(stream)), op);\n"
        "          } else {  // fixed capacity: the count stays on the device\n"
        f"            {begin.replace('          ', '            ')}"
        f"            throw_if({rows}(p, &s->current, as_ptr<int64_t>(live), as_stream(stream)), op);\n"
        f"            throw_if({launcher}(p, &s->current, as_stream(stream)), op);\n"
        f"            {commit}          }}\n"
        "          if (sync_after) sync(stream, op);\n"
        '        },\n        py::arg("params"), py::arg("live"), py::arg("stream") = 0,\n'
        '        py::arg("sync") = true,\n'
        '        "Writes the outputs: live 0 after the rows call; else the fixed-capacity variant "\n'
        '        "(the count at live, on the device; rows past it zero).");\n  }\n'
    )


def parse_params(header: Path) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """The ``struct <Name>Params`` of a kernel header: [(struct, [(field, type, is_pointer)])]."""
    import re

    structs = []
    text = header.read_text()
    for m in re.finditer(r"^struct (\w+Params) \{\n(.*?)^\};", text, re.S | re.M):
        fields = []
        for line in m.group(2).splitlines():
            line = line.split("//", 1)[0].strip()
            if not line:
                continue
            fm = re.fullmatch(r"(const\s+)?([\w:]+)\s*(\*)?\s*(\w+);", line)
            if fm is None:
                raise ValueError(f"{header}: cannot bind Params field {line!r}")
            fields.append((fm.group(4), fm.group(2), fm.group(3) is not None))
        structs.append((m.group(1), fields))
    return structs


def gen_cuda_params(headers: list[Path]) -> str:
    """The fd_mtp_cuda module's Python classes of every kernel Params struct: pointer fields as
    integer device addresses, scalars as plain values (enums as their int)."""
    out = [HEADER, '#include "common.h"\n\nnamespace fd_mtp {\nnamespace pybind {\n\n']
    out.append("void bind_params(py::module_& m) {\n")
    for header in headers:
        for struct, fields in parse_params(header):
            out.append(f'  {{\n    using P = {struct};\n    py::class_<P> c(m, "{struct}");\n')
            out.append("    c.def(py::init([]() { return P{}; }));\n")
            for name, kind, pointer in fields:
                if pointer:
                    out.append(f'    pointer_field(c, "{name}", &P::{name});\n')
                elif kind in ("bool", "float", "int32_t", "int64_t", "uint64_t"):
                    out.append(f'    c.def_readwrite("{name}", &P::{name});\n')
                else:  # an enum: read and written as its integer value
                    out.append(
                        f'    c.def_property("{name}", [](const P& s) {{ return static_cast<int64_t>(s.{name}); }},\n'
                        f"                   [](P& s, int64_t v) {{ s.{name} = static_cast<{kind}>(v); }});\n"
                    )
            out.append("  }\n")
    out.append("}\n\n}  // namespace pybind\n}  // namespace fd_mtp\n")
    return "".join(out)
