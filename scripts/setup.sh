#!/usr/bin/env bash
# Usage: scripts/setup.sh [--no-build]
# Installs what splitnet needs on a fresh Debian/Ubuntu machine (run as root):
# iproute2 for namespaces and veth, libxen-dev for the ABI conformance test,
# iperf3/tcpdump/ethtool for the data-path tests, nftables, dnsmasq-base and
# busybox-static for the nat uplink and the uplink tests (udhcpc, httpd; and
# the container tests' image, which needs it static), passt (pasta) and
# slirp4netns as peer baselines for `splitnet bench`, libc6-dbg so profiles
# name libc's functions, prometheus for promtool (the metrics test lints
# `status --prometheus` with it), man-db and bash-completion for splitnet's man pages
# and completions, chromium (headless) for the seeds report's rendering test,
# the CNI reference plugins (containernetworking-plugins), podman and runc,
# and the CNI project's cnitool (built with Go) for the container tests,
# systemd-analyze (systemd) and setpriv (util-linux) for the service's tests,
# uidmap (newuidmap, newgidmap), passwd (useradd) and procps (ps) for running
# without root and its tests, and a Rust toolchain new enough for the workspace's
# rust-version: the one installed (rustup's too) if it is, else Debian 12's
# rustc-web/cargo-web, the distribution's rustc/cargo or Ubuntu's newest
# rustc-1.NN, whichever apt offers new enough (with its rustfmt and clippy);
# if none is, it says what to install and stops. Then it builds the release
# binary and installs its completions, man pages and CNI plugin (as `splitnet`
# in /usr/lib/cni and /opt/cni/bin), the binaries in /usr/local/bin, the
# service's unit and a default /etc/splitnet/topology.toml; --no-build stops before.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
updated=
apt_update() {
    if [ -z "$updated" ]; then
        apt-get update -qq
        updated=1
    fi
}
apt_install() {
    apt_update
    if ! apt-get install -y -qq "$@" >/dev/null; then
        echo "setup: apt-get install $* failed (see above)" >&2
        exit 1
    fi
}
need=()
for p in iproute2 iputils-ping libxen-dev iperf3 sockperf nginx-light httperf tcpdump ethtool gcc curl python3 nftables dnsmasq-base frr busybox-static passt slirp4netns libc6-dbg prometheus man-db bash-completion chromium containernetworking-plugins podman runc file systemd util-linux uidmap passwd procps; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}"
    apt_install "${need[@]}"
fi

# Without root (README, "Without root"): iproute2 names namespaces only in
# /run/netns, which a user cannot make, so it exists now and at every boot;
# a domain makes its TAP through the host's /dev/net/tun, open to all.
mkdir -p /run/netns
install -D -m 0644 /dev/stdin /etc/tmpfiles.d/splitnet.conf <<'TMPFILES'
# splitnet without root: iproute2's directory of named network namespaces.
d /run/netns 0755 root root -
TMPFILES
if [ -c /dev/net/tun ]; then chmod 0666 /dev/net/tun; fi

# The Rust toolchain.
required=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
if [ -z "$required" ]; then
    echo "setup: no rust-version in Cargo.toml" >&2
    exit 1
fi
# X.Y.Z of `$1 --version` ("rustc 1.95.0 (…)"), or nothing if $1 is missing.
tool_version() { { "$1" --version 2>/dev/null || true; } | sed -n '1s/^[a-z-]* \([0-9][0-9.]*\).*/\1/p'; }
new_enough() { [ -n "$1" ] && dpkg --compare-versions "$1" ge "$required"; }
# The upstream version of package $1 that apt would install, or nothing.
candidate() {
    local v
    v=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    [ -n "$v" ] && [ "$v" != "(none)" ] || return 0
    v=${v#*:}
    echo "${v%%[+~-]*}"
}
# Installs an apt toolchain whose rustc is new enough; fails if there is none.
offered=
install_toolchain() {
    apt_update
    local rc v
    for rc in rustc-web rustc; do
        v=$(candidate "$rc")
        offered+="${offered:+, }$rc ${v:-none}"
        if new_enough "$v"; then
            echo "setup: installing Rust $v from apt: $rc ${rc/rustc/cargo}"
            apt_install "$rc" "${rc/rustc/cargo}"
            return
        fi
    done
    # Ubuntu ships current toolchains as rustc-1.NN, under /usr/lib/rust-1.NN.
    v=$({ apt-cache pkgnames rustc-1. || true; } | sed -n 's/^rustc-\(1\.[0-9]*\)$/\1/p' | sort -V | tail -n 1)
    if new_enough "$v" && [ -n "$(candidate "cargo-$v")" ]; then
        echo "setup: installing Rust $v from apt: rustc-$v cargo-$v, linked into /usr/local/bin"
        apt_install "rustc-$v" "cargo-$v"
        ln -sf "/usr/lib/rust-$v/bin/"* /usr/local/bin/
        return
    fi
    [ -z "$v" ] || offered+=", rustc-$v $v"
    return 1
}
# Installs the rustfmt and clippy packages that match an apt toolchain.
install_lints() {
    local rustc owner fmt clippy v p
    rustc=$(command -v rustc)
    owner=$(dpkg -S "$rustc" 2>/dev/null || dpkg -S "$(readlink -f "$rustc")" 2>/dev/null) || return 0
    owner=${owner%%:*}
    case "$owner" in
        rustc-web) fmt=rustfmt-web clippy=rust-web-clippy ;;
        rustc) fmt=rustfmt clippy=rust-clippy ;;
        rustc-1.*) fmt=rustfmt-${owner#rustc-} clippy=rust-${owner#rustc-}-clippy ;;
        *) return 0 ;;
    esac
    v=$(dpkg-query -W -f '${Version}' "$owner")
    for p in "$fmt" "$clippy"; do
        dpkg -s "$p" >/dev/null 2>&1 && continue
        apt_update
        if [ "$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')" = "$v" ]; then
            echo "setup: installing $p (lints for $owner)"
            apt_install "$p"
            if [[ $owner == rustc-1.* ]]; then ln -sf "/usr/lib/rust-${owner#rustc-}/bin/"* /usr/local/bin/; fi
        else
            echo "setup: apt has no $p $v for $owner: scripts/test.sh will skip that lint"
        fi
    done
}

# rustup's toolchain comes first on PATH wherever the scripts run cargo.
# shellcheck source=/dev/null
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
rustc_v=$(tool_version rustc)
cargo_v=$(tool_version cargo)
if ! new_enough "$rustc_v" || ! new_enough "$cargo_v"; then
    if [ -n "$rustc_v$cargo_v" ]; then
        echo "setup: the Rust toolchain installed is too old for this workspace (rust-version $required):" \
            "rustc ${rustc_v:-missing} ($(command -v rustc || echo 'not found')), cargo ${cargo_v:-missing} ($(command -v cargo || echo 'not found'))"
        if command -v rustup >/dev/null 2>&1 && [ "$(dirname "$(command -v rustup)")" = "$(dirname "$(command -v rustc)")" ]; then
            echo "setup: it is rustup's, which comes first on PATH; update it and run this again: rustup update stable && rustup default stable" >&2
            exit 1
        fi
    fi
    if ! install_toolchain; then
        {
            echo "setup: no Rust $required or newer can be installed from apt here (candidates: $offered)."
            web=$(candidate rustc-web)
            if [ -n "$web" ] && ! new_enough "$web"; then
                echo "setup: on Debian 12 the newer rustc-web comes from bookworm-security: add that suite to apt's sources and run this again, or"
            fi
            echo "setup: install Rust $required or newer with rustup and run this again:"
            echo "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y"
        } >&2
        exit 1
    fi
    hash -r
    rustc_v=$(tool_version rustc)
    if ! new_enough "$rustc_v"; then
        echo "setup: after installing, rustc is ${rustc_v:-missing} ($(command -v rustc || echo 'not found')), not $required or newer" >&2
        exit 1
    fi
fi
install_lints
echo "setup: Rust toolchain: $(rustc --version) at $(command -v rustc), $(cargo --version)"

# cnitool, the CNI project's own client, which the container tests drive
# the plugin with (Go fetches it through the module proxy).
cnitool_version=v1.3.0
if ! [ -x /usr/local/bin/cnitool ]; then
    command -v go >/dev/null 2>&1 || apt_install golang-go
    echo "setup: building cnitool $cnitool_version (go install)"
    if ! GOBIN=/usr/local/bin go install "github.com/containernetworking/cni/cnitool@$cnitool_version"; then
        echo "setup: go install github.com/containernetworking/cni/cnitool@$cnitool_version failed (see above)" >&2
        exit 1
    fi
fi

[ "${1:-}" != "--no-build" ] || exit 0
echo "setup: building splitnet (cargo build --release)"
cargo build --release --quiet
bin=target/release/splitnet
bash_dir=/usr/share/bash-completion/completions
zsh_dir=/usr/share/zsh/vendor-completions
fish_dir=/usr/share/fish/vendor_completions.d
man_dir=/usr/local/share/man/man1
mkdir -p "$bash_dir" "$zsh_dir" "$fish_dir" "$man_dir"
"$bin" completions bash >"$bash_dir/splitnet"
"$bin" completions zsh >"$zsh_dir/_splitnet"
"$bin" completions fish >"$fish_dir/splitnet.fish"
rm -f "$man_dir/splitnet.1" "$man_dir"/splitnet-*.1
"$bin" man --out "$man_dir" 2>/dev/null
if command -v mandb >/dev/null 2>&1; then mandb -q 2>/dev/null || true; fi
# A runtime runs the plugin a configuration's "type" names: "splitnet".
for d in /usr/lib/cni /opt/cni/bin; do
    mkdir -p "$d"
    install -m 0755 target/release/splitnet-cni "$d/splitnet"
done
target/release/splitnet-cni --man >"$man_dir/splitnet-cni.1"
echo "setup: installed the CNI plugin as /usr/lib/cni/splitnet and /opt/cni/bin/splitnet (man splitnet-cni)"
# hv as a service: the binaries where the unit runs them, the unit, and a
# default topology unless the host has its own.
install -m 0755 target/release/splitnet target/release/splitnet-hv target/release/splitnet-domain /usr/local/bin/
install -D -m 0644 dist/splitnet.service /etc/systemd/system/splitnet.service
if ! [ -e /etc/splitnet/topology.toml ]; then
    install -D -m 0644 examples/containers.toml /etc/splitnet/topology.toml
fi
if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "setup: installed splitnet, splitnet-hv and splitnet-domain in /usr/local/bin, and the service" \
    "(/etc/systemd/system/splitnet.service, /etc/splitnet/topology.toml): systemctl enable --now splitnet"
echo "setup: installed completions ($bash_dir/splitnet, $zsh_dir/_splitnet, $fish_dir/splitnet.fish)" \
    "and $(find "$man_dir" -maxdepth 1 -name 'splitnet*.1' | wc -l) man pages ($man_dir/splitnet*.1)"
