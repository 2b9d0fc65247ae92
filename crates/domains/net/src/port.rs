//! Port drivers: how the driver domain reaches the "physical NIC". A port
//! declares which offloads it accepts, and the software offload driver
//! (`offload::prepare`) does the rest (Menon 2006 §3.1). AF_PACKET on a veth
//! comes first; AF_XDP, TAP or VXLAN ports can implement the same trait.

use crate::offload::{self, Offloads};
use crate::packet::{self, FrameRef, Packet, VNET_HDR_LEN};
use crate::vlan::{self, RETAG_HEAD};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use sys::{IoPart, PacketSocket, RecvBatch, SEND_BATCH, SEND_BATCH_PARTS};

/// Port counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_errors: u64,
    pub tx_dropped: u64,
}

/// A physical port of the driver domain.
pub trait Port {
    /// Interface name, for status.
    fn name(&self) -> &str;
    /// Descriptor that becomes readable when frames arrive.
    fn fd(&self) -> BorrowedFd<'_>;
    /// What the port can take on transmit.
    fn offloads(&self) -> Offloads;
    /// Receives what is queued and hands it to `f` in batches, in order
    /// (a batch's frames live only for that call), so that the bridge
    /// forwards a batch at once: one `sendmmsg` per port it goes to.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[FrameRef<'_>])) -> io::Result<()>;
    /// Sends frames in order, each shaped for the port's offloads first
    /// where it needs to be.
    fn send_batch(&mut self, frames: &[&FrameRef<'_>]);
    /// Counters.
    fn counters(&self) -> &PortCounters;
    /// What the port has to show beyond its counters (a VM vif: its
    /// device's features, rings, drops and refusals), if anything.
    fn status(&self) -> Option<serde_json::Value> {
        None
    }
    /// Its dedicated queues (Ram thesis ch. 3), if it has any to offer.
    fn vmq(&mut self) -> Option<&mut dyn crate::vmq::Vmq> {
        None
    }
}

/// Frames per receive batch (one `recvmmsg`).
const RX_BATCH: usize = 32;
/// Batches per call, so the port cannot starve the vifs.
const RX_ROUNDS: usize = 4;

/// AF_PACKET on an interface, with virtio-net headers so GSO and partial
/// checksums cross in both directions.
pub struct PacketPort {
    name: String,
    sock: PacketSocket,
    caps: Offloads,
    batch: RecvBatch,
    /// Where a received frame's VLAN tag is put back (see [`vlan::retag`]).
    retag: Box<[u8; RETAG_HEAD]>,
    shaped: Vec<Packet>,
    counters: PortCounters,
    /// Its dedicated queues (Ram thesis ch. 3; see [`crate::vmq`]).
    pub(crate) queues: crate::vmq::QueueTable,
    /// The rtnetlink socket the queues are made with, once one is.
    pub(crate) rtnl: Option<sys::rtnl::Rtnl>,
}

impl PacketPort {
    /// Binds to `ifname`. With `offload`, the kernel gets GSO and partial
    /// checksums as they are; without, the software offload driver segments
    /// and checksums every frame first, as for a NIC with no offloads.
    pub fn open(ifname: &str, offload: bool) -> io::Result<PacketPort> {
        let sock = PacketSocket::bind(ifname, true)?;
        let mut batch = RecvBatch::new(RX_BATCH, VNET_HDR_LEN + 65536 + 64);
        if crate::hugepages::enabled() {
            crate::hugepages::advised(batch.advise_huge());
        }
        Ok(PacketPort {
            name: ifname.to_string(),
            sock,
            caps: if offload {
                Offloads::ALL
            } else {
                Offloads::NONE
            },
            batch,
            retag: Box::new([0; RETAG_HEAD]),
            shaped: Vec::new(),
            counters: PortCounters::default(),
            queues: crate::vmq::QueueTable::new(0),
            rtnl: None,
        })
    }

    /// The raw socket (the queues' filter goes on it).
    pub(crate) fn socket(&self) -> &PacketSocket {
        &self.sock
    }

    /// What it takes on transmit as it is.
    pub(crate) fn caps(&self) -> Offloads {
        self.caps
    }
}

/// The transmit side of a packet socket: a port's, or a dedicated queue's
/// (a vif's frames to the port leave by its queue), with its counters.
pub(crate) struct Tx<'a> {
    pub sock: &'a PacketSocket,
    pub caps: Offloads,
    /// Frames the software offload driver made (reused).
    pub shaped: &'a mut Vec<Packet>,
    pub counters: &'a mut PortCounters,
}

impl Tx<'_> {
    fn send_shaped(&mut self, f: &FrameRef<'_>) {
        self.shaped.clear();
        if offload::prepare(f.to_packet(), self.caps, self.shaped).is_err() {
            self.counters.tx_dropped += 1;
            return;
        }
        for p in self.shaped.drain(..) {
            let hdr = p.vnet_hdr();
            match self.sock.send(&[&hdr, &p.data]) {
                Ok(_) => {
                    self.counters.tx_packets += 1;
                    self.counters.tx_bytes += p.data.len() as u64;
                }
                Err(_) => self.counters.tx_dropped += 1,
            }
        }
    }
}

/// Parts of one gathered frame: its vnet header, its header copy, the
/// private rest of a rewritten frame, and at most one range per ring slot.
const FRAME_PARTS: usize = 3 + abi::netif::XEN_NETIF_NR_SLOTS_MIN;

/// The parts a frame is sent in, besides its vnet header.
fn parts_of(f: &FrameRef<'_>) -> usize {
    1 + usize::from(!f.body.is_empty()) + f.segs.len()
}

impl Tx<'_> {
    /// Frames the port takes as they are go out in `sendmmsg` batches, each
    /// gathered from its vnet header, netback's header copy and the guest's
    /// buffers (Menon 2006 §4.1); one that needs the software offload driver
    /// is copied and shaped first, in its place in the order.
    pub fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
        let mut i = 0;
        while i < frames.len() {
            let f = frames[i];
            if !self.caps.passes_as_is(f.csum, f.gso) {
                self.send_shaped(f);
                i += 1;
                continue;
            }
            // A run of frames that go as they are, within one sendmmsg's limits.
            let (mut j, mut parts) = (i, 0);
            while j < frames.len() && j - i < SEND_BATCH {
                let g = frames[j];
                let need = 1 + parts_of(g);
                if !self.caps.passes_as_is(g.csum, g.gso)
                    || need > FRAME_PARTS
                    || parts + need > SEND_BATCH_PARTS
                {
                    break;
                }
                parts += need;
                j += 1;
            }
            if j == i {
                // More parts than a frame may have: never from a well-formed ring.
                self.counters.tx_dropped += 1;
                i += 1;
                continue;
            }
            self.send_run(&frames[i..j]);
            i = j;
        }
    }

    /// Sends a run of frames that go as they are in as few `sendmmsg` calls
    /// as the kernel takes.
    fn send_run(&mut self, run: &[&FrameRef<'_>]) {
        let mut hdrs = [[0u8; VNET_HDR_LEN]; SEND_BATCH];
        for (h, f) in hdrs.iter_mut().zip(run) {
            *h = packet::encode_vnet_hdr(f.csum, f.gso, f.head, f.len);
        }
        let mut parts: [[IoPart<'_>; FRAME_PARTS]; SEND_BATCH] =
            std::array::from_fn(|_| std::array::from_fn(|_| IoPart::Private(&[])));
        let mut counts = [0usize; SEND_BATCH];
        for (k, f) in run.iter().enumerate() {
            let p = &mut parts[k];
            p[0] = IoPart::Private(&hdrs[k]);
            p[1] = IoPart::Private(f.head);
            let mut n = 2;
            if !f.body.is_empty() {
                p[n] = IoPart::Private(f.body);
                n += 1;
            }
            if let Some(map) = f.map {
                // `send_batch` put only frames of at most FRAME_PARTS parts here.
                for &(off, len) in f.segs.iter().take(FRAME_PARTS - n) {
                    p[n] = IoPart::Shared { map, off, len };
                    n += 1;
                }
            }
            counts[k] = n;
        }
        let frames: [&[IoPart<'_>]; SEND_BATCH] = std::array::from_fn(|k| &parts[k][..counts[k]]);
        let mut sent = 0;
        while sent < run.len() {
            match self.sock.send_batch(&frames[sent..run.len()]) {
                Ok(k) if k > 0 => {
                    for f in &run[sent..sent + k] {
                        self.counters.tx_packets += 1;
                        self.counters.tx_bytes += f.len as u64;
                    }
                    sent += k;
                }
                _ => {
                    // The first frame of the rest was refused: drop it, go on.
                    self.counters.tx_dropped += 1;
                    sent += 1;
                }
            }
        }
    }
}

impl Port for PacketPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn offloads(&self) -> Offloads {
        self.caps
    }
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[FrameRef<'_>])) -> io::Result<()> {
        for _ in 0..RX_ROUNDS {
            let n = self.sock.recv_batch(&mut self.batch)?;
            let none = FrameRef::private(&[], packet::Csum::Unknown, None);
            let mut frames = [none; RX_BATCH];
            let mut k = 0;
            for i in 0..n {
                let Ok(bytes) = self.batch.frame(i) else {
                    self.counters.rx_errors += 1;
                    continue;
                };
                let Some((hdr, frame)) = bytes.split_at_checked(VNET_HDR_LEN) else {
                    self.counters.rx_errors += 1;
                    continue;
                };
                let Ok((csum, gso)) = packet::parse_vnet_hdr(hdr, frame.len()) else {
                    self.counters.rx_errors += 1;
                    continue;
                };
                let whole = FrameRef::private(frame, csum, gso);
                // The kernel took the VLAN tag off: an 802.1Q tag travels
                // beside the frame (the bridge puts it back only where the
                // frame leaves tagged); any other is put back now, in the
                // one retag buffer, so the bridge sees that frame as it was
                // on the wire: the frames before it go first, it alone next.
                let tag = self.batch.tag(i);
                if let Some(t) = tag.filter(|t| t.tpid != vlan::TPID) {
                    let Ok(r) = vlan::retag(&whole, Some(t), &mut self.retag) else {
                        self.counters.rx_errors += 1;
                        continue;
                    };
                    if k > 0 {
                        f(&frames[..k]);
                        k = 0;
                    }
                    let one = r.frame(&whole, &self.retag[..]);
                    self.counters.rx_packets += 1;
                    self.counters.rx_bytes += one.len as u64;
                    f(&[one]);
                    continue;
                }
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += whole.len as u64;
                frames[k] = FrameRef { vlan: tag, ..whole };
                k += 1;
            }
            if k > 0 {
                f(&frames[..k]);
            }
            if n < RX_BATCH {
                break;
            }
        }
        Ok(())
    }
    fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
        let mut tx = Tx {
            sock: &self.sock,
            caps: self.caps,
            shaped: &mut self.shaped,
            counters: &mut self.counters,
        };
        tx.send_batch(frames);
    }
    fn counters(&self) -> &PortCounters {
        &self.counters
    }
    fn vmq(&mut self) -> Option<&mut dyn crate::vmq::Vmq> {
        Some(self)
    }
}
