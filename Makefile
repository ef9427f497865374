# The two commands of the README: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What is installed in .venv: the package with its runtime dependencies (enough for the demo and the
# sidecar), and on top of it the test extra (linters, type stubs, browsers, instrumentation libraries).
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo demo-phoenix run test lint bench clean

$(RUNTIME_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(RUNTIME_STAMP)

$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(TEST_STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/otelsignals demo

# The demo into a real Arize Phoenix (installed in .venv-phoenix), left running to browse.
demo-phoenix: $(RUNTIME_STAMP)
	scripts/demo-phoenix

run: $(RUNTIME_STAMP)
	$(BIN)/otelsignals run

# scripts/test-deps first: it installs the Debian packages the tests use (Redis, PostgreSQL 15,
# chromium, openssl, a word list) when missing, or, not root, says how.
test: $(TEST_STAMP)
	scripts/test-deps
	$(BIN)/ruff check otelsignals tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	scripts/dead-code
	$(BIN)/python -m pytest -q

bench: $(TEST_STAMP)
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) otelsignals-data
