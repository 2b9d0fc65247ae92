//! Per-vif counters, named for what an operator asks (STYLE.md, Firecracker).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What one end of a virtual NIC has done. TX is guest → network, RX is
/// network → guest, from either end's point of view.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct VifCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets dropped, by reason.
    pub drops: BTreeMap<String, u64>,
    /// Requests refused as malformed or hostile, by reason.
    pub rejected: BTreeMap<String, u64>,
    pub notifications_sent: u64,
    pub notifications_received: u64,
    /// Grant operations by kind (copy, map, unmap, transfer, grant, revoke).
    pub grant_ops: BTreeMap<String, u64>,
    /// Ring batches processed (one wake-up may handle many packets).
    pub batches: u64,
}

impl VifCounters {
    pub fn drop(&mut self, reason: &str) {
        *self.drops.entry(reason.to_string()).or_default() += 1;
    }
    pub fn reject(&mut self, reason: &str) {
        *self.rejected.entry(reason.to_string()).or_default() += 1;
    }
    pub fn grant(&mut self, kind: &str, n: u64) {
        *self.grant_ops.entry(kind.to_string()).or_default() += n;
    }
    /// Total refused requests.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}
