//! The frontend's counters, published to `<home>/nic/stats` like the other
//! emulated NICs' (serde, no allocation per frame: drops are fixed fields).

use super::ring::UsedError;
use serde::Serialize;

/// Frames dropped, by reason.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Drops {
    /// A frame from the TAP too short to be Ethernet.
    pub tx_runt: u64,
    /// A frame from the TAP that filled its buffer (maybe cut short).
    pub tx_too_long: u64,
    /// A frame from the TAP with offloads the device did not agree to.
    pub tx_offload_mismatch: u64,
    /// A used length shorter than the header or longer than the buffer.
    pub rx_bad_len: u64,
    /// A `num_buffers` of 0, or more than a frame may have or the device holds.
    pub rx_bad_num_buffers: u64,
    /// A header with offloads the driver did not agree to.
    pub rx_offload_mismatch: u64,
    /// A frame the TAP refused.
    pub rx_tap_refused: u64,
}

/// Connections ended because the backend broke the ring (Linux's
/// virtio_ring marks such a queue broken).
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Broken {
    pub used_idx_ahead: u64,
    pub used_id_out_of_range: u64,
    pub used_id_not_held: u64,
    pub used_idx_back: u64,
}

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Notifications sent to the device.
    pub kicks: u64,
    /// Notifications received from the device.
    pub calls: u64,
    /// Connections negotiated, and ended.
    pub connects: u64,
    pub disconnects: u64,
    /// Connection attempts that failed (the handshake, or no backend).
    pub connect_failures: u64,
    pub drops: Drops,
    pub broken: Broken,
}

/// Why a frame was dropped (one field of [`Drops`] each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    TxRunt,
    TxTooLong,
    TxOffloadMismatch,
    RxBadLen,
    RxBadNumBuffers,
    RxOffloadMismatch,
    RxTapRefused,
}

impl Counters {
    pub fn drop(&mut self, reason: Reason) {
        let d = &mut self.drops;
        *match reason {
            Reason::TxRunt => &mut d.tx_runt,
            Reason::TxTooLong => &mut d.tx_too_long,
            Reason::TxOffloadMismatch => &mut d.tx_offload_mismatch,
            Reason::RxBadLen => &mut d.rx_bad_len,
            Reason::RxBadNumBuffers => &mut d.rx_bad_num_buffers,
            Reason::RxOffloadMismatch => &mut d.rx_offload_mismatch,
            Reason::RxTapRefused => &mut d.rx_tap_refused,
        } += 1;
    }

    /// Counts a used-ring entry that broke the connection.
    pub fn broken(&mut self, e: &UsedError) {
        let b = &mut self.broken;
        *match e {
            UsedError::IdxAhead { .. } => &mut b.used_idx_ahead,
            UsedError::IdOutOfRange { .. } => &mut b.used_id_out_of_range,
            UsedError::NotHeld { .. } => &mut b.used_id_not_held,
            UsedError::IdxBack => &mut b.used_idx_back,
        } += 1;
    }
}
