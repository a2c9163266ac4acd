"""README.md's examples run as written.

One test per fenced code block, named by the README line of its opening fence (``L60-python``: the
python block whose fence is on line 60).

* ```` ```python ````: executed in this process, statement by statement. The python blocks of one
  ``## `` section (its ``### `` subsections included) share one namespace, in README order, and run
  with a fresh temporary directory of that section as the working directory (so relative paths a
  block writes, e.g. ``tiny_ckpt``, land there). A ``print(...)`` whose line ends in ``# -> TEXT``
  must print exactly ``TEXT``.
* ```` ```bash ```` / ```` ```sh ````: the block as one script, ``bash -e -c``, with ``.venv/bin`` first
  on ``PATH``, in the repository root (a reader's checkout). A block that writes files is tagged
  ``<!-- readme-test: tmpdir -->`` and runs in its section's temporary directory instead.
* ```` ```console ````: a transcript. Each ``$ command`` (continued by trailing backslashes) runs as a
  bash block does; its stdout must have the shape of the lines shown after it (`_mask`: same lines
  and labels; numbers, id lists and generated text are masked on both sides, since they depend on
  the CPU's float rounding and the load).
* ```` ``` ```` (no language) and ```` ```text ````: output or layout, not executed.

Blocks that depend on earlier ones: before a block runs, the earlier executed blocks of its ``## ``
section run (each once per session, in README order), so ``pytest tests/test_readme.py -k L<line>``
works alone; when one of them failed, the later block fails and names it.
``<!-- readme-test: skip (REASON) -->`` on the line before a fence skips that block
with REASON (blocks that cannot run here: the full build and test suite behind ``make demo`` /
``make test``). A failing block's message starts with ``README.md:LINE``.

Also checked, without running anything: every fence has a known language, every tag is known, every
repository path quoted in backticks exists, every ``--option`` written after ``fd-mtp``,
``python -m fd_mtp.demo`` or ``benchmarks/*.py`` is defined in that program's source, and every
``make TARGET`` is a Makefile target.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LINES = README.read_text(encoding="utf-8").splitlines()
VENV_BIN = (
    ROOT / ".venv" / "bin" if (ROOT / ".venv" / "bin").is_dir() else Path(sys.executable).parent
)
BLOCK_TIMEOUT_S = 300

EXECUTED = {"python": "python", "bash": "bash", "sh": "bash", "console": "console"}
NOT_EXECUTED = {"", "text"}
_FENCE = re.compile(r"^(`{3,})([\w+-]*)\s*$")
_TAG = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->$")
_SKIP = re.compile(r"^skip\s*\((.+)\)$")
_EXPECT = re.compile(r"#\s*->\s*(.*?)\s*$")


@dataclass
class Block:
    line: int  # README line of the opening fence (1-based)
    lang: str
    code: str
    section: str  # the enclosing "## " heading
    tag: str | None  # the readme-test comment right before the fence

    @property
    def kind(self) -> str | None:
        return EXECUTED.get(self.lang)

    @property
    def skip_reason(self) -> str | None:
        m = _SKIP.match(self.tag or "")
        return m.group(1) if m else None

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang or 'plain'}"

    def where(self) -> str:
        return f"README.md:{self.line} ({self.lang} block in section {self.section!r})"


def parse_blocks(lines: list[str]) -> list[Block]:
    blocks, section, i = [], "(top)", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        m = _FENCE.match(line)
        if m is None:
            i += 1
            continue
        start, fence = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if j == len(lines):
            raise AssertionError(f"README.md:{start + 1}: code fence never closed")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        tag = _TAG.match(lines[k].strip()) if k >= 0 else None
        blocks.append(
            Block(
                line=start + 1,
                lang=m.group(2).lower(),
                code="\n".join(lines[start + 1 : j]),
                section=section,
                tag=tag.group(1) if tag else None,
            )
        )
        i = j + 1
    return blocks


BLOCKS = parse_blocks(README_LINES)
RUNNABLE = [b for b in BLOCKS if b.kind is not None]


# ------------------------------------------------------------------------------------------------
# Running blocks
# ------------------------------------------------------------------------------------------------
class Section:
    """A ``## `` section's state: its temp dir, the namespace of its python blocks, block results."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.namespace: dict = {"__name__": "__main__"}
        self.results: dict[
            int, str | None
        ] = {}  # block line -> None (passed) or the failure message


_SECTIONS: dict[str, Section] = {}


@pytest.fixture(scope="session")
def sections(tmp_path_factory):
    def get(name: str) -> Section:
        if name not in _SECTIONS:
            slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "section"
            _SECTIONS[name] = Section(tmp_path_factory.mktemp(f"readme-{slug}"))
        return _SECTIONS[name]

    return get


@contextlib.contextmanager
def _chdir(path: Path):  # contextlib.chdir is 3.11+; the package supports 3.10
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run_bash(script: str, cwd: Path, first_line: int) -> subprocess.CompletedProcess:
    """``bash -e -c script``; a failing command prints the README line it is on (trap ERR)."""
    trap = f"trap 'echo \"README.md:$((LINENO + {first_line - 2})): exit status $?\" >&2' ERR\n"
    return subprocess.run(
        ["bash", "-e", "-c", trap + script],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


def _report(proc: subprocess.CompletedProcess) -> str:
    return f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"


def run_python(block: Block, section: Section) -> None:
    src = "\n" * block.line + block.code  # the code's line numbers are README's
    try:
        tree = ast.parse(src, filename=str(README))
    except SyntaxError as exc:
        raise AssertionError(
            f"{block.where()}: syntax error at README.md:{exc.lineno}: {exc.msg}"
        ) from None
    with _chdir(section.tmp):
        for stmt in tree.body:
            code = compile(ast.Module(body=[stmt], type_ignores=[]), str(README), "exec")
            expect = _EXPECT.search(README_LINES[stmt.end_lineno - 1])
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, section.namespace)  # noqa: S102 - running the README's example is the test
            except Exception as exc:
                raise AssertionError(
                    f"{block.where()}: README.md:{stmt.lineno} raised {type(exc).__name__}: {exc}"
                ) from exc
            finally:
                sys.stdout.write(out.getvalue())
            if expect is not None:
                got = out.getvalue().strip()
                assert got == expect.group(1), (
                    f"{block.where()}: README.md:{stmt.end_lineno} printed {got!r}, "
                    f"the README says {expect.group(1)!r}"
                )


def run_bash(block: Block, section: Section) -> None:
    cwd = section.tmp if block.tag == "tmpdir" else ROOT
    proc = _run_bash(block.code, cwd, block.line + 1)
    print(proc.stdout, end="")
    print(proc.stderr, end="", file=sys.stderr)
    assert proc.returncode == 0, (
        f"{block.where()} failed (exit status {proc.returncode})\n{_report(proc)}"
    )


def _mask(line: str) -> str:
    """A transcript line's shape: what the command prints, not the model's exact output. Numbers
    (token ids, timings, acceptance) and the generated text depend on the CPU's float rounding
    (a near-tie can flip a greedy token on another machine) and on the load, so they are masked;
    the labels, the order and the count of lines must match."""
    line = re.sub(r"(\btext: ).*$", r"\1TEXT", line)
    line = re.sub(r"-?\d+(?:\.\d+)?", "N", line)
    return re.sub(r"\[N(?:,? N)*\]", "[N...]", line)


def console_commands(block: Block) -> list[tuple[int, str, list[str]]]:
    """``(README line, command, expected stdout lines)`` of each ``$ `` command of a transcript."""
    lines, cmds, i = block.code.splitlines(), [], 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(
                f"{block.where()}: README.md:{block.line + 1 + i}: expected a '$ ' command"
            )
        line_no, cmd = block.line + 1 + i, lines[i][2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd + "\n" + lines[i]
        i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        cmds.append((line_no, cmd, out))
    return cmds


def run_console(block: Block, section: Section) -> None:
    cwd = section.tmp if block.tag == "tmpdir" else ROOT
    for line_no, cmd, want in console_commands(block):
        proc = _run_bash(cmd, cwd, line_no)
        print(proc.stdout, end="")
        print(proc.stderr, end="", file=sys.stderr)
        assert proc.returncode == 0, (
            f"{block.where()}: the command at README.md:{line_no} failed (exit status "
            f"{proc.returncode})\n{_report(proc)}"
        )
        got = proc.stdout.splitlines()
        for k, (g, w) in enumerate(zip(got, want)):
            assert _mask(g) == _mask(w), (
                f"{block.where()}: README.md:{line_no + 1 + k + cmd.count(chr(10))}: "
                f"the command printed\n  {g}\nbut the README shows\n  {w}"
            )
        assert len(got) == len(want), (
            f"{block.where()}: the command at README.md:{line_no} printed {len(got)} "
            f"lines, the README shows {len(want)}\n{_report(proc)}"
        )


RUNNERS = {"python": run_python, "bash": run_bash, "console": run_console}


def run_block(block: Block, section: Section) -> None:
    """Run ``block`` after the earlier runnable blocks of its section (each block runs once)."""
    for earlier in RUNNABLE:
        if earlier.line >= block.line:
            break
        if earlier.section != block.section or earlier.skip_reason is not None:
            continue
        if earlier.line not in section.results:
            try:
                RUNNERS[earlier.kind](earlier, section)
                section.results[earlier.line] = None
            except Exception as exc:  # noqa: BLE001 - recorded, reported by the later block
                section.results[earlier.line] = str(exc).splitlines()[0] if str(exc) else repr(exc)
        if section.results[earlier.line] is not None:
            pytest.fail(
                f"{block.where()}: not run, because the earlier block it follows, README.md:{earlier.line}, "
                f"failed: {section.results[earlier.line]}"
            )
    if block.line in section.results:  # already run as an earlier block of another test
        if section.results[block.line] is not None:
            pytest.fail(section.results[block.line])
        return
    try:
        RUNNERS[block.kind](block, section)
    except BaseException as exc:
        section.results[block.line] = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise
    section.results[block.line] = None


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_readme_block(block: Block, sections):
    if block.skip_reason is not None:
        pytest.skip(f"README.md:{block.line}: {block.skip_reason}")
    run_block(block, sections(block.section))


# ------------------------------------------------------------------------------------------------
# Static checks
# ------------------------------------------------------------------------------------------------
def test_blocks_have_known_languages_and_tags():
    assert len(RUNNABLE) >= 5, (
        f"found only {len(RUNNABLE)} runnable blocks in README.md: is the parser broken?"
    )
    for b in BLOCKS:
        assert b.lang in EXECUTED or b.lang in NOT_EXECUTED, (
            f"README.md:{b.line}: fence language {b.lang!r}; this test knows {sorted(EXECUTED)} (executed) and "
            f"{sorted(NOT_EXECUTED)} (not executed)"
        )
        if b.tag is not None:
            assert b.kind is not None, (
                f"README.md:{b.line}: readme-test tag on a block that is not executed"
            )
            assert b.skip_reason is not None or b.tag == "tmpdir", (
                f"README.md:{b.line}: unknown tag {b.tag!r} (use 'skip (reason)' or 'tmpdir')"
            )
    for i, line in enumerate(README_LINES, 1):
        if "readme-test" in line:
            nxt = next((j for j in range(i, len(README_LINES)) if README_LINES[j].strip()), None)
            assert (
                _TAG.match(line.strip()) and nxt is not None and _FENCE.match(README_LINES[nxt])
            ), (
                f"README.md:{i}: a readme-test tag must be a whole-line comment right before a code fence"
            )


def _prose() -> list[tuple[int, str, str]]:
    """``(line, section, text)`` of every README line outside code fences."""
    fenced = set()
    for b in BLOCKS:  # the opening fence, the code lines, the closing fence
        fenced.update(range(b.line, b.line + len(b.code.splitlines()) + 2))
    out, section = [], "(top)"
    for i, line in enumerate(README_LINES, 1):
        if line.startswith("## "):
            section = line[3:].strip()
        if i not in fenced:
            out.append((i, section, line))
    return out


def _spans() -> list[tuple[int, str, str]]:
    """Inline code spans of the prose, ``(line, section, text)`` (a span may continue on the next line)."""
    prose = _prose()
    text = "\n".join(line for _, _, line in prose)
    starts = [0]
    for _, _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    spans = []
    for m in re.finditer(r"`([^`]+)`", text):
        k = max(i for i, s in enumerate(starts[:-1]) if s <= m.start())
        spans.append((prose[k][0], prose[k][1], m.group(1).replace("\n", " ")))
    return spans


def test_paths_quoted_in_backticks_exist():
    # written by the benchmarks / the build (git-ignored; a fresh clone has them after make test)
    generated = ("benchmarks/results/", "build/")
    missing = []
    for line, _, span in _spans():
        for word in span.split():
            if (
                "/" not in word
                or word.startswith(("../", "/", "-", "$"))
                or "<" in word
                or "://" in word
            ):
                continue
            if not re.fullmatch(r"[\w.][\w./-]*", word) or word.startswith(generated):
                continue
            # a path: a whole span, or a word of a longer span that names a directory or a file.ext
            if word != span.strip() and not re.search(r"/$|/[^/]*\.\w+$", word):
                continue
            if not (ROOT / word).exists():
                missing.append(f"README.md:{line}: {word}")
    assert not missing, "README mentions paths that do not exist:\n" + "\n".join(missing)


PROGRAMS = {  # how a command appears in the README -> the file that defines its options
    r"\bfd-mtp\b": ROOT / "fd_mtp" / "cli.py",
    r"-m fd_mtp\.demo\b": ROOT / "fd_mtp" / "demo.py",
    r"\bfd-mtp serve\b": ROOT / "fd_mtp" / "entrypoints" / "openai" / "cli_args.py",
    r"-m fd_mtp\.entrypoints\.openai\.api_server\b": ROOT
    / "fd_mtp"
    / "entrypoints"
    / "openai"
    / "cli_args.py",
    **{re.escape(f"benchmarks/{p.name}"): p for p in sorted((ROOT / "benchmarks").glob("*.py"))},
}


def _option_uses() -> list[tuple[int, Path, str]]:
    """``(line, program file, --option)`` for options written after a known command, in inline spans
    and in executed blocks; spans without a command in the "Command line" section are fd-mtp's."""
    uses = []
    texts = [(line, span, section) for line, section, span in _spans()]
    for b in RUNNABLE:
        for k, line in enumerate(b.code.splitlines()):
            texts.append((b.line + 1 + k, line.split(" # ")[0], b.section))
    for line, text, section in texts:
        hits = sorted(
            (m.end(), prog) for pat, prog in PROGRAMS.items() for m in re.finditer(pat, text)
        )
        if not hits and section == "Command line":
            hits = [(0, PROGRAMS[r"\bfd-mtp\b"])]
        for n, (pos, prog) in enumerate(hits):
            end = hits[n + 1][0] if n + 1 < len(hits) else len(text)
            for opt in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text[pos:end]):
                uses.append((line, prog, opt))
    return uses


def test_command_options_exist():
    unknown = []
    for line, prog, opt in _option_uses():
        if opt == "--help":
            continue
        if f'"{opt}"' not in prog.read_text(encoding="utf-8"):
            unknown.append(f"README.md:{line}: {opt} (not an option of {prog.relative_to(ROOT)})")
    assert not unknown, "README uses options its programs do not define:\n" + "\n".join(unknown)
    assert len(_option_uses()) > 10, "found almost no options in README.md: is the scan broken?"


def test_make_targets_exist():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"(?m)^([\w-]+)\s*:(?!=)", makefile))
    uses = [
        (line, t)
        for line, _, span in _spans()
        for t in re.findall(r"(?<![\w-])make ([a-z][\w-]*)", span)
    ]
    uses += [
        (b.line + 1 + k, t)
        for b in RUNNABLE
        for k, ln in enumerate(b.code.splitlines())
        for t in re.findall(r"^\s*make ([a-z][\w-]*)", ln)
    ]
    missing = [f"README.md:{line}: make {t}" for line, t in uses if t not in targets]
    assert uses, "found no `make` commands in README.md: is the scan broken?"
    assert not missing, "README uses make targets the Makefile does not define:\n" + "\n".join(
        missing
    )
