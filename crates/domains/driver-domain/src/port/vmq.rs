//! Multi-queue ports with direct placement (Ram thesis ch. 3). The thesis
//! splits the work between two APIs (its Table 3.1):
//!
//! - the device-driver side ([`Vmq`]), which a port implements and netback
//!   calls: how many queues are left, allocate and free one, give it a MAC,
//!   enable and disable it, get and set its size;
//! - the virtualization-layer side ([`VmqLayer`]), which netback implements
//!   and the port's queue calls: arm guest buffers for the next frame
//!   (`vmq_alloc_skb`), give them back unused (`vmq_free_skb`), and say a
//!   frame arrived in them (`vmq_netif_rx`).
//!
//! Here a "hardware queue" is a macvlan on the port's interface, which the
//! kernel feeds by destination MAC as a multi-queue NIC does in hardware,
//! with its own AF_PACKET socket ([`Queue`]); frames land straight in the
//! buffers the guest posted, through the new grant mechanism's mapping of
//! its pool: one copy, by the kernel, and no bridge. hv makes the macvlan
//! and its socket on the driver domain's request (`QueueOpen`), so the
//! domain holds no CAP_NET_ADMIN; the port checks what it is given.

use crate::port::{PacketPort, Port, PortCounters, Tx};
use frame::offload::Offloads;
use frame::packet::FrameRef;
use frame::packet::VNET_HDR_LEN;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use sys::{IoPartMut, Mapping, PacketSocket, SocketFilter};

use abi::xenbus::mac_text;
pub use abi::xenbus::{is_queue_name, QUEUE_PREFIX};
/// Queues a port offers unless its uplink says (`queues=`).
pub const DEFAULT_QUEUES: u16 = 8;
/// Most queues a port may offer (the MACs its default queue's filter
/// names, but the driver domain's own).
pub const MAX_QUEUES: u16 = sys::FILTER_MACS as u16 - 1;
/// Most buffer parts one armed frame takes (a 64 KiB GSO frame in 2 KiB
/// buffers, and its vnet header).
pub const MAX_ARMED: usize = 40;

/// A received length without its vnet header (`Err`: cut short).
fn frame_len(r: Result<usize, usize>) -> Result<usize, usize> {
    match r {
        Ok(n) => n.checked_sub(VNET_HDR_LEN).ok_or(n),
        Err(n) => Err(n.saturating_sub(VNET_HDR_LEN)),
    }
}

pub use abi::xenbus::queue_name;

/// A queue, by its slot in the port's table.
pub type QueueId = usize;

/// Why a port would not give a vif a queue, or refused a change to one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the port's {0} queues are all in use")]
    NoQueue(u16),
    #[error("MAC {0} already has a queue on this port (vif index {1})")]
    MacInUse(String, u32),
    #[error("MAC {0} is the port's own")]
    PortMac(String),
    #[error("the queue is enabled: its MAC cannot change under it")]
    MacUnderEnabledQueue,
    #[error("the queue has no MAC yet")]
    NoMac,
    #[error("no such queue")]
    NoSuchQueue,
    #[error("{0}")]
    Io(String),
}

/// The VMQ device-driver API (Ram thesis Table 3.1), which a port
/// implements and netback calls.
pub trait Vmq {
    /// `vmq_avail_queues`: queues still free.
    fn available_queues(&self) -> usize;
    /// `vmq_alloc_queue`: a queue for vif index `owner`.
    fn alloc_queue(&mut self, owner: u32) -> Result<QueueId, Refusal>;
    /// `vmq_free_queue`: disables the queue if needed and frees it.
    fn free_queue(&mut self, q: QueueId);
    /// `vmq_set_mac`: the MAC whose frames the queue takes. Refused (and
    /// counted) when another queue has it, or the queue is enabled.
    fn set_mac(&mut self, q: QueueId, mac: [u8; 6]) -> Result<(), Refusal>;
    /// `vmq_enable_queue`: from now on the queue takes its MAC's unicast
    /// frames, which the default queue no longer sees; returns the queue.
    /// `sock` is the packet socket hv bound to the queue's macvlan
    /// (`QueueOpen` for this port, the queue's owner and MAC).
    fn enable_queue(&mut self, q: QueueId, sock: OwnedFd) -> Result<Queue, Refusal>;
    /// `vmq_disable_queue`: its MAC's frames go to the default queue again.
    fn disable_queue(&mut self, q: QueueId);
    /// `vmq_get_size`: bytes of frames the queue holds before it drops.
    fn size(&self, q: QueueId) -> usize;
    /// `vmq_set_size`.
    fn set_size(&mut self, q: QueueId, bytes: usize) -> Result<(), Refusal>;
    /// The port's refusals so far.
    fn vmq_counters(&self) -> VmqCounters;
}

/// What a port refused, for `splitnet status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct VmqCounters {
    /// A vif asked for a queue when none was left.
    pub queue_limit: u64,
    /// A MAC that already had a queue on the port.
    pub mac_conflicts: u64,
    /// A MAC change under an enabled queue.
    pub mac_changes_refused: u64,
}

/// Frames one batched receive takes at most.
pub const RX_BATCH: usize = sys::SCATTER_BATCH;
/// The longest frame a queue delivers (a 64 KiB GSO frame and its
/// headers), and so the bytes of a batch slot: a frame's first bytes land
/// in its armed buffer, the rest in its slot past the buffer's length.
pub const MAX_FRAME: usize = 65536 + 64;

/// Buffers the virtualization layer armed for the next frame: ranges of
/// `map` (the guest's pool, or the driver domain's staging frames).
pub struct Armed<'a> {
    pub map: &'a Mapping,
    pub ranges: &'a [(usize, usize)],
}

/// The VMQ virtualization-layer API (Ram thesis Table 3.1), which netback
/// implements and a queue calls.
pub trait VmqLayer {
    /// `vmq_alloc_skb`: arms guest buffers for the next frame; None when
    /// the guest has not posted enough (the queue then waits for it).
    fn alloc_skb(&mut self) -> Option<Armed<'_>>;
    /// `vmq_free_skb`: nothing arrived; the armed buffers stay posted.
    fn free_skb(&mut self);
    /// `vmq_netif_rx`: a frame arrived in the armed buffers, after the
    /// vnet header `hdr`: `Ok(its length)`, or `Err(its length)` when it
    /// was longer than they are (consumed, not kept).
    fn netif_rx(&mut self, hdr: &[u8; VNET_HDR_LEN], len: Result<usize, usize>);
    /// Arms up to `max` buffers, one per frame, for a batch; None when the
    /// guest posted none (or frames wait on the slow path).
    fn alloc_batch(&mut self, max: usize) -> Option<Armed<'_>>;
    /// A batch arrived: frame k's first bytes in armed buffer k, the rest
    /// in its slot of `landed`. The armed buffers a frame did not take stay
    /// posted.
    fn netif_rx_batch(&mut self, landed: &mut Landed<'_>);
}

/// What one batched receive put where: per frame its vnet header, its
/// length after the header (`Err` when longer than its buffer and slot),
/// and its slot of [`MAX_FRAME`] bytes, whose bytes past the armed buffer's
/// length are the frame's rest; the layer may write the slot's head to
/// join a frame in one piece.
pub struct Landed<'a> {
    pub hdrs: &'a [[u8; VNET_HDR_LEN]],
    pub lens: &'a [Result<usize, usize>],
    scratch: &'a mut [u8],
}

impl Landed<'_> {
    /// Frames received.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Frame k's slot.
    pub fn slot(&mut self, k: usize) -> &mut [u8] {
        &mut self.scratch[k * MAX_FRAME..(k + 1) * MAX_FRAME]
    }
}

/// A queue's batch receive storage, allocated once with the queue.
struct BatchStore {
    hdrs: [[u8; VNET_HDR_LEN]; RX_BATCH],
    lens: [Result<usize, usize>; RX_BATCH],
    /// [`RX_BATCH`] slots of [`MAX_FRAME`] bytes (zeroed pages: the kernel maps
    /// them only once a frame overflows into them).
    scratch: Vec<u8>,
}

/// How a queue receives (see [`Queue::receive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One `recvmmsg` of up to [`RX_BATCH`] frames, one buffer each.
    Batch,
    /// One frame per `recvmsg`, scattered over as many buffers as it takes.
    Scatter,
}

/// What one receive call did.
enum Step {
    Frames(usize),
    Starved,
    Empty,
}

/// What one [`Queue::receive`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueTurn {
    /// Frames received.
    pub frames: usize,
    /// The layer had no buffers armed: the queue waits for the guest.
    pub starved: bool,
    /// The budget ran out with frames maybe left.
    pub more: bool,
}

/// A dedicated receive queue: the macvlan's socket, which takes only
/// unicast to its MAC.
pub struct Queue {
    sock: PacketSocket,
    /// Kernel drops so far (PACKET_STATISTICS resets on every read).
    kernel_drops: u64,
    /// What its port takes on transmit as it is.
    caps: Offloads,
    shaped: crate::netback::slab::FrameSlab,
    counters: PortCounters,
    mode: Mode,
    batch: Box<BatchStore>,
}

impl Queue {
    pub(crate) fn new(sock: PacketSocket, caps: Offloads) -> Queue {
        Queue {
            sock,
            kernel_drops: 0,
            caps,
            shaped: crate::port::shaping_slab(),
            counters: PortCounters::default(),
            mode: Mode::Batch,
            batch: Box::new(BatchStore {
                hdrs: [[0; VNET_HDR_LEN]; RX_BATCH],
                lens: [Ok(0); RX_BATCH],
                scratch: vec![0; RX_BATCH * MAX_FRAME],
            }),
        }
    }

    /// Sends the vif's frames to the port through the queue, as the port
    /// would (the thesis's multi-queue NIC transmits from each queue).
    pub fn send_batch(&mut self, frames: &[&FrameRef<'_>]) {
        let mut tx = Tx {
            sock: &self.sock,
            caps: self.caps,
            shaped: &mut self.shaped,
            counters: &mut self.counters,
        };
        tx.send_batch(frames);
    }

    /// Frames sent through the queue, and dropped on the way.
    pub fn tx_counts(&self) -> (u64, u64) {
        (self.counters.tx_packets, self.counters.tx_dropped)
    }

    /// The queue's interface name.
    pub fn name(&self) -> &str {
        self.sock.name()
    }

    /// Receives up to `budget` frames straight into the buffers the layer
    /// arms. The guest's responses must follow the order it posted its
    /// buffers in, and a frame's length is known only once it arrived, so
    /// there are two ways:
    ///
    /// - batched (MTU frames, what a NIC delivers): one `recvmmsg` of up
    ///   to [`RX_BATCH`] frames, each into one armed buffer with a private
    ///   overflow behind it. Frames that fit go out in place; from the
    ///   first one that does not, the layer copies the rest of the batch
    ///   out and the buffers they landed in stay posted, so none is
    ///   skipped;
    /// - scattered: one frame per `recvmsg` over as many buffers as a
    ///   64 KiB frame takes, each used in place.
    ///
    /// A batch in which most frames overflowed means large frames (GSO
    /// from the kernel): each would be copied, so the queue scatters until
    /// a frame that fits one buffer shows MTU frames again.
    pub fn receive(&mut self, vl: &mut dyn VmqLayer, budget: usize) -> io::Result<QueueTurn> {
        let mut turn = QueueTurn::default();
        while turn.frames < budget {
            let step = match self.mode {
                Mode::Batch => self.receive_batch(vl, budget - turn.frames)?,
                Mode::Scatter => self.receive_one(vl)?,
            };
            match step {
                Step::Frames(n) => turn.frames += n,
                Step::Starved => {
                    turn.starved = true;
                    return Ok(turn);
                }
                Step::Empty => return Ok(turn),
            }
        }
        turn.more = true;
        Ok(turn)
    }

    /// One frame scattered over the buffers armed for it.
    fn receive_one(&mut self, vl: &mut dyn VmqLayer) -> io::Result<Step> {
        let mut hdr = [0u8; VNET_HDR_LEN];
        let (got, buffer) = {
            let Some(armed) = vl.alloc_skb() else {
                return Ok(Step::Starved);
            };
            let mut parts: [IoPartMut<'_>; MAX_ARMED + 1] =
                std::array::from_fn(|_| IoPartMut::Private(&mut []));
            parts[0] = IoPartMut::Private(&mut hdr);
            let n = armed.ranges.len().min(MAX_ARMED);
            for (p, &(off, len)) in parts[1..].iter_mut().zip(&armed.ranges[..n]) {
                *p = IoPartMut::Shared {
                    map: armed.map,
                    off,
                    len,
                };
            }
            let buffer = armed.ranges.first().map_or(0, |r| r.1);
            (self.sock.recv_scatter(&mut parts[..n + 1]), buffer)
        };
        match got {
            Ok(Some(r)) => {
                let len = frame_len(r);
                if len.is_ok_and(|n| n <= buffer) {
                    self.mode = Mode::Batch;
                }
                vl.netif_rx(&hdr, len);
                Ok(Step::Frames(1))
            }
            Ok(None) => {
                vl.free_skb();
                Ok(Step::Empty)
            }
            Err(e) => {
                vl.free_skb();
                Err(e)
            }
        }
    }

    /// Up to `max` frames in one `recvmmsg`, each into one armed buffer
    /// and its slot's overflow.
    fn receive_batch(&mut self, vl: &mut dyn VmqLayer, max: usize) -> io::Result<Step> {
        let Queue {
            sock, batch, mode, ..
        } = &mut *self;
        let BatchStore {
            hdrs,
            lens,
            scratch,
        } = &mut **batch;
        let (got, buffer) = {
            let Some(armed) = vl.alloc_batch(max.min(RX_BATCH)) else {
                return Ok(Step::Starved);
            };
            let n = armed.ranges.len().min(RX_BATCH);
            let buffer = armed.ranges.first().map_or(0, |r| r.1);
            let mut msgs: [[IoPartMut<'_>; 3]; RX_BATCH] =
                std::array::from_fn(|_| std::array::from_fn(|_| IoPartMut::Private(&mut [])));
            let slots = scratch.chunks_mut(MAX_FRAME).zip(hdrs.iter_mut());
            for ((m, (slot, hdr)), &(off, len)) in msgs.iter_mut().zip(slots).zip(armed.ranges) {
                let rest = slot.get_mut(len..).unwrap_or_default();
                *m = [
                    IoPartMut::Private(hdr),
                    IoPartMut::Shared {
                        map: armed.map,
                        off,
                        len,
                    },
                    IoPartMut::Private(rest),
                ];
            }
            (
                sock.recv_scatter_batch(&mut msgs[..n], &mut lens[..n]),
                buffer,
            )
        };
        let got = match got {
            Ok(0) | Err(_) => {
                vl.free_skb();
                return got.map(|_| Step::Empty);
            }
            Ok(n) => n,
        };
        for l in &mut lens[..got] {
            *l = frame_len(*l);
        }
        let over = lens[..got]
            .iter()
            .filter(|l| !l.is_ok_and(|n| n <= buffer))
            .count();
        if 2 * over > got {
            *mode = Mode::Scatter;
        }
        vl.netif_rx_batch(&mut Landed {
            hdrs: &hdrs[..got],
            lens: &lens[..got],
            scratch: &mut scratch[..],
        });
        Ok(Step::Frames(got))
    }

    /// Frames the kernel dropped because the queue was full, so far.
    pub fn kernel_drops(&mut self) -> u64 {
        if let Ok((_, d)) = self.sock.take_stats() {
            self.kernel_drops += d;
        }
        self.kernel_drops
    }
}

impl AsFd for Queue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// One slot of a port's queue table.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueueSlot {
    /// The vif index it belongs to; None: free.
    pub owner: Option<u32>,
    pub mac: Option<[u8; 6]>,
    /// Whether the queue is enabled (its macvlan's socket in use).
    pub enabled: bool,
    pub size: usize,
}

/// A port's queues and what it refused: the bookkeeping behind [`Vmq`],
/// apart from the kernel objects so it can be tested without them.
#[derive(Debug, Default)]
pub(crate) struct QueueTable {
    pub limit: u16,
    /// The port interface's own MAC, which no queue may take.
    pub port_mac: Option<[u8; 6]>,
    pub slots: Vec<QueueSlot>,
    pub counters: VmqCounters,
}

/// Default queue size: the socket buffer a port asks for.
pub(crate) const QUEUE_SIZE: usize = 4 << 20;

impl QueueTable {
    pub fn new(limit: u16) -> QueueTable {
        QueueTable {
            limit: limit.min(MAX_QUEUES),
            ..QueueTable::default()
        }
    }

    fn used(&self) -> usize {
        self.slots.iter().filter(|s| s.owner.is_some()).count()
    }

    pub fn available(&self) -> usize {
        usize::from(self.limit).saturating_sub(self.used())
    }

    pub fn alloc(&mut self, owner: u32) -> Result<QueueId, Refusal> {
        if self.available() == 0 {
            self.counters.queue_limit += 1;
            return Err(Refusal::NoQueue(self.limit));
        }
        let slot = QueueSlot {
            owner: Some(owner),
            size: QUEUE_SIZE,
            ..QueueSlot::default()
        };
        match self.slots.iter().position(|s| s.owner.is_none()) {
            Some(q) => {
                self.slots[q] = slot;
                Ok(q)
            }
            None => {
                self.slots.push(slot);
                Ok(self.slots.len() - 1)
            }
        }
    }

    pub fn get(&self, q: QueueId) -> Result<&QueueSlot, Refusal> {
        self.slots
            .get(q)
            .filter(|s| s.owner.is_some())
            .ok_or(Refusal::NoSuchQueue)
    }

    pub fn set_mac(&mut self, q: QueueId, mac: [u8; 6]) -> Result<(), Refusal> {
        let s = self.get(q)?;
        if s.mac == Some(mac) {
            return Ok(());
        }
        if s.enabled {
            self.counters.mac_changes_refused += 1;
            return Err(Refusal::MacUnderEnabledQueue);
        }
        if self.port_mac == Some(mac) {
            self.counters.mac_conflicts += 1;
            return Err(Refusal::PortMac(mac_text(&mac)));
        }
        let other = self
            .slots
            .iter()
            .enumerate()
            .find(|(i, o)| *i != q && o.owner.is_some() && o.mac == Some(mac));
        if let Some((_, o)) = other {
            self.counters.mac_conflicts += 1;
            return Err(Refusal::MacInUse(mac_text(&mac), o.owner.unwrap_or(0)));
        }
        self.slots[q].mac = Some(mac);
        Ok(())
    }

    /// The MACs of the enabled queues (what the default queue drops).
    pub fn enabled_macs(&self) -> Vec<[u8; 6]> {
        self.slots
            .iter()
            .filter(|s| s.owner.is_some() && s.enabled)
            .filter_map(|s| s.mac)
            .collect()
    }
}

fn io_refusal(e: io::Error) -> Refusal {
    Refusal::Io(e.to_string())
}

impl PacketPort {
    /// Offers `limit` dedicated queues (0..=[`MAX_QUEUES`]). hv refuses
    /// them on an interface that is itself a macvlan (the kernel would
    /// stack them on its lower device, past this port's filter).
    pub fn with_queues(mut self, limit: u16) -> PacketPort {
        self.queues = QueueTable::new(limit);
        if limit > 0 {
            self.queues.port_mac = sys::get_mac(self.name()).ok();
        }
        self
    }

    /// Leaves unicast to `mac`, the driver domain's own interface, to the
    /// kernel, which delivers it there past this socket (the toolstack's
    /// `local_delivery = "kernel"`): the default queue's filter drops it
    /// from now on, as it drops an enabled queue's.
    pub fn deliver_locally(mut self, mac: [u8; 6]) -> io::Result<PacketPort> {
        self.local_mac = Some(mac);
        self.refilter()?;
        Ok(self)
    }

    /// Rebuilds the default queue's filter: it takes everything but unicast
    /// to an enabled queue's MAC and to the MAC the kernel delivers.
    fn refilter(&self) -> io::Result<()> {
        let mut macs = self.queues.enabled_macs();
        macs.extend(self.local_mac);
        let f = SocketFilter::drop_unicast_to(&macs)
            .ok_or_else(|| io::Error::other("more MACs than a filter holds"))?;
        self.socket().set_filter(&f)
    }

    /// Queue `q`'s socket, from `fd` (hv's): bound, in this namespace, to
    /// the macvlan named for this port and the queue's owner, taking only
    /// unicast to the queue's MAC.
    fn queue_socket(&self, fd: OwnedFd, owner: u32, mac: [u8; 6]) -> io::Result<PacketSocket> {
        let name = queue_name(self.socket().ifindex(), owner);
        let s = PacketSocket::adopt(fd, &name, true)?;
        s.set_filter(&SocketFilter::only_unicast_to(mac))?;
        Ok(s)
    }
}

impl Vmq for PacketPort {
    fn available_queues(&self) -> usize {
        self.queues.available()
    }
    fn alloc_queue(&mut self, owner: u32) -> Result<QueueId, Refusal> {
        self.queues.alloc(owner)
    }
    fn free_queue(&mut self, q: QueueId) {
        self.disable_queue(q);
        if let Some(s) = self.queues.slots.get_mut(q) {
            *s = QueueSlot::default();
        }
    }
    fn set_mac(&mut self, q: QueueId, mac: [u8; 6]) -> Result<(), Refusal> {
        self.queues.set_mac(q, mac)
    }
    /// The queue's socket exists before the default queue stops taking its
    /// MAC, so a frame in between may arrive twice, never not at all.
    fn enable_queue(&mut self, q: QueueId, sock: OwnedFd) -> Result<Queue, Refusal> {
        let s = self.queues.get(q)?.clone();
        let mac = s.mac.ok_or(Refusal::NoMac)?;
        if s.enabled {
            return Err(Refusal::Io("the queue is enabled already".into()));
        }
        let owner = s.owner.unwrap_or_default();
        let sock = self.queue_socket(sock, owner, mac).map_err(io_refusal)?;
        let queue = Queue::new(sock, self.caps());
        self.queues.slots[q].enabled = true;
        if let Err(e) = self.refilter() {
            self.disable_queue(q);
            return Err(io_refusal(e));
        }
        Ok(queue)
    }
    /// The default queue takes the MAC's frames again (before the queue's
    /// socket closes and hv deletes its macvlan).
    fn disable_queue(&mut self, q: QueueId) {
        let Some(s) = self.queues.slots.get_mut(q).filter(|s| s.enabled) else {
            return;
        };
        s.enabled = false;
        if let Err(e) = self.refilter() {
            eprintln!("driver: port {}: filter: {e}", self.name());
        }
    }
    fn size(&self, q: QueueId) -> usize {
        self.queues.get(q).map_or(0, |s| s.size)
    }
    /// Takes effect when the queue is next enabled.
    fn set_size(&mut self, q: QueueId, bytes: usize) -> Result<(), Refusal> {
        self.queues.get(q)?;
        self.queues.slots[q].size = bytes;
        Ok(())
    }
    fn vmq_counters(&self) -> VmqCounters {
        self.queues.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 1];
    const B: [u8; 6] = [0, 0x16, 0x3e, 0, 0, 2];

    #[test]
    fn queues_are_allocated_up_to_the_limit_and_reused() {
        let mut t = QueueTable::new(2);
        assert_eq!(t.available(), 2);
        let a = t.alloc(1).unwrap();
        let b = t.alloc(2).unwrap();
        assert_eq!(t.available(), 0);
        assert_eq!(t.alloc(3), Err(Refusal::NoQueue(2)));
        assert_eq!(t.counters.queue_limit, 1);
        t.slots[a] = QueueSlot::default();
        assert_eq!(t.alloc(3).unwrap(), a, "a freed slot is reused");
        assert_ne!(a, b);
        assert_eq!(QueueTable::new(1000).limit, MAX_QUEUES);
    }

    #[test]
    fn a_mac_has_one_queue_and_does_not_change_under_an_enabled_one() {
        let mut t = QueueTable::new(4);
        let a = t.alloc(1).unwrap();
        let b = t.alloc(2).unwrap();
        t.set_mac(a, A).unwrap();
        let e = t.set_mac(b, A).unwrap_err();
        assert_eq!(e, Refusal::MacInUse("00:16:3e:00:00:01".into(), 1));
        assert_eq!(t.counters.mac_conflicts, 1);
        t.port_mac = Some(B);
        assert_eq!(
            t.set_mac(b, B),
            Err(Refusal::PortMac("00:16:3e:00:00:02".into()))
        );
        assert_eq!(t.counters.mac_conflicts, 2);
        t.port_mac = None;
        t.set_mac(b, B).unwrap();
        t.slots[a].enabled = true;
        assert_eq!(t.set_mac(a, B), Err(Refusal::MacUnderEnabledQueue));
        assert_eq!(t.set_mac(a, A), Ok(()), "the same MAC is no change");
        assert_eq!(t.counters.mac_changes_refused, 1);
        assert_eq!(t.enabled_macs(), vec![A]);
        assert_eq!(t.set_mac(9, A), Err(Refusal::NoSuchQueue));
    }

    #[test]
    fn queue_names_fit_and_are_recognized() {
        let n = queue_name(999_999, 65535);
        assert!(n.len() <= 15, "{n}");
        assert!(is_queue_name(&n) && is_queue_name("snq3v0"));
        for bad in ["snq", "snq3", "snqv1", "snq3v", "snqxv1", "eth0", "snq3v1a"] {
            assert!(!is_queue_name(bad), "{bad}");
        }
    }
}
