#!/usr/bin/env bash
# Runs the demo end to end: on the database DATABASE_URL names, or on a
# throwaway local PostgreSQL when it is unset. Each step that can take a
# while on a fresh machine says what it does, and how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf 'demo: %s... ' "$1" >&2; start=$SECONDS; }
done_step() { echo "done ($((SECONDS - start)) s)" >&2; }

if [ -z "${DATABASE_URL:-}" ]; then
  step "checking for PostgreSQL's server binaries (installed with apt when missing)"
  scripts/ensure-postgres.sh
  done_step
fi
step "downloading the Go modules it needs (the first time only)"
go mod download
done_step
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
step "building the demo (a minute the first time, seconds after)"
go build -o "$bin/demo" ./examples/bookings/demo
done_step
"$bin/demo"
