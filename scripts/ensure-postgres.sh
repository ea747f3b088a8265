#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries are installed: the tests and the
# demo start a throwaway cluster from them (unless a database URL is given).
# Installs Debian's postgresql package when they are missing.
set -euo pipefail

if [ -n "${TIDINGS_PG_BIN:-}" ] || compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
  exit 0
fi
if command -v initdb >/dev/null && command -v postgres >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "PostgreSQL server binaries are missing: install PostgreSQL (Debian: apt-get install postgresql)," >&2
  echo "or set TIDINGS_PG_BIN to the directory of initdb and postgres." >&2
  exit 1
fi
echo "Installing PostgreSQL (Debian package)..." >&2
export DEBIAN_FRONTEND=noninteractive
# Only the binaries are needed: keep the package from starting its own
# cluster. A policy the image has (Debian's container images ship one)
# stays as it was.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
apt-get install -y -qq postgresql postgresql-contrib >/dev/null
