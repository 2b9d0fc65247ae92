//! Per-vif counters, named for what an operator asks, as Firecracker's are.
//!
//! Counting never allocates on the data path: a reason is a `&'static str`,
//! and each distinct reason takes one slot the first time it is seen.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Counts by reason (drops, refusals, grant operations).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasonCounts(Vec<(Cow<'static, str>, u64)>);

impl ReasonCounts {
    /// Adds `n` to `reason`.
    pub fn add(&mut self, reason: &'static str, n: u64) {
        match self.0.iter_mut().find(|(k, _)| k == reason) {
            Some((_, v)) => *v += n,
            None => self.0.push((Cow::Borrowed(reason), n)),
        }
    }

    /// The count of `reason` (0 if never seen).
    pub fn get(&self, reason: &str) -> u64 {
        self.0
            .iter()
            .find(|(k, _)| k == reason)
            .map_or(0, |(_, v)| *v)
    }

    /// The sum over every reason.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, v)| v).sum()
    }

    /// Every reason and its count, in alphabetical order.
    pub fn sorted(&self) -> BTreeMap<&str, u64> {
        self.0.iter().map(|(k, v)| (k.as_ref(), *v)).collect()
    }
}

impl Serialize for ReasonCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.sorted().serialize(s)
    }
}

impl<'de> Deserialize<'de> for ReasonCounts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let m = BTreeMap::<String, u64>::deserialize(d)?;
        Ok(ReasonCounts(
            m.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect(),
        ))
    }
}

/// What one end of a virtual NIC has done. TX is guest → network, RX is
/// network → guest, from either end's point of view.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct VifCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets dropped, by reason.
    pub drops: ReasonCounts,
    /// Requests refused as malformed or hostile, by reason.
    pub rejected: ReasonCounts,
    pub notifications_sent: u64,
    pub notifications_received: u64,
    /// Notifications that found no work ([`crate::storm`]).
    pub spurious_events: u64,
    /// Times the peer's notifications were shut out for a delay after a
    /// run of spurious ones ([`crate::storm`]).
    pub event_throttles: u64,
    /// Grant operations by kind (copy, map, unmap, transfer, grant, revoke).
    pub grant_ops: ReasonCounts,
    /// Ring batches processed (one wake-up may handle many packets).
    pub batches: u64,
    /// Bytes of TX frames netback copied whole into its own memory before
    /// forwarding them; frames sent from the guest's pages (TX gather, the
    /// Xen 2.0 map) count only in the header copy, which is not here.
    pub tx_copied_bytes: u64,
    /// Frames dropped for a source address not the vif's (`ip=`).
    pub spoofed: u64,
    /// Frames dropped for being longer than the vif's MTU allows.
    pub oversize: u64,
    /// Times the vif had to wait for transmit credit (`rate=`).
    pub credit_waits: u64,
    /// Multicast groups refused (the filter was full, or not a group).
    pub mcast_refused: u64,
    /// Large receive offload: frames folded into a frame held before them.
    pub lro_merged: u64,
    /// Large receive offload: frames the coalescer put out.
    pub lro_flushed: u64,
}

impl VifCounters {
    pub fn drop(&mut self, reason: &'static str) {
        self.drops.add(reason, 1);
    }
    pub fn reject(&mut self, reason: &'static str) {
        self.rejected.add(reason, 1);
    }
    pub fn grant(&mut self, kind: &'static str, n: u64) {
        self.grant_ops.add(kind, n);
    }
    /// Total refused requests.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_round_trips_as_a_json_map() {
        let mut c = VifCounters::default();
        c.drop("b");
        c.drop("a");
        c.drop("b");
        c.reject("x");
        c.grant("copy", 5);
        assert_eq!(c.drops.get("b"), 2);
        assert_eq!(c.drops.get("none"), 0);
        assert_eq!(c.rejected_total(), 1);
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["drops"], serde_json::json!({"a": 1, "b": 2}));
        let back: VifCounters = serde_json::from_value(j).unwrap();
        assert_eq!(back.drops.sorted(), c.drops.sorted());
        assert_eq!(back.grant_ops.get("copy"), 5);
    }
}
