# Two commands for a fresh machine (see README):
#   make demo   - install into .venv and run the daemon (on a simulated node when this
#                 host has no GPUs/HCAs)
#   make test   - install into .venv, lint, and run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= h100-ib
# the demo's config: the defaults with 30 s kernel holds and counter windows, so every injected fault clears
DEMO_CONFIG := demo/agentd.toml

.PHONY: venv demo test test-fast bench lint lock helm docs clean gpu-check gpu-wheels gpu-compare

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "agentd needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@if [ -n "$$(ls -A /sys/class/infiniband 2>/dev/null)" ] || [ -e /sys/module/nvidia ]; then \
		echo "GPUs/HCAs found: running agentd on this host"; \
		$(BIN)/agentd run; \
	else \
		echo "no GPUs/HCAs on this host: running agentd on a simulated '$(PROFILE)' node"; \
		$(BIN)/agentd run --simulate $(PROFILE) --config $(DEMO_CONFIG); \
	fi

# ruff on everything; mypy --strict on agentd/ (pyproject.toml [tool.mypy]); no top-level
# name in agentd/ that nothing references (tools/unused_names.py: dead code goes); no Any
# in agentd/ without a comment saying why (tools/bare_any.py).
lint: $(STAMP)
	$(BIN)/ruff check agentd tests bench tools docs
	$(BIN)/mypy
	$(BIN)/python tools/unused_names.py
	$(BIN)/python tools/bare_any.py

# The suite on parallel workers (it waits on daemons, Prometheus and deadlines more than it
# computes), one test file per worker at a time so a file's shared daemons start once;
# temporary files on tmpfs (tests/conftest.py). tests/README.md says what each marker means.
TEST_WORKERS ?= 3
FAST := not (e2e or proc or tree or packaging or slow)
# Byte code is cached (in __pycache__/ beside the sources, ignored by git) even where the
# environment says not to: without it every worker rewrites every test module's asserts
# and every agentd process a test starts compiles agentd again (measured where
# PYTHONDONTWRITEBYTECODE=1: make test-fast 55 s every run, 45 s from the second run on).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

test: lint
	$(PYTEST) -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# The inner loop: no processes, no simulated trees of a test's own, no packaging, property
# tests at 20 examples. `bench/bench_test_suite.py` prints how long both take.
test-fast: $(STAMP)
	HYPOTHESIS_EXAMPLES=20 $(PYTEST) -q -p no:cacheprovider -n 2 -m "$(FAST)"

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

# packaging/requirements.lock: agentd's runtime dependencies, pinned with every published
# file's sha256 for every platform (x86_64 and aarch64 images, CPython 3.11), generated
# from pyproject.toml. The container image, the deb and the rpm install from it with
# pip --require-hashes, so two builds of one commit get the same bytes. Existing pins are
# kept; `make lock UPGRADE=1` moves every pin to the newest release the ranges allow.
# packaging/build-requirements.lock does the same for [build-system] requires (the
# container image builds agentd's wheel with exactly those).
LOCK := packaging/requirements.lock
BUILD_LOCK := packaging/build-requirements.lock
UV_VERSION := 0.13.9
UV_COMPILE = $(BIN)/uv pip compile --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade)
lock: $(STAMP)
	$(BIN)/pip install -q 'uv==$(UV_VERSION)'
	$(UV_COMPILE) pyproject.toml -o $(LOCK)
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
		| $(UV_COMPILE) - -o $(BUILD_LOCK)

# The Helm chart's copies of grafana/'s alert rules and dashboards, and the plain manifest
# packaging/k8s/daemonset.yaml rendered from the chart (tests/ops/test_helm.py keeps all
# three equal to their sources). Run after editing grafana/ or the chart.
helm: $(STAMP)
	$(BIN)/python packaging/helm/sync.py

# The parts of the docs that are facts of the code (the command table, the alert table, the
# dashboards' panel counts, the quoted bench figures): docs/generate.py, checked by tests/docs.
docs: $(STAMP)
	$(BIN)/python docs/generate.py

# The GPU check (docs/gpu-check.md, tests/gpu/README.md): on a machine with an NVIDIA GPU,
# one bounded run (<= 6 min) that records what agentd, nvidia-smi and NCCL see into
# GPU_CHECK_OUT; elsewhere it prints "no GPU: skipped" and exits 0. It needs no venv: on the
# lent device machine it runs with that machine's python3 and the wheels of gpu-wheels.
GPU_CHECK_OUT ?= gpu-check-out
GPU_WHEELS ?= .gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
gpu-check:
	$(PYTHON) tests/gpu/gpu_check.py --out $(GPU_CHECK_OUT) --wheels $(GPU_WHEELS)

# agentd's locked runtime dependencies as wheels for the device machine's Python (no network there)
gpu-wheels: $(STAMP)
	$(BIN)/python tests/gpu/wheels.py --dest $(GPU_WHEELS) --python-version $(GPU_PYTHON_VERSION)

# compare a gpu-check folder, here, no GPU needed: make gpu-compare DIR=gpu-check-out
DIR ?= $(GPU_CHECK_OUT)
gpu-compare: $(STAMP)
	$(BIN)/python -m tests.gpu.compare $(DIR)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
