# Two commands from a fresh clone: `make run` serves, `make test` proves it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# caldav-server-tester and its caldav 3.x, apart from the environment (see the file).
DAV_TESTER := tests/dav_clients/server-tester.txt
# pytest-xdist workers for `make test` (see there).
TEST_WORKERS ?= 4

# Node programs the tests drive (tests/js/*) and the typed client (clients/*): each keeps a
# committed package.json and lockfile and is installed with `npm ci`. Without npm this says
# so loudly and the Node tests skip; under CI=true it fails.
JS_DIRS := $(patsubst %/package.json,%,$(wildcard tests/js/*/package.json clients/*/package.json))
JS_STAMPS := $(addsuffix /node_modules/.installed,$(JS_DIRS))

.PHONY: run test test-embedded lint format bench migrate clean js client

$(STAMP): pyproject.toml constraints.txt $(DAV_TESTER)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	rm -rf $(VENV)/dav-tester
	$(BIN)/python -m pip install --quiet --no-deps --target $(VENV)/dav-tester -r $(DAV_TESTER)
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

# Run a second time on the embedded PostgreSQL 16, which has pgvector (passages' vectors and
# their indexes exist there only), when the suite itself ran on another server: the schema
# against the models, the migrations down and up, documents and search by words and meaning.
EMBEDDED_TESTS := tests/test_migrations.py tests/test_document_vectors.py \
	tests/test_document_search.py tests/test_documents.py

## The whole suite against real PostgreSQL (TEST_DATABASE_URL, else an embedded one), on
## TEST_WORKERS workers, each with a database of its own; a module's tests stay together on
## one worker, handed out in the order tests/conftest.py gives them. Four on two
## cores: much of the suite waits (on servers, browsers, timers, other processes), and a
## module that waits leaves its core to another's; six contend for the CPU and run longer.
## Four workers hold at most about 50 of PostgreSQL's connections (its default allows 100).
## Then POOLED_TESTS again through PgBouncer, and EMBEDDED_TESTS on the embedded PostgreSQL
## when TEST_DATABASE_URL named another (without it the whole suite ran there already).
test: $(STAMP) $(JS_STAMPS)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	TEST_THROUGH_PGBOUNCER=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(POOLED_TESTS)
	@if [ -n "$$TEST_DATABASE_URL" ]; then $(MAKE) --no-print-directory test-embedded; fi

## EMBEDDED_TESTS on an embedded PostgreSQL 16 with pgvector, whatever TEST_DATABASE_URL says.
test-embedded: $(STAMP)
	env -u TEST_DATABASE_URL $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(EMBEDDED_TESTS)

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
