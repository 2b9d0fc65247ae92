//! A driver domain's `local_delivery`: how frames from its wires reach
//! its own address (Menon 2005 §3.1 and §6.1.1: dom0's own traffic).
//!
//! A driver domain with `address` has an interface of its own on its
//! bridge, a TAP ([`crate::supervisor`]'s endpoint). By default
//! (`"bridge"`) a frame from a wire to it goes the way every frame does:
//! the port's packet socket copies it out, the bridge looks it up, and a
//! `write` to the TAP copies it into the driver domain's kernel, two
//! copies and two system calls a frame that Xen's dom0 never paid: its NIC
//! driver handed the frame up inside its own kernel.
//!
//! `"kernel"` gives the driver domain's kernel that path. hv gives each
//! wire port the TAP's MAC, as a NIC carries its host's, and puts a
//! classifier on the port's ingress (`tc` u32 on the destination MAC)
//! whose action redirects the frame into the TAP's receive path (mirred
//! ingress redirect): the kernel demultiplexes it as a NIC's driver and
//! the bridge in dom0's kernel did, with no copy and no wake-up of the
//! driver domain. hv then writes `local-delivery` in the
//! driver domain's home, and the driver leaves that MAC's unicast out of
//! each wire port's socket with the same filter that keeps a dedicated
//! queue's frames out of the default one, so a frame is delivered once.
//! Broadcast and multicast (ARP, neighbour discovery) still cross the
//! bridge, to the guests and the TAP alike.
//!
//! The way back is the kernel's too: what the driver domain's kernel sends
//! to a wire host's MAC leaves the TAP's egress through a classifier (u32
//! on that MAC) whose action puts it on the host's port (mirred egress
//! redirect, through the port's qdisc, so a shaped wire stays shaped), as
//! dom0's IP stack handed its segments to its NIC's driver. Its ACKs and
//! replies no longer wake the driver domain, copy out of the TAP and cross
//! the bridge. hv made each wire host and knows its MAC; a frame to any
//! other MAC (a guest, a broadcast) still takes the TAP and the bridge.
//!
//! `"send"` gives it the way out only: frames to the driver domain still
//! cross its ports' buffers and the bridge, so it combines with
//! `port_buffer` (Menon 2006's driver domain receives into page- or
//! MTU-sized buffers, while its sends went from its IP stack to its NIC's
//! driver).
//!
//! The key needs an address (there is no local interface without one)
//! and wires as the only ports (hv made their devices, so its classifier
//! lasts as long as they do); `"kernel"` also needs no `port_buffer`,
//! which is about the buffers a port receives into and which a frame the
//! kernel delivers never enters.

use crate::host::run;
pub use crate::topology::port::LocalDelivery;
use crate::topology::port::UplinkKind;
use crate::topology::{Check, DomainConfig, DomainKind, Topology};

/// Where the toolstack's filter sits on each port's ingress.
const PREF: &str = "1";

/// The topology's `local_delivery` rules ([`crate::checks`]).
pub struct LocalDeliveryCheck;

impl Check for LocalDeliveryCheck {
    fn topology(&self, t: &Topology) -> Result<(), String> {
        t.domains.iter().try_for_each(|d| check(t, d))
    }
}

/// `"kernel"` and `"send"` only on a driver domain with an address and
/// wires for ports; `"kernel"` without `port_buffer`.
fn check(t: &Topology, d: &DomainConfig) -> Result<(), String> {
    if d.local_delivery == LocalDelivery::Bridge {
        return Ok(());
    }
    let who = format!(
        "domain {:?}: local_delivery = \"{}\"",
        d.name,
        d.local_delivery.as_str()
    );
    if d.kind != DomainKind::Driver {
        return Err(format!(
            "{who}: local_delivery applies to driver domains only"
        ));
    }
    if d.address.is_none() && d.ipv6.is_none() {
        return Err(format!(
            "{who} needs an address of the driver domain's own (address or ipv6)"
        ));
    }
    if d.port_buffer.is_some() && d.local_delivery == LocalDelivery::Kernel {
        return Err(format!(
            "{who}: port_buffer sets the buffers the ports receive the driver domain's frames into, and the kernel's path skips them; use one or the other"
        ));
    }
    let ups = t.uplinks_of(&d.name);
    if let Some(u) = ups.iter().find(|u| u.kind != UplinkKind::Wire) {
        return Err(format!(
            "{who} needs every port to be a wire (hv puts its classifier on devices it made); port {} is of kind {:?}",
            u.ifname,
            u.kind.as_str()
        ));
    }
    Ok(())
}

/// Gives driver domain `d`'s kernel the frames from its wires to `tap`'s
/// MAC, on each wire port (which must exist; `"kernel"` only), and the
/// frames it sends to each wire host, on `tap`'s egress; nothing without
/// the key.
pub fn install(t: &Topology, d: &DomainConfig, tap: &str) -> Result<(), String> {
    if d.local_delivery == LocalDelivery::Bridge {
        return Ok(());
    }
    let ns = crate::host::netns_name(&d.name);
    let fail = |what: &str, e: std::io::Error| {
        format!(
            "local_delivery = \"{}\" for driver domain {}: {what}: {e}",
            d.local_delivery.as_str(),
            d.name
        )
    };
    if d.local_delivery == LocalDelivery::Kernel {
        let mac = crate::host::in_netns(&ns, || sys::get_mac(tap)).map_err(|e| fail(tap, e))?;
        let mac = abi::xenbus::mac_text(&mac);
        for u in t.uplinks_of(&d.name) {
            let dev = u.ifname.as_str();
            redirect(&ns, dev, &mac, tap).map_err(|e| fail(dev, e))?;
        }
    }
    // The way out: what the kernel sends to each wire host's MAC leaves
    // `tap`'s egress on that host's port, not to the bridge.
    clsact(&ns, tap).map_err(|e| fail(tap, e))?;
    for w in t.wires_of(&d.name) {
        let port = crate::uplink::config::wire_ifname(t.wire_index(w));
        let wns = crate::host::netns_name(&w.name);
        let host = crate::host::in_netns(&wns, || sys::get_mac(crate::host::WIRE_IF))
            .map_err(|e| fail(&format!("wire host {}", w.name), e))?;
        let host = abi::xenbus::mac_text(&host);
        mirred(&ns, tap, "egress", &host, "egress", &port).map_err(|e| fail(&port, e))?;
    }
    Ok(())
}

/// `dev` in `ns` gets the `clsact` qdisc, whose hooks hold the filters.
fn clsact(ns: &str, dev: &str) -> std::io::Result<()> {
    run("tc", &["-n", ns, "qdisc", "replace", "dev", dev, "clsact"]).map(|_| ())
}

/// `tc filter add` in `ns`: on `dev`'s `dir` hook, unicast to `mac` is
/// redirected by mirred (`to`: `ingress` or `egress` of `dev2`).
fn mirred(ns: &str, dev: &str, dir: &str, mac: &str, to: &str, dev2: &str) -> std::io::Result<()> {
    run(
        "tc",
        &[
            "-n", ns, "filter", "add", "dev", dev, dir, "pref", PREF, "protocol", "all", "u32",
            "match", "ether", "dst", mac, "action", "mirred", to, "redirect", "dev", dev2,
        ],
    )
    .map(|_| ())
}

/// On `dev`'s ingress in `ns`: unicast to `mac` goes into `tap`'s receive.
/// `dev` takes `mac` as its own first, as a NIC carries its host's: the
/// kernel marks a frame to another MAC as not for this host, and the TAP's
/// IP layer would drop it.
fn redirect(ns: &str, dev: &str, mac: &str, tap: &str) -> std::io::Result<()> {
    crate::host::ip_in(ns, &["link", "set", "dev", dev, "address", mac])?;
    clsact(ns, dev)?;
    mirred(ns, dev, "ingress", mac, "ingress", tap)
}

/// What hv writes to the driver domain's `local-delivery` once the
/// kernel's path is in place; None: the bridge's (no node).
pub fn store_value(d: &DomainConfig) -> Option<&'static str> {
    (d.local_delivery == LocalDelivery::Kernel).then_some("kernel")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port_buffer::tests::topo;

    const WIRE: &str = "[[wire]]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n";
    const ADDR: &str = "address = \"10.77.0.100/24\"\n";

    #[test]
    fn kernel_delivery_is_taken_with_an_address_and_wires() {
        let t = topo(&format!("{ADDR}local_delivery = \"kernel\"\n"), WIRE).unwrap();
        let d = t.domain("drv").unwrap();
        assert_eq!(d.local_delivery, LocalDelivery::Kernel);
        assert_eq!(store_value(d), Some("kernel"));
        let t = topo(ADDR, WIRE).unwrap();
        let d = t.domain("drv").unwrap();
        assert_eq!(d.local_delivery, LocalDelivery::Bridge);
        assert_eq!(store_value(d), None);
        // The way out alone goes with the ports' buffers, and the driver
        // leaves no frame out of its ports' sockets.
        let keys = format!("{ADDR}local_delivery = \"send\"\nport_buffer = \"page\"\n");
        let t = topo(&keys, WIRE).unwrap();
        let d = t.domain("drv").unwrap();
        assert_eq!(d.local_delivery, LocalDelivery::Send);
        assert_eq!(store_value(d), None);
    }

    #[test]
    fn kernel_delivery_is_refused_where_it_cannot_hold() {
        let cases = [
            ("local_delivery = \"kernel\"\n", WIRE, "needs an address"),
            (
                "address = \"10.77.0.100/24\"\nlocal_delivery = \"kernel\"\nport_buffer = \"mtu\"\n",
                WIRE,
                "use one or the other",
            ),
            (
                "address = \"10.77.0.100/24\"\nlocal_delivery = \"kernel\"\n",
                "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\n",
                "every port to be a wire",
            ),
            ("local_delivery = \"send\"\n", WIRE, "needs an address"),
            (
                "address = \"10.77.0.100/24\"\nlocal_delivery = \"send\"\n",
                "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\n",
                "every port to be a wire",
            ),
            (
                "address = \"10.77.0.100/24\"\nlocal_delivery = \"dma\"\n",
                WIRE,
                "local_delivery",
            ),
        ];
        for (drv, rest, want) in cases {
            let e = topo(drv, rest).unwrap_err();
            assert!(e.contains(want), "{drv}{rest}: {e}");
        }
        let e = Topology::parse(
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\nlocal_delivery = \"kernel\"\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("driver domains only"), "{e}");
    }
}
