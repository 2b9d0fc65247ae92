#!/usr/bin/env bash
# Installs what splitnet needs on a fresh Debian/Ubuntu machine (run as root):
# iproute2 for namespaces and veth, libxen-dev for the ABI conformance test,
# iperf3/tcpdump/ethtool for the data-path tests, passt (pasta) and
# slirp4netns as peer baselines for `splitnet bench`, libc6-dbg so profiles
# name libc's functions, and a Rust toolchain.
set -euo pipefail
need=()
for p in iproute2 iputils-ping libxen-dev iperf3 tcpdump ethtool gcc curl python3 passt slirp4netns libc6-dbg prometheus; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: installing the Rust toolchain from Debian (cargo, rustc)"
    apt-get install -y -qq cargo rustc >/dev/null
fi
cargo --version
