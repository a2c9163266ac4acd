"""The standard dispatch of cmake/gen_ops.py: ``<op>_apply`` of an op with ``cpu=`` in its schema
(the CPU driver, or the CUDA launcher on the stream's persistent record with the flag computed on
the device), and ``stream_ops.gen.cc``, the Paddle GPU branch's table of the ops with statuses."""

from __future__ import annotations

from gen_ops_common import (
    CPP_TYPES,
    DTYPES,
    HEADER,
    Op,
    device_flag,
    host_reads,
    params_type,
    stream_ops,
)
from gen_ops_expr import cpp_expr


def flag_expr(op: Op, expr: str) -> str:
    """The C++ form of a ``flag`` expression (see fd_mtp.schema.Op)."""
    import re

    out = re.sub(r"\bdims\.(\w+)", r"a.dims.\1", expr)
    return re.sub(r"\bhost\.(\w+)", r"host_\1", out)


def gen_dispatch(op: Op) -> str:
    """``<op>_apply`` of a standard-dispatch op: the CPU driver or the CUDA launcher on the op's
    place, the kernel status raised by name, the ``flag`` set on the host."""
    if op.rows is not None:
        return gen_rows_dispatch(op)
    cls = op.entry
    ref = op.place_ref
    table = f"k{cls}Status"
    ret = "std::vector<paddle::Tensor>" if op.outputs else "void"
    out = [
        f"// The standard dispatch of {op.name} (fd_mtp/schema: cpu={op.cpu}, launcher "
        f"{op.launcher_name}).\n",
        f"{ret} {op.name}_apply({cls}Args& a, {params_type(op)}& p) {{\n",
        "  using namespace fd_mtp;\n",
    ]
    if op.check:
        out.append(f"  {op.name}_check(a, p);\n")
    out.append(f"  const auto& ref = a.{ref};\n")
    done = "return;"
    if op.outputs:  # allocated on the op's place, handed to the kernel, returned
        attrs = {a.name for a in op.attrs}
        for o in op.outputs:
            shape = ", ".join(
                str(add)
                if name is None
                else (f"a.{name}" if name in attrs else f"a.dims.{name}")
                + (f" + {add}" if add else "")
                for name, add in o.dims
            )
            dt = f"a.{o.like}.dtype()" if o.like else f"paddle::DataType::{DTYPES[o.dtype]}"
            if o.fill is None:
                out.append(f"  auto {o.name} = compat::empty({{{shape}}}, {dt}, ref.place());\n")
            else:
                out.append(
                    f"  auto {o.name} = compat::full({{{shape}}}, {o.fill}, {dt}, ref.place());\n"
                )
        for o in op.outputs:
            if o.param is not None:
                data = "data()" if o.like else f"data<{CPP_TYPES[o.dtype]}>()"
                out.append(f"  p.{o.param} = {o.name}.{data};\n")
        done = "return {" + ", ".join(o.name for o in op.outputs) + "};"
    flag_line = ""
    if op.flag is not None:
        flag_line = f"    *a.{op.flag[0]}.data<bool>() = {flag_expr(op, op.flag[1])};\n"
    if op.skip is not None:  # nothing to do: no kernel runs
        out.append(f"  if ({cpp_expr(op, op.skip)}) {done}\n")
    out.append("  if (ref.is_cpu()) {\n")
    for w in op.workspaces:  # the CPU's workspace: a vector of this call
        if not w.cpu:
            continue
        cpp = CPP_TYPES[w.dtype]
        out.append(f"    const int64_t {w.param}_n = {cpp_expr(op, w.count)};\n")
        n = f"{w.param}_n"
        out.append(
            f"    std::vector<{cpp}> {w.param}_ws(static_cast<size_t>({n} > 0 ? {n} : 1));\n"
        )
        out.append(f"    p.{w.param} = {w.param}_ws.data();\n")
    for name in host_reads(op):
        out.append(f"    // {name}: a CPU tensor on the CPU branch.\n")
        out.append(
            f'    const int64_t host_{name} = check::host_int64(a.op, "{name}", a.{name});\n'
        )
    if not op.status:
        out.append(f"    {op.cpu}(p);\n")
    elif op.flag is None:
        out.append(f"    check::status(a.op, {op.cpu}(p), {table});\n")
    else:
        out.append("    int64_t count = 0;\n")
        out.append(f"    check::status(a.op, {op.cpu}(p, &count), {table});\n")
        out.append(flag_line)
    if not op.cuda:  # a host op: every tensor is checked to be on the CPU
        out.append(f"    {done}\n  }}\n")
        out.append(f'  check::unsupported_place(a.op, "{ref}", ref);\n}}\n')
        return "".join(out)
    out.append(f"    {done}\n  }}\n#ifdef PADDLE_WITH_CUDA\n")
    out.append(gen_gpu_branch(op))
    if op.outputs:
        out.append(f"  {done}\n")
    out.append("#else\n")
    out.append(f'  check::unsupported_place(a.op, "{ref}", ref);\n')
    out.append("#endif\n}\n")
    return "".join(out)


def gen_rows_dispatch(op: Op) -> str:
    """``<op>_apply`` of a standard-dispatch op whose outputs' rows are data (fd_mtp.schema.Rows):
    the count and every check first (the host count ``<op>_rows_cpu`` on the CPU; on a GPU the
    rows launcher on the stream's record, its count read back: FastDeploy's shape read, skipped
    where the rows are host-known), then the outputs allocated and written (the CPU driver, or
    the launcher with the stream's preset: it writes nothing on a poisoned stream)."""
    rows, cls, ref = op.rows, op.entry, op.place_ref
    if op.check or op.skip is not None:
        raise ValueError(f"{op.name}: rows with a check hook or skip are not generated")
    out = [
        f"// The standard dispatch of {op.name} (fd_mtp/schema: cpu={op.cpu}, rows "
        f"{op.rows_cpu} / {op.rows_launcher}, launcher {op.launcher_name}).\n",
        f"std::vector<paddle::Tensor> {op.name}_apply({cls}Args& a, {params_type(op)}& p) {{\n",
        "  using namespace fd_mtp;\n",
        f"  const auto& ref = a.{ref};\n",
    ]
    cpu_ws = [w for w in op.workspaces if w.cpu]
    out += [f"  std::vector<{CPP_TYPES[w.dtype]}> {w.param}_ws;  // the CPU's\n" for w in cpu_ws]
    out.append("  if (ref.is_cpu()) {\n")
    for w in cpu_ws:
        out.append(f"    {w.param}_ws.resize(static_cast<size_t>(std::max<int64_t>(")
        out.append(f"{cpp_expr(op, w.count)}, 1)));\n    p.{w.param} = {w.param}_ws.data();\n")
    out.append(f"    check::status(a.op, {op.rows_cpu}(p, &a.dims.{rows.dim}), k{cls}Status);\n")
    out.append("  } else {\n#ifdef PADDLE_WITH_CUDA\n")
    out.append(gpu_workspaces(op, "    "))
    out.append(f"    gpu::Op g(a.op, k{cls}StreamOp, ref);\n")
    out.append(
        f"    check::cuda(a.op, {op.rows_launcher}(p, g.status(), g.count(), g.stream()));\n"
    )
    out.append("    g.commit();\n")
    count = f"a.dims.{rows.dim} = "
    if rows.when is not None:  # host-known unless `when`: no read back
        count += f"!({cpp_expr(op, rows.when)}) ? {cpp_expr(op, rows.otherwise)} : "
    out.append(f"    {count}g.host_count();\n")
    out.append(f'#else\n    check::unsupported_place(a.op, "{ref}", ref);\n#endif\n  }}\n')
    out.append(f"  p.{rows.param} = a.dims.{rows.dim};\n")
    for o in op.outputs:
        shape = ", ".join(
            str(add) if name is None else f"a.dims.{name}" + (f" + {add}" if add else "")
            for name, add in o.dims
        )
        dt = f"a.{o.like}.dtype()" if o.like else f"paddle::DataType::{DTYPES[o.dtype]}"
        fill = (
            f"compat::empty({{{shape}}}, "
            if o.fill is None
            else f"compat::full({{{shape}}}, {o.fill}, "
        )
        out.append(f"  auto {o.name} = {fill}{dt}, ref.place());\n")
        if o.param is not None:
            data = "data()" if o.like else f"data<{CPP_TYPES[o.dtype]}>()"
            out.append(f"  p.{o.param} = {o.name}.{data};\n")
    done = "return {" + ", ".join(o.name for o in op.outputs) + "};"
    out.append(f"  if (ref.is_cpu()) {{\n    {op.cpu}(p);\n    {done}\n  }}\n")
    out.append("#ifdef PADDLE_WITH_CUDA\n")
    out.append(
        f"  check::cuda(a.op, {op.launcher_name}(p, gpu::preset(a.op, ref), ref.stream()));\n"
    )
    out.append("  gpu::finish(a.op, ref);\n#endif\n")
    out.append(f"  {done}\n}}\n")
    return "".join(out)


def gpu_workspaces(op: Op, indent: str = "  ") -> str:
    """The GPU branch's workspaces: persistent per stream, reallocated only when they grow."""
    out = []
    for w in op.workspaces:
        cpp = CPP_TYPES[w.dtype]
        out.append(f"{indent}const int64_t {w.param}_n = {cpp_expr(op, w.count)};  // entries\n")
        n = f"{w.param}_n"
        out.append(
            f'{indent}p.{w.param} = static_cast<{cpp}*>(gpu::workspace(a.op, ref, "{w.key}", '
            f"({n} > 0 ? {n} : 1) * static_cast<int64_t>(sizeof({cpp})), "
            f"{str(w.zero).lower()}));\n"
        )
    return "".join(out)


def device_expr(text: str) -> str:
    """A host-known expression of a device flag (``dims.<dim>``, ``p.<field>``, ints) in C++."""
    import re

    return re.sub(r"\bdims\.(\w+)", r"a.dims.\1", text)


def gen_gpu_branch(op: Op) -> str:
    """The GPU branch of a standard-dispatch op (docs/gpu_errors.md): the launcher on the stream's
    persistent record (custom_ops/paddle/gpu_stream.h), its error committed to the record; the
    flag computed on the device. No allocation and no synchronisation, except in checked mode and
    for FastDeploy's CPU flag (the one copy upstream makes). An op without a status runs with the
    stream's preset (it writes nothing on a poisoned stream)."""
    cls = op.entry
    launcher = op.launcher_name
    out = [gpu_workspaces(op)]  # persistent per stream, reallocated only when it grows
    if not op.status:
        out.append(f"  check::cuda(a.op, {launcher}(p, gpu::preset(a.op, ref), ref.stream()));\n")
        out.append("  gpu::finish(a.op, ref);\n")
        return "".join(out)
    out.append(f"  gpu::Op g(a.op, k{cls}StreamOp, ref);\n")
    count_arg = ", g.count()" if op.flag is not None else ""
    out.append(f"  check::cuda(a.op, {launcher}(p, g.status(){count_arg}, g.stream()));\n")
    if op.flag is not None:
        form = device_flag(op)
        name = op.flag[0]
        out.append(f"  // {name} = {op.flag[1]}, on the device ({form.compare})\n")
        out.append(f"  auto& flag = a.{name};\n")
        out.append("  bool* target = flag.is_cpu() ? g.record_flag() : flag.data<bool>();\n")
        if form.bound_tensor is not None:
            b = form.bound_tensor
            out.append(f"  const auto& bound = a.{b};  // read on the device when it lives there\n")
            out.append(
                "  const int64_t* bound_ptr = bound.is_cpu() ? nullptr : bound.data<int64_t>();\n"
            )
            out.append(
                "  const int64_t bound_value = bound.is_cpu() ? bound.data<int64_t>()[0] : 0;\n"
            )
        else:
            out.append("  const int64_t* bound_ptr = nullptr;\n")
            out.append(f"  const int64_t bound_value = {device_expr(form.bound)};\n")
        out.append(
            f"  check::cuda(a.op, stream_flag(g.status(), g.count(), {device_expr(form.offset)}, "
            f"static_cast<FlagCompare>({form.compare_id}), bound_ptr, bound_value, target, "
            "g.stream()));\n"
        )
    out.append("  g.commit();\n")
    if op.flag is not None:
        out.append(
            "  if (flag.is_cpu()) {  // FastDeploy's CPU flag: the one copy upstream makes\n"
        )
        out.append("    bool ok = false;\n    const bool value = g.host_flag(&ok);\n")
        out.append("    if (ok) *flag.data<bool>() = value;\n  }\n")
    return "".join(out)


def gen_stream_ops(ops: list[Op]) -> str:
    """``stream_ops.gen.cc``: the Paddle GPU branch's table of the ops with statuses by their id
    in a stream's pending record (gpu::stream_op_info), so that an error raised at a later sync
    names the op that failed and its argument."""
    listed = stream_ops(ops)
    out = [HEADER, "#ifdef PADDLE_WITH_CUDA\n"]
    out.extend(f'#include "{op.name}.gen.h"\n' for op in listed)
    out.append("\nnamespace fd_mtp {\nnamespace gpu {\n\nnamespace {\n")
    out.append("const StreamOpInfo kStreamOps[] = {\n")
    for i, op in enumerate(listed):
        table = f"k{op.entry}Status"
        out.append(f'    {{"{op.name}", {table}, sizeof({table}) / sizeof({table}[0])}},  // {i}\n')
    out.append("};\n}  // namespace\n\n")
    out.append(
        "const StreamOpInfo* stream_op_info(int32_t id) {\n"
        "  if (id < 0 || id >= static_cast<int32_t>(sizeof(kStreamOps) / sizeof(kStreamOps[0])))\n"
        "    return nullptr;\n"
        "  return &kStreamOps[id];\n}\n\n"
    )
    out.append("}  // namespace gpu\n}  // namespace fd_mtp\n#endif  // PADDLE_WITH_CUDA\n")
    return "".join(out)
