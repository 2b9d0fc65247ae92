//! Port drivers: how the driver domain reaches the "physical NIC". A port
//! declares which offloads it accepts, and the software offload driver
//! (`offload::prepare`) does the rest (Menon 2006 §3.1). AF_PACKET on a veth
//! comes first; AF_XDP, TAP or VXLAN ports can implement the same trait.

mod gather;
pub mod tap;
pub mod vhost;
pub mod vmq;

use crate::netback::slab::FrameSlab;
use crate::switch::vlan::{self, RETAG_HEAD};
use frame::offload::{self, Offloads};
use frame::packet::{self, FrameRef, VNET_HDR_LEN};
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
    /// Frames the software offload driver segmented or checksummed for a
    /// port without TSO or checksum offload (the frames it sent count in
    /// `tx_packets`).
    pub tx_shaped: u64,
    /// Gathered frames copied into one contiguous buffer first, for a port
    /// without scatter-gather (Menon 2006 §3.1: the extra copy), and their
    /// bytes.
    pub tx_linearized: u64,
    pub tx_linearized_bytes: u64,
    /// GSO frames segmented for a port with scatter/gather and checksum
    /// offload but no TSO: headers written, payload gathered where it lay,
    /// none of it copied (Menon 2006 §4.1).
    pub tx_gathered: u64,
    /// Pages given back after receiving into them, each zeroed by the
    /// kernel before the next frame lands on it (`port_buffer = "page"`).
    pub rx_pages_zeroed: u64,
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
    fn vmq(&mut self) -> Option<&mut dyn crate::port::vmq::Vmq> {
        None
    }
    /// When the port wants a look although its descriptor stays quiet (a
    /// VM's kick shut out during a kick storm); None: never.
    fn due(&self) -> Option<std::time::Instant> {
        None
    }
    /// Called once [`Port::due`] has passed: the port makes its descriptor
    /// readable again.
    fn resume_due(&mut self, _now: std::time::Instant) {}
    /// Whether what is behind the port is connecting and cannot take
    /// frames yet (a VM vif: a VM connected and sets up its rings). A
    /// starting driver domain reads its uplinks once no port is; a VM that
    /// has not connected holds nothing.
    fn settling(&self) -> bool {
        false
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
    /// Whether each frame gets a freshly allocated, zeroed page (Xen 2.0's
    /// driver domain, Menon 2006 §4.2).
    fresh_pages: bool,
    /// Where a received frame's VLAN tag is put back (see [`vlan::retag`]).
    retag: Box<[u8; RETAG_HEAD]>,
    shaped: FrameSlab,
    counters: PortCounters,
    /// Its dedicated queues (Ram thesis ch. 3; see [`crate::port::vmq`]).
    pub(crate) queues: crate::port::vmq::QueueTable,
    /// The driver domain's own MAC, whose unicast its kernel takes from
    /// the interface itself (see [`PacketPort::deliver_locally`]).
    pub(crate) local_mac: Option<[u8; 6]>,
}

impl PacketPort {
    /// Binds to `ifname`, declaring the capabilities `caps` (Menon 2006
    /// §3.1): the kernel gets what they cover as it is (GSO, partial
    /// checksums, gathered frames); the software offload driver does the
    /// rest first, as for a NIC without them.
    pub fn open(ifname: &str, caps: Offloads) -> io::Result<PacketPort> {
        Ok(Self::on(PacketSocket::bind(ifname, true)?, caps))
    }

    /// Like [`PacketPort::open`], on socket `sock` (bound with vnet
    /// headers), which hv may have kept from an earlier driver domain.
    pub fn on(sock: PacketSocket, caps: Offloads) -> PacketPort {
        let batch = crate::hugepages::batch(RecvBatch::new(RX_BATCH, VNET_HDR_LEN + 65536 + 64));
        PacketPort {
            name: sock.name().to_string(),
            sock,
            caps,
            batch,
            fresh_pages: false,
            retag: Box::new([0; RETAG_HEAD]),
            shaped: shaping_slab(),
            counters: PortCounters::default(),
            queues: crate::port::vmq::QueueTable::new(0),
            local_mac: None,
        }
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

/// Where the software offload driver puts what it makes of one frame, in
/// storage allocated once per port or queue: the segments of a 64 KiB GSO
/// packet at the smallest segment size netback takes, or one linearized
/// frame.
pub(crate) fn shaping_slab() -> FrameSlab {
    const MOST: usize = gather::MOST_SEGMENTS;
    FrameSlab::new(MOST, 2 * 65536 + MOST * 128)
}

/// The transmit side of a packet socket: a port's, or a dedicated queue's
/// (a vif's frames to the port leave by its queue), with its counters.
pub(crate) struct Tx<'a> {
    pub sock: &'a PacketSocket,
    pub caps: Offloads,
    /// Frames the software offload driver made (reused, allocated once).
    pub shaped: &'a mut FrameSlab,
    pub counters: &'a mut PortCounters,
}

impl Tx<'_> {
    /// Sends a frame the port cannot take as it is. A GSO frame for a port
    /// that gathers and fills checksums is segmented with its payload left
    /// where it lies ([`gather`]); otherwise the software offload driver
    /// copies the frame into one contiguous buffer, segments it and fills
    /// its checksums as the port's capabilities need. Either way the
    /// results leave in `sendmmsg` batches, as a NIC driver queues a burst
    /// behind one doorbell.
    fn send_shaped(&mut self, f: &FrameRef<'_>) {
        if let Some(gso) = gather::gathers(self.caps, f.gso) {
            gather::send(self.sock, self.shaped, self.counters, f, gso);
            return;
        }
        let linear_only = self.caps.passes_as_is(f.csum, f.gso);
        self.shaped.clear();
        if !matches!(offload::prepare_frame(f, self.caps, self.shaped), Ok(true)) {
            self.counters.tx_dropped += 1;
            return;
        }
        if linear_only {
            self.counters.tx_linearized += 1;
            self.counters.tx_linearized_bytes += f.len as u64;
        } else {
            self.counters.tx_shaped += 1;
        }
        gather::send_slab(self.sock, self.shaped, self.counters);
    }

    /// Whether frame `f` goes to the port as it is: the port takes its
    /// offloads, and it is in one piece unless the port gathers.
    fn as_is(&self, f: &FrameRef<'_>) -> bool {
        self.caps.passes_as_is(f.csum, f.gso) && (self.caps.sg || parts_of(f) == 1)
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
            if !self.as_is(f) {
                self.send_shaped(f);
                i += 1;
                continue;
            }
            // A run of frames that go as they are, within one sendmmsg's limits.
            let (mut j, mut parts) = (i, 0);
            while j < frames.len() && j - i < SEND_BATCH {
                let g = frames[j];
                let need = 1 + parts_of(g);
                if !self.as_is(g) || need > FRAME_PARTS || parts + need > SEND_BATCH_PARTS {
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
        let lens: [usize; SEND_BATCH] = std::array::from_fn(|k| run.get(k).map_or(0, |f| f.len));
        send_counted(self.sock, self.counters, &frames[..run.len()], &lens);
    }
}

/// Sends `frames` (`lens[k]` bytes each) in one `sendmmsg` and as many
/// more as it takes, counting them; a frame the kernel refuses is dropped
/// and counted, and the rest go on.
fn send_counted(
    sock: &PacketSocket,
    counters: &mut PortCounters,
    frames: &[&[IoPart<'_>]],
    lens: &[usize],
) {
    let mut sent = 0;
    while sent < frames.len() {
        match sock.send_batch(&frames[sent..]) {
            Ok(m) if m > 0 => {
                for len in &lens[sent..sent + m] {
                    counters.tx_packets += 1;
                    counters.tx_bytes += *len as u64;
                }
                sent += m;
            }
            _ => {
                // The first frame of the rest was refused: drop it, go on.
                counters.tx_dropped += 1;
                sent += 1;
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
            if self.fresh_pages {
                self.counters.rx_pages_zeroed += self.batch.release_pages(n)? as u64;
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
    fn vmq(&mut self) -> Option<&mut dyn crate::port::vmq::Vmq> {
        Some(self)
    }
}

/// Receive buffers of a port (the toolstack's `port_buffer`, Menon 2006
/// §4.2): without it, [`PacketPort::open`]'s slots hold a whole GSO frame.
impl PacketPort {
    /// Receives into `slot`-byte slots laid out from a page boundary: 4096
    /// gives every frame a page of its own (Driver-none), 2048 packs two
    /// frames into each page (Driver-MTU). A longer frame is dropped and
    /// counted (`rx_errors`): the toolstack keeps frames MTU-sized.
    pub fn with_rx_slots(mut self, slot: usize) -> PacketPort {
        self.batch = crate::hugepages::batch(RecvBatch::aligned(RX_BATCH, slot, 4096));
        self.fresh_pages = slot == sys::PAGE_SIZE;
        self
    }

    /// The slot size a driver domain's `port-buffer` node asks for
    /// (`page:4096` or `mtu:<power of two from 2048 to 16384>`).
    pub fn parse_rx_slots(v: &str) -> Result<usize, String> {
        let bad =
            || format!("port-buffer {v:?}: want page:4096 or mtu:<2048..=16384, a power of two>");
        let (kind, n) = v.split_once(':').ok_or_else(bad)?;
        let n: usize = n.parse().map_err(|_| bad())?;
        match kind {
            "page" if n == 4096 => Ok(n),
            "mtu" if n.is_power_of_two() && (2048..=16384).contains(&n) => Ok(n),
            _ => Err(bad()),
        }
    }

    /// Bytes each received frame may have.
    pub fn rx_slot(&self) -> usize {
        self.batch.slot()
    }
}

#[cfg(test)]
mod rx_slot_tests {
    use super::PacketPort;

    #[test]
    fn port_buffer_values_are_checked() {
        assert_eq!(PacketPort::parse_rx_slots("page:4096"), Ok(4096));
        assert_eq!(PacketPort::parse_rx_slots("mtu:2048"), Ok(2048));
        assert_eq!(PacketPort::parse_rx_slots("mtu:16384"), Ok(16384));
        for bad in [
            "page:2048",
            "mtu:3000",
            "mtu:1024",
            "mtu:32768",
            "gso",
            "mtu:",
            "",
        ] {
            assert!(PacketPort::parse_rx_slots(bad).is_err(), "{bad}");
        }
    }
}
