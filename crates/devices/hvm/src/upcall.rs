//! Xen's two-hop wake of the device model (Zhang & Dong §4.2, probes 5–7):
//! hv's event channel interrupts dom0's kernel, whose event-channel upcall
//! handler marks the port pending and wakes the device-model process
//! blocked in `select`; only then does the device model run. Here dom0's
//! upcall handler is a thread of the device-model process: it waits on hv's
//! doorbell, takes the notification (probe 5 when it runs, probe 6 when its
//! work is done) and rings the device model's own doorbell, which wakes the
//! device model's loop (probe 7).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use sys::{poll_readable_few, rdtsc, Doorbell};

/// How hv's notification reaches the device model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DmWake {
    /// hv's doorbell wakes the device model itself: splitnet has no dom0
    /// kernel between hv and the device model, so one wake-up suffices.
    #[default]
    Direct,
    /// Xen's path: hv wakes dom0's upcall handler, which wakes the device
    /// model (two wake-ups per request, as Table 3 measures them).
    Upcall,
}

impl DmWake {
    /// As the topology's `hvm_wake` and `splitnet-domain hvm-dm --wake`
    /// name it.
    pub fn name(self) -> &'static str {
        match self {
            DmWake::Direct => "direct",
            DmWake::Upcall => "upcall",
        }
    }
}

impl std::str::FromStr for DmWake {
    type Err = String;
    fn from_str(s: &str) -> Result<DmWake, String> {
        [DmWake::Direct, DmWake::Upcall]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("{s:?}: direct or upcall"))
    }
}

/// The upcall handler's probes of the notification it last passed on.
#[derive(Debug, Default)]
struct Probes {
    /// Probe 5: the handler runs.
    begin: AtomicU64,
    /// Probe 6: the handler has taken the event and is about to wake the
    /// device model.
    end: AtomicU64,
    /// The errno that stopped the handler (0: it runs).
    error: AtomicI32,
}

/// What the upcall thread takes: hv's doorbell, the device model's, the
/// stop signal and the probes.
#[derive(Debug)]
struct HandlerEnds {
    kick: Doorbell,
    wake: Doorbell,
    quit: Doorbell,
    probes: Arc<Probes>,
}

/// The upcall thread and the device model's end of it (stopped and joined
/// on drop).
#[derive(Debug)]
pub struct Upcall {
    probes: Arc<Probes>,
    /// Waiter: the upcall handler's wake-ups of the device model.
    woken: Doorbell,
    /// Ringer: stops the thread.
    quit: Doorbell,
    /// The thread's ends until [`Upcall::start`] hands them over.
    ends: Option<HandlerEnds>,
    thread: Option<JoinHandle<()>>,
}

impl Upcall {
    /// The handler's doorbells, on hv's doorbell `kick` (the event
    /// channel); its thread starts with [`Upcall::start`], so that a
    /// device model can enter its jail (which admits no threads) between.
    pub fn new(kick: Doorbell) -> std::io::Result<Upcall> {
        let (woken, wake) = Doorbell::pair()?;
        let (quit_wait, quit) = Doorbell::pair()?;
        let probes = Arc::new(Probes::default());
        Ok(Upcall {
            ends: Some(HandlerEnds {
                kick,
                wake,
                quit: quit_wait,
                probes: probes.clone(),
            }),
            probes,
            woken,
            quit,
            thread: None,
        })
    }

    /// Starts the handler's thread, once.
    pub fn start(&mut self) -> std::io::Result<()> {
        let Some(e) = self.ends.take() else {
            return Ok(());
        };
        let thread = std::thread::Builder::new()
            .name("dm-upcall".into())
            .spawn(move || handler(&e.kick, &e.wake, &e.quit, &e.probes))?;
        self.thread = Some(thread);
        Ok(())
    }

    /// What the device model's loop waits on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.woken.as_fd()
    }

    /// Takes the handler's wake-up: probes 5 and 6 of the notification;
    /// an error when the handler has stopped (no request can reach the
    /// device model any more).
    pub fn take(&self) -> std::io::Result<(u64, u64)> {
        let _ = self.woken.drain();
        match self.probes.error.load(Ordering::Acquire) {
            0 => Ok((
                self.probes.begin.load(Ordering::Acquire),
                self.probes.end.load(Ordering::Acquire),
            )),
            -1 => Err(std::io::Error::other(
                "dom0's upcall handler stopped: waiting for hv's event failed",
            )),
            e => Err(std::io::Error::other(format!(
                "dom0's upcall handler stopped: waiting for hv's event failed: {}",
                std::io::Error::from_raw_os_error(e)
            ))),
        }
    }
}

impl Drop for Upcall {
    fn drop(&mut self) {
        let _ = self.quit.ring();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// dom0's event-channel upcall handler: one pass per notification from
/// hv. A wait that fails stops it, and it wakes the device model to say so.
fn handler(kick: &Doorbell, wake: &Doorbell, quit: &Doorbell, p: &Probes) {
    loop {
        let fds = [kick.as_fd(), quit.as_fd()];
        match poll_readable_few(&fds, None) {
            Ok(r) if r & 0b10 == 0 => {}
            Ok(_) => return,
            Err(e) => {
                // poll's error keeps its kind, not always its errno.
                let errno = e.raw_os_error().unwrap_or(-1);
                p.error.store(errno, Ordering::Release);
                let _ = wake.ring();
                return;
            }
        }
        let begin = rdtsc(); // probe 5: the upcall handler runs
        let _ = kick.drain();
        p.begin.store(begin, Ordering::Release);
        p.end.store(rdtsc(), Ordering::Release); // probe 6
        let _ = wake.ring();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_parse_by_their_names_and_others_are_refused() {
        for w in [DmWake::Direct, DmWake::Upcall] {
            assert_eq!(w.name().parse::<DmWake>(), Ok(w));
        }
        assert!("twice"
            .parse::<DmWake>()
            .unwrap_err()
            .contains("direct or upcall"));
    }

    #[test]
    fn the_handler_passes_each_event_on_with_its_probes_and_stops_on_drop() {
        let (kick_wait, kick) = Doorbell::pair().unwrap();
        let mut u = Upcall::new(kick_wait).unwrap();
        u.start().unwrap();
        for _ in 0..3 {
            kick.ring().unwrap();
            assert_eq!(poll_readable_few(&[u.fd()], None).unwrap(), 1);
            let (t5, t6) = u.take().unwrap();
            assert!(t5 > 0 && t6 >= t5, "{t5} {t6}");
        }
        drop(u); // joins the thread
    }
}
