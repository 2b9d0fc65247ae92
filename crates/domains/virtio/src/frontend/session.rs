//! One vhost-user connection: the handshake (vhost-user protocol,
//! "Starting the device"), done with rust-vmm's `vhost` frontend, over a
//! fresh guest memory whose layout follows the negotiated features.
//!
//! Each connection gets new memory: a backend that went away (a driver
//! domain killed and restarted) keeps no mapping of the rings the next one
//! uses, so whatever it still does cannot reach them.

use super::features::{Features, HDR_LEN};
use super::ring::{DriverRing, QueueLayout, DESC_F_WRITE};
use super::FrontError;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use sys::{Mapping, Memfd, PAGE_SIZE};
use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Entries per virtqueue.
pub const QUEUE_SIZE: u16 = 256;
/// The receive queue (virtio 1.x §5.1.2).
pub const RX: usize = 0;
/// The transmit queue.
pub const TX: usize = 1;
/// The address the backend is told guest memory is mapped at in the
/// frontend (vhost-user's "user address", in which the ring addresses are
/// given). Any value works; one unlike the guest-physical addresses (which
/// start at 0) shows a backend mixing the two up at once.
const USER_BASE: u64 = 0x1000_0000_0000;
/// How long a backend may take for the whole handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame with TCP segmentation offload: 64 KiB of IP packet,
/// an Ethernet header with a VLAN tag, and the virtio header.
const TSO_FRAME: usize = 65_536 + 18 + HDR_LEN;
/// A buffer for a frame of MTU 1500 with a VLAN tag and the header.
const SMALL_BUF: usize = 2048;
/// A receive buffer when frames may span several (MRG_RXBUF) but none is
/// larger than an MTU-sized one (no GUEST_TSO).
const MERGE_BUF: usize = PAGE_SIZE;

/// Where everything lies in the guest memory of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemLayout {
    pub queues: [QueueLayout; 2],
    pub rx_bufs: usize,
    pub rx_buf_len: usize,
    pub tx_bufs: usize,
    pub tx_buf_len: usize,
    pub size: usize,
}

impl MemLayout {
    /// The layout for features `f`: receive buffers large enough for a
    /// whole TSO frame with GUEST_TSO (§5.1.6.3.1), so that each frame takes
    /// one chain, with or without MRG_RXBUF (page-sized buffers made the
    /// device walk 16 chains for a 64 KiB frame); without GUEST_TSO a page
    /// each with MRG_RXBUF, else one MTU-sized frame. Transmit buffers are
    /// large enough for what the offloads let the TAP hand over.
    pub fn for_features(f: Features) -> MemLayout {
        let (rx, end) = QueueLayout::at(0, QUEUE_SIZE);
        let (tx, end) = QueueLayout::at(end, QUEUE_SIZE);
        let rx_buf_len = match (f.guest_tso(), f.mrg_rxbuf()) {
            (true, _) => TSO_FRAME.next_multiple_of(PAGE_SIZE),
            (false, true) => MERGE_BUF,
            (false, false) => SMALL_BUF,
        };
        let tx_buf_len = if f.host_tso() {
            TSO_FRAME.next_multiple_of(PAGE_SIZE)
        } else {
            SMALL_BUF
        };
        let n = usize::from(QUEUE_SIZE);
        let rx_bufs = end;
        let tx_bufs = rx_bufs + n * rx_buf_len;
        let size = (tx_bufs + n * tx_buf_len).next_multiple_of(PAGE_SIZE);
        MemLayout {
            queues: [rx, tx],
            rx_bufs,
            rx_buf_len,
            tx_bufs,
            tx_buf_len,
            size,
        }
    }

    /// Offset of buffer `id` of queue `q`.
    pub fn buf(&self, q: usize, id: u16) -> usize {
        let (base, len) = self.buf_area(q);
        base + usize::from(id) * len
    }

    /// Length of a buffer of queue `q`.
    pub fn buf_len(&self, q: usize) -> usize {
        self.buf_area(q).1
    }

    fn buf_area(&self, q: usize) -> (usize, usize) {
        if q == RX {
            (self.rx_bufs, self.rx_buf_len)
        } else {
            (self.tx_bufs, self.tx_buf_len)
        }
    }
}

/// Ends a handshake that runs out of time: the `vhost` crate's receive
/// blocks until a whole reply comes (it retries a receive timeout), so a
/// backend that never answers is cut off by shutting the socket down from
/// a thread of the watchdog's own, which the receive then sees as a short
/// message.
struct Watchdog {
    state: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    fn arm(stream: &UnixStream, limit: Duration) -> Result<Watchdog, FrontError> {
        let sock = stream
            .try_clone()
            .map_err(|e| FrontError::io("dup(socket)", e))?;
        let state = Arc::new((Mutex::new(false), Condvar::new()));
        let s2 = state.clone();
        let thread = std::thread::Builder::new()
            .name("vhost-handshake".into())
            .spawn(move || {
                let (done, cv) = &*s2;
                let guard = done.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cv
                    .wait_timeout_while(guard, limit, |d| !*d)
                    .unwrap_or_else(|p| p.into_inner());
                let fired = !*guard;
                if fired {
                    let _ = sock.shutdown(std::net::Shutdown::Both);
                }
                fired
            })
            .map_err(|e| FrontError::io("the handshake's watchdog", e))?;
        Ok(Watchdog { state, thread })
    }

    /// Stops the watchdog; true if it had already cut the handshake off.
    fn disarm(self) -> bool {
        let (done, cv) = &*self.state;
        *done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_one();
        self.thread.join().unwrap_or(true)
    }
}

/// One virtqueue's notifications: the kick the driver writes, the call the
/// backend writes, and the loop's own handle on the call.
pub struct Notifiers {
    pub kick: EventFd,
    pub call: EventFd,
    pub call_fd: OwnedFd,
}

impl Notifiers {
    fn new() -> Result<Notifiers, FrontError> {
        let ev = || EventFd::new(EFD_NONBLOCK).map_err(|e| FrontError::io("eventfd", e));
        let (kick, call) = (ev()?, ev()?);
        let call_fd = sys::dup_fd(&call).map_err(|e| FrontError::io("dup(eventfd)", e))?;
        Ok(Notifiers {
            kick,
            call,
            call_fd,
        })
    }
}

/// A negotiated connection with its memory and rings.
pub struct Session {
    pub conn: Frontend,
    /// The loop's handle on the socket: readable means the backend hung
    /// up (or spoke out of turn, which ends the connection too).
    pub sock: OwnedFd,
    pub mem: Mapping,
    _memfd: Memfd,
    pub lay: MemLayout,
    pub features: Features,
    pub protocol: VhostUserProtocolFeatures,
    pub rings: [DriverRing; 2],
    pub notify: [Notifiers; 2],
}

impl Session {
    /// Negotiates a device over `stream` (connected to the backend) and
    /// starts both queues with every receive buffer offered.
    /// A backend has [`HANDSHAKE_TIMEOUT`] for all of it.
    pub fn start(stream: OwnedFd) -> Result<Session, FrontError> {
        let sock = stream
            .try_clone()
            .map_err(|e| FrontError::io("dup(socket)", e))?;
        let stream = UnixStream::from(stream);
        let dog = Watchdog::arm(&stream, HANDSHAKE_TIMEOUT)?;
        let r = Session::negotiate(stream, sock);
        if dog.disarm() {
            return Err(FrontError::HandshakeTimeout(HANDSHAKE_TIMEOUT));
        }
        r
    }

    fn negotiate(stream: UnixStream, sock: OwnedFd) -> Result<Session, FrontError> {
        let mut conn = Frontend::from_stream(stream, 2);
        let step = |what: &'static str| move |e| FrontError::Protocol(what, e);
        conn.set_owner().map_err(step("SET_OWNER"))?;
        let offered = conn.get_features().map_err(step("GET_FEATURES"))?;
        let features = Features::accept(offered).ok_or(FrontError::NoVersion1 { offered })?;
        let protocol = if features.protocol() {
            let want = VhostUserProtocolFeatures::REPLY_ACK;
            let p = conn
                .get_protocol_features()
                .map_err(step("GET_PROTOCOL_FEATURES"))?
                & want;
            conn.set_protocol_features(p)
                .map_err(step("SET_PROTOCOL_FEATURES"))?;
            if p.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                conn.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
            p
        } else {
            VhostUserProtocolFeatures::empty()
        };
        conn.set_features(features.0)
            .map_err(step("SET_FEATURES"))?;
        let lay = MemLayout::for_features(features);
        let memfd = Memfd::create("virtio-guest-ram", lay.size, false)
            .map_err(|e| FrontError::io("memfd", e))?;
        let mem = Mapping::new(memfd.as_fd(), 0, lay.size, true)
            .map_err(|e| FrontError::io("mmap", e))?;
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: lay.size as u64,
            userspace_addr: USER_BASE,
            mmap_offset: 0,
            mmap_handle: memfd.as_fd().as_raw_fd(),
        };
        conn.set_mem_table(&[region])
            .map_err(step("SET_MEM_TABLE"))?;
        let rings = [
            DriverRing::new(&mem, lay.queues[RX], features.event_idx()),
            DriverRing::new(&mem, lay.queues[TX], features.event_idx()),
        ];
        let notify = [Notifiers::new()?, Notifiers::new()?];
        let mut s = Session {
            conn,
            sock,
            mem,
            _memfd: memfd,
            lay,
            features,
            protocol,
            rings,
            notify,
        };
        s.write_descriptors();
        s.refill_rx();
        for q in [RX, TX] {
            s.start_queue(q)?;
        }
        Ok(s)
    }

    /// Every descriptor names its own buffer, for good: receive buffers
    /// whole and device-writable, transmit buffers with their length set
    /// per frame.
    fn write_descriptors(&self) {
        for q in [RX, TX] {
            let (len, flags) = if q == RX {
                (self.lay.rx_buf_len as u32, DESC_F_WRITE)
            } else {
                (0, 0)
            };
            for id in 0..QUEUE_SIZE {
                let addr = self.lay.buf(q, id) as u64;
                self.rings[q].set_desc(&self.mem, id, addr, len, flags);
            }
        }
    }

    /// Offers every free receive buffer; returns whether to kick.
    pub fn refill_rx(&mut self) -> bool {
        let r = &mut self.rings[RX];
        while let Some(id) = r.take_free() {
            r.offer(&self.mem, id);
        }
        r.publish(&self.mem)
    }

    /// SET_VRING_NUM, _BASE, _ADDR, _KICK, _CALL, then _ENABLE (with
    /// protocol features, rings start disabled).
    fn start_queue(&mut self, q: usize) -> Result<(), FrontError> {
        let step = |what: &'static str| move |e| FrontError::Protocol(what, e);
        let lay = self.lay.queues[q];
        let c = &mut self.conn;
        c.set_vring_num(q, lay.size)
            .map_err(step("SET_VRING_NUM"))?;
        c.set_vring_base(q, 0).map_err(step("SET_VRING_BASE"))?;
        let addr = |off: usize| USER_BASE + off as u64;
        let cfg = VringConfigData {
            queue_max_size: lay.size,
            queue_size: lay.size,
            flags: 0,
            desc_table_addr: addr(lay.desc),
            used_ring_addr: addr(lay.used),
            avail_ring_addr: addr(lay.avail),
            log_addr: None,
        };
        c.set_vring_addr(q, &cfg).map_err(step("SET_VRING_ADDR"))?;
        c.set_vring_kick(q, &self.notify[q].kick)
            .map_err(step("SET_VRING_KICK"))?;
        c.set_vring_call(q, &self.notify[q].call)
            .map_err(step("SET_VRING_CALL"))?;
        if self.features.protocol() {
            c.set_vring_enable(q, true)
                .map_err(step("SET_VRING_ENABLE"))?;
        }
        Ok(())
    }

    /// Kicks queue `q` (the device asked for it).
    pub fn kick(&self, q: usize) {
        // A full eventfd counter still wakes the device; nothing to do.
        let _ = self.notify[q].kick.write(1);
    }

    /// Clears queue `q`'s call; whether it had been signalled.
    pub fn take_call(&self, q: usize) -> bool {
        self.notify[q].call.read().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fit_their_frames() {
        let plain = MemLayout::for_features(Features::accept(1 << 32).unwrap());
        assert_eq!((plain.rx_buf_len, plain.tx_buf_len), (SMALL_BUF, SMALL_BUF));
        let all = MemLayout::for_features(Features::accept(u64::MAX).unwrap());
        assert!(all.rx_buf_len >= TSO_FRAME);
        let mrg = 1 << virtio_bindings::virtio_net::VIRTIO_NET_F_MRG_RXBUF;
        let merge = Features::accept((1 << 32) | mrg).unwrap();
        assert_eq!(MemLayout::for_features(merge).rx_buf_len, MERGE_BUF);
        assert!(all.tx_buf_len >= TSO_FRAME);
        assert_eq!(all.buf(RX, 0), all.rx_bufs);
        assert_eq!(all.buf(TX, 1), all.tx_bufs + all.tx_buf_len);
        assert!(all.buf(TX, QUEUE_SIZE - 1) + all.tx_buf_len <= all.size);
        assert!(all.queues[TX].desc >= all.queues[RX].used);
        assert!(all.rx_bufs >= all.queues[TX].used);
    }
}
