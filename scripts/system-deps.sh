#!/usr/bin/env bash
# Debian packages the project needs (idempotent). Runs as root on this machine kind.
set -euo pipefail
need=()
# --- Spark needs a JRE.
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# --- section: servers for the catalog/storage conformance tests (issue 5)
# PostgreSQL 15 for the SQL catalog tests (Debian puts initdb/pg_ctl in /usr/lib/postgresql/15/bin).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then need+=(postgresql); fi
# Node.js + npm run Azurite, the Azure Blob emulator (installed by the Makefile into .node/).
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
# --- section: browser for the UI test (issue 6)
# Headless Chromium driven by Playwright (launched with executable_path; never `playwright install`).
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
