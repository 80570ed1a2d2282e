# Two commands from a fresh clone: `make run` serves, `make test` proves it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Node programs the tests drive (tests/js/*) and the typed client (clients/*): each keeps a
# committed package.json and lockfile and is installed with `npm ci`. Without npm this says
# so loudly and the Node tests skip; under CI=true it fails.
JS_DIRS := $(patsubst %/package.json,%,$(wildcard tests/js/*/package.json clients/*/package.json))
JS_STAMPS := $(addsuffix /node_modules/.installed,$(JS_DIRS))

.PHONY: run test lint format bench migrate clean js client

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

%/node_modules/.installed: %/package.json %/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $* && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	elif [ "$$CI" = true ]; then \
		echo "CI=true and npm is missing: the Node tests cannot run" >&2; exit 1; \
	else \
		echo "*** npm not found: the Node tests in $* will be SKIPPED ***" >&2; \
	fi

js: $(JS_STAMPS)

## Serve on 127.0.0.1:8000 (embedded PostgreSQL and the stub responder unless configured).
run: $(STAMP)
	$(BIN)/todo-agent serve

# Run a second time with the service behind a real PgBouncer in transaction mode (Debian's
# `pgbouncer`, started by the tests; without it they skip loudly, under CI=true they fail):
# tasks, chat and streaming, lists and row-level security, events, the turn's statements.
POOLED_TESTS := tests/test_pooler.py tests/test_tasks.py tests/test_chat.py \
	tests/test_streaming.py tests/test_lists.py tests/test_events.py tests/test_sql_budget.py

## The whole suite against real PostgreSQL (TEST_DATABASE_URL, else an embedded one), on two
## workers, each with a database of its own; a module's tests stay together on one worker.
## Then POOLED_TESTS again through PgBouncer.
test: $(STAMP) $(JS_STAMPS)
	$(BIN)/python -m pytest -n 2 --dist loadfile
	TEST_THROUGH_PGBOUNCER=1 $(BIN)/python -m pytest -n 2 --dist loadfile $(POOLED_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrate: $(STAMP)
	$(BIN)/todo-agent migrate

## Regenerate clients/typescript/schema.d.ts from the app's OpenAPI document; commit it.
client: $(STAMP) clients/typescript/node_modules/.installed
	$(BIN)/python clients/typescript/generate.py

bench: $(STAMP)
	$(BIN)/python -m bench
	$(BIN)/python -m bench.documents

clean:
	rm -rf $(VENV) .todo-agent .pytest_cache .mypy_cache .ruff_cache $(addsuffix /node_modules,$(JS_DIRS))
