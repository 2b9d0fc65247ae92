//! One error type for every wire format in this crate.
//!
//! Each variant names the field or index that was wrong and the value seen,
//! so a log line is enough to find a misbehaving peer.

/// A structural or protocol error found while checking untrusted bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A buffer is shorter than the format it should hold.
    #[error("{what}: buffer of {got} bytes is shorter than the {need} bytes required")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// Shared ring memory is too small (or its entries too large) to hold a ring.
    #[error("shared ring: {reason} (memory {len} bytes, entry {entry} bytes)")]
    RingGeometry {
        reason: &'static str,
        len: usize,
        entry: usize,
    },
    /// The front end has no free slot for another request.
    #[error("ring full: all {size} slots hold unanswered requests")]
    RingFull { size: u32 },
    /// A peer's producer index claims more entries than the ring can hold.
    #[error("ring overflow: producer index {prod} is more than the ring allows ahead of consumer {cons} (ring size {size})")]
    Overflow { prod: u32, cons: u32, size: u32 },
    /// The back end tried to answer a request it has not consumed.
    #[error(
        "response without request: rsp_prod_pvt {rsp_prod_pvt} already equals req_cons {req_cons}"
    )]
    ResponseWithoutRequest { rsp_prod_pvt: u32, req_cons: u32 },
    /// A flags field has bits this ABI does not define.
    #[error("{field}: unknown flag bits {unknown:#x} in {value:#x}")]
    UnknownFlags {
        field: &'static str,
        value: u32,
        unknown: u32,
    },
    /// A field holds a value outside its defined set or range.
    #[error("{field}: invalid value {value} ({reason})")]
    BadValue {
        field: &'static str,
        value: i64,
        reason: &'static str,
    },
    /// A buffer described by offset and length leaves its 4 KiB page.
    #[error("{what}: offset {offset} + length {len} crosses the 4096-byte page")]
    CrossesPage {
        what: &'static str,
        offset: u32,
        len: u32,
    },
    /// A store value that should be a XenbusState is not one.
    #[error("xenbus state: {value:?} is not a decimal state number 0..=8")]
    BadState { value: String },
    /// A store path breaks xenstore's naming rules.
    #[error("store path {path:?}: {reason}")]
    BadPath { path: String, reason: String },
}
