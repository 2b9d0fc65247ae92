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

/// The guardian, the shape of the last record it took, and hv's count of
/// changes read before that record was made.
pub(super) struct Guarded {
    guardian: Guardian,
    last: Option<serde_json::Value>,
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
        let now = match hv
            .export()
            .map_err(|e| e.message)
            .and_then(|i| self.image_around(i))
        {
            Ok(now) => now,
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
        let shape = shape_of(&now);
        if g.last.as_ref() == Some(&shape) {
            g.changes = Some(changes);
            return Ok(());
        }
        // Again, with the descriptors held: the state may have moved on.
        let (image, mut held) = hv.export_held().map_err(|e| e.message)?;
        let (image, _kept) = self.image_kept_around(image)?;
        // The daemon's own (the listener, the keeper's pipe) live as long
        // as the daemon, and the containers' while `_kept` holds them.
        for fd in image.daemon_fds() {
            held.push((
                fd,
                sys::dup_fd(&fd).map_err(|e| format!("descriptor {fd}: {e}"))?,
            ));
        }
        let shape = shape_of(&image);
        g.guardian.commit(image, held)?;
        (g.last, g.changes) = (Some(shape), Some(changes));
        Ok(())
    }

    /// The whole image around hv's part: the supervisor's and the daemon's.
    fn image_around(&self, hv: HvImage) -> Result<Image, String> {
        self.image_kept_around(hv).map(|(image, _)| image)
    }

    /// [`Supervisor::image_around`], with the containers it names kept
    /// open.
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

/// What a record must keep: the image without its counters, which move
/// with every request, nor the statistics the domains publish in the store
/// every half second (they publish them again after a crash).
fn shape_of(image: &Image) -> serde_json::Value {
    shape(serde_json::to_value(image).unwrap_or_default())
}

fn shape(mut v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    // hv's own upgrades and recoveries are its history, not traffic.
    let mut history = v["hv"]["counters"]["ops"].take();
    if let Some(ops) = history.as_object_mut() {
        ops.retain(|op, _| op.starts_with("hv_"));
    }
    v["hv"]["counters"] = serde_json::json!({ "ops": history });
    if let Some(doms) = v["hv"]["domains"].as_array_mut() {
        for d in doms {
            d["counters"] = Value::Null;
        }
    }
    if let Some(guests) = v["hv"]["hvm"].as_array_mut() {
        for g in guests {
            g["accounts"] = Value::Null;
        }
    }
    let store = &mut v["hv"]["store"];
    store["counters"] = Value::Null;
    if let Some(nodes) = store["nodes"].as_object_mut() {
        nodes.retain(|path, _| !path.ends_with("/stats"));
    }
    v
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

#[cfg(test)]
mod tests {
    use super::shape;
    use serde_json::json;

    fn image(stats: u32, ops: u32, vif: &str) -> serde_json::Value {
        json!({"hv": {
            "counters": {"ops": {"grant_map": ops, "hv_upgrades": 1}},
            "domains": [{"id": 1, "counters": {"ops": ops}}],
            "store": {"counters": {"ops": ops}, "nodes": {
                "/local/domain/1/backend/vif/2/0/stats": {"value": [stats]},
                "/local/domain/1/backend/vif/2/0/state": {"value": [vif]},
            }},
        }})
    }

    #[test]
    fn counters_and_published_statistics_are_not_a_change_but_the_rest_is() {
        assert_eq!(shape(image(1, 1, "4")), shape(image(2, 7, "4")));
        assert_ne!(shape(image(1, 1, "4")), shape(image(1, 1, "5")));
        let mut upgraded = image(1, 1, "4");
        upgraded["hv"]["counters"]["ops"]["hv_upgrades"] = 2.into();
        assert_ne!(
            shape(image(1, 1, "4")),
            shape(upgraded),
            "hv's history is kept"
        );
    }
}
