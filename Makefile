# mdrag: `make demo` installs and runs mdrag on examples/docs; `make test` installs and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-fast lint bench clean

setup: $(VENV)/.installed

# torch first, pinned to the CPU build: a bare `torch` requirement pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

demo: setup
	BIN=$(BIN) bash examples/demo.sh

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check mdrag tests benchmarks
	$(BIN)/ruff format --check mdrag tests benchmarks
	$(BIN)/mypy mdrag --ignore-missing-imports

bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf .mdrag-demo .pytest_cache .ruff_cache
