#!/usr/bin/env bash
# Debian packages the project needs (idempotent): a JRE for Spark.
# Later sections add servers and browsers the tests use. Runs as root on this machine kind.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
