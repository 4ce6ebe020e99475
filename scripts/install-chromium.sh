#!/usr/bin/env bash
# Debian's headless-capable Chromium for tests/test_html_reports.py, and Debian's chromedriver for
# tests/test_service_pages.py (Selenium): never a downloaded browser build.
set -euo pipefail
# shellcheck source=scripts/apt-part.sh
source "$(dirname "$0")/apt-part.sh"
apt_part chromium "command -v chromium && command -v chromedriver" "" chromium chromium-driver fonts-dejavu-core
