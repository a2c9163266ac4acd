"""Every layer of an op has the signature its schema (fd_mtp/schema) declares: the Paddle wrapper
(fd_mtp.ops), the numpy reference (fd_mtp.reference) and the CuPy wrapper (fd_mtp.cuda). The C++
entry points are generated from the same schema (cmake/gen_ops.py), so a drift cannot compile."""

import importlib
import inspect

import pytest

from fd_mtp import schema

LAYERS = ("fd_mtp.ops", "fd_mtp.reference", "fd_mtp.cuda")
OPS = sorted(schema.all_ops())


def _signature(fn):
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
    return positional, keyword


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("name", OPS)
def test_layer_signature_equals_schema(layer, name):
    module = importlib.import_module(layer)
    fn = getattr(module, name, None)
    if fn is None:
        allowed = (layer == "fd_mtp.cuda" and name in CPU_ONLY) or (
            layer == "fd_mtp.reference" and name in NO_REFERENCE
        )
        assert allowed, f"{layer} has no {name}"
        return
    positional, keyword = _signature(fn)
    if layer == "fd_mtp.cuda" and name in module.FIXED_CAPACITY:
        # fd_mtp.cuda's extensions, not schema keywords: the fixed-capacity variant and its
        # persistent outputs (off by default; tests/ops/test_keyword_defaults.py checks their
        # kind and default)
        del keyword[module.FIXED_CAPACITY[name]]
    if layer == "fd_mtp.cuda" and name in module.PERSISTENT_OUT:
        del keyword["out"]
    want_positional, want_keyword = schema.python_signature(schema.get(name))
    assert positional == want_positional, (
        f"{layer}.{name} positional parameters differ from the schema"
    )
    assert set(keyword) == want_keyword, (
        f"{layer}.{name} keyword-only parameters differ from the schema"
    )
    defaults = {k: v for k, v in keyword.items() if v is not None}
    assert not defaults, (
        f"{layer}.{name}: keyword-only defaults must be None (resolved by the schema): {defaults}"
    )


# Ops with no CUDA wrapper (host-only by nature).
CPU_ONLY = {name for name, op in schema.all_ops().items() if not op.cuda} | {
    "shared_empty",  # a CPU shared-memory allocation
}
# Ops with no numpy reference: they move no data (shared-memory and CUDA IPC plumbing).
NO_REFERENCE = {"shared_empty", "set_data_ipc", "share_external_data", "unset_data_ipc"}


def test_every_schema_is_well_formed():
    for op in schema.all_ops().values():
        names = [a.name for a in op.args]
        assert len(names) == len(set(names)), op.name
        if op.batch is not None:
            assert op.arg(op.batch).dims is not None, op.name
        positional_after_kw = [
            a.name for i, a in enumerate(op.args) if not a.kw and any(b.kw for b in op.args[:i])
        ]
        assert not positional_after_kw, f"{op.name}: positional arguments after keyword-only ones"
        for s in op.status:
            assert s.argument in names or s.argument in {"input", "seq_lens"}, (op.name, s.argument)


def test_resolvers_exist_below_the_schema():
    """Every ``Attr(resolve="<module>:<function>")`` names a function of an options module
    (fd_mtp.sysv_queue, fd_mtp.shm: below the schema, tests/test_layers.py)."""
    found = 0
    for op in schema.all_ops().values():
        for a in op.attrs:
            if a.resolve is None:
                continue
            module, function = a.resolve.split(":")
            assert module in ("fd_mtp.sysv_queue", "fd_mtp.shm"), (op.name, a.name, module)
            assert callable(getattr(importlib.import_module(module), function)), a.resolve
            found += 1
    assert found > 0


@pytest.mark.parametrize("name", OPS)
def test_env_defaults_agree(name, monkeypatch):
    """A keyword attribute left at None resolves from its variable, the same in every layer."""
    op = schema.get(name)
    for attr in op.attrs:
        if attr.env is None:
            continue
        monkeypatch.setenv(attr.env, "1")
        on = schema.resolve_kw(name, attr.name, None)
        monkeypatch.setenv(attr.env, "0")
        off = schema.resolve_kw(name, attr.name, None)
        assert on != off, f"{name}.{attr.name} ignores {attr.env}"


# ---------------------------------------------------------------------------------------------
# What is hand-written per op (issue 14: adding an op touches at most four hand-written files)
# ---------------------------------------------------------------------------------------------
import ast  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Where an op's glue would be written by hand if it were not generated.
OP_LAYER = ["custom_ops", "fd_mtp/ops", "fd_mtp/cuda", "fd_mtp/reference", "fd_mtp/schema", "cmake"]


def _gen_ops():
    sys.path.insert(0, str(ROOT / "cmake"))
    try:
        return importlib.import_module("gen_ops")
    finally:
        sys.path.remove(str(ROOT / "cmake"))


def _code_text(path: Path) -> str:
    """A source file's text without its prose about other ops: C++ comments; a Python module's
    comments, docstrings (module, classes, functions) and ``doc=`` strings (the schema's
    docstrings of generated wrappers)."""
    text = path.read_text()
    if path.suffix in {".h", ".cc", ".cu", ".cuh"}:
        if path.parent.name == "kernels":  # a kernel using another op's kernel writes no glue
            text = re.sub(r'^#include "\w+\.h"', "", text, flags=re.M)
        return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    if path.suffix != ".py":
        return text
    import io
    import tokenize

    prose = []  # string constants that are prose
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                prose.append(first.value)
        if isinstance(node, ast.keyword) and node.arg == "doc":
            prose.append(node.value)
    lines = [line.encode() for line in text.split("\n")]  # ast offsets count UTF-8 bytes
    prose = [c for c in prose if isinstance(c, ast.Constant) and isinstance(c.value, str)]
    for c in sorted(prose, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        first, last = c.lineno - 1, c.end_lineno - 1
        if first == last:
            line = lines[first]
            lines[first] = line[: c.col_offset] + b'""' + line[c.end_col_offset :]
        else:
            lines[first] = lines[first][: c.col_offset] + b'""'
            for k in range(first + 1, last):
                lines[k] = b""
            lines[last] = lines[last][c.end_col_offset :]
    text = "\n".join(line.decode() for line in lines)
    lines = text.split("\n")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(lines)


# Composite wrappers that call ops (pre_process runs the three packing ops): they consume an op as
# any caller does and write none of its glue, so their bodies are not searched for op names.
# Nothing else in these files may name an op.
COMPOSITE_CALLERS = {
    "fd_mtp/ops/packing.py": ("pre_process", "_packed", "_output_offsets"),
    "fd_mtp/cuda/packing.py": ("pre_process", "_pre_process_padded"),
}


def _without_functions(text: str, names) -> str:
    """A Python module's text without the top-level functions ``names``."""
    tree = ast.parse(text)
    lines = text.split("\n")
    for node in reversed(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            del lines[start - 1 : node.end_lineno]
    return "\n".join(lines)


def _op_layer_files():
    files = [ROOT / "CMakeLists.txt"]
    for d in OP_LAYER:
        files += [
            p for p in (ROOT / d).rglob("*") if p.suffix in {".py", ".h", ".cc", ".cu", ".cuh"}
        ]
    out = {p.relative_to(ROOT).as_posix(): _code_text(p) for p in files}
    for path, names in COMPOSITE_CALLERS.items():
        found = {n.name for n in ast.parse(out[path]).body if isinstance(n, ast.FunctionDef)}
        assert set(names) <= found, f"{path} has no {sorted(set(names) - found)}"
        out[path] = _without_functions(out[path], names)
    return out


STANDARD = sorted(
    name
    for name, op in schema.all_ops().items()
    if op.generated_dispatch and not op.check and op.doc
)


# The ops not written in four files, each with its reason: host-only plumbing that is no device op
# (message queues, shared memory and CUDA IPC). Every other op is standard.
NOT_FOUR_FILES = {
    **dict.fromkeys(
        (
            "mtp_save_first_token",
            "speculate_get_output",
            "speculate_get_output_topk",
            "speculate_save_output",
            "speculate_save_output_topk",
        ),
        "host-only: a SysV message queue (custom_ops/paddle/msgqueue.cc), no kernel",
    ),
    **dict.fromkeys(
        ("set_data_ipc", "share_external_data", "shared_empty", "unset_data_ipc"),
        "host-only: shared memory / CUDA IPC handles (custom_ops/paddle/ipc.cc), no kernel",
    ),
}


def test_standard_ops_exist():
    assert len(STANDARD) >= 8, STANDARD  # the convention is in use, not only declared


def test_the_exceptions_are_real():
    """Every exception names a declared op that is not standard, with its reason (host-only
    plumbing); an op that became standard must leave the list."""
    for name, reason in NOT_FOUR_FILES.items():
        assert name in schema.all_ops(), f"{name} is not an op"
        assert reason.startswith("host-only: "), name
        assert name not in STANDARD, f"{name} is standard now: remove it from NOT_FOUR_FILES"


@pytest.mark.parametrize("name", OPS)
def test_every_op_is_written_in_four_files(name):
    """An op is written by hand in exactly its schema, kernel header, CUDA launcher and numpy
    reference (schema ``cpu=``, docstring in its schema, no check hook): the binding, dispatch,
    registration, shape inference of its outputs, launcher declaration, raw-module binding,
    CuPy and Paddle wrappers and build lists are generated from the schema. The exceptions are
    listed in NOT_FOUR_FILES with their reasons."""
    if name in NOT_FOUR_FILES:
        pytest.skip(NOT_FOUR_FILES[name])
    assert name in STANDARD, f"{name} is not standard (dispatch generated, doc in schema, no hook)"
    op = schema.get(name)
    family = schema._FAMILY_OF[name]
    allowed = {
        f"fd_mtp/schema/{family}.py",
        f"custom_ops/kernels/{op.kernel}.h",
        f"fd_mtp/reference/{family}.py",
    }
    if op.cuda:  # a host op (cuda=False) has no launcher: three files
        allowed.add(f"custom_ops/cuda/{op.kernel}.cu")
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    found = {path for path, text in _op_layer_files().items() if pattern.search(text)}
    assert found <= allowed, f"{name} is also written in {sorted(found - allowed)}"
    assert f"fd_mtp/schema/{family}.py" in found


def test_build_sources_are_derived_from_the_schema():
    """Every hand-written binding and launcher file on disk is in the lists the build compiles
    (derived from the schema), and every listed file exists."""
    gen = _gen_ops()
    lists = gen.sources(list(schema.all_ops().values()))
    for files in lists.values():
        for f in files:
            assert (ROOT / f).is_file(), f"{f} is derived from the schema but missing"
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "custom_ops/paddle").glob("*.cc")}
    assert on_disk == set(lists["FD_MTP_PADDLE_SOURCES"])
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "custom_ops/cuda").glob("*.cu")}
    assert on_disk == set(lists["FD_MTP_CUDA_SOURCES"])


@pytest.mark.parametrize("name", OPS)
def test_each_op_is_documented_once(name):
    """An op's docstring lives in its schema (generated wrapper) or in its hand-written wrapper,
    never in both; every fd_mtp.ops wrapper has one."""
    import fd_mtp.ops as ops

    op = schema.get(name)
    fn = getattr(ops, name)
    assert fn.__doc__ and len(fn.__doc__) > 200, f"fd_mtp.ops.{name} has no real docstring"
    module = importlib.import_module(f"fd_mtp.ops.{schema._FAMILY_OF[name]}")
    hand = f"def {name}(" in (ROOT / module.__file__).read_text()
    assert hand != bool(op.doc), f"{name}: documented in {'both' if hand else 'neither'} places"
    assert fn.__module__ == module.__name__


def test_generated_wrappers_run_their_doctests():
    """The >>> examples of the docstrings that moved into the schema still run, as the
    generated functions' docstrings in their fd_mtp.ops family modules."""
    import doctest

    total = 0
    # (msgqueue's examples open queues keyed by the directory: its own tests run them in a fresh one)
    for family in sorted(set(schema.FAMILIES) - {"msgqueue"}):
        module = importlib.import_module(f"fd_mtp.ops.{family}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, family
        total += result.attempted
    assert total > 0
