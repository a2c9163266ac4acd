# fd_mtp developer commands. Each target creates (or reuses) the virtual environment .venv with
# the pinned requirements (CMake and Ninja included: no system CMake needed), builds what changed,
# and runs. With nothing changed, a target starts its real work within a few seconds.
#   make demo         the demo model (fd_mtp/assets) generates plainly, with MTP and with EAGLE-3, side by side
#   make test         the test suite (also compiles the CUDA sources when nvcc is installed;
#                     GPU tests skip where there is no GPU), then the paddleformers interop tests
#                     in their own environment .venv-interop (as make test-interop), then
#                     tests/ops against the Paddle GPU build (as make test-paddle-gpu; needs nvcc)
#   make bench        op benchmarks, checked against the numpy references: CSV + PNG under benchmarks/results/
#   make build        only set up and build the C++ ops
#   make cuda-module  only build the raw CUDA module fd_mtp_cuda (needs nvcc)
#   make test-interop only the paddleformers interop tests, in their own environment .venv-interop
#                     (requirements-interop.txt: paddleformers 1.2.0 needs numpy 1.26)
#   make paddle-gpu   only build the Paddle extension with its CUDA branch (PADDLE_WITH_CUDA) against
#                     paddlepaddle-gpu 2.6.2 in its own environment .venv-gpu (requirements-gpu.txt),
#                     into build/paddle-gpu/lib (never fd_mtp/_lib); checks it links no shared libcudart
#   make test-paddle-gpu  tests/ops against that build (imported on this machine, GPU or not:
#                     the ops run on CPU tensors, the dispatch code is the CUDA build's)
#   make simt         only build the CUDA kernels for the CPU emulator (tools/simt: build/simt/lib)
#   make test-simt    tests/simt, and the fast subset of tests/gpu on the emulator (random schedule)
#   make test-simt-full  every test of tests/gpu on the emulator, in order, then a random schedule
#   make test-simt-tsan  the kernels with shared memory under ThreadSanitizer (an OS thread per
#                     CUDA thread; slow, not part of make test)
#   make stubs        regenerate the type stubs fd_mtp/ops/*.pyi from the schema (committed;
#                     tests/ops/test_stubs.py checks they are current)
#   make lint         ruff (format check + lint) over Python, clang-format check over custom_ops/
#   make format       apply ruff format / ruff's fixes and clang-format
# Variables: PYTHON (the interpreter that makes .venv, default python3), PYTEST_ARGS,
# WITH_CUDA_MODULE=0 (make test without compiling the CUDA sources), WITH_SIMT=0 (make test
# without the emulated GPU tests), WITH_INTEROP=0 (make test without the interop tests and their
# environment), WITH_PADDLE_GPU=0 (make test without the Paddle GPU build and its environment;
# default 0 where nvcc is missing), FD_MTP_CUDA_ARCHITECTURES (the CUDA architectures of every CUDA
# build, default "80;90"), SIMT_SEED (the random schedule's seed, default 1).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS := $(VENV)/.requirements-installed
EDITABLE := $(VENV)/.fd_mtp-editable
OPS_LIB := fd_mtp/_lib/libfd_mtp_ops.so
CUDA_STAMP := build/.cuda-module-built
SIMT_STAMP := build/.simt-built
SIMT_TSAN_STAMP := build/.simt-tsan-built
WITH_SIMT ?= 1
WITH_INTEROP ?= 1
INTEROP_VENV ?= .venv-interop
INTEROP_DEPS := $(INTEROP_VENV)/.requirements-installed
INTEROP_TESTS := tests/model/test_interop_paddleformers.py
# The same checkout (PYTHONPATH), its built ops, another interpreter with paddleformers.
INTEROP_PYTEST = PYTHONPATH=$(CURDIR) FD_MTP_REQUIRE_PADDLEFORMERS=1 $(INTEROP_VENV)/bin/python -m pytest -p no:cacheprovider $(INTEROP_TESTS)
SIMT_SEED ?= 1
PYTEST_ARGS ?=
NVCC := $(shell command -v nvcc 2>/dev/null)
WITH_CUDA_MODULE ?= $(if $(NVCC),1,0)
# The Paddle GPU build (make paddle-gpu / test-paddle-gpu): its own environment, build directory
# and output directory, so it never touches .venv, build/cmake or fd_mtp/_lib.
WITH_PADDLE_GPU ?= $(if $(NVCC),1,0)
GPU_VENV ?= .venv-gpu
GPU_DEPS := $(GPU_VENV)/.requirements-installed
GPU_BUILD := build/paddle-gpu
GPU_LIB_DIR := $(GPU_BUILD)/lib
GPU_OPS_LIB := $(GPU_LIB_DIR)/libfd_mtp_ops.so
# The checkout's fd_mtp (PYTHONPATH) on the GPU build's library (FD_MTP_OPS_LIB_DIR);
# FD_MTP_REQUIRE_PADDLE_GPU makes tests/ops/test_paddle_gpu_build.py insist that it is that build.
PADDLE_GPU_PYTEST = PYTHONPATH=$(CURDIR) FD_MTP_OPS_LIB_DIR=$(CURDIR)/$(GPU_LIB_DIR) FD_MTP_REQUIRE_PADDLE_GPU=1 $(GPU_VENV)/bin/python -m pytest -p no:cacheprovider tests/ops

# Everything the C++ build reads (make re-runs the build when one of these is newer than the library).
BUILD_INPUTS := CMakeLists.txt $(wildcard cmake/*.py fd_mtp/schema/*.py) $(shell find custom_ops -type f 2>/dev/null)

CXX_SOURCES = $(shell find custom_ops tools/simt -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' 2>/dev/null)
# The emulator's build reads the kernels' inputs and its own sources.
SIMT_INPUTS := $(BUILD_INPUTS) $(shell find tools/simt -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name 'CMakeLists.txt' -o -name '*.py' \) -not -path '*/python/*' 2>/dev/null)
# tests/gpu on the emulator: the CuPy stand-in and build/simt/lib (tests/gpu/conftest.py).
SIMT_PYTEST = FD_MTP_SIMT=1 $(PY) -m pytest -p no:cacheprovider
# The fast subset of make test: every op and case but the large vocabularies (V >= 32000) and the
# 600 / 1024 row batches of the penalty and top-p kernels (those run in make test-simt-full).
SIMT_FAST := -k "not 32000 and not 100000 and not vocab_100k and not top_p_dtypes and not ((top_p_matches or penalty_matches) and (600- or 1024-))"
# Small cases of the kernels with __shared__ memory or CUB (barriers), for ThreadSanitizer
# (an OS thread per CUDA thread: about a minute for these); tools/gpu_check.sh runs the same list
# under compute-sanitizer on a GPU.
SIMT_TSAN_TESTS := $(shell grep -v '^\#' tests/gpu/shared_memory_cases.txt | sed "s/.*/'&'/")

.PHONY: stubs demo test test-interop paddle-gpu test-paddle-gpu bench build cuda-module simt test-simt test-simt-full test-simt-tsan lint format clean

$(DEPS): requirements.txt
	@$(PYTHON) -c "import venv, ensurepip" 2>/dev/null || { echo "make: $(PYTHON) cannot create virtual environments: install python3-venv (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt
	touch $@

$(OPS_LIB): $(DEPS) $(BUILD_INPUTS)
	$(PY) cmake/fd_mtp_build.py ops
	@touch $@

# The editable install (the `fd-mtp` command, fd_mtp importable from .venv); its own build step
# finds the libraries above up to date.
$(EDITABLE): $(OPS_LIB) setup.py pyproject.toml
	$(PY) -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps -e .
	touch $@

build: $(EDITABLE)

$(CUDA_STAMP): $(DEPS) $(BUILD_INPUTS)
	$(PY) cmake/fd_mtp_build.py cuda-module
	@touch $@

cuda-module: $(CUDA_STAMP)

$(SIMT_STAMP): $(DEPS) $(SIMT_INPUTS)
	$(PY) tools/simt/build.py
	@touch $@

simt: $(SIMT_STAMP)

$(SIMT_TSAN_STAMP): $(DEPS) $(SIMT_INPUTS)
	$(PY) tools/simt/build.py --tsan
	@touch $@

test-simt: build $(SIMT_STAMP)
	$(PY) -m pytest -p no:cacheprovider -q tests/simt
	FD_MTP_SIMT_SCHEDULE=random:$(SIMT_SEED) $(SIMT_PYTEST) -q tests/gpu $(SIMT_FAST)

test-simt-full: build $(SIMT_STAMP)
	$(PY) -m pytest -p no:cacheprovider -q tests/simt
	FD_MTP_SIMT_SCHEDULE=ordered $(SIMT_PYTEST) -q tests/gpu
	FD_MTP_SIMT_SCHEDULE=random:$(SIMT_SEED) $(SIMT_PYTEST) -q tests/gpu

# One OS thread per CUDA thread, built with -fsanitize=thread (the Python interpreter is not:
# libtsan is preloaded). A race stops the run with the two racing accesses' stacks.
test-simt-tsan: build $(SIMT_TSAN_STAMP)
	$(PY) -m pytest -p no:cacheprovider -q tests/simt -k thread_sanitizer
	LD_PRELOAD=$$(g++ -print-file-name=libtsan.so) TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0" \
	  FD_MTP_CUDA_MODULE_DIR=$(CURDIR)/build/simt-tsan/lib $(SIMT_PYTEST) -q -x $(SIMT_TSAN_TESTS)

demo: build
	$(PY) -m fd_mtp.demo

# The interop tests run in their own environment (below), so the main run leaves their file out.
test: build $(if $(filter 1,$(WITH_CUDA_MODULE)),$(CUDA_STAMP)) $(if $(filter 1,$(WITH_SIMT)),$(SIMT_STAMP)) $(if $(filter 1,$(WITH_INTEROP)),$(INTEROP_DEPS)) $(if $(filter 1,$(WITH_PADDLE_GPU)),$(GPU_OPS_LIB))
	$(PY) -m pytest tests $(if $(filter 1,$(WITH_INTEROP)),--ignore=$(INTEROP_TESTS)) $(PYTEST_ARGS)
ifeq ($(WITH_SIMT),1)
	FD_MTP_SIMT_SCHEDULE=random:$(SIMT_SEED) $(SIMT_PYTEST) -q tests/gpu $(SIMT_FAST)
endif
ifeq ($(WITH_INTEROP),1)
	$(INTEROP_PYTEST) $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS selected none of them
endif
ifeq ($(WITH_PADDLE_GPU),1)
	$(PADDLE_GPU_PYTEST) $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS selected none of them
endif

$(INTEROP_DEPS): requirements-interop.txt
	$(PYTHON) -m venv $(INTEROP_VENV)
	$(INTEROP_VENV)/bin/python -m pip install --disable-pip-version-check --progress-bar off -q -r requirements-interop.txt
	touch $@

test-interop: build $(INTEROP_DEPS)
	$(INTEROP_PYTEST) $(PYTEST_ARGS)

# paddlepaddle-gpu is about 760 MB: the first install downloads it (pip caches it for later ones).
$(GPU_DEPS): requirements-gpu.txt
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --disable-pip-version-check --progress-bar off -q -r requirements-gpu.txt
	touch $@

# The extension with its CUDA branch (nvcc; CUDA runtime linked statically: the built libraries
# must not need a shared libcudart, which would be a second CUDA runtime beside paddle's own).
# With the raw CUDA module built (WITH_CUDA_MODULE=1), its kernels library (framework-free, the
# same sources and architectures) is linked instead of compiling the CUDA sources a second time.
GPU_KERNELS_LIB := $(if $(filter 1,$(WITH_CUDA_MODULE)),build/cuda-module/libfd_mtp_cuda_kernels.a)
$(GPU_OPS_LIB): $(GPU_DEPS) $(BUILD_INPUTS) $(if $(GPU_KERNELS_LIB),$(CUDA_STAMP))
	$(GPU_VENV)/bin/python cmake/fd_mtp_build.py ops --build-dir $(GPU_BUILD)/cmake --out-dir $(GPU_LIB_DIR) $(if $(GPU_KERNELS_LIB),--cuda-kernels-lib $(GPU_KERNELS_LIB))
	@if readelf -d $(GPU_LIB_DIR)/*.so | grep 'NEEDED.*libcudart'; then \
	  echo "make: the Paddle GPU build links a shared libcudart (above); it must link CUDA::cudart_static" >&2; exit 1; fi
	@touch $@

paddle-gpu: $(GPU_OPS_LIB)

test-paddle-gpu: $(GPU_OPS_LIB)
	$(PADDLE_GPU_PYTEST) $(PYTEST_ARGS)

bench: build
	$(PY) benchmarks/bench_ops.py --refcheck

stubs: $(DEPS)
	$(PY) -m fd_mtp.schema.stubs

lint: $(DEPS)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	@$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES) && echo "clang-format: $(words $(CXX_SOURCES)) files formatted"

format: $(DEPS)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

clean:
	rm -rf build fd_mtp/_lib/*.so *.egg-info $(EDITABLE) $(INTEROP_VENV) $(GPU_VENV)
