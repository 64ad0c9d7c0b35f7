# fgrpo-verl developer entry points. Every install step lives here so a fresh machine can run them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# CPU torch first: verl lists no torch itself, and a fresh resolve would pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv test test-fast demo bench doctor clean slurm-deps

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_CPU)
	$(PIP) install -q -e ".[test]"
	touch $@

venv: $(VENV)/.installed

test: venv slurm-deps
	$(PY) -m pytest tests $(PYTEST_ARGS)

test-fast: venv
	$(PY) -m pytest tests -m "not e2e and not slurm" $(PYTEST_ARGS)

# The README's main job: GRPO vs F-GRPO through verl on CPU on the rare-mode task, exact rare-mass metrics over
# seeds (<= 10 min on 2 quiet cores after install). DEMO_ARGS="--task maze" runs the maze demo, "--full" the long variant.
DEMO_ARGS ?=
demo: venv
	$(VENV)/bin/fgrpo-verl demo $(DEMO_ARGS)

doctor: venv
	$(VENV)/bin/fgrpo-verl doctor

bench: venv
	$(PY) benchmarks/bench_estimator.py
	$(PY) benchmarks/bench_import.py
	$(PY) benchmarks/bench_pass_at_k.py
	$(PY) benchmarks/bench_cpu_step.py

# Real Slurm for the Slurm tests (scripts/slurm_cluster.sh): Debian's packages, installed only as root when
# missing (CI runs as root on a fresh machine); elsewhere those tests skip and say why.
slurm-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v slurmctld >/dev/null; then \
		apt-get update -q && apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge; \
	fi

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
