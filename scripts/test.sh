#!/usr/bin/env bash
# Runs every check on a fresh Debian 12 machine, as root: installs missing packages, then
# formatting, lints, unit and integration tests (including the `#[ignore]`d ones that need root:
# DPDK EAL, network namespaces, tap devices), then the end-to-end tests (tests/e2e, which fail
# rather than skip when something they need is missing).
# Usage: sudo scripts/test.sh
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test.sh needs root: the DPDK tests (EAL, tap devices) and the end-to-end tests" \
        "(network namespaces) only run as root, and a run without them proves nothing." \
        "Run it as root (CI does: .ci/run), or run single tests as described in tests/e2e/README.md." >&2
    exit 1
fi

cd "$(dirname "$0")/.."

# Each step's wall time, printed as a table at the end (and when a step fails).
steps=()
step_name=""
step_start=$SECONDS
run_start=$SECONDS
end_step() {
    if [ -n "$step_name" ]; then
        steps+=("$(printf '%6ds  %s' $((SECONDS - step_start)) "$step_name")")
    fi
    step_name=""
}
step_table() {
    end_step
    printf '\n==> step times\n'
    printf '%s\n' "${steps[@]}"
    printf '%6ds  total\n' $((SECONDS - run_start))
}
trap step_table EXIT
step() {
    end_step
    step_name="$*"
    step_start=$SECONDS
    printf '\n==> %s\n' "$*"
}

step "install what is missing (scripts/install-deps.sh), reserve hugepages"
bash scripts/install-deps.sh
# Hugepages for the DPDK tests and the e2e balancers (they fall back, and say so, without them).
bash scripts/hugepages.sh 1024

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A one-off build keeps no incremental state and only line tables for backtraces: the target
# directory of a whole run stays near 2 GB instead of 5+ (a CI machine's disk is not ours to fill).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

step "cargo fmt --all --check"
cargo fmt --all --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace -- --include-ignored"
# The root-only tests are #[ignore = "needs root: ..."]: run them too (we are root).
cargo test --workspace -- --include-ignored

step "the phase clock, built in (cargo test -p spillway-dataplane --features phase-clock)"
# The benchmarks' phase clock (dataplane/src/path.rs) records nothing in the default build, so
# the workspace run above only checks that; its counting half needs the feature. Only the data
# plane and its path test are rebuilt, and only that one test runs.
cargo test -p spillway-dataplane --features phase-clock --test path -- \
    --exact the_phase_clock_counts_bursts_only_when_built_in

step "the release binaries (cargo build --release: the e2e tests run them, the package holds them)"
cargo build --release -p spillway -p spillway-ctl -p spillway-gen

if compgen -G "tests/e2e/test_*.py" >/dev/null; then
    step "end-to-end tests (tests/e2e), on the release binaries"
    # Debian's python3 has python3-pytest; another python3 may come first on PATH. With CI set
    # (and as root), a test that would skip for want of a binary or tool fails instead
    # (tests/e2e/conftest.py); -rfEs lists every failure, error and skip in the summary. The
    # tests run the release binaries, one at a time: the fleet tests measure bulk syncs,
    # floods and takeovers under load, which a debug build's balancers, several on two cores,
    # measure as the machine's speed rather than the code's.
    SPILLWAY_BIN="$PWD/target/release/spillway" CI="${CI:-true}" \
        /usr/bin/python3 -m pytest -q -rfEs --durations=15 tests/e2e
fi

step "Debian package: build it from those binaries, install it into a fresh Debian 12 root, run from there (scripts/package.sh --test)"
bash scripts/package.sh --test

step "fuzz the packet parser, the packet path, the config and scenario loaders, the admin API, fleet sync and QUIC-LB for ${SPILLWAY_FUZZ_SECONDS:-10}s each (scripts/fuzz.sh)"
bash scripts/fuzz.sh "${SPILLWAY_FUZZ_SECONDS:-10}"

end_step
printf '\n==> all checks passed\n'
