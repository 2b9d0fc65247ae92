//! Xen's network I/O interface (`io/netif.h`): what travels on the tx and rx
//! rings between netfront and netback.
//!
//! Menon 2006 §2 / Ram thesis ch. 2: the guest posts transmit requests naming
//! granted pages holding packet data, and posts receive requests naming empty
//! granted pages for netback to fill. A packet may span several slots
//! (`more_data`), and optional extra-info slots (GSO, multicast, hash) follow
//! the first slot of a packet when its `extra_info` flag is set.
//!
//! Transmit (frontend to backend), one packet:
//! - slot 1: [`TxRequest`]; `size` is the *whole packet* length.
//! - extra slots: [`ExtraInfo`] overlaid on the tx slot, while the previous one
//!   had [`TxFlags::EXTRA_INFO`] / [`ExtraFlags::MORE`].
//! - slots 2..N: [`TxRequest`] while the previous had [`TxFlags::MORE_DATA`];
//!   `size` is that fragment's length. Fragment 1's length is the total minus
//!   the others.
//!
//! Receive (backend to frontend): each [`RxResponse`] lands in the slot of the
//! [`RxRequest`] it consumed, `status` is the fragment length (or a negative
//! [`NetifStatus`]); a packet's size is the sum of its fragments. Extra info
//! may overlay a response slot, so netfront ignores the response id.

use crate::grant::GrantRef;
use crate::ring::{ring_size, RingEntry, PAGE_SIZE};
use crate::wire::{wire_flags, wire_view, WireInt};
use crate::Error;

/// Minimum slots per packet a backend must accept (old Linux MAX_SKB_FRAGS).
pub const XEN_NETIF_NR_SLOTS_MIN: usize = 18;
/// Largest packet a transmit request can describe (`size` is 16 bits).
pub const XEN_NETIF_MAX_TX_SIZE: u32 = 0xFFFF;
/// Slots in a one-page transmit ring (12-byte slots).
pub const NET_TX_RING_SIZE: u32 = ring_size(PAGE_SIZE, layout::tx_request::SIZEOF);
/// Slots in a one-page receive ring (8-byte slots).
pub const NET_RX_RING_SIZE: u32 = ring_size(PAGE_SIZE, layout::rx_request::SIZEOF);

/// Most multicast groups a backend's filter holds for one vif (Linux
/// netback's `XEN_NETBK_MCAST_MAX`); a frontend that wants more asks for
/// every multicast frame instead.
pub const MCAST_MAX: usize = 64;

/// Extra-info types (`XEN_NETIF_EXTRA_TYPE_*`).
pub const XEN_NETIF_EXTRA_TYPE_NONE: u8 = 0;
/// `u.gso`: segmentation offload parameters.
pub const XEN_NETIF_EXTRA_TYPE_GSO: u8 = 1;
/// `u.mcast`: add an address to the backend's multicast filter.
pub const XEN_NETIF_EXTRA_TYPE_MCAST_ADD: u8 = 2;
/// `u.mcast`: remove an address from the backend's multicast filter.
pub const XEN_NETIF_EXTRA_TYPE_MCAST_DEL: u8 = 3;
/// `u.hash`: the packet's receive-side-scaling hash.
pub const XEN_NETIF_EXTRA_TYPE_HASH: u8 = 4;
/// One past the last defined type. (Later Xen adds XDP = 5; this header has none.)
pub const XEN_NETIF_EXTRA_TYPE_MAX: u8 = 5;

/// GSO types (`XEN_NETIF_GSO_TYPE_*`).
pub const XEN_NETIF_GSO_TYPE_NONE: u8 = 0;
pub const XEN_NETIF_GSO_TYPE_TCPV4: u8 = 1;
pub const XEN_NETIF_GSO_TYPE_TCPV6: u8 = 2;
/// splitnet's extension, not in netif.h: UDP segmentation offload (each
/// segment a whole datagram, Linux's `SKB_GSO_UDP_L4`), IPv4 or IPv6. Used
/// only where both ends published `feature-splitnet-gso-udp-l4`, so a Xen
/// peer never sees it; the high bit keeps it clear of Xen's own numbering.
pub const SPLITNET_NETIF_GSO_TYPE_UDP_L4: u8 = 0x80;

/// Response statuses (`NETIF_RSP_*`).
pub const NETIF_RSP_DROPPED: i16 = -2;
pub const NETIF_RSP_ERROR: i16 = -1;
pub const NETIF_RSP_OKAY: i16 = 0;
/// No response: used for padding slots (e.g. answering an extra-info slot).
pub const NETIF_RSP_NULL: i16 = 1;

/// Hash types for the hash extra and control ring (bit numbers, `_XEN_NETIF_CTRL_HASH_TYPE_*`).
pub const XEN_NETIF_CTRL_HASH_TYPE_IPV4_BIT: u32 = 0;
pub const XEN_NETIF_CTRL_HASH_TYPE_IPV4_TCP_BIT: u32 = 1;
pub const XEN_NETIF_CTRL_HASH_TYPE_IPV6_BIT: u32 = 2;
pub const XEN_NETIF_CTRL_HASH_TYPE_IPV6_TCP_BIT: u32 = 3;
/// Hash algorithms (`XEN_NETIF_CTRL_HASH_ALGORITHM_*`).
pub const XEN_NETIF_CTRL_HASH_ALGORITHM_NONE: u8 = 0;
pub const XEN_NETIF_CTRL_HASH_ALGORITHM_TOEPLITZ: u8 = 1;

/// Byte offsets of each structure (`offsetof`), and `SIZEOF` for `sizeof`.
pub mod layout {
    /// `struct netif_tx_request`.
    pub mod tx_request {
        pub const GREF: usize = 0;
        pub const OFFSET: usize = 4;
        pub const FLAGS: usize = 6;
        pub const ID: usize = 8;
        /// The `size` field.
        pub const SIZE: usize = 10;
        pub const SIZEOF: usize = 12;
    }
    /// `struct netif_tx_response`.
    pub mod tx_response {
        pub const ID: usize = 0;
        pub const STATUS: usize = 2;
        pub const SIZEOF: usize = 4;
    }
    /// `struct netif_rx_request`.
    pub mod rx_request {
        pub const ID: usize = 0;
        pub const PAD: usize = 2;
        pub const GREF: usize = 4;
        pub const SIZEOF: usize = 8;
    }
    /// `struct netif_rx_response`.
    pub mod rx_response {
        pub const ID: usize = 0;
        pub const OFFSET: usize = 2;
        pub const FLAGS: usize = 4;
        pub const STATUS: usize = 6;
        pub const SIZEOF: usize = 8;
    }
    /// `struct netif_extra_info`.
    pub mod extra_info {
        pub const TYPE: usize = 0;
        pub const FLAGS: usize = 1;
        /// The type-specific union `u`.
        pub const U: usize = 2;
        pub const GSO_SIZE: usize = 2;
        pub const GSO_TYPE: usize = 4;
        pub const GSO_PAD: usize = 5;
        pub const GSO_FEATURES: usize = 6;
        pub const MCAST_ADDR: usize = 2;
        pub const HASH_TYPE: usize = 2;
        pub const HASH_ALGORITHM: usize = 3;
        pub const HASH_VALUE: usize = 4;
        pub const SIZEOF: usize = 8;
    }
}
use layout::{extra_info, rx_request, rx_response, tx_request, tx_response};

wire_flags! {
    /// Transmit request flags (`NETTXF_*`).
    TxFlags: u16, "netif_tx_request.flags" {
        /// Protocol checksum field is blank (checksum offload requested).
        CSUM_BLANK = 1 << 0,
        /// Packet data has been validated against its protocol checksum.
        DATA_VALIDATED = 1 << 1,
        /// Packet continues in the next request slot.
        MORE_DATA = 1 << 2,
        /// An extra-info slot follows this request.
        EXTRA_INFO = 1 << 3,
    }
}

wire_flags! {
    /// Receive response flags (`NETRXF_*`).
    RxFlags: u16, "netif_rx_response.flags" {
        /// Packet data has been validated against its protocol checksum.
        DATA_VALIDATED = 1 << 0,
        /// Protocol checksum field is blank (checksum still to be computed).
        CSUM_BLANK = 1 << 1,
        /// Packet continues in the next response slot.
        MORE_DATA = 1 << 2,
        /// An extra-info slot follows this response.
        EXTRA_INFO = 1 << 3,
        /// GSO prefix descriptor: this slot carries GSO info, not data (old frontends).
        GSO_PREFIX = 1 << 4,
    }
}

wire_flags! {
    /// Extra-info flags (`XEN_NETIF_EXTRA_FLAG_*`).
    ExtraFlags: u8, "netif_extra_info.flags" {
        /// Another extra-info slot follows.
        MORE = 1 << 0,
    }
}

/// Outcome of a request (`NETIF_RSP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum NetifStatus {
    /// Dropped (e.g. no buffer, filtered).
    Dropped = NETIF_RSP_DROPPED,
    /// Malformed or failed.
    Error = NETIF_RSP_ERROR,
    /// Done.
    Okay = NETIF_RSP_OKAY,
    /// Placeholder response for a slot that carried no data (extra info).
    Null = NETIF_RSP_NULL,
}

impl NetifStatus {
    /// Decodes a status, rejecting values the ABI does not define.
    pub fn from_i16(v: i16) -> Result<Self, Error> {
        Ok(match v {
            NETIF_RSP_DROPPED => NetifStatus::Dropped,
            NETIF_RSP_ERROR => NetifStatus::Error,
            NETIF_RSP_OKAY => NetifStatus::Okay,
            NETIF_RSP_NULL => NetifStatus::Null,
            _ => {
                return Err(Error::BadValue {
                    field: "netif response status",
                    value: v.into(),
                    reason: "not a NETIF_RSP_* code",
                })
            }
        })
    }
    /// The wire value.
    pub fn as_i16(self) -> i16 {
        self as i16
    }
}

/// Segmentation offload type (`XEN_NETIF_GSO_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum GsoType {
    None = XEN_NETIF_GSO_TYPE_NONE,
    TcpV4 = XEN_NETIF_GSO_TYPE_TCPV4,
    TcpV6 = XEN_NETIF_GSO_TYPE_TCPV6,
    UdpL4 = SPLITNET_NETIF_GSO_TYPE_UDP_L4,
}

impl GsoType {
    /// Decodes a GSO type, rejecting unknown values.
    pub fn from_u8(v: u8) -> Result<Self, Error> {
        Ok(match v {
            XEN_NETIF_GSO_TYPE_NONE => GsoType::None,
            XEN_NETIF_GSO_TYPE_TCPV4 => GsoType::TcpV4,
            XEN_NETIF_GSO_TYPE_TCPV6 => GsoType::TcpV6,
            SPLITNET_NETIF_GSO_TYPE_UDP_L4 => GsoType::UdpL4,
            _ => {
                return Err(Error::BadValue {
                    field: "netif_extra_info.u.gso.type",
                    value: v.into(),
                    reason: "not a XEN_NETIF_GSO_TYPE_* value",
                })
            }
        })
    }
}

fn check_in_page(what: &'static str, offset: u16, len: u32) -> Result<(), Error> {
    if u32::from(offset) + len > PAGE_SIZE as u32 {
        return Err(Error::CrossesPage {
            what,
            offset: offset.into(),
            len,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------- tx request

wire_view! {
    /// Checked view of a `netif_tx_request` (12 bytes).
    TxRequestView, tx_request, {
        /// Grant reference of the page holding the data.
        gref / set_gref: u32 = GREF,
        /// Offset of the data within that page.
        offset / set_offset: u16 = OFFSET,
        /// Raw `NETTXF_*` bits.
        flags / set_flags: u16 = FLAGS,
        /// Request id, echoed in the response.
        id / set_id: u16 = ID,
        /// Whole packet size (first slot) or fragment size (later slots).
        size / set_size: u16 = SIZE,
    }
}

/// A transmit request: one slot of packet data in a granted page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxRequest {
    pub gref: GrantRef,
    pub offset: u16,
    pub flags: TxFlags,
    pub id: u16,
    /// Whole packet size in the first slot, fragment size in later ones.
    pub size: u16,
}

impl TxRequest {
    pub const SIZE: usize = tx_request::SIZEOF;

    /// Parses and checks the flags.
    pub fn parse<T: AsRef<[u8]>>(view: &TxRequestView<T>) -> Result<Self, Error> {
        Ok(TxRequest {
            gref: view.gref(),
            offset: view.offset(),
            flags: TxFlags::from_bits(view.flags())?,
            id: view.id(),
            size: view.size(),
        })
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut TxRequestView<T>) {
        view.set_gref(self.gref);
        view.set_offset(self.offset);
        view.set_flags(self.flags.bits());
        view.set_id(self.id);
        view.set_size(self.size);
    }

    /// Structural check of a raw ring copy (what `parse` checks).
    pub fn validate(&self) -> Result<(), Error> {
        self.flags.check()
    }

    /// Checks that `size` bytes at `offset` stay within the granted page.
    /// Right for a single-slot packet or a later fragment; for the first slot
    /// of a multi-slot packet use [`Self::check_slot_fits_page`] with the
    /// fragment length. A zero size is left to the caller's policy.
    pub fn check_fits_page(&self) -> Result<(), Error> {
        self.check_slot_fits_page(self.size)
    }

    /// Checks that `len` bytes at `offset` stay within the granted page.
    pub fn check_slot_fits_page(&self, len: u16) -> Result<(), Error> {
        check_in_page("netif_tx_request", self.offset, len.into())
    }
}

impl RingEntry for TxRequest {
    const SIZE: usize = tx_request::SIZEOF;
    fn decode(b: &[u8]) -> Self {
        TxRequest {
            gref: u32::get(b, tx_request::GREF),
            offset: u16::get(b, tx_request::OFFSET),
            flags: TxFlags::from_bits_retain(u16::get(b, tx_request::FLAGS)),
            id: u16::get(b, tx_request::ID),
            size: u16::get(b, tx_request::SIZE),
        }
    }
    fn encode(&self, out: &mut [u8]) {
        u32::put(out, tx_request::GREF, self.gref);
        u16::put(out, tx_request::OFFSET, self.offset);
        u16::put(out, tx_request::FLAGS, self.flags.bits());
        u16::put(out, tx_request::ID, self.id);
        u16::put(out, tx_request::SIZE, self.size);
    }
}

// --------------------------------------------------------------- tx response

wire_view! {
    /// Checked view of a `netif_tx_response` (4 bytes; the slot is 12).
    TxResponseView, tx_response, {
        /// Id of the request answered.
        id / set_id: u16 = ID,
        /// `NETIF_RSP_*`.
        status / set_status: i16 = STATUS,
    }
}

/// A transmit response: the outcome of one tx slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxResponse {
    pub id: u16,
    /// Raw status; [`Self::netif_status`] decodes it.
    pub status: i16,
}

impl TxResponse {
    pub const SIZE: usize = tx_response::SIZEOF;

    /// A response for request `id`.
    pub fn new(id: u16, status: NetifStatus) -> Self {
        TxResponse {
            id,
            status: status.as_i16(),
        }
    }

    /// Parses and checks that the status is a `NETIF_RSP_*` code.
    pub fn parse<T: AsRef<[u8]>>(view: &TxResponseView<T>) -> Result<Self, Error> {
        let rsp = TxResponse {
            id: view.id(),
            status: view.status(),
        };
        rsp.validate()?;
        Ok(rsp)
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut TxResponseView<T>) {
        view.set_id(self.id);
        view.set_status(self.status);
    }

    /// Structural check of a raw ring copy.
    pub fn validate(&self) -> Result<(), Error> {
        self.netif_status().map(|_| ())
    }

    /// The decoded status.
    pub fn netif_status(&self) -> Result<NetifStatus, Error> {
        NetifStatus::from_i16(self.status)
    }
}

impl RingEntry for TxResponse {
    const SIZE: usize = tx_response::SIZEOF;
    fn decode(b: &[u8]) -> Self {
        TxResponse {
            id: u16::get(b, tx_response::ID),
            status: i16::get(b, tx_response::STATUS),
        }
    }
    fn encode(&self, out: &mut [u8]) {
        u16::put(out, tx_response::ID, self.id);
        i16::put(out, tx_response::STATUS, self.status);
    }
}

// ---------------------------------------------------------------- rx request

wire_view! {
    /// Checked view of a `netif_rx_request` (8 bytes).
    RxRequestView, rx_request, {
        /// Request id, echoed in the response.
        id / set_id: u16 = ID,
        /// Unused.
        pad / set_pad: u16 = PAD,
        /// Grant reference of the empty page to receive into.
        gref / set_gref: u32 = GREF,
    }
}

/// A receive request: an empty granted page posted by the frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxRequest {
    pub id: u16,
    pub gref: GrantRef,
    /// The buffer's offset in the page, carried in `pad` (splitnet's
    /// half-page receive buffers, `feature-rx-half-page`). Meaningful only
    /// when both ends negotiated it; without, frontends write 0 and the
    /// backend ignores it, as Xen ignores `pad`.
    pub offset: u16,
}

impl RxRequest {
    pub const SIZE: usize = rx_request::SIZEOF;

    /// Parses; every bit pattern is structurally valid (`pad` is read as
    /// the offset; the backend checks it only when it was negotiated).
    pub fn parse<T: AsRef<[u8]>>(view: &RxRequestView<T>) -> Result<Self, Error> {
        Ok(RxRequest {
            id: view.id(),
            gref: view.gref(),
            offset: view.pad(),
        })
    }

    /// Writes the request, the offset in `pad`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut RxRequestView<T>) {
        view.set_id(self.id);
        view.set_pad(self.offset);
        view.set_gref(self.gref);
    }
}

impl RingEntry for RxRequest {
    const SIZE: usize = rx_request::SIZEOF;
    fn decode(b: &[u8]) -> Self {
        RxRequest {
            id: u16::get(b, rx_request::ID),
            gref: u32::get(b, rx_request::GREF),
            offset: u16::get(b, rx_request::PAD),
        }
    }
    fn encode(&self, out: &mut [u8]) {
        u16::put(out, rx_request::ID, self.id);
        u16::put(out, rx_request::PAD, self.offset);
        u32::put(out, rx_request::GREF, self.gref);
    }
}

// --------------------------------------------------------------- rx response

wire_view! {
    /// Checked view of a `netif_rx_response` (8 bytes).
    RxResponseView, rx_response, {
        /// Id of the request answered (unreliable: see module docs).
        id / set_id: u16 = ID,
        /// Offset of the data within the page.
        offset / set_offset: u16 = OFFSET,
        /// Raw `NETRXF_*` bits.
        flags / set_flags: u16 = FLAGS,
        /// Fragment length if >= 0, else a negative `NETIF_RSP_*`.
        status / set_status: i16 = STATUS,
    }
}

/// What a receive response's status says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxStatus {
    /// This many bytes of data at `offset`.
    Data(u16),
    /// No data: the request failed or the packet was dropped.
    Failed(NetifStatus),
}

/// A receive response: one fragment of a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxResponse {
    pub id: u16,
    pub offset: u16,
    pub flags: RxFlags,
    /// Raw status; [`Self::rx_status`] decodes it.
    pub status: i16,
}

impl RxResponse {
    pub const SIZE: usize = rx_response::SIZEOF;

    /// A response carrying `len` bytes at `offset` (len must fit in the page).
    pub fn data(id: u16, offset: u16, flags: RxFlags, len: u16) -> Result<Self, Error> {
        check_in_page("netif_rx_response", offset, len.into())?;
        Ok(RxResponse {
            id,
            offset,
            flags,
            // In-page lengths are at most 4096, well inside i16.
            status: len as i16,
        })
    }

    /// A response carrying no data.
    pub fn failed(id: u16, status: NetifStatus) -> Self {
        RxResponse {
            id,
            offset: 0,
            flags: RxFlags::EMPTY,
            status: status.as_i16(),
        }
    }

    /// Parses and checks flags and status.
    pub fn parse<T: AsRef<[u8]>>(view: &RxResponseView<T>) -> Result<Self, Error> {
        let rsp = RxResponse {
            id: view.id(),
            offset: view.offset(),
            flags: RxFlags::from_bits_retain(view.flags()),
            status: view.status(),
        };
        rsp.validate()?;
        Ok(rsp)
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut RxResponseView<T>) {
        view.set_id(self.id);
        view.set_offset(self.offset);
        view.set_flags(self.flags.bits());
        view.set_status(self.status);
    }

    /// Structural check of a raw ring copy: known flags, known status.
    pub fn validate(&self) -> Result<(), Error> {
        self.flags.check()?;
        self.rx_status().map(|_| ())
    }

    /// Decodes the status: a length, or a negative `NETIF_RSP_*` code.
    pub fn rx_status(&self) -> Result<RxStatus, Error> {
        if self.status >= 0 {
            Ok(RxStatus::Data(self.status as u16))
        } else {
            NetifStatus::from_i16(self.status).map(RxStatus::Failed)
        }
    }

    /// Checks that the data (`status` bytes at `offset`) stays in the page.
    pub fn check_fits_page(&self) -> Result<(), Error> {
        match self.rx_status()? {
            RxStatus::Data(len) => check_in_page("netif_rx_response", self.offset, len.into()),
            RxStatus::Failed(_) => Ok(()),
        }
    }
}

impl RingEntry for RxResponse {
    const SIZE: usize = rx_response::SIZEOF;
    fn decode(b: &[u8]) -> Self {
        RxResponse {
            id: u16::get(b, rx_response::ID),
            offset: u16::get(b, rx_response::OFFSET),
            flags: RxFlags::from_bits_retain(u16::get(b, rx_response::FLAGS)),
            status: i16::get(b, rx_response::STATUS),
        }
    }
    fn encode(&self, out: &mut [u8]) {
        u16::put(out, rx_response::ID, self.id);
        u16::put(out, rx_response::OFFSET, self.offset);
        u16::put(out, rx_response::FLAGS, self.flags.bits());
        i16::put(out, rx_response::STATUS, self.status);
    }
}

// ---------------------------------------------------------------- extra info

wire_view! {
    /// Checked view of a `netif_extra_info` (8 bytes; in a tx slot the last 4
    /// of 12 bytes are padding).
    ExtraInfoView, extra_info, {
        /// `XEN_NETIF_EXTRA_TYPE_*`.
        extra_type / set_extra_type: u8 = TYPE,
        /// Raw `XEN_NETIF_EXTRA_FLAG_*` bits.
        flags / set_flags: u8 = FLAGS,
        /// GSO: maximum segment payload (the TCP MSS).
        gso_size / set_gso_size: u16 = GSO_SIZE,
        /// GSO: `XEN_NETIF_GSO_TYPE_*`.
        gso_type / set_gso_type: u8 = GSO_TYPE,
        /// GSO: unused.
        gso_pad / set_gso_pad: u8 = GSO_PAD,
        /// GSO: `XEN_NETIF_GSO_FEAT_*` (none defined yet).
        gso_features / set_gso_features: u16 = GSO_FEATURES,
        /// Hash: `_XEN_NETIF_CTRL_HASH_TYPE_*` bit number.
        hash_type / set_hash_type: u8 = HASH_TYPE,
        /// Hash: `XEN_NETIF_CTRL_HASH_ALGORITHM_*`.
        hash_algorithm / set_hash_algorithm: u8 = HASH_ALGORITHM,
        /// Hash: the value, least significant byte first.
        hash_value / set_hash_value: u32 = HASH_VALUE,
    }
}

impl<T: AsRef<[u8]>> ExtraInfoView<T> {
    /// Multicast: the MAC address to add or remove.
    pub fn mcast_addr(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buf.as_ref()[extra_info::MCAST_ADDR..extra_info::MCAST_ADDR + 6]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ExtraInfoView<T> {
    /// Sets the field read by [`Self::mcast_addr`].
    pub fn set_mcast_addr(&mut self, addr: [u8; 6]) {
        self.buf.as_mut()[extra_info::MCAST_ADDR..extra_info::MCAST_ADDR + 6]
            .copy_from_slice(&addr);
    }
}

/// The type-specific part of an extra-info slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// Segment the packet on the way out (tx) or it arrived as a large
    /// segment (rx). Ram thesis: TSO across the I/O channel.
    Gso {
        /// Maximum payload per segment (MSS); never zero.
        size: u16,
        /// TCPv4 or TCPv6; never `None`.
        gso_type: GsoType,
        features: u16,
    },
    /// Add a multicast address to the backend's filter.
    McastAdd { addr: [u8; 6] },
    /// Remove a multicast address from the backend's filter.
    McastDel { addr: [u8; 6] },
    /// The packet's hash for receive-side scaling.
    Hash {
        hash_type: u8,
        algorithm: u8,
        value: u32,
    },
}

impl Extra {
    /// The `XEN_NETIF_EXTRA_TYPE_*` value.
    pub fn type_code(&self) -> u8 {
        match self {
            Extra::Gso { .. } => XEN_NETIF_EXTRA_TYPE_GSO,
            Extra::McastAdd { .. } => XEN_NETIF_EXTRA_TYPE_MCAST_ADD,
            Extra::McastDel { .. } => XEN_NETIF_EXTRA_TYPE_MCAST_DEL,
            Extra::Hash { .. } => XEN_NETIF_EXTRA_TYPE_HASH,
        }
    }
}

/// One extra-info slot, following a request or response with `extra_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtraInfo {
    pub flags: ExtraFlags,
    pub extra: Extra,
}

impl ExtraInfo {
    pub const SIZE: usize = extra_info::SIZEOF;

    /// Parses: known type (not NONE), known flags; GSO must name a type and a
    /// non-zero segment size.
    pub fn parse<T: AsRef<[u8]>>(view: &ExtraInfoView<T>) -> Result<Self, Error> {
        let flags = ExtraFlags::from_bits(view.flags())?;
        let extra = match view.extra_type() {
            XEN_NETIF_EXTRA_TYPE_GSO => {
                let gso_type = GsoType::from_u8(view.gso_type())?;
                if gso_type == GsoType::None {
                    return Err(Error::BadValue {
                        field: "netif_extra_info.u.gso.type",
                        value: 0,
                        reason: "a GSO extra must name a GSO type",
                    });
                }
                if view.gso_size() == 0 {
                    return Err(Error::BadValue {
                        field: "netif_extra_info.u.gso.size",
                        value: 0,
                        reason: "GSO segment size must not be zero",
                    });
                }
                Extra::Gso {
                    size: view.gso_size(),
                    gso_type,
                    features: view.gso_features(),
                }
            }
            XEN_NETIF_EXTRA_TYPE_MCAST_ADD => Extra::McastAdd {
                addr: view.mcast_addr(),
            },
            XEN_NETIF_EXTRA_TYPE_MCAST_DEL => Extra::McastDel {
                addr: view.mcast_addr(),
            },
            XEN_NETIF_EXTRA_TYPE_HASH => Extra::Hash {
                hash_type: view.hash_type(),
                algorithm: view.hash_algorithm(),
                value: view.hash_value(),
            },
            t => {
                return Err(Error::BadValue {
                    field: "netif_extra_info.type",
                    value: t.into(),
                    reason: if t == XEN_NETIF_EXTRA_TYPE_NONE {
                        "type NONE is never valid"
                    } else {
                        "unknown XEN_NETIF_EXTRA_TYPE_*"
                    },
                })
            }
        };
        Ok(ExtraInfo { flags, extra })
    }

    /// Writes the slot, zeroing unused bytes of the union.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, view: &mut ExtraInfoView<T>) {
        view.buf.as_mut()[..extra_info::SIZEOF].fill(0);
        view.set_extra_type(self.extra.type_code());
        view.set_flags(self.flags.bits());
        match self.extra {
            Extra::Gso {
                size,
                gso_type,
                features,
            } => {
                view.set_gso_size(size);
                view.set_gso_type(gso_type as u8);
                view.set_gso_features(features);
            }
            Extra::McastAdd { addr } | Extra::McastDel { addr } => view.set_mcast_addr(addr),
            Extra::Hash {
                hash_type,
                algorithm,
                value,
            } => {
                view.set_hash_type(hash_type);
                view.set_hash_algorithm(algorithm);
                view.set_hash_value(value);
            }
        }
    }

    /// True when another extra-info slot follows.
    pub fn more(&self) -> bool {
        self.flags.contains(ExtraFlags::MORE)
    }

    /// Reads an extra-info slot that a tx ring delivered as a raw [`TxRequest`].
    pub fn from_tx_slot(slot: &TxRequest) -> Result<Self, Error> {
        let mut b = [0u8; tx_request::SIZEOF];
        slot.encode(&mut b);
        Self::parse(&ExtraInfoView::new_checked(&b[..])?)
    }

    /// The tx slot carrying this extra info, for `FrontRing::push_request`.
    pub fn to_tx_slot(&self) -> TxRequest {
        let mut b = [0u8; tx_request::SIZEOF];
        // The buffer is 12 bytes, longer than the 8 the view needs.
        if let Ok(mut v) = ExtraInfoView::new_checked(&mut b[..]) {
            self.emit(&mut v);
        }
        TxRequest::decode(&b)
    }

    /// Reads an extra-info slot that an rx ring delivered as a raw [`RxResponse`].
    pub fn from_rx_slot(slot: &RxResponse) -> Result<Self, Error> {
        let mut b = [0u8; rx_response::SIZEOF];
        slot.encode(&mut b);
        Self::parse(&ExtraInfoView::new_checked(&b[..])?)
    }

    /// The rx slot carrying this extra info, for `BackRing::push_response`.
    pub fn to_rx_slot(&self) -> RxResponse {
        let mut b = [0u8; rx_response::SIZEOF];
        if let Ok(mut v) = ExtraInfoView::new_checked(&mut b[..]) {
            self.emit(&mut v);
        }
        RxResponse::decode(&b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes() {
        assert_eq!(NET_TX_RING_SIZE, 256);
        assert_eq!(NET_RX_RING_SIZE, 256);
    }

    #[test]
    fn views_reject_short_buffers() {
        assert!(TxRequestView::new_checked(&[0u8; 11][..]).is_err());
        assert!(TxResponseView::new_checked(&[0u8; 3][..]).is_err());
        assert!(RxRequestView::new_checked(&[0u8; 7][..]).is_err());
        assert!(RxResponseView::new_checked(&[0u8; 7][..]).is_err());
        assert_eq!(
            ExtraInfoView::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::Truncated {
                what: "ExtraInfoView",
                need: 8,
                got: 7
            }
        );
        assert!(TxRequestView::new_checked(&[0u8; 12][..]).is_ok());
    }

    #[test]
    fn tx_request_layout_and_round_trip() {
        let req = TxRequest {
            gref: 0x0403_0201,
            offset: 0x0605,
            flags: TxFlags::CSUM_BLANK | TxFlags::MORE_DATA,
            id: 0x0a09,
            size: 0x0c0b,
        };
        let mut b = [0u8; 12];
        req.emit(&mut TxRequestView::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 5, 0, 9, 10, 11, 12]);
        let back = TxRequest::parse(&TxRequestView::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(back, req);
        assert_eq!(TxRequest::decode(&b), req);
        let mut c = [0u8; 12];
        req.encode(&mut c);
        assert_eq!(b, c);
    }

    #[test]
    fn unknown_flags_rejected() {
        let mut b = [0u8; 12];
        let mut v = TxRequestView::new_checked(&mut b[..]).unwrap();
        v.set_flags(0x0010);
        assert_eq!(
            TxRequest::parse(&v).unwrap_err(),
            Error::UnknownFlags {
                field: "netif_tx_request.flags",
                value: 0x10,
                unknown: 0x10
            }
        );
        // Raw ring decoding keeps the bits; validate catches them.
        assert!(TxRequest::decode(&b).validate().is_err());

        let mut b = [0u8; 8];
        let mut v = RxResponseView::new_checked(&mut b[..]).unwrap();
        v.set_flags(RxFlags::KNOWN | 0x20);
        assert!(matches!(
            RxResponse::parse(&v),
            Err(Error::UnknownFlags { unknown: 0x20, .. })
        ));
        let mut b = [0u8; 8];
        let mut v = ExtraInfoView::new_checked(&mut b[..]).unwrap();
        v.set_extra_type(XEN_NETIF_EXTRA_TYPE_MCAST_ADD);
        v.set_flags(2);
        assert!(matches!(
            ExtraInfo::parse(&v),
            Err(Error::UnknownFlags { unknown: 2, .. })
        ));
    }

    #[test]
    fn tx_page_bounds() {
        let mut req = TxRequest {
            offset: 4000,
            size: 96,
            ..Default::default()
        };
        req.check_fits_page().unwrap();
        req.size = 97;
        assert_eq!(
            req.check_fits_page().unwrap_err(),
            Error::CrossesPage {
                what: "netif_tx_request",
                offset: 4000,
                len: 97
            }
        );
        req.check_slot_fits_page(96).unwrap();
    }

    #[test]
    fn responses_round_trip_and_check_status() {
        let rsp = TxResponse::new(7, NetifStatus::Dropped);
        let mut b = [0u8; 4];
        rsp.emit(&mut TxResponseView::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, [7, 0, 0xfe, 0xff]);
        let v = TxResponseView::new_checked(&b[..]).unwrap();
        assert_eq!(TxResponse::parse(&v).unwrap(), rsp);
        b[2] = 5;
        assert!(matches!(
            TxResponse::parse(&TxResponseView::new_checked(&b[..]).unwrap()),
            Err(Error::BadValue { value: -251, .. })
        ));

        let rx = RxResponse::data(3, 100, RxFlags::DATA_VALIDATED, 1500).unwrap();
        let mut b = [0u8; 8];
        rx.emit(&mut RxResponseView::new_checked(&mut b[..]).unwrap());
        let back = RxResponse::parse(&RxResponseView::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(back, rx);
        assert_eq!(back.rx_status().unwrap(), RxStatus::Data(1500));
        assert!(RxResponse::data(3, 4000, RxFlags::EMPTY, 97).is_err());
        let f = RxResponse::failed(1, NetifStatus::Error);
        assert_eq!(f.rx_status().unwrap(), RxStatus::Failed(NetifStatus::Error));
        let bad = RxResponse { status: -3, ..f };
        assert!(bad.validate().is_err());
        let crossing = RxResponse {
            offset: 4000,
            status: 200,
            ..f
        };
        assert!(crossing.check_fits_page().is_err());
    }

    #[test]
    fn rx_request_round_trip() {
        let r = RxRequest {
            id: 9,
            gref: 77,
            offset: 0,
        };
        let mut b = [0xffu8; 8];
        r.emit(&mut RxRequestView::new_checked(&mut b[..]).unwrap());
        assert_eq!(b, [9, 0, 0, 0, 77, 0, 0, 0]);
        assert_eq!(
            RxRequest::parse(&RxRequestView::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        assert_eq!(RxRequest::decode(&b), r);
        // A half-page buffer's offset rides in pad (bytes 2..4, little-endian).
        let half = RxRequest { offset: 2048, ..r };
        let mut e = [0u8; 8];
        half.encode(&mut e);
        assert_eq!(e, [9, 0, 0, 8, 77, 0, 0, 0]);
        assert_eq!(RxRequest::decode(&e), half);
    }

    #[test]
    fn extra_info_round_trips_through_slots() {
        let extras = [
            ExtraInfo {
                flags: ExtraFlags::MORE,
                extra: Extra::Gso {
                    size: 1448,
                    gso_type: GsoType::TcpV4,
                    features: 0,
                },
            },
            ExtraInfo {
                flags: ExtraFlags::EMPTY,
                extra: Extra::McastAdd {
                    addr: [1, 0, 0x5e, 0, 0, 1],
                },
            },
            ExtraInfo {
                flags: ExtraFlags::EMPTY,
                extra: Extra::McastDel {
                    addr: [0x33, 0x33, 0, 0, 0, 1],
                },
            },
            ExtraInfo {
                flags: ExtraFlags::EMPTY,
                extra: Extra::Hash {
                    hash_type: 1,
                    algorithm: XEN_NETIF_CTRL_HASH_ALGORITHM_TOEPLITZ,
                    value: 0xdead_beef,
                },
            },
        ];
        for x in extras {
            assert_eq!(ExtraInfo::from_tx_slot(&x.to_tx_slot()).unwrap(), x);
            assert_eq!(ExtraInfo::from_rx_slot(&x.to_rx_slot()).unwrap(), x);
            let mut b = [0u8; 8];
            x.emit(&mut ExtraInfoView::new_checked(&mut b[..]).unwrap());
            assert_eq!(b[0], x.extra.type_code());
        }
        let gso = extras[0].to_tx_slot();
        let mut b = [0u8; 12];
        gso.encode(&mut b);
        assert_eq!(&b[..8], &[1, 1, 0xa8, 0x05, 1, 0, 0, 0]);
    }

    #[test]
    fn extra_info_rejects_bad_types() {
        let mut b = [0u8; 8];
        let v = ExtraInfoView::new_checked(&b[..]).unwrap();
        assert!(matches!(
            ExtraInfo::parse(&v),
            Err(Error::BadValue {
                reason: "type NONE is never valid",
                ..
            })
        ));
        b[0] = XEN_NETIF_EXTRA_TYPE_MAX;
        let v = ExtraInfoView::new_checked(&b[..]).unwrap();
        assert!(matches!(
            ExtraInfo::parse(&v),
            Err(Error::BadValue { value: 5, .. })
        ));
        let mut v = ExtraInfoView::new_checked(&mut b[..]).unwrap();
        v.set_extra_type(XEN_NETIF_EXTRA_TYPE_GSO);
        v.set_gso_size(1448);
        v.set_gso_type(3);
        assert!(ExtraInfo::parse(&v).is_err());
        v.set_gso_type(0);
        assert!(ExtraInfo::parse(&v).is_err());
        v.set_gso_type(2);
        assert!(ExtraInfo::parse(&v).is_ok());
        v.set_gso_size(0);
        assert!(ExtraInfo::parse(&v).is_err());
    }

    #[test]
    fn netif_rings_carry_netif_entries() {
        use crate::ring::{BackRing, FrontRing};
        use crate::HeapMemory;
        let m = HeapMemory::new(4096);
        let mut f = FrontRing::<_, TxRequest, TxResponse>::init(&m).unwrap();
        let mut b = BackRing::<_, TxRequest, TxResponse>::attach(&m).unwrap();
        assert_eq!(f.size(), NET_TX_RING_SIZE);
        let first = TxRequest {
            gref: 8,
            offset: 0,
            flags: TxFlags::EXTRA_INFO,
            id: 1,
            size: 60,
        };
        let gso = ExtraInfo {
            flags: ExtraFlags::EMPTY,
            extra: Extra::Gso {
                size: 1448,
                gso_type: GsoType::TcpV6,
                features: 0,
            },
        };
        f.push_request(&first).unwrap();
        f.push_request(&gso.to_tx_slot()).unwrap();
        f.push_requests_and_check_notify();
        let r = b.next_request().unwrap().unwrap();
        r.validate().unwrap();
        assert_eq!(r, first);
        let x = b.next_request().unwrap().unwrap();
        assert_eq!(ExtraInfo::from_tx_slot(&x).unwrap(), gso);
        b.push_response(&TxResponse::new(1, NetifStatus::Okay))
            .unwrap();
        b.push_response(&TxResponse::new(0, NetifStatus::Null))
            .unwrap();
        b.push_responses_and_check_notify();
        let statuses: Vec<_> = std::iter::from_fn(|| f.next_response().unwrap())
            .map(|r| r.netif_status().unwrap())
            .collect();
        assert_eq!(statuses, [NetifStatus::Okay, NetifStatus::Null]);
    }
}
