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

# uv (Astral's installer, from PyPI) installs the packages: it fetches and unpacks them side by side
# and compiles no bytecode up front, where pip takes one after another (the test extra: 58 s -> 4 s;
# Phoenix's hundred packages in .venv-phoenix, scripts/phoenix-venv: 140 s -> 6-10 s). It reads
# UV_INDEX_URL / UV_DEFAULT_INDEX, not pip.conf. The package itself is built again (no cached build):
# its compiled modules must be those of the source as it is.
UV_REQUIREMENT := uv>=0.9
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python

$(RUNTIME_STAMP): pyproject.toml setup.py otelsignals/native.py $(NATIVE_SOURCES)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet '$(UV_REQUIREMENT)'
	$(UV_INSTALL) --reinstall-package otelsignals -e .
	@touch $(RUNTIME_STAMP)

# The test extra's packages only: `pip install -e '.[test]'` would build (and compile) the package again.
$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['test']))" > $(VENV)/test-requirements.txt
	$(UV_INSTALL) -r $(VENV)/test-requirements.txt
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
# where there is one core. PYTEST_PARALLEL= (empty) runs the suite in this process. Files are handed
# out in the order tests/conftest.py sorts them (those with a slow test first), not xdist's (the
# files with most tests first, which left the few long ones to the end: one process busy alone).
PYTEST_PARALLEL ?= -n auto --maxprocesses 2 --dist loadfile --no-loadscope-reorder

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
