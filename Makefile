# Two entry points on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean

$(STAMP): setup.py pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m pipelines.release --config pipelines/configs/sample_survey.toml --output out

lint: $(STAMP)
	$(BIN)/ruff check beam_dp pipelines tests benchmarks
	$(BIN)/ruff format --check beam_dp pipelines tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[benchmarks]"
	$(BIN)/python -m benchmarks.selection

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
