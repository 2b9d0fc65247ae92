//! The vhost-user frontend and virtio-net driver a `nic = "virtio"` guest
//! runs: its "RAM" is a memfd it maps, the split virtqueues (virtio 1.x
//! §2.7; receive = 0, transmit = 1) live in it, and it serves the guest's
//! TAP the way netfront does. rust-vmm's `vhost` crate speaks the protocol
//! messages ([`session`]); the rings' driver side ([`ring`]) and the data
//! path ([`datapath`]) are splitnet's, and treat the backend as hostile:
//! every used entry is checked, and one that breaks the ring ends the
//! connection, counted.
//!
//! A connection that drops (the driver domain restarted) is replaced by a
//! new one, negotiated afresh over new memory: frames in flight are lost,
//! but the TAP and its addresses stay, so the guest's TCP connections
//! survive.

mod datapath;
pub mod features;
pub mod ring;
mod session;
pub mod stats;

pub use session::{MemLayout, QUEUE_SIZE, RX, TX};

use session::Session;
use stats::Counters;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};
use sys::{Epoll, Tap};

/// Why the frontend could not connect or keep going.
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    #[error("vhost-user {0}: {1}")]
    Protocol(&'static str, vhost::Error),
    #[error(
        "the backend offers features {offered:#x}, without VIRTIO_F_VERSION_1; this frontend \
         speaks virtio 1.x only"
    )]
    NoVersion1 { offered: u64 },
    #[error("{0}: {1}")]
    Io(&'static str, io::Error),
    #[error("the backend did not finish the handshake within {0:?}")]
    HandshakeTimeout(std::time::Duration),
}

impl FrontError {
    pub(crate) fn io(what: &'static str, e: io::Error) -> FrontError {
        FrontError::Io(what, e)
    }
}

/// What the loop needs from whoever runs it: hv in a guest domain, a test
/// harness with a socket path otherwise.
pub trait Host {
    /// A new stream socket connected to the backend.
    fn connect(&mut self) -> io::Result<OwnedFd>;
    /// Called about once a second and whenever [`Host::wake_fd`] is
    /// readable: publish the status, take notice of the outside world.
    /// `Ok(false)` ends the loop; an error ends it with that error.
    fn tick(&mut self, nic: &VirtioNet) -> Result<bool, String>;
    /// A descriptor that should wake the loop for a tick (hv's watches).
    fn wake_fd(&self) -> Option<BorrowedFd<'_>>;
}

/// The guest's virtio-net device: its TAP, and the connection to the
/// backend while there is one.
pub struct VirtioNet {
    tap: Tap,
    session: Option<Session>,
    pub counters: Counters,
    last_error: Option<String>,
}

/// How long after a failed connection the next is tried, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How often the host's tick runs while nothing wakes it.
const TICK: Duration = Duration::from_secs(1);
/// Batches per queue in one service round before the loop looks at its
/// other sources again.
const ROUNDS: usize = 16;

/// Event-manager tokens.
const TOKEN_TAP: u64 = 1;
const TOKEN_SOCK: u64 = 2;
const TOKEN_CALL: [u64; 2] = [3, 4];
const TOKEN_WAKE: u64 = 5;

impl VirtioNet {
    /// A device serving `tap`, which must carry a vnet header: it is sized
    /// to virtio 1.x's 12 bytes here.
    pub fn new(tap: Tap) -> Result<VirtioNet, FrontError> {
        tap.set_vnet_hdr_len(features::HDR_LEN)
            .map_err(|e| FrontError::io("the TAP's vnet header", e))?;
        Ok(VirtioNet {
            tap,
            session: None,
            counters: Counters::default(),
            last_error: None,
        })
    }

    pub fn tap(&self) -> &Tap {
        &self.tap
    }

    pub fn is_connected(&self) -> bool {
        self.session.is_some()
    }

    /// Negotiates a device over `stream` and sets the TAP's offloads to
    /// what was agreed. The previous connection, if any, must be gone.
    pub fn connect(&mut self, stream: OwnedFd) -> Result<(), FrontError> {
        debug_assert!(self.session.is_none());
        let s = Session::start(stream).inspect_err(|e| {
            self.counters.connect_failures += 1;
            self.last_error = Some(e.to_string());
        })?;
        self.tap
            .set_offloads(s.features.tap_offloads())
            .map_err(|e| FrontError::io("the TAP's offloads", e))?;
        self.counters.connects += 1;
        self.last_error = None;
        self.session = Some(s);
        Ok(())
    }

    /// Drops the connection, saying why.
    fn disconnect(&mut self, why: String) {
        if self.session.take().is_some() {
            self.counters.disconnects += 1;
            eprintln!("virtio: disconnected: {why}");
            self.last_error = Some(why);
        }
    }

    /// Moves frames both ways until neither direction has more (or the
    /// round's budget ran out: then true, come back at once), and asks for
    /// notifications before sleeping. A ring the backend broke ends the
    /// connection.
    fn service(&mut self) -> bool {
        let Some(s) = self.session.as_mut() else {
            return false;
        };
        let c = &mut self.counters;
        let r = (|| {
            for _ in 0..ROUNDS {
                s.reclaim_tx()?;
                let rx_more = s.rx_to_tap(&self.tap, c)?;
                let tx_more = match s.tap_to_tx(&self.tap, c) {
                    Ok(m) => m && s.rings[TX].free_count() > 0,
                    Err(e) => return Err(Stop::Tap(e)),
                };
                if !rx_more && !tx_more {
                    // Entries that came in while notifications were off
                    // may bring no call: look again before sleeping.
                    let rx_again = s.rings[RX].enable_notify(&s.mem);
                    if !rx_again && !s.arm_tx_notify() {
                        return Ok(false);
                    }
                }
            }
            Ok(true)
        })();
        match r {
            Ok(pending) => pending,
            Err(Stop::Used(e)) => {
                c.broken(&e);
                self.disconnect(format!("the backend broke the ring: {e}"));
                false
            }
            Err(Stop::Tap(e)) => {
                // The TAP is ours; an error on it is worth saying, not fatal.
                eprintln!("virtio: {e}");
                false
            }
        }
    }

    /// The device's status for `splitnet status`: the connection, its
    /// features and rings, and the counters.
    pub fn status(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.counters).unwrap_or_default();
        v["connected"] = self.session.is_some().into();
        v["last_error"] = self.last_error.clone().into();
        if let Some(s) = &self.session {
            v["features"] = format!("{:#x}", s.features.0).into();
            v["feature_names"] = s.features.names().into();
            v["protocol_features"] = format!("{:#x}", s.protocol.bits()).into();
            v["rings"] = s
                .rings
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (next_avail, next_used) = r.positions();
                    serde_json::json!({
                        "index": i, "size": r.layout().size, "held": r.held_count(),
                        "next_avail": next_avail, "next_used": next_used,
                    })
                })
                .collect::<Vec<_>>()
                .into();
        }
        v
    }
}

/// Why a service round stopped early.
enum Stop {
    Used(ring::UsedError),
    Tap(io::Error),
}

impl From<ring::UsedError> for Stop {
    fn from(e: ring::UsedError) -> Stop {
        Stop::Used(e)
    }
}

impl Session {
    /// Transmit completions matter only while the ring is full (the TAP
    /// waits for room); otherwise they are reclaimed in passing. True if
    /// the ring is full and completions came in meanwhile.
    fn arm_tx_notify(&mut self) -> bool {
        let r = &self.rings[TX];
        if r.free_count() == 0 {
            r.enable_notify(&self.mem)
        } else {
            r.disable_notify(&self.mem);
            false
        }
    }
}

/// The loop's handles on a connection's sources, removed from the event
/// manager before the connection's own descriptors close (the backend
/// holds the same open files, so closing ours would not remove them).
struct Registered(Vec<OwnedFd>);

impl Registered {
    fn add(ep: &Epoll, s: &Session) -> io::Result<Registered> {
        let mut own = vec![ep.add_own(s.sock.as_fd(), TOKEN_SOCK)?];
        for q in [RX, TX] {
            own.push(ep.add_own(s.notify[q].call_fd.as_fd(), TOKEN_CALL[q])?);
        }
        Ok(Registered(own))
    }

    fn remove(self, ep: &Epoll) {
        for fd in self.0 {
            let _ = ep.remove(fd.as_fd());
        }
    }
}

/// Serves the device until the host ends it: connects (and reconnects
/// with a growing pause while that fails), moves frames when the TAP or a
/// call says so, and lets the host tick.
pub fn run(nic: &mut VirtioNet, host: &mut dyn Host) -> Result<(), FrontError> {
    let mut ep = Epoll::new(8).map_err(|e| FrontError::io("epoll", e))?;
    let _tap = ep
        .add_own(nic.tap.as_fd(), TOKEN_TAP)
        .map_err(|e| FrontError::io("epoll", e))?;
    let mut tap_armed = true;
    let _wake = match host.wake_fd() {
        Some(fd) => Some(
            ep.add_own(fd, TOKEN_WAKE)
                .map_err(|e| FrontError::io("epoll", e))?,
        ),
        None => None,
    };
    let mut regs: Option<Registered> = None;
    let (mut retry_at, mut backoff) = (Instant::now(), RETRY_FIRST);
    let mut tick_at = Instant::now();
    loop {
        if nic.session.is_none() && Instant::now() >= retry_at {
            if try_connect(nic, host, &ep, &mut regs) {
                backoff = RETRY_FIRST;
            } else {
                retry_at = Instant::now() + backoff;
                backoff = (backoff * 2).min(RETRY_MAX);
            }
        }
        let pending = nic.service();
        if nic.session.is_none() {
            if let Some(r) = regs.take() {
                r.remove(&ep);
            }
        }
        let want_tap = nic
            .session
            .as_ref()
            .is_some_and(|s| s.rings[TX].free_count() > 0);
        if want_tap != tap_armed && ep.set_interest(_tap.as_fd(), TOKEN_TAP, want_tap).is_ok() {
            tap_armed = want_tap;
        }
        let now = Instant::now();
        if now >= tick_at {
            if !host
                .tick(nic)
                .map_err(|e| FrontError::io("host", io::Error::other(e)))?
            {
                return Ok(());
            }
            tick_at = now + TICK;
        }
        let mut due = tick_at;
        if nic.session.is_none() {
            due = due.min(retry_at);
        }
        let timeout = if pending {
            Duration::ZERO
        } else {
            due.saturating_duration_since(now)
        };
        let n = ep
            .wait(Some(timeout))
            .map_err(|e| FrontError::io("epoll", e))?;
        for i in 0..n {
            let Some(e) = ep.event(i) else { break };
            on_event(nic, e.token, &mut tick_at);
        }
    }
}

/// One ready source: a call is cleared (the service round that follows
/// does the work), the socket readable means the backend hung up, a wake
/// brings the tick forward.
fn on_event(nic: &mut VirtioNet, token: u64, tick_at: &mut Instant) {
    match token {
        TOKEN_SOCK => nic.disconnect("the backend hung up".into()),
        TOKEN_WAKE => *tick_at = Instant::now(),
        t if TOKEN_CALL.contains(&t) => {
            if let Some(s) = &nic.session {
                let q = if t == TOKEN_CALL[RX] { RX } else { TX };
                if s.take_call(q) {
                    nic.counters.calls += 1;
                }
            }
        }
        _ => {}
    }
}

/// One connection attempt; true if the device is up.
fn try_connect(
    nic: &mut VirtioNet,
    host: &mut dyn Host,
    ep: &Epoll,
    regs: &mut Option<Registered>,
) -> bool {
    let stream = match host.connect() {
        Ok(s) => s,
        Err(e) => {
            nic.counters.connect_failures += 1;
            nic.last_error = Some(format!("connecting: {e}"));
            return false;
        }
    };
    if let Err(e) = nic.connect(stream) {
        eprintln!("virtio: {e}");
        return false;
    }
    let s = nic.session.as_ref().expect("just connected");
    eprintln!(
        "virtio: connected (features {:?}, protocol {:?})",
        s.features.names(),
        s.protocol
    );
    match Registered::add(ep, s) {
        Ok(r) => {
            *regs = Some(r);
            true
        }
        Err(e) => {
            nic.disconnect(format!("registering the connection: {e}"));
            false
        }
    }
}
