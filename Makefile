# Two commands from a fresh clone: `make run` serves, `make test` proves it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint format bench migrate clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

## Serve on 127.0.0.1:8000 (embedded PostgreSQL and the stub responder unless configured).
run: $(STAMP)
	$(BIN)/todo-agent serve

## The whole suite against real PostgreSQL (TEST_DATABASE_URL, else an embedded one).
test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: $(STAMP)
	$(BIN)/todo-agent migrate

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .todo-agent .pytest_cache .mypy_cache .ruff_cache
