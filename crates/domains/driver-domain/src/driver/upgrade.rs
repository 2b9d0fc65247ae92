//! The driver domain handing its vifs over to a successor process
//! (`splitnet upgrade`).
//!
//! The toolstack first starts the new program as a *standby*: spawned,
//! loaded and jailed in the domain's namespaces, waiting for a control
//! socket. Then it writes [`abi::xenbus::UPGRADE_HANDOVER`] at
//! `control/upgrade` in the domain's home, as Xen's toolstack asks a domain
//! to shut down through `control/shutdown`. The driver stops between two
//! turns of its loop, hands every connected vif over (`netback::handover`:
//! responses published, counters and groups written down, rings unmapped,
//! channels left bound), leaves when it stopped at `control/handed`, and
//! hangs up on hv. hv keeps the domain for a successor
//! (`Hypervisor::revive`), and the toolstack gives the fresh control socket
//! to the standby, which says [`hypercall::HvClient::resume`], takes the
//! vifs back ([`Driver::resume`]) and its ports from hv, and writes how long
//! the vifs were served by no one at `control/upgrade-result`. The new
//! program's start-up lies outside that window. The old process waits to
//! be ended.

use super::state::{Driver, DriverError};
use crate::netback::Netback;
use hypercall::{DomId, HvClient};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long frames queued for guests may wait for their buffers before
/// the hand-over drops them.
const DRAIN: Duration = Duration::from_millis(2);

/// How long the old process, having handed over, waits for the toolstack
/// to end it before it exits on its own, as a crash.
const LINGER: Duration = Duration::from_secs(10);

pub use hypercall::launch::ENV_RESUME;

pub use abi::xenbus::{upgrade_handed_node, upgrade_node, upgrade_result_node as result_node};

impl Driver {
    /// `control/upgrade` changed: asked to hand over, this program hands
    /// every vif over, says when it stopped, hangs up on hv and waits to be
    /// ended (it never returns then). Anything else there is no question.
    pub(super) fn on_upgrade(&mut self, hv: &mut HvClient) -> Result<(), DriverError> {
        let me = hv.domid();
        match hv.store_read_str(&upgrade_node(me)) {
            Ok(v) if v == abi::xenbus::UPGRADE_HANDOVER => {}
            _ => return Ok(()),
        }
        let stopped = sys::signals::monotonic_usec();
        let dropped = self.hand_over(hv);
        let handed = sys::signals::monotonic_usec();
        // Said only while the question stands: a toolstack that gave up
        // removed it, and a late answer would be a node no one removes.
        let asked = hv.store_read_str(&upgrade_node(me));
        let said = match asked {
            Ok(v) if v == abi::xenbus::UPGRADE_HANDOVER => hv.store_write(
                &upgrade_handed_node(me),
                &format!("{stopped} {dropped} {handed}"),
            ),
            _ => Ok(()),
        };
        if let Err(e) = said {
            // The toolstack then lets the domain go to its restart policy.
            eprintln!("driver: writing when it stopped: {e}");
        }
        // Said before hanging up: the toolstack ends this process as soon
        // as hv sees the hang-up.
        eprintln!(
            "driver: handed every vif over in {} µs; waiting to be ended",
            handed - stopped
        );
        hv.hang_up();
        std::thread::sleep(LINGER);
        // No one took the domain: ending as a crash does lets the restart
        // policy bring it back (a clean exit would be a shutdown).
        eprintln!("driver: no successor took the domain within {LINGER:?}; ending as a crash");
        std::process::exit(1);
    }

    /// Hands every connected vif over, dedicated queues given back first;
    /// returns the frames dropped. Frames queued for a guest first wait up
    /// to [`DRAIN`] for its buffers (it posts more as it reads what it was
    /// given); the ports are not read meanwhile, so nothing new queues.
    fn hand_over(&mut self, hv: &mut HvClient) -> u64 {
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
        let mut dropped = 0;
        for v in self.vifs.iter_mut() {
            if v.gone || !v.nb.is_connected() {
                continue;
            }
            for b in v.bells.drain(..) {
                let _ = self.events.epoll.remove(b.as_fd());
            }
            dropped += v.nb.hand_over(hv);
        }
        dropped
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
        // The old process's ports for vifs that went meanwhile.
        match hv.evtchn_close_unclaimed() {
            Ok(0) => {}
            Ok(n) => eprintln!("driver: closed {n} ports of vifs gone while no one served them"),
            Err(e) => eprintln!("driver: closing the old process's other ports: {e}"),
        }
        // Every vif that was connected is back: frames from outside may
        // come (a re-probed vif or a VM reconnecting is not waited for).
        self.ports.release();
        self.ports.reopen(hv, &self.events);
        let me = hv.domid();
        let gap = sys::signals::monotonic_usec().saturating_sub(since.stopped);
        let start = since.started.saturating_sub(since.stopped);
        let handing = since.handed.map_or(String::new(), |h| {
            format!("{} µs to hand over, ", h.saturating_sub(since.stopped))
        });
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
            "driver: {how} after {gap} µs ({handing}{start} µs until this program had the domain, {} µs to take back its ports and vifs): {answer}",
            gap.saturating_sub(start)
        );
        let answer = if !since.crashed {
            answer
        } else {
            // An upgrade whose program died is answered, not run again
            // (the watch registered next fires once at once).
            match hv.store_read_str(&upgrade_node(me)) {
                Ok(_) => "failed: the new program died during the upgrade; a new process of the program before took the domain over in place".to_string(),
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

/// What the old program left for its standby at [`upgrade_handed_node`]
/// (`STOPPED DROPPED HANDED`, relayed by the toolstack), or what hv says
/// in [`ENV_RESUME`] to the successor of one that died (`STOPPED 0 crash`).
#[derive(Debug, Clone, Copy)]
pub struct Since {
    stopped: u64,
    dropped: u64,
    /// When the old program had handed every vif over.
    handed: Option<u64>,
    /// When this program read it (its start-up done).
    started: u64,
    /// The old program died: nothing was handed over, and no upgrade
    /// waits for an answer.
    crashed: bool,
}

impl Since {
    /// Reads (and removes) [`ENV_RESUME`], which hv sets for the
    /// successor of a process that died (`STOPPED 0 crash`): None when
    /// this program was started afresh, or as a standby.
    pub fn take() -> Option<Since> {
        let v = std::env::var(ENV_RESUME).ok()?;
        std::env::remove_var(ENV_RESUME);
        Self::parse(&v)
    }

    /// `STOPPED DROPPED HANDED` from the program before
    /// ([`upgrade_handed_node`]), or `STOPPED 0 crash`; read now.
    pub fn parse(v: &str) -> Option<Since> {
        let mut words = v.split(' ');
        let (a, b) = (words.next()?, words.next()?);
        let third = words.next();
        if words.next().is_some() {
            return None;
        }
        let handed = match third {
            None | Some("crash") => None,
            Some(h) => Some(h.parse().ok()?),
        };
        Some(Since {
            stopped: a.parse().ok()?,
            dropped: b.parse().ok()?,
            handed,
            started: sys::signals::monotonic_usec(),
            crashed: third == Some("crash"),
        })
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

#[cfg(test)]
mod tests {
    use super::Since;

    #[test]
    fn what_the_old_program_left_is_read_or_refused() {
        let s = Since::parse("100 2 150").unwrap();
        assert_eq!(
            (s.stopped, s.dropped, s.handed, s.crashed),
            (100, 2, Some(150), false)
        );
        let s = Since::parse("100 0 crash").unwrap();
        assert_eq!((s.handed, s.crashed), (None, true));
        for junk in ["", "100", "x 0 1", "100 0 later", "100 0 1 2", "100 -1 5"] {
            assert!(Since::parse(junk).is_none(), "{junk:?} was read");
        }
    }
}
