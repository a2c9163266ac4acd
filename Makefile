# fd_mtp developer commands. Each target creates (or reuses) the virtual
# environment .venv with the pinned requirements, builds the extension, and runs.
#   make demo    the demo model (fd_mtp/assets) generates with and without MTP, side by side
#   make test    the test suite (GPU tests skip where there is no GPU)
#   make bench   op benchmarks: CSV + PNG under benchmarks/results/
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEPS := $(VENV)/.requirements-installed
PYTEST_ARGS ?=

.PHONY: demo test bench build clean

$(DEPS): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -r requirements.txt
	touch $@

build: $(DEPS)
	$(PY) -m pip install --disable-pip-version-check --no-build-isolation --no-deps -e .

demo: build
	$(PY) -m fd_mtp.demo

test: build
	$(PY) -m pytest tests $(PYTEST_ARGS)

bench: build
	$(PY) benchmarks/bench_ops.py

clean:
	rm -rf build fd_mtp/_lib/*.so *.egg-info
