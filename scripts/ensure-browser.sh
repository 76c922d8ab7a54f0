#!/usr/bin/env bash
# `make test` set-up: the playground's browser test (tests/e2e/test_playground.py) drives Debian's
# Chromium and ChromeDriver at /usr/bin. Installs them when missing: as root through apt-get,
# through `sudo -n` where that needs no password; otherwise stops with the command to run.
set -euo pipefail
PACKAGES=(chromium chromium-driver)
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "make test: the browser test needs Debian's Chromium and ChromeDriver (/usr/bin/chromium," >&2
    echo "/usr/bin/chromedriver), and installing them needs root. Run once, then make test again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${PACKAGES[*]}" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make test: the browser test needs Chromium at /usr/bin/chromium and ChromeDriver at" >&2
  echo "/usr/bin/chromedriver; this machine has no apt-get: install them with its package manager." >&2
  exit 1
fi
echo "[make test] installing ${PACKAGES[*]} for the playground's browser test"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
/usr/bin/chromium --version
