# Two commands for a fresh machine (see README):
#   make demo   - install into .venv and run the daemon (on a simulated node when this
#                 host has no GPUs/HCAs)
#   make test   - install into .venv, lint, and run the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= h100-ib

.PHONY: venv demo test test-fast bench lint clean

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
		$(BIN)/agentd run --simulate $(PROFILE); \
	fi

# ruff on everything; mypy --strict on agentd/ (pyproject.toml [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check agentd tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m "not e2e"

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
