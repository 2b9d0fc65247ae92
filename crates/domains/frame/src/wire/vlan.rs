//! VLAN tags (IEEE 802.1Q-2018 §9.5) and the link layer of a frame: the
//! Ethernet header and the tags between it and the network layer.
//!
//! A tag is a TPID, which stands where the EtherType would, and a TCI:
//! priority (PCP), drop eligibility (DEI) and the 12-bit VLAN ID; then the
//! EtherType of what it carries, or the TPID of a further tag. 802.1Q's
//! customer tag (C-tag) has TPID 0x8100; 802.1ad (now 802.1Q §6.9, "QinQ")
//! puts a service tag (S-tag, TPID 0x88a8) outside it.
//!
//! One behaviour for every reader of a frame: [`Link::parse`] looks through
//! up to two tags, each of either TPID (an S-tag and a C-tag as 802.1ad
//! stacks them; two C-tags as pre-802.1ad equipment does; Linux's
//! `__vlan_get_protocol` takes either TPID at every level likewise), and
//! reports both. A third TPID is not looked through: it stays the frame's
//! EtherType, and nothing behind it is read as IP. Whether a tag selects a
//! VLAN is the bridge's business: a C-VLAN bridge classifies by a C-tag
//! only (802.1Q §6.9), so an S-tagged frame is untagged to it.

use super::{be16, eth, from, is_tpid, need, view, Result, ETH_HLEN, MAX_VLAN_TAGS, VLAN_HLEN};

/// Highest VLAN ID of a VLAN: 4095 is reserved (802.1Q Table 9-2).
pub const VID_MAX: u16 = 4094;

view!(
    /// A VLAN tag after its TPID: the TCI and the EtherType (or TPID) of
    /// what it carries.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Checks that the buffer holds the TCI and the EtherType.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need(self.buffer.as_ref(), VLAN_HLEN, "802.1Q tag")
    }

    /// Priority, drop eligibility and VLAN ID.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// The EtherType the tag carries (or the TPID of a further tag).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[..2].copy_from_slice(&tci.to_be_bytes());
    }

    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[2..4].copy_from_slice(&t.to_be_bytes());
    }
}

/// One tag as it stands in a frame: its TPID and TCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    pub tpid: u16,
    pub tci: u16,
}

impl Tag {
    /// The VLAN ID (0: priority only, no VLAN).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }

    /// The priority code point.
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }

    /// The drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci & 0x1000 != 0
    }
}

/// A tag's fields, after its TPID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub pcp: u8,
    pub dei: bool,
    pub vid: u16,
    /// What the tag carries.
    pub ethertype: u16,
}

impl Repr {
    /// Reads a tag; every value is representable (whether VID 4095 may be
    /// used is for the bridge to say).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Repr {
        let tci = p.tci();
        Repr {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
            ethertype: p.ethertype(),
        }
    }

    /// The TCI these fields make (PCP cut to 3 bits, VID to 12).
    #[inline]
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }

    pub const fn header_len(&self) -> usize {
        VLAN_HLEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_tci(self.tci());
        p.set_ethertype(self.ethertype);
    }
}

/// The link layer of a frame: its VLAN tags (outer first), its EtherType
/// and where its network layer starts (the MACs are the [`eth::Packet`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The tags looked through, outer first; `None` past the last.
    pub tags: [Option<Tag>; MAX_VLAN_TAGS],
    /// The EtherType after the tags: that of the network layer, or a TPID
    /// when the frame is tagged more deeply than [`MAX_VLAN_TAGS`].
    pub ethertype: u16,
    /// Offset of the network header.
    pub l3_off: usize,
}

impl Link {
    /// Reads the Ethernet header and up to two tags ([module docs](self)).
    /// Fails only when the header or an announced tag is cut short.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<Link> {
        let e = eth::Packet::new_checked(frame)?;
        let mut link = Link {
            tags: [None; MAX_VLAN_TAGS],
            ethertype: e.ethertype(),
            l3_off: ETH_HLEN,
        };
        for slot in &mut link.tags {
            if !is_tpid(link.ethertype) {
                break;
            }
            let t = Packet::new_checked(from(frame, link.l3_off))
                .map_err(|e| e.shifted(link.l3_off))?;
            *slot = Some(Tag {
                tpid: link.ethertype,
                tci: t.tci(),
            });
            link.ethertype = t.ethertype();
            link.l3_off += VLAN_HLEN;
        }
        Ok(link)
    }

    /// The outer tag, if any.
    #[inline]
    pub fn outer(&self) -> Option<Tag> {
        self.tags[0]
    }

    /// How many tags were looked through.
    #[inline]
    pub fn tag_count(&self) -> usize {
        self.tags.iter().flatten().count()
    }

    /// Tagged more deeply than [`MAX_VLAN_TAGS`]: what follows the tags
    /// looked through is another tag, left unread.
    #[inline]
    pub fn too_deep(&self) -> bool {
        is_tpid(self.ethertype)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        Error, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, TPID_8021AD, TPID_8021Q,
    };
    use super::*;

    /// MACs, then each (tpid, tci), then `ethertype` and two bytes.
    fn tagged(tags: &[(u16, u16)], ethertype: u16) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[0, 0x16, 0x3e, 0, 0, 1]);
        for (tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&[0x45, 0]);
        f
    }

    #[test]
    fn an_untagged_frame_has_its_network_layer_after_14_bytes() {
        let l = Link::parse(&tagged(&[], ETHERTYPE_ARP)).unwrap();
        assert_eq!(
            (l.ethertype, l.l3_off, l.tag_count()),
            (ETHERTYPE_ARP, 14, 0)
        );
        assert_eq!(l.outer(), None);
        assert!(!l.too_deep());
    }

    #[test]
    fn one_c_tag_is_looked_through_and_reported() {
        let l = Link::parse(&tagged(&[(TPID_8021Q, 0xa00c)], ETHERTYPE_IPV6)).unwrap();
        assert_eq!(
            (l.ethertype, l.l3_off, l.tag_count()),
            (ETHERTYPE_IPV6, 18, 1)
        );
        let t = l.outer().unwrap();
        assert_eq!(
            (t.tpid, t.vid(), t.pcp(), t.dei()),
            (TPID_8021Q, 12, 5, false)
        );
    }

    #[test]
    fn qinq_reports_the_s_tag_outside_the_c_tag() {
        let f = tagged(&[(TPID_8021AD, 0x1064), (TPID_8021Q, 7)], ETHERTYPE_IPV4);
        let l = Link::parse(&f).unwrap();
        assert_eq!(
            (l.ethertype, l.l3_off, l.tag_count()),
            (ETHERTYPE_IPV4, 22, 2)
        );
        assert_eq!(
            l.tags[0],
            Some(Tag {
                tpid: TPID_8021AD,
                tci: 0x1064
            })
        );
        assert!(l.tags[0].unwrap().dei());
        assert_eq!(
            l.tags[1],
            Some(Tag {
                tpid: TPID_8021Q,
                tci: 7
            })
        );
        // Two C-tags and a lone S-tag are read the same way.
        let l = Link::parse(&tagged(&[(TPID_8021Q, 1), (TPID_8021Q, 2)], ETHERTYPE_IPV4)).unwrap();
        assert_eq!((l.l3_off, l.tags[1].unwrap().vid()), (22, 2));
        let l = Link::parse(&tagged(&[(TPID_8021AD, 9)], ETHERTYPE_IPV4)).unwrap();
        assert_eq!((l.l3_off, l.outer().unwrap().vid()), (18, 9));
    }

    #[test]
    fn a_third_tag_is_not_looked_through() {
        let f = tagged(
            &[(TPID_8021AD, 1), (TPID_8021Q, 2), (TPID_8021Q, 3)],
            ETHERTYPE_IPV4,
        );
        let l = Link::parse(&f).unwrap();
        assert_eq!((l.ethertype, l.l3_off, l.tag_count()), (TPID_8021Q, 22, 2));
        assert!(l.too_deep());
    }

    #[test]
    fn a_tag_cut_short_is_truncated_where_it_starts() {
        let f = tagged(&[(TPID_8021AD, 1), (TPID_8021Q, 2)], ETHERTYPE_IPV4);
        for n in 0..22 {
            let e = Link::parse(&f[..n]).unwrap_err();
            let (what, at) = match n {
                0..14 => ("Ethernet header", 0),
                14..18 => ("802.1Q tag", 14),
                _ => ("802.1Q tag", 18),
            };
            assert!(
                matches!(e, Error::Truncated { what: w, at: a, .. } if w == what && a == at),
                "{n}: {e}"
            );
        }
        assert!(Link::parse(&f[..22]).is_ok());
    }

    #[test]
    fn a_tag_repr_round_trips_its_fields() {
        let r = Repr {
            pcp: 6,
            dei: true,
            vid: 4095,
            ethertype: ETHERTYPE_IPV4,
        };
        let mut b = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, [0xdf, 0xff, 0x08, 0x00]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), r);
        assert_eq!(r.header_len(), 4);
        assert!(Packet::new_checked(&b[..3]).is_err());
    }
}
