#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for tests/test_html_reports.py, and Debian's chromedriver for
# tests/test_service_pages.py (Selenium), only when missing, so CI on a fresh machine gets them and a
# machine that already has them pays nothing.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-chromium: chromium is missing and installing it needs root (apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
command -v chromium >/dev/null && command -v chromedriver >/dev/null
