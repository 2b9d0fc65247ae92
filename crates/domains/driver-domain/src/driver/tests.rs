use super::events::SlotSet;
use super::ports::{PortKind, PortSlot};
use super::*;
use crate::port::Port;
use crate::port::PortCounters;
use crate::switch::bridge::DEFAULT_BRIDGE;
use crate::switch::vlan::{self, Attach, Mode};
use frame::offload::{checksum_setup, Offloads};
use frame::packet::FrameRef;
use frame::packet::{Csum, Packet};
use frame::testing::tcp4;
use std::cell::RefCell;
use std::rc::Rc;

type Sent = Rc<RefCell<Vec<(Vec<u8>, Csum)>>>;

/// A port that keeps what it is sent.
struct Fake {
    name: String,
    fd: std::fs::File,
    sent: Sent,
    counters: PortCounters,
    /// Frames the next `recv_batch` hands out.
    rx: Vec<Vec<u8>>,
}

impl Port for Fake {
    fn name(&self) -> &str {
        &self.name
    }
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
    fn offloads(&self) -> Offloads {
        Offloads::ALL
    }
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[FrameRef<'_>])) -> std::io::Result<()> {
        let bufs: Vec<Vec<u8>> = self.rx.drain(..).collect();
        let frames: Vec<FrameRef<'_>> = bufs
            .iter()
            .map(|b| FrameRef::private(b, Csum::Unknown, None))
            .collect();
        if !frames.is_empty() {
            f(&frames);
        }
        Ok(())
    }
    fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
        for f in frames {
            let mut v = vec![0; f.len];
            f.copy_out(0, &mut v);
            self.sent.borrow_mut().push((v, f.csum));
        }
    }
    fn counters(&self) -> &PortCounters {
        &self.counters
    }
}

struct Rig {
    bridge: Bridge,
    ports: Ports,
    taps: Taps,
    scratch: Scratch,
    sent: Vec<Sent>,
}

const T0: usize = 0;
const A10: usize = 1;
const A20: usize = 2;
const X0: usize = 3;
const T1: usize = 4;

/// Ports: a trunk, access VLAN 10, access VLAN 20 and an untagged port
/// on xenbr0, and a trunk on xenbr1.
fn rig() -> Rig {
    let mut bridge = Bridge::default();
    let b1 = bridge.bridge_id("xenbr1").unwrap();
    let modes = [
        (DEFAULT_BRIDGE, Mode::Trunk),
        (DEFAULT_BRIDGE, Mode::Access(10)),
        (DEFAULT_BRIDGE, Mode::Access(20)),
        (DEFAULT_BRIDGE, Mode::Access(0)),
        (b1, Mode::Trunk),
    ];
    let mut r = Rig {
        bridge,
        ports: Ports::new("/t", Offloads::ALL),
        taps: Taps::default(),
        scratch: Scratch::new(),
        sent: Vec::new(),
    };
    for (bridge, mode) in modes {
        r.add(Attach { bridge, mode });
    }
    r
}

impl Rig {
    /// Adds a port that keeps what it is sent.
    fn add(&mut self, attach: Attach) {
        let j = self.sent.len();
        let s = Sent::default();
        self.sent.push(s.clone());
        self.ports.list.push(PortSlot {
            name: format!("p{j}"),
            kind: PortKind::Uplink,
            attach,
            port: Some(Box::new(Fake {
                name: format!("p{j}"),
                fd: std::fs::File::open("/dev/null").unwrap(),
                sent: s,
                counters: PortCounters::default(),
                rx: Vec::new(),
            })),
            retry_at: Instant::now(),
            group: None,
            group_dropped: 0,
            queues: 0,
            unread: false,
        });
    }

    /// Forwards `frames` arriving on port `j`; what each port was sent.
    fn send(&mut self, j: usize, frames: &[FrameRef<'_>]) -> Vec<Vec<(Vec<u8>, Csum)>> {
        let from = self.ports.list[j].attach;
        let mut fx = Fwd {
            bridge: &mut self.bridge,
            ports: &mut self.ports,
            taps: &mut self.taps,
            scratch: &mut self.scratch,
            via: None,
        };
        let mut dirty = SlotSet::default();
        let vifs = Others::all(&mut [], &mut dirty);
        assert_eq!(forward(&mut fx, PORT_BASE + j, from, frames, vifs), 0);
        self.sent.iter().map(|s| s.take()).collect()
    }
}

impl Rig {
    /// Adds slot 5, a member of the macvlan group of trunk `T1`
    /// (xenbr1), and slot 6, an untagged port on xenbr1.
    fn with_group(mut self) -> Rig {
        assert_eq!(self.ports.list.len(), 5, "the group takes slots 5 and 6");
        let bridge = self.ports.list[T1].attach.bridge;
        self.add(Attach {
            bridge,
            mode: Mode::Trunk,
        });
        self.ports.list[5].group = Some("p4".into());
        self.add(Attach {
            bridge,
            mode: Mode::Access(0),
        });
        self
    }

    /// Port slot `j` reads `frames` (as the loop does); what each port
    /// was sent.
    fn read(&mut self, j: usize, frames: &[&[u8]]) -> Vec<Vec<(Vec<u8>, Csum)>> {
        // Out of its slot while it is read, as in the loop.
        let p = self.ports.list[j].port.take().unwrap();
        let mut fx = Fwd {
            bridge: &mut self.bridge,
            ports: &mut self.ports,
            taps: &mut self.taps,
            scratch: &mut self.scratch,
            via: None,
        };
        let mut dirty = SlotSet::default();
        let mut fake = Fake {
            name: String::new(),
            fd: std::fs::File::open("/dev/null").unwrap(),
            sent: Sent::default(),
            counters: PortCounters::default(),
            rx: frames.iter().map(|f| f.to_vec()).collect(),
        };
        read_port(&mut fx, &mut fake, j, &mut [], &mut dirty).unwrap();
        self.ports.list[j].port = Some(p);
        self.sent.iter().map(|s| s.take()).collect()
    }
}

const G: usize = 5;
const U1: usize = 6;

#[test]
fn a_macvlan_group_is_one_bridge_port_that_takes_broadcast_from_its_primary_only() {
    let mut r = rig().with_group();
    let lan: [u8; 6] = [0, 0x16, 0x3e, 9, 9, 9];
    // Wire broadcast reaches the primary and every member: the
    // primary's copy is bridged, the member's dropped and counted.
    let arp = tcp(BCAST, lan).data;
    assert_eq!(only(&r.read(T1, &[&arp]), U1).len(), 1);
    assert!(r.read(G, &[&arp]).iter().all(Vec::is_empty));
    let mcast = tcp([0x33, 0x33, 0, 0, 0, 1], lan).data;
    assert!(r.read(G, &[&mcast]).iter().all(Vec::is_empty));
    assert_eq!(r.ports.list[G].group_dropped, 2);
    // Unicast the kernel gave the member (a guest's MAC) is bridged as
    // the primary's: the LAN's MAC is learned there, so what goes back
    // to it leaves through the primary, never through the member.
    let reply = tcp(M, lan).data;
    assert_eq!(only(&r.read(G, &[&reply]), U1)[0].0, reply);
    let to_lan = tcp(lan, M).data;
    let out = r.send(U1, &[FrameRef::private(&to_lan, Csum::Unknown, None)]);
    assert_eq!(only(&out, T1)[0].0, to_lan);
    // Flooding never sends through a member either.
    let out = r.send(
        U1,
        &[FrameRef::private(&tcp(BCAST, N).data, Csum::Unknown, None)],
    );
    assert_eq!(only(&out, T1).len(), 1);
    // Without its primary open, a member's frames go nowhere.
    let primary = r.ports.list[T1].port.take();
    assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty));
    assert_eq!(r.ports.list[G].group_dropped, 3);
    r.ports.list[T1].port = primary;
    // A group naming itself, another member, or no uplink has no
    // primary: its frames go nowhere either.
    for g in ["p5", "p9", ""] {
        r.ports.list[G].group = Some(g.into());
        assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty), "{g:?}");
    }
    r.ports.list[U1].group = Some("p4".into());
    r.ports.list[G].group = Some("p6".into());
    assert!(r.read(G, &[&reply]).iter().all(Vec::is_empty));
    assert_eq!(r.ports.list[G].group_dropped, 7);
    assert_eq!(r.bridge.counters.vlan_dropped, 0);
}

fn tagged(f: &[u8], tci: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&vlan::TPID.to_be_bytes());
    t.extend_from_slice(&tci.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

/// A TCP frame from `src` to `dst` with a partial checksum.
fn tcp(dst: [u8; 6], src: [u8; 6]) -> Packet {
    let mut p = Packet::new(tcp4(&[5; 300]));
    p.data[..6].copy_from_slice(&dst);
    p.data[6..12].copy_from_slice(&src);
    checksum_setup(&mut p, true).unwrap();
    p
}

const M: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];
const N: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 2];
const BCAST: [u8; 6] = [0xff; 6];

fn only(out: &[Vec<(Vec<u8>, Csum)>], j: usize) -> &[(Vec<u8>, Csum)] {
    for (i, o) in out.iter().enumerate() {
        assert!(i == j || o.is_empty(), "port {i} got {} frames", o.len());
    }
    &out[j]
}

#[test]
fn access_frames_leave_trunks_tagged_and_trunk_frames_reach_their_vlan_untagged() {
    let mut r = rig();
    let p = tcp(BCAST, M);
    let Csum::Partial { start, offset } = p.csum else {
        panic!("partial")
    };
    // VLAN 10's broadcast: tagged on xenbr0's trunk, nowhere else.
    let out = r.send(A10, &[FrameRef::private(&p.data, p.csum, None)]);
    let got = only(&out, T0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, tagged(&p.data, 10));
    let moved = Csum::Partial {
        start: start + 4,
        offset,
    };
    assert_eq!(got[0].1, moved);
    // VLAN 20 from the trunk: untagged, to the VLAN 20 port only.
    let t = tagged(&tcp(BCAST, N).data, 20);
    let out = r.send(T0, &[FrameRef::private(&t, moved, None)]);
    let got = only(&out, A20);
    assert_eq!(got[0].0, tcp(BCAST, N).data);
    assert_eq!(got[0].1, p.csum);
    // Untagged on the trunk: "no VLAN", the untagged port only; so is a
    // priority-tagged frame (VID 0), whose tag comes off.
    let out = r.send(T0, &[FrameRef::private(&p.data, p.csum, None)]);
    assert_eq!(only(&out, X0)[0].0, p.data);
    let prio = tagged(&p.data, 0x6000);
    let out = r.send(T0, &[FrameRef::private(&prio, moved, None)]);
    assert_eq!(only(&out, X0)[0], (p.data.clone(), p.csum));
    // Known unicast: M was learned on A10 in VLAN 10, so the trunk's
    // VLAN 10 frame to M goes there, untagged; the same MAC is unknown
    // in VLAN 20 (flooded to A20 only).
    let to_m = tagged(&tcp(M, N).data, 10);
    let out = r.send(T0, &[FrameRef::private(&to_m, Csum::Unknown, None)]);
    assert_eq!(only(&out, A10)[0].0, tcp(M, N).data);
    let to_m = tagged(&tcp(M, N).data, 20);
    let out = r.send(T0, &[FrameRef::private(&to_m, Csum::Unknown, None)]);
    assert_eq!(only(&out, A20).len(), 1);
    assert_eq!(r.bridge.counters.vlan_dropped, 0);
}

#[test]
fn full_size_frames_whose_tag_the_kernel_took_off_reach_their_vlan() {
    let mut r = rig();
    let mut p = Packet::new(tcp4(&[5; 1500]));
    p.data[..6].copy_from_slice(&BCAST);
    p.data[6..12].copy_from_slice(&N);
    checksum_setup(&mut p, true).unwrap();
    let mut gso = Packet::new(tcp4(&[6; 30000]));
    gso.data[..6].copy_from_slice(&BCAST);
    gso.data[6..12].copy_from_slice(&N);
    checksum_setup(&mut gso, true).unwrap();
    let tso = Some(frame::packet::Gso {
        kind: frame::packet::GsoKind::TcpV4,
        size: 1448,
        ecn: false,
    });
    fn kernel(f: &Packet, gso: Option<frame::packet::Gso>, tci: u16) -> FrameRef<'_> {
        FrameRef {
            vlan: Some(vlan::VlanTag {
                tpid: vlan::TPID,
                tci,
            }),
            ..FrameRef::private(&f.data, f.csum, gso)
        }
    }
    // To an access port: as the kernel gave it, nothing rewritten; a
    // priority-tagged frame (VID 0) to the untagged port likewise.
    for (f, g, tci, to) in [
        (&p, None, 20, A20),
        (&p, None, 0xa000 | 20, A20),
        (&gso, tso, 20, A20),
        (&p, None, 0x6000, X0),
    ] {
        let out = r.send(T0, &[kernel(f, g, tci)]);
        assert_eq!(only(&out, to), [(f.data.clone(), f.csum)], "tci {tci:#x}");
    }
    // Trunk to trunk: the tag goes back in once, priority and all.
    r.add(Attach {
        bridge: DEFAULT_BRIDGE,
        mode: Mode::Trunk,
    });
    let Csum::Partial { start, offset } = p.csum else {
        panic!("partial")
    };
    let moved = Csum::Partial {
        start: start + 4,
        offset,
    };
    let out = r.send(T0, &[kernel(&p, None, 0xa000 | 10)]);
    assert_eq!(out[A10], [(p.data.clone(), p.csum)]);
    assert_eq!(out[5], [(tagged(&p.data, 0xa000 | 10), moved)]);
    assert_eq!(r.bridge.counters.vlan_dropped, 0);
}

#[test]
fn bad_tags_are_dropped_and_counted_and_nothing_crosses_bridges() {
    let mut r = rig();
    let p = tcp(BCAST, M);
    for (j, tci) in [(A10, 10), (X0, 5), (T0, 0x0fff)] {
        let t = tagged(&p.data, tci);
        let out = r.send(j, &[FrameRef::private(&t, Csum::Unknown, None)]);
        assert!(out.iter().all(Vec::is_empty), "from port {j}");
    }
    assert_eq!(r.bridge.counters.vlan_dropped, 3);
    // A partial checksum that would start inside the link header once
    // the tag is gone: refused, counted.
    let bad = Csum::Partial {
        start: 15,
        offset: 0,
    };
    let t = tagged(&p.data, 20);
    let out = r.send(T0, &[FrameRef::private(&t, bad, None)]);
    assert!(out.iter().all(Vec::is_empty));
    assert_eq!(r.bridge.counters.vlan_dropped, 4);
    // xenbr1's trunk reaches nothing on xenbr0, tagged or not.
    for f in [p.data.clone(), tagged(&p.data, 10)] {
        let out = r.send(T1, &[FrameRef::private(&f, Csum::Unknown, None)]);
        assert!(out.iter().all(Vec::is_empty));
    }
    let out = r.send(T1, &[FrameRef::private(&[0; 13], Csum::Unknown, None)]);
    assert!(out.iter().all(Vec::is_empty));
    assert_eq!(r.bridge.counters.malformed, 1);
}

#[test]
fn a_batch_larger_than_the_scratch_arrives_whole_and_in_order() {
    let mut r = rig();
    let frames: Vec<Packet> = (0..150u8)
        .map(|i| {
            let mut p = tcp(BCAST, M);
            p.data[60] = i;
            p
        })
        .collect();
    let refs: Vec<FrameRef<'_>> = frames
        .iter()
        .map(|p| FrameRef::private(&p.data, p.csum, None))
        .collect();
    let out = r.send(A10, &refs);
    let got = only(&out, T0);
    assert_eq!(got.len(), 150);
    for (g, p) in got.iter().zip(&frames) {
        assert_eq!(g.0, tagged(&p.data, 10));
    }
}
