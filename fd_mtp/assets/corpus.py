"""The demo model's text corpus: the running interpreter's standard-library ``.py`` sources.

They are on every machine with Python, offline, under the PSF licence. The training script
(``tools/train_demo_model.py``) trains on the files `is_validation` rejects; the demo and the
benchmarks prompt the model with the held-out ones.
"""

from __future__ import annotations

import sysconfig
import zlib
from pathlib import Path

__all__ = [
    "EXCLUDED_DIRS",
    "MAX_FILE_BYTES",
    "SPLIT_RULE",
    "stdlib_root",
    "corpus_files",
    "is_validation",
    "read_text",
    "split_corpus",
    "held_out_prompts",
]

EXCLUDED_DIRS = {
    "test",
    "tests",
    "idlelib",
    "site-packages",
    "pydoc_data",
    "encodings",
    "__pycache__",
}
MAX_FILE_BYTES = 200_000
SPLIT_RULE = "zlib.crc32(relpath.encode()) % 20 == 0 -> validation"


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path) -> list[tuple[str, Path]]:
    """``(relpath, path)`` of the corpus files under ``root``, sorted by relpath."""
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root).as_posix()
        parts = rel.split("/")
        if EXCLUDED_DIRS.intersection(parts[:-1]) or "lib2to3/tests" in rel:
            continue
        try:
            if p.stat().st_size > MAX_FILE_BYTES or not p.is_file():
                continue
        except OSError:
            continue
        out.append((rel, p))
    return sorted(out)


def is_validation(rel: str) -> bool:
    """The held-out split: :data:`SPLIT_RULE`."""
    return zlib.crc32(rel.encode()) % 20 == 0


def read_text(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def split_corpus(root: Path):
    """``(train, validation)`` lists of ``(relpath, path)``; SystemExit when either is empty."""
    files = corpus_files(root)
    train = [(r, p) for r, p in files if not is_validation(r)]
    val = [(r, p) for r, p in files if is_validation(r)]
    if not train or not val:
        raise SystemExit(
            f"{root}: corpus split left no training or no validation file "
            f"({len(train)} / {len(val)}); rule: {SPLIT_RULE}"
        )
    return train, val


def held_out_prompts(
    n: int, *, chars: int = 300, root: Path | None = None
) -> list[tuple[str, str]]:
    """``n`` prompts of about ``chars`` characters from held-out files: ``(relpath, text)``, the
    first ``chars`` characters (cut at a line end) of the body of ``n`` validation files, spread
    evenly over the sorted list. Deterministic for a given standard library."""
    files = [f for f in corpus_files(root or stdlib_root()) if is_validation(f[0])]
    if not files:
        return []
    picks = [files[(i * len(files)) // n] for i in range(min(n, len(files)))]
    out = []
    for rel, path in picks:
        text = read_text(path)
        # skip the licence / module docstring header: start at the first "def " or "class "
        start = min((i for i in (text.find("\ndef "), text.find("\nclass ")) if i >= 0), default=0)
        body = text[start + 1 if start else 0 :]
        cut = body.rfind("\n", 0, chars)
        out.append((rel, body[: cut + 1 if cut > 0 else chars]))
    return out
