//! One VM's virtio-net device as the backend sees it: the memory table,
//! the two split rings, the negotiated features and the counters. The
//! control thread of the VM's connection writes it (vhost-user messages);
//! the driver loop takes it once per batch to move frames. Rings and
//! descriptor chains are virtio-queue's (which bounds chains by the ring
//! size and refuses an `avail` index that runs ahead); splitnet adds the
//! copy in and out of guest memory, the header, and what a violation costs:
//! the frame dropped and counted, or the connection closed.

use std::fs::File;
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};
use virtio_bindings::bindings::{virtio_config, virtio_net, virtio_ring};
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// The receive queue (frames to the VM).
pub const RX: usize = 0;
/// The transmit queue (frames from the VM).
pub const TX: usize = 1;
/// Largest ring the backend takes (virtio 1.x §2.7: at most 32768).
pub const QUEUE_MAX: u16 = 32768;
/// Largest frame either way: a 64 KiB GSO packet and its headers.
pub const FRAME_MAX: usize = 65536 + 64;
/// `virtio_net_hdr` with `num_buffers` (virtio 1.x, or MRG_RXBUF).
pub const HDR_LEN: usize = 12;
/// Bytes of one slot [`Device::tx`] copies a frame into.
pub const TX_SLOT: usize = FRAME_MAX + HDR_LEN;
/// Most buffers one received frame may take with MRG_RXBUF.
const RX_BUFS_MAX: usize = 256;
/// Most descriptors one frame may walk, either way (Linux's vhost allows
/// 1024, `UIO_MAXIOV`): virtio-queue bounds a chain only by the ring's
/// size, so without this a VM could make one frame cost millions of
/// descriptor reads (zero-length ones, or 256 chains of 32768).
const DESCS_MAX: usize = 1024;

const fn bit(b: u32) -> u64 {
    1 << b
}

/// `VHOST_USER_F_PROTOCOL_FEATURES` (vhost-user spec): bit 30.
pub const F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// The virtio features the backend offers (virtio 1.x §5.1.3).
pub const OFFERED: u64 = bit(virtio_config::VIRTIO_F_VERSION_1)
    | bit(virtio_net::VIRTIO_NET_F_MRG_RXBUF)
    | bit(virtio_net::VIRTIO_NET_F_CSUM)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_CSUM)
    | bit(virtio_net::VIRTIO_NET_F_HOST_TSO4)
    | bit(virtio_net::VIRTIO_NET_F_HOST_TSO6)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_TSO4)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_TSO6)
    | bit(virtio_net::VIRTIO_NET_F_HOST_USO)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_USO4)
    | bit(virtio_net::VIRTIO_NET_F_GUEST_USO6)
    | bit(virtio_ring::VIRTIO_RING_F_EVENT_IDX)
    | bit(virtio_net::VIRTIO_NET_F_MAC)
    | bit(virtio_net::VIRTIO_NET_F_STATUS)
    | F_PROTOCOL_FEATURES;

/// Names of the feature bits, for status.
pub const FEATURE_NAMES: [(u64, &str); 15] = [
    (bit(virtio_config::VIRTIO_F_VERSION_1), "VERSION_1"),
    (bit(virtio_net::VIRTIO_NET_F_MRG_RXBUF), "MRG_RXBUF"),
    (bit(virtio_net::VIRTIO_NET_F_CSUM), "CSUM"),
    (bit(virtio_net::VIRTIO_NET_F_GUEST_CSUM), "GUEST_CSUM"),
    (bit(virtio_net::VIRTIO_NET_F_HOST_TSO4), "HOST_TSO4"),
    (bit(virtio_net::VIRTIO_NET_F_HOST_TSO6), "HOST_TSO6"),
    (bit(virtio_net::VIRTIO_NET_F_GUEST_TSO4), "GUEST_TSO4"),
    (bit(virtio_net::VIRTIO_NET_F_GUEST_TSO6), "GUEST_TSO6"),
    (bit(virtio_net::VIRTIO_NET_F_HOST_USO), "HOST_USO"),
    (bit(virtio_net::VIRTIO_NET_F_GUEST_USO4), "GUEST_USO4"),
    (bit(virtio_net::VIRTIO_NET_F_GUEST_USO6), "GUEST_USO6"),
    (bit(virtio_ring::VIRTIO_RING_F_EVENT_IDX), "EVENT_IDX"),
    (bit(virtio_net::VIRTIO_NET_F_MAC), "MAC"),
    (bit(virtio_net::VIRTIO_NET_F_STATUS), "STATUS"),
    (F_PROTOCOL_FEATURES, "PROTOCOL_FEATURES"),
];

/// What the VM's driver takes on receive (its negotiated GUEST_* features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestOffloads {
    pub csum: bool,
    pub tso4: bool,
    pub tso6: bool,
    /// GUEST_USO4 and GUEST_USO6: UDP GSO frames, of either IP version.
    pub uso: bool,
}

/// Frames dropped, by reason.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Drops {
    /// A frame for the VM found no buffer posted (or its ring not running).
    pub no_rx_buffer: u64,
    /// A descriptor outside the memory table, or of the wrong direction.
    pub bad_descriptor: u64,
    /// A chain that loops, runs past the ring, or names a slot outside it.
    pub bad_chain: u64,
    /// An `avail` index more than a ring ahead of the backend's.
    pub bad_avail_index: u64,
    /// A frame larger than [`FRAME_MAX`], or than the VM's buffers.
    pub oversize: u64,
    /// A frame from the VM shorter than its header, or whose header the
    /// port refused.
    pub bad_header: u64,
    /// A frame from the VM whose source MAC is not the VM's.
    pub spoofed: u64,
}

/// The device's counters (virtio's directions: RX is to the VM).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Counters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub kicks: u64,
    /// Kicks after which the TX pass took nothing.
    pub spurious_kicks: u64,
    /// Times the kick was shut out for a delay after a run of spurious
    /// ones (a kick storm).
    pub kick_throttles: u64,
    pub calls: u64,
    pub drops: Drops,
}

/// A data-plane violation that ends the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    BadDescriptor,
    BadChain,
    BadAvailIndex,
    BadUsedRing,
}

impl Violation {
    /// The reason counted when the connection is closed for it.
    pub fn reason(self) -> &'static str {
        match self {
            Violation::BadDescriptor => "bad_descriptor",
            Violation::BadChain => "bad_chain",
            Violation::BadAvailIndex => "bad_avail_index",
            Violation::BadUsedRing => "bad_used_ring",
        }
    }
    fn count(self, d: &mut Drops) {
        match self {
            Violation::BadDescriptor | Violation::BadUsedRing => d.bad_descriptor += 1,
            Violation::BadChain => d.bad_chain += 1,
            Violation::BadAvailIndex => d.bad_avail_index += 1,
        }
    }
}

/// One split virtqueue and what the frontend told about it.
pub struct Ring {
    pub queue: Queue,
    /// The frontend's addresses (its own virtual addresses) of the
    /// descriptor table, the used ring and the available ring.
    pub addr: Option<[u64; 3]>,
    pub kick: Option<File>,
    /// SET_VRING_ENABLE (with PROTOCOL_FEATURES; enabled otherwise).
    /// Enabled until disabled: QEMU enables its rings before it sets the
    /// features, when the vhost crate does not pass the message on.
    pub enabled: bool,
    /// Between SET_VRING_KICK and GET_VRING_BASE (vhost-user "started").
    pub started: bool,
    /// The used index when the backend last looked whether to call the
    /// driver (see [`needs_call`]).
    pub(crate) looked_at: Wrapping<u16>,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            queue: Queue::new(QUEUE_MAX).expect("QUEUE_MAX is a power of two"),
            addr: None,
            kick: None,
            enabled: true,
            started: false,
            looked_at: Wrapping(0),
        }
    }
}

/// A region of the memory table: where the frontend has it and where the
/// guest does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub guest: u64,
    pub size: u64,
    pub user: u64,
}

/// The rings' call eventfds, shared with the thread that writes them
/// ([`super::Backend`]): the driver loop never writes a VM's eventfd itself.
pub type Calls = Arc<Mutex<[Option<Arc<File>>; 2]>>;

/// One VM's device state, shared by its control thread and the driver loop.
pub struct Device {
    pub mac: [u8; 6],
    /// The connection that owns the state; a control thread of an older
    /// one is refused.
    pub conn: u64,
    pub connected: bool,
    pub features: u64,
    pub protocol_features: u64,
    pub mem: Option<GuestMemoryMmap>,
    pub table: Vec<Region>,
    /// Whether the memory's files are sealed against shrinking (None: no
    /// table yet).
    pub memory_sealed: Option<bool>,
    pub rings: [Ring; 2],
    pub calls: Calls,
    /// Rings (bit per ring) whose VM asked to be told of used entries.
    pub to_call: u8,
    /// Set when the TX kick registration must be looked at again.
    pub kick_changed: bool,
    /// A violation seen by the data path: the driver closes the connection.
    pub broken: Option<Violation>,
    pub counters: Counters,
    /// Connections closed by the backend, by reason.
    pub refused: std::collections::BTreeMap<String, u64>,
    /// Connections the frontend closed.
    pub disconnects: u64,
    /// Messages refused without closing the connection (see
    /// [`super::control::serve`]).
    pub ignored: u64,
    /// The chains one received frame takes, reused frame after frame.
    rx_used: Box<[(u16, u32); RX_BUFS_MAX]>,
    /// Memory that cannot be sealed against shrinking is refused (a
    /// splitnet guest's: it could truncate the file under the driver
    /// domain's copies, a SIGBUS).
    pub require_sealed: bool,
}

impl Device {
    pub fn new(mac: [u8; 6]) -> Device {
        Device {
            mac,
            conn: 0,
            connected: false,
            features: 0,
            protocol_features: 0,
            mem: None,
            table: Vec::new(),
            memory_sealed: None,
            rings: [Ring::new(), Ring::new()],
            calls: Calls::default(),
            to_call: 0,
            kick_changed: true,
            broken: None,
            counters: Counters::default(),
            refused: Default::default(),
            disconnects: 0,
            ignored: 0,
            rx_used: Box::new([(0, 0); RX_BUFS_MAX]),
            require_sealed: false,
        }
    }

    /// Forgets everything a connection set up (a new one starts from scratch).
    pub fn reset(&mut self) {
        self.features = 0;
        self.protocol_features = 0;
        self.mem = None;
        self.table.clear();
        self.memory_sealed = None;
        self.rings = [Ring::new(), Ring::new()];
        *self.calls.lock().unwrap_or_else(|p| p.into_inner()) = [None, None];
        self.to_call = 0;
        self.kick_changed = true;
        self.broken = None;
    }

    /// Counts a refusal of connection `reason`.
    pub fn refuse(&mut self, reason: &str) {
        *self.refused.entry(reason.to_string()).or_default() += 1;
    }

    pub fn has(&self, feature: u64) -> bool {
        self.features & feature != 0
    }

    /// Length of the `virtio_net_hdr` the negotiated features imply.
    pub fn hdr_len(&self) -> usize {
        if self
            .has(bit(virtio_config::VIRTIO_F_VERSION_1) | bit(virtio_net::VIRTIO_NET_F_MRG_RXBUF))
        {
            HDR_LEN
        } else {
            HDR_LEN - 2
        }
    }

    /// What the VM takes on receive.
    pub fn guest_offloads(&self) -> GuestOffloads {
        GuestOffloads {
            csum: self.has(bit(virtio_net::VIRTIO_NET_F_GUEST_CSUM)),
            tso4: self.has(bit(virtio_net::VIRTIO_NET_F_GUEST_TSO4)),
            tso6: self.has(bit(virtio_net::VIRTIO_NET_F_GUEST_TSO6)),
            uso: self.has(bit(virtio_net::VIRTIO_NET_F_GUEST_USO4))
                && self.has(bit(virtio_net::VIRTIO_NET_F_GUEST_USO6)),
        }
    }

    /// The guest-physical address of the frontend's `user` address range
    /// of `len` bytes, if one region holds all of it.
    pub fn translate(&self, user: u64, len: u64) -> Option<u64> {
        self.table.iter().find_map(|r| {
            let off = user.checked_sub(r.user)?;
            (off.checked_add(len)? <= r.size).then_some(r.guest + off)
        })
    }

    /// Makes ring `i` run if the frontend has set it up, stops it if not.
    /// A ring whose addresses are not in the memory table, or whose layout
    /// does not fit guest memory, is refused.
    pub fn arm(&mut self, i: usize) -> Result<(), &'static str> {
        let event_idx = self.has(bit(virtio_ring::VIRTIO_RING_F_EVENT_IDX));
        let enabled = !self.has(F_PROTOCOL_FEATURES) || self.rings[i].enabled;
        let ring = &self.rings[i];
        let (Some(mem), Some([desc, used, avail]), true) = (&self.mem, ring.addr, ring.started)
        else {
            self.rings[i].queue.set_ready(false);
            return Ok(());
        };
        let size = u64::from(ring.queue.size());
        // Split ring sizes (virtio 1.x §2.7): 16 per descriptor; 6 + 2 per
        // slot for avail; 6 + 8 per slot for used.
        let gpa = |a: u64, n: u64| {
            self.translate(a, n)
                .ok_or("ring address outside the memory table")
        };
        let (d, u, a) = (
            gpa(desc, 16 * size)?,
            gpa(used, 6 + 8 * size)?,
            gpa(avail, 6 + 2 * size)?,
        );
        let q = &mut self.rings[i].queue;
        q.try_set_desc_table_address(GuestAddress(d))
            .and_then(|_| q.try_set_used_ring_address(GuestAddress(u)))
            .and_then(|_| q.try_set_avail_ring_address(GuestAddress(a)))
            .map_err(|_| "misaligned ring")?;
        q.set_event_idx(event_idx);
        q.set_ready(enabled);
        if enabled && !q.is_valid(mem) {
            q.set_ready(false);
            return Err("ring outside guest memory");
        }
        if enabled {
            resume_at_used(mem, &mut self.rings[i]);
        }
        Ok(())
    }

    /// Takes up to `lens.len()` chains from the TX ring and copies their
    /// frames, frame k into the k-th [`TX_SLOT`]-byte slot of `slab`, its
    /// length (header included) into `lens[k]`; a frame shorter than its
    /// header, or too large, is dropped and counted. How many frames it
    /// copied, how many chains it took, and whether the ring has more.
    pub fn tx(&mut self, slab: &mut [u8], lens: &mut [usize]) -> (usize, usize, bool) {
        let hdr_len = self.hdr_len();
        let Device {
            mem,
            rings,
            counters,
            broken,
            to_call,
            ..
        } = self;
        let (Some(mem), ring) = (mem.as_ref(), &mut rings[TX]) else {
            return (0, 0, false);
        };
        if !ring.queue.ready() || broken.is_some() {
            return (0, 0, false);
        }
        // Chains taken, good or not: each good one fills a slot.
        let budget = lens.len().min(slab.len() / TX_SLOT);
        let (mut done, mut k) = (0, 0);
        let more = loop {
            if done == budget {
                break true;
            }
            let chain = match ring.queue.iter(mem) {
                Ok(mut it) => it.next(),
                Err(_) => {
                    Violation::BadAvailIndex.count(&mut counters.drops);
                    *broken = Some(Violation::BadAvailIndex);
                    break false;
                }
            };
            let Some(chain) = chain else {
                // Drained: ask for a kick, then look once more (virtio
                // 1.x §2.7.10: the driver may have added meanwhile).
                match ring.queue.enable_notification(mem) {
                    Ok(true) => continue,
                    Ok(false) => break false,
                    Err(_) => {
                        *broken = Some(Violation::BadUsedRing);
                        break false;
                    }
                }
            };
            let head = chain.head_index();
            match gather(mem, chain, &mut slab[k * TX_SLOT..(k + 1) * TX_SLOT]) {
                Ok(n) if n >= hdr_len => {
                    lens[k] = n;
                    k += 1;
                }
                Ok(_) => counters.drops.bad_header += 1,
                Err(Gather::Oversize) => counters.drops.oversize += 1,
                Err(Gather::Bad(v)) => {
                    v.count(&mut counters.drops);
                    *broken = Some(v);
                    break false;
                }
            }
            if ring.queue.add_used(mem, head, 0).is_err() {
                *broken = Some(Violation::BadUsedRing);
                break false;
            }
            done += 1;
        };
        if done > 0 && needs_call(mem, ring, counters) {
            *to_call |= 1 << TX;
        }
        (k, done, more)
    }

    /// Writes one frame into the RX ring: its header (`vnet` is the
    /// `virtio_net_hdr`'s first 10 bytes) and `parts`, `len` bytes in all.
    /// Buffers are only taken once the whole frame fits. Call
    /// [`Device::rx_done`] after a batch. Whether the frame went.
    pub fn rx(&mut self, vnet: &[u8; 10], parts: &[Part<'_>], len: usize) -> bool {
        let hdr_len = self.hdr_len();
        let mrg = self.has(bit(virtio_net::VIRTIO_NET_F_MRG_RXBUF));
        let Device {
            mem,
            rings,
            counters,
            broken,
            rx_used,
            ..
        } = self;
        let ring = &mut rings[RX];
        let Some(mem) = mem
            .as_ref()
            .filter(|_| ring.queue.ready() && broken.is_none())
        else {
            counters.drops.no_rx_buffer += 1;
            return false;
        };
        let mut hdr = [0u8; HDR_LEN];
        hdr[..10].copy_from_slice(vnet);
        hdr[10..].copy_from_slice(&1u16.to_le_bytes());
        let mut src = Source::new(&hdr[..hdr_len], parts);
        let total = hdr_len + len;
        let saved = ring.queue.next_avail();
        match fill(mem, &mut ring.queue, &mut src, total, mrg, rx_used) {
            Ok((n, first)) => {
                if n > 1
                    && mem
                        .write_obj((n as u16).to_le(), first.unchecked_add(10))
                        .is_err()
                {
                    *broken = Some(Violation::BadDescriptor);
                    return false;
                }
                if publish_used(mem, &mut ring.queue, &rx_used[..n]).is_none() {
                    *broken = Some(Violation::BadUsedRing);
                    return false;
                }
                counters.rx_packets += 1;
                counters.rx_bytes += len as u64;
                true
            }
            Err(e) => {
                ring.queue.set_next_avail(saved);
                match e {
                    Fill::Empty => counters.drops.no_rx_buffer += 1,
                    Fill::Oversize => counters.drops.oversize += 1,
                    Fill::Bad(v) => {
                        v.count(&mut counters.drops);
                        *broken = Some(v);
                    }
                }
                false
            }
        }
    }

    /// Marks the RX ring for a call if the VM asked to hear about the
    /// frames [`Device::rx`] wrote.
    pub fn rx_done(&mut self) {
        if let Some(mem) = self.mem.as_ref() {
            let ring = &mut self.rings[RX];
            if ring.queue.ready() && needs_call(mem, ring, &mut self.counters) {
                self.to_call |= 1 << RX;
            }
        }
    }

    /// The rings to call now (bit per ring), which are then cleared.
    pub fn take_calls(&mut self) -> u8 {
        std::mem::take(&mut self.to_call)
    }
}

/// Resumes `ring` where its used ring says the last backend stopped, when
/// the base the frontend gave is elsewhere. A frontend that lost its
/// backend mid-run and has no idea how far it got (DPDK's virtio-user
/// sends 0 as every ring's base when it takes a new connection) would
/// otherwise look like one whose available index ran a ring's length
/// ahead. A network device completes its buffers in order, so the used
/// index is where the old backend stopped, as DPDK's vhost library and
/// libvhost-user resume too; buffers it had taken and not returned are
/// taken again (a transmitted frame may leave twice, which TCP bears).
fn resume_at_used(mem: &GuestMemoryMmap, ring: &mut Ring) {
    let Ok(used) = ring
        .queue
        .used_idx(mem, std::sync::atomic::Ordering::Acquire)
    else {
        return;
    };
    if used.0 != ring.queue.next_used() {
        ring.queue.set_next_avail(used.0);
        ring.queue.set_next_used(used.0);
        ring.looked_at = used;
    }
}

/// Whether the driver wants to hear about the used entries added since the
/// last look (EVENT_IDX's `used_event`, virtio 1.x §2.7.10). virtio-queue's
/// own check counts only entries its `add_used` made, and [`publish_used`]
/// adds a frame's buffers at once, so the check is made here from the used
/// index at the last look, as Linux's `vring_need_event` does; the queue's
/// check still runs, to reset its count.
fn needs_call(mem: &GuestMemoryMmap, ring: &mut Ring, c: &mut Counters) -> bool {
    let by_queue = ring.queue.needs_notification(mem).unwrap_or(true);
    let new = Wrapping(ring.queue.next_used());
    let old = std::mem::replace(&mut ring.looked_at, new);
    let yes = if ring.queue.event_idx_enabled() {
        used_event(mem, &ring.queue).is_none_or(|e| new - e - Wrapping(1) < new - old)
    } else {
        by_queue
    };
    c.calls += u64::from(yes);
    yes
}

/// The driver's `used_event` (after the available ring's entries), read
/// after the used index was published.
fn used_event(mem: &GuestMemoryMmap, q: &Queue) -> Option<Wrapping<u16>> {
    fence(Ordering::SeqCst);
    let at = GuestAddress(q.avail_ring()).checked_add(4 + 2 * u64::from(q.size()))?;
    mem.load::<u16>(at, Ordering::Relaxed)
        .ok()
        .map(|v| Wrapping(u16::from_le(v)))
}

/// Adds a frame's buffers to the used ring and publishes them with one
/// store of the used index, so the driver never sees some of a frame's
/// buffers without the rest: Linux's virtio_net drops a mergeable frame
/// whose `num_buffers` it cannot find as a length error. One buffer goes
/// through virtio-queue's `add_used`. None if an entry is out of range.
fn publish_used(mem: &GuestMemoryMmap, q: &mut Queue, used: &[(u16, u32)]) -> Option<()> {
    if let [(head, len)] = used {
        return q.add_used(mem, *head, *len).ok();
    }
    let (size, base) = (q.size(), q.next_used());
    let ring = GuestAddress(q.used_ring());
    for (k, &(head, len)) in used.iter().enumerate() {
        if head >= size {
            return None;
        }
        let slot = u64::from(base.wrapping_add(k as u16) % size);
        let mut elem = [0u8; 8];
        elem[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..].copy_from_slice(&len.to_le_bytes());
        mem.write_obj(elem, ring.checked_add(4 + 8 * slot)?).ok()?;
    }
    let next = base.wrapping_add(used.len() as u16);
    q.set_next_used(next);
    mem.store(next.to_le(), ring.checked_add(2)?, Ordering::Release)
        .ok()
}

enum Gather {
    Oversize,
    Bad(Violation),
}

/// Copies the readable chain into `buf`; its length.
fn gather(
    mem: &GuestMemoryMmap,
    chain: DescriptorChain<&GuestMemoryMmap>,
    buf: &mut [u8],
) -> Result<usize, Gather> {
    let mut n = 0;
    let mut more = true;
    for (k, d) in chain.enumerate() {
        if k == DESCS_MAX {
            return Err(Gather::Bad(Violation::BadChain));
        }
        if d.is_write_only() {
            return Err(Gather::Bad(Violation::BadDescriptor));
        }
        let end = n + d.len() as usize;
        if end > buf.len() {
            return Err(Gather::Oversize);
        }
        mem.read_slice(&mut buf[n..end], d.addr())
            .map_err(|_| Gather::Bad(Violation::BadDescriptor))?;
        n = end;
        more = d.has_next();
    }
    // virtio-queue ends a chain early when it loops past the ring size,
    // names a slot outside the ring, or cannot be read.
    if more {
        return Err(Gather::Bad(Violation::BadChain));
    }
    Ok(n)
}

/// A piece of a frame to the VM.
#[derive(Clone, Copy)]
pub enum Part<'a> {
    /// Bytes of the caller's own.
    Bytes(&'a [u8]),
    /// `len` bytes of a shared mapping at `off` (the driver domain's pool,
    /// where a port received the frame), copied straight into the VM's
    /// buffer; the caller checked the range when it held the frame.
    Shared {
        map: &'a sys::Mapping,
        off: usize,
        len: usize,
    },
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Shared { len, .. } => *len,
        }
    }

    /// Copies `n` bytes from `at` in this piece to guest address `to`.
    fn copy(&self, mem: &GuestMemoryMmap, at: usize, to: GuestAddress, n: usize) -> bool {
        match *self {
            Part::Bytes(b) => mem.write_slice(&b[at..at + n], to).is_ok(),
            Part::Shared { map, off, .. } => {
                let mut done = 0;
                for dst in mem.get_slices(to, n) {
                    let Ok(dst) = dst else { return false };
                    if map.copy_to_volatile(off + at + done, &dst).is_err() {
                        return false;
                    }
                    done += dst.len();
                }
                done == n
            }
        }
    }
}

/// The bytes of a frame to the VM: its header, then its parts.
struct Source<'a> {
    hdr: &'a [u8],
    parts: &'a [Part<'a>],
    /// Part (0 is the header) and offset in it.
    at: (usize, usize),
}

impl<'a> Source<'a> {
    fn new(hdr: &'a [u8], parts: &'a [Part<'a>]) -> Source<'a> {
        Source {
            hdr,
            parts,
            at: (0, 0),
        }
    }

    fn part(&self, i: usize) -> Option<Part<'a>> {
        if i == 0 {
            Some(Part::Bytes(self.hdr))
        } else {
            self.parts.get(i - 1).copied()
        }
    }

    /// Copies the next `n` bytes to guest address `to`.
    fn copy(&mut self, mem: &GuestMemoryMmap, mut to: GuestAddress, mut n: usize) -> bool {
        while n > 0 {
            let Some(p) = self.part(self.at.0) else {
                return true;
            };
            let k = (p.len() - self.at.1).min(n);
            if !p.copy(mem, self.at.1, to, k) {
                return false;
            }
            to = to.unchecked_add(k as u64);
            n -= k;
            self.at.1 += k;
            if self.at.1 == p.len() {
                self.at = (self.at.0 + 1, 0);
            }
        }
        true
    }
}

enum Fill {
    Empty,
    Oversize,
    Bad(Violation),
}

/// How many chains one frame took (each `(head, bytes written)` in the
/// caller's `used`), and the guest address of the header.
type Filled = (usize, GuestAddress);

/// Takes RX chains and writes `total` bytes of `src` into their writable
/// buffers: one chain, or as many as it takes with MRG_RXBUF.
fn fill(
    mem: &GuestMemoryMmap,
    q: &mut Queue,
    src: &mut Source<'_>,
    total: usize,
    mrg: bool,
    used: &mut [(u16, u32); RX_BUFS_MAX],
) -> Result<Filled, Fill> {
    if total > FRAME_MAX + HDR_LEN {
        return Err(Fill::Oversize);
    }
    let (mut n, mut done, mut descs) = (0, 0, 0usize);
    let mut first = GuestAddress(0);
    while done < total {
        if n == RX_BUFS_MAX || (n == 1 && !mrg) {
            return Err(Fill::Oversize);
        }
        let chain = match q.iter(mem) {
            Ok(mut it) => it.next().ok_or(Fill::Empty)?,
            Err(_) => return Err(Fill::Bad(Violation::BadAvailIndex)),
        };
        let head = chain.head_index();
        let mut wrote = 0usize;
        let mut more = true;
        for d in chain {
            descs += 1;
            if descs > DESCS_MAX {
                return Err(Fill::Bad(Violation::BadChain));
            }
            if !d.is_write_only() {
                return Err(Fill::Bad(Violation::BadDescriptor));
            }
            if n == 0 && wrote == 0 {
                // The header goes whole into the first buffer.
                if (d.len() as usize) < src.hdr.len() {
                    return Err(Fill::Bad(Violation::BadDescriptor));
                }
                first = d.addr();
            }
            let k = (d.len() as usize).min(total - done);
            if !src.copy(mem, d.addr(), k) {
                return Err(Fill::Bad(Violation::BadDescriptor));
            }
            (wrote, done) = (wrote + k, done + k);
            more = d.has_next();
            if done == total {
                more = false;
                break;
            }
        }
        if more {
            return Err(Fill::Bad(Violation::BadChain));
        }
        used[n] = (head, wrote as u32);
        n += 1;
    }
    Ok((n, first))
}
