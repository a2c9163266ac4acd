"""The Paddle extension's GPU branch (PADDLE_WITH_CUDA), on a machine without a GPU.

* Its code paths neither synchronise nor allocate per op outside checked mode (docs/gpu_errors.md):
  a check of the generated and hand-written sources, region by region (there is no GPU here to
  count calls on), which fails when someone adds a sync, a device copy or an allocation.
* The build that `make test` makes against paddlepaddle-gpu 2.6.2 (build/paddle-gpu/lib, loaded
  through FD_MTP_OPS_LIB_DIR) is that build, imports, and links no shared libcudart (the CUDA
  runtime is static: CUDA::cudart_static), so it never loads a second runtime beside paddle's.
* The error mode and check_pending of fd_mtp.ops.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fd_mtp import ops, schema
from fd_mtp.ops import _loader
from fd_mtp.testing.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
PADDLE_DIR = ROOT / "custom_ops" / "paddle"

# What the GPU branch of an op must never do itself: synchronise, copy to the host, allocate.
# Allocation goes through gpu::output (an output the op returns) or gpu::workspace (persistent per
# stream); host reads through the gpu:: helpers below, each allowed where FastDeploy reads.
FORBIDDEN = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy(",
    "cudaMemcpyAsync",
    "cudaMalloc",
    "cudaFree",
    "paddle::empty",
    "paddle::full",
    "paddle::zeros",
    ".copy_to(",
    "host_int64",
    "GpuScratch",
)
# The host reads of gpu_stream.h (one synchronisation each) and where they are allowed: the CPU
# not_need_stop of the flag ops (the one copy upstream makes), the shape ops' sizes (FastDeploy's
# exact-shape outputs).
HOST_READS = {
    "host_flag(": {f"{name}.gen.cc" for name in ("draft_model_preprocess", "draft_model_update")}
    | {"speculate_update.gen.cc", "speculate_schedule_cache.gen.cc"},
    # the ops whose outputs' rows are data (fd_mtp.schema.Rows): the count read back
    "host_count(": {
        f"{name}.gen.cc"
        for name in ("eagle_get_hidden_states", "eagle_get_self_hidden_states", "rebuild_padding")
    },
    # (the count tensors' read, check::host_count of gpu_stream.h, runs in the generated entry
    # point before the dispatch, not in a GPU branch: no binding reads a scalar there)
    "read_scalar(": set(),
}


# Files whose GPU code is not a step op's: the output ops send device tokens to a host message
# queue, and their copy to the host is the op itself (upstream's copy_to(CPUPlace, true)).
EXEMPT = {"msgqueue.cc"}


def gpu_regions(text: str) -> list[str]:
    """The code under ``#ifdef PADDLE_WITH_CUDA`` (up to its ``#else`` / ``#endif``), nested
    conditionals included."""
    regions, depth, start, current = [], 0, None, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#if"):
            depth += 1
            if start is None and stripped == "#ifdef PADDLE_WITH_CUDA":
                start, current = depth, []
                continue
        elif stripped.startswith(("#else", "#elif")) and start == depth:
            regions.append("\n".join(current))
            start = None
            continue
        elif stripped.startswith("#endif"):
            if start == depth:
                regions.append("\n".join(current))
                start = None
            depth -= 1
            continue
        if start is not None:
            current.append(line.split("//", 1)[0])  # code, not comments
    return regions


def violations(name: str, text: str) -> list[str]:
    found = []
    for region in gpu_regions(text):
        for token in FORBIDDEN:
            if token in region:
                found.append(f"{name}: {token}")
        for call, allowed in HOST_READS.items():
            if call in region and name not in allowed:
                found.append(f"{name}: {call}) (a host read outside {sorted(allowed)})")
        if region.count("gpu::Op g(") != region.count("g.commit()"):
            found.append(f"{name}: a gpu::Op without its commit()")
    return found


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, str]:
    """The glue cmake/gen_ops.py generates now, by file name."""
    out = tmp_path_factory.mktemp("gen")
    gen = load_script("cmake/gen_ops.py", "fd_mtp_gen_ops")
    assert gen.main([str(out)]) == 0
    return {p.name: p.read_text() for p in sorted(out.iterdir()) if p.suffix in (".cc", ".h")}


def branch_sources(generated) -> dict[str, str]:
    sources = dict(generated)
    for path in sorted(PADDLE_DIR.iterdir()):
        if path.name in EXEMPT or path.name.startswith(("gpu_stream", "paddle_compat")):
            continue  # gpu_stream.*: the runtime, checked below
        if path.suffix in (".cc", ".h"):
            sources[path.name] = path.read_text()
    return sources


def test_the_scan_finds_a_sync_an_allocation_and_a_host_read():
    """The check below can fail: each kind of breach in a GPU branch is reported."""
    code = """
  if (ref.is_cpu()) { auto x = paddle::empty({1}, dt, place); }
#ifdef PADDLE_WITH_CUDA
  gpu::Op g(a.op, kStreamOp, ref);
#if CUDART_VERSION > 11000
  auto w = paddle::full({n}, 0, dt, ref.place());
#endif
  cudaStreamSynchronize(ref.stream());  // a sync
  const int64_t n = g.host_count();
#else
  cudaStreamSynchronize(0);
#endif
"""
    found = violations("op.gen.cc", code)
    assert "op.gen.cc: cudaStreamSynchronize" in found
    assert "op.gen.cc: paddle::full" in found
    assert any("host_count" in f for f in found)
    assert "op.gen.cc: a gpu::Op without its commit()" in found
    assert not any("paddle::empty" in f for f in found)  # the CPU branch's allocation is fine


def test_gpu_branch_neither_synchronises_nor_allocates(generated):
    sources = branch_sources(generated)
    found = [v for name, text in sources.items() for v in violations(name, text)]
    assert not found, found
    with_status = [op for op in schema.all_ops().values() if op.cuda and op.kernel and op.status]
    regions = sum(len(gpu_regions(t)) for t in sources.values())
    assert regions >= len(with_status), regions  # the scan saw the branches


def test_every_op_with_a_status_runs_on_the_stream_record(generated):
    """Each op with a CUDA kernel and statuses launches on its stream's persistent record under
    its own id (kXStreamOp, the raw module's STREAM_OPS order) and commits its error there."""
    sources = branch_sources(generated)
    gpu_code = {name: "\n".join(gpu_regions(text)) for name, text in sources.items()}
    for op in schema.all_ops().values():
        if not (op.cuda and op.kernel and op.status):
            continue
        const = f"k{op.entry}StreamOp"
        users = [n for n, text in sources.items() if const in text and not n.endswith(".gen.h")]
        assert users, f"{op.name}: {const} is used nowhere"
        assert all("gpu::Op g(" in gpu_code[n] for n in users), (op.name, users)
        if op.generated_dispatch:
            assert f"gpu::Op g(a.op, {const}, ref);" in gpu_code[f"{op.name}.gen.cc"], op.name
        if op.flag is not None:  # the flag is computed on the device
            assert "stream_flag(" in gpu_code[f"{op.name}.gen.cc"], op.name
            assert "host_int64" not in gpu_code[f"{op.name}.gen.cc"], op.name


def test_the_runtime_syncs_only_in_checked_mode_or_at_a_host_read():
    """custom_ops/paddle/gpu_stream.cc, the one place the GPU branch synchronises or allocates:
    a sync in `fetch` (checked-mode commit, the host reads, check_pending), in `finish` (checked
    mode) and in `read_with_record` (the shape reads); allocations of the stream record (once per
    stream), a workspace (when it grows) and an op's outputs."""
    text = (PADDLE_DIR / "gpu_stream.cc").read_text()
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    assert code.count("cudaStreamSynchronize") == 3
    assert code.count("paddle::empty") == 2  # the record, a workspace
    assert code.count("compat::empty") == 1  # gpu::output
    assert "cudaMalloc" not in code and "paddle::full" not in code
    commit = code[code.index("void Op::commit()") :]
    commit = commit[: commit.index("\n}\n")]
    assert commit.index("kChecked) return;") < commit.index("fetch(")
    finish = code[code.index("void finish(") :]
    finish = finish[: finish.index("\n}\n")]
    assert finish.index("kChecked) return;") < finish.index("cudaStreamSynchronize")


# ------------------------------------------------------------------------------------------
# The loaded build
# ------------------------------------------------------------------------------------------
def _loaded_cuda_build() -> bool:
    return bool(_loader._module()._with_cuda)


def test_the_required_paddle_gpu_build_is_the_one_loaded():
    """make test-paddle-gpu sets FD_MTP_REQUIRE_PADDLE_GPU: the run must be on the CUDA build
    (dispatch compiled with PADDLE_WITH_CUDA), against the CUDA paddle, from its own directory."""
    if os.environ.get("FD_MTP_REQUIRE_PADDLE_GPU") != "1":
        pytest.skip("not the Paddle GPU build's run (FD_MTP_REQUIRE_PADDLE_GPU is not 1)")
    import paddle

    assert paddle.is_compiled_with_cuda()
    assert _loaded_cuda_build()
    assert _loader.lib_dir() != _loader.LIB_DIR


def test_the_cuda_build_links_no_shared_cuda_runtime():
    """The extension's CUDA runtime is static (CUDA::cudart_static) and none of its symbols is
    exported: paddle's own libcudart (11.8 for paddlepaddle-gpu 2.6.2) stays the only shared one."""
    if not _loaded_cuda_build():
        pytest.skip("the loaded fd_mtp_ops is a CPU build (no CUDA runtime to link)")
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    libs = sorted(_loader.lib_dir().glob("*.so"))
    assert any(p.name == _loader.LIB_NAME for p in libs), libs
    for lib in libs:
        dynamic = subprocess.run(
            [readelf, "-d", "-W", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        assert needed, f"{lib.name}: readelf shows no NEEDED entry"
        assert not [n for n in needed if n.startswith("libcudart")], (lib.name, needed)
    symbols = subprocess.run(
        [readelf, "--dyn-syms", "-W", str(_loader.lib_dir() / _loader.LIB_NAME)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = [
        line.split()[-1]
        for line in symbols.splitlines()
        if " UND " not in line
        and re.search(r"\bcuda(Malloc|LaunchKernel|StreamSynchronize)\b", line)
    ]
    assert not exported, exported


# ------------------------------------------------------------------------------------------
# Error mode and check_pending (fd_mtp.ops)
# ------------------------------------------------------------------------------------------
def test_error_mode_round_trips_and_refuses_unknown_modes():
    previous = ops.set_error_mode("checked")
    try:
        assert _loader._module()._error_mode() == "checked"
        assert ops.set_error_mode("record") == "checked"
        with pytest.raises(ValueError, match="error mode must be one of deferred, checked, record"):
            ops.set_error_mode("sometimes")
    finally:
        ops.set_error_mode(previous)
    assert _loader._module()._error_mode() == previous


def test_check_pending_without_device_work_returns_none():
    """CPU ops raise at the call; with no stream record (no GPU op ran) nothing is pending."""
    _loader.load()
    assert ops.check_pending() is None
