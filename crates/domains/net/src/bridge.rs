//! A MAC-learning Ethernet bridge, as the driver domain's Linux bridge does
//! for Xen (Menon 2006 §2: "the bridge demultiplexes by MAC").

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Index of a bridge port (the physical port or a vif).
pub type PortId = usize;

/// Where a frame goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// One known port.
    Port(PortId),
    /// Every port but the one it came in on.
    Flood,
    /// Nowhere: the destination lives behind the ingress port, or the frame is malformed.
    Drop,
}

/// Bridge counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BridgeCounters {
    pub forwarded: u64,
    pub flooded: u64,
    pub filtered: u64,
    pub malformed: u64,
    pub table_full: u64,
}

/// The forwarding database with aging.
pub struct Bridge {
    table: HashMap<[u8; 6], (PortId, Instant)>,
    /// Learned MACs per port, so one port cannot fill the table.
    per_port: HashMap<PortId, usize>,
    aging: Duration,
    capacity: usize,
    port_capacity: usize,
    last_sweep: Option<Instant>,
    pub counters: BridgeCounters,
}

impl Default for Bridge {
    fn default() -> Self {
        Bridge::new(Duration::from_secs(300), 4096)
    }
}

impl Bridge {
    /// A bridge whose entries expire after `aging`, holding at most
    /// `capacity` MACs, and at most a quarter of them (or 16) per port.
    pub fn new(aging: Duration, capacity: usize) -> Bridge {
        Bridge {
            table: HashMap::new(),
            per_port: HashMap::new(),
            aging,
            capacity,
            port_capacity: (capacity / 4).max(16).min(capacity),
            last_sweep: None,
            counters: BridgeCounters::default(),
        }
    }

    /// Learns the source of `frame` (arriving on `ingress` at `now`) and decides its route.
    pub fn route(&mut self, ingress: PortId, frame: &[u8], now: Instant) -> Route {
        if frame.len() < 14 {
            self.counters.malformed += 1;
            return Route::Drop;
        }
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        if src[0] & 1 == 0 {
            self.learn(src, ingress, now);
        }
        if dst[0] & 1 != 0 {
            self.counters.flooded += 1;
            return Route::Flood; // broadcast and multicast
        }
        match self.table.get(&dst) {
            Some(&(port, seen)) if now.duration_since(seen) <= self.aging => {
                if port == ingress {
                    self.counters.filtered += 1;
                    Route::Drop
                } else {
                    self.counters.forwarded += 1;
                    Route::Port(port)
                }
            }
            _ => {
                self.counters.flooded += 1;
                Route::Flood
            }
        }
    }

    fn learn(&mut self, mac: [u8; 6], port: PortId, now: Instant) {
        match self.table.get_mut(&mac) {
            Some((p, seen)) if *p == port => {
                *seen = now;
                return;
            }
            Some(_) => self.remove(&mac), // the MAC moved
            None => {}
        }
        let full = |b: &Bridge| {
            b.table.len() >= b.capacity
                || b.per_port.get(&port).copied().unwrap_or(0) >= b.port_capacity
        };
        if full(self) {
            self.sweep(now);
            if full(self) {
                self.counters.table_full += 1;
                return;
            }
        }
        self.table.insert(mac, (port, now));
        *self.per_port.entry(port).or_default() += 1;
    }

    fn remove(&mut self, mac: &[u8; 6]) {
        if let Some((p, _)) = self.table.remove(mac) {
            if let Some(n) = self.per_port.get_mut(&p) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Drops aged entries, at most once a second (a full table must not make
    /// every frame from a new source scan it).
    fn sweep(&mut self, now: Instant) {
        if self
            .last_sweep
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.last_sweep = Some(now);
        let aging = self.aging;
        let old: Vec<[u8; 6]> = self
            .table
            .iter()
            .filter(|(_, (_, seen))| now.duration_since(*seen) > aging)
            .map(|(m, _)| *m)
            .collect();
        for m in old {
            self.remove(&m);
        }
    }

    /// Forgets every MAC learned on `port` (it went away).
    pub fn forget_port(&mut self, port: PortId) {
        self.table.retain(|_, (p, _)| *p != port);
        self.per_port.remove(&port);
    }

    /// Learned MACs.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when nothing is learned.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00, 0, 0]);
        f
    }
    const A: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];
    const B: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 2];
    const BCAST: [u8; 6] = [0xff; 6];

    #[test]
    fn learns_floods_unknown_and_forwards_known() {
        let mut br = Bridge::default();
        let t = Instant::now();
        assert_eq!(
            br.route(1, &frame(B, A), t),
            Route::Flood,
            "unknown unicast floods"
        );
        assert_eq!(
            br.route(2, &frame(A, B), t),
            Route::Port(1),
            "A was learned on port 1"
        );
        assert_eq!(br.route(1, &frame(B, A), t), Route::Port(2));
        assert_eq!(br.route(1, &frame(BCAST, A), t), Route::Flood);
        let mut mcast = [0x33, 0x33, 0, 0, 0, 1];
        assert_eq!(br.route(1, &frame(mcast, A), t), Route::Flood);
        // A multicast source is never learned.
        mcast[5] = 9;
        br.route(2, &frame(A, mcast), t);
        assert_eq!(br.len(), 2);
    }

    #[test]
    fn never_sends_back_out_of_the_ingress_port() {
        let mut br = Bridge::default();
        let t = Instant::now();
        br.route(1, &frame(BCAST, A), t);
        br.route(1, &frame(BCAST, B), t);
        assert_eq!(br.route(1, &frame(B, A), t), Route::Drop);
        assert_eq!(br.counters.filtered, 1);
    }

    #[test]
    fn entries_age_out_and_move_ports() {
        let mut br = Bridge::new(Duration::from_secs(10), 16);
        let t = Instant::now();
        br.route(1, &frame(BCAST, A), t);
        assert_eq!(
            br.route(2, &frame(A, B), t + Duration::from_secs(5)),
            Route::Port(1)
        );
        assert_eq!(
            br.route(2, &frame(A, B), t + Duration::from_secs(11)),
            Route::Flood
        );
        // A moves to port 3.
        br.route(3, &frame(BCAST, A), t + Duration::from_secs(12));
        assert_eq!(
            br.route(2, &frame(A, B), t + Duration::from_secs(12)),
            Route::Port(3)
        );
        br.forget_port(3);
        assert_eq!(
            br.route(2, &frame(A, B), t + Duration::from_secs(12)),
            Route::Flood
        );
    }

    #[test]
    fn a_mac_flood_from_one_port_cannot_crowd_out_the_others() {
        let mut br = Bridge::new(Duration::from_secs(300), 64);
        let t = Instant::now();
        for i in 0..100u8 {
            br.route(1, &frame(BCAST, [0, 0, 0, 0, 1, i]), t);
        }
        assert_eq!(br.len(), 16, "port 1 may hold a quarter of the table");
        assert_eq!(br.counters.table_full, 84);
        // Another port still learns.
        br.route(2, &frame(BCAST, B), t);
        assert_eq!(br.route(1, &frame(B, A), t), Route::Port(2));
        // Entries age out and make room again.
        let later = t + Duration::from_secs(301);
        br.route(1, &frame(BCAST, A), later);
        assert_eq!(br.route(2, &frame(A, B), later), Route::Port(1));
        assert_eq!(br.route(1, &[0u8; 10], t), Route::Drop);
    }
}
