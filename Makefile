# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The oldest Spark supported (pyproject's pin starts at 4.0): `make test-oldest` runs the tests
# of what differs between Spark versions (dspark_json/compat.py: batch reads, read limits,
# availableNow, restarts, journal replays), streaming into Delta and the kill -9 exactly-once
# proof in a second virtualenv, kept between runs like .venv.
OLDEST_PYSPARK := 4.0.5
VENV_OLDEST    := .venv-oldest
STAMP_OLDEST   := $(VENV_OLDEST)/.installed-$(OLDEST_PYSPARK)
OLDEST_TESTS   := tests/test_compat.py tests/spark/test_compat.py tests/spark/test_source.py \
                  tests/spark/test_delta.py \
                  tests/spark/test_exactly_once.py::test_kill_9_at_every_point_then_restart_lands_each_prompt_once

.PHONY: demo test test-oldest test-gateways test-vllm lint unit mutate docs clean

$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)  ## stream sample prompts through the local simulator into a local Delta table
	$(BIN)/dspark-json demo

test: lint $(STAMP)  ## lint, type-check and run the whole test suite, then test-oldest, test-gateways and test-vllm
	$(BIN)/python -m tests.stores.emulators  # Azurite from npm, once, into ~/.cache/dspark-json
	tests/report/install_chromium.sh || echo "tests/report/install_chromium.sh failed: the report's browser test will be skipped" >&2
	$(BIN)/python -m pytest
	$(MAKE) test-oldest
	$(MAKE) test-gateways
	$(MAKE) test-vllm

$(STAMP_OLDEST): pyproject.toml setup.cfg
	test -x $(VENV_OLDEST)/bin/python || $(PYTHON) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_OLDEST)/bin/python -m pip install --quiet -e . 'pyspark==$(OLDEST_PYSPARK)' \
		'pytest>=8' 'pytest-timeout>=2.3'
	touch $(STAMP_OLDEST)

test-oldest: $(STAMP_OLDEST)  ## the Spark end-to-end tests on the oldest supported pyspark
	$(VENV_OLDEST)/bin/python -m pytest $(OLDEST_TESTS)

# Real gateways in front of simulator processes: LiteLLM's proxy and vllm-router, from PyPI,
# installed into a virtualenv cached under ~/.cache/dspark-json (a minute the first time, nothing
# after). Where the install fails (no network), the tests are skipped and say why. About 5
# minutes on 2 cores, half of it LiteLLM's rpm windows (a minute each) waited out. Part of
# `make test`.
test-gateways: $(STAMP)  ## the tests through real LiteLLM proxy and vllm-router
	tests/gateways/install.sh || echo "tests/gateways/install.sh failed: the gateway tests will be skipped" >&2
	$(BIN)/python -m pytest -m gateway tests/gateways

# Real vLLM (CPU build, a tiny random-weight model built here): installed into a virtualenv
# cached under ~/.cache/dspark-json (3.4 GB; minutes the first time, seconds after), one server
# started and stopped for the tier (the first test waits for it to load, hence a per-test limit of
# 600 s, not the suite's 120). Part of `make test`. DSPARK_VLLM_URL=http://... uses a server
# already running instead.
test-vllm: $(STAMP)  ## the tests against real vLLM
	tests/vllm/install.sh
	$(BIN)/python -m pytest -m vllm tests/vllm --timeout=600

unit: $(STAMP)  ## the fast tests only (no Spark)
	$(BIN)/python -m tests.stores.emulators
	$(BIN)/python -m pytest -m "not spark"

# Not part of `make test` (about an hour on 2 cores). MUTATE_JOBS=n tests n mutants at once.
mutate: $(STAMP)  ## mutation testing of the core modules: benchmarks/results/mutation.md
	test -x $(BIN)/mutmut || $(BIN)/python -m pip install --quiet -e '.[mutate]'
	$(BIN)/python benchmarks/mutation/run.py --jobs $(or $(MUTATE_JOBS),1)

# The docs site (mkdocs.yml, docs/), served at http://127.0.0.1:8000 as you edit; the reference
# pages are generated from the code (docs/gen_reference.py). tests/test_site.py builds it strictly.
docs: $(STAMP)  ## serve the docs site locally
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

# Everything of ours that is Python: the package, the two modules Spark finds by name, the tests,
# the benchmarks and the docs site's generator.
LINTED := dspark_json pyspark_dspark_json.py pyspark_dspark_delta.py tests benchmarks docs/*.py

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VENV_OLDEST) demo-output site .pytest_cache .mypy_cache .ruff_cache *.egg-info
