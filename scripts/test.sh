#!/usr/bin/env bash
# Every test of ferroce: formatting, lints, the unit and integration tests
# with DPDK, the examples, and the build without DPDK. Tests that need
# root (network namespaces, hugepages) say so and skip when run
# unprivileged.
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

step "examples"
cargo run --release -q --example rc_write
cargo run --release -q --example sim_incast

step "tests without DPDK"
cargo test --release --no-default-features -q

echo
echo "all tests passed"
