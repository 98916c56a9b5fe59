#!/usr/bin/env bash
# The whole default suite on a machine that has only the Rust toolchain: installs what the suite
# needs (`just`; headless Chromium, which tests/report_html.rs renders report.html in), each step
# skipped when its result is already there, then runs `just test` (format, lints, every test, loom).
# Needs no Python engine. `.ci/run` starts with it.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"

# `just`: the PyPI wheel ships the binary (seconds) where a Python is there; else build it (minutes).
if ! command -v just >/dev/null 2>&1; then
    if command -v python3 >/dev/null 2>&1 \
        && python3 -m pip install --quiet --disable-pip-version-check rust-just 2>/dev/null; then
        PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
    fi
    command -v just >/dev/null 2>&1 || cargo install just --locked
fi
echo "test.sh: $(just --version)"

# Headless Chromium, from the distribution's packages.
if ! command -v chromium >/dev/null 2>&1; then
    as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
echo "test.sh: $(chromium --version 2>/dev/null)"

exec just test
