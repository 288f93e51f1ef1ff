# Developer entry points. `make test` is what CI runs (via .ci/run).
PYTHON ?= python3.11
VENV ?= .venv
VPY := $(VENV)/bin/python
VPIP := $(VENV)/bin/pip
RUFF := $(VENV)/bin/ruff
# Pinned so pip resolves the local CPU wheel instead of pulling CUDA packages.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: setup test lint demo bench perf

$(VPY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VPY)
	$(VPIP) install "$(TORCH_SPEC)"
	$(VPIP) install -e ".[dev]"
	touch $@

$(BENCH_STAMP): $(STAMP)
	$(VPIP) install -e ".[bench]"
	touch $@

setup: $(STAMP)

lint: setup
	$(RUFF) check botorch_sketch tests benchmarks
	$(RUFF) format --check botorch_sketch tests benchmarks

# Two xdist workers on two cores: one BLAS/OpenMP thread each avoids oversubscription.
# The outcome tests run a second time under another numeric path (floating point
# differs between CPUs: AVX-512 vs AVX2 kernels, MKL's code paths), so that an
# outcome assertion without margin fails here rather than on a user's machine.
test: setup lint
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(VPY) -m pytest -n 2
	ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
		$(VPY) -m pytest -n 2 -m outcome

# The BBKB loop is many small tensor ops: one thread is ~4x faster than two here.
demo: setup
	OMP_NUM_THREADS=1 $(VPY) -m botorch_sketch.demo

bench: $(BENCH_STAMP)
	$(VPY) benchmarks/run_all.py

# BBKB loop and NystromGP timings against the machine's GEMM flop limit.
perf: $(BENCH_STAMP)
	OMP_NUM_THREADS=1 $(VPY) benchmarks/bench_perf.py --standardized-runs 1 --T-standardized 1000 --nystrom-threads 2
