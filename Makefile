# fd_mtp developer commands. Each target creates (or reuses) the virtual environment .venv with
# the pinned requirements (CMake and Ninja included: no system CMake needed), builds what changed,
# and runs. With nothing changed, a target starts its real work within a few seconds.
#   make demo         the demo model (fd_mtp/assets) generates with and without MTP, side by side
#   make test         the test suite (also compiles the CUDA sources when nvcc is installed;
#                     GPU tests skip where there is no GPU)
#   make bench        op benchmarks, checked against the numpy references: CSV + PNG under benchmarks/results/
#   make build        only set up and build the C++ ops
#   make cuda-module  only build the raw CUDA module fd_mtp_cuda (needs nvcc)
#   make test-interop the paddleformers interop tests, in their own environment .venv-interop
#                     (requirements-interop.txt: paddleformers 1.2.0 needs numpy 1.26; CI runs it)
#   make lint         ruff (format check + lint) over Python, clang-format check over custom_ops/
#   make format       apply ruff format / ruff's fixes and clang-format
# Variables: PYTHON (the interpreter that makes .venv, default python3), PYTEST_ARGS,
# WITH_CUDA_MODULE=0 (make test without compiling the CUDA sources).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS := $(VENV)/.requirements-installed
EDITABLE := $(VENV)/.fd_mtp-editable
OPS_LIB := fd_mtp/_lib/libfd_mtp_ops.so
CUDA_STAMP := build/.cuda-module-built
PYTEST_ARGS ?=
NVCC := $(shell command -v nvcc 2>/dev/null)
WITH_CUDA_MODULE ?= $(if $(NVCC),1,0)

# Everything the C++ build reads (make re-runs the build when one of these is newer than the library).
BUILD_INPUTS := CMakeLists.txt $(wildcard cmake/*.py fd_mtp/schema/*.py) $(shell find custom_ops -type f 2>/dev/null)

CXX_SOURCES = $(shell find custom_ops -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' 2>/dev/null)

.PHONY: demo test test-interop bench build cuda-module lint format clean

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

demo: build
	$(PY) -m fd_mtp.demo

test: build $(if $(filter 1,$(WITH_CUDA_MODULE)),$(CUDA_STAMP))
	$(PY) -m pytest tests $(PYTEST_ARGS)

INTEROP_VENV ?= .venv-interop
INTEROP_DEPS := $(INTEROP_VENV)/.requirements-installed

$(INTEROP_DEPS): requirements-interop.txt
	$(PYTHON) -m venv $(INTEROP_VENV)
	$(INTEROP_VENV)/bin/python -m pip install --disable-pip-version-check --progress-bar off -q -r requirements-interop.txt
	touch $@

# The same checkout (PYTHONPATH), its built ops, another interpreter with paddleformers.
test-interop: build $(INTEROP_DEPS)
	PYTHONPATH=$(CURDIR) FD_MTP_REQUIRE_PADDLEFORMERS=1 $(INTEROP_VENV)/bin/python -m pytest -p no:cacheprovider tests/model/test_interop_paddleformers.py $(PYTEST_ARGS)

bench: build
	$(PY) benchmarks/bench_ops.py --refcheck

lint: $(DEPS)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	@$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES) && echo "clang-format: $(words $(CXX_SOURCES)) files formatted"

format: $(DEPS)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

clean:
	rm -rf build fd_mtp/_lib/*.so *.egg-info $(EDITABLE) $(INTEROP_VENV)
