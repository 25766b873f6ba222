#!/usr/bin/env bash
# The whole test suite: dependencies, release build, formatting, lints, tests.
# Exits non-zero on the first failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() {
    echo
    echo "==> $*"
}

step "install dependencies"
./scripts/install-deps.sh

step "build (release)"
cargo build --release --workspace

step "format check"
cargo fmt --all -- --check

step "clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "tests (release)"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --release
else
    echo "cargo-nextest not found; using cargo test"
    cargo test --workspace --release
fi

step "all tests passed"
