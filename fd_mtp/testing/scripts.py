"""The repository's scripts (benchmarks/, tools/, cmake/) as modules for tests: they are files
outside any package, loaded by path. Needs no paddle."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

__all__ = ["ROOT", "bench_results", "load_script"]

#: the checkout's root (the folder fd_mtp/ is imported from)
ROOT = Path(__file__).resolve().parents[2]


def load_script(path: str | Path, name: str | None = None) -> ModuleType:
    """The Python file ``path`` (a relative path: from `ROOT`) executed as a module named ``name``
    (default: the file's stem); each call executes it again, and it is not put in sys.modules."""
    path = ROOT / path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_results(out: Path, name: str) -> tuple[list[dict], dict]:
    """What a benchmark run with ``--out out`` wrote (the one CSV format, style.md §11): asserts
    its figure ``<name>.png`` is not empty; returns the rows of ``<name>.csv`` and their p50 by
    ``(provider, x, metric)``."""
    assert (out / f"{name}.png").stat().st_size > 0, f"{name}.png is empty"
    with open(out / f"{name}.csv") as f:
        rows = list(csv.DictReader(f))
    return rows, {(r["provider"], r["x"], r["metric"]): float(r["p50"]) for r in rows}
