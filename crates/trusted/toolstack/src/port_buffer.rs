//! A driver domain's `port_buffer`: the size of the buffers its ports
//! receive into (Menon 2006 §4.2, Figure 11's Driver-none and Driver-MTU).
//!
//! Without the key, a port receives each frame into a slot of its own big
//! enough for a 64 KiB GSO frame (with its virtio-net header): the far end
//! may segment late (TSO) and the port may coalesce (GRO), so one received
//! frame can hold many segments. `port_buffer` instead models a 2006 NIC
//! that delivers MTU-sized frames into the driver's own buffers:
//!
//! - `"page"` (Driver-none): every frame in its own 4 KiB page-aligned
//!   buffer, as a page flip to a guest needs;
//! - `"mtu"` (Driver-MTU): MTU-sized slots (2 KiB for a 1500-byte MTU, the
//!   next power of two above the frame and its headers) packed into pages,
//!   two frames per page at 1500.
//!
//! A frame longer than its slot cannot be received (it is dropped and
//! counted), so hv keeps every frame MTU-sized: it turns segmentation
//! offload (TSO, GSO) off at the far end of each wire and GRO off on the
//! port. It can only do that on links it made whole, so `port_buffer` needs
//! every port of the driver domain to be a wire; and `"page"` needs frames
//! that fit a page (an MTU up to [`PAGE_MTU`]). The key is independent of
//! `port_offload`, which is about what the port takes on transmit.

pub use crate::topology::port::PortBuffer;
use crate::topology::port::UplinkKind;
use crate::topology::{Check, DomainConfig, DomainKind, Topology};

/// Bytes a frame brings besides its MTU: a virtio-net header (10), the
/// Ethernet header (14) and an 802.1Q tag (4), rounded up.
const OVERHEAD: u32 = 32;
/// Largest MTU whose frames fit a page with their headers.
pub const PAGE_MTU: u32 = 4096 - OVERHEAD;
/// The MTU of a wire without `mtu`.
const DEFAULT_MTU: u32 = 1500;

/// The store value hv writes to a driver domain's `port-buffer`:
/// `"page:4096"` or `"mtu:<slot bytes>"`; None without the key.
pub fn store_value(t: &Topology, d: &DomainConfig) -> Option<String> {
    let b = d.port_buffer?;
    let mtu = largest_mtu(t, &d.name);
    let slot = match b {
        PortBuffer::Page => 4096,
        PortBuffer::Mtu => (mtu + OVERHEAD).next_power_of_two(),
    };
    Some(format!("{}:{slot}", b.as_str()))
}

fn largest_mtu(t: &Topology, driver: &str) -> u32 {
    t.uplinks_of(driver)
        .iter()
        .map(|u| u.mtu.unwrap_or(DEFAULT_MTU))
        .max()
        .unwrap_or(DEFAULT_MTU)
}

/// The topology's `port_buffer` rules ([`crate::checks`]).
pub struct PortBufferCheck;

impl Check for PortBufferCheck {
    fn topology(&self, t: &Topology) -> Result<(), String> {
        t.domains.iter().try_for_each(|d| check(t, d))
    }
}

/// `port_buffer` only on a driver domain whose ports are all wires, and
/// `"page"` only with frames that fit a page.
fn check(t: &Topology, d: &DomainConfig) -> Result<(), String> {
    let Some(b) = d.port_buffer else {
        return Ok(());
    };
    let who = format!("domain {:?}: port_buffer = {:?}", d.name, b.as_str());
    if d.kind != DomainKind::Driver {
        return Err(format!("{who}: port_buffer applies to driver domains only"));
    }
    let ups = t.uplinks_of(&d.name);
    if let Some(u) = ups.iter().find(|u| u.kind != UplinkKind::Wire) {
        return Err(format!(
            "{who} needs MTU-sized frames on every port, which hv can only ensure on a wire (it turns segmentation offload off at the wire host); port {} is of kind {:?}",
            u.ifname,
            u.kind.as_str()
        ));
    }
    let mtu = largest_mtu(t, &d.name);
    if b == PortBuffer::Page && mtu > PAGE_MTU {
        return Err(format!(
            "{who}: a frame of MTU {mtu} does not fit a 4 KiB page (at most {PAGE_MTU}); use port_buffer = \"mtu\" or a smaller mtu"
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A topology of driver domain `drv` with keys `drv`, then `rest`.
    pub(crate) fn topo(drv: &str, rest: &str) -> Result<Topology, String> {
        Topology::parse(
            &format!("[[domain]]\nname = \"drv\"\nkind = \"driver\"\n{drv}{rest}"),
            "t.toml",
        )
        .map_err(|e| e.to_string())
    }

    const WIRE: &str = "[wire]\ndriver = \"drv\"\n";

    #[test]
    fn the_key_reads_and_sizes_slots_from_the_ports_mtu() {
        for (key, rest, want) in [
            ("", WIRE, None),
            ("port_buffer = \"page\"\n", WIRE, Some("page:4096")),
            ("port_buffer = \"mtu\"\n", WIRE, Some("mtu:2048")),
            (
                "port_buffer = \"mtu\"\n",
                "[wire]\ndriver = \"drv\"\n[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 9000\n",
                Some("mtu:16384"),
            ),
            ("port_buffer = \"page\"\n", "", Some("page:4096")),
        ] {
            let t = topo(key, rest).unwrap();
            let d = t.domain("drv").unwrap();
            assert_eq!(store_value(&t, d).as_deref(), want, "{key}{rest}");
        }
    }

    #[test]
    fn combinations_that_cannot_work_are_refused() {
        let e = topo("port_buffer = \"half\"\n", WIRE).unwrap_err();
        assert!(
            e.contains("unknown variant `half`, expected `page` or `mtu`"),
            "{e}"
        );
        let e = topo(
            "port_buffer = \"page\"\n",
            "[wire]\ndriver = \"drv\"\n[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 9000\n",
        )
        .unwrap_err();
        assert!(e.contains("does not fit a 4 KiB page"), "{e}");
        let e = topo(
            "port_buffer = \"mtu\"\n",
            "[[port]]\ndriver = \"drv\"\nkind = \"nat\"\nsubnet = \"10.78.0.1/24\"\n",
        )
        .unwrap_err();
        assert!(e.contains("port upl0 is of kind \"nat\""), "{e}");
        let e = topo(
            "[[domain]]\nname = \"g\"\nkind = \"guest\"\nport_buffer = \"mtu\"\n",
            "",
        )
        .unwrap_err();
        assert!(e.contains("driver domains only"), "{e}");
    }
}
