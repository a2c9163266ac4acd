"""The import graph of fd_mtp: no cycle between packages, and imports only go down the layers.

Every module under fd_mtp/ is parsed with `ast` (nothing is imported); each ``import`` /
``from ... import`` of fd_mtp code (absolute or relative, at any depth, TYPE_CHECKING blocks and
function bodies included) is mapped to the package it lands in: ``fd_mtp.<pkg>`` (a top-level
module such as ``fd_mtp.llm`` counts as a package of its own). Layers, top to bottom (design §7):

    cli -> entrypoints (the server and its async front, demo, testing, compat) -> llm
    -> distributed (tensor-parallel workers, PD instances) -> engine
    -> proposer -> batch -> model -> cuda -> ops / reference -> schema
    -> options (sysv_queue, shm: the argument resolvers the schema names) -> foundation (config,
    envs, assets)

A package may import packages of strictly lower layers only (peers in one layer do not import
each other); ``from fd_mtp import __version__``-style imports of the root package are allowed
everywhere (the root imports nothing eagerly). Inside the engine, the runner-level modules
(model runners, sampler, sampling parameters, block manager) must not import the scheduler-level
ones (the engine loop, requests, detokenizer).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "fd_mtp"

LAYERS = [
    ("cli", {"cli"}),  # the fd-mtp command: dispatches to `fd-mtp serve` below it
    ("entrypoints", {"entrypoints", "demo", "server", "testing", "compat"}),
    ("llm", {"llm"}),
    ("distributed", {"distributed"}),  # tensor-parallel workers, prefill / decode instances
    ("engine", {"engine"}),
    ("proposer", {"proposer"}),
    ("batch", {"batch"}),
    ("model", {"model"}),
    ("cuda", {"cuda"}),
    ("ops", {"ops", "reference"}),
    ("schema", {"schema", "_lib"}),
    ("options", {"sysv_queue", "shm"}),  # the resolvers of fd_mtp/schema's Attr(resolve=...)
    ("foundation", {"config", "envs", "assets"}),
]
RANK = {pkg: i for i, (_, pkgs) in enumerate(LAYERS) for pkg in pkgs}
ENGINE_RUNNER_LEVEL = {"runner", "spec_runner", "sampler", "sampling_params", "block_manager"}
ENGINE_SCHEDULER_LEVEL = {"engine", "request", "detokenizer"}


def _module_name(path: Path) -> tuple[list[str], bool]:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return parts[:-1], True
    return parts, False


def _is_module(dotted: list[str]) -> bool:
    p = ROOT.parent.joinpath(*dotted)
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports_of(path: Path) -> list[tuple[list[str], int]]:
    """(fd_mtp module path as a list, line) for every fd_mtp import in the file."""
    parts, is_pkg = _module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name.split("."), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
            else:
                base = []
            module = base + (node.module.split(".") if node.module else [])
            for a in node.names:
                sub = module + [a.name]
                found.append((sub if _is_module(sub) else module, node.lineno))
    return [(m, line) for m, line in found if m and m[0] == "fd_mtp"]


def edges():
    """{(src package, dst package): [where, ...]} and the module-level imports of fd_mtp.engine."""
    pkg_edges: dict[tuple[str, str], list[str]] = {}
    engine_edges: list[tuple[str, str, str]] = []
    for path in sorted(ROOT.rglob("*.py")):
        parts, _ = _module_name(path)
        src = parts[1] if len(parts) > 1 else None
        for module, line in imports_of(path):
            dst = module[1] if len(module) > 1 else None
            where = f"{path.relative_to(ROOT.parent)}:{line}"
            if src is not None and dst is not None and dst != src:
                pkg_edges.setdefault((src, dst), []).append(where)
            if src == dst == "engine" and len(parts) > 2 and len(module) > 2:
                engine_edges.append((parts[2], module[2], where))
    return pkg_edges, engine_edges


def test_every_package_has_a_layer():
    packages = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert packages - set(RANK) == set(), "give every fd_mtp package a layer in LAYERS"


def test_no_cycle_between_packages():
    pkg_edges, _ = edges()
    graph: dict[str, set[str]] = {}
    for src, dst in pkg_edges:
        graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                pytest.fail(
                    "import cycle: "
                    + " -> ".join(cycle)
                    + "\n"
                    + "\n".join(
                        f"  {a} -> {b}: {pkg_edges[(a, b)][0]}"
                        for a, b in itertools.pairwise(cycle)
                    )
                )
            if state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if state.get(node) is None:
            visit(node, [node])


def test_imports_only_go_down_the_layers():
    pkg_edges, _ = edges()
    bad = [
        f"fd_mtp.{src} ({LAYERS[RANK[src]][0]}) imports fd_mtp.{dst} ({LAYERS[RANK[dst]][0]}) at {where[0]}"
        for (src, dst), where in sorted(pkg_edges.items())
        if src in RANK and dst in RANK and RANK[dst] <= RANK[src]
    ]
    assert not bad, "imports that run up (or across) the layers:\n" + "\n".join(bad)


def test_engine_runner_level_does_not_import_the_scheduler_level():
    _, engine_edges = edges()
    bad = [
        f"fd_mtp.engine.{a} imports fd_mtp.engine.{b} at {where}"
        for a, b, where in engine_edges
        if a in ENGINE_RUNNER_LEVEL and b in ENGINE_SCHEDULER_LEVEL
    ]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_relative_and_nested_imports():
    # the parser resolves `from .. import ops` and imports inside functions
    found = {tuple(m[:2]) for m, _ in imports_of(ROOT / "engine" / "spec_runner.py")}
    assert ("fd_mtp", "proposer") in found and ("fd_mtp", "config") in found
    assert ("fd_mtp", "ops") in {
        tuple(m[:2]) for m, _ in imports_of(ROOT / "engine" / "spec_verify.py")
    }
    found = {tuple(m[:3]) for m, _ in imports_of(ROOT / "engine" / "runner.py")}
    assert ("fd_mtp", "batch") in {f[:2] for f in found} and (
        "fd_mtp",
        "engine",
        "sampler",
    ) in found
    found = {tuple(m[:2]) for m, _ in imports_of(ROOT / "llm.py")}
    assert ("fd_mtp", "engine") in found and ("fd_mtp", "model") in found  # function-level imports


def test_no_environment_reads_above_envs():
    """Environment variables are parsed in fd_mtp/envs.py; engine, proposer, batch, llm, cli and
    demo never read os.environ / os.getenv themselves."""
    offenders = []
    for sub in ("engine", "proposer", "batch", "llm.py", "cli.py", "demo.py", "config.py"):
        p = ROOT / sub
        for path in sorted(p.rglob("*.py") if p.is_dir() else [p]):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in ("environ", "getenv", "putenv")
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "os"
                ):
                    offenders.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert not offenders, offenders
