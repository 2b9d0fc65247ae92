#!/usr/bin/env bash
# The test command: set up, check formatting and lints, run every test
# (unit, ABI conformance against Xen's headers, end-to-end over namespaces,
# real vhost-user frontends: DPDK's testpmd and a QEMU VM).
# A toolchain without rustfmt or clippy skips that check and says so; with
# SPLITNET_REQUIRE_LINTS=1 (as CI sets it) a missing one is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --no-build  # the tests build for themselves
# The vhost-user tests' real frontends: DPDK's testpmd (dpdk-dev, with the
# virtio_user, vhost and TAP drivers) and QEMU; then their VM image
# (Debian's kernel and busybox-static, fetched by the script, cached under
# target/vm-image). Outside CI (SPLITNET_CI=1) a test without them skips
# and says so.
need=()
for p in dpdk-dev librte-net-virtio23 librte-net-vhost23 librte-net-tap23 qemu-system-x86; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "test: installing ${need[*]}"
    apt-get update -qq
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
        echo "test: apt-get install ${need[*]} failed (see above)" >&2
        exit 1
    fi
fi
./scripts/vm-image.sh
# shellcheck source=/dev/null
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
skipped=()
# lint TOOL COMPONENT DEBIAN-PACKAGE CARGO-ARGS...: runs `cargo CARGO-ARGS`
# if this toolchain has `cargo TOOL`.
lint() {
    local tool=$1 component=$2 package=$3 why
    shift 3
    echo "== cargo $tool"
    if why=$(cargo "$tool" --version 2>&1); then
        cargo "$@"
        return
    fi
    why=$(echo "$why" | head -n 1)
    if [ "${SPLITNET_REQUIRE_LINTS:-}" = 1 ]; then
        echo "test: cargo $tool is required (SPLITNET_REQUIRE_LINTS=1) but this toolchain has none: $why" >&2
        exit 1
    fi
    echo "test: SKIPPED cargo $tool: this toolchain has no $component ($why)."
    echo "test: to run it: rustup component add $component, or with Debian's rustc-web: apt-get install $package"
    skipped+=("cargo $tool")
}
lint fmt rustfmt rustfmt-web fmt --all -- --check
lint clippy clippy rust-web-clippy clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
# This runs as root: a root-only test may not skip here.
export SPLITNET_REQUIRE_ROOT=1
# Tests in parallel: the root tests, which share the host's namespaces and
# links, take one lock (testutil::root_or_skip) and so run one at a time.
cargo test --workspace
echo "== fuzz (each target for a bounded time; the corpora were replayed above)"
./scripts/fuzz.sh 15
if [ ${#skipped[@]} -gt 0 ]; then
    echo "test: every test ran, but these checks were skipped (see above): ${skipped[*]}"
fi
