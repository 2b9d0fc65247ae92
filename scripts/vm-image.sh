#!/usr/bin/env bash
# Usage: scripts/vm-image.sh [--out DIR] [--force] [--print]
# Builds a small VM image for the vhost-user tests from Debian packages, into a
# cache directory (default target/vm-image), skipping what is already there:
#   DIR/vmlinuz    Debian's kernel (linux-image-amd64's versioned package),
#   DIR/initrd.gz  an initramfs (cpio newc, gzip) holding busybox-static, the
#                  virtio-net modules (virtio, virtio_ring, virtio_pci and its
#                  modern/legacy helpers, failover, net_failover, virtio_net)
#                  and an /init that loads them, configures eth0 from the kernel
#                  command line and then serves a command loop on the console.
# Packages are fetched with `apt-get download` and unpacked with `dpkg-deb -x`:
# nothing is installed on the host.
#
# The kernel command line the /init reads:
#   splitnet.ip=ADDR/LEN   eth0's IPv4 address (none: eth0 is only brought up)
#   splitnet.gw=ADDR       a default route
# The command loop (on /dev/console, so the serial port with console=ttyS0):
# it prints "@@READY@@" once, then for each line "ID COMMAND" it runs COMMAND
# under `sh -o pipefail -c` and prints
#   @@BEGIN ID@@
#   ...output (stdout and stderr)...
#   @@END ID rc=N@@
# --print prints the two paths (kernel, then initrd) and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/vm-image
force=
print=
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --force) force=1; shift ;;
    --print) print=1; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "vm-image: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { [ -n "$print" ] || echo "vm-image: $*" >&2; }
# The modules eth0 needs (each is loaded after those it depends on).
modules=(virtio virtio_ring virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net)

mkdir -p "$out/debs"
out=$(cd "$out" && pwd)
if [ -n "$force" ]; then
    rm -rf "$out/root" "$out/kernel" "$out/vmlinuz" "$out/initrd.gz"
fi

# fetch PACKAGE: downloads PACKAGE's .deb into $out/debs (once) and prints its path.
fetch() {
    local deb
    deb=$(find "$out/debs" -name "${1}_*.deb" | head -n 1)
    if [ -z "$deb" ]; then
        say "downloading $1"
        (cd "$out/debs" && apt-get download -qq -o APT::Sandbox::User=root "$1" >&2) || {
            echo "vm-image: apt-get download $1 failed (is the Debian mirror reachable? try apt-get update)" >&2
            exit 1
        }
        deb=$(find "$out/debs" -name "${1}_*.deb" | head -n 1)
    fi
    echo "$deb"
}

# The versioned kernel package behind linux-image-amd64.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)/\1/p' | head -n 1)
if [ -z "$kpkg" ]; then
    echo "vm-image: apt-cache knows no linux-image-amd64 (run apt-get update on a Debian machine)" >&2
    exit 1
fi
kver=${kpkg#linux-image-}

if [ ! -f "$out/kernel/boot/vmlinuz-$kver" ]; then
    deb=$(fetch "$kpkg")
    say "unpacking $(basename "$deb")"
    rm -rf "$out/kernel"
    dpkg-deb -x "$deb" "$out/kernel"
fi
cmp -s "$out/kernel/boot/vmlinuz-$kver" "$out/vmlinuz" || cp "$out/kernel/boot/vmlinuz-$kver" "$out/vmlinuz"

if [ ! -x "$out/busybox/bin/busybox" ]; then
    deb=$(fetch busybox-static)
    say "unpacking $(basename "$deb")"
    rm -rf "$out/busybox"
    dpkg-deb -x "$deb" "$out/busybox"
fi
bb=$out/busybox/bin/busybox

# add_module NAME: copies module NAME (uncompressed) into the initramfs after
# the modules it depends on (the depends field of its .modinfo), and appends it to the
# load order; a module built into the kernel is skipped.
add_module() {
    local m=$1 f d
    grep -qx "$m" "$root/lib/modules/order" && return
    f=$(find "$moddir/kernel" -name "$m.ko*" | head -n 1)
    if [ -z "$f" ]; then
        say "  $m: not a module of $kver (built in or merged)"
        return
    fi
    case $f in
    *.ko.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
    *.ko.zst) zstd -qdc "$f" >"$root/lib/modules/$m.ko" ;;
    *.ko.gz) gzip -dc "$f" >"$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
    esac
    # The .modinfo section's NUL-terminated "depends=a,b" string.
    for d in $(tr '\0' '\n' <"$root/lib/modules/$m.ko" | sed -n 's/^depends=//p' | tr ',' ' '); do
        add_module "$d"
    done
    echo "$m" >>"$root/lib/modules/order"
    say "  $m: $(basename "$f")"
}

stamp="$kver $(sha256sum "$0" | cut -c1-16)"
if [ -f "$out/initrd.gz" ] && [ "$(cat "$out/initrd.stamp" 2>/dev/null)" = "$stamp" ]; then
    say "up to date: $out/initrd.gz ($kpkg)"
else
    say "building the initramfs for $kver"
    root=$out/root
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,lib/modules}
    cp "$bb" "$root/bin/busybox"
    for applet in $("$bb" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
    done
    moddir=$out/kernel/lib/modules/$kver
    config=$out/kernel/boot/config-$kver
    : >"$root/lib/modules/order"
    for m in "${modules[@]}"; do
        add_module "$m"
    done
    [ -f "$config" ] && cp "$config" "$root/lib/modules/config"
    cat >"$root/init" <<'EOF'
#!/bin/sh
# splitnet's test VM: load the virtio-net modules, configure eth0, serve commands.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
dmesg -n 1
for m in $(cat /lib/modules/order); do
    insmod /lib/modules/$m.ko || echo "@@MODULE-FAILED $m@@"
done
arg() { for a in $(cat /proc/cmdline); do case $a in "$1"=*) echo "${a#*=}" ;; esac; done; }
ip link set lo up
i=0
while ! ip link show eth0 >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -gt 100 ] && { echo "@@NO-ETH0@@"; break; }
    sleep 0.1
done
ip link set eth0 up
addr=$(arg splitnet.ip)
[ -n "$addr" ] && ip addr add "$addr" dev eth0
gw=$(arg splitnet.gw)
[ -n "$gw" ] && ip route add default via "$gw"
stty -echo 2>/dev/null
echo "@@READY@@"
while read -r id cmd; do
    [ -n "$id" ] || continue
    echo "@@BEGIN $id@@"
    sh -o pipefail -c "$cmd" </dev/null 2>&1
    echo "@@END $id rc=$?@@"
done
echo "@@EOF@@"
poweroff -f
EOF
    chmod +x "$root/init"
    (cd "$root" && find . | "$bb" cpio -o -H newc 2>/dev/null) | gzip -9 >"$out/initrd.gz.new"
    mv "$out/initrd.gz.new" "$out/initrd.gz"
    echo "$stamp" >"$out/initrd.stamp"
    say "built $out/initrd.gz ($(du -k "$out/initrd.gz" | cut -f1) KiB)"
fi
if [ -n "$print" ]; then
    echo "$out/vmlinuz"
    echo "$out/initrd.gz"
else
    say "kernel $out/vmlinuz, initramfs $out/initrd.gz"
fi
