//! The one walk over a frame's headers: Ethernet, VLAN tags, IPv4 or IPv6
//! with its extension headers, TCP or UDP. Every layer of the path takes
//! its offsets from it, so no two layers can read one frame differently.

use super::{
    arp, from, ipv4, ipv6, tcp, udp, within, Error, Link, Result, ETHERTYPE_ARP, ETHERTYPE_IPV4,
    ETHERTYPE_IPV6, PROTO_FRAGMENT, PROTO_TCP, PROTO_UDP,
};

/// The network layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3 {
    Ipv4,
    Ipv6,
    /// Anything else, by EtherType (ARP; a TPID when tagged more deeply
    /// than two tags, [`Link::too_deep`]).
    Other(u16),
}

/// The transport layer of an IP packet, as far as offloads are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
    /// Some other protocol, or a transport header that must not be
    /// touched: an IPv4 fragment carries its real protocol number here
    /// (even 6 or 17), an IPv6 fragment header shows up as `Other(44)`.
    Other(u8),
    /// Not an IP packet, so no transport layer.
    Absent,
}

/// Where the network and transport headers of a frame are. All offsets
/// are from the frame start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    pub l3: L3,
    pub l3_off: usize,
    pub l4: L4,
    /// Start of the transport header (after any IPv6 extension headers); for
    /// fragments the start of the fragment header or the IPv4 payload.
    pub l4_off: usize,
    /// First byte after the TCP/UDP header; `l4_off` for other protocols.
    pub payload_off: usize,
    /// End of what the IP (and UDP) length fields cover. Bytes from here to
    /// the end of the frame are link-layer padding and excluded from checksums.
    pub end: usize,
}

/// A frame's headers: its link layer and where the rest is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub link: Link,
    pub net: Headers,
}

/// Walks the headers of `frame` ([`parse_of`] with the whole frame at hand).
pub fn parse(frame: &[u8]) -> Result<Frame> {
    parse_of(frame, frame.len())
}

/// Walks the headers of a frame of `len` bytes of which only the first ones,
/// `head`, are at hand (netback's header copy, Menon 2006 §4.1). The lengths
/// in the headers are checked against `len`; the headers up to the end of
/// TCP's or UDP's must lie within `head`, or the frame is reported
/// truncated. Fragments are reported with an `L4::Other`, so that nobody
/// offloads or inspects a partial segment as a whole one.
pub fn parse_of(head: &[u8], len: usize) -> Result<Frame> {
    let link = Link::parse(head)?;
    let net = net_of(head, len, &link)?;
    Ok(Frame { link, net })
}

/// [`parse_of`]'s offsets alone, for the hot path that needs no more (the
/// offload driver): the same walk, without handing the link layer back.
#[inline]
pub fn parse_net(head: &[u8], len: usize) -> Result<Headers> {
    net_of(head, len, &Link::parse(head)?)
}

/// The walk past the link layer.
#[inline]
fn net_of(head: &[u8], len: usize, link: &Link) -> Result<Headers> {
    let off = link.l3_off;
    match link.ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(head, len, off),
        ETHERTYPE_IPV6 => parse_ipv6(head, len, off),
        other => Ok(Headers {
            l3: L3::Other(other),
            l3_off: off,
            l4: L4::Absent,
            l4_off: off,
            payload_off: off,
            end: len,
        }),
    }
}

#[inline]
fn parse_ipv4(frame: &[u8], len: usize, off: usize) -> Result<Headers> {
    let p = ipv4::Packet::new_checked(from(frame, off)).map_err(|e| e.shifted(off))?;
    let (header_len, total_len) = ipv4::check(&p).map_err(|e| e.shifted(off))?;
    within(len, off, total_len, "IPv4 packet")?;
    let end = off + total_len;
    let l4_off = off + header_len;
    let (l4, payload_off, end) = if p.is_fragment() {
        (L4::Other(p.protocol()), l4_off, end)
    } else {
        parse_l4(&frame[..end.min(frame.len())], end, p.protocol(), l4_off)?
    };
    Ok(Headers {
        l3: L3::Ipv4,
        l3_off: off,
        l4,
        l4_off,
        payload_off,
        end,
    })
}

#[inline]
fn parse_ipv6(frame: &[u8], len: usize, off: usize) -> Result<Headers> {
    let p = ipv6::Packet::new_checked(from(frame, off)).map_err(|e| e.shifted(off))?;
    ipv6::check(&p).map_err(|e| e.shifted(off))?;
    let payload_len = usize::from(p.payload_len());
    within(len, off, ipv6::HLEN + payload_len, "IPv6 packet")?;
    let end = off + ipv6::HLEN + payload_len;
    let packet = &frame[..end.min(frame.len())];
    let (next, l4_off) = ipv6::walk_ext(packet, p.next_header(), off + ipv6::HLEN, true)?;
    let (l4, payload_off, end) = if next == PROTO_FRAGMENT {
        (L4::Other(PROTO_FRAGMENT), l4_off, end)
    } else {
        parse_l4(packet, end, next, l4_off)?
    };
    Ok(Headers {
        l3: L3::Ipv6,
        l3_off: off,
        l4,
        l4_off,
        payload_off,
        end,
    })
}

/// The IP packet ends at `end`; `packet` holds its bytes up to there, or
/// fewer (a header copy). Returns (l4, payload_off, end).
#[inline]
fn parse_l4(packet: &[u8], end: usize, proto: u8, l4_off: usize) -> Result<(L4, usize, usize)> {
    let at = |e: Error| e.shifted(l4_off);
    match proto {
        PROTO_TCP => {
            let p = tcp::Packet::new_checked(from(packet, l4_off)).map_err(at)?;
            let header_len = tcp::check(&p).map_err(at)?;
            Ok((L4::Tcp, l4_off + header_len, end))
        }
        PROTO_UDP => {
            let p = udp::Packet::new_checked(from(packet, l4_off)).map_err(at)?;
            let ulen = udp::check(&p).map_err(at)?;
            within(end, l4_off, ulen, "UDP datagram")?;
            Ok((L4::Udp, l4_off + udp::HLEN, l4_off + ulen))
        }
        other => Ok((L4::Other(other), l4_off, end)),
    }
}

impl Frame {
    /// The IPv4 header in `head` (the bytes parsed), if the frame is IPv4.
    pub fn ipv4<'a>(&self, head: &'a [u8]) -> Option<ipv4::Packet<&'a [u8]>> {
        view_at(
            self.net.l3 == L3::Ipv4,
            head,
            self.net.l3_off,
            ipv4::Packet::new_checked,
        )
    }

    /// The IPv6 header in `head`, if the frame is IPv6.
    pub fn ipv6<'a>(&self, head: &'a [u8]) -> Option<ipv6::Packet<&'a [u8]>> {
        view_at(
            self.net.l3 == L3::Ipv6,
            head,
            self.net.l3_off,
            ipv6::Packet::new_checked,
        )
    }

    /// The ARP packet in `head`, if the frame is ARP.
    pub fn arp<'a>(&self, head: &'a [u8]) -> Option<arp::Packet<&'a [u8]>> {
        let is = self.net.l3 == L3::Other(ETHERTYPE_ARP);
        view_at(is, head, self.net.l3_off, arp::Packet::new_checked)
    }

    /// The TCP header in `head`, if the frame is a TCP segment.
    pub fn tcp<'a>(&self, head: &'a [u8]) -> Option<tcp::Packet<&'a [u8]>> {
        view_at(
            self.net.l4 == L4::Tcp,
            head,
            self.net.l4_off,
            tcp::Packet::new_checked,
        )
    }

    /// The UDP header in `head`, if the frame is a UDP datagram.
    pub fn udp<'a>(&self, head: &'a [u8]) -> Option<udp::Packet<&'a [u8]>> {
        view_at(
            self.net.l4 == L4::Udp,
            head,
            self.net.l4_off,
            udp::Packet::new_checked,
        )
    }
}

/// The view `new` makes of `head` from `off`, if `is` and it fits.
fn view_at<'a, V>(
    is: bool,
    head: &'a [u8],
    off: usize,
    new: fn(&'a [u8]) -> Result<V>,
) -> Option<V> {
    is.then(|| new(from(head, off)).ok()).flatten()
}

#[cfg(test)]
mod tests;
