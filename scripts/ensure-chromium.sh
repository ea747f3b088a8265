#!/usr/bin/env bash
# Makes sure Chromium is installed: the operator console's browser tests
# (notification/console) drive it headless, and fail, saying so, without
# it. Installs Debian's chromium and chromium-driver packages when it is
# missing.
set -euo pipefail

if command -v chromium >/dev/null; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "Chromium is missing: install it (Debian: apt-get install chromium chromium-driver); the console's browser tests fail until then." >&2
  exit 0 # the other tests need none of it
fi
echo "Installing Chromium (Debian packages)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
