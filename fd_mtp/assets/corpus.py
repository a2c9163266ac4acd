"""The demo model's text corpus: the running interpreter's standard-library ``.py`` sources.

They are on every machine with Python, offline, under the PSF licence. The training script
(``tools/train_demo_model.py``) trains on the files `is_validation` rejects; the demo and the
benchmarks prompt the model with the held-out ones. With ``with_tests=True`` the standard
library's own test files (`test_files`) are added to the training side only: more distinct code
for the same number of training steps, and the held-out set is the same as without them. Likewise
`library_files`: hand-written library code of the project's own installed dependencies
(:data:`LIBRARY_PACKAGES`), training only, with the copies and near-copies of held-out files left
out. `strip_comments` removes comments (docstrings stay) from a source text.
"""

from __future__ import annotations

import ast
import hashlib
import io
import sysconfig
import tokenize
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
    "LIBRARY_PACKAGES",
    "LIBRARY_FILES_RULE",
    "library_root",
    "library_files",
    "strip_comments",
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


def _small_utf8_source(p: Path) -> str | None:
    """The text of the regular file ``p`` if it is at most ``MAX_FILE_BYTES`` and valid UTF-8,
    else None."""
    try:
        if not p.is_file() or p.stat().st_size > MAX_FILE_BYTES:
            return None
        return p.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


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
        text = _small_utf8_source(p)
        if text is not None and parses(text, rel):
            out.append((rel, p))
    return sorted(out)


#: top-level packages of the project's pinned dependencies whose sources are hand-written library
#: code (left out: generated API bindings such as openai's, lexer / font / Unicode tables such as
#: pygments', fontTools' and idna's, paddle's partly generated sources, and copies of other
#: packages such as httpx2 / httpcore2)
LIBRARY_PACKAGES = (
    "numpy",
    "matplotlib",
    "networkx",
    "pip",
    "setuptools",
    "pydantic",
    "hypothesis",
    "_pytest",
    "PIL",
    "fastapi",
    "anyio",
    "packaging",
    "jinja2",
    "click",
    "httpx",
    "uvicorn",
    "starlette",
    "dateutil",
    "pyparsing",
    "prometheus_client",
    "tqdm",
    "h11",
    "pluggy",
    "sortedcontainers",
)
LIBRARY_SKIP_DIRS = {"test", "tests", "testing", "_vendor", "_distutils", "__pycache__"}
MAX_DIGIT_SHARE = 0.25
NEAR_COPY_SHARE = 0.5
NEAR_COPY_MIN_LINE = 30
LIBRARY_FILES_RULE = (
    "the .py files of LIBRARY_PACKAGES in the interpreter's purelib directory, outside test / "
    "tests / testing / _vendor / _distutils directories: at most 200 kB, valid UTF-8, parsing as "
    f"Python 3, digits at most {MAX_DIGIT_SHARE:.0%} of the non-blank characters (data tables "
    "left out); exact copies (of a standard-library file or of an earlier library file) and "
    f"near-copies of a held-out file (over {NEAR_COPY_SHARE:.0%} of its lines of at least "
    f"{NEAR_COPY_MIN_LINE} characters found in the held-out files) left out; training only"
)


def library_root() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _long_lines(text: str) -> list[str]:
    return [s for s in (ln.strip() for ln in text.splitlines()) if len(s) >= NEAR_COPY_MIN_LINE]


def library_files(
    root: Path,
    *,
    stdlib: Path | None = None,
    packages: tuple[str, ...] = LIBRARY_PACKAGES,
) -> list[tuple[str, Path]]:
    """``(relpath, path)`` of the library sources under ``root`` (:data:`LIBRARY_FILES_RULE`), the
    relpaths prefixed with ``site-packages/``, sorted. ``stdlib``: the standard-library root whose
    corpus files are checked for copies (default `stdlib_root`)."""
    std = corpus_files(stdlib or stdlib_root())
    seen = {hashlib.sha1(read_text(p).encode()).digest() for _, p in std}
    held_lines = {ln for r, p in std if is_validation(r) for ln in _long_lines(read_text(p))}
    cand = []
    for pkg in packages:
        base = root / pkg
        if not base.is_dir():
            continue
        for p in base.rglob("*.py"):
            rel = p.relative_to(root).as_posix()
            if LIBRARY_SKIP_DIRS.intersection(rel.split("/")[:-1]):
                continue
            cand.append((rel, p))
    out = []
    for rel, p in sorted(cand):
        text = _small_utf8_source(p)
        if text is None:
            continue
        chars = [c for c in text if not c.isspace()]
        if not chars or sum(c.isdigit() for c in chars) > MAX_DIGIT_SHARE * len(chars):
            continue
        digest = hashlib.sha1(text.encode()).digest()
        if digest in seen:
            continue
        long = _long_lines(text)
        if long and sum(ln in held_lines for ln in long) > NEAR_COPY_SHARE * len(long):
            continue
        if not parses(text, rel):
            continue
        seen.add(digest)
        out.append(("site-packages/" + rel, p))
    return out


def strip_comments(text: str) -> str:
    """``text`` without its comments (``tokenize`` COMMENT tokens: ``#`` in strings stays):
    a line that held only a comment is removed, a comment after code is cut with the spaces
    before it. Docstrings stay. The result parses to the same AST. A text ``tokenize`` cannot
    read comes back unchanged."""
    lines = text.split("\n")
    cuts: dict[int, int] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                cuts[tok.start[0] - 1] = tok.start[1]
    except (tokenize.TokenError, SyntaxError, ValueError):
        return text
    out = []
    for i, ln in enumerate(lines):
        col = cuts.get(i)
        if col is None:
            out.append(ln)
            continue
        code = ln[:col].rstrip()
        if code:
            out.append(code)
        elif i == len(lines) - 1:
            out.append("")  # keep the final line's position (no trailing newline to drop)
    return "\n".join(out)


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
