//! The XenbusState machine that frontends and backends step through by
//! writing `<device>/state` (`io/xenbus.h`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A device end's state in the frontend/backend handshake. The numbers are
/// Xen's `enum xenbus_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u32)]
pub enum XenbusState {
    Unknown = 0,
    Initialising = 1,
    /// Waiting for information from the other end before initialising.
    InitWait = 2,
    /// Initialised, waiting for the other end to connect.
    Initialised = 3,
    Connected = 4,
    /// The device is being closed; the other end should close too.
    Closing = 5,
    Closed = 6,
    Reconfiguring = 7,
    Reconfigured = 8,
}

impl XenbusState {
    /// Every state, in numeric order.
    pub const ALL: [XenbusState; 9] = [
        XenbusState::Unknown,
        XenbusState::Initialising,
        XenbusState::InitWait,
        XenbusState::Initialised,
        XenbusState::Connected,
        XenbusState::Closing,
        XenbusState::Closed,
        XenbusState::Reconfiguring,
        XenbusState::Reconfigured,
    ];

    /// The state with this number, if Xen defines one.
    pub fn from_u32(n: u32) -> Option<XenbusState> {
        usize::try_from(n)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The number written to the store.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

impl From<XenbusState> for u32 {
    fn from(s: XenbusState) -> u32 {
        s.as_u32()
    }
}

impl fmt::Display for XenbusState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_xen() {
        for (i, s) in XenbusState::ALL.iter().enumerate() {
            assert_eq!(s.as_u32() as usize, i);
            assert_eq!(XenbusState::from_u32(i as u32), Some(*s));
        }
        assert_eq!(XenbusState::Connected.as_u32(), 4);
        assert_eq!(XenbusState::Closed.as_u32(), 6);
        assert_eq!(XenbusState::from_u32(9), None);
        assert_eq!(XenbusState::from_u32(u32::MAX), None);
        assert_eq!(XenbusState::InitWait.to_string(), "InitWait");
    }
}
