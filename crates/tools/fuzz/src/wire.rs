//! The one header walk (`frame::wire`) and its views on frames they did
//! not build.

use frame::wire::{self, arp, eth, ipv4, ipv6, tcp, udp, vlan, Frame, L4};

/// `frame::wire::parse_of` on the input as a whole frame and as the header
/// copy of a longer one: the offsets it returns are ordered and lie within
/// what it read, the header copy up to the end of the transport header
/// parses as the whole frame did, the views at those offsets read without
/// panicking, and the link layer re-emits to its own bytes. Then every
/// view at every offset.
pub fn frame_wire(data: &[u8]) {
    for off in 0..data.len().min(64) {
        every_view(&data[off..]);
    }
    let claimed = data
        .len()
        .saturating_add(usize::from(data.first().copied().unwrap_or(0)) * 64);
    let _ = wire::parse_of(data, claimed);
    let Ok(f) = wire::parse(data) else {
        return;
    };
    let n = f.net;
    assert_eq!(f.link.l3_off, n.l3_off, "{f:?}");
    assert!(n.l3_off <= n.l4_off && n.l4_off <= n.payload_off, "{f:?}");
    assert!(n.end <= data.len(), "{f:?}");
    if matches!(n.l4, L4::Tcp | L4::Udp) {
        assert!(n.payload_off <= n.end, "{f:?}");
        let again = wire::parse_of(&data[..n.payload_off], data.len());
        assert_eq!(again, Ok(f), "the header copy reads differently");
    }
    views(&f, data);
    link_round_trip(&f, data);
}

/// Every view over `b`, each field of those that fit, and their reprs.
fn every_view(b: &[u8]) {
    if let Ok(p) = eth::Packet::new_checked(b) {
        let _ = (eth::Repr::parse(&p), p.payload().len());
    }
    let _ = vlan::Packet::new_checked(b).map(|p| vlan::Repr::parse(&p));
    let _ = ipv4::Packet::new_checked(b).map(|p| (ipv4::Repr::parse(&p), p.options().len()));
    let _ = ipv6::Packet::new_checked(b).map(|p| ipv6::Repr::parse(&p));
    let _ = ipv6::ExtHeader::new_checked(b).map(|p| (p.next_header(), p.header_len()));
    let _ = ipv6::FragmentHeader::new_checked(b).map(|p| (p.frag_offset(), p.ident()));
    let _ = ipv6::walk_ext(b, wire::PROTO_HOPOPTS, 0, true);
    let _ = ipv6::skip_ext(b, wire::PROTO_DSTOPTS, 0, false);
    let _ = arp::Packet::new_checked(b).map(|p| arp::Repr::parse(&p));
    let _ = tcp::Packet::new_checked(b).map(|p| (tcp::Repr::parse(&p), p.options().len()));
    let _ = udp::Packet::new_checked(b).map(|p| udp::Repr::parse(&p));
}

/// Reads every field of every view the walk points at.
fn views(f: &Frame, data: &[u8]) {
    if let Some(p) = f.ipv4(data) {
        let _ = (p.src(), p.dst(), p.options().len(), p.verify_checksum());
        let _ = wire::ipv4::Repr::parse(&p);
    }
    if let Some(p) = f.ipv6(data) {
        let _ = wire::ipv6::Repr::parse(&p);
    }
    if let Some(p) = f.arp(data) {
        let _ = wire::arp::Repr::parse(&p);
    }
    if let Some(p) = f.tcp(data) {
        let _ = (p.options().len(), wire::tcp::Repr::parse(&p));
    }
    if let Some(p) = f.udp(data) {
        let _ = wire::udp::Repr::parse(&p);
    }
}

/// The Ethernet header and the tags looked through, re-emitted from their
/// reprs, are the bytes they were read from.
fn link_round_trip(f: &Frame, data: &[u8]) {
    let mut out = data[..f.link.l3_off].to_vec();
    out.fill(0);
    let Ok(e) = eth::Packet::new_checked(data) else {
        panic!("a parsed frame without an Ethernet header");
    };
    eth::Repr::parse(&e).emit(&mut eth::Packet::new_unchecked(&mut out[..]));
    let mut at = wire::ETH_HLEN;
    for _ in f.link.tags.iter().flatten() {
        let t = vlan::Packet::new_checked(&data[at..]).expect("a tag looked through");
        vlan::Repr::parse(&t).emit(&mut vlan::Packet::new_unchecked(&mut out[at..]));
        at += wire::VLAN_HLEN;
    }
    assert_eq!(at, f.link.l3_off);
    assert_eq!(out, data[..at], "the link layer re-emits differently");
}
