"""The type stubs of fd_mtp.ops (fd_mtp/ops/*.pyi, written by fd_mtp/schema/stubs.py) are current,
and a static reader following ``ops.<name>`` finds the runtime function's signature."""

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import fd_mtp.ops as ops
from fd_mtp.schema import stubs


def test_committed_stubs_are_current():
    stale = [
        path.name
        for path, text in stubs.render().items()
        if not path.is_file() or path.read_text() != text
    ]
    extra = sorted(p.name for p in set(stubs.OPS_DIR.glob("*.pyi")) - set(stubs.render()))
    assert not stale and not extra, (
        f"fd_mtp/ops stubs are out of date ({stale + extra}): run `{stubs.REGENERATE}`"
    )


def _package_imports() -> dict[str, str]:
    """``{name: family module}`` of fd_mtp/ops/__init__.pyi."""
    tree = ast.parse((stubs.OPS_DIR / "__init__.pyi").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name} is not re-exported"
                out[alias.name] = node.module
    return out


def test_package_stub_names_every_public_name():
    imported = _package_imports()
    assert set(imported) == set(ops.__all__)
    for name, module in imported.items():
        assert getattr(importlib.import_module(f"fd_mtp.ops.{module}"), name) is getattr(ops, name)


def _definition(name: str, module) -> ast.FunctionDef:
    """The ``def`` a static reader finds for ``name`` of ``module``: its stub's when the module
    has one, else the module's own source."""
    source = Path(inspect.getsourcefile(module))
    stub = source.with_suffix(".pyi")
    path = stub if stub.is_file() else source
    tree = ast.parse(path.read_text())
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{path.name} defines {name} {len(found)} times"
    return found[0]


_EMPTY = inspect.Parameter.empty


def _params(fn: ast.FunctionDef, runtime: list, namespace: dict) -> list[tuple[str, str, object]]:
    """``(name, kind, default)`` of a static ``def``; a default is evaluated in the runtime
    module's namespace (a name such as ``DEFAULT_FTOK_PATH``), and a stub's ``...`` (a value it
    cannot write) stands for the runtime's default."""
    a = fn.args
    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, "positional", d) for p, d in zip(a.args, defaults)]
    out += [(p.arg, "keyword", d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    values = []
    for i, (name, kind, node) in enumerate(out):
        value = _EMPTY if node is None else eval(ast.unparse(node), dict(namespace))  # noqa: S307
        if value is Ellipsis and i < len(runtime):
            value = runtime[i][2]
        values.append((name, kind, value))
    return values


FUNCTIONS = sorted(n for n in ops.__all__ if inspect.isfunction(getattr(ops, n)))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_static_definition_has_the_runtime_signature(name):
    fn = getattr(ops, name)
    module = importlib.import_module(fn.__module__)
    kinds = {"POSITIONAL_OR_KEYWORD": "positional", "KEYWORD_ONLY": "keyword"}
    runtime = [
        (p.name, kinds[p.kind.name], p.default) for p in inspect.signature(fn).parameters.values()
    ]
    definition = _definition(name, module)
    assert _params(definition, runtime, vars(module)) == runtime, (
        f"{fn.__module__}: {name}'s static signature differs"
    )
    if Path(inspect.getsourcefile(module)).with_suffix(".pyi").is_file():
        assert ast.get_docstring(definition) == inspect.cleandoc(fn.__doc__)
        for arg in definition.args.args + definition.args.kwonlyargs:
            assert arg.annotation is not None, f"{name}: {arg.arg} has no type in its stub"
        assert definition.returns is not None, f"{name} has no return type in its stub"
