# agent-runtime developer commands. `make run` and `make test` work on a fresh clone: they create
# .venv and install the project (again only when pyproject.toml changes) before doing anything.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?=
TESTS  ?= tests
PYTEST_ARGS ?=
JOBS   ?= 2
BENCH_ARGS ?=

.DEFAULT_GOAL := help

# Python caches compiled modules in __pycache__ (ignored by git) unless PYTHONDONTWRITEBYTECODE is
# set, as it is on some machines; without the cache every process compiles the app (and pytest
# re-rewrites every test module) from source: about 0.2 s more per server or worker process the
# tests start, and 6 s more per pytest process to collect the suite.
unexport PYTHONDONTWRITEBYTECODE
AI_SDK := tests/e2e/ai_sdk
AI_SDK_STAMP := $(AI_SDK)/node_modules/.installed

.PHONY: help setup sysdeps browser npmdeps vendor-supabase run test screenshots lint fmt bench clean distclean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing agent-runtime and its dev tools into $(VENV) (only when pyproject.toml changes)…"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) sysdeps ## create .venv and install the project with dev tools (when needed)

# bubblewrap isolates run_python/run_shell (without it those tools refuse to run).
sysdeps: ## install bubblewrap from the distribution when missing (as root with apt-get)
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (sandbox for run_python/run_shell)…"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "warning: bubblewrap (bwrap) is not installed: code-execution tools will refuse to run"; \
	  fi; }

# Chromium runs the browser test (Playwright drives the distribution's browser: nothing is
# downloaded from a CDN); only the tests need it, so `make run` does not install it.
browser: ## install chromium from the distribution when missing (as root with apt-get)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (the browser test drives it with Playwright)…"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "warning: chromium is not installed: tests/e2e/test_browser_stream.py will fail"; \
	  fi; }

# The npm test clients, pinned by one package-lock.json: the AI SDK client the chat end-to-end
# tests drive (tests/e2e/test_ai_sdk_chat.py) and axe-core, the accessibility checker the
# workbench's audit injects (tests/e2e/test_workbench_a11y.py); installed into the ignored
# node_modules only when the lock file changes.
$(AI_SDK_STAMP): $(AI_SDK)/package-lock.json $(AI_SDK)/package.json
	@echo "installing the npm test clients (ai, axe-core) into $(AI_SDK)/node_modules (only when its lock changes)…"
	npm ci --prefix $(AI_SDK) --no-audit --no-fund --loglevel=error
	touch $(AI_SDK_STAMP)

npmdeps: ## install the npm test clients (`ai`, `axe-core`) when node/npm are present
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(AI_SDK_STAMP); \
	else echo "warning: npm is not installed: the AI SDK and axe audit tests will be skipped"; fi

# The workbench's Supabase sign-in loads the browser build of @supabase/supabase-js, committed in
# app/web/static/vendor/supabase-js/ (so `make run` and the Docker image need no Node). This
# refreshes it from the npm registry, checking the tarball against the registry's integrity.
SUPABASE_JS_VERSION ?= 2.119.1
SUPABASE_JS_DIR := app/web/static/vendor/supabase-js
vendor-supabase: ## refresh the vendored @supabase/supabase-js browser bundle (SUPABASE_JS_VERSION=…)
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	tgz=$$(cd "$$tmp" && npm pack --silent @supabase/supabase-js@$(SUPABASE_JS_VERSION)); \
	want=$$(npm view @supabase/supabase-js@$(SUPABASE_JS_VERSION) dist.integrity); \
	got="sha512-$$(openssl dgst -sha512 -binary "$$tmp/$$tgz" | base64 -w0)"; \
	[ "$$want" = "$$got" ] || { echo "integrity mismatch: $$got != $$want"; exit 1; }; \
	tar xzf "$$tmp/$$tgz" -C "$$tmp"; \
	cp "$$tmp/package/dist/umd/supabase.js" "$$tmp/package/LICENSE" $(SUPABASE_JS_DIR)/; \
	echo "vendored @supabase/supabase-js $(SUPABASE_JS_VERSION) ($$got): update $(SUPABASE_JS_DIR)/README.md"

run: $(STAMP) sysdeps ## serve API + workers (+ embedded Postgres if DATABASE_URL is unset); PORT=… to move
	$(BIN)/agent-runtime serve $(if $(PORT),--port $(PORT))

# Two passes: the tests on JOBS processes (pytest-xdist), then the `serial` ones alone (sandbox
# process counts, kill -9 and lease deadlines). Exit 5 (nothing collected in a pass) is fine.
test: $(STAMP) sysdeps browser npmdeps ## the whole test suite (embedded Postgres, or DATABASE_URL if set); TESTS=… to narrow
	$(BIN)/pytest $(TESTS) -m "not serial" -n $(JOBS) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest $(TESTS) -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]

screenshots: $(STAMP) sysdeps browser ## rerun the workbench's browser tests, saving their screenshots into docs/screenshots/
	WORKBENCH_SCREENSHOTS=1 $(BIN)/pytest tests/e2e -k workbench -n $(JOBS) $(PYTEST_ARGS)

lint: $(STAMP) ## ruff check, ruff format --check, mypy --strict, import contracts (lint-imports)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

fmt: $(STAMP) ## format and auto-fix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP) ## queue benchmark (BENCH_ARGS="--runs 400 --sessions 50 …")
	$(BIN)/python bench/queue/run.py $(BENCH_ARGS)

clean: ## remove caches and build output (keeps .venv and .data, the dev database)
	rm -rf .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean ## also remove .venv and .data (the dev database and JWT secret)
	rm -rf $(VENV) .data
