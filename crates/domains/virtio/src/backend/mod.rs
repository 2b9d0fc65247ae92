//! The vhost-user net backend the driver domain runs for each VM vif.
//!
//! What the rust-vmm crates give, and what splitnet adds:
//! - `vhost` (backend side): the protocol. `BackendReqHandler` reads each
//!   message with its descriptors, checks sizes, versions and the
//!   descriptors a message may carry, and answers (REPLY_ACK included).
//!   splitnet's [`control::Handler`] decides on the content: the features
//!   offered, the memory table (validated before it is mapped), ring
//!   layout, start and stop (`GET_VRING_BASE`/`SET_VRING_BASE`), config
//!   space, and which messages are refused (the connection then closes,
//!   the reason counted).
//! - `vm-memory`: the mappings of the VM's memory and bounds-checked copies
//!   in and out of it.
//! - `virtio-queue`: the split rings, descriptor chains (bounded by the
//!   ring size), the `avail` index check, EVENT_IDX notification
//!   suppression.
//! - splitnet: one control thread per connection (a stalled frontend
//!   stalls only it), the device state shared with the driver loop under a
//!   lock no other VM's traffic takes, one pollable descriptor for the loop
//!   (an inner epoll of the listener, the TX kick and the control thread's
//!   wake-ups), the frame copies with no allocation per frame, a budget
//!   per wake-up, and counters for every drop and refusal.
//!   `vhost-user-backend`'s daemon is not used: it runs worker threads of
//!   its own, where splitnet moves every VM's frames in the one driver loop.

pub mod control;
pub mod device;
mod storm;

pub use device::Part;
use device::{Device, GuestOffloads, FEATURE_NAMES, HDR_LEN, TX, TX_SLOT};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use virtio_queue::QueueT;

/// Frames one wake-up takes from a VM's TX ring; the rest wait for the
/// next turn of the loop, so one VM cannot starve the others.
pub const TX_BUDGET: usize = 256;
/// Frames handed on together from a VM's TX ring (one `sendmmsg` to a
/// port), each in a slot of its own: about 1 MiB per VM vif.
pub const TX_SLOTS: usize = 16;
/// Connections accepted per wake-up, at most.
const ACCEPTS_PER_POLL: usize = 4;

/// A frame from a VM's TX ring: the first 10 bytes of its
/// `virtio_net_hdr`, and the frame.
#[derive(Debug, Clone, Copy)]
pub struct TxFrame<'a> {
    pub hdr: &'a [u8],
    pub frame: &'a [u8],
    /// The VM negotiated HOST_USO: it may send UDP GSO frames.
    pub uso: bool,
}

/// The frames of a TX batch the port dropped (bit k for frame k), by why.
/// Neither is work: a kick that brought only these is spurious.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    /// Its `virtio_net_hdr` was refused.
    pub bad_header: u64,
    /// Its source MAC is not the VM's.
    pub spoofed: u64,
}

impl Refused {
    fn any(self) -> u64 {
        self.bad_header | self.spoofed
    }
}

const LISTENER: u64 = 0;
const WAKE: u64 = 1;
const KICK: u64 = 2;

/// The control thread's wake-up: a doorbell into the backend's epoll.
struct Bell(sys::Doorbell);

impl control::Wake for Bell {
    fn wake(&self) {
        let _ = self.0.ring();
    }
}

/// Writes the VM's call eventfds for the driver loop, in a thread of its
/// own: an eventfd write blocks when its counter is full and O_NONBLOCK is
/// off, and the VM shares (and can clear) that flag, so only this thread
/// may wait on it. The loop hands it rings to call through a doorbell,
/// which never blocks.
struct Caller {
    bell: sys::Doorbell,
    pending: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl Caller {
    fn start(name: &str, calls: device::Calls) -> io::Result<Caller> {
        let (waiter, bell) = sys::Doorbell::pair()?;
        let pending = Arc::new(AtomicU8::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (pending.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("vhost-call-{name}"))
            .spawn(move || call_loop(&waiter, &p, &s, &calls))?;
        Ok(Caller {
            bell,
            pending,
            stop,
        })
    }

    /// Has rings `bits` called.
    fn call(&self, bits: u8) {
        if bits != 0 {
            self.pending.fetch_or(bits, Ordering::Release);
            let _ = self.bell.ring();
        }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.bell.ring();
    }
}

/// The caller thread: each ring of the doorbell, writes the call eventfd
/// of each ring asked for.
fn call_loop(waiter: &sys::Doorbell, pending: &AtomicU8, stop: &AtomicBool, calls: &device::Calls) {
    while waiter.wait(None).is_ok() && !stop.load(Ordering::Acquire) {
        let bits = pending.swap(0, Ordering::AcqRel);
        // Handles taken under the lock, written without it.
        let files = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (q, f) in files.iter().enumerate() {
            if let Some(f) = f.as_ref().filter(|_| bits & (1 << q) != 0) {
                let _ = (&**f).write(&1u64.to_ne_bytes());
            }
        }
    }
}

/// The live connection: a handle on its socket, to close it.
struct Conn {
    stream: UnixStream,
}

/// One VM vif's backend: its listener (none when the VM listens and hv
/// dialed it), its current connection and its device. The driver loop
/// polls [`Backend::fd`] and calls [`Backend::poll`] when it is readable.
pub struct Backend {
    name: String,
    listener: Option<UnixListener>,
    epoll: sys::Epoll,
    wake_rx: sys::Doorbell,
    wake_tx: sys::Doorbell,
    dev: Arc<Mutex<Device>>,
    conn: Option<Conn>,
    caller: Caller,
    /// The loop's own handle on the TX kick registered with `epoll`.
    kick: Option<File>,
    /// The VM's kicks that found nothing posted ([`storm`]).
    storm: domain_common::storm::Storm,
    /// [`TX_SLOTS`] slots of [`TX_SLOT`] bytes the TX ring's frames are
    /// copied into.
    slab: Box<[u8]>,
}

fn lock(m: &Mutex<Device>) -> MutexGuard<'_, Device> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Backend {
    /// Serves vif `name` with MAC `mac` on `listener` (a listening
    /// `AF_UNIX` stream socket, made non-blocking here).
    /// A `guest` (a splitnet domain) must hand memory sealed against
    /// shrinking; a VM's VMM (the host's own process) may not be able to.
    pub fn new(name: &str, mac: [u8; 6], guest: bool, listener: OwnedFd) -> io::Result<Backend> {
        let listener = UnixListener::from(listener);
        listener.set_nonblocking(true)?;
        Self::build(name, mac, guest, Some(listener))
    }

    /// Serves vif `name` with MAC `mac` on `conn`, a connection hv made to
    /// the socket the VM listens on. When it ends, [`Backend::hung_up`]
    /// says so: a new connection is a new backend.
    pub fn dialed(name: &str, mac: [u8; 6], guest: bool, conn: OwnedFd) -> io::Result<Backend> {
        let mut b = Self::build(name, mac, guest, None)?;
        b.start(UnixStream::from(conn))?;
        Ok(b)
    }

    fn build(
        name: &str,
        mac: [u8; 6],
        guest: bool,
        listener: Option<UnixListener>,
    ) -> io::Result<Backend> {
        let epoll = sys::Epoll::new(8)?;
        let (wake_rx, wake_tx) = sys::Doorbell::pair()?;
        if let Some(l) = &listener {
            epoll.add(l.as_fd(), LISTENER)?;
        }
        epoll.add(wake_rx.as_fd(), WAKE)?;
        let mut dev = Device::new(mac);
        dev.require_sealed = guest;
        let caller = Caller::start(name, dev.calls.clone())?;
        Ok(Backend {
            name: name.to_string(),
            listener,
            epoll,
            wake_rx,
            wake_tx,
            dev: Arc::new(Mutex::new(dev)),
            conn: None,
            caller,
            kick: None,
            storm: domain_common::storm::Storm::default(),
            slab: vec![0u8; TX_SLOTS * TX_SLOT].into_boxed_slice(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Readable when a frontend connects, kicks its TX ring, or the
    /// control thread changed something.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// What the VM takes on receive.
    pub fn guest_offloads(&self) -> GuestOffloads {
        lock(&self.dev).guest_offloads()
    }

    /// Whether a frontend is connected.
    pub fn connected(&self) -> bool {
        lock(&self.dev).connected
    }

    /// A backend on a dialed connection whose connection ended (the VM
    /// hung up, or broke the protocol): it has nothing left to serve.
    pub fn hung_up(&self) -> bool {
        self.listener.is_none() && !self.connected()
    }

    /// Whether a frontend that connected is still setting up its receive
    /// ring (frames for the VM cannot be delivered yet, but soon will).
    pub fn setting_up(&self) -> bool {
        let d = lock(&self.dev);
        d.connected && !virtio_queue::QueueT::ready(&d.rings[device::RX].queue)
    }

    /// Services what is ready: new connections, control changes, and up
    /// to [`TX_BUDGET`] frames from the VM's TX ring, handed to `f` one at
    /// a time (the first 10 bytes of its `virtio_net_hdr`, the frame;
    /// false if its header is refused). See [`Backend::poll_batch`].
    pub fn poll(&mut self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> io::Result<()> {
        self.poll_batch(&mut |frames| {
            let mut refused = Refused::default();
            for (k, t) in frames.iter().enumerate() {
                if !f(t.hdr, t.frame) {
                    refused.bad_header |= 1 << k;
                }
            }
            refused
        })
    }

    /// Services what is ready: new connections, control changes, and up
    /// to [`TX_BUDGET`] frames from the VM's TX ring, handed to `f` in
    /// batches of up to [`TX_SLOTS`] (each copied once, into a slot of its
    /// own), outside the device lock. `f` answers with the frames it
    /// dropped, counted by why ([`Refused`]) and not as work. Never fails
    /// for the VM's faults: those close its connection.
    pub fn poll_batch(&mut self, f: &mut dyn FnMut(&[TxFrame<'_>]) -> Refused) -> io::Result<()> {
        let kicked = self.events()?;
        let (mut taken, mut passed) = (0, 0);
        let mut more = true;
        while more && taken < TX_BUDGET {
            let mut lens = [0usize; TX_SLOTS];
            let (n, hdr_len, uso) = {
                let mut d = lock(&self.dev);
                let (n, chains, m) = d.tx(&mut self.slab, &mut lens);
                more = m && d.broken.is_none();
                // The budget counts chains, refused ones too.
                taken += chains;
                let uso = d.has(1 << virtio_bindings::virtio_net::VIRTIO_NET_F_HOST_USO);
                (n, d.hdr_len(), uso)
            };
            if n == 0 {
                continue;
            }
            let empty = TxFrame {
                hdr: &[],
                frame: &[],
                uso,
            };
            let mut frames = [empty; TX_SLOTS];
            for (k, (t, &len)) in frames.iter_mut().zip(&lens[..n]).enumerate() {
                let slot = &self.slab[k * TX_SLOT..k * TX_SLOT + len];
                *t = TxFrame {
                    hdr: &slot[..HDR_LEN - 2],
                    frame: &slot[hdr_len..],
                    uso,
                };
            }
            let refused = f(&frames[..n]);
            passed += n - refused.any().count_ones() as usize;
            let mut d = lock(&self.dev);
            for (k, t) in frames[..n].iter().enumerate() {
                if refused.bad_header & (1 << k) != 0 {
                    d.counters.drops.bad_header += 1;
                } else if refused.spoofed & (1 << k) != 0 {
                    d.counters.drops.spoofed += 1;
                } else {
                    d.counters.tx_packets += 1;
                    d.counters.tx_bytes += t.frame.len() as u64;
                }
            }
        }
        if kicked {
            // Chains whose frames were all refused are no work either.
            self.judge_kick(passed > 0);
        }
        let mut d = lock(&self.dev);
        let broken = d.broken;
        let calls = d.take_calls();
        drop(d);
        self.caller.call(calls);
        if let Some(v) = broken {
            self.close(v.reason());
        } else if more && self.storm.due().is_none() {
            // Work left: stay readable so the loop comes back next turn
            // (a throttled ring waits for its delay to end instead).
            let _ = self.wake_tx.ring();
        }
        Ok(())
    }

    /// Takes the backend's own events: new connections, the control
    /// thread's changes, and the TX kick; whether the VM kicked.
    fn events(&mut self) -> io::Result<bool> {
        let n = self.epoll.wait(Some(Duration::ZERO))?;
        let (mut accept, mut changed, mut kicked) = (false, false, false);
        for i in 0..n {
            match self.epoll.event(i).map(|e| e.token) {
                Some(LISTENER) => accept = true,
                Some(WAKE) => changed = true,
                Some(KICK) => kicked = true,
                _ => {}
            }
        }
        if changed {
            self.wake_rx.drain()?;
        }
        if accept {
            self.accept();
        }
        if changed || accept {
            self.sync_kick();
        }
        if kicked {
            lock(&self.dev).counters.kicks += 1;
        }
        Ok(kicked)
    }

    /// Starts a batch of frames to the VM (the device lock is taken once).
    pub fn receive(&mut self) -> Rx<'_> {
        Rx {
            dev: lock(&self.dev),
            wake: &self.wake_tx,
            caller: &self.caller,
        }
    }

    /// Takes the frontends waiting; a new connection replaces the old.
    fn accept(&mut self) {
        // A few per wake-up: a frontend connecting in a loop costs the
        // driver loop a bounded share, the rest wait in the backlog.
        for _ in 0..ACCEPTS_PER_POLL {
            let Some(accepted) = self.listener.as_ref().map(UnixListener::accept) else {
                return;
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    eprintln!("vhost {}: accept: {e}", self.name);
                    return;
                }
            };
            self.drop_conn();
            if let Err(e) = self.start(stream) {
                eprintln!("vhost {}: cannot serve a connection: {e}", self.name);
                lock(&self.dev).refuse("no_thread");
            }
        }
    }

    /// Serves `stream` in a control thread of its own.
    fn start(&mut self, stream: UnixStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        let handle = stream.try_clone()?;
        let bell = Bell(self.wake_tx.try_clone()?);
        let conn = {
            let mut d = lock(&self.dev);
            d.conn += 1;
            d.connected = true;
            d.reset();
            d.conn
        };
        let dev = self.dev.clone();
        std::thread::Builder::new()
            .name(format!("vhost-{}", self.name))
            .spawn(move || control::serve(stream, dev, conn, bell))?;
        self.conn = Some(Conn { stream: handle });
        Ok(())
    }

    /// Ends the current connection, if any: its thread stops at its next
    /// read, and finds the device no longer its own.
    fn drop_conn(&mut self) {
        if let Some(c) = self.conn.take() {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        let mut d = lock(&self.dev);
        d.conn += 1;
        d.connected = false;
        d.reset();
        drop(d);
        self.sync_kick();
    }

    /// Closes the connection for a violation, counting it.
    fn close(&mut self, reason: &str) {
        eprintln!("vhost {}: closing the connection: {reason}", self.name);
        lock(&self.dev).refuse(reason);
        self.drop_conn();
    }

    /// Registers the TX ring's current kick descriptor, if it changed,
    /// edge-triggered: the loop never reads it (a read of an eventfd whose
    /// O_NONBLOCK the VM cleared could block the loop), and a kick rung
    /// before is covered by the TX pass every poll makes anyway.
    fn sync_kick(&mut self) {
        let mut d = lock(&self.dev);
        if !d.kick_changed {
            return;
        }
        d.kick_changed = false;
        let new = d.rings[TX].kick.as_ref().map(File::try_clone);
        drop(d);
        if let Some(old) = self.kick.take() {
            let _ = self.epoll.remove(old.as_fd());
        }
        match new {
            None => {}
            Some(Ok(k)) if self.epoll.add_edge(k.as_fd(), KICK).is_ok() => self.kick = Some(k),
            Some(_) => self.close("bad_kick_fd"),
        }
    }

    /// The vif's status (`"vhost"` entries of the driver's stats), without
    /// the bridge it is on.
    pub fn status(&self) -> serde_json::Value {
        let d = lock(&self.dev);
        let mac = abi::xenbus::mac_text(&d.mac);
        let names: Vec<&str> = FEATURE_NAMES
            .iter()
            .filter(|(b, _)| d.features & b != 0)
            .map(|(_, n)| *n)
            .collect();
        let rings: Vec<serde_json::Value> = d
            .rings
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "index": i,
                    "size": r.queue.size(),
                    "enabled": r.queue.ready(),
                    "next_avail": r.queue.next_avail(),
                    "next_used": r.queue.next_used(),
                })
            })
            .collect();
        let c = &d.counters;
        serde_json::json!({
            "name": self.name,
            "mac": mac,
            "connected": d.connected,
            "features": format!("{:#x}", d.features),
            "feature_names": names,
            "protocol_features": format!("{:#x}", d.protocol_features),
            "rings": rings,
            "memory_sealed": d.memory_sealed,
            "rx_packets": c.rx_packets,
            "rx_bytes": c.rx_bytes,
            "tx_packets": c.tx_packets,
            "tx_bytes": c.tx_bytes,
            "kicks": c.kicks,
            "spurious_kicks": c.spurious_kicks,
            "kick_throttles": c.kick_throttles,
            "calls": c.calls,
            "drops": c.drops,
            "refused": d.refused,
            "disconnects": d.disconnects,
            "ignored_messages": d.ignored,
        })
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Most byte slices one [`Rx::push`] takes.
const PUSH_PARTS: usize = 8;

/// A batch of frames to the VM, under one take of the device lock; the
/// VM is notified once, when the batch ends.
pub struct Rx<'a> {
    dev: MutexGuard<'a, Device>,
    wake: &'a sys::Doorbell,
    caller: &'a Caller,
}

impl Rx<'_> {
    /// Writes one frame: `vnet` is its `virtio_net_hdr`'s first 10 bytes,
    /// `parts` its bytes, `len` in all. Whether it went (a drop is
    /// counted in the device's status).
    pub fn push(&mut self, vnet: &[u8; 10], parts: &[&[u8]], len: usize) -> bool {
        let mut p = [Part::Bytes(&[]); PUSH_PARTS];
        if parts.len() > PUSH_PARTS {
            return false;
        }
        for (d, s) in p.iter_mut().zip(parts) {
            *d = Part::Bytes(s);
        }
        self.dev.rx(vnet, &p[..parts.len()], len)
    }

    /// As [`Rx::push`], with pieces that may lie in a shared mapping
    /// (copied straight into the VM's buffers, no bounce).
    pub fn push_parts(&mut self, vnet: &[u8; 10], parts: &[Part<'_>], len: usize) -> bool {
        self.dev.rx(vnet, parts, len)
    }

    /// What the VM takes on receive.
    pub fn offloads(&self) -> GuestOffloads {
        self.dev.guest_offloads()
    }
}

impl Drop for Rx<'_> {
    fn drop(&mut self) {
        self.dev.rx_done();
        self.caller.call(self.dev.take_calls());
        if self.dev.broken.is_some() {
            // The loop closes the connection when it polls the backend.
            let _ = self.wake.ring();
        }
    }
}
