#!/usr/bin/env bash
# test.sh: the whole test suite, as CI runs it (`.ci/run` calls exactly this).
# Installs what it needs (scripts/setup.sh), then: formatting, clippy with the workspace lints,
# and every test of every crate. Privileged tests run for real here (root, namespaces, cgroups);
# under CI=true a privileged test that cannot run fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo test --locked --workspace --no-fail-fast -- --test-threads="${PIER_TEST_THREADS:-4}"
