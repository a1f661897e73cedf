# One command to set up and run, one to set up and test (the README names both; CI calls `make test`).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv run test test-fast lint format typecheck bench train evaluate clean

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

run: venv
	$(BIN)/vllm-sentinel serve $(if $(CONFIG),--config $(CONFIG),)

LINTED := service tests scripts training_data

# Lint, format check, type check (mypy, strict: pyproject.toml), then the tests.
test: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy service
	$(BIN)/python -m pytest

# Unit tests only (no servers, brokers, browsers, wheel or training; see tests/conftest.py),
# about a minute and a half: for the edit-test loop. `make test` stays the whole suite.
test-fast: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy service
	$(BIN)/python -m pytest -q -m "not slow"

typecheck: venv
	$(BIN)/mypy service

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

format: venv
	$(BIN)/ruff format $(LINTED)

bench: venv
	$(BIN)/python scripts/bench_classify.py

train: venv
	$(BIN)/vllm-sentinel train

evaluate: venv
	$(BIN)/vllm-sentinel evaluate tests/corpus/cases

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
