#!/usr/bin/env bash
# Debian packages the project needs (idempotent). Runs as root on this machine kind.
set -euo pipefail
need=()
# --- Spark needs a JRE.
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# --- section: servers for the catalog/storage conformance tests
# PostgreSQL 15 for the SQL catalog tests (Debian puts initdb/pg_ctl in /usr/lib/postgresql/15/bin).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then need+=(postgresql); fi
# Node.js + npm run Azurite, the Azure Blob emulator (installed by the Makefile into .node/).
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
# --- section: Java Iceberg as a foreign writer
# The SQLite JDBC driver (pure Java + its JNI library) lets Java Iceberg's JdbcCatalog commit to the
# project's embedded SQLite catalog (Maven Central is unreachable, Debian packages it).
[ -f /usr/share/java/sqlite-jdbc.jar ] || need+=(libxerial-sqlite-jdbc-java)
# The PostgreSQL JDBC driver, for the bench's Java writers through a JdbcCatalog on PostgreSQL (concurrent_writers).
[ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
# --- section: browser for the UI test
# Headless Chromium driven by Playwright (launched with executable_path; never `playwright install`).
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  # apt's output goes to a log that is shown only when it fails.
  log=$(mktemp /tmp/lakehouse-apt.XXXXXX.log)
  echo "[setup]   installing Debian packages: ${need[*]} (log $log)"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq "${need[@]}"; } >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "installing ${need[*]} failed; full log: $log" >&2
    exit 1
  fi
fi
