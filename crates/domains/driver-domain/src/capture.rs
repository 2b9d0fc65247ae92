//! Packet capture taps (`splitnet capture`): what `tcpdump -i vif3.0` shows
//! in Xen's dom0, for vifs that have no kernel interface.
//!
//! The toolstack asks hv for a channel to the driver domain
//! ([`hypercall::proto::Request::CaptureOpen`]); hv writes a [`Spec`] to
//! `splitnet/capture/<id>` in the driver domain's store directory. The
//! driver domain collects its end, and from then on copies every frame that
//! crosses the tapped bridge port into one message: a [`RecordHeader`] and
//! the frame's first `snaplen` bytes. Sends never block: when the reader
//! falls behind, the record is dropped and counted (the count rides in the
//! next record), and the traffic itself is untouched. With no tap, the data
//! path pays one branch per batch of frames.

use crate::switch::PortId;
use frame::packet::FrameRef;
use hypercall::{DomId, HvClient};
use sys::SeqPacket;

/// Largest snapshot length (tcpdump's default).
pub const MAX_SNAPLEN: usize = 262_144;
/// Bytes of a [`RecordHeader`] on the wire.
pub const RECORD_HEADER: usize = 24;
/// Taps one driver domain serves at once.
pub const MAX_TAPS: usize = 8;
/// The driver domain's first message on a channel: the tap is live, so
/// every frame from now on is captured (or counted as dropped).
pub const LIVE: &[u8] = b"splitnet capture live";

/// Which frames of a port a tap takes, from the driver domain's side (as
/// `tcpdump -Q`): `In` is what the driver domain receives from the port
/// (what a guest sends, what arrives from the wire), `Out` what it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    In,
    Out,
    Both,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
            Direction::Both => "both",
        }
    }

    fn parse(s: &str) -> Option<Direction> {
        match s {
            "in" => Some(Direction::In),
            "out" => Some(Direction::Out),
            "both" => Some(Direction::Both),
            _ => None,
        }
    }

    fn takes(self, out: bool) -> bool {
        match self {
            Direction::In => !out,
            Direction::Out => out,
            Direction::Both => true,
        }
    }
}

/// What a tap is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Vif `handle` of guest `guest` (Xen's `vif<guest>.<handle>`).
    Vif { guest: DomId, handle: u32 },
    /// The driver domain's physical port.
    Port(String),
    /// The bridge: every frame once, as it enters.
    Bridge,
}

/// A tap's request, as the store carries it: `vif 3 0 both 262144`,
/// `port peth0 in 96` or `bridge in 65535`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub target: Target,
    pub direction: Direction,
    pub snaplen: usize,
}

impl Spec {
    /// Parses the store's text form; anything malformed is refused.
    pub fn parse(s: &str) -> Result<Spec, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        let (target, rest) = match words.as_slice() {
            ["vif", g, h, rest @ ..] => {
                let guest = g.parse().map_err(|_| format!("bad guest id {g:?}"))?;
                let handle = h.parse().map_err(|_| format!("bad vif handle {h:?}"))?;
                (Target::Vif { guest, handle }, rest)
            }
            ["port", name, rest @ ..] => (Target::Port(name.to_string()), rest),
            ["bridge", rest @ ..] => (Target::Bridge, rest),
            _ => return Err(format!("unknown capture target in {s:?}")),
        };
        let [dir, snaplen] = rest else {
            return Err(format!("expected a direction and a snaplen in {s:?}"));
        };
        let direction = Direction::parse(dir).ok_or_else(|| format!("bad direction {dir:?}"))?;
        let snaplen = snaplen
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_SNAPLEN).contains(n))
            .ok_or_else(|| format!("snaplen {snaplen:?} is not in 1..={MAX_SNAPLEN}"))?;
        if target == Target::Bridge && direction != Direction::In {
            return Err(
                "the bridge sees each frame once, as it enters: direction must be in".into(),
            );
        }
        Ok(Spec {
            target,
            direction,
            snaplen,
        })
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Vif { guest, handle } => write!(f, "vif {guest} {handle}")?,
            Target::Port(p) => write!(f, "port {p}")?,
            Target::Bridge => write!(f, "bridge")?,
        }
        write!(f, " {} {}", self.direction.name(), self.snaplen)
    }
}

/// The header in front of each captured frame (little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Wall-clock time the driver domain saw the frame, ns since the epoch.
    pub ts_ns: u64,
    /// The frame's full length (the record holds at most `snaplen` bytes).
    pub orig_len: u32,
    /// The driver domain sent the frame to the port (else received it).
    pub out: bool,
    /// Records dropped so far on this tap because the reader was slow.
    pub dropped: u64,
}

impl RecordHeader {
    pub fn encode(&self, b: &mut [u8; RECORD_HEADER]) {
        b[0..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.orig_len.to_le_bytes());
        b[12..16].copy_from_slice(&u32::from(self.out).to_le_bytes());
        b[16..24].copy_from_slice(&self.dropped.to_le_bytes());
    }

    /// Splits a record into its header and frame bytes; a record too short
    /// or claiming fewer bytes than it carries is refused.
    pub fn decode(rec: &[u8]) -> Option<(RecordHeader, &[u8])> {
        let (h, data) = rec.split_at_checked(RECORD_HEADER)?;
        let u64_at = |at: usize| h[at..at + 8].try_into().map(u64::from_le_bytes);
        let u32_at = |at: usize| h[at..at + 4].try_into().map(u32::from_le_bytes);
        let hdr = RecordHeader {
            ts_ns: u64_at(0).ok()?,
            orig_len: u32_at(8).ok()?,
            out: u32_at(12).ok()? != 0,
            dropped: u64_at(16).ok()?,
        };
        (data.len() <= hdr.orig_len as usize).then_some((hdr, data))
    }
}

struct Tap {
    id: u32,
    spec: Spec,
    /// The bridge port the target is on now (none: a vif not connected).
    port: Option<PortId>,
    sock: SeqPacket,
    /// Header plus `snaplen` bytes, allocated once.
    buf: Vec<u8>,
    dropped: u64,
    /// The reader went away.
    closed: bool,
}

/// Every tap of a driver domain.
#[derive(Default)]
pub struct Taps {
    taps: Vec<Tap>,
}

impl Taps {
    pub fn is_empty(&self) -> bool {
        self.taps.is_empty()
    }

    /// Brings the taps in line with the channels listed under `dir`:
    /// collects new ones, drops those whose node went. A spec that does
    /// not parse is logged and its node removed.
    pub fn sync(&mut self, hv: &mut HvClient, dir: &str) {
        let ids: Vec<u32> = hv
            .store_directory(dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|i| i.parse().ok())
            .collect();
        self.taps.retain(|t| ids.contains(&t.id));
        for id in ids {
            if self.taps.iter().any(|t| t.id == id) {
                continue;
            }
            let node = format!("{dir}/{id}");
            // Collect the channel first, so that a refusal reaches the
            // reader as the channel closing, not as silence.
            let sock = match hv.capture_attach(id) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("driver: capture {id}: {e}");
                    let _ = hv.store_rm(&node);
                    continue;
                }
            };
            let spec = match hv.store_read_str(&node) {
                Ok(s) => Spec::parse(&s),
                Err(e) => Err(e.to_string()),
            };
            let tap = spec.and_then(|spec| {
                if self.taps.len() >= MAX_TAPS {
                    return Err(format!("already {MAX_TAPS} captures running"));
                }
                sock.try_send(LIVE, &[]).map_err(|e| e.to_string())?;
                Ok(Tap {
                    id,
                    buf: vec![0; RECORD_HEADER + spec.snaplen],
                    spec,
                    port: None,
                    sock,
                    dropped: 0,
                    closed: false,
                })
            });
            match tap {
                Ok(t) => {
                    eprintln!("driver: capture {id} on {}", t.spec);
                    self.taps.push(t);
                }
                Err(e) => {
                    eprintln!("driver: capture {id} refused: {e}");
                    let _ = hv.store_rm(&node);
                }
            }
        }
    }

    /// Points each tap at the bridge port its target is on now.
    pub fn resolve(&mut self, port_of: impl Fn(&Target) -> Option<PortId>) {
        for t in &mut self.taps {
            t.port = port_of(&t.spec.target);
        }
    }

    /// Ends the taps whose reader went away, removing their nodes.
    pub fn reap(&mut self, hv: &mut HvClient, dir: &str) {
        self.taps.retain_mut(|t| {
            if !t.closed && !t.sock.peer_closed() {
                return true;
            }
            eprintln!(
                "driver: capture {} ended ({} dropped for a slow reader)",
                t.id, t.dropped
            );
            let _ = hv.store_rm(&format!("{dir}/{}", t.id));
            false
        });
    }

    /// Frame `f` crossed bridge port `port` (`out`: towards the port).
    pub fn frame(&mut self, port: PortId, out: bool, f: &FrameRef<'_>) {
        for t in &mut self.taps {
            let hit = match t.spec.target {
                Target::Bridge => !out,
                _ => t.port == Some(port) && t.spec.direction.takes(out),
            };
            if hit && !t.closed {
                t.record(out, f);
            }
        }
    }
}

impl Tap {
    /// Sends one record without blocking; a full queue drops it (counted).
    fn record(&mut self, out: bool, f: &FrameRef<'_>) {
        let caplen = f.wire_len().min(self.spec.snaplen);
        let ts_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let hdr = RecordHeader {
            ts_ns,
            orig_len: u32::try_from(f.wire_len()).unwrap_or(u32::MAX),
            out,
            dropped: self.dropped,
        };
        let (h, data) = self.buf.split_at_mut(RECORD_HEADER);
        if let Ok(h) = <&mut [u8; RECORD_HEADER]>::try_from(h) {
            hdr.encode(h);
        }
        f.copy_wire(&mut data[..caplen]);
        match self.sock.try_send(&self.buf[..RECORD_HEADER + caplen], &[]) {
            Ok(true) => {}
            Ok(false) => self.dropped += 1,
            Err(_) => self.closed = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use frame::packet::Csum;

    #[test]
    fn specs_round_trip_and_refuse_nonsense() {
        for s in ["vif 3 0 both 262144", "port peth0 in 96", "bridge in 65535"] {
            assert_eq!(Spec::parse(s).unwrap().to_string(), s);
        }
        for bad in [
            "",
            "vif",
            "vif x 0 both 10",
            "vif 3 0 sideways 10",
            "vif 3 0 both 0",
            "vif 3 0 both 262145",
            "port peth0 in",
            "bridge out 100",
            "bridge in 100 extra",
            "tunnel in 100",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn header_round_trips_and_short_records_are_refused() {
        let h = RecordHeader {
            ts_ns: 1_700_000_000_123_456_789,
            orig_len: 1514,
            out: true,
            dropped: 7,
        };
        let mut rec = [0u8; RECORD_HEADER + 4];
        h.encode((&mut rec[..RECORD_HEADER]).try_into().unwrap());
        rec[RECORD_HEADER..].copy_from_slice(b"abcd");
        let (back, data) = RecordHeader::decode(&rec).unwrap();
        assert_eq!((back, data), (h, &b"abcd"[..]));
        assert!(RecordHeader::decode(&rec[..RECORD_HEADER - 1]).is_none());
        // More bytes than the frame's length claims.
        let mut lie = rec;
        lie[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(RecordHeader::decode(&lie).is_none());
    }

    fn tap(spec: &str, port: Option<PortId>) -> (Tap, SeqPacket) {
        let (a, b) = SeqPacket::pair().unwrap();
        let spec = Spec::parse(spec).unwrap();
        let t = Tap {
            id: 1,
            buf: vec![0; RECORD_HEADER + spec.snaplen],
            spec,
            port,
            sock: a,
            dropped: 0,
            closed: false,
        };
        (t, b)
    }

    #[test]
    fn taps_take_their_port_and_direction_and_cut_at_snaplen() {
        let mut taps = Taps::default();
        let (t, vif_rx) = tap("vif 3 0 in 4", Some(2));
        taps.taps.push(t);
        let (t, bridge_rx) = tap("bridge in 100", None);
        taps.taps.push(t);
        let frame = FrameRef::private(b"0123456789", Csum::Unknown, None);
        taps.frame(2, true, &frame); // out of port 2: not for an in-tap
        taps.frame(1, false, &frame); // into port 1: another port
        taps.frame(2, false, &frame);
        let mut buf = [0u8; 256];
        vif_rx
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        let (n, _) = vif_rx.recv(&mut buf).unwrap();
        let (h, data) = RecordHeader::decode(&buf[..n]).unwrap();
        assert_eq!((h.orig_len, h.out, data), (10, false, &b"0123"[..]));
        // The bridge tap saw both frames that entered (ports 1 and 2).
        bridge_rx
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        for _ in 0..2 {
            let (n, _) = bridge_rx.recv(&mut buf).unwrap();
            assert_eq!(RecordHeader::decode(&buf[..n]).unwrap().1, b"0123456789");
        }
        assert!(!vif_rx.peer_closed());
    }

    #[test]
    fn a_slow_reader_loses_records_never_blocks_and_sees_the_count() {
        let mut taps = Taps::default();
        let (t, rx) = tap("port peth0 both 1500", Some(0));
        t.sock.set_send_buffer(64 << 10).unwrap();
        taps.taps.push(t);
        let frame = vec![0xabu8; 1500];
        let frame = FrameRef::private(&frame, Csum::Unknown, None);
        for _ in 0..1000 {
            taps.frame(0, false, &frame);
        }
        let dropped = taps.taps[0].dropped;
        assert!(dropped > 0, "64 KiB cannot hold 1000 records");
        let mut buf = vec![0u8; RECORD_HEADER + 1500];
        let mut got = 0;
        rx.set_read_timeout(Some(std::time::Duration::from_millis(50)))
            .unwrap();
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        assert_eq!(got + dropped, 1000);
        // The next record carries the count; a closed reader ends the tap.
        taps.frame(0, false, &frame);
        let (n, _) = rx.recv(&mut buf).unwrap();
        assert_eq!(RecordHeader::decode(&buf[..n]).unwrap().0.dropped, dropped);
        drop(rx);
        taps.frame(0, false, &frame);
        assert!(taps.taps[0].closed);
    }
}
