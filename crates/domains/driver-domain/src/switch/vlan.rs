//! Bridges and 802.1Q VLANs in splitnet's own bridge (IEEE 802.1Q; the
//! `vlan` and `bridge` options of xl-network-configuration(5)).
//!
//! Every bridge port joins one bridge and is either an *access* port of one
//! VLAN (its frames are untagged on the wire; VLAN 0 is "no VLAN") or a
//! *trunk* (a tagged frame carries its VLAN, an untagged one is "no VLAN").
//! A frame belongs to one [`Segment`], (bridge, VLAN), and never leaves it:
//! its ingress port classifies it into its segment
//! ([`Attach::classify_frame`], in the switch's ingress stage), and it
//! leaves only through the ports that are members. Where a frame enters untagged and leaves tagged, or the other way round,
//! its first bytes are rewritten into fixed scratch space ([`retag`]); its
//! payload stays where it is.
//!
//! This is a C-VLAN bridge: a frame's VLAN is that of an outer 802.1Q
//! C-tag (TPID 0x8100). An 802.1ad S-tag (0x88a8) selects no VLAN here
//! (IEEE 802.1Q-2018 §6.9): such a frame is untagged to this bridge, as in
//! a C-VLAN component. The tags are read through `frame::wire`'s views.

use frame::packet::{Csum, FrameRef};
use frame::wire::{eth, ETH_HLEN, ETH_MACS as MACS};
pub use frame::wire::{vlan::VID_MAX, TPID_8021Q as TPID, VLAN_HLEN as TAG_LEN};
pub use sys::VlanTag;
/// Header bytes a rewritten frame keeps in scratch: netback's header copy
/// and a tag.
pub const RETAG_HEAD: usize = crate::netback::tx::HEAD + TAG_LEN;

/// Index of a bridge in the driver domain (bridges are named by the ports
/// that use them).
pub type BridgeId = u16;

/// A broadcast domain: one VLAN of one bridge (VLAN 0: untagged frames).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub bridge: BridgeId,
    pub vlan: u16,
}

/// How a port carries VLANs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Untagged frames, all of one VLAN (0: no VLAN).
    Access(u16),
    /// Tagged frames of every VLAN of the bridge; untagged ones are VLAN 0.
    Trunk,
}

/// Where a bridge port is: its bridge and how it carries VLANs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attach {
    pub bridge: BridgeId,
    pub mode: Mode,
}

/// A frame as its ingress port classified it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ingress {
    pub seg: Segment,
    /// It carries an 802.1Q tag.
    pub tagged: bool,
}

impl Attach {
    /// How frame `f` (`inr` as classified) must be rewritten to leave
    /// through this port: `None`, not at all; `Some(tag)`, by [`retag`]
    /// with `tag`. A tag the kernel took off is put back only here, where
    /// the frame leaves tagged, and with its priority bits.
    pub fn rewrite(&self, f: &FrameRef<'_>, inr: Ingress) -> Option<Option<VlanTag>> {
        let in_bytes = inr.tagged && f.vlan.is_none();
        if self.tags(inr.seg) == in_bytes {
            return None;
        }
        Some((!in_bytes).then(|| f.vlan.unwrap_or(tag_of(inr.seg.vlan))))
    }

    /// Whether frames of `s` may leave through this port.
    pub fn member(&self, s: Segment) -> bool {
        self.bridge == s.bridge
            && match self.mode {
                Mode::Access(v) => v == s.vlan,
                Mode::Trunk => true,
            }
    }

    /// Whether frames of `s` leave this port tagged.
    pub fn tags(&self, s: Segment) -> bool {
        self.mode == Mode::Trunk && s.vlan != 0
    }
}

/// A frame whose first bytes [`retag`] rewrote into scratch: enough to
/// rebuild it ([`Retagged::frame`]) from the original and the scratch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retagged {
    head_len: usize,
    /// Where the original's head continues (as the new frame's body).
    from: usize,
    len: usize,
    csum: Csum,
}

impl Retagged {
    /// The rewritten frame: its head from `buf`, the rest as in `f`.
    pub fn frame<'a>(&self, f: &FrameRef<'a>, buf: &'a [u8]) -> FrameRef<'a> {
        FrameRef {
            head: &buf[..self.head_len],
            body: f.head.get(self.from..).unwrap_or(&[]),
            map: f.map,
            segs: f.segs,
            len: self.len,
            csum: self.csum,
            gso: f.gso,
            vlan: None,
        }
    }
}

/// The 802.1Q tag of VLAN `vid` (priority 0).
pub fn tag_of(vid: u16) -> VlanTag {
    VlanTag {
        tpid: TPID,
        tci: vid & 0x0fff,
    }
}

/// Writes into `buf` the first bytes of `f` with `tag` inserted after the
/// MACs (`Some`) or its 802.1Q tag removed (`None`). A
/// partial checksum's start moves with the bytes after the MACs; GSO stays
/// as it is (the segment size does not count the link header). Nothing is
/// allocated. Refused: a frame too short for its link header (`runt`), a
/// tag to remove that is not there (`vlan_untagged`), a checksum that
/// would start inside the link header (`csum_start`), or a frame already
/// rewritten.
pub fn retag(
    f: &FrameRef<'_>,
    tag: Option<VlanTag>,
    buf: &mut [u8; RETAG_HEAD],
) -> Result<Retagged, &'static str> {
    let h = f.head;
    if !f.body.is_empty() {
        return Err("retagged_twice");
    }
    let (head_len, from, len, shift) = match tag {
        Some(tag) => {
            if h.len() < ETH_HLEN {
                return Err("runt");
            }
            let keep = h.len().min(RETAG_HEAD - TAG_LEN);
            buf[..MACS].copy_from_slice(&h[..MACS]);
            buf[MACS..MACS + 2].copy_from_slice(&tag.tpid.to_be_bytes());
            buf[MACS + 2..MACS + TAG_LEN].copy_from_slice(&tag.tci.to_be_bytes());
            buf[MACS + TAG_LEN..keep + TAG_LEN].copy_from_slice(&h[MACS..keep]);
            (keep + TAG_LEN, keep, f.len + TAG_LEN, TAG_LEN as i32)
        }
        None => {
            if h.len() < ETH_HLEN + TAG_LEN || f.len < h.len() {
                return Err("runt");
            }
            if eth::Packet::new_unchecked(h).ethertype() != TPID {
                return Err("vlan_untagged");
            }
            let keep = h.len().min(RETAG_HEAD + TAG_LEN);
            buf[..MACS].copy_from_slice(&h[..MACS]);
            buf[MACS..keep - TAG_LEN].copy_from_slice(&h[MACS + TAG_LEN..keep]);
            (keep - TAG_LEN, keep, f.len - TAG_LEN, -(TAG_LEN as i32))
        }
    };
    let csum = match f.csum {
        Csum::Partial { start, offset } => {
            let moved = i32::from(start) + shift;
            if moved < ETH_HLEN as i32 || moved > i32::from(u16::MAX) {
                return Err("csum_start");
            }
            Csum::Partial {
                start: moved as u16,
                offset,
            }
        }
        c => c,
    };
    Ok(Retagged {
        head_len,
        from,
        len,
        csum,
    })
}

/// A VLAN ID as the toolstack writes it (`splitnet-vlan`, an uplink's
/// `vlan=`): decimal, 1 to 4094.
pub fn parse_vid(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(v) if (1..=VID_MAX).contains(&v) => Ok(v),
        _ => Err(format!("VLAN {s:?} is not a number from 1 to {VID_MAX}")),
    }
}

/// Checks an interface or bridge name: what Linux accepts as an interface
/// name (1 to 15 bytes, no `/`, whitespace or `:`), as xl's `bridge=`
/// names one.
pub fn check_ifname(s: &str) -> Result<&str, String> {
    let ok = !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(s)
    } else {
        Err(format!("{s:?} is not an interface name"))
    }
}

/// An uplink as its store value names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UplinkSpec {
    pub bridge: String,
    /// Its access VLAN; None: a trunk.
    pub vlan: Option<u16>,
    /// The primary of the macvlan group it is a member of (it only
    /// receives, as that uplink's bridge port).
    pub group: Option<String>,
    /// Dedicated queues it offers its vifs (Ram thesis ch. 3); None: the
    /// default ([`crate::port::vmq::DEFAULT_QUEUES`]).
    pub queues: Option<u16>,
}

/// An uplink's store value,
/// `bridge=<name>[,vlan=<vid>][,group=<ifname>][,queues=<0..=64>]`.
pub fn parse_uplink(value: &str) -> Result<UplinkSpec, String> {
    let (mut bridge, mut vlan, mut group, mut queues) = (None, None, None, None);
    for kv in value.trim().split(',') {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(format!("{kv:?} is not key=value"));
        };
        let slot_taken = match k.trim() {
            "bridge" => bridge
                .replace(check_ifname(v.trim())?.to_string())
                .is_some(),
            "vlan" => vlan.replace(parse_vid(v)?).is_some(),
            "group" => group.replace(check_ifname(v.trim())?.to_string()).is_some(),
            "queues" => queues.replace(parse_queues(v)?).is_some(),
            other => {
                return Err(format!(
                    "unknown key {other:?} (bridge, vlan, group, queues)"
                ))
            }
        };
        if slot_taken {
            return Err(format!("{k:?} given twice"));
        }
    }
    let bridge = bridge.ok_or_else(|| "bridge= is missing".to_string())?;
    Ok(UplinkSpec {
        bridge,
        vlan,
        group,
        queues,
    })
}

/// A port's queue count: 0 to [`crate::port::vmq::MAX_QUEUES`].
fn parse_queues(v: &str) -> Result<u16, String> {
    let max = crate::port::vmq::MAX_QUEUES;
    match v.trim().parse::<u16>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("queues={v:?}: a number from 0 to {max}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use frame::offload::{checksum_setup, parse_headers};
    use frame::packet::{Gso, GsoKind, Packet};
    use frame::testing::tcp4;

    const BR: BridgeId = 3;
    fn trunk() -> Attach {
        Attach {
            bridge: BR,
            mode: Mode::Trunk,
        }
    }
    fn access(v: u16) -> Attach {
        Attach {
            bridge: BR,
            mode: Mode::Access(v),
        }
    }
    #[test]
    fn a_tag_the_kernel_took_off_classifies_and_goes_back_only_to_trunks() {
        let f = tcp4(&[3; 1500]);
        let prio = VlanTag {
            tpid: TPID,
            tci: 0xa000 | 10,
        };
        let k = FrameRef {
            vlan: Some(prio),
            ..FrameRef::private(&f, Csum::Unknown, None)
        };
        let inr = trunk().classify_frame(&k).unwrap();
        assert_eq!((inr.seg, inr.tagged), (seg(10), true));
        assert_eq!(access(10).rewrite(&k, inr), None);
        assert_eq!(trunk().rewrite(&k, inr), Some(Some(prio)));
        assert_eq!(access(10).classify_frame(&k), Err("vlan_tagged"));
        // The same frame with its tag in its bytes: stripped for access.
        let t = tagged(&f, 10);
        let b = FrameRef::private(&t, Csum::Unknown, None);
        let inr = trunk().classify_frame(&b).unwrap();
        assert_eq!(access(10).rewrite(&b, inr), Some(None));
        assert_eq!(trunk().rewrite(&b, inr), None);
        let short = FrameRef {
            vlan: Some(prio),
            ..FrameRef::private(&f[..13], Csum::Unknown, None)
        };
        assert_eq!(trunk().classify_frame(&short), Err("runt"));
    }

    fn seg(vlan: u16) -> Segment {
        Segment { bridge: BR, vlan }
    }
    fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&TPID.to_be_bytes());
        t.extend_from_slice(&tci.to_be_bytes());
        t.extend_from_slice(&f[12..]);
        t
    }
    fn bytes(f: &FrameRef<'_>) -> Vec<u8> {
        let mut v = vec![0; f.len];
        f.copy_out(0, &mut v);
        v
    }

    #[test]
    fn classifies_by_port_mode_and_tag() {
        let f = tcp4(&[1; 20]);
        let t = tagged(&f, 0xe00a); // PCP 7, VID 10
        assert_eq!(
            trunk().classify(&f),
            Ok(Ingress {
                seg: seg(0),
                tagged: false
            })
        );
        assert_eq!(
            trunk().classify(&t),
            Ok(Ingress {
                seg: seg(10),
                tagged: true
            })
        );
        assert_eq!(access(10).classify(&f).map(|i| i.seg), Ok(seg(10)));
        assert_eq!(access(0).classify(&f).map(|i| i.seg), Ok(seg(0)));
        assert_eq!(access(10).classify(&t), Err("vlan_tagged"));
        assert_eq!(access(0).classify(&t), Err("vlan_tagged"));
        assert_eq!(trunk().classify(&tagged(&f, 0x0fff)), Err("vlan_reserved"));
        // Priority-tagged (VID 0) frames are "no VLAN".
        assert_eq!(
            trunk().classify(&tagged(&f, 0x2000)).map(|i| i.seg),
            Ok(seg(0))
        );
        for n in 0..18 {
            let r = trunk().classify(&t[..n]);
            assert!(n < 14 || r == Err("runt"), "{n}: {r:?}");
            assert!(r.is_err(), "{n}");
        }
    }

    #[test]
    fn membership_and_tagging() {
        assert!(trunk().member(seg(0)) && trunk().member(seg(4094)));
        assert!(access(5).member(seg(5)) && !access(5).member(seg(0)));
        assert!(!access(0).member(seg(5)));
        let other = Segment { bridge: 4, vlan: 0 };
        assert!(!trunk().member(other) && !access(0).member(other));
        assert!(trunk().tags(seg(5)) && !trunk().tags(seg(0)) && !access(5).tags(seg(5)));
    }

    #[test]
    fn insert_then_strip_round_trips_a_private_frame_with_a_partial_checksum() {
        let mut p = Packet::new(tcp4(&[7; 1400]));
        checksum_setup(&mut p, true).unwrap();
        let Csum::Partial { start, offset } = p.csum else {
            panic!("partial checksum expected");
        };
        let f = FrameRef::private(&p.data, p.csum, None);
        let mut buf = [0u8; RETAG_HEAD];
        let r = retag(&f, Some(tag_of(10)), &mut buf).unwrap();
        let t = r.frame(&f, &buf);
        assert_eq!(t.len, f.len + 4);
        assert_eq!(bytes(&t), tagged(&p.data, 10));
        assert_eq!(
            t.csum,
            Csum::Partial {
                start: start + 4,
                offset
            }
        );
        // The headers still parse (offload code knows the tag).
        assert_eq!(
            parse_headers(&bytes(&t)).unwrap().payload_off,
            parse_headers(&p.data).unwrap().payload_off + 4
        );
        // Stripping the tagged frame as a port would hand it over.
        let wire = bytes(&t);
        let g = FrameRef::private(&wire, t.csum, None);
        let mut buf2 = [0u8; RETAG_HEAD];
        let s = retag(&g, None, &mut buf2).unwrap();
        let u = s.frame(&g, &buf2);
        assert_eq!(bytes(&u), p.data);
        assert_eq!(u.csum, p.csum);
        // A rewritten frame is not rewritten again.
        assert_eq!(retag(&u, Some(tag_of(3)), &mut buf), Err("retagged_twice"));
    }

    #[test]
    fn insert_keeps_a_gathered_payload_where_it_is() {
        let data = tcp4(&[9; 3000]);
        let fd = sys::Memfd::create("t-vlan", 8192, false).unwrap();
        use std::os::fd::AsFd;
        let map = sys::Mapping::new(fd.as_fd(), 0, 8192, true).unwrap();
        use abi::SharedMemory;
        let hl = 256;
        map.write_bytes(100, &data[hl..]);
        let segs = [(100, data.len() - hl)];
        let gso = Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            ecn: false,
        });
        let csum = Csum::Partial {
            start: 34,
            offset: 16,
        };
        let f = FrameRef {
            head: &data[..hl],
            body: &[],
            map: Some(&map),
            segs: &segs,
            len: data.len(),
            csum,
            gso,
            vlan: None,
        };
        let mut buf = [0u8; RETAG_HEAD];
        let t = retag(&f, Some(tag_of(4094)), &mut buf).unwrap();
        let t = t.frame(&f, &buf);
        assert_eq!(t.head.len(), hl + 4);
        assert!(t.body.is_empty());
        assert_eq!(t.segs, &segs);
        assert_eq!(t.gso, gso);
        assert_eq!(
            t.csum,
            Csum::Partial {
                start: 38,
                offset: 16
            }
        );
        assert_eq!(bytes(&t), tagged(&data, 4094));
    }

    #[test]
    fn malformed_and_truncated_frames_are_refused_never_panic() {
        let mut buf = [0u8; RETAG_HEAD];
        let f = tcp4(&[1; 64]);
        let t = tagged(&f, 7);
        for n in 0..t.len() {
            let g = FrameRef::private(&t[..n], Csum::Unknown, None);
            let r = retag(&g, None, &mut buf);
            assert_eq!(r.is_ok(), n >= 18, "strip of {n} bytes: {r:?}");
            let r = retag(&g, Some(tag_of(7)), &mut buf);
            assert_eq!(r.is_ok(), n >= 14, "insert into {n} bytes: {r:?}");
        }
        let g = FrameRef::private(&f, Csum::Unknown, None);
        assert_eq!(retag(&g, None, &mut buf), Err("vlan_untagged"));
        // A checksum that would start inside the link header.
        let bad = Csum::Partial {
            start: 16,
            offset: 0,
        };
        let g = FrameRef::private(&t, bad, None);
        assert_eq!(retag(&g, None, &mut buf), Err("csum_start"));
        let far = Csum::Partial {
            start: u16::MAX - 2,
            offset: 0,
        };
        let g = FrameRef::private(&f, far, None);
        assert_eq!(retag(&g, Some(tag_of(1)), &mut buf), Err("csum_start"));
        // A length below the head's (never from a well-formed source).
        let g = FrameRef {
            len: 4,
            ..FrameRef::private(&t, Csum::Unknown, None)
        };
        assert_eq!(retag(&g, None, &mut buf), Err("runt"));
        // Random bytes, random lengths: never a panic.
        let mut x = 0x1234_5678u32;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let n = (x % 300) as usize;
            let junk: Vec<u8> = (0..n).map(|i| (x >> (i % 24)) as u8).collect();
            let g = FrameRef::private(&junk, Csum::Unknown, None);
            let _ = trunk().classify(&junk);
            let _ = retag(&g, None, &mut buf).map(|r| bytes(&r.frame(&g, &buf)));
            let _ = retag(&g, Some(tag_of(x as u16)), &mut buf).map(|r| bytes(&r.frame(&g, &buf)));
        }
    }

    #[test]
    fn store_values_are_validated() {
        let spec = |b: &str, v, g: Option<&str>| {
            Ok(UplinkSpec {
                bridge: b.into(),
                vlan: v,
                group: g.map(String::from),
                queues: None,
            })
        };
        let q = parse_uplink("bridge=b,queues=64").unwrap();
        assert_eq!(q.queues, Some(64));
        assert_eq!(parse_uplink("bridge=b,queues=0").unwrap().queues, Some(0));
        assert_eq!(parse_uplink("bridge=xenbr1"), spec("xenbr1", None, None));
        assert_eq!(
            parse_uplink("bridge=xenbr1,vlan=10"),
            spec("xenbr1", Some(10), None)
        );
        assert_eq!(
            parse_uplink(" vlan=4094 , bridge=b"),
            spec("b", Some(4094), None)
        );
        assert_eq!(
            parse_uplink("bridge=b,group=upl0"),
            spec("b", None, Some("upl0"))
        );
        for bad in [
            "",
            "xenbr1",
            "vlan=10",
            "bridge=",
            "bridge=a/b",
            "bridge=0123456789abcdef",
            "bridge=x,vlan=0",
            "bridge=x,vlan=4095",
            "bridge=x,vlan=ten",
            "bridge=x,mtu=9000",
            "bridge=x,bridge=y",
            "bridge=x,group=",
            "bridge=x,group=a/b",
            "bridge=x,group=0123456789abcdef",
            "bridge=x,group=a,group=b",
            "bridge=x,queues=65",
            "bridge=x,queues=-1",
            "bridge=x,queues=",
            "bridge=x,queues=1,queues=2",
        ] {
            assert!(parse_uplink(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_vid("1"), Ok(1));
        assert!(parse_vid("-1").is_err() && parse_vid("").is_err());
    }
}
