//! The driver domain replacing its program in place (`splitnet upgrade`).
//!
//! The toolstack writes the new program's path at `control/upgrade` in the
//! domain's home, as Xen's toolstack asks a domain to shut down through
//! `control/shutdown`. The driver stops between two turns of its loop,
//! hands every connected vif over (`netback::handover`: responses
//! published, counters and groups written down, rings unmapped, channels
//! left bound) and `execve`s the program in the same process: same pid,
//! same namespaces and jail, same domain id, and the control socket to hv
//! kept open, so hv and the guests see no domain come or go. The new
//! program says [`hypercall::HvClient::resume`] instead of hello, takes
//! the vifs back ([`Driver::resume`]) and its ports from hv, and writes
//! how long the vifs were served by no one at `control/upgrade-result`.
//! An `execve` that fails leaves the old program to take its vifs back.

use super::state::{Driver, DriverError};
use crate::netback::Netback;
use hypercall::{DomId, HvClient};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long frames queued for guests may wait for their buffers before
/// the hand-over drops them.
const DRAIN: Duration = Duration::from_millis(2);

/// Watch token of `control/upgrade`.
pub(super) const UPGRADE: &str = "upgrade";
pub use hypercall::launch::ENV_RESUME;

pub use abi::xenbus::{upgrade_node, upgrade_result_node as result_node};

impl Driver {
    /// `control/upgrade` changed: an absolute path there is the program to
    /// become. Returns only if it could not be run (answered `failed`),
    /// with the vifs taken back.
    pub(super) fn on_upgrade(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let me = hv.domid();
        let exe = match hv.store_read_str(&upgrade_node(me)) {
            Ok(p) if p.starts_with('/') => p,
            _ => return Ok(()),
        };
        let stopped = sys::signals::monotonic_usec();
        let (handed, dropped) = self.hand_over(hv);
        let why = become_program(hv, &exe, stopped, dropped);
        eprintln!("driver: could not run {exe:?}: {why}; this program goes on");
        // The request goes first and the answer last, once the vifs are
        // served again: an upgrade asked after the answer is not lost.
        let _ = hv.store_rm(&upgrade_node(me));
        self.take_back(hv, &handed);
        let _ = hv.store_write(
            &result_node(me),
            &format!("failed: could not run {exe}: {why}; the old program serves on"),
        );
        Ok(())
    }

    /// Hands every connected vif over, dedicated queues given back first;
    /// returns their slots and the frames dropped. Frames
    /// queued for a guest first wait up to [`DRAIN`] for its buffers (it
    /// posts more as it reads what it was given); the ports are not read
    /// meanwhile, so nothing new queues.
    fn hand_over(&mut self, hv: &mut HvClient) -> (Vec<usize>, u64) {
        // Dedicated queues go first: what they hold goes to the vifs, their
        // MACs back to the default queue, whose socket hv keeps, so frames
        // arriving meanwhile wait there for the next program.
        self.service_queues();
        for i in 0..self.vifs.len() {
            self.drop_queue(i, None);
        }
        self.close_queues(hv);
        let deadline = Instant::now() + DRAIN;
        loop {
            let mut queued = 0;
            for v in self
                .vifs
                .iter_mut()
                .filter(|v| !v.gone && v.nb.is_connected())
            {
                if let Err(e) = v.nb.flush_rx(hv) {
                    v.nb.disconnect(hv, &format!("RX failed: {e}"));
                }
                queued += v.nb.rx_queued();
            }
            if queued == 0 || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let (mut handed, mut dropped) = (Vec::new(), 0);
        for (i, v) in self.vifs.iter_mut().enumerate() {
            if v.gone || !v.nb.is_connected() {
                continue;
            }
            for b in v.bells.drain(..) {
                let _ = self.events.epoll.remove(b.as_fd());
            }
            dropped += v.nb.hand_over(hv);
            handed.push(i);
        }
        (handed, dropped)
    }

    /// After a failed `execve`: the vifs `handed` over are taken back in
    /// place, as the next program would have, with their queues; one that
    /// cannot be is closed with the reason, so its frontend does not wait
    /// on no one.
    fn take_back(&mut self, hv: &mut HvClient, handed: &[usize]) {
        for &i in handed {
            let (guest, be) = (self.vifs[i].nb.guest, self.vifs[i].nb.be.clone());
            match Netback::resume(hv, guest, &be) {
                Ok((nb, _)) => {
                    self.vifs[i].bells = self.events.watch_vif(i, &nb);
                    self.vifs[i].nb = nb;
                    self.attach_queue(hv, i);
                }
                Err(e) => {
                    eprintln!("driver: {}: not taken back: {e}", crate::vif_name(&be));
                    crate::netback::give_up(hv, &be, &e);
                }
            }
        }
    }

    /// In the new program: takes over every vif the old one left
    /// Connected (acknowledging options the toolstack changed meanwhile),
    /// reads the uplinks at once, and answers the toolstack with the time
    /// no one served the vifs. A vif that cannot be taken back is closed
    /// with the reason, as one whose frontend broke the protocol is, and
    /// the answer says so.
    pub(super) fn resume(&mut self, hv: &mut HvClient, since: Since) -> Result<(), DriverError> {
        let (connected, probed) = backends(hv, &self.base);
        // Handshakes the old program had begun start again from the probe
        // (features written again, InitWait kept): a hot-plug under way
        // is not lost.
        for (guest, be) in probed {
            super::vifs::pend(hv, guest, &be, &mut self.pending)?;
        }
        let mut lost = Vec::new();
        for (guest, be) in connected {
            if let Err(why) = self.take_over(hv, guest, &be) {
                lost.push(format!("{}: {why}", crate::vif_name(&be)));
            }
        }
        if since.crashed {
            // The dead process's ports for vifs that went meanwhile.
            match hv.evtchn_close_unclaimed() {
                Ok(0) => {}
                Ok(n) => {
                    eprintln!("driver: closed {n} ports of vifs gone while no one served them")
                }
                Err(e) => eprintln!("driver: closing the dead process's other ports: {e}"),
            }
        }
        // Every vif that was connected is back: frames from outside may
        // come (a re-probed vif or a VM reconnecting is not waited for).
        self.ports.release();
        self.ports.reopen(hv, &self.events);
        let me = hv.domid();
        let gap = sys::signals::monotonic_usec().saturating_sub(since.stopped);
        let start = since.started.saturating_sub(since.stopped);
        let answer = if lost.is_empty() {
            format!("ok {gap} {}", since.dropped)
        } else {
            format!(
                "partial {gap} {} the new program could not take back {} (closed; `splitnet restart` reconnects them)",
                since.dropped,
                lost.join("; ")
            )
        };
        let how = if since.crashed {
            "took over from a dead process"
        } else {
            "resumed in place"
        };
        eprintln!(
            "driver: {how} after {gap} µs ({start} µs to start the program, {} µs to take back its ports and vifs): {answer}",
            gap.saturating_sub(start)
        );
        let answer = if !since.crashed {
            answer
        } else {
            // An upgrade whose program died is answered, not run again
            // (the watch registered next fires once at once).
            match hv.store_read_str(&upgrade_node(me)) {
                Ok(exe) => format!("failed: {exe} died during its upgrade; a new process of the program before took the domain over in place"),
                Err(_) => return Ok(()), // no upgrade asked: none waits
            }
        };
        hv.store_rm(&upgrade_node(me))?;
        hv.store_write(&result_node(me), &answer)?;
        Ok(())
    }

    /// Takes vif `be` of `guest` back into a slot of its own; on failure it
    /// is closed with the reason (its ports too), which is returned. Its
    /// backend directory is read in two round trips, not one per key.
    fn take_over(&mut self, hv: &mut HvClient, guest: DomId, be: &str) -> Result<(), String> {
        hv.with_read_ahead(be, |hv| self.take_over_keys(hv, guest, be))
    }

    fn take_over_keys(&mut self, hv: &mut HvClient, guest: DomId, be: &str) -> Result<(), String> {
        let nb = super::vifs::vif_attach(hv, be, &mut self.bridge)
            .map_err(crate::netback::NetbackError::Protocol)
            .and_then(|attach| Ok((attach, Netback::resume(hv, guest, be)?)));
        match nb {
            Ok((attach, (nb, index))) => {
                self.add_vif(hv, nb, attach, index)
                    .map_err(|e| e.to_string())?;
                self.take_options(hv, be);
                Ok(())
            }
            Err(e) => {
                crate::netback::handover::abandon(hv, be);
                crate::netback::give_up(hv, be, &e);
                Err(e.to_string())
            }
        }
    }
}

/// What the old program left for the new one in [`ENV_RESUME`]
/// (`STOPPED DROPPED`), or hv for the successor of one that died
/// (`STOPPED 0 crash`).
#[derive(Debug, Clone, Copy)]
pub struct Since {
    stopped: u64,
    dropped: u64,
    /// When this program read it (its start-up done).
    started: u64,
    /// The old program died: nothing was handed over, and no upgrade
    /// waits for an answer.
    crashed: bool,
}

impl Since {
    /// Reads (and removes) [`ENV_RESUME`]: None when this program was
    /// started, not exec'd by its predecessor.
    pub fn take() -> Option<Since> {
        let v = std::env::var(ENV_RESUME).ok()?;
        std::env::remove_var(ENV_RESUME);
        let mut words = v.split(' ');
        let (a, b) = (words.next()?, words.next()?);
        Some(Since {
            stopped: a.parse().ok()?,
            dropped: b.parse().ok()?,
            started: sys::signals::monotonic_usec(),
            crashed: words.next() == Some("crash"),
        })
    }

    /// Whether this program succeeds one that died (hv started it), not
    /// one that replaced itself (it inherited its jail).
    pub fn crashed(&self) -> bool {
        self.crashed
    }
}

/// The backend directories under `base`, with their guests, whose state
/// is Connected, and InitWait.
type Found = Vec<(DomId, String)>;
fn backends(hv: &mut HvClient, base: &str) -> (Found, Found) {
    let (mut connected, mut probed) = (Vec::new(), Vec::new());
    for (guest, be) in super::vifs::backend_dirs(hv, base) {
        match hv.read_state(&be) {
            Ok(abi::xenbus::XenbusState::Connected) => connected.push((guest, be)),
            Ok(abi::xenbus::XenbusState::InitWait) => probed.push((guest, be)),
            _ => {}
        }
    }
    (connected, probed)
}

/// Replaces this process's program with `exe`, keeping the control socket
/// to hv; returns only on failure, with why.
fn become_program(hv: &HvClient, exe: &str, stopped: u64, dropped: u64) -> String {
    use std::os::unix::process::CommandExt;
    let fd = hv.control_fd();
    if let Err(e) = sys::set_inheritable(fd, true) {
        return format!("keeping the control socket: {e}");
    }
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let e = std::process::Command::new(exe)
        .env(hypercall::launch::ENV_HV_FD, raw.to_string())
        .env(ENV_RESUME, format!("{stopped} {dropped}"))
        .exec();
    let _ = sys::set_inheritable(fd, false);
    e.to_string()
}
