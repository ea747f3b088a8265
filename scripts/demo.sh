#!/usr/bin/env bash
# Runs the demo end to end: on the database DATABASE_URL names, or on a
# throwaway local PostgreSQL when it is unset.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DATABASE_URL:-}" ]; then
  scripts/ensure-postgres.sh
fi
exec go run ./examples/bookings/demo
