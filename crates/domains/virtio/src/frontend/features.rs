//! The virtio-net feature bits the frontend asks for (virtio 1.x §5.1.3,
//! §6) and how they map onto the guest's TAP.

use sys::TapOffloads;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
    VIRTIO_NET_F_GUEST_USO4, VIRTIO_NET_F_GUEST_USO6, VIRTIO_NET_F_HOST_TSO4,
    VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_HOST_USO, VIRTIO_NET_F_MRG_RXBUF,
    VIRTIO_NET_HDR_F_DATA_VALID, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE,
    VIRTIO_NET_HDR_GSO_TCPV4, VIRTIO_NET_HDR_GSO_TCPV6, VIRTIO_NET_HDR_GSO_UDP_L4,
};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;

/// vhost-user's `VHOST_USER_F_PROTOCOL_FEATURES` (bit 30).
pub const PROTOCOL_FEATURES: u32 = 30;

/// The bits the frontend can use, each taken only if the backend offers it.
pub const WANTED: &[(u32, &str)] = &[
    (VIRTIO_F_VERSION_1, "VERSION_1"),
    (PROTOCOL_FEATURES, "PROTOCOL_FEATURES"),
    (VIRTIO_NET_F_MRG_RXBUF, "MRG_RXBUF"),
    (VIRTIO_NET_F_CSUM, "CSUM"),
    (VIRTIO_NET_F_GUEST_CSUM, "GUEST_CSUM"),
    (VIRTIO_NET_F_HOST_TSO4, "HOST_TSO4"),
    (VIRTIO_NET_F_HOST_TSO6, "HOST_TSO6"),
    (VIRTIO_NET_F_GUEST_TSO4, "GUEST_TSO4"),
    (VIRTIO_NET_F_GUEST_TSO6, "GUEST_TSO6"),
    (VIRTIO_NET_F_HOST_USO, "HOST_USO"),
    (VIRTIO_NET_F_GUEST_USO4, "GUEST_USO4"),
    (VIRTIO_NET_F_GUEST_USO6, "GUEST_USO6"),
    (VIRTIO_RING_F_EVENT_IDX, "EVENT_IDX"),
];

/// A set of negotiated feature bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features(pub u64);

impl Features {
    /// What to accept of `offered`: the wanted bits it has, less any that
    /// §5.1.3.1 forbids without their prerequisite (TSO and USO need
    /// checksum offload in the same direction). None without VERSION_1:
    /// the frontend speaks only virtio 1.x (little-endian, 12-byte header).
    pub fn accept(offered: u64) -> Option<Features> {
        let mut f = Features(WANTED.iter().fold(0, |m, (b, _)| m | bit(*b)) & offered);
        if !f.has(VIRTIO_F_VERSION_1) {
            return None;
        }
        if !f.has(VIRTIO_NET_F_CSUM) {
            f.0 &= !(bit(VIRTIO_NET_F_HOST_TSO4)
                | bit(VIRTIO_NET_F_HOST_TSO6)
                | bit(VIRTIO_NET_F_HOST_USO));
        }
        if !f.has(VIRTIO_NET_F_GUEST_CSUM) {
            f.0 &= !(bit(VIRTIO_NET_F_GUEST_TSO4)
                | bit(VIRTIO_NET_F_GUEST_TSO6)
                | bit(VIRTIO_NET_F_GUEST_USO4)
                | bit(VIRTIO_NET_F_GUEST_USO6));
        }
        Some(f)
    }

    pub fn has(self, b: u32) -> bool {
        self.0 & bit(b) != 0
    }

    pub fn protocol(self) -> bool {
        self.has(PROTOCOL_FEATURES)
    }
    pub fn mrg_rxbuf(self) -> bool {
        self.has(VIRTIO_NET_F_MRG_RXBUF)
    }
    pub fn event_idx(self) -> bool {
        self.has(VIRTIO_RING_F_EVENT_IDX)
    }
    /// The device takes frames the driver left to segment (HOST_TSO*,
    /// HOST_USO).
    pub fn host_tso(self) -> bool {
        self.has(VIRTIO_NET_F_HOST_TSO4)
            || self.has(VIRTIO_NET_F_HOST_TSO6)
            || self.has(VIRTIO_NET_F_HOST_USO)
    }
    /// The device may hand the driver unsegmented frames (GUEST_TSO*,
    /// GUEST_USO*).
    pub fn guest_tso(self) -> bool {
        [
            VIRTIO_NET_F_GUEST_TSO4,
            VIRTIO_NET_F_GUEST_TSO6,
            VIRTIO_NET_F_GUEST_USO4,
            VIRTIO_NET_F_GUEST_USO6,
        ]
        .into_iter()
        .any(|b| self.has(b))
    }

    /// The offloads the guest kernel may leave to the TAP reader (its
    /// transmissions go to the device, which agreed to finish them).
    pub fn tap_offloads(self) -> TapOffloads {
        TapOffloads {
            csum: self.has(VIRTIO_NET_F_CSUM),
            tso4: self.has(VIRTIO_NET_F_HOST_TSO4),
            tso6: self.has(VIRTIO_NET_F_HOST_TSO6),
            uso: self.has(VIRTIO_NET_F_HOST_USO),
        }
    }

    /// Whether a frame the driver sends may carry header `h`.
    pub fn allows_tx(self, h: &NetHdr) -> bool {
        h.allowed(
            self.has(VIRTIO_NET_F_CSUM),
            self.has(VIRTIO_NET_F_HOST_TSO4),
            self.has(VIRTIO_NET_F_HOST_TSO6),
            self.has(VIRTIO_NET_F_HOST_USO),
        )
    }

    /// Whether a frame the device hands the driver may carry header `h`.
    pub fn allows_rx(self, h: &NetHdr) -> bool {
        h.allowed(
            self.has(VIRTIO_NET_F_GUEST_CSUM),
            self.has(VIRTIO_NET_F_GUEST_TSO4),
            self.has(VIRTIO_NET_F_GUEST_TSO6),
            self.has(VIRTIO_NET_F_GUEST_USO4) && self.has(VIRTIO_NET_F_GUEST_USO6),
        )
    }

    /// The names of the bits set, for the status page.
    pub fn names(self) -> Vec<&'static str> {
        WANTED
            .iter()
            .filter(|(b, _)| self.has(*b))
            .map(|(_, n)| *n)
            .collect()
    }
}

fn bit(b: u32) -> u64 {
    1 << b
}

/// Length of virtio 1.x's `virtio_net_hdr` (with `num_buffers`, §5.1.6).
pub const HDR_LEN: usize = 12;
const F_NEEDS_CSUM: u8 = VIRTIO_NET_HDR_F_NEEDS_CSUM as u8;
const F_DATA_VALID: u8 = VIRTIO_NET_HDR_F_DATA_VALID as u8;
const GSO_NONE: u8 = VIRTIO_NET_HDR_GSO_NONE as u8;
const GSO_TCPV4: u8 = VIRTIO_NET_HDR_GSO_TCPV4 as u8;
const GSO_TCPV6: u8 = VIRTIO_NET_HDR_GSO_TCPV6 as u8;
const GSO_UDP_L4: u8 = VIRTIO_NET_HDR_GSO_UDP_L4 as u8;

/// The fields of a `virtio_net_hdr` the driver checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub num_buffers: u16,
}

impl NetHdr {
    pub fn parse(b: &[u8; HDR_LEN]) -> NetHdr {
        NetHdr {
            flags: b[0],
            gso_type: b[1],
            num_buffers: u16::from_le_bytes([b[10], b[11]]),
        }
    }

    /// Whether the header asks only for what was negotiated: checksum
    /// flags with checksum offload, TCP segmentation of the agreed family,
    /// UDP segmentation (USO) where agreed; no other flag or GSO type (UDP
    /// fragmentation, ECN) at all.
    fn allowed(&self, csum: bool, tso4: bool, tso6: bool, uso: bool) -> bool {
        let flags_ok =
            self.flags & !(F_NEEDS_CSUM | F_DATA_VALID) == 0 && (self.flags == 0 || csum);
        let gso_ok = match self.gso_type {
            GSO_NONE => true,
            GSO_TCPV4 => tso4,
            GSO_TCPV6 => tso6,
            GSO_UDP_L4 => uso,
            _ => false,
        };
        flags_ok && gso_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_needs_version_1_and_drops_orphan_tso() {
        assert_eq!(Features::accept(bit(VIRTIO_NET_F_CSUM)), None);
        let all = u64::MAX;
        let f = Features::accept(all).unwrap();
        assert_eq!(f.names().len(), WANTED.len());
        // TSO offered without checksum offload is not taken.
        let offered = bit(VIRTIO_F_VERSION_1)
            | bit(VIRTIO_NET_F_HOST_TSO4)
            | bit(VIRTIO_NET_F_GUEST_TSO6)
            | bit(VIRTIO_NET_F_GUEST_CSUM);
        let f = Features::accept(offered).unwrap();
        assert!(!f.host_tso());
        assert!(f.guest_tso());
        assert_eq!(f.tap_offloads(), TapOffloads::default());
        // So is USO.
        let f = Features::accept(
            bit(VIRTIO_F_VERSION_1) | bit(VIRTIO_NET_F_HOST_USO) | bit(VIRTIO_NET_F_GUEST_USO4),
        )
        .unwrap();
        assert!(!f.host_tso() && !f.guest_tso());
    }

    #[test]
    fn headers_must_match_the_features() {
        let f = Features::accept(
            bit(VIRTIO_F_VERSION_1) | bit(VIRTIO_NET_F_GUEST_CSUM) | bit(VIRTIO_NET_F_GUEST_TSO4),
        )
        .unwrap();
        let h = |flags, gso_type| NetHdr {
            flags,
            gso_type,
            num_buffers: 1,
        };
        assert!(f.allows_rx(&h(0, GSO_NONE)));
        assert!(f.allows_rx(&h(F_NEEDS_CSUM, GSO_TCPV4)));
        assert!(!f.allows_rx(&h(F_NEEDS_CSUM, GSO_TCPV6)));
        assert!(!f.allows_rx(&h(0, 3)), "UDP fragmentation");
        assert!(!f.allows_rx(&h(0, GSO_TCPV4 | 0x80)), "ECN");
        assert!(!f.allows_rx(&h(4, GSO_NONE)), "unknown flag");
        assert!(!f.allows_tx(&h(F_NEEDS_CSUM, GSO_NONE)), "no CSUM");
        assert!(!f.allows_rx(&h(F_NEEDS_CSUM, GSO_UDP_L4)), "USO not agreed");
        // USO: both GUEST_USO bits to receive it, HOST_USO to send it.
        let uso = Features::accept(
            bit(VIRTIO_F_VERSION_1)
                | bit(VIRTIO_NET_F_CSUM)
                | bit(VIRTIO_NET_F_GUEST_CSUM)
                | bit(VIRTIO_NET_F_HOST_USO)
                | bit(VIRTIO_NET_F_GUEST_USO4)
                | bit(VIRTIO_NET_F_GUEST_USO6),
        )
        .unwrap();
        assert!(uso.allows_rx(&h(F_NEEDS_CSUM, GSO_UDP_L4)));
        assert!(uso.allows_tx(&h(F_NEEDS_CSUM, GSO_UDP_L4)));
        assert!(uso.tap_offloads().uso && uso.guest_tso() && uso.host_tso());
        let mut raw = [0u8; HDR_LEN];
        raw[0] = 1;
        raw[1] = 4;
        raw[10] = 3;
        assert_eq!(NetHdr::parse(&raw), h(1, GSO_TCPV6).with_buffers(3));
    }

    impl NetHdr {
        fn with_buffers(mut self, n: u16) -> NetHdr {
            self.num_buffers = n;
            self
        }
    }
}
