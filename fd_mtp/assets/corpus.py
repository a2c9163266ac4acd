"""The demo model's text corpus: the running interpreter's standard-library ``.py`` sources.

They are on every machine with Python, offline, under the PSF licence. The training script
(``tools/train_demo_model.py``) trains on the files `is_validation` rejects; the demo and the
benchmarks prompt the model with the held-out ones. With ``with_tests=True`` the standard
library's own test files (`test_files`) are added to the training side only: more distinct code
for the same number of training steps, and the held-out set is the same as without them.
"""

from __future__ import annotations

import ast
import sysconfig
import warnings
import zlib
from pathlib import Path

__all__ = [
    "EXCLUDED_DIRS",
    "MAX_FILE_BYTES",
    "SPLIT_RULE",
    "stdlib_root",
    "corpus_files",
    "test_files",
    "parses",
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
TEST_DIRS = {"test", "tests"}
MAX_FILE_BYTES = 200_000
SPLIT_RULE = "zlib.crc32(relpath.encode()) % 20 == 0 -> validation"
TEST_FILES_RULE = (
    "test / tests directories (outside idlelib/, site-packages/): every .py file of at most "
    "200 kB that is valid UTF-8 and parses as Python 3 (Python 2 and bad-syntax fixtures are "
    "left out); training only"
)


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


def parses(text: str, filename: str = "<unknown>") -> bool:
    """Whether ``text`` parses as Python (``ast.parse``), warnings (invalid escapes in test
    fixtures or generated strings) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(text, filename=filename)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def test_files(root: Path) -> list[tuple[str, Path]]:
    """``(relpath, path)`` of the standard library's test sources under ``root``
    (:data:`TEST_FILES_RULE`), sorted by relpath: what `corpus_files` leaves out as tests."""
    out = []
    skip = EXCLUDED_DIRS - TEST_DIRS
    for p in root.rglob("*.py"):
        rel = p.relative_to(root).as_posix()
        dirs = rel.split("/")[:-1]
        if not TEST_DIRS.intersection(dirs) or skip.intersection(dirs):
            continue
        try:
            if not p.is_file() or p.stat().st_size > MAX_FILE_BYTES:
                continue
            text = p.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if parses(text, rel):
            out.append((rel, p))
    return sorted(out)


def is_validation(rel: str) -> bool:
    """The held-out split: :data:`SPLIT_RULE`."""
    return zlib.crc32(rel.encode()) % 20 == 0


def read_text(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def split_corpus(root: Path, *, with_tests: bool = False):
    """``(train, validation)`` lists of ``(relpath, path)``; SystemExit when either is empty.
    ``with_tests``: `test_files` go to the training list (sorted in with the rest); the
    validation list does not change."""
    files = corpus_files(root)
    train = [(r, p) for r, p in files if not is_validation(r)]
    val = [(r, p) for r, p in files if is_validation(r)]
    if with_tests:
        train = sorted(train + test_files(root))
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
