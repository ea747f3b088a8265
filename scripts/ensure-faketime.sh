#!/usr/bin/env bash
# Makes sure libfaketime is installed: the clock-skew tests start a
# throwaway cluster whose clock it sets off the application's
# (internal/pgtemp, Options.ClockOffset, which looks in the same places).
# Installs Debian's libfaketime package when it is missing.
set -euo pipefail

for lib in /usr/lib/*/faketime/libfaketime.so.1 /usr/lib64/faketime/libfaketime.so.1 \
  /usr/lib/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1; do
  if [ -e "$lib" ]; then
    exit 0
  fi
done
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "libfaketime is missing: install it (Debian: apt-get install libfaketime); the clock-skew tests fail until then." >&2
  exit 0 # the other tests need none of it
fi
echo "Installing libfaketime (Debian package)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq libfaketime >/dev/null
