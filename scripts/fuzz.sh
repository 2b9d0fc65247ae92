#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [SECONDS] [--grow]
# Runs every fuzz target under libFuzzer for SECONDS each (default 20),
# starting from the checked-in corpus, and prints the executions per target
# and in all. Needs the nightly toolchain; installs cargo-fuzz if it is
# missing. New interesting inputs go to a scratch folder, or with --grow into
# fuzz/corpus/<target>/ (then minimise with `cargo +nightly fuzz cmin -O
# <target>`). A crash stops the run and leaves its input under fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-20}"
grow="${2:-}"
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: no nightly toolchain; skipping the fuzz runs (cargo test still replays the corpora)"
    exit 0
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^splitnet-fuzz-targets$')
total=0
for t in $targets; do
    log=$(mktemp)
    dirs=("corpus/$t")
    if [ "$grow" != "--grow" ]; then
        scratch=$(mktemp -d)
        dirs=("$scratch" "corpus/$t")
    fi
    if ! cargo +nightly fuzz run -O "$t" "${dirs[@]}" -- -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz: $t FAILED (input under fuzz/artifacts/$t/)"
        exit 1
    fi
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
    rm -f "$log"
    if [ "$grow" != "--grow" ]; then rm -rf "$scratch"; fi
    echo "fuzz: $t: ${runs:-0} executions in ${secs} s, no crash"
    total=$((total + ${runs:-0}))
done
echo "fuzz: $total executions in all, no crash"
