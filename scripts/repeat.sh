#!/usr/bin/env bash
# Runs tests several times in a row and reports every failure, to find
# flaky tests (a flaky test is a bug: fix its cause, not its timeout).
#
#   scripts/repeat.sh [-n RUNS] [-- CARGO-TEST-ARGS...]
#
# Without CARGO-TEST-ARGS it runs the whole workspace, namespace tests
# included (as root, SPLITNET_REQUIRE_ROOT=1: a root test may not skip).
# Examples:
#   scripts/repeat.sh -n 20
#   scripts/repeat.sh -n 5 -- -p splitnet --test e2e_vxlan --test e2e_mq
# Each run's output is kept in target/repeat/<start time>/run-K.log; the
# summary names each failing test and in how many runs it failed. Exits 1
# if any run failed, 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=20
usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "$1"
}
while [ $# -gt 0 ]; do
    case $1 in
    -n)
        [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "repeat: -n takes a positive count" >&2; usage 2; }
        runs=$2
        shift 2
        ;;
    -h | --help) usage 0 ;;
    --)
        shift
        break
        ;;
    *)
        echo "repeat: unknown argument $1" >&2
        usage 2
        ;;
    esac
done
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--workspace)
# shellcheck source=/dev/null
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
export SPLITNET_REQUIRE_ROOT=1
dir=target/repeat/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$dir"
echo "repeat: building once (the e2e tests run the workspace's binaries)"
cargo build --workspace --bins --quiet
cargo test --no-run --quiet "${args[@]}"
failed_runs=0
for k in $(seq 1 "$runs"); do
    log=$dir/run-$k.log
    start=$(date +%s)
    if cargo test --no-fail-fast "${args[@]}" >"$log" 2>&1; then
        verdict=passed
    else
        verdict=FAILED
        failed_runs=$((failed_runs + 1))
    fi
    # libtest prints "test NAME ... FAILED" for each failure.
    names=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u | tr '\n' ' ' || true)
    echo "repeat: run $k/$runs $verdict in $(($(date +%s) - start)) s${names:+: $names}"
done
echo "repeat: $failed_runs of $runs runs failed (logs in $dir)"
if [ "$failed_runs" -gt 0 ]; then
    echo "repeat: failures by test (runs failed):"
    grep -hE '^test .* \.\.\. FAILED$' "$dir"/run-*.log | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' |
        sort | uniq -c | sort -rn | sed 's/^/  /'
    # A run can fail without a failing test (a build error, a crash).
    exit 1
fi
