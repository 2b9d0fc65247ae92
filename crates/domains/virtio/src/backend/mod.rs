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

use device::{Device, GuestOffloads, FEATURE_NAMES, FRAME_MAX, HDR_LEN, TX};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use virtio_queue::QueueT;

/// Frames one wake-up takes from a VM's TX ring; the rest wait for the
/// next turn of the loop, so one VM cannot starve the others.
pub const TX_BUDGET: usize = 256;

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

/// The live connection: a handle on its socket, to close it.
struct Conn {
    stream: UnixStream,
}

/// One VM vif's backend: its listener, its current connection and its
/// device. The driver loop polls [`Backend::fd`] and calls
/// [`Backend::poll`] when it is readable.
pub struct Backend {
    name: String,
    listener: UnixListener,
    epoll: sys::Epoll,
    wake_rx: sys::Doorbell,
    wake_tx: sys::Doorbell,
    dev: Arc<Mutex<Device>>,
    conn: Option<Conn>,
    /// The loop's own handle on the TX kick registered with `epoll`.
    kick: Option<File>,
    buf: Box<[u8]>,
}

fn lock(m: &Mutex<Device>) -> MutexGuard<'_, Device> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Backend {
    /// Serves vif `name` with MAC `mac` on `listener` (a listening
    /// `AF_UNIX` stream socket, made non-blocking here).
    pub fn new(name: &str, mac: [u8; 6], listener: OwnedFd) -> io::Result<Backend> {
        let listener = UnixListener::from(listener);
        listener.set_nonblocking(true)?;
        let epoll = sys::Epoll::new(8)?;
        let (wake_rx, wake_tx) = sys::Doorbell::pair()?;
        epoll.add(listener.as_fd(), LISTENER)?;
        epoll.add(wake_rx.as_fd(), WAKE)?;
        Ok(Backend {
            name: name.to_string(),
            listener,
            epoll,
            wake_rx,
            wake_tx,
            dev: Arc::new(Mutex::new(Device::new(mac))),
            conn: None,
            kick: None,
            buf: vec![0u8; FRAME_MAX + HDR_LEN].into_boxed_slice(),
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

    /// Services what is ready: new connections, control changes, and up
    /// to [`TX_BUDGET`] frames from the VM's TX ring, each handed to `f`
    /// (the first 10 bytes of its `virtio_net_hdr`, the frame; false if
    /// refused). Never fails for the VM's faults: those close its
    /// connection.
    pub fn poll(&mut self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> io::Result<()> {
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
            // A kick descriptor registered now may have been rung before.
            kicked |= self.sync_kick();
        }
        if kicked {
            self.take_kick();
        }
        let buf = &mut self.buf;
        let mut d = lock(&self.dev);
        let more = d.tx(buf, TX_BUDGET, f);
        let broken = d.broken;
        drop(d);
        if let Some(v) = broken {
            self.close(v.reason());
        } else if more {
            // Work left: stay readable so the loop comes back next turn.
            let _ = self.wake_tx.ring();
        }
        Ok(())
    }

    /// Starts a batch of frames to the VM (the device lock is taken once).
    pub fn receive(&mut self) -> Rx<'_> {
        Rx {
            dev: lock(&self.dev),
            wake: &self.wake_tx,
        }
    }

    /// Takes the frontends waiting; a new connection replaces the old.
    fn accept(&mut self) {
        loop {
            let stream = match self.listener.accept() {
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

    /// Registers the TX ring's current kick descriptor, if it changed;
    /// whether it did.
    fn sync_kick(&mut self) -> bool {
        let mut d = lock(&self.dev);
        if !d.kick_changed {
            return false;
        }
        d.kick_changed = false;
        let new = d.rings[TX].kick.as_ref().map(File::try_clone);
        drop(d);
        if let Some(old) = self.kick.take() {
            let _ = self.epoll.remove(old.as_fd());
        }
        match new {
            None => {}
            Some(Ok(k)) if self.epoll.add(k.as_fd(), KICK).is_ok() => self.kick = Some(k),
            Some(_) => self.close("bad_kick_fd"),
        }
        true
    }

    /// Drains the TX kick. A kick descriptor that hangs up or fails is the
    /// frontend's fault: its connection closes.
    fn take_kick(&mut self) {
        let Some(k) = &self.kick else { return };
        let mut v = [0u8; 8];
        match (&*k).read(&mut v) {
            Ok(n) if n > 0 => lock(&self.dev).counters.kicks += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            _ => self.close("bad_kick_fd"),
        }
    }

    /// The vif's status (`"vhost"` entries of the driver's stats), without
    /// the bridge it is on.
    pub fn status(&self) -> serde_json::Value {
        let d = lock(&self.dev);
        let mac = d.mac.map(|b| format!("{b:02x}")).join(":");
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
            "rx_packets": c.rx_packets,
            "rx_bytes": c.rx_bytes,
            "tx_packets": c.tx_packets,
            "tx_bytes": c.tx_bytes,
            "kicks": c.kicks,
            "calls": c.calls,
            "drops": c.drops,
            "refused": d.refused,
            "disconnects": d.disconnects,
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

/// A batch of frames to the VM, under one take of the device lock; the
/// VM is notified once, when the batch ends.
pub struct Rx<'a> {
    dev: MutexGuard<'a, Device>,
    wake: &'a sys::Doorbell,
}

impl Rx<'_> {
    /// Writes one frame: `vnet` is its `virtio_net_hdr`'s first 10 bytes,
    /// `parts` its bytes, `len` in all. Whether it went (a drop is
    /// counted in the device's status).
    pub fn push(&mut self, vnet: &[u8; 10], parts: &[&[u8]], len: usize) -> bool {
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
        if self.dev.broken.is_some() {
            // The loop closes the connection when it polls the backend.
            let _ = self.wake.ring();
        }
    }
}
