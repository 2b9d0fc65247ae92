//! `ip=` anti-spoofing (xl-network-configuration(5)): a guest may send only
//! from the addresses the toolstack gave its vif. Xen's hotplug scripts do
//! this with iptables rules on the vif; here netback checks each frame's
//! header copy before the bridge sees it.
//!
//! What is checked, when the vif has an `ip` list:
//! - IPv4: the source address; a DHCP client's `0.0.0.0` is allowed only
//!   for UDP 68 → 67;
//! - ARP: the sender protocol address (`0.0.0.0`, an address probe of
//!   RFC 5227, claims nothing and is allowed);
//! - IPv6: the source address, one of `ip` or the vif's own link-local
//!   address, the EUI-64 one its MAC gives (RFC 4291 §2.5.1, appendix A);
//!   `::` only for ICMPv6 (duplicate address detection's solicitations and
//!   MLD reports, RFC 4862 §5.4 and RFC 3810 §5.2.13);
//! - neighbour discovery: the target of an advertisement, and of a
//!   solicitation sent from `::` (a DAD probe claims its target), must be
//!   the vif's likewise. A solicitation from an address asks about
//!   someone else's target and claims nothing about it.
//!
//! A guest whose kernel makes other link-local addresses (stable-privacy
//! ones, RFC 7217) must list them in `ip`.
//!
//! Other ethertypes carry no address and pass. Up to two 802.1Q tags are
//! looked through. A header cut short (by the frame or by the header copy)
//! is refused: what cannot be read cannot be vouched for. Nothing here
//! allocates or reads past the slice it is given.

use std::net::IpAddr;

/// Most addresses one vif may be given (the toolstack checks the same).
pub const MAX_ADDRS: usize = abi::xenbus::MAX_VIF_ADDRS;

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_ICMPV6: u8 = 58;
const ND_SOLICIT: u8 = 135;
const ND_ADVERT: u8 = 136;

/// Why a frame was refused (for the log; the counter is one: `spoofed`).
pub type Spoof = &'static str;

/// The addresses a vif may send from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpFilter {
    v4: Vec<[u8; 4]>,
    v6: Vec<[u8; 16]>,
    /// The vif's EUI-64 link-local address ([`IpFilter::with_mac`]).
    link_local: Option<[u8; 16]>,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn arr<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The link-local address a MAC gives by EUI-64 (RFC 4291 appendix A):
/// fe80::/64, then the MAC with its universal/local bit flipped and
/// ff:fe between its halves.
pub fn eui64_link_local(mac: [u8; 6]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..2].copy_from_slice(&[0xfe, 0x80]);
    a[8..11].copy_from_slice(&mac[..3]);
    a[8] ^= 0x02;
    a[11..13].copy_from_slice(&[0xff, 0xfe]);
    a[13..].copy_from_slice(&mac[3..]);
    a
}

impl IpFilter {
    /// Parses the backend's `ip` node: addresses separated by spaces, IPv4
    /// or IPv6, no prefix lengths, at most [`MAX_ADDRS`].
    pub fn parse(text: &str) -> Result<IpFilter, String> {
        let mut f = IpFilter::default();
        for word in text.split_whitespace() {
            match word.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => f.v4.push(a.octets()),
                Ok(IpAddr::V6(a)) => f.v6.push(a.octets()),
                Err(_) => return Err(format!("{word:?} is not an IPv4 or IPv6 address")),
            }
        }
        let n = f.v4.len() + f.v6.len();
        if n == 0 {
            return Err("no address given".into());
        }
        if n > MAX_ADDRS {
            return Err(format!("{n} addresses; at most {MAX_ADDRS}"));
        }
        Ok(f)
    }

    fn has4(&self, a: &[u8; 4]) -> bool {
        self.v4.contains(a)
    }

    /// The same filter, allowing also the link-local address `mac` gives
    /// ([`eui64_link_local`]): the vif's MAC, from its backend `mac` node.
    pub fn with_mac(self, mac: [u8; 6]) -> IpFilter {
        IpFilter {
            link_local: Some(eui64_link_local(mac)),
            ..self
        }
    }

    fn has6(&self, a: &[u8; 16]) -> bool {
        self.v6.contains(a) || self.link_local.as_ref() == Some(a)
    }

    /// Checks one frame (its first bytes at least: netback's header copy).
    pub fn check(&self, frame: &[u8]) -> Result<(), Spoof> {
        let mut at = ETH_HLEN - 2;
        let mut ethertype = be16(frame, at).ok_or("truncated_ethernet")?;
        for _ in 0..2 {
            if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
                break;
            }
            at += 4;
            ethertype = be16(frame, at).ok_or("truncated_vlan")?;
        }
        let l3 = frame.get(at + 2..).unwrap_or(&[]);
        match ethertype {
            ETHERTYPE_IPV4 => self.check_ipv4(l3),
            ETHERTYPE_ARP => self.check_arp(l3),
            ETHERTYPE_IPV6 => self.check_ipv6(l3),
            _ => Ok(()),
        }
    }

    fn check_ipv4(&self, ip: &[u8]) -> Result<(), Spoof> {
        let src: [u8; 4] = arr(ip, 12).ok_or("truncated_ipv4")?;
        if self.has4(&src) {
            return Ok(());
        }
        if src != [0; 4] {
            return Err("ipv4_source");
        }
        // A DHCP client before it has an address: UDP 68 → 67 only.
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ip[9] != IPPROTO_UDP || ihl < 20 {
            return Err("ipv4_unspecified_source");
        }
        let sport = be16(ip, ihl).ok_or("truncated_udp")?;
        let dport = be16(ip, ihl + 2).ok_or("truncated_udp")?;
        if (sport, dport) == (68, 67) {
            Ok(())
        } else {
            Err("ipv4_unspecified_source")
        }
    }

    fn check_arp(&self, arp: &[u8]) -> Result<(), Spoof> {
        // Ethernet/IPv4 ARP: hardware type 1, protocol IPv4, lengths 6 and 4.
        let ptype = be16(arp, 2).ok_or("truncated_arp")?;
        let (hlen, plen) = (arp.get(4).copied(), arp.get(5).copied());
        if ptype != ETHERTYPE_IPV4 || hlen != Some(6) || plen != Some(4) {
            return Err("arp_not_ethernet_ipv4");
        }
        let sender: [u8; 4] = arr(arp, 14).ok_or("truncated_arp")?;
        if sender == [0; 4] || self.has4(&sender) {
            Ok(())
        } else {
            Err("arp_sender")
        }
    }

    fn check_ipv6(&self, ip: &[u8]) -> Result<(), Spoof> {
        let src: [u8; 16] = arr(ip, 8).ok_or("truncated_ipv6")?;
        let unspecified = src == [0; 16];
        if !(unspecified || self.has6(&src)) {
            return Err("ipv6_source");
        }
        let Some((proto, at)) = upper_layer(ip) else {
            return Err("truncated_ipv6");
        };
        if proto != IPPROTO_ICMPV6 {
            return match unspecified {
                true => Err("ipv6_unspecified_source"),
                false => Ok(()),
            };
        }
        let Some(&kind) = ip.get(at) else {
            return Err("truncated_icmpv6");
        };
        let claims = kind == ND_ADVERT || (kind == ND_SOLICIT && unspecified);
        if !claims {
            return Ok(());
        }
        let target: [u8; 16] = arr(ip, at + 8).ok_or("truncated_nd")?;
        if self.has6(&target) {
            Ok(())
        } else {
            Err("nd_target")
        }
    }
}

/// Walks an IPv6 header's extension headers: the upper-layer protocol and
/// where its header starts, or None when cut short. A fragment after the
/// first carries no upper-layer header: it is reported as protocol 44
/// (nothing to check beyond the source).
fn upper_layer(ip: &[u8]) -> Option<(u8, usize)> {
    const HOP: u8 = 0;
    const ROUTING: u8 = 43;
    const FRAGMENT: u8 = 44;
    const DEST: u8 = 60;
    let mut next = *ip.get(6)?;
    let mut at = 40;
    for _ in 0..8 {
        match next {
            HOP | ROUTING | DEST => {
                let len = (usize::from(*ip.get(at + 1)?) + 1) * 8;
                next = *ip.get(at)?;
                at += len;
            }
            FRAGMENT => {
                let offset = be16(ip, at + 2)? & 0xfff8;
                if offset != 0 {
                    return Some((FRAGMENT, at));
                }
                next = *ip.get(at)?;
                at += 8;
            }
            _ => return Some((next, at)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];

    fn eth(ethertype: u16, body: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&MAC);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    fn ipv4(src: [u8; 4], proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0];
        h.extend_from_slice(&src);
        h.extend_from_slice(&[10, 0, 0, 254]);
        h.extend_from_slice(l4);
        eth(ETHERTYPE_IPV4, &h)
    }

    fn arp(sender: [u8; 4]) -> Vec<u8> {
        let mut a = vec![0, 1, 8, 0, 6, 4, 0, 2];
        a.extend_from_slice(&MAC);
        a.extend_from_slice(&sender);
        a.extend_from_slice(&[0; 6]);
        a.extend_from_slice(&[10, 0, 0, 254]);
        eth(ETHERTYPE_ARP, &a)
    }

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    fn ipv6(src: &str, next: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        h.extend_from_slice(&[next, 255]);
        h.extend_from_slice(&v6(src));
        h.extend_from_slice(&v6("ff02::1"));
        h.extend_from_slice(payload);
        eth(ETHERTYPE_IPV6, &h)
    }

    fn nd(kind: u8, target: &str) -> Vec<u8> {
        let mut m = vec![kind, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&v6(target));
        m
    }

    /// The link-local address EUI-64 makes of `MAC`.
    const OWN_LL: &str = "fe80::216:3eff:fe00:1";

    fn filter() -> IpFilter {
        IpFilter::parse("10.0.0.5 2001:db8::5")
            .unwrap()
            .with_mac(MAC)
    }

    #[test]
    fn parses_the_ip_node_and_refuses_bad_ones() {
        let f = filter();
        assert_eq!(f.v4, vec![[10, 0, 0, 5]]);
        assert_eq!(f.v6, vec![v6("2001:db8::5")]);
        assert!(IpFilter::parse("").is_err());
        assert!(IpFilter::parse("10.0.0.5/24").is_err());
        assert!(IpFilter::parse("10.0.0.300").is_err());
        let many: Vec<String> = (0..65).map(|i| format!("10.0.1.{i}")).collect();
        assert!(IpFilter::parse(&many.join(" ")).is_err());
    }

    #[test]
    fn ipv4_source_must_be_the_vifs() {
        let f = filter();
        assert_eq!(f.check(&ipv4([10, 0, 0, 5], 6, &[0; 20])), Ok(()));
        assert_eq!(
            f.check(&ipv4([10, 0, 0, 6], 6, &[0; 20])),
            Err("ipv4_source")
        );
    }

    #[test]
    fn dhcp_from_the_unspecified_address_passes_and_nothing_else_does() {
        let f = filter();
        let udp = |s: u16, d: u16| [s.to_be_bytes(), d.to_be_bytes(), [0; 2], [0; 2]].concat();
        assert_eq!(f.check(&ipv4([0; 4], 17, &udp(68, 67))), Ok(()));
        assert!(f.check(&ipv4([0; 4], 17, &udp(68, 53))).is_err());
        assert!(f.check(&ipv4([0; 4], 6, &udp(68, 67))).is_err());
        // Cut before the ports.
        assert_eq!(f.check(&ipv4([0; 4], 17, &[0, 68])), Err("truncated_udp"));
    }

    #[test]
    fn arp_sender_must_be_the_vifs_or_a_probe() {
        let f = filter();
        assert_eq!(f.check(&arp([10, 0, 0, 5])), Ok(()));
        assert_eq!(f.check(&arp([0; 4])), Ok(()));
        assert_eq!(f.check(&arp([10, 0, 0, 1])), Err("arp_sender"));
        let mut odd = arp([10, 0, 0, 5]);
        odd[14 + 5] = 16; // protocol length 16
        assert_eq!(f.check(&odd), Err("arp_not_ethernet_ipv4"));
    }

    #[test]
    fn ipv6_source_own_link_local_or_unspecified() {
        let f = filter();
        assert_eq!(f.check(&ipv6("2001:db8::5", 6, &[0; 20])), Ok(()));
        assert_eq!(f.check(&ipv6(OWN_LL, 6, &[0; 20])), Ok(()));
        assert_eq!(v6(OWN_LL), eui64_link_local(MAC));
        // Another guest's link-local, or any without the vif's MAC.
        let other = "fe80::216:3eff:fe00:2";
        assert_eq!(f.check(&ipv6(other, 6, &[0; 20])), Err("ipv6_source"));
        let no_mac = IpFilter::parse("2001:db8::5").unwrap();
        assert_eq!(no_mac.check(&ipv6(OWN_LL, 6, &[0; 20])), Err("ipv6_source"));
        // One listed in `ip` is the vif's.
        let listed = IpFilter::parse(other).unwrap();
        assert_eq!(listed.check(&ipv6(other, 6, &[0; 20])), Ok(()));
        // `::`: ICMPv6 (a DAD probe for an own address) only.
        assert_eq!(
            f.check(&ipv6("::", 17, &[0; 8])),
            Err("ipv6_unspecified_source")
        );
        let dad = ipv6("::", IPPROTO_ICMPV6, &nd(ND_SOLICIT, OWN_LL));
        assert_eq!(f.check(&dad), Ok(()));
        assert_eq!(
            f.check(&ipv6("2001:db8::6", 6, &[0; 20])),
            Err("ipv6_source")
        );
    }

    #[test]
    fn neighbour_advertisements_may_claim_only_own_or_link_local_targets() {
        let f = filter();
        let na = |t| ipv6(OWN_LL, IPPROTO_ICMPV6, &nd(ND_ADVERT, t));
        assert_eq!(f.check(&na("2001:db8::5")), Ok(()));
        assert_eq!(f.check(&na(OWN_LL)), Ok(()));
        assert_eq!(f.check(&na("fe80::216:3eff:fe00:2")), Err("nd_target"));
        let dad = ipv6("::", IPPROTO_ICMPV6, &nd(ND_SOLICIT, "fe80::2"));
        assert_eq!(f.check(&dad), Err("nd_target"));
        assert_eq!(f.check(&na("2001:db8::6")), Err("nd_target"));
        // A DAD probe claims its target; a solicitation from an address asks.
        let dad = ipv6("::", IPPROTO_ICMPV6, &nd(ND_SOLICIT, "2001:db8::6"));
        assert_eq!(f.check(&dad), Err("nd_target"));
        let ask = ipv6(
            "2001:db8::5",
            IPPROTO_ICMPV6,
            &nd(ND_SOLICIT, "2001:db8::1"),
        );
        assert_eq!(f.check(&ask), Ok(()));
    }

    #[test]
    fn neighbour_discovery_behind_extension_headers_is_still_checked() {
        let f = filter();
        let mut p = vec![IPPROTO_ICMPV6, 0, 1, 4, 0, 0, 0, 0]; // hop-by-hop, 8 bytes
        p.extend(nd(ND_ADVERT, "2001:db8::6"));
        assert_eq!(f.check(&ipv6(OWN_LL, 0, &p)), Err("nd_target"));
        // A hop-by-hop header claiming more bytes than there are.
        let long = [IPPROTO_ICMPV6, 200, 0, 0, 0, 0, 0, 0];
        assert_eq!(f.check(&ipv6(OWN_LL, 0, &long)), Err("truncated_icmpv6"));
    }

    #[test]
    fn vlan_tags_do_not_hide_a_spoofed_source() {
        let f = filter();
        let inner = ipv4([10, 0, 0, 6], 6, &[0; 20]);
        let mut tagged = inner[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0, 0, 7]);
        tagged.extend_from_slice(&inner[12..]);
        assert_eq!(f.check(&tagged), Err("ipv4_source"));
    }

    #[test]
    fn other_ethertypes_pass() {
        assert_eq!(filter().check(&eth(0x88b5, &[1, 2, 3])), Ok(()));
    }

    #[test]
    fn every_truncation_is_refused_without_reading_past_the_slice() {
        let f = filter();
        let frames = [
            ipv4([10, 0, 0, 5], 6, &[0; 20]),
            ipv4([0; 4], 17, &[0, 68, 0, 67, 0, 0, 0, 0]),
            arp([10, 0, 0, 5]),
            ipv6(OWN_LL, IPPROTO_ICMPV6, &nd(ND_ADVERT, OWN_LL)),
        ];
        for full in &frames {
            assert_eq!(f.check(full), Ok(()));
            // Every cut before the last byte that matters is refused; none panics.
            for cut in 0..full.len() {
                let _ = f.check(&full[..cut]);
            }
            assert!(f.check(&full[..13]).is_err());
            assert!(f.check(&full[..20]).is_err());
        }
    }
}
