//! Checked views over the packet headers the driver domain reads from
//! untrusted frames: Ethernet II, an 802.1Q tag, IPv4, IPv6 and its
//! extension headers, TCP and UDP (network byte order). The software offload
//! driver (Menon 2006 §3.1) and netback's header checks parse through these.
//!
//! As with the ring and netif views, `new_checked` verifies the length once
//! and the accessors then cannot read past the buffer or panic. Fields are
//! read, never trusted: callers check versions and lengths themselves.

/// Defines a read-only checked view over a fixed-size, big-endian header.
macro_rules! inet_view {
    (
        $(#[$meta:meta])*
        $view:ident, $size:expr, {
            $( $(#[$fmeta:meta])* $get:ident : $ty:ident = $off:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<'a> {
            buf: &'a [u8],
        }

        impl<'a> $view<'a> {
            /// Size of the fixed part in bytes.
            pub const SIZE: usize = $size;

            /// Wraps `buf` after checking it holds at least `SIZE` bytes.
            pub fn new_checked(buf: &'a [u8]) -> Result<Self, $crate::Error> {
                if buf.len() < Self::SIZE {
                    return Err($crate::Error::Truncated {
                        what: stringify!($view),
                        need: Self::SIZE,
                        got: buf.len(),
                    });
                }
                Ok(Self { buf })
            }

            /// The bytes from the start of this header to the end of the buffer.
            pub fn bytes(&self) -> &'a [u8] {
                self.buf
            }

            $(
                $(#[$fmeta])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    inet_view!(@get $ty, self.buf, $off)
                }
            )*
        }
    };
    (@get u8, $b:expr, $off:expr) => { $b[$off] };
    (@get u16, $b:expr, $off:expr) => { u16::from_be_bytes([$b[$off], $b[$off + 1]]) };
}

inet_view!(
    /// An Ethernet II header.
    EthernetView, 14, {
        /// The EtherType (or 0x8100 when an 802.1Q tag follows).
        ethertype: u16 = 12,
    }
);

inet_view!(
    /// An 802.1Q tag, after the Ethernet header's 0x8100.
    VlanTagView, 4, {
        /// The EtherType the tag encapsulates.
        inner_ethertype: u16 = 2,
    }
);

inet_view!(
    /// The fixed part of an IPv4 header (options may follow).
    Ipv4View, 20, {
        /// Version (high nibble) and header length in 32-bit words (low nibble).
        version_ihl: u8 = 0,
        /// Header and payload, in bytes.
        total_length: u16 = 2,
        /// Flags (high three bits) and fragment offset.
        flags_fragment: u16 = 6,
        /// The transport protocol number.
        protocol: u8 = 9,
    }
);

impl Ipv4View<'_> {
    pub fn version(&self) -> u8 {
        self.version_ihl() >> 4
    }
    /// The header's length in bytes, options included (as claimed).
    pub fn header_len(&self) -> usize {
        usize::from(self.version_ihl() & 0x0f) * 4
    }
    pub fn more_fragments(&self) -> bool {
        self.flags_fragment() & 0x2000 != 0
    }
    pub fn fragment_offset(&self) -> u16 {
        self.flags_fragment() & 0x1fff
    }
}

inet_view!(
    /// The fixed IPv6 header.
    Ipv6View, 40, {
        version_class: u8 = 0,
        /// Bytes after this header (extension headers included).
        payload_length: u16 = 4,
        /// The first extension header or the transport protocol.
        next_header: u8 = 6,
    }
);

impl Ipv6View<'_> {
    pub fn version(&self) -> u8 {
        self.version_class() >> 4
    }
}

inet_view!(
    /// The common start of IPv6 hop-by-hop, routing and destination-options
    /// extension headers.
    Ipv6ExtView, 8, {
        next_header: u8 = 0,
        /// Length in 8-byte units, not counting the first 8 bytes.
        length_units: u8 = 1,
    }
);

impl Ipv6ExtView<'_> {
    /// The extension header's length in bytes (as claimed).
    pub fn header_len(&self) -> usize {
        (usize::from(self.length_units()) + 1) * 8
    }
}

inet_view!(
    /// The fixed part of a TCP header (options may follow).
    TcpView, 20, {
        /// Data offset in 32-bit words (high nibble).
        data_offset_byte: u8 = 12,
        /// FIN, SYN, RST, PSH, ACK, URG, ECE, CWR.
        flags: u8 = 13,
    }
);

impl TcpView<'_> {
    /// The header's length in bytes, options included (as claimed).
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset_byte() >> 4) * 4
    }
}

inet_view!(
    /// A UDP header.
    UdpView, 8, {
        /// Header and payload, in bytes.
        length: u16 = 4,
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_check_their_length_and_read_network_byte_order() {
        let mut ip = [0u8; 20];
        ip[0] = 0x46;
        ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
        ip[6..8].copy_from_slice(&0x2005u16.to_be_bytes());
        ip[9] = 6;
        let v = Ipv4View::new_checked(&ip).unwrap();
        assert_eq!(
            (v.version(), v.header_len(), v.total_length()),
            (4, 24, 1500)
        );
        assert!(v.more_fragments());
        assert_eq!((v.fragment_offset(), v.protocol()), (5, 6));
        assert_eq!(
            Ipv4View::new_checked(&ip[..19]).unwrap_err(),
            crate::Error::Truncated {
                what: "Ipv4View",
                need: 20,
                got: 19
            }
        );
        let mut tcp = [0u8; 20];
        tcp[12] = 0xf0;
        assert_eq!(TcpView::new_checked(&tcp).unwrap().header_len(), 60);
        let ext = [17u8, 2, 0, 0, 0, 0, 0, 0];
        let e = Ipv6ExtView::new_checked(&ext).unwrap();
        assert_eq!((e.next_header(), e.header_len()), (17, 24));
        assert!(EthernetView::new_checked(&[0; 13]).is_err());
        assert!(UdpView::new_checked(&[]).is_err());
    }
}
