//! What `splitnet status` shows of hv: domains and counters.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Named event counters (operations done, errors by reason).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counters {
    pub ops: BTreeMap<String, u64>,
    pub errors: BTreeMap<String, u64>,
}

impl Counters {
    pub fn op(&mut self, name: &str) {
        self.ops_n(name, 1);
    }
    /// Adds `n` to operation `name`; only a name's first count allocates.
    pub fn ops_n(&mut self, name: &str, n: u64) {
        bump(&mut self.ops, name, n);
    }
    pub fn error(&mut self, kind: crate::ErrorKind) {
        bump(&mut self.errors, kind.name(), 1);
    }
    /// Count of one error kind.
    pub fn errors_of(&self, kind: crate::ErrorKind) -> u64 {
        self.errors.get(kind.name()).copied().unwrap_or(0)
    }
    /// Count of one operation.
    pub fn ops_of(&self, name: &str) -> u64 {
        self.ops.get(name).copied().unwrap_or(0)
    }
}

fn bump(m: &mut BTreeMap<String, u64>, name: &str, n: u64) {
    match m.get_mut(name) {
        Some(v) => *v += n,
        None => {
            m.insert(name.to_string(), n);
        }
    }
}

/// One domain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DomainStatus {
    pub id: u16,
    pub name: String,
    pub kind: String,
    pub pid: Option<i32>,
    pub netns: Option<String>,
    pub cgroup: Option<String>,
    pub connected: bool,
    pub pool_frames: u32,
    pub hugepages: bool,
    /// What backs the pool: "thp" (the first choice), "hugetlb" (where
    /// shared memory may not take transparent huge pages) or "none"
    /// (Menon 2006 §5.3).
    pub huge_backing: String,
    pub grant_entries: u32,
    pub event_channels: usize,
    pub grant_maps: usize,
    pub counters: Counters,
    /// An HVM guest's I/O path: exits by reason, stages, counters. Always
    /// serialized: hv's protocol (bincode) is positional, so a field left
    /// out shifts every byte after it.
    #[serde(default)]
    pub hvm: Option<crate::ioreq::HvmSnapshot>,
}

/// The whole system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemStatus {
    pub hv_pid: u32,
    pub domains: Vec<DomainStatus>,
    pub counters: Counters,
    pub store_nodes: usize,
    /// Extra facts the daemon adds (topology name, wire host, ...).
    pub info: BTreeMap<String, String>,
    /// Tables of the new grant mechanism, one per (guest, driver domain).
    #[serde(default)]
    pub ngm_tables: Vec<NgmTableStatus>,
    /// Grant entries hv holds pinned for mappings.
    #[serde(default)]
    pub grant_pins: usize,
    /// Store watches registered.
    #[serde(default)]
    pub watches: u64,
    /// hv's own heap, as its allocator counts it.
    #[serde(default)]
    pub heap: HeapStatus,
}

/// What hv's allocator holds (`sys::heap_use`): live blocks against
/// freed memory it keeps, which resident memory alone cannot tell apart.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeapStatus {
    /// Bytes allocated and not freed (large mapped blocks included).
    pub in_use: u64,
    /// Bytes in the allocator's free chunks, whose pages a trim may have
    /// given back.
    pub free: u64,
}

/// One table of the new grant mechanism (Ram thesis ch. 4).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NgmTableStatus {
    pub handle: u32,
    pub guest: u16,
    pub backend: u16,
    /// Grants created (each a hypercall that validated a frame once).
    pub created: u64,
    pub revoked: u64,
    /// Revocations refused because the driver domain was using the grant.
    pub refused: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(id: u16, hvm: Option<crate::ioreq::HvmSnapshot>) -> DomainStatus {
        DomainStatus {
            id,
            name: format!("d{id}"),
            kind: "guest".into(),
            pid: Some(1),
            netns: None,
            cgroup: None,
            connected: true,
            pool_frames: 16,
            hugepages: false,
            huge_backing: "none".into(),
            grant_entries: 0,
            event_channels: 0,
            grant_maps: 0,
            counters: Counters::default(),
            hvm,
        }
    }

    /// The status reply crosses hv's protocol intact with and without an
    /// HVM guest among the domains.
    #[test]
    fn status_survives_the_protocol() {
        let st = SystemStatus {
            hv_pid: 7,
            domains: vec![
                domain(1, None),
                domain(2, Some(Default::default())),
                domain(3, None),
            ],
            counters: Counters::default(),
            store_nodes: 3,
            info: BTreeMap::new(),
            ngm_tables: Vec::new(),
            grant_pins: 4,
            watches: 5,
            heap: HeapStatus { in_use: 6, free: 7 },
        };
        let b = crate::proto::encode(&st).unwrap();
        let back: SystemStatus = crate::proto::decode(&b).unwrap();
        assert_eq!(back.domains.len(), 3);
        assert!(back.domains[1].hvm.is_some() && back.domains[2].hvm.is_none());
        assert_eq!((back.grant_pins, back.watches), (4, 5));
        assert_eq!(back.heap, HeapStatus { in_use: 6, free: 7 });
    }
}
