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
    aging: Duration,
    capacity: usize,
    pub counters: BridgeCounters,
}

impl Default for Bridge {
    fn default() -> Self {
        Bridge::new(Duration::from_secs(300), 4096)
    }
}

impl Bridge {
    /// A bridge whose entries expire after `aging`, holding at most `capacity` MACs.
    pub fn new(aging: Duration, capacity: usize) -> Bridge {
        Bridge {
            table: HashMap::new(),
            aging,
            capacity,
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
        if !self.table.contains_key(&mac) && self.table.len() >= self.capacity {
            let aging = self.aging;
            self.table
                .retain(|_, (_, seen)| now.duration_since(*seen) <= aging);
            if self.table.len() >= self.capacity {
                self.counters.table_full += 1;
                return;
            }
        }
        self.table.insert(mac, (port, now));
    }

    /// Forgets every MAC learned on `port` (it went away).
    pub fn forget_port(&mut self, port: PortId) {
        self.table.retain(|_, (p, _)| *p != port);
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
    fn a_mac_flood_cannot_grow_the_table_without_bound() {
        let mut br = Bridge::new(Duration::from_secs(300), 8);
        let t = Instant::now();
        for i in 0..100u8 {
            br.route(1, &frame(BCAST, [0, 0, 0, 0, 1, i]), t);
        }
        assert_eq!(br.len(), 8);
        assert_eq!(br.counters.table_full, 92);
        assert_eq!(br.route(1, &[0u8; 10], t), Route::Drop);
    }
}
