"""Bad-input fuzz of every op (issue: strided views and argument errors that name nothing).

For each op with a valid batch in `fd_mtp.testing.op_inputs`, one argument at a time is replaced by
something wrong (tests/ops/fuzz_worker.py lists the mutations: numpy or None for a tensor, another
dtype, a strided view with the same values, one request too few, an extra axis, an attribute out of
range or of the wrong type). Each op's cases run in a child process, so a crash or a hang fails the
op's test with the case it happened in instead of taking the suite down. Every case must raise
ValueError or TypeError whose message starts with ``"<op>: <argument>"``, and write nothing (the
written arguments, and the base tensor of a strided view, keep their values).

Value mutations keep the arguments well formed and set one element of one tensor to an extreme
value (an int tensor: its dtype's maximum, -1, its minimum; a float tensor: NaN, +inf). Such a case
passes when the op raises ValueError or TypeError naming the op (``"<op>: "``: the value may make
another argument inconsistent) and writes nothing, or returns normally with written and returned
arrays equal to the numpy reference's on the same input (which must return normally too).

Fast mode (default, CI): batch 5, one strided-view kind, one element per (tensor, value).
``pytest --fuzz-long``: three kinds of views (stack, transpose, step slice) and three elements per
(tensor, value), at batches 1, 5 and 33.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from util import skip_without_uint16

from fd_mtp import schema
from fd_mtp.testing.op_inputs import BUILDERS

WORKER = Path(__file__).with_name("fuzz_worker.py")
OPS = sorted(k for k in BUILDERS if k.split("[")[0] in schema.all_ops())


# Value mutations found failing and not fixed yet (op key -> "<argument>:value-<kind>", at any
# element and batch -> why). They still run; each is an open bug to fix, after which its entry goes.
KNOWN_VALUE_FAILURES = {}


@pytest.mark.parametrize("op_key", OPS)
def test_bad_input_is_refused_by_name_and_writes_nothing(op_key, request):
    op = op_key.split("[")[0]
    cmd = [sys.executable, str(WORKER), op_key] + (
        ["--long"] if request.config.getoption("--fuzz-long") else []
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as exc:
        lines = (
            (exc.stdout or b"").decode(errors="replace").splitlines()
            if isinstance(exc.stdout, bytes)
            else []
        )
        pytest.fail(f"{op_key}: hung (600 s); last case started: {lines[-1] if lines else '?'}")
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if not records or not records[-1].get("done"):
        started = [r["start"] for r in records if "start" in r]
        pytest.fail(
            f"{op_key}: the worker died (exit status {proc.returncode}) in case "
            f"{started[-1] if started else '?'}\n{proc.stderr[-3000:]}"
        )
    if any("skip" in r for r in records):  # bfloat16 cases, on a paddle without paddle.uint16
        skip_without_uint16()
    results = [r for r in records if "case" in r]
    assert results, f"{op_key}: no case ran"
    bad = []
    for r in results:
        if r["kind"] == "value":
            mutation = r["case"].split(" ", 1)[1].split("@")[0]
            if mutation not in KNOWN_VALUE_FAILURES.get(op_key, {}):
                bad += _value_case_problems(op, r)
            continue
        prefix = f"{op}: {r['arg']}"
        if r["outcome"] != "raised" or not r["message"].startswith(prefix):
            bad.append(
                f"{r['case']}: {r['outcome']} {r['error']}: {r['message']!r} (wanted ValueError/TypeError "
                f"starting with {prefix!r})"
            )
        elif r["written_changed"]:
            bad.append(f"{r['case']}: refused but wrote {r['written_changed']}")
    assert not bad, f"{op_key}: {len(bad)} of {len(results)} cases wrong:\n" + "\n".join(bad)


def _value_case_problems(op, r):
    """Why a value-mutation record fails (empty: it passes)."""
    if r["outcome"] == "raised":
        if not r["message"].startswith(f"{op}: "):
            return [f"{r['case']}: raised {r['error']}: {r['message']!r} (wanted '{op}: ...')"]
        if r["written_changed"]:
            return [f"{r['case']}: refused but wrote {r['written_changed']}"]
        return []
    if r["outcome"] != "ok":
        return [f"{r['case']}: {r['outcome']} {r['error']}: {r['message']!r}"]
    if r["ref_outcome"] != "ok":
        return [f"{r['case']}: the op returned but the reference raised: {r['ref_message']!r}"]
    if r["ref_mismatch"]:
        return [f"{r['case']}: differs from the reference in {r['ref_mismatch']}"]
    return []
