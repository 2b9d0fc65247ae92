#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, run `splitnet demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck source=/dev/null
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
cargo build --release --quiet
exec ./target/release/splitnet demo "$@"
