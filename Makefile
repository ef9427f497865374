# The two commands of the README: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What is installed in .venv: the package with its runtime dependencies (enough for the demo and the
# sidecar), and on top of it the test extra (linters, type stubs, browsers, instrumentation libraries).
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo demo-phoenix run test lint bench clean

# The modules setup.py compiles with mypyc (listed in otelsignals/native.py) and those they import:
# the package is built again when one of them changes, so that tests and demo run compiled code of
# the source as it is (otherwise the package would run that source uncompiled: native.py).
NATIVE_SOURCES := $(shell $(PYTHON) -c "import runpy; n = runpy.run_path('otelsignals/native.py'); print(' '.join(str(n['source_path'](m)) for m in n['build_inputs']()))")

$(RUNTIME_STAMP): pyproject.toml setup.py otelsignals/native.py $(NATIVE_SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(RUNTIME_STAMP)

# The test extra's packages only: `pip install -e '.[test]'` would build (and compile) the package again.
$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['test']))" > $(VENV)/test-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/test-requirements.txt
	@touch $(TEST_STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/otelsignals demo

# The demo into a real Arize Phoenix (installed in .venv-phoenix), left running to browse.
demo-phoenix: $(RUNTIME_STAMP)
	scripts/demo-phoenix

run: $(RUNTIME_STAMP)
	$(BIN)/otelsignals run

# Two test processes (pytest-xdist), each taking whole files so that a file's servers start once; at
# most two, whatever the core count: the fault and latency tests are tuned on two cores. One process
# where there is one core. PYTEST_PARALLEL= (empty) runs the suite in this process.
PYTEST_PARALLEL ?= -n auto --maxprocesses 2 --dist loadfile

# scripts/test-deps first: it installs the Debian packages the tests use (Redis, PostgreSQL 15,
# chromium, openssl, a word list) when missing, or, not root, says how.
test: $(TEST_STAMP)
	scripts/test-deps
	$(BIN)/ruff check otelsignals tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	scripts/dead-code
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

bench: $(TEST_STAMP)
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) otelsignals-data
