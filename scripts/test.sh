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
case " $* " in
  *" -race "*) scripts/ensure-gcc.sh ;;
esac
# Every package unless some are named.
case " $* " in
  *" ./"*) ;;
  *) set -- "$@" ./... ;;
esac
echo "test: downloading what is missing, building and running the tests (minutes the first time; each package's result as it ends)" >&2
exec go test -count=1 "$@"
