//! A MAC-learning Ethernet bridge, as the driver domain's Linux bridge does
//! for Xen (Menon 2006 §2: "the bridge demultiplexes by MAC").
//!
//! One forwarding database serves every bridge of the driver domain and
//! every VLAN on them: it is keyed by (segment, MAC), a segment being one
//! VLAN of one bridge ([`Segment`]), so a MAC learned in one segment is
//! unknown in every other and a lookup costs the same however many bridges
//! there are. The key is packed into one 64-bit word (MAC, VLAN ID, bridge),
//! which SipHash takes in one write: a lookup costs what a MAC-only one did.
//! The driver floods within the segment only.
//!
//! [`Bridge::forward`] is the switch's forwarding stage: it hands each
//! frame the ingress stage admitted on to the egress stage with the bridge
//! ports it goes to.

use super::egress::Stage;
use super::vlan::Ingress;
pub use super::vlan::{BridgeId, Segment};
use super::PortId;
use super::{Egress, Member};
use frame::wire::eth;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The bridge ports and vifs join unless they name another.
pub const DEFAULT_BRIDGE: BridgeId = 0;
/// Most bridges one driver domain keeps (names are never forgotten): the
/// bridge takes the key's top 4 bits.
pub const MAX_BRIDGES: usize = 16;

/// A forwarding database key: the MAC in bits 0..48, the VLAN ID in 48..60,
/// the bridge in 60..64.
type Key = u64;

fn key(seg: Segment, mac: [u8; 6]) -> Key {
    let mut k = [0u8; 8];
    k[..6].copy_from_slice(&mac);
    u64::from_le_bytes(k) | u64::from(seg.vlan & 0x0fff) << 48 | u64::from(seg.bridge & 0xf) << 60
}

/// The bridge of key `k`.
fn bridge_of(k: Key) -> usize {
    (k >> 60) as usize
}

/// Most bridge ports one frame goes to.
const MAX_TARGETS: usize = 64;

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
    /// Frames from an uplink dropped for their VLAN tag (tagged on an
    /// access uplink, reserved VID 4095, a tag that could not be added or
    /// removed). A vif's count is its own (`vlan_tagged` in its drops).
    pub vlan_dropped: u64,
}

/// The forwarding database with aging.
pub struct Bridge {
    table: HashMap<Key, (PortId, Instant)>,
    /// Learned MACs per port, so one port cannot fill the table.
    per_port: HashMap<PortId, usize>,
    /// The bridges' names, by [`BridgeId`].
    names: Vec<String>,
    /// Learned MACs per bridge, by [`BridgeId`].
    macs: Vec<usize>,
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
            names: vec![abi::xenbus::DEFAULT_BRIDGE.to_string()],
            macs: vec![0],
            aging,
            capacity,
            port_capacity: (capacity / 4).max(16).min(capacity),
            last_sweep: None,
            counters: BridgeCounters::default(),
        }
    }

    /// The bridge called `name`, added if new; `None` when there are
    /// [`MAX_BRIDGES`] already.
    pub fn bridge_id(&mut self, name: &str) -> Option<BridgeId> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return BridgeId::try_from(i).ok();
        }
        if self.names.len() >= MAX_BRIDGES {
            return None;
        }
        self.names.push(name.to_string());
        self.macs.push(0);
        BridgeId::try_from(self.names.len() - 1).ok()
    }

    /// The name of bridge `id`.
    pub fn name(&self, id: BridgeId) -> &str {
        self.names.get(usize::from(id)).map_or("?", |n| n.as_str())
    }

    /// Every bridge known, with its name and its learned MACs.
    pub fn bridges(&self) -> impl Iterator<Item = (BridgeId, &str, usize)> + '_ {
        self.names
            .iter()
            .zip(&self.macs)
            .enumerate()
            .map(|(i, (n, m))| (i as BridgeId, n.as_str(), *m))
    }

    /// Learns the source of frame `k` of the batch (`head` its first
    /// bytes, netback's header copy; `inr` as `ingress` classified it,
    /// arriving at `now`) and hands it on to the egress stage with the
    /// bridge ports it goes to, never its ingress: a fixed array, nothing
    /// allocated. Unknown and broadcast destinations flood the segment
    /// only; multicast reaches only the vifs that asked for it.
    pub fn forward<E: Egress>(
        &mut self,
        ingress: PortId,
        k: usize,
        head: &[u8],
        inr: Ingress,
        now: Instant,
        eg: &mut Stage<'_, '_, E>,
    ) {
        let mut targets = [0 as PortId; MAX_TARGETS];
        let mut n = 0;
        match self.route(ingress, inr.seg, head, now) {
            Route::Drop => {}
            Route::Port(p) if p != ingress => {
                targets[0] = p;
                n = 1;
            }
            Route::Port(_) => {}
            Route::Flood => {
                let dst = eth::Packet::new_unchecked(head).dst();
                let multicast = eth::is_group(&dst);
                let wanted = |m: &Member<'_>| !multicast || m.wants(&dst);
                for m in eg.out.members(inr.seg).filter(wanted) {
                    if m.port != ingress && n < targets.len() {
                        targets[n] = m.port;
                        n += 1;
                    }
                }
            }
        }
        eg.send(k, inr, &targets[..n]);
    }

    /// Learns the source of `frame` (arriving on `ingress` at `now`, in
    /// segment `seg`) and decides its route within the segment.
    pub fn route(&mut self, ingress: PortId, seg: Segment, frame: &[u8], now: Instant) -> Route {
        let Ok(e) = eth::Packet::new_checked(frame) else {
            self.counters.malformed += 1;
            return Route::Drop;
        };
        let (dst, src) = (e.dst(), e.src());
        if !eth::is_group(&src) {
            self.learn(key(seg, src), ingress, now);
        }
        if eth::is_group(&dst) {
            self.counters.flooded += 1;
            return Route::Flood; // broadcast and multicast
        }
        match self.table.get(&key(seg, dst)) {
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

    fn learn(&mut self, mac: Key, port: PortId, now: Instant) {
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
        if let Some(n) = self.macs.get_mut(bridge_of(mac)) {
            *n += 1;
        }
    }

    fn remove(&mut self, mac: &Key) {
        if let Some((p, _)) = self.table.remove(mac) {
            if let Some(n) = self.per_port.get_mut(&p) {
                *n = n.saturating_sub(1);
            }
            if let Some(n) = self.macs.get_mut(bridge_of(*mac)) {
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
        let old: Vec<Key> = self
            .table
            .iter()
            .filter(|(_, (_, seen))| now.duration_since(*seen) > aging)
            .map(|(m, _)| *m)
            .collect();
        for m in old {
            self.remove(&m);
        }
    }

    /// Forgets every MAC learned on `port` (it went away, or moved to
    /// another bridge or VLAN).
    pub fn forget_port(&mut self, port: PortId) {
        let macs = &mut self.macs;
        self.table.retain(|k, (p, _)| {
            let keep = *p != port;
            if !keep {
                if let Some(n) = macs.get_mut(bridge_of(*k)) {
                    *n = n.saturating_sub(1);
                }
            }
            keep
        });
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
    const S0: Segment = Segment { bridge: 0, vlan: 0 };

    #[test]
    fn learns_floods_unknown_and_forwards_known() {
        let mut br = Bridge::default();
        let t = Instant::now();
        assert_eq!(
            br.route(1, S0, &frame(B, A), t),
            Route::Flood,
            "unknown unicast floods"
        );
        assert_eq!(
            br.route(2, S0, &frame(A, B), t),
            Route::Port(1),
            "A was learned on port 1"
        );
        assert_eq!(br.route(1, S0, &frame(B, A), t), Route::Port(2));
        assert_eq!(br.route(1, S0, &frame(BCAST, A), t), Route::Flood);
        let mut mcast = [0x33, 0x33, 0, 0, 0, 1];
        assert_eq!(br.route(1, S0, &frame(mcast, A), t), Route::Flood);
        // A multicast source is never learned.
        mcast[5] = 9;
        br.route(2, S0, &frame(A, mcast), t);
        assert_eq!(br.len(), 2);
    }

    #[test]
    fn never_sends_back_out_of_the_ingress_port() {
        let mut br = Bridge::default();
        let t = Instant::now();
        br.route(1, S0, &frame(BCAST, A), t);
        br.route(1, S0, &frame(BCAST, B), t);
        assert_eq!(br.route(1, S0, &frame(B, A), t), Route::Drop);
        assert_eq!(br.counters.filtered, 1);
    }

    #[test]
    fn entries_age_out_and_move_ports() {
        let mut br = Bridge::new(Duration::from_secs(10), 16);
        let t = Instant::now();
        br.route(1, S0, &frame(BCAST, A), t);
        assert_eq!(
            br.route(2, S0, &frame(A, B), t + Duration::from_secs(5)),
            Route::Port(1)
        );
        assert_eq!(
            br.route(2, S0, &frame(A, B), t + Duration::from_secs(11)),
            Route::Flood
        );
        // A moves to port 3.
        br.route(3, S0, &frame(BCAST, A), t + Duration::from_secs(12));
        assert_eq!(
            br.route(2, S0, &frame(A, B), t + Duration::from_secs(12)),
            Route::Port(3)
        );
        br.forget_port(3);
        assert_eq!(
            br.route(2, S0, &frame(A, B), t + Duration::from_secs(12)),
            Route::Flood
        );
    }

    #[test]
    fn a_mac_flood_from_one_port_cannot_crowd_out_the_others() {
        let mut br = Bridge::new(Duration::from_secs(300), 64);
        let t = Instant::now();
        for i in 0..100u8 {
            br.route(1, S0, &frame(BCAST, [0, 0, 0, 0, 1, i]), t);
        }
        assert_eq!(br.len(), 16, "port 1 may hold a quarter of the table");
        assert_eq!(br.counters.table_full, 84);
        // Another port still learns.
        br.route(2, S0, &frame(BCAST, B), t);
        assert_eq!(br.route(1, S0, &frame(B, A), t), Route::Port(2));
        // Entries age out and make room again.
        let later = t + Duration::from_secs(301);
        br.route(1, S0, &frame(BCAST, A), later);
        assert_eq!(br.route(2, S0, &frame(A, B), later), Route::Port(1));
        assert_eq!(br.route(1, S0, &[0u8; 10], t), Route::Drop);
    }

    #[test]
    fn each_segment_learns_apart_and_nothing_leaks_between_them() {
        let mut br = Bridge::default();
        let t = Instant::now();
        let xenbr1 = br.bridge_id("xenbr1").unwrap();
        let v10 = Segment {
            bridge: 0,
            vlan: 10,
        };
        let b1 = Segment {
            bridge: xenbr1,
            vlan: 0,
        };
        // A is learned on port 1 in the untagged segment of xenbr0 only.
        br.route(1, S0, &frame(BCAST, A), t);
        assert_eq!(br.route(2, S0, &frame(A, B), t), Route::Port(1));
        assert_eq!(br.route(3, v10, &frame(A, B), t), Route::Flood);
        assert_eq!(br.route(4, b1, &frame(A, B), t), Route::Flood);
        // The same MAC may live in another segment behind another port.
        br.route(5, b1, &frame(BCAST, A), t);
        assert_eq!(br.route(4, b1, &frame(A, B), t), Route::Port(5));
        assert_eq!(br.route(2, S0, &frame(A, B), t), Route::Port(1));
        // B was learned on ports 2, 3 and 4, each in its own segment.
        assert_eq!(br.route(1, S0, &frame(B, A), t), Route::Port(2));
        assert_eq!(br.route(9, v10, &frame(B, A), t), Route::Port(3));
        assert_eq!(br.route(5, b1, &frame(B, A), t), Route::Port(4));
        let macs: Vec<_> = br.bridges().collect();
        assert_eq!(macs, [(0, "xenbr0", 4), (xenbr1, "xenbr1", 2)]);
        br.forget_port(5);
        assert_eq!(br.bridges().nth(1), Some((xenbr1, "xenbr1", 1)));
        assert_eq!(br.route(4, b1, &frame(A, B), t), Route::Flood);
    }

    #[test]
    fn per_port_limits_hold_across_segments() {
        let mut br = Bridge::new(Duration::from_secs(300), 64);
        let t = Instant::now();
        for i in 0..100u8 {
            let seg = Segment {
                bridge: 0,
                vlan: u16::from(i % 5),
            };
            br.route(1, seg, &frame(BCAST, [0, 0, 0, 0, 1, i]), t);
        }
        assert_eq!(br.len(), 16, "port 1 holds a quarter of the table in all");
        assert_eq!(br.counters.table_full, 84);
    }

    #[test]
    fn bridges_are_named_once_and_bounded() {
        let mut br = Bridge::default();
        assert_eq!(
            br.bridge_id(abi::xenbus::DEFAULT_BRIDGE),
            Some(DEFAULT_BRIDGE)
        );
        let a = br.bridge_id("a").unwrap();
        assert_eq!(br.bridge_id("a"), Some(a));
        assert_eq!(br.name(a), "a");
        for i in 0..MAX_BRIDGES {
            br.bridge_id(&format!("b{i}"));
        }
        assert_eq!(br.bridge_id("one-too-many"), None);
        assert_eq!(br.bridge_id("a"), Some(a));
    }

    #[test]
    fn keys_keep_mac_vlan_and_bridge_apart() {
        let segs = [(0, 0), (0, 1), (1, 0), (15, 4094), (15, 0), (0, 4094)];
        let macs = [[0; 6], [0xff; 6], A, B];
        let mut seen = std::collections::HashSet::new();
        for (b, v) in segs {
            for m in macs {
                let k = key(Segment { bridge: b, vlan: v }, m);
                assert!(seen.insert(k), "{b} {v} {m:?}");
                assert_eq!(bridge_of(k), usize::from(b));
            }
        }
    }
}
