"""The per-op Paddle binding of cmake/gen_ops.py: ``<op>.gen.h`` (the op's Args, status table and
the prototypes of what is hand-written) and ``<op>.gen.cc`` (the entry point with every generated
check, the Params fill, the ``PD_BUILD_OP`` registration and, for a standard-dispatch op, its
``<op>_apply`` from gen_ops_dispatch)."""

from __future__ import annotations

from gen_ops_common import (
    ATTR_CPP,
    ATTR_PADDLE,
    AXIS_WORDS,
    CPP_TYPES,
    DTYPES,
    HEADER,
    Op,
    Tensor,
    _stream_op_ids,
    attr_param,
    entry_signature,
    params_type,
    tensor_param,
)
from gen_ops_dispatch import gen_dispatch
from gen_ops_expr import cpp_expr, cpp_message


def dim_names(op: Op) -> list[str]:
    names: list[str] = []
    for t in op.tensors:
        for d in t.dims or ():
            for n in (d.name, d.lower_name):
                if n and not n.isdigit() and n not in names:
                    names.append(n)
        if t.count is not None and t.count not in names:
            names.append(t.count)
    if op.rows is not None and op.rows.dim not in names:  # the outputs' data-dependent rows
        names.append(op.rows.dim)
    return names + [n for n in op.computed_dims if n not in names]


def dtype_check(op: Op, t: Tensor, var: str) -> str | None:
    if "any" in t.dtypes:
        return None
    if len(t.dtypes) == 1:
        return f'check::dtype(kOp, "{t.name}", {var}, paddle::DataType::{DTYPES[t.dtypes[0]]});'
    allowed = ", ".join(f"paddle::DataType::{DTYPES[d]}" for d in t.dtypes)
    return f'check::dtype_in(kOp, "{t.name}", {var}, {{{allowed}}});'


def shape_checks(op: Op, t: Tensor, var: str, bound: dict[str, str]) -> list[str]:
    """C++ lines checking ``t``'s shape; binds new dim names into ``bound`` (name -> tensor)."""
    lines: list[str] = []
    dims = t.dims
    if dims is None:
        return lines
    if len(dims) == 1 and dims[0].name == "1":
        lines.append(
            f'if ({var}.numel() != 1) check::fail(kOp, "{t.name}", "must hold exactly one element, got shape ", '
            f"check::shape_str({var}.shape()));"
        )
        return lines
    if (
        len(dims) == 1
        and dims[0].at_least is not None
        and dims[0].name is None
        and dims[0].lower_name is None
    ):
        lines.append(f'check::numel_at_least(kOp, "{t.name}", {var}, {dims[0].at_least});')
        return lines
    if len(dims) == 1:
        d = dims[0]
        is_batch = "B" in (d.name, d.lower_name)
        lines.append(f'check::vec(kOp, "{t.name}", {var}, {str(is_batch).lower()});')
    else:
        lines.append(f'check::rank(kOp, "{t.name}", {var}, {len(dims)});')
    for axis, d in enumerate(dims):
        if d.lower_name is not None:
            src = bound.get(d.lower_name)
            if src is None:
                raise ValueError(
                    f"{op.name}.{t.name}: >= {d.lower_name} before {d.lower_name} is bound"
                )
            is_batch = d.lower_name == "B"
            lines.append(
                f'check::dim_at_least(kOp, "{t.name}", {var}, {axis}, a.dims.{d.lower_name}, '
                f'"{d.lower_name}", "{src}", {str(is_batch).lower()});'
            )
            if d.name is None:
                continue
        if d.name is not None and d.name not in bound:
            low = (
                d.at_least if d.at_least is not None else (1 if axis > 0 else None)
            )  # columns: >= 1
            if low is not None:
                lines.append(
                    f'check::dim_at_least(kOp, "{t.name}", {var}, {axis}, {low}, nullptr, nullptr, false);'
                )
            lines.append(f"a.dims.{d.name} = {var}.shape()[{axis}];")
            bound[d.name] = t.name
        elif d.name is not None:
            lines.append(
                f'check::dim_equal(kOp, "{t.name}", {var}, {axis}, a.dims.{d.name}, "{d.name}", "{bound[d.name]}");'
            )
        elif d.at_least is not None:
            lines.append(
                f'check::dim_at_least(kOp, "{t.name}", {var}, {axis}, {d.at_least}, nullptr, nullptr, false);'
            )
    return lines


def param_value(op: Op, expr: str) -> str:
    """A Params field's C++ value from an ``extra_params`` expression."""
    if expr.startswith("numel(") and expr.endswith(")"):
        name = expr[6:-1]
        t = op.arg(name)
        if t.optional:
            return f"(a.{name} ? a.{name}->numel() : 0)"
        return f"a.{name}.numel()"
    for fn, axis in (("rows(", 0), ("cols(", 1)):
        if expr.startswith(fn) and expr.endswith(")"):
            name = expr[len(fn) : -1]
            t = op.arg(name)
            if t.optional:
                return f"(a.{name} ? a.{name}->shape()[{axis}] : 0)"
            return f"a.{name}.shape()[{axis}]"
    if expr.startswith("row_bytes(") and expr.endswith(")"):  # a [rows, cols] tensor's row size
        name = expr[10:-1]
        return f"a.{name}.shape()[1] * static_cast<int64_t>(phi::SizeOf(a.{name}.dtype()))"
    if expr.isdigit() or expr in ("true", "false"):  # a fixed value of the op
        return expr
    if expr.startswith("float_kind(") and expr.endswith(")"):  # a float tensor's FloatKind
        return f"check::float_kind_of(a.{expr[11:-1]})"
    for fn, form in (("data(", "a.{}.data()"), ("size(", "static_cast<int64_t>(a.{}.size())")):
        if expr.startswith(fn) and expr.endswith(")"):  # of an int64[] attribute
            return form.format(expr[len(fn) : -1])
    if expr in dim_names(op):
        return f"a.dims.{expr}"
    for a in op.attrs:
        if a.name == expr:
            return f"a.{expr}"
    return cpp_expr(op, expr)  # a computed field: a schema expression


def gen_op_header(op: Op) -> str:
    cls = op.entry
    dims = dim_names(op)
    out = [HEADER, "#pragma once\n", "#include <limits>\n#include <string>\n#include <vector>\n"]
    out.append('#include "check.h"\n#include "gpu_stream.h"\n')
    if op.kernel:
        out.append(f'#include "../kernels/{op.kernel}.h"\n')
    out.extend(f'#include "{h}"\n' for h in op.host_includes)  # of host_params' helpers
    out.append("\n")
    # Args
    out.append(f"// {op.name} (spec {op.spec}): the checked arguments of the op.\n")
    out.append(f"struct {cls}Args {{\n")
    out.append(f'  static constexpr const char* op = "{op.name}";\n')
    for t in op.tensors:
        role = t.role + (", optional" if t.optional else "") + (", on the CPU" if t.cpu else "")
        role += ", any device" if t.any_place else ""
        out.append(f"  {tensor_param(t)};  // {t.spec} {role}\n")
    for a in op.attrs:
        out.append(f"  {ATTR_CPP[a.type]} {a.name};\n")
    out.append("  struct {\n")
    for d in dims:
        out.append(f"    int64_t {d} = 0;\n")
    out.append("  } dims;\n};\n\n")
    # status table
    if op.status:
        out.append(f"inline constexpr fd_mtp::StatusInfo k{cls}Status[] = {{\n")
        for s in op.status:
            what = s.what.replace('"', '\\"')
            out.append(f'    {{fd_mtp::{s.code}, "{s.argument}", "{what}"}},\n')
        out.append("};\n\n")
    if op.name in _stream_op_ids():
        out.append(
            "// The op's id in a stream's pending record (stream_ops.gen.cc, the raw module's "
            "STREAM_OPS).\n"
        )
        out.append(f"inline constexpr int32_t k{cls}StreamOp = {_stream_op_ids()[op.name]};\n\n")
    ret = "std::vector<paddle::Tensor>" if op.returns else "void"
    params_arg = f", {params_type(op)}& p" if op.params else ""
    if op.generated_dispatch:
        out.append("// Generated from the schema's standard dispatch (in <op>.gen.cc).\n")
    else:
        out.append(
            "// Hand-written in the op's custom_ops/paddle/*.cc: checks no schema expresses, then "
            "dispatch.\n"
        )
    out.append(f"{ret} {op.name}_apply({cls}Args& a{params_arg});\n")
    if op.check:
        out.append(
            "// Hand-written in the op's custom_ops/paddle/*.cc: checks no schema expresses (run "
            "before the dispatch).\n"
        )
        out.append(f"void {op.name}_check({cls}Args& a{params_arg});\n")
    if op.returns and not op.outputs:  # hand-written shape inference
        shape_params = []
        dtype_params = []
        for t in op.tensors:
            if t.optional:
                shape_params.append(f"const paddle::optional<std::vector<int64_t>>& {t.name}_shape")
                dtype_params.append(f"const paddle::optional<paddle::DataType>& {t.name}_dtype")
            else:
                shape_params.append(f"const std::vector<int64_t>& {t.name}_shape")
                dtype_params.append(f"const paddle::DataType& {t.name}_dtype")
        shape_params += [attr_param(a) for a in op.attrs]
        out.append(
            f"std::vector<std::vector<int64_t>> {op.name}_infer_shape("
            + ",\n    ".join(shape_params)
            + ");\n"
        )
        out.append(
            f"std::vector<paddle::DataType> {op.name}_infer_dtype("
            + ",\n    ".join(dtype_params)
            + ");\n"
        )
    out.append("\n")
    return "".join(out)


def gen_op_source(op: Op) -> str:
    """``<op>.gen.cc``: the entry point (every check, the Params fill, then apply), the
    registration, and the generated dispatch of a standard-dispatch op."""
    cls = op.entry
    out = [HEADER, f'#include "{op.name}.gen.h"\n\n']
    # entry point
    out.append(entry_signature(op) + " {\n")
    out.append("  using namespace fd_mtp;\n")
    out.append(f'  constexpr const char* kOp = "{op.name}";\n')
    init = ", ".join([t.name for t in op.tensors] + [a.name for a in op.attrs] + ["{}"])
    out.append(f"  {cls}Args a{{{init}}};\n")
    bound: dict[str, str] = {}
    for t in op.check_order:  # the batch-defining tensor first: it binds B
        var = f"(*a.{t.name})" if t.optional else f"a.{t.name}"
        lines = [line for line in [dtype_check(op, t, var)] if line]
        if t.name == op.batch and t.dims[0].add:  # [B+<add>] (cu_seqlens_q: [bsz + 1])
            add = t.dims[0].add
            lines.append(f'a.dims.B = check::batch_plus(kOp, "{t.name}", {var}, {add});')
            bound["B"] = t.name
        elif t.name == op.batch:
            lines.append(f'a.dims.B = check::vec(kOp, "{t.name}", {var}, true);')
            bound["B"] = t.name
        else:
            lines += shape_checks(op, t, var, bound)
        lines.append(f'check::contiguous(kOp, "{t.name}", {var});')
        if t.optional:
            out.append(f"  if (a.{t.name}) {{\n")
            out.extend(f"    {line}\n" for line in lines)
            out.append("  }\n")
        else:
            out.extend(f"  {line}\n" for line in lines)
    for a in op.attrs:
        if a.min is None and a.max is None:
            continue
        cpp = ATTR_CPP[a.type]
        lo = a.min if a.min is not None else f"std::numeric_limits<{cpp}>::lowest()"
        hi = a.max if a.max is not None else f"std::numeric_limits<{cpp}>::max()"
        out.append(f'  check::attr_range<{cpp}>(kOp, "{a.python_name}", a.{a.name}, {lo}, {hi});\n')
    # places
    ref = op.place_ref
    ref_t = op.arg(ref)
    ref_var = f"(*a.{ref})" if ref_t.optional else f"a.{ref}"
    for t in op.tensors:
        var = f"(*a.{t.name})" if t.optional else f"a.{t.name}"
        guard = f"if (a.{t.name}) " if t.optional else ""
        if t.any_place:
            continue
        if t.cpu and op.flag is not None and op.flag[0] == t.name and op.cuda:
            # the flag: FastDeploy's CPU tensor, or one on the op's device (set on the device)
            out.append(
                f'  {guard}if (!{var}.is_cpu()) check::same_place(kOp, "{t.name}", {var}, '
                f'{ref_var}, "{ref}");\n'
            )
        elif t.cpu:
            out.append(f'  {guard}check::on_cpu(kOp, "{t.name}", {var});\n')
        elif t.name != ref:
            out.append(f'  {guard}check::same_place(kOp, "{t.name}", {var}, {ref_var}, "{ref}");\n')
    for t in op.tensors:  # token counts, read on the host (a device tensor: one sync)
        if t.count is not None:
            out.append(f'  a.dims.{t.count} = check::host_count(kOp, "{t.name}", a.{t.name});\n')
    for group in op.together:  # optional tensors given all together or none (Together)
        first, what = group.message()
        given = [f"static_cast<bool>(a.{n})" for n in group.tensors]
        out.append(
            f"  if ({' != '.join(given[:2])}"
            + "".join(f" || {given[0]} != {g}" for g in given[2:])
            + ")\n"
        )
        out.append(f'    check::fail(kOp, "{first}", "{what}");\n')
    for t in op.tensors:  # a dtype equal to another tensor's
        if t.same_dtype is not None:
            out.append(f'  check::dtype(kOp, "{t.name}", a.{t.name}, a.{t.same_dtype}.dtype());\n')
    for rule in op.checks:  # rules on attributes and dims, the same text in every layer (Check)
        out.append(f"  if (!({cpp_expr(op, rule.expr)}))\n")
        out.append(f'    check::fail(kOp, "{rule.argument}", {cpp_message(op, rule.message)});\n')
    out += computed_dims(op)
    # Params
    call_args = "a"
    if op.params:
        out.append(f"  {params_type(op)} p{{}};\n")
        for t in op.tensors:
            if t.param is None or t.count is not None or "any" in t.dtypes:
                continue
            # one dtype: a typed pointer; several (float32|float16|bfloat16): void*
            data = f"data<{CPP_TYPES[t.dtypes[0]]}>()" if len(t.dtypes) == 1 else "data()"
            if t.optional:
                out.append(f"  p.{t.param} = a.{t.name} ? a.{t.name}->{data} : nullptr;\n")
            else:
                out.append(f"  p.{t.param} = a.{t.name}.{data};\n")
        for a in op.attrs:
            if a.param is not None:
                out.append(f"  p.{a.param} = a.{a.name};\n")
        for fld, expr in op.extra_params.items():
            out.append(f"  p.{fld} = {param_value(op, expr)};\n")
        out.extend(f"  p.{fld} = {cpp};  // a host helper\n" for fld, cpp in op.host_params.items())
        call_args = "a, p"
    for rule in op.requires:  # a named dim against the attributes (Require)
        t = op.arg(rule.tensor)
        axis = next(i for i, d in enumerate(t.dims) if d.name == rule.dim)
        unit = AXIS_WORDS.get(axis, f"entries on axis {axis}")
        need = attr_expr(op, rule.at_least)
        out.append(f"  if (const int64_t need = {need}; a.dims.{rule.dim} < need)\n")
        out.append(
            f'    check::fail(kOp, "{t.name}", "needs at least ", need, " {unit}, got shape ", '
            f"check::shape_str(a.{t.name}.shape()));\n"
        )
    if op.returns:
        out.append(f"  return {op.name}_apply({call_args});\n")
    else:
        out.append(f"  {op.name}_apply({call_args});\n")
    out.append("}\n\n")
    if op.outputs:
        out.append(gen_infer(op) + "\n")
    # registration
    inputs = ", ".join(
        f'paddle::Optional("{t.name}")' if t.optional else f'"{t.name}"' for t in op.tensors
    )
    written = [t for t in op.tensors if t.role == "written"]
    # Returned tensors first, then the in-place outputs (the order run_registered returns them in).
    outputs = [f'"{name}"' for name in op.returns]
    outputs += [
        f'paddle::Optional("{t.name}_out")' if t.optional else f'"{t.name}_out"' for t in written
    ]
    out.append(f"PD_BUILD_OP(fd_mtp_{op.name})\n")
    out.append(f"    .Inputs({{{inputs}}})\n")
    out.append("    .Outputs({" + ", ".join(outputs) + "})\n")
    if op.attrs:
        attrs = ", ".join(f'"{a.name}: {ATTR_PADDLE[a.type]}"' for a in op.attrs)
        out.append(f"    .Attrs({{{attrs}}})\n")
    if written:
        pairs = ", ".join(
            f'{{paddle::Optional("{t.name}"), paddle::Optional("{t.name}_out")}}'
            if t.optional
            else f'{{"{t.name}", "{t.name}_out"}}'
            for t in written
        )
        out.append(f"    .SetInplaceMap({{{pairs}}})\n")
    out.append(f"    .SetKernelFn(PD_KERNEL({op.entry}))")
    if op.returns:
        out.append(f"\n    .SetInferShapeFn(PD_INFER_SHAPE({op.name}_infer_shape))")
        out.append(f"\n    .SetInferDtypeFn(PD_INFER_DTYPE({op.name}_infer_dtype))")
    out.append(";\n")
    if op.generated_dispatch:
        out.append("\n" + gen_dispatch(op))
    return "".join(out)


def gen_infer(op: Op) -> str:
    """The shape and dtype inference of an op with declared outputs (`Out`): each output dim
    from the input shape that binds it (-1 where unknown, e.g. a count read on the host)."""
    where: dict[str, tuple[str, int]] = {}  # dim name -> (tensor, axis) of its first binding
    for t in op.check_order:
        for axis, d in enumerate(t.dims or ()):
            if d.name and not d.name.isdigit() and d.name not in where and not t.optional:
                where[d.name] = (t.name, axis)
    if op.batch is not None:
        where["B"] = (op.batch, 0)
    attr_names = {a.name for a in op.attrs}
    used = {name for o in op.outputs for name, _ in o.dims if name is not None} - attr_names
    rows_known = rows_infer(op)  # the rows' dim where it is host-known, and the names it reads
    used |= rows_known[1] - attr_names
    likes = {o.like for o in op.outputs if o.like is not None}
    read = {where[n][0] for n in used if n in where}  # the input shapes the outputs use
    read |= {where[n][0] for n in used & set(op.computed_dims) for n in computed_inputs(op, n)}
    shape_params, dtype_params = [], []
    for t in op.tensors:
        if t.optional:
            shape_params.append("const paddle::optional<std::vector<int64_t>>&")
            dtype_params.append("const paddle::optional<paddle::DataType>&")
        else:
            name = f" {t.name}_shape" if t.name in read else ""
            shape_params.append(f"const std::vector<int64_t>&{name}")
            name = f" {t.name}_dtype" if t.name in likes else ""
            dtype_params.append(f"const paddle::DataType&{name}")
    used_attrs = ({name for o in op.outputs for name, _ in o.dims} | rows_known[1]) & attr_names
    shape_params += [
        attr_param(a) if a.name in used_attrs else attr_param(a).rsplit(" ", 1)[0] for a in op.attrs
    ]
    out = [f"// The shapes of {op.name}'s outputs (-1: known only when the op runs).\n"]
    out.append(
        f"std::vector<std::vector<int64_t>> {op.name}_infer_shape("
        + ",\n    ".join(shape_params)
        + ") {\n"
    )
    for name in sorted(used, key=lambda n: n == rows_known[2]):  # the rows' dim last
        if name == rows_known[2]:
            out.append(f"  const int64_t {name} = {rows_known[0]};  // -1: data\n")
        elif name in op.computed_dims:
            out.append(infer_computed(op, name, where))
        elif name in where:
            t, axis = where[name]
            dim = f"fd_mtp::check::infer_dim({t}_shape, {axis})"
            add = op.arg(t).dims[0].add if name == "B" else 0
            dim = f"fd_mtp::check::infer_add({dim}, -{add})" if add else dim
            out.append(f"  const int64_t {name} = {dim};\n")
        else:
            out.append(f"  const int64_t {name} = -1;  // read on the host when the op runs\n")
    rows = []
    for o in op.outputs:
        terms = [
            str(add)
            if name is None
            else (name if add == 0 else f"fd_mtp::check::infer_add({name}, {add})")
            for name, add in o.dims
        ]
        rows.append("{" + ", ".join(terms) + "}")
    out.append("  return {" + ", ".join(rows) + "};\n}\n\n")
    out.append(
        f"std::vector<paddle::DataType> {op.name}_infer_dtype("
        + ",\n    ".join(dtype_params)
        + ") {\n"
    )
    dts = ", ".join(
        f"{o.like}_dtype" if o.like else f"paddle::DataType::{DTYPES[o.dtype]}" for o in op.outputs
    )
    out.append(f"  return {{{dts}}};\n}}\n")
    return "".join(out)


def rows_infer(op: Op) -> tuple[str, set[str], str | None]:
    """The shape inference of an op's `Rows` that are host-known unless ``when``: ``(C++
    value, the dims and attributes it reads, the rows' dim)``; ``("", set(), None)`` otherwise
    (the rows are data: -1)."""
    import re

    rows = op.rows
    if rows is None or rows.when is None:
        return "", set(), None
    cond, other = (cpp_expr(op, e).replace("a.dims.", "") for e in (rows.when, rows.otherwise))
    names = {n for e in (cond, other) for n in re.findall(r"\ba\.(\w+)", e)}
    names |= set(re.findall(r"dims\.(\w+)", rows.otherwise))
    value = re.sub(r"\ba\.", "", f"({cond}) ? -1 : {other}")
    return value, names, rows.dim


def computed_dims(op: Op) -> list[str]:
    """The binding's lines computing ``Op.computed_dims`` (after the Check rules)."""
    return [f"  a.dims.{n} = {cpp_expr(op, e)};\n" for n, e in op.computed_dims.items()]


def computed_inputs(op: Op, name: str) -> list[str]:
    """The named dims a computed dim's expression reads."""
    import re

    return sorted(set(re.findall(r"\bdims\.(\w+)", op.computed_dims[name])))


def infer_computed(op: Op, name: str, where: dict) -> str:
    """Shape inference of a computed dim: its expression of the input dims it names, -1 when
    one of them is unknown."""
    import re

    expr = op.computed_dims[name]
    names = computed_inputs(op, name)
    lines = []
    for n in names:
        t, axis = where[n]
        lines.append(f"  const int64_t {name}_{n} = fd_mtp::check::infer_dim({t}_shape, {axis});\n")
    known = " || ".join(f"{name}_{n} < 0" for n in names) or "false"
    value = re.sub(r"\bdims\.(\w+)", rf"{name}_\1", expr)
    return "".join(lines) + f"  const int64_t {name} = ({known}) ? -1 : {value};\n"


def attr_expr(op: Op, expr: str) -> str:
    """A C++ expression of integer attributes (``substep + 2``): names become ``a.<name>``."""
    import re

    names = {a.name for a in op.attrs}

    def repl(m):
        name = m.group(0)
        if name not in names:
            raise ValueError(f"{op.name}: {expr!r} names {name!r}, which is not an attribute")
        return f"static_cast<int64_t>(a.{name})"

    return re.sub(r"[A-Za-z_]\w*", repl, expr)
