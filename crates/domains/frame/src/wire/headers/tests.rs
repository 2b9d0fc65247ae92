//! The walk on well-formed frames, on frames cut short or lying about a
//! length, and on the frames the path's earlier parsers read differently
//! (each test says how).

use super::super::*;
use super::*;

const SRC4: [u8; 4] = [10, 0, 0, 5];
const DST4: [u8; 4] = [10, 0, 0, 254];

/// An Ethernet header with `tags` ((TPID, TCI), outer first) and `ethertype`.
fn link(tags: &[(u16, u16)], ethertype: u16) -> Vec<u8> {
    let mut f = vec![0u8; ETH_HLEN];
    eth::Repr {
        dst: [0xff; 6],
        src: [0, 0x16, 0x3e, 0, 0, 1],
        ethertype: tags.first().map_or(ethertype, |t| t.0),
    }
    .emit(&mut eth::Packet::new_unchecked(&mut f[..]));
    for (i, &(_, tci)) in tags.iter().enumerate() {
        let next = tags.get(i + 1).map_or(ethertype, |t| t.0);
        f.extend_from_slice(&tci.to_be_bytes());
        f.extend_from_slice(&next.to_be_bytes());
    }
    f
}

/// An IPv4 packet of protocol `proto` carrying `l4`, behind `tags`.
fn ipv4(tags: &[(u16, u16)], proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = link(tags, ETHERTYPE_IPV4);
    let at = f.len();
    f.resize(at + 20, 0);
    ipv4::Repr {
        src: SRC4,
        dst: DST4,
        protocol: proto,
        ttl: 64,
        tos: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        header_len: 20,
        total_len: 20 + l4.len(),
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut f[at..]));
    f.extend_from_slice(l4);
    f
}

/// An IPv6 packet whose first header is `next`, carrying `payload`.
fn ipv6(tags: &[(u16, u16)], next: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = link(tags, ETHERTYPE_IPV6);
    let at = f.len();
    f.resize(at + 40, 0);
    ipv6::Repr {
        src: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x16, 0x3e, 0xff, 0xfe, 0, 0, 1,
        ],
        dst: [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        next_header: next,
        hop_limit: 255,
        traffic_class: 0,
        flow_label: 0,
        payload_len: payload.len(),
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut f[at..]));
    f.extend_from_slice(payload);
    f
}

/// A TCP header (no options) and `data`.
fn tcp(data: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    tcp::Repr {
        src_port: 40000,
        dst_port: 80,
        seq: 1,
        ack: 1,
        flags: tcp::ACK,
        window: 100,
        header_len: 20,
    }
    .emit(&mut tcp::Packet::new_unchecked(&mut t[..]));
    t.extend_from_slice(data);
    t
}

/// A UDP header (length covering `data`) and `data`.
fn udp(sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    udp::Repr {
        src_port: sport,
        dst_port: dport,
        len: 8 + data.len(),
    }
    .emit(&mut udp::Packet::new_unchecked(&mut u[..]));
    u.extend_from_slice(data);
    u
}

fn net(f: &[u8]) -> Headers {
    parse(f).unwrap().net
}

const C: u16 = TPID_8021Q;
const S: u16 = TPID_8021AD;

#[test]
fn tcp_over_ipv4_and_udp_over_ipv6() {
    let f = ipv4(&[], PROTO_TCP, &tcp(&[1, 2, 3]));
    let p = parse(&f).unwrap();
    assert_eq!(
        p.net,
        Headers {
            l3: L3::Ipv4,
            l3_off: 14,
            l4: L4::Tcp,
            l4_off: 34,
            payload_off: 54,
            end: f.len()
        }
    );
    assert_eq!(p.ipv4(&f).unwrap().src(), SRC4);
    assert_eq!(p.tcp(&f).unwrap().dst_port(), 80);
    assert!(p.udp(&f).is_none() && p.ipv6(&f).is_none() && p.arp(&f).is_none());
    let f = ipv6(&[], PROTO_UDP, &udp(546, 547, &[9; 5]));
    let p = parse(&f).unwrap();
    assert_eq!(
        (
            p.net.l3,
            p.net.l4,
            p.net.l4_off,
            p.net.payload_off,
            p.net.end
        ),
        (L3::Ipv6, L4::Udp, 54, 62, 67)
    );
    assert_eq!(p.udp(&f).unwrap().src_port(), 546);
}

#[test]
fn padding_after_the_ip_packet_is_not_part_of_it() {
    let mut f = ipv4(&[], PROTO_UDP, &udp(1, 2, &[1, 2]));
    assert_eq!(f.len(), 44);
    f.resize(60, 0x55);
    assert_eq!(net(&f).end, 44);
}

#[test]
fn arp_and_other_ethertypes_have_no_transport_layer() {
    let mut f = link(&[], ETHERTYPE_ARP);
    f.resize(ETH_HLEN + arp::LEN, 0);
    arp::Repr {
        operation: 1,
        sender_mac: [0, 0x16, 0x3e, 0, 0, 1],
        sender_ip: SRC4,
        target_mac: [0; 6],
        target_ip: DST4,
    }
    .emit(&mut arp::Packet::new_unchecked(&mut f[ETH_HLEN..]));
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.net.l3, p.net.l4, p.net.end),
        (L3::Other(ETHERTYPE_ARP), L4::Absent, f.len())
    );
    let a = arp::Repr::parse(&p.arp(&f).unwrap()).unwrap();
    assert_eq!(a.sender_ip, SRC4);
    let p = parse(&link(&[], 0x88cc)).unwrap();
    assert_eq!((p.net.l3, p.net.l3_off), (L3::Other(0x88cc), 14));
}

#[test]
fn a_header_copy_shorter_than_the_frame_is_read_against_the_frame_length() {
    let f = ipv4(&[], PROTO_TCP, &tcp(&[7; 1000]));
    let head = &f[..128];
    assert_eq!(parse_of(head, f.len()).unwrap().net, net(&f));
    // Claimed by the IP header but not in the frame.
    assert!(matches!(
        parse_of(head, f.len() - 1),
        Err(Error::Truncated {
            what: "IPv4 packet",
            at: 14,
            ..
        })
    ));
    // The TCP header itself must be in the copy.
    assert!(matches!(
        parse_of(&f[..50], f.len()),
        Err(Error::Truncated {
            what: "TCP header",
            at: 34,
            ..
        })
    ));
}

#[test]
fn every_truncation_of_a_tagged_tcp_frame_is_an_error_naming_its_header() {
    let f = ipv4(&[(C, 5)], PROTO_TCP, &tcp(&[]));
    for n in 0..f.len() {
        let e = parse(&f[..n]).unwrap_err();
        let what = match n {
            0..14 => "Ethernet header",
            14..18 => "802.1Q tag",
            18..38 => "IPv4 header",
            _ => "IPv4 packet",
        };
        assert_eq!(e.what(), what, "{n} bytes");
    }
}

/// Today's parsers disagreed here: offload looked through one 802.1Q tag
/// only (a QinQ frame was `Other(0x88a8)` to it, so neither checksummed
/// nor segmented, and GSO on it refused), antispoof looked through two of
/// either TPID, the bridge classified by a C-tag only. Now: two tags of
/// either TPID, both reported, the IP packet behind them found.
#[test]
fn qinq_is_looked_through_and_both_tags_reported() {
    let f = ipv4(&[(S, 100), (C, 7)], PROTO_TCP, &tcp(&[1; 10]));
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.net.l3, p.net.l3_off, p.net.l4, p.net.l4_off),
        (L3::Ipv4, 22, L4::Tcp, 42)
    );
    assert_eq!(
        p.link.tags.map(|t| t.map(|t| (t.tpid, t.vid()))),
        [Some((S, 100)), Some((C, 7))]
    );
    for tags in [[(C, 1), (C, 2)], [(C, 1), (S, 2)]] {
        let f = ipv6(&tags, PROTO_TCP, &tcp(&[]));
        assert_eq!((net(&f).l3, net(&f).l4_off), (L3::Ipv6, 62));
    }
}

/// Antispoof went two tags deep and let what it found there pass as "not
/// IP"; offload stopped after one. Now the walk stops after two and the
/// frame is `Other(TPID)`, which [`Link::too_deep`] says.
#[test]
fn a_third_tag_ends_the_walk() {
    let f = ipv4(&[(S, 1), (C, 2), (C, 3)], PROTO_TCP, &tcp(&[]));
    let p = parse(&f).unwrap();
    assert_eq!(
        (p.net.l3, p.net.l3_off, p.net.l4),
        (L3::Other(C), 22, L4::Absent)
    );
    assert!(p.link.too_deep());
}

/// A tag whose IPv4 header is cut short: the bridge classified it by its
/// tag, antispoof refused it, offload refused it. The walk refuses it (the
/// link layer alone still reads, [`Link::parse`]).
#[test]
fn a_tag_with_a_truncated_inner_header_is_refused_past_the_link_layer() {
    let f = ipv4(&[(C, 9)], PROTO_UDP, &udp(68, 67, &[]));
    let cut = &f[..18 + 10];
    assert!(matches!(
        parse(cut),
        Err(Error::Truncated {
            what: "IPv4 header",
            at: 18,
            need: 20,
            have: 10
        })
    ));
    assert_eq!(Link::parse(cut).unwrap().outer().unwrap().vid(), 9);
}

/// IHL below 5: antispoof read the source address anyway, offload refused
/// the frame. The walk refuses it.
#[test]
fn an_ipv4_header_length_below_20_is_malformed() {
    let mut f = ipv4(&[], PROTO_UDP, &udp(68, 67, &[]));
    for ihl in 0..5u8 {
        f[14] = 0x40 | ihl;
        assert!(matches!(
            parse(&f),
            Err(Error::Malformed {
                what: "IPv4 header",
                at: 14,
                reason: Reason::HeaderLen { .. }
            })
        ));
    }
}

/// Lengths that cannot be right: antispoof never read them, offload
/// refused them. The walk refuses each.
#[test]
fn each_length_field_that_lies_is_refused() {
    let base = ipv4(&[], PROTO_UDP, &udp(1, 2, &[0; 4]));
    let with = |at: usize, v: u16| {
        let mut f = base.clone();
        f[at..at + 2].copy_from_slice(&v.to_be_bytes());
        parse(&f)
    };
    // IPv4 total length: beyond the frame, below the header.
    assert!(matches!(
        with(16, 33),
        Err(Error::Truncated {
            what: "IPv4 packet",
            ..
        })
    ));
    assert!(matches!(
        with(16, 19),
        Err(Error::Malformed {
            reason: Reason::TotalLen { .. },
            ..
        })
    ));
    // UDP length: beyond the IP packet, below its header.
    assert!(matches!(
        with(38, 13),
        Err(Error::Truncated {
            what: "UDP datagram",
            ..
        })
    ));
    assert!(matches!(
        with(38, 7),
        Err(Error::Malformed {
            reason: Reason::UdpLength { .. },
            ..
        })
    ));
    assert_eq!(with(38, 10).unwrap().net.end, 44);
    // TCP data offset below 20, and beyond the packet.
    let mut f = ipv4(&[], PROTO_TCP, &tcp(&[]));
    f[46] = 0x40;
    assert!(matches!(
        parse(&f),
        Err(Error::Malformed {
            reason: Reason::DataOffset { .. },
            ..
        })
    ));
    f[46] = 0x60;
    assert!(matches!(
        parse(&f),
        Err(Error::Truncated {
            what: "TCP header with options",
            ..
        })
    ));
    // IPv6 payload length beyond the frame.
    let mut f = ipv6(&[], PROTO_UDP, &udp(1, 2, &[]));
    f[18..20].copy_from_slice(&9u16.to_be_bytes());
    assert!(matches!(
        parse(&f),
        Err(Error::Truncated {
            what: "IPv6 packet",
            ..
        })
    ));
    // A version that is not the EtherType's.
    let mut f = base.clone();
    f[14] = 0x65;
    assert!(matches!(
        parse(&f),
        Err(Error::Malformed {
            reason: Reason::Version { got: 6, want: 4 },
            ..
        })
    ));
}

/// IPv6 extension headers: offload walked hop-by-hop, routing and
/// destination options and stopped at a fragment header; antispoof walked
/// them too but without bounding each by the packet or keeping hop-by-hop
/// first. The walk bounds and orders them for everyone.
#[test]
fn ipv6_extension_headers_are_walked_to_the_upper_layer() {
    let mut payload = vec![PROTO_DSTOPTS, 0, 0, 0, 0, 0, 0, 0];
    payload.extend_from_slice(&[PROTO_ICMPV6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    payload.extend_from_slice(&[136, 0, 0, 0, 0, 0, 0, 0]);
    let f = ipv6(&[], PROTO_HOPOPTS, &payload);
    let n = net(&f);
    assert_eq!((n.l4, n.l4_off), (L4::Other(PROTO_ICMPV6), 14 + 40 + 24));
    // Hop-by-hop options after another extension header.
    let mut bad = payload.clone();
    bad[0] = PROTO_HOPOPTS;
    let f = ipv6(&[], PROTO_DSTOPTS, &bad);
    assert!(matches!(
        parse(&f),
        Err(Error::Malformed {
            reason: Reason::HopByHopNotFirst,
            ..
        })
    ));
    // An extension header claiming more than the packet.
    let mut long = payload.clone();
    long[1] = 9;
    assert!(matches!(
        parse(&ipv6(&[], PROTO_HOPOPTS, &long)),
        Err(Error::Truncated {
            what: "IPv6 extension header",
            ..
        })
    ));
}

/// Fragments: offload reported them as `Other`, antispoof read the ports
/// of any IPv4 fragment (DHCP) and looked through a first IPv6 fragment.
/// The walk reports each fragment as `Other`: its transport header is not
/// a whole datagram's.
#[test]
fn fragments_have_no_transport_header() {
    let mut f = ipv4(&[], PROTO_UDP, &udp(68, 67, &[]));
    f[20] = 0x20; // more fragments
    let n = net(&f);
    assert_eq!(
        (n.l4, n.l4_off, n.payload_off),
        (L4::Other(PROTO_UDP), 34, 34)
    );
    let mut frag = vec![PROTO_TCP, 0, 0, 1, 0, 0, 0, 9];
    frag.extend_from_slice(&tcp(&[]));
    let n = net(&ipv6(&[], PROTO_FRAGMENT, &frag));
    assert_eq!((n.l4, n.l4_off), (L4::Other(PROTO_FRAGMENT), 54));
}
