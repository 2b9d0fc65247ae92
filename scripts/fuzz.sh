#!/usr/bin/env bash
# Usage: scripts/fuzz.sh [SECONDS] [--grow]
# Runs every fuzz target under libFuzzer for SECONDS each (default 20),
# starting from the checked-in corpus, and prints the executions per target
# and in all. The targets are built once, then run as many at a time as
# this machine has CPUs (SPLITNET_FUZZ_JOBS overrides), each on its own
# core for its full time. Needs the nightly toolchain; installs cargo-fuzz
# if it is missing. New interesting inputs go to a scratch folder, or with
# --grow into fuzz/corpus/<target>/ (then minimise with `cargo +nightly fuzz
# cmin -O <target>`). A crash stops the run and leaves its input under
# fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-20}"
grow="${2:-}"
jobs="${SPLITNET_FUZZ_JOBS:-$(nproc)}"
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: no nightly toolchain; skipping the fuzz runs (cargo test still replays the corpora)"
    exit 0
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^splitnet-fuzz-targets$')
echo "fuzz: building $(echo "$targets" | wc -w) targets"
cargo +nightly fuzz build -O
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# run TARGET: fuzzes one target into $logs/TARGET, then marks it
# TARGET.ok or TARGET.failed.
run() {
    local t=$1 scratch="" dirs=("corpus/$1")
    if [ "$grow" != "--grow" ]; then
        scratch=$(mktemp -d)
        dirs=("$scratch" "corpus/$t")
    fi
    if cargo +nightly fuzz run -O "$t" "${dirs[@]}" -- -max_total_time="$secs" -print_final_stats=1 >"$logs/$t" 2>&1; then
        touch "$logs/$t.ok"
    else
        touch "$logs/$t.failed"
    fi
    if [ -n "$scratch" ]; then rm -rf "$scratch"; fi
}

# failed: the first target marked failed, if any.
failed() {
    local f
    for f in "$logs"/*.failed; do
        if [ -e "$f" ]; then
            basename "$f" .failed
            return 0
        fi
    done
    return 0
}

# stop_on_crash: if a run failed, stops the others and exits with its log.
stop_on_crash() {
    local t
    t=$(failed)
    [ -z "$t" ] && return
    kill $(jobs -p) 2>/dev/null || true
    wait || true
    tail -40 "$logs/$t"
    echo "fuzz: $t FAILED (input under fuzz/artifacts/$t/)"
    exit 1
}

n=0
for t in $targets; do
    if [ "$n" -ge "$jobs" ]; then
        wait -n || true
        n=$((n - 1))
        stop_on_crash
    fi
    run "$t" &
    n=$((n + 1))
done
wait
stop_on_crash
total=0
for t in $targets; do
    runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$logs/$t" | tail -1)
    echo "fuzz: $t: ${runs:-0} executions in ${secs} s, no crash"
    total=$((total + ${runs:-0}))
done
echo "fuzz: $total executions in all, no crash"
