#!/usr/bin/env bash
# Every test of ferroce: formatting, lints, the unit and integration tests
# with DPDK, the examples, and the build without DPDK. Tests that need
# root (network namespaces, hugepages) are #[ignore = "needs root: ..."]:
# an unprivileged run lists them as ignored, and run as root this script
# runs them in a step of their own (their test binaries are named there).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, with and without DPDK)"
cargo clippy --all-targets -q -- -D warnings
cargo clippy --all-targets --no-default-features -q -- -D warnings

step "tests with DPDK"
cargo test --release -q -- --test-threads=2

if [ "$(id -u)" = 0 ]; then
    step "tests that need root (network namespaces, hugepages)"
    cargo test --release -q --test af_packet --test eal --test perftest --test pingpong \
        -- --ignored --test-threads=2
else
    step "not root: the tests that need root were ignored (listed above)"
fi

step "examples"
cargo run --release -q --example rc_write
cargo run --release -q --example rc_lcores
cargo run --release -q --example sim_incast

step "tests without DPDK"
cargo test --release --no-default-features -q

echo
echo "all tests passed"
