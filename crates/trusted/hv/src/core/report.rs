//! What hv reports about itself: the `status` of every domain and counter,
//! and the `trace` snapshot of every event counter.

use super::Hypervisor;
use crate::status::{DomainStatus, HeapStatus, NgmTableStatus, SystemStatus};
use crate::trace::{self, DomainTrace, TraceSnapshot};

impl Hypervisor {
    /// A snapshot of every domain and counter.
    pub fn status(&self) -> SystemStatus {
        let mut hvm = self.hvm.snapshots();
        let st = self.lock();
        let domains = st
            .doms
            .0
            .iter()
            .map(|(id, d)| DomainStatus {
                id: *id,
                name: d.name.clone(),
                kind: d.kind.clone(),
                pid: d.pid,
                netns: d.netns.clone(),
                cgroup: d.cgroup.clone(),
                connected: d.said_hello,
                pool_frames: d.mem.spec.pool_frames,
                hugepages: d.mem.spec.hugepages,
                huge_backing: d.mem.backing.as_str().into(),
                grant_entries: d.mem.grant_entries(),
                event_channels: d.ports.len(),
                grant_maps: d.maps.len(),
                counters: d.counters.clone(),
                hvm: hvm.remove(id),
            })
            .collect();
        SystemStatus {
            hv_pid: std::process::id(),
            domains,
            counters: st.counters.clone(),
            store_nodes: st.store.counters().nodes.get() as usize,
            grant_pins: st.pins.len(),
            watches: st.store.counters().watches.get(),
            heap: heap(),
            info: st.info.clone(),
            ngm_tables: st
                .ngm
                .values()
                .map(|t| NgmTableStatus {
                    handle: t.handle,
                    guest: t.guest,
                    backend: t.backend,
                    created: t.created,
                    revoked: t.revoked,
                    refused: t.refused,
                })
                .collect(),
        }
    }

    /// Every trace counter: hv's for the toolstack and for each domain, and
    /// what each domain recorded in its trace area.
    pub fn trace(&self) -> TraceSnapshot {
        let mut hvm = self.hvm.snapshots();
        let st = self.lock();
        let domains = st
            .doms
            .0
            .iter()
            .map(|(id, d)| {
                let mut hv = d.trace.snapshot();
                // An HVM guest's exits per reason, and per stage (`hvm/relay.rs`).
                if let Some(s) = hvm.remove(id) {
                    crate::hvm::trace_rows(&s, &mut hv);
                }
                DomainTrace {
                    id: *id,
                    name: d.name.clone(),
                    kind: d.kind.clone(),
                    hv,
                    domain: trace::read_area(&d.mem.trace_map),
                }
            })
            .collect();
        TraceSnapshot {
            tsc: trace::now(),
            uptime_ns: u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            toolstack: self.toolstack_trace.snapshot(),
            domains,
        }
    }
}

/// hv's heap as its allocator counts it.
fn heap() -> HeapStatus {
    let h = sys::heap_use();
    HeapStatus {
        in_use: h.in_use + h.mapped,
        free: h.free,
    }
}
