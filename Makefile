# Two entry points work on a fresh machine: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Azurite (Azure Blob emulator for the conformance tests), from the npm registry into a project-local folder.
# 3.37 is the first release that honours List Blobs' startFrom, which delta-rs uses to list the Delta log.
AZURITE_VERSION := 3.37.0
AZURITE := .node/.azurite-$(AZURITE_VERSION)
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
export DAGSTER_DISABLE_TELEMETRY := 1
export LAKEHOUSE_WAREHOUSE ?= $(CURDIR)/warehouse
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)

.PHONY: setup system-deps demo test lint dev bench docs clean

setup: system-deps $(STAMP) $(AZURITE) $(DAGSTER_HOME)/dagster.yaml

system-deps:
	@bash scripts/system-deps.sh

# pip's output goes to .venv/pip.log; it is shown only when the install fails.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "[setup]   installing Python packages into $(VENV) (log $(VENV)/pip.log)"
	@$(PY) -m pip install -q --upgrade pip > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@$(PY) -m pip install -q -e '.[test,servers,ui,java-iceberg,bench,docs]' >> $(VENV)/pip.log 2>&1 || { tail -n 60 $(VENV)/pip.log; exit 1; }
	@touch $(STAMP)

$(AZURITE):
	npm install --silent --no-audit --no-fund --no-save --prefix .node azurite@$(AZURITE_VERSION)
	@touch $(AZURITE)

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	@cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

demo: setup
	@$(PY) -m lakehouse_assets.demo

test: setup lint
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The architecture contracts ([tool.importlinter] in pyproject.toml: a Dagster-free core, no cycles,
# layers from the entry points down to storage and errors) and the linter.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache

dev: setup
	$(VENV)/bin/dagster dev -h 127.0.0.1 -w workspace.yaml

# BENCH_ARGS e.g. "--rows 10000000" or "--only write_day,merge_cdc"; see bench/vs_java_iceberg.py.
# Writes docs/performance.md and docs/performance.svg from this run (bench/docs_page.py).
bench: setup
	@start=$$(date +%s); $(PY) bench/vs_java_iceberg.py --json $(VENV)/bench.json $(BENCH_ARGS) && \
	$(PY) bench/docs_page.py $(VENV)/bench.json --docs docs --wall-seconds $$(( $$(date +%s) - start ))

# The documentation site (MkDocs, Material theme); --strict fails on any warning. `make test` builds it too
# (lakehouse_assets_tests/test_docs.py).
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf warehouse .dagster_home .node site
