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
    pub grant_entries: u32,
    pub event_channels: usize,
    pub grant_maps: usize,
    pub counters: Counters,
    /// An HVM guest's I/O path: exits by reason, stages, counters. (Every
    /// field is always encoded: bincode cannot skip one.)
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
    use crate::proto::{decode, encode, Reply, Response};

    fn domain(hvm: Option<crate::ioreq::HvmSnapshot>) -> DomainStatus {
        DomainStatus {
            id: 1,
            name: "d".into(),
            kind: "guest".into(),
            pid: None,
            netns: None,
            cgroup: None,
            connected: true,
            pool_frames: 1,
            hugepages: false,
            grant_entries: 1,
            event_channels: 0,
            grant_maps: 0,
            counters: Counters::default(),
            hvm,
        }
    }

    /// The status crosses hv's socket as bincode, which has no field names:
    /// every field must be encoded, present or not.
    #[test]
    fn a_status_with_and_without_an_hvm_guest_crosses_the_wire() {
        let s = SystemStatus {
            hv_pid: 7,
            domains: vec![
                domain(None),
                domain(Some(crate::ioreq::HvmSnapshot::default())),
            ],
            counters: Counters::default(),
            store_nodes: 3,
            info: BTreeMap::new(),
            ngm_tables: Vec::new(),
            grant_pins: 0,
            watches: 0,
        };
        let r: Response = Ok(Reply::Status(Box::new(s)));
        let back: Response = decode(&encode(&r).unwrap()).unwrap();
        let Ok(Reply::Status(back)) = back else {
            panic!("{back:?}")
        };
        assert_eq!(back.domains.len(), 2);
        assert!(back.domains[0].hvm.is_none() && back.domains[1].hvm.is_some());
        assert_eq!(back.store_nodes, 3);
    }
}
