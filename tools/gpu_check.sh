#!/usr/bin/env bash
# The GPU check: build the CUDA module fd_mtp_cuda (no paddle) into fd_mtp/_lib, run the GPU
# parity tests (tests/gpu: fd_mtp.cuda on CuPy vs fd_mtp.reference on numpy), then the GPU
# benchmarks into benchmarks/results (BENCH=0 skips them):
#   bench_gpu_ops.py --quick   every CUDA op at batch 1 / 64 / 256, deferred vs checked errors,
#                              and the whole step: exact shapes vs the fixed-capacity variants;
#   bench_ngram.py             hybrid_mtp_ngram at batch 64, 8k history: the CUDA kernel vs the
#                              FastDeploy-style CPU op with its device<->host copies (--refcheck);
#   bench_gpu_step.py          the spec step (target side + one MTP substep) captured as CUDA
#                              graphs and replayed vs the same ops launched one by one, device
#                              time (CUDA events) at batch 8 and 256, V = 100k, beside the goal
#                              1.5 x the sum of the ops' bytes-moved floors + 3 us per kernel.
# SANITIZE=1 then runs compute-sanitizer: memcheck and initcheck over every CUDA op on its
# realistic inputs (test_gpu_op_inputs.py's parity cases at batches 1 and 33), memcheck and
# racecheck over the kernels with shared memory, CUB or barriers (tests/gpu/shared_memory_cases.txt).
# SANITIZE=full runs the whole of tests/gpu (CUDA IPC aside) under memcheck instead of plainly.
#
# Needs nvcc, cmake, a Python with pybind11, numpy, pytest and cupy; no paddle, no hypothesis,
# no network (matplotlib optional: without it the benchmarks write CSV only). Run from anywhere:
# tools/gpu_check.sh [pytest args]
#   env: PYTHON, CUDA_ARCH (default 90), JOBS, BENCH (default 1), SANITIZE (default 0),
#        STAGE_TIMEOUT (seconds per stage: build, tests, each sanitizer, benchmarks; default 600)
#
# pytest runs with --confcutdir=tests/gpu so tests/conftest.py (which imports hypothesis for the
# CPU tests) is not loaded; tests/gpu/conftest.py puts the checkout on sys.path.
# Exit status: 0 when the build, all tests, the sanitizers and the benchmarks pass, non-zero otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
CUDA_ARCH="${CUDA_ARCH:-90}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
BENCH="${BENCH:-1}"
SANITIZE="${SANITIZE:-0}"
STAGE_TIMEOUT="${STAGE_TIMEOUT:-600}"
BUILD_DIR="$ROOT/build/gpu"

echo "== fd_mtp GPU check: $(date -u +%FT%TZ)"
echo "python: $PYTHON ($("$PYTHON" --version 2>&1))"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: unavailable"
nvcc --version 2>/dev/null | tail -1 || echo "nvcc: not found"
"$PYTHON" -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'devices', cupy.cuda.runtime.getDeviceCount())" \
  || { echo "FAIL: cupy is not usable"; exit 2; }

echo "== build fd_mtp_cuda (sm_$CUDA_ARCH) in $BUILD_DIR"
start=$SECONDS
cmake -S "$ROOT" -B "$BUILD_DIR" -DFD_MTP_WITH_PADDLE=OFF -DFD_MTP_WITH_CUDA=ON \
  -DFD_MTP_CUDA_ARCHITECTURES="$CUDA_ARCH" -DPython3_EXECUTABLE="$PYTHON" \
  -DFD_MTP_OUTPUT_DIR="$ROOT/fd_mtp/_lib"
timeout "$STAGE_TIMEOUT" cmake --build "$BUILD_DIR" -j "$JOBS"
echo "build: $((SECONDS - start)) s"
"$PYTHON" -c "import fd_mtp.cuda as c; m = c.load(); print('loaded', m.__file__)"

set +e
# One pytest run under compute-sanitizer: sanitize TOOL WHAT PYTEST-ARGS...
sanitize() {
  local tool=$1 what=$2
  shift 2
  echo "== compute-sanitizer --tool $tool: $what"
  local t0=$SECONDS
  timeout "$STAGE_TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$PYTHON" -m pytest -q -p no:cacheprovider --confcutdir=tests/gpu "$@"
  local src=$?
  echo "$tool: exit $src, $((SECONDS - t0)) s"
  [ "$src" -eq 0 ] || rc=$((rc == 0 ? 5 : rc))
}
rc=0
if [ "$SANITIZE" = "full" ]; then
  # CUDA IPC (test_gpu_ipc.py: child processes) is left out of the run under the sanitizer.
  sanitize memcheck "the whole of tests/gpu but test_gpu_ipc.py" tests/gpu -ra \
    --ignore=tests/gpu/test_gpu_ipc.py "$@"
else
  echo "== pytest tests/gpu"
  start=$SECONDS
  timeout "$STAGE_TIMEOUT" "$PYTHON" -m pytest tests/gpu -q -p no:cacheprovider --confcutdir=tests/gpu -ra "$@"
  rc=$?
  echo "tests: $((SECONDS - start)) s"
fi
if [ "$SANITIZE" = "1" ] || [ "$SANITIZE" = "full" ]; then
  mapfile -t cases < <(grep -v '^#' tests/gpu/shared_memory_cases.txt)
  every_op=(tests/gpu/test_gpu_op_inputs.py -k "test_op_inputs_parity and not -600]")
  case_tools=(racecheck)  # the full run had them under memcheck already
  if [ "$SANITIZE" = "1" ]; then
    sanitize memcheck "every CUDA op on its realistic inputs (batches 1 and 33)" "${every_op[@]}"
    case_tools=(memcheck racecheck)
  fi
  sanitize initcheck "every CUDA op on its realistic inputs (batches 1 and 33)" "${every_op[@]}"
  for tool in "${case_tools[@]}"; do
    sanitize "$tool" "${#cases[@]} cases of tests/gpu/shared_memory_cases.txt" "${cases[@]}"
  done
fi
set -e
if [ "$BENCH" = "1" ]; then
  echo "== benchmarks (CSV under benchmarks/results)"
  start=$SECONDS
  timeout "$STAGE_TIMEOUT" "$PYTHON" benchmarks/bench_gpu_ops.py --quick || rc=$((rc == 0 ? 3 : rc))
  timeout "$STAGE_TIMEOUT" "$PYTHON" benchmarks/bench_ngram.py --refcheck --batches 64 --histories 8192 \
    --ops hybrid_mtp_ngram || rc=$((rc == 0 ? 4 : rc))
  echo "== the captured step (bench_gpu_step.py)"
  timeout "$STAGE_TIMEOUT" "$PYTHON" benchmarks/bench_gpu_step.py --batches 8,256 --vocab 100000 \
    || rc=$((rc == 0 ? 6 : rc))
  echo "benchmarks: $((SECONDS - start)) s"
fi
if [ "$rc" -eq 0 ]; then
  echo "== GPU check PASSED"
else
  echo "== GPU check FAILED (exit $rc: pytest's (124: timed out), or 5 a sanitizer, 3 bench_gpu_ops, 4 bench_ngram, 6 bench_gpu_step)"
fi
exit "$rc"
