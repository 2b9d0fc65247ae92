#!/usr/bin/env bash
# Prints docs/ARCHITECTURE.md's generated blocks as the tree measures now:
# the crate diagram (each crate and the workspace crates it links) and the
# trusted-computing-base tables (per binary and per crate: lines of Rust,
# `unsafe` sites, packages). With --write, rewrites them in the doc; the
# diagram keeps each crate's description. The rules are in
# crates/tools/cli/tests/doc_tables.rs, whose test fails when the doc is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") ;;
    --write) export SPLITNET_DOCS_WRITE=1 ;;
    *) echo "usage: scripts/sizes.sh [--write]" >&2; exit 2 ;;
esac
# The blocks are what the test prints between its own progress lines.
cargo test -q -p splitnet --test doc_tables -- --ignored --exact \
    print_architecture_blocks --nocapture |
    sed -n '/^<!-- sizes.sh: /,/^<!-- sizes.sh: end -->$/p'
