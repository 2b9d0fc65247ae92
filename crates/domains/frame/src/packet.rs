//! A frame in flight, and what the offload layer knows about it.
//!
//! The offload state travels beside the bytes the way Linux keeps it in the
//! skb (`ip_summed`, `csum_start`, `gso_size`): netback fills it from netif
//! flags, a TAP or `PACKET_VNET_HDR` port from a `virtio_net_hdr`, and the
//! software offload driver ([`crate::offload::prepare`]) acts on it.

use crate::error::OffloadError;
use crate::headers::{parse_headers_of, partial_csum_at};
use crate::wire::Headers;

/// Size of `struct virtio_net_hdr` without `num_buffers`.
pub const VNET_HDR_LEN: usize = 10;

// virtio_net_hdr (virtio 1.x §5.1.6, linux/virtio_net.h).
const VNET_F_NEEDS_CSUM: u8 = 1;
const VNET_F_DATA_VALID: u8 = 2;
const VNET_GSO_NONE: u8 = 0;
const VNET_GSO_TCPV4: u8 = 1;
const VNET_GSO_UDP: u8 = 3;
const VNET_GSO_TCPV6: u8 = 4;
const VNET_GSO_UDP_L4: u8 = 5;
const VNET_GSO_ECN: u8 = 0x80;

const WHAT: &str = "virtio_net_hdr";

/// The state of a frame's transport checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Csum {
    /// A checksum is present but nobody has verified it.
    #[default]
    Unknown,
    /// Verified or known good (netif `NETRXF_data_validated`,
    /// virtio `VIRTIO_NET_HDR_F_DATA_VALID`).
    Valid,
    /// Not computed yet: the 16-bit field at `start + offset` holds the folded
    /// pseudo-header sum, and the checksum covers `start` to the end of the
    /// frame (Linux `CHECKSUM_PARTIAL`, virtio `NEEDS_CSUM`, netif `csum_blank`).
    Partial { start: u16, offset: u16 },
}

impl Csum {
    /// The netif TX flags that describe this state (`netif.h`: csum_blank
    /// means a partial checksum; data_validated that nobody need check it).
    pub fn tx_flags(self) -> abi::netif::TxFlags {
        use abi::netif::TxFlags;
        match self {
            Csum::Partial { .. } => TxFlags::CSUM_BLANK | TxFlags::DATA_VALIDATED,
            Csum::Valid => TxFlags::DATA_VALIDATED,
            Csum::Unknown => TxFlags::EMPTY,
        }
    }

    /// The netif RX flags that describe this state.
    pub fn rx_flags(self) -> abi::netif::RxFlags {
        use abi::netif::RxFlags;
        match self {
            Csum::Partial { .. } => RxFlags::CSUM_BLANK | RxFlags::DATA_VALIDATED,
            Csum::Valid => RxFlags::DATA_VALIDATED,
            Csum::Unknown => RxFlags::EMPTY,
        }
    }

    /// The state netif flags describe for a frame starting with `head`: a
    /// blank checksum becomes a partial one whose position comes from the
    /// headers (netif carries no csum_start). `head` is the start of a frame
    /// of `len` bytes. `None` when a blank checksum is claimed for a frame
    /// that is not TCP or UDP.
    pub fn from_netif(
        csum_blank: bool,
        data_validated: bool,
        head: &[u8],
        len: usize,
    ) -> Option<Csum> {
        let h = csum_blank
            .then(|| parse_headers_of(head, len).ok())
            .flatten();
        Csum::from_netif_headers(csum_blank, data_validated, h.as_ref())
    }

    /// [`Csum::from_netif`] of a frame whose headers were found to be `h`
    /// (`None`: they could not be parsed).
    pub fn from_netif_headers(
        csum_blank: bool,
        data_validated: bool,
        h: Option<&Headers>,
    ) -> Option<Csum> {
        if csum_blank {
            h.and_then(|h| partial_csum_at(h).ok())
                .map(|(start, offset)| Csum::Partial { start, offset })
        } else if data_validated {
            Some(Csum::Valid)
        } else {
            Some(Csum::Unknown)
        }
    }
}

/// The kind of a large (GSO/TSO) packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    TcpV4,
    TcpV6,
    /// UDP over IPv4 or IPv6, cut into whole datagrams of `size` payload
    /// bytes each (Linux's USO, `SKB_GSO_UDP_L4`).
    UdpL4,
}

/// A packet larger than the wire allows, to be cut into `size`-byte segments
/// by the egress or by [`crate::offload::segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS).
    pub size: u16,
    /// The sender uses ECN: CWR is meant for the first segment only.
    pub ecn: bool,
}

impl Gso {
    /// The GSO described by a netif extra-info slot, if it is one.
    pub fn from_extra(x: &abi::netif::ExtraInfo) -> Option<Gso> {
        use abi::netif::{Extra, GsoType};
        match x.extra {
            Extra::Gso { size, gso_type, .. } => Some(Gso {
                kind: match gso_type {
                    GsoType::TcpV6 => GsoKind::TcpV6,
                    GsoType::UdpL4 => GsoKind::UdpL4,
                    _ => GsoKind::TcpV4,
                },
                size,
                ecn: false,
            }),
            _ => None,
        }
    }

    /// This GSO as a netif extra-info slot (Ram thesis: TSO across the I/O channel).
    pub fn to_extra(&self) -> abi::netif::ExtraInfo {
        use abi::netif::{Extra, ExtraFlags, ExtraInfo, GsoType};
        let gso_type = match self.kind {
            GsoKind::TcpV4 => GsoType::TcpV4,
            GsoKind::TcpV6 => GsoType::TcpV6,
            GsoKind::UdpL4 => GsoType::UdpL4,
        };
        ExtraInfo {
            flags: ExtraFlags::EMPTY,
            extra: Extra::Gso {
                size: self.size,
                gso_type,
                features: 0,
            },
        }
    }
}

/// One Ethernet frame (from the destination MAC on, no FCS) and its offload state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Packet {
    pub data: Vec<u8>,
    pub csum: Csum,
    pub gso: Option<Gso>,
}

impl Packet {
    /// A plain frame: checksum unverified, no GSO.
    pub fn new(data: Vec<u8>) -> Packet {
        Packet {
            data,
            csum: Csum::Unknown,
            gso: None,
        }
    }

    /// Whether the packet still has to be segmented.
    pub fn is_gso(&self) -> bool {
        self.gso.is_some()
    }

    /// Frame length in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Builds a packet from a `virtio_net_hdr` read from a TAP device or a
    /// `PACKET_VNET_HDR` socket, and the frame that followed it.
    ///
    /// The header is little-endian (virtio 1.x, and what Linux uses for TAP on
    /// little-endian hosts). Bytes after the first [`VNET_HDR_LEN`] (such as
    /// `num_buffers`) are ignored, and so is `hdr_len`, which is only a hint.
    /// Refused: unknown flag bits, UFO (UDP fragmentation, which Linux no
    /// longer makes), unknown GSO types, GSO without
    /// `NEEDS_CSUM` or with a zero size, a checksum field outside the frame.
    /// When both flags are set, `NEEDS_CSUM` wins (as in Linux).
    pub fn from_vnet_hdr(hdr: &[u8], data: Vec<u8>) -> Result<Packet, OffloadError> {
        let (csum, gso) = parse_vnet_hdr(hdr, data.len())?;
        Ok(Packet { data, csum, gso })
    }

    /// The `virtio_net_hdr` to prepend when writing this packet to a TAP
    /// device or sending it through a `PACKET_VNET_HDR` socket.
    ///
    /// GSO packets are expected to be `Csum::Partial` (see
    /// [`crate::offload::prepare`]); Linux refuses GSO without `NEEDS_CSUM`.
    pub fn vnet_hdr(&self) -> [u8; VNET_HDR_LEN] {
        encode_vnet_hdr(self.csum, self.gso, &self.data, self.data.len())
    }
}

/// The offload state in a `virtio_net_hdr` read from a TAP device or a
/// `PACKET_VNET_HDR` socket, for a frame of `frame_len` bytes that followed it
/// (see [`Packet::from_vnet_hdr`] for what is refused).
pub fn parse_vnet_hdr(hdr: &[u8], frame_len: usize) -> Result<(Csum, Option<Gso>), OffloadError> {
    let h = hdr.get(..VNET_HDR_LEN).ok_or(OffloadError::Truncated {
        what: WHAT,
        at: 0,
        need: VNET_HDR_LEN,
        have: hdr.len(),
    })?;
    let le16 = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    let flags = h[0];
    let gso_type = h[1];
    let gso_size = le16(4);
    let csum_start = le16(6);
    let csum_offset = le16(8);

    if flags & !(VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID) != 0 {
        return Err(malformed(0, format!("unknown flag bits {flags:#04x}")));
    }
    let csum = if flags & VNET_F_NEEDS_CSUM != 0 {
        let field = usize::from(csum_start) + usize::from(csum_offset);
        if field + 2 > frame_len {
            return Err(OffloadError::Truncated {
                what: "partial checksum field",
                at: field,
                need: 2,
                have: frame_len.saturating_sub(field),
            });
        }
        Csum::Partial {
            start: csum_start,
            offset: csum_offset,
        }
    } else if flags & VNET_F_DATA_VALID != 0 {
        Csum::Valid
    } else {
        Csum::Unknown
    };

    let ecn = gso_type & VNET_GSO_ECN != 0;
    let kind = match gso_type & !VNET_GSO_ECN {
        VNET_GSO_NONE if ecn => {
            return Err(malformed(1, "ECN bit without a GSO type".into()));
        }
        VNET_GSO_NONE => None,
        VNET_GSO_TCPV4 => Some(GsoKind::TcpV4),
        VNET_GSO_TCPV6 => Some(GsoKind::TcpV6),
        VNET_GSO_UDP_L4 => Some(GsoKind::UdpL4),
        VNET_GSO_UDP => {
            return Err(OffloadError::Unsupported {
                what: WHAT,
                at: 1,
                detail: format!("UDP fragmentation offload (type {VNET_GSO_UDP})"),
            });
        }
        t => return Err(malformed(1, format!("unknown GSO type {t}"))),
    };
    let gso = match kind {
        None => None,
        Some(kind) => {
            if flags & VNET_F_NEEDS_CSUM == 0 {
                return Err(malformed(0, "GSO without NEEDS_CSUM".into()));
            }
            if gso_size == 0 {
                return Err(malformed(4, "GSO with a zero gso_size".into()));
            }
            Some(Gso {
                kind,
                size: gso_size,
                ecn,
            })
        }
    };
    Ok((csum, gso))
}

/// The `virtio_net_hdr` for a frame with this offload state, whose first
/// bytes are `head` (enough of them to parse the headers, for `hdr_len`) of
/// `len` in all.
///
/// GSO packets are expected to be `Csum::Partial` (see
/// [`crate::offload::prepare`]); Linux refuses GSO without `NEEDS_CSUM`.
pub fn encode_vnet_hdr(
    csum: Csum,
    gso: Option<Gso>,
    head: &[u8],
    len: usize,
) -> [u8; VNET_HDR_LEN] {
    let mut h = [0u8; VNET_HDR_LEN];
    match csum {
        Csum::Unknown => {}
        Csum::Valid => h[0] = VNET_F_DATA_VALID,
        Csum::Partial { start, offset } => {
            h[0] = VNET_F_NEEDS_CSUM;
            h[6..8].copy_from_slice(&start.to_le_bytes());
            h[8..10].copy_from_slice(&offset.to_le_bytes());
        }
    }
    if let Some(gso) = gso {
        let kind = match gso.kind {
            GsoKind::TcpV4 => VNET_GSO_TCPV4,
            GsoKind::TcpV6 => VNET_GSO_TCPV6,
            GsoKind::UdpL4 => VNET_GSO_UDP_L4,
        };
        h[1] = if gso.ecn { kind | VNET_GSO_ECN } else { kind };
        h[2..4].copy_from_slice(&gso_header_len(csum, head, len).to_le_bytes());
        h[4..6].copy_from_slice(&gso.size.to_le_bytes());
    }
    h
}

/// `hdr_len` for a GSO header: Ethernet + IP + TCP or UDP headers. If the frame
/// does not parse, fall back to the end of the checksum field (what Linux
/// TAP would assume), or 0.
fn gso_header_len(csum: Csum, head: &[u8], len: usize) -> u16 {
    let from_parse = parse_headers_of(head, len).ok().map(|h| h.payload_off);
    let from_csum = match csum {
        Csum::Partial { start, offset } => Some(usize::from(start) + usize::from(offset) + 2),
        _ => None,
    };
    from_parse
        .or(from_csum)
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(0)
}

fn malformed(at: usize, detail: String) -> OffloadError {
    OffloadError::Malformed {
        what: WHAT,
        at,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::{checksum_setup, parse_headers, prepare, Offloads};
    use crate::testing::{frame, tcp4, tcp_seg, v4, v6, Rng, TS_OPT};

    fn hdr(flags: u8, gso_type: u8, hdr_len: u16, size: u16, start: u16, off: u16) -> Vec<u8> {
        let mut h = vec![flags, gso_type];
        for v in [hdr_len, size, start, off] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h
    }

    #[test]
    fn parses_a_tso_header_byte_for_byte() {
        let data = tcp4(&[0; 3000]);
        let raw = [0x01, 0x81, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
        let p = Packet::from_vnet_hdr(&raw, data.clone()).unwrap();
        assert_eq!(
            p.csum,
            Csum::Partial {
                start: 34,
                offset: 16
            }
        );
        assert_eq!(
            p.gso,
            Some(Gso {
                kind: GsoKind::TcpV4,
                size: 1448,
                ecn: true
            })
        );
        assert!(p.is_gso());
        assert_eq!(p.len(), data.len());
        // hdr_len = 14 + 20 + 32 (TCP with timestamps), recomputed from the frame.
        assert_eq!(p.vnet_hdr(), raw);
    }

    /// A 4,000-byte UDP/IPv4 datagram to be cut at 1,400 bytes, as a TAP
    /// with `TUN_F_USO4` hands it over.
    fn udp_gso() -> Packet {
        let mut p = Packet::new(frame(&v4(), 17, crate::testing::udp_seg(&[3; 4000]), false));
        checksum_setup(&mut p, true).unwrap();
        Packet {
            gso: Some(Gso {
                kind: GsoKind::UdpL4,
                size: 1400,
                ecn: false,
            }),
            ..p
        }
    }

    #[test]
    fn udp_segmentation_offload_is_header_type_5() {
        let p = udp_gso();
        let h = p.vnet_hdr();
        assert_eq!((h[1], u16::from_le_bytes([h[4], h[5]])), (5, 1400));
        // hdr_len: Ethernet + IPv4 + UDP.
        assert_eq!(u16::from_le_bytes([h[2], h[3]]), 14 + 20 + 8);
        assert_eq!(Packet::from_vnet_hdr(&h, p.data.clone()).unwrap(), p);
    }

    #[test]
    fn round_trips() {
        let d4 = tcp4(&[5; 4000]);
        let d6 = frame(&v6(), 6, tcp_seg(1, 0x10, &TS_OPT, &[6; 4000]), false);
        let mut partial6 = Packet::new(d6.clone());
        checksum_setup(&mut partial6, true).unwrap();
        let cases = [
            Packet::new(d4.clone()),
            Packet {
                csum: Csum::Valid,
                ..Packet::new(d4.clone())
            },
            Packet {
                csum: Csum::Partial {
                    start: 34,
                    offset: 16,
                },
                ..Packet::new(d4.clone())
            },
            Packet {
                csum: Csum::Partial {
                    start: 34,
                    offset: 16,
                },
                gso: Some(Gso {
                    kind: GsoKind::TcpV4,
                    size: 1448,
                    ecn: false,
                }),
                ..Packet::new(d4.clone())
            },
            Packet {
                gso: Some(Gso {
                    kind: GsoKind::TcpV6,
                    size: 1428,
                    ecn: true,
                }),
                ..partial6
            },
            udp_gso(),
        ];
        for p in cases {
            let h = p.vnet_hdr();
            let back = Packet::from_vnet_hdr(&h, p.data.clone()).unwrap();
            assert_eq!(back, p);
            let hdr_len = u16::from_le_bytes([h[2], h[3]]);
            if p.is_gso() {
                assert_eq!(
                    usize::from(hdr_len),
                    parse_headers(&p.data).unwrap().payload_off
                );
            } else {
                assert_eq!(hdr_len, 0);
            }
        }
        assert_eq!(Packet::new(vec![]).vnet_hdr(), [0; VNET_HDR_LEN]);
        assert!(Packet::default().is_empty());
    }

    #[test]
    fn header_flag_mapping() {
        let d = tcp4(&[1; 10]);
        let valid = Packet::from_vnet_hdr(&hdr(2, 0, 0, 0, 0, 0), d.clone()).unwrap();
        assert_eq!(valid.csum, Csum::Valid);
        assert_eq!(valid.vnet_hdr()[0], 2);
        // NEEDS_CSUM wins over DATA_VALID.
        let both = Packet::from_vnet_hdr(&hdr(3, 0, 0, 0, 34, 16), d.clone()).unwrap();
        assert_eq!(
            both.csum,
            Csum::Partial {
                start: 34,
                offset: 16
            }
        );
        // A 12-byte header (with num_buffers) is accepted; gso_size without GSO ignored.
        let mut long = hdr(0, 0, 0, 1400, 0, 0);
        long.extend_from_slice(&1u16.to_le_bytes());
        let p = Packet::from_vnet_hdr(&long, d.clone()).unwrap();
        assert_eq!(p, Packet::new(d.clone()));
        // The checksum field may end exactly at the end of the frame.
        let n = d.len() as u16;
        assert!(Packet::from_vnet_hdr(&hdr(1, 0, 0, 0, n - 10, 8), d).is_ok());
    }

    #[test]
    fn rejects_bad_headers() {
        let d = tcp4(&[1; 100]);
        let n = d.len() as u16;
        let truncated = |r: Result<Packet, OffloadError>| {
            assert!(matches!(r, Err(OffloadError::Truncated { .. })), "{r:?}")
        };
        let malformed = |r: Result<Packet, OffloadError>| {
            assert!(matches!(r, Err(OffloadError::Malformed { .. })), "{r:?}")
        };
        let unsupported = |r: Result<Packet, OffloadError>| {
            assert!(matches!(r, Err(OffloadError::Unsupported { .. })), "{r:?}")
        };
        truncated(Packet::from_vnet_hdr(&[0; 9], d.clone()));
        truncated(Packet::from_vnet_hdr(&[], d.clone()));
        malformed(Packet::from_vnet_hdr(&hdr(4, 0, 0, 0, 0, 0), d.clone()));
        malformed(Packet::from_vnet_hdr(&hdr(0x81, 0, 0, 0, 0, 0), d.clone()));
        unsupported(Packet::from_vnet_hdr(
            &hdr(1, 3, 42, 1400, 34, 6),
            d.clone(),
        ));
        malformed(Packet::from_vnet_hdr(
            &hdr(1, 2, 66, 1448, 34, 16),
            d.clone(),
        ));
        malformed(Packet::from_vnet_hdr(
            &hdr(1, 0x80, 0, 0, 34, 16),
            d.clone(),
        ));
        malformed(Packet::from_vnet_hdr(&hdr(0, 1, 66, 1448, 0, 0), d.clone()));
        malformed(Packet::from_vnet_hdr(&hdr(2, 4, 66, 1448, 0, 0), d.clone()));
        malformed(Packet::from_vnet_hdr(&hdr(1, 1, 66, 0, 34, 16), d.clone()));
        truncated(Packet::from_vnet_hdr(
            &hdr(1, 0, 0, 0, n - 10, 9),
            d.clone(),
        ));
        truncated(Packet::from_vnet_hdr(
            &hdr(1, 0, 0, 0, 0xffff, 0xffff),
            d.clone(),
        ));
        truncated(Packet::from_vnet_hdr(&hdr(1, 0, 0, 0, 0, 0), vec![0]));
    }

    #[test]
    fn random_headers_do_not_panic() {
        let mut rng = Rng::new(21);
        let frames = [
            tcp4(&[3; 3000]),
            frame(&v4(), 17, vec![0; 16], false),
            vec![],
        ];
        let mut accepted = 0;
        for i in 0..20_000 {
            let mut raw = rng.bytes(VNET_HDR_LEN);
            if i % 2 == 0 {
                raw[0] &= 3; // keep flags plausible so validation goes deeper
                raw[1] &= 0x85;
                raw[6..10].copy_from_slice(&[34, 0, 16, 0]);
            }
            let data = frames[rng.below(frames.len())].clone();
            if let Ok(p) = Packet::from_vnet_hdr(&raw, data) {
                accepted += 1;
                let h = p.vnet_hdr();
                assert_eq!(Packet::from_vnet_hdr(&h, p.data.clone()).as_ref(), Ok(&p));
                let mut out = Vec::new();
                let _ = prepare(p.clone(), Offloads::NONE, &mut out);
                let _ = prepare(p, Offloads::ALL, &mut out);
            }
        }
        assert!(accepted > 100, "only {accepted} headers accepted");
    }

    #[test]
    fn offload_state_defaults() {
        let p = Packet::new(vec![1, 2, 3]);
        assert_eq!((p.csum, p.gso, p.len()), (Csum::Unknown, None, 3));
        assert!(!p.is_gso() && !p.is_empty());
        assert_eq!(Packet::default().csum, Csum::Unknown);
    }

    /// The state a frame carries from the port to the guest's TAP: the
    /// port's `virtio_net_hdr`, netback's netif RX flags for the guest's
    /// NIC, netfront's reading of them, the header written to the TAP.
    fn port_to_tap(from_port: &Packet, guest: Offloads) -> Packet {
        let mut out = Vec::new();
        prepare(from_port.clone(), guest, &mut out).unwrap();
        let [to_guest] = &out[..] else {
            panic!("one frame in, {} out", out.len())
        };
        let rx = to_guest.csum.rx_flags();
        let (blank, valid) = (
            rx.contains(abi::netif::RxFlags::CSUM_BLANK),
            rx.contains(abi::netif::RxFlags::DATA_VALIDATED),
        );
        let (data, len) = (&to_guest.data, to_guest.len());
        let at_tap = Csum::from_netif(blank, valid, data, len).expect("TCP or UDP");
        Packet::from_vnet_hdr(&encode_vnet_hdr(at_tap, None, data, len), data.clone()).unwrap()
    }

    /// A datagram the kernel hands the port with a partial checksum (UDP
    /// from a socket over a veth, no GSO, as a DHCP offer or DNS answer)
    /// reaches the guest's TAP marked partial at the kernel's offsets, or,
    /// for a guest NIC without checksum offload, computed: never as a
    /// finished frame whose field still holds the pseudo-header sum.
    #[test]
    fn a_partial_checksum_from_the_port_reaches_the_tap_partial_or_computed() {
        use crate::offload::{complete_checksum, verify_l4_checksum};
        use crate::testing::udp_seg;
        let frames = [
            frame(&v4(), 17, udp_seg(&[7; 300]), false),
            frame(&v6(), 17, udp_seg(&[7; 51]), false),
            tcp4(&[1; 100]),
        ];
        let csum_only = Offloads {
            csum: true,
            ..Offloads::NONE
        };
        for f in frames {
            // The kernel's skb: the field holds the pseudo-header sum.
            let mut kernel = Packet::new(f);
            checksum_setup(&mut kernel, true).unwrap();
            let Csum::Partial { start, offset } = kernel.csum else {
                unreachable!()
            };
            let port_hdr = hdr(VNET_F_NEEDS_CSUM, 0, 0, 0, start, offset);
            let from_port = Packet::from_vnet_hdr(&port_hdr, kernel.data.clone()).unwrap();
            assert_eq!(from_port.csum, kernel.csum);
            for guest in [Offloads::ALL, csum_only, Offloads::NONE] {
                let mut tap = port_to_tap(&from_port, guest);
                if guest.csum {
                    assert_eq!(tap.csum, kernel.csum, "for {guest:?}");
                } else {
                    assert_eq!(tap.csum, Csum::Valid, "for {guest:?}");
                }
                // What the guest's kernel finishes (tun: NEEDS_CSUM).
                complete_checksum(&mut tap).unwrap();
                assert!(verify_l4_checksum(&tap.data).unwrap(), "for {guest:?}");
            }
        }
    }
}

/// A frame in flight without a private copy of its payload: its first bytes
/// in private memory (netback's header copy, or a whole frame the port
/// received) and the rest as ranges of one shared mapping (the sending
/// guest's TX buffers). Menon 2006 §4.1: the driver domain decides on the
/// header copy and never reads the payload.
#[derive(Clone, Copy)]
pub struct FrameRef<'a> {
    /// The frame's first bytes, checked and private.
    pub head: &'a [u8],
    /// Private bytes right after `head`: the unchanged rest of a frame
    /// whose first bytes were rewritten (an 802.1Q tag added or removed,
    /// see the driver domain's VLAN module); empty otherwise.
    pub body: &'a [u8],
    /// Where the remaining bytes are, if any.
    pub map: Option<&'a sys::Mapping>,
    /// `(offset, length)` ranges of `map` holding the bytes after `body`.
    pub segs: &'a [(usize, usize)],
    /// Total length of the frame.
    pub len: usize,
    pub csum: Csum,
    pub gso: Option<Gso>,
    /// The 802.1Q tag the frame had on the wire, which the receiving
    /// kernel took off and reported apart (`PACKET_AUXDATA`, packet(7)): it
    /// is not in the bytes above. The bridge classifies by it and puts it
    /// back only where the frame leaves tagged (the driver domain's VLAN module).
    pub vlan: Option<sys::VlanTag>,
}

impl<'a> FrameRef<'a> {
    /// A frame wholly in private memory.
    pub fn private(data: &'a [u8], csum: Csum, gso: Option<Gso>) -> FrameRef<'a> {
        FrameRef {
            head: data,
            body: &[],
            map: None,
            segs: &[],
            len: data.len(),
            csum,
            gso,
            vlan: None,
        }
    }

    /// The same frame as a [`Packet`], copied (the slow path: the software
    /// offload driver needs the bytes).
    pub fn to_packet(&self) -> Packet {
        let mut data = vec![0u8; self.len];
        self.copy_out(0, &mut data);
        Packet {
            data,
            csum: self.csum,
            gso: self.gso,
        }
    }

    /// Copies the frame's bytes from `at` into `dst`. The shared ranges
    /// were checked against `map` when the frame was held (netback's
    /// `NgmTx::reach` makes each from a checked frame and offset), so this
    /// read cannot leave the mapping.
    pub fn copy_out(&self, at: usize, dst: &mut [u8]) {
        self.walk(at, dst.len(), |piece, done| match piece {
            Piece::Private(b) => dst[done..done + b.len()].copy_from_slice(b),
            Piece::Shared(m, off, n) => {
                use abi::SharedMemory;
                m.read_bytes(off, &mut dst[done..done + n])
            }
        });
    }

    /// The frame's length on the wire: with a tag the kernel took off.
    pub fn wire_len(&self) -> usize {
        self.len + if self.vlan.is_some() { 4 } else { 0 }
    }

    /// Copies the frame's first `dst.len()` bytes as they were on the wire
    /// (a tag the kernel took off back after the MACs) into `dst`.
    pub fn copy_wire(&self, dst: &mut [u8]) {
        let Some(tag) = self.vlan else {
            return self.copy_out(0, dst);
        };
        let macs = dst.len().min(12);
        self.copy_out(0, &mut dst[..macs]);
        let mut t = [0u8; 4];
        t[..2].copy_from_slice(&tag.tpid.to_be_bytes());
        t[2..].copy_from_slice(&tag.tci.to_be_bytes());
        let n = (dst.len() - macs).min(4);
        dst[macs..macs + n].copy_from_slice(&t[..n]);
        if dst.len() > 16 {
            self.copy_out(12, &mut dst[16..]);
        }
    }

    /// Copies `len` bytes of the frame from `at` into `dst` at `dst_off`: the
    /// one copy of a frame delivered into a guest's posted buffer. `dst_off`
    /// comes from the guest's grant, so a range outside `dst` (or `dst`
    /// read-only) is an error, and the copy stops there.
    pub fn copy_into(
        &self,
        at: usize,
        len: usize,
        dst: &sys::Mapping,
        dst_off: usize,
    ) -> Result<(), abi::MemError> {
        use abi::SharedMemory;
        let mut r = Ok(());
        self.walk(at, len, |piece, done| {
            if r.is_ok() {
                r = match piece {
                    Piece::Private(b) => dst.try_write_bytes(dst_off + done, b),
                    Piece::Shared(m, off, n) => dst.try_copy_from(dst_off + done, m, off, n),
                };
            }
        });
        r
    }

    /// Visits the pieces covering `len` bytes from `at`, with the bytes done so far.
    fn walk(&self, at: usize, len: usize, mut f: impl FnMut(Piece<'_>, usize)) {
        let end = (at + len).min(self.len);
        let mut pos = 0; // frame offset of the current piece
        let mut done = 0;
        for part in [self.head, self.body] {
            let s = at.max(pos);
            let e = end.min(pos + part.len());
            if s < e {
                f(Piece::Private(&part[s - pos..e - pos]), done);
                done += e - s;
            }
            pos += part.len();
        }
        let Some(map) = self.map else { return };
        for &(off, n) in self.segs {
            if pos >= end {
                break;
            }
            let s = at.max(pos);
            let e = end.min(pos + n);
            if s < e {
                f(Piece::Shared(map, off + (s - pos), e - s), done);
                done += e - s;
            }
            pos += n;
        }
    }
}

enum Piece<'b> {
    Private(&'b [u8]),
    Shared(&'b sys::Mapping, usize, usize),
}

#[cfg(test)]
mod frame_ref_tests {
    use super::*;
    use abi::{MemError, SharedMemory};
    use std::os::fd::AsFd;

    #[test]
    fn delivery_to_an_offset_outside_the_guests_buffer_is_an_error() {
        let fd = sys::Memfd::create("t-frameref", 8192, false).unwrap();
        let src = sys::Mapping::new(fd.as_fd(), 0, 8192, true).unwrap();
        let dst = sys::Mapping::new(fd.as_fd(), 4096, 4096, true).unwrap();
        src.write_bytes(100, b"payload");
        let segs = [(100, 7)];
        let f = FrameRef {
            head: b"head",
            body: &[],
            map: Some(&src),
            segs: &segs,
            len: 11,
            csum: Csum::Unknown,
            gso: None,
            vlan: None,
        };
        // The guest's grant put its buffer at the mapping's last bytes.
        assert_eq!(
            f.copy_into(0, 11, &dst, 4090),
            Err(MemError::OutOfBounds {
                off: 4094,
                len: 7,
                size: 4096
            })
        );
        assert!(f.copy_into(0, 11, &dst, usize::MAX).is_err());
        let ro = sys::Mapping::new(fd.as_fd(), 0, 4096, false).unwrap();
        assert_eq!(
            f.copy_into(0, 4, &ro, 0),
            Err(MemError::ReadOnly { off: 0 })
        );
        f.copy_into(0, 11, &dst, 4085).unwrap();
        let mut b = [0u8; 11];
        dst.read_bytes(4085, &mut b);
        assert_eq!(&b, b"headpayload");
    }
}
