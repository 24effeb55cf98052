# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit clean

$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## stream sample prompts through the local simulator into a local Delta table
	$(BIN)/dspark-json demo

test: lint $(STAMP)  ## lint, type-check and run the whole test suite
	$(BIN)/python -m pytest

unit: $(STAMP)  ## the fast tests only (no Spark)
	$(BIN)/python -m pytest -m "not spark"

lint: $(STAMP)
	$(BIN)/ruff check dspark_json tests benchmarks
	$(BIN)/ruff format --check dspark_json tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) demo-output .pytest_cache .mypy_cache .ruff_cache *.egg-info
