#!/usr/bin/env bash
# Makes sure cgo works: the race detector (go test -race, as CI runs the
# tests) needs a C compiler, and Go turns cgo off when it finds none.
# Installs Debian's gcc and libc6-dev packages when it is missing.
set -euo pipefail

if [ "$(go env CGO_ENABLED)" = 1 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "-race needs cgo, and cgo a C compiler: install one (Debian: apt-get install gcc libc6-dev)." >&2
  exit 1
fi
echo "Installing a C compiler for the race detector (Debian packages)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq gcc libc6-dev >/dev/null
