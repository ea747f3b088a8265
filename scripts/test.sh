#!/usr/bin/env bash
# Runs every test against a real PostgreSQL that the tests start themselves
# (or the server TIDINGS_TEST_DATABASE_URL names), the clock-skew tests
# against one whose clock libfaketime sets off, and the operator console's
# browser tests in a headless Chromium. Extra arguments go to go test, e.g.
# scripts/test.sh -race -run TestSupervise ./relay/
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-postgres.sh
scripts/ensure-faketime.sh
scripts/ensure-chromium.sh
# Every package unless some are named.
case " $* " in
  *" ./"*) ;;
  *) set -- "$@" ./... ;;
esac
exec go test -count=1 "$@"
