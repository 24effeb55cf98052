#!/bin/sh
# Headless Chromium for tests/test_report.py (the report page opened as a browser would):
# Debian's package. `make test` calls this; where it cannot be installed, the test skips and
# says why.
set -e
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    SUDO=sudo
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
