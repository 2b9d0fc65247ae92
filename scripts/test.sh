#!/usr/bin/env bash
# The test command: set up, check formatting and lints, run every test
# (unit, ABI conformance against Xen's headers, end-to-end over namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --no-build  # the tests build for themselves
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
# End-to-end tests share the host's namespaces and /run/splitnet: one at a time.
cargo test --workspace -- --test-threads=1
echo "== fuzz (each target for a bounded time; the corpora were replayed above)"
./scripts/fuzz.sh 15
