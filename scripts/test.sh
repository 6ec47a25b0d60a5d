#!/usr/bin/env bash
# Runs every check on a fresh Debian 12 machine: installs missing packages, then formatting,
# lints, unit and integration tests (the DPDK ones need root and skip without it), then the
# end-to-end tests. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace"
cargo test --workspace

if compgen -G "tests/e2e/test_*.py" >/dev/null; then
    step "end-to-end tests (tests/e2e)"
    # Debian's python3 has python3-pytest; another python3 may come first on PATH.
    /usr/bin/python3 -m pytest -q tests/e2e
fi

step "fuzz the packet parser for ${SPILLWAY_FUZZ_SECONDS:-20}s (scripts/fuzz.sh)"
bash scripts/fuzz.sh "${SPILLWAY_FUZZ_SECONDS:-20}"

step "all checks passed"
