//! hv's record for its guardian (`crate::guardian`): a thread that, every
//! [`PERIOD`], builds hv's image as an upgrade does and, when it differs
//! from the last one the guardian took (counters aside), hands it over
//! with a duplicate of every descriptor it names.

use super::Supervisor;
use crate::guardian::Guardian;
use crate::handover::{Image, FORMAT};
use hv::core::{HvImage, Hypervisor};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often hv looks whether its state changed: what a crash can lose is
/// what changed within this.
const PERIOD: Duration = Duration::from_millis(100);

/// An image, the duplicates of the descriptors it names by their numbers
/// in it, and the containers it names, kept open while it is recorded.
type Held = (
    Image,
    Vec<(std::os::fd::RawFd, std::os::fd::OwnedFd)>,
    Vec<super::containers::Container>,
);

/// The guardian, the shape of the last record it took, and hv's count of
/// changes read before that record was made.
pub(super) struct Guarded {
    guardian: Guardian,
    last: Option<Vec<u8>>,
    changes: Option<(u64, u64)>,
}

impl Guarded {
    /// Whether the guardian owes an answer to a record (an upgrade's
    /// `execve` would close the duplicates it may be taking), after
    /// taking one it already sent.
    pub(super) fn owes_answer(&mut self) -> bool {
        let _ = self.guardian.ready();
        self.guardian.owes_answer()
    }
}

impl Supervisor {
    /// Starts hv's guardian and the thread that keeps it given hv's state.
    /// Nothing when hv does not run as a daemon (no image to record).
    pub fn guard(self: &Arc<Self>) -> Result<(), String> {
        if self.handover.get().is_none() {
            return Ok(());
        }
        if self.guarded().is_none() {
            self.start_guardian()?;
        }
        let hv = self.hv().map_err(|e| e.message)?;
        let me = Arc::downgrade(self);
        hv.spawn_guarded("hv-record".into(), None, move || record_loop(me))
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// A guardian that holds nothing yet, in place of any before.
    fn start_guardian(&self) -> Result<(), String> {
        let guardian = Guardian::start(&self.run_dir)?;
        let old = self.guarded().replace(Guarded {
            guardian,
            last: None,
            changes: None,
        });
        if let Some(old) = old {
            old.guardian.stop();
        }
        Ok(())
    }

    /// The guardian an earlier program of this process started (hv's
    /// upgrade in place); it takes a record of this program's soon.
    pub fn adopt_guardian(&self, guardian: Guardian) {
        *self.guarded() = Some(Guarded {
            guardian,
            last: None,
            changes: None,
        });
    }

    /// The guardian's (pid, connection), for an upgrade's image.
    pub(super) fn guardian_parts(&self) -> Option<(i32, std::os::fd::RawFd)> {
        self.guarded().as_ref().map(|g| g.guardian.raw_parts())
    }

    /// Holds the guardian still: no record is handed over while this
    /// lives (an upgrade's `execve`).
    pub(super) fn guardian_quiet(&self) -> std::sync::MutexGuard<'_, Option<Guarded>> {
        self.guarded()
    }

    /// Lets the guardian go: hv stops.
    pub fn release_guardian(&self) {
        if let Some(g) = self.guarded().take() {
            g.guardian.stop();
        }
    }

    fn guarded(&self) -> std::sync::MutexGuard<'_, Option<Guarded>> {
        self.guardian.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A toolstack request was served: hv's record is brought up to date
    /// before its answer (the thread's next look would be up to
    /// [`PERIOD`] later, and a crash in between would undo what the
    /// caller was told was done). A state that cannot be recorded now is
    /// left to the thread.
    pub(super) fn record_served(&self) {
        if let Ok(hv) = self.hv() {
            let _ = self.record_once(&hv);
        }
    }

    /// Hands the guardian hv's state if it changed since its last record.
    fn record_once(&self, hv: &Hypervisor) -> Result<(), String> {
        let mut slot = self.guarded();
        let Some(g) = slot.as_mut() else {
            return Ok(());
        };
        // One the guardian may be taking still is not overwritten.
        g.guardian.ready()?;
        // Nothing served since the last record could have changed it: no
        // export (it takes hv's lock for a time that grows with the store).
        // hv's count, and the uplinks' daemon restarts (a new pid each).
        let changes = (hv.changes(), self.uplinks.restarts());
        if g.changes == Some(changes) {
            return Ok(());
        }
        let (mut image, held, _kept) = match self.image_held(hv) {
            Ok(taken) => taken,
            // Busy for a moment: the record before stands.
            Err(e) if e.contains("try again") => return Err(e),
            Err(e) => {
                // Looked at again once something changes.
                g.changes = Some(changes);
                if g.last.take().is_some() {
                    g.guardian.forget()?;
                }
                return Err(e);
            }
        };
        let shape = shape_of(&mut image);
        if g.last.as_ref() != Some(&shape) {
            let journal = image.hv.journal;
            g.guardian.commit(image, held)?;
            g.last = Some(shape);
            hv.journal_recorded(journal);
        }
        g.changes = Some(changes);
        Ok(())
    }

    /// hv's whole image with a duplicate of every descriptor it names, and
    /// the containers it names kept open meanwhile. The daemon's own
    /// descriptors (the listener, the keeper's pipe) live as long as the
    /// daemon.
    fn image_held(&self, hv: &Hypervisor) -> Result<Held, String> {
        let (image, mut held) = hv.export_held().map_err(|e| e.message)?;
        let (image, kept) = self.image_kept_around(image)?;
        for fd in image.daemon_fds() {
            held.push((
                fd,
                sys::dup_fd(&fd).map_err(|e| format!("descriptor {fd}: {e}"))?,
            ));
        }
        Ok((image, held, kept))
    }

    /// The whole image around hv's part (the supervisor's and the
    /// daemon's), with the containers it names kept open.
    fn image_kept_around(
        &self,
        hv: HvImage,
    ) -> Result<(Image, Vec<super::containers::Container>), String> {
        let ctx = (self.handover.get()).ok_or("hv does not run as a daemon")?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let (sup, kept) = self.image_kept().map_err(|e| e.message)?;
        let image = Image {
            format: FORMAT,
            attempt: ctx.attempts.load(Ordering::SeqCst),
            from: exe.clone(),
            to: exe,
            began_ns: 0,
            rollback: None,
            crash: None,
            daemon: ctx.daemon.clone(),
            sup,
            hv,
        };
        Ok((image, kept))
    }
}

/// What a record must keep, as bytes: the image without its traffic
/// ([`HvImage::with_traffic_aside`]). Two images of one shape need one
/// record.
fn shape_of(image: &mut Image) -> Vec<u8> {
    let Image {
        attempt,
        daemon,
        sup,
        hv,
        ..
    } = image;
    hv.with_traffic_aside(|hv| serde_json::to_vec(&(*attempt, &*daemon, &*sup, hv)))
        .unwrap_or_default()
}

/// The recording thread: ends when hv stops (letting the guardian go) or
/// the supervisor is gone. A state that cannot be recorded (one an upgrade
/// does not carry) is said once each time the reason changes.
fn record_loop(me: Weak<Supervisor>) {
    let mut said = String::new();
    loop {
        std::thread::sleep(PERIOD);
        let Some(sup) = me.upgrade() else { return };
        let Ok(hv) = sup.hv() else { return };
        if hv.is_shutting_down() {
            sup.release_guardian();
            return;
        }
        let why = sup.record_once(&hv).err().unwrap_or_default();
        if why != said && !why.contains("try again") {
            if !why.is_empty() {
                hv::log!(
                    Warning,
                    "hv's guardian has not its latest state, so a crash of hv would lose it: {why}"
                );
            }
            said = why;
        }
    }
}
