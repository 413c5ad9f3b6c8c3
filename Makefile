# Two entry points work on a fresh machine: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
# The Spark line: 3.5 (default) or 4 (`make test SPARK=4`, `make demo SPARK=4`), each in a venv of its own,
# its exact versions pinned by constraints/spark-$(SPARK).txt. Java Iceberg (a test reader and the bench's
# rival) exists here for Spark 3.5 only: on Spark 4 the tests that need it are deselected.
SPARK ?= 3.5
ifeq ($(SPARK),4)
VENV := .venv-spark4
EXTRAS := test,dev,servers,ui,bench,docs
PYTEST_MARKS := -m "not java_iceberg and not sail_session"
else ifeq ($(SPARK),3.5)
VENV := .venv
EXTRAS := test,dev,servers,ui,java-iceberg,bench,docs
PYTEST_MARKS :=
else
$(error SPARK must be 3.5 or 4, not $(SPARK))
endif
CONSTRAINTS := constraints/spark-$(SPARK).txt
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Sail, a test reader of the Delta side, refuses PySpark clients newer than 4.1: on Spark 4 its child process runs
# from a venv of its own with the thin client it supports (lakehouse_assets_tests/sail_reader.py).
SAIL_VENV := .venv-sail
SAIL_STAMP := $(SAIL_VENV)/.installed-stamp
ifeq ($(SPARK),4)
SAIL_SETUP := $(SAIL_STAMP)
export LAKEHOUSE_TEST_SAIL_PYTHON := $(CURDIR)/$(SAIL_VENV)/bin/python
endif
# The single-format Dagster integrations the bench's dagster_step workload compares a small Arrow asset with
# (dagster-iceberg needs pyiceberg<0.12): a venv of their own.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
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

.PHONY: setup system-deps demo test smoke connect lint dev bench docs reference clean

setup: system-deps $(STAMP) $(SAIL_SETUP) $(AZURITE) $(DAGSTER_HOME)/dagster.yaml

system-deps:
	@bash scripts/system-deps.sh

# The project and its extras go in through uv's pip interface (the test extra's uv, its version pinned there): the same
# requirement, constraints and wheels as pip, resolved in seconds where pip takes a minute and a half. Compiled to
# bytecode at install, as pip does: processes started with -B (multiprocessing's, Dagster's) never write .pyc files
# and would compile every import again. The output goes to .venv/pip.log; it is shown only when the install fails.
# PySpark is a source distribution, and a fresh venv's install built it again into a new entry of uv's cache (1 GB); uv
# keeps the old ones until pruned. On a machine that sets up many clones the cache grew to 71 GB and filled the disk.
UV_REQUIREMENT := $(shell grep -o '"uv==[^"]*"' pyproject.toml | tr -d '"')
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "[setup]   installing Python packages for Spark $(SPARK) into $(VENV) (log $(VENV)/pip.log)"
	@$(PY) -m pip install -q --upgrade pip '$(UV_REQUIREMENT)' > $(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -e '.[$(EXTRAS)]' -c $(CONSTRAINTS) >> $(VENV)/pip.log 2>&1 || { tail -n 60 $(VENV)/pip.log; exit 1; }
	@$(VENV)/bin/uv cache prune >> $(VENV)/pip.log 2>&1 || true
	@touch $(STAMP)

$(SAIL_STAMP): constraints/sail-client.txt
	@test -x $(SAIL_VENV)/bin/python || python3 -m venv $(SAIL_VENV)
	@echo "[setup]   installing Sail and the Spark Connect client it supports into $(SAIL_VENV) (log $(SAIL_VENV)/pip.log)"
	@$(SAIL_VENV)/bin/python -m pip install -q pysail pyspark-client -c constraints/sail-client.txt > $(SAIL_VENV)/pip.log 2>&1 || { tail -n 40 $(SAIL_VENV)/pip.log; exit 1; }
	@touch $(SAIL_STAMP)

$(PEERS_STAMP): constraints/peers.txt
	@test -x $(PEERS_VENV)/bin/python || python3 -m venv $(PEERS_VENV)
	@echo "[setup]   installing dagster-iceberg and dagster-deltalake into $(PEERS_VENV) (log $(PEERS_VENV)/pip.log)"
	@$(PEERS_VENV)/bin/python -m pip install -q dagster dagster-iceberg dagster-deltalake -c constraints/peers.txt > $(PEERS_VENV)/pip.log 2>&1 || { tail -n 40 $(PEERS_VENV)/pip.log; exit 1; }
	@touch $(PEERS_STAMP)

$(AZURITE):
	npm install --silent --no-audit --no-fund --no-save --prefix .node azurite@$(AZURITE_VERSION)
	@touch $(AZURITE)

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	@cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

demo: setup
	@$(PY) -m lakehouse_assets.demo

# The suite runs in TEST_WORKERS processes (pytest-xdist), each with its own Spark session and its own servers; a
# module's tests stay in one process, so its fixtures are made once, and modules go out in the order the suite collects
# them (conftest.py puts the `slow` ones first; xdist would otherwise order them by test count). Workers overlap the time tests spend waiting on the
# JVM, servers and subprocesses; on a 2-core machine the CPU is the limit beyond that. The slowest tests are listed at the end:
# the suite is meant to stay under 25 minutes on this machine. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=40 $(XDIST) $(PYTEST_MARKS) $(PYTEST_ARGS)

# The subset CI also runs on the other Spark line: write, merge, compaction, read, verify, time travel,
# rollback, the Dagster runs and a standalone Spark cluster.
smoke: setup
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "smoke and not java_iceberg and not sail_session" $(PYTEST_ARGS)

# The smoke subset on a Spark Connect session: the suite starts a Spark Connect server in its own process
# (lakehouse_assets_tests/connect_server.py) and the `spark` fixture and the Dagster resource talk to it. Spark 4 only.
connect: setup
	LAKEHOUSE_TEST_SPARK=connect $(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "smoke and not java_iceberg and not sail_session" $(PYTEST_ARGS)

# The architecture contracts ([tool.importlinter] in pyproject.toml: a Dagster-free core, no cycles,
# layers from the entry points down to storage and errors) and the linter.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-cache

dev: setup
	$(VENV)/bin/dagster dev -h 127.0.0.1 -w workspace.yaml

# BENCH_ARGS e.g. "--rows 10000000" or "--only write_day,merge_cdc"; see bench/vs_java_iceberg.py.
# MOR_ARGS e.g. "--rows 2000000 --merges 5": the merge-on-read workload (bench/merge_on_read.py), its own section.
# SIZE_ARGS e.g. "--files 1000,10000": the table_size workload (bench/table_size.py), its own section; up to a
# million files: "--files 1000,10000,100000,1000000 --java-max-files 10000 --reps 3" (about 40 minutes here).
# CONC_ARGS e.g. "--writers 8,16 --catalogs sqlite": the concurrent_writers workload (bench/concurrent_writers.py), its own section.
# DEL_ARGS e.g. "--rows 200000 --reps 3": the deletes workload (bench/deletes.py), DELETE, UPDATE and an erasure against Java Iceberg.
# Writes docs/performance.md and docs/performance.svg from this run (bench/docs_page.py), then adds our own
# timings on both Spark lines side by side (Java Iceberg exists here for Spark 3.5 only).
bench: setup $(PEERS_STAMP)
	@start=$$(date +%s); $(PY) bench/vs_java_iceberg.py --json $(VENV)/bench.json $(BENCH_ARGS) && \
	$(PY) bench/docs_page.py $(VENV)/bench.json --docs docs --wall-seconds $$(( $$(date +%s) - start ))
	$(PY) bench/merge_on_read.py $(MOR_ARGS) --json $(VENV)/bench-mor.json --markdown docs/performance.md
	$(PY) bench/table_size.py $(SIZE_ARGS) --json $(VENV)/bench-table-size.json --markdown docs/performance.md
	$(PY) bench/concurrent_writers.py $(CONC_ARGS) --json $(VENV)/bench-concurrent.json --markdown docs/performance.md
	$(PY) bench/deletes.py $(DEL_ARGS) --json $(VENV)/bench-deletes.json --markdown docs/performance.md
	$(MAKE) setup SPARK=4
	.venv/bin/python bench/spark_lines.py $(LINES_ARGS) --out .venv/bench-lines.json
	.venv-spark4/bin/python bench/spark_lines.py $(LINES_ARGS) --out .venv-spark4/bench-lines.json
	.venv-spark4/bin/python bench/spark_lines.py $(LINES_ARGS) --connect --out .venv-spark4/bench-lines-connect.json
	{ printf '\n## Our timings on each Spark line, classic and Spark Connect\n\n'; \
	  .venv/bin/python bench/spark_lines.py --compare .venv/bench-lines.json .venv-spark4/bench-lines.json .venv-spark4/bench-lines-connect.json; } >> docs/performance.md

# The documentation site (MkDocs, Material theme); --strict fails on any warning. `make test` builds it too
# (lakehouse_assets_tests/test_docs.py).
# docs/cli.md and docs/api.md from the code, docs/changelog.md from CHANGELOG.md: generated, checked in (test_reference.py).
reference: setup
	$(PY) scripts/reference.py

docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf warehouse .dagster_home .node .venv-spark4 site
