//! A frame's headers as the offload state needs them: the one walk
//! ([`crate::wire`]) and where the TCP or UDP checksum lies.

use crate::error::{to_u16, unsupported, OffloadError, Result};
use crate::wire::tcp::CSUM_OFF as TCP_CSUM_OFF;
use crate::wire::udp::CSUM_OFF as UDP_CSUM_OFF;
use crate::wire::{self, Headers, L4};

/// Finds the Ethernet, IP and TCP/UDP headers of `frame` (`frame::wire`'s
/// one walk): Ethernet II with up to two VLAN tags; IPv4 with options;
/// IPv6 with hop-by-hop, routing and destination-options extension
/// headers. Fragments are reported with an `L4::Other` so nobody offloads
/// a partial segment.
pub fn parse_headers(frame: &[u8]) -> Result<Headers> {
    parse_headers_of(frame, frame.len())
}

/// Like [`parse_headers`], for a frame of `len` bytes of which only the first
/// ones, `head`, are at hand (netback's header copy, Menon 2006 §4.1). The
/// lengths in the headers are checked against `len`; the headers themselves
/// must lie within `head`, or the frame is reported truncated.
pub fn parse_headers_of(head: &[u8], len: usize) -> Result<Headers> {
    Ok(wire::parse_net(head, len)?)
}

/// Offset of the TCP/UDP checksum field relative to `h.l4_off`.
pub(crate) fn l4_csum_offset(h: &Headers) -> Result<u16> {
    match h.l4 {
        L4::Tcp => Ok(TCP_CSUM_OFF),
        L4::Udp => Ok(UDP_CSUM_OFF),
        _ => Err(not_tcp_udp(h)),
    }
}

pub(crate) fn not_tcp_udp(h: &Headers) -> OffloadError {
    unsupported(
        "transport protocol",
        h.l4_off,
        format!(
            "{:?} on {:?} has no TCP/UDP checksum to offload",
            h.l4, h.l3
        ),
    )
}

/// `(csum_start, csum_offset)` of the TCP or UDP checksum in `frame`, the
/// values a `Csum::Partial` needs. Xen's netif `csum_blank` carries no offsets,
/// so netback finds them by parsing, as Linux `skb_checksum_setup` does.
pub fn partial_csum_for(frame: &[u8]) -> Result<(u16, u16)> {
    partial_csum_of(frame, frame.len())
}

/// [`partial_csum_for`] from a header copy `head` of a `len`-byte frame.
pub fn partial_csum_of(head: &[u8], len: usize) -> Result<(u16, u16)> {
    partial_csum_at(&parse_headers_of(head, len)?)
}

/// [`partial_csum_for`] of a frame whose headers were found to be `h`.
pub fn partial_csum_at(h: &Headers) -> Result<(u16, u16)> {
    let offset = l4_csum_offset(h)?;
    Ok((
        to_u16(h.l4_off, "transport header offset", h.l4_off)?,
        offset,
    ))
}
