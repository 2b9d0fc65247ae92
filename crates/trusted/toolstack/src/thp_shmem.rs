//! The host's one setting for transparent huge pages in shared memory
//! (`shmem_enabled`), shared by every hv on the host (Menon 2006 §5.3:
//! the pools' superpages, see `hugepages`).
//!
//! Where it is the kernel's default `never`, the first hv whose pools want
//! huge pages sets it to `advise` (huge pages only for mappings that ask)
//! and every later one joins it: each holder is a file in [`DIR`] named by
//! its process and start time and holding the word the first replaced,
//! written before the setting changes. The last live holder to let go puts
//! that word back, if the setting still reads `advise`. A holder that died
//! without letting go is found by the next hv to hold or let go, under the
//! same lock, and counted out.

use crate::uplink::journal::start_time;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use sys::huge;

/// Where the holders are recorded (one host, whatever each hv's run
/// directory).
pub const DIR: &str = "/run/splitnet/thp-shmem";

/// This process's hold on `advise`; let go by [`Hold::release`] or when
/// dropped.
#[derive(Debug)]
pub struct Hold {
    dir: PathBuf,
    file: PathBuf,
}

/// What [`hold`] did, for hv's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Held {
    /// The setting was `was`; now `advise`, held.
    Changed { was: String },
    /// Other live holders keep it at `advise`; joined.
    Joined,
}

/// The holders in `dir`: (file, process id, start time, word).
fn holders(dir: &Path) -> Vec<(PathBuf, i32, u64, String)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (pid, start) = name.split_once('-')?;
            let word = std::fs::read_to_string(e.path()).ok()?;
            Some((
                e.path(),
                pid.parse().ok()?,
                start.parse().ok()?,
                word.trim().into(),
            ))
        })
        .collect()
}

/// The live holders' word, after counting out (removing) the dead ones;
/// also the word a dead one held, when no live one is left.
fn live_word(dir: &Path) -> (Option<String>, Option<String>) {
    let (mut live, mut dead) = (None, None);
    for (file, pid, start, word) in holders(dir) {
        if start_time(pid) == Some(start) {
            live = Some(word);
        } else {
            let _ = std::fs::remove_file(file);
            dead = Some(word);
        }
    }
    (live.clone(), live.is_none().then_some(dead).flatten())
}

/// The setting's selected word now.
fn current() -> Option<String> {
    let t = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").ok()?;
    let start = t.find('[')? + 1;
    Some(t[start..start + t[start..].find(']')?].to_string())
}

/// Puts `word` back where the setting still reads `advise`.
fn put_back(word: &str) -> io::Result<()> {
    if current().as_deref() == Some("advise") && word != "advise" {
        huge::set_thp_shmem(word)?;
    }
    Ok(())
}

/// Holds `advise` for this process where the setting is the kernel's
/// default `never` (changing it) or other hv's already hold it (joining
/// them); None where it needs nothing (it allows huge pages already, or
/// the host chose `deny` or a value of its own).
pub fn hold() -> io::Result<Option<(Hold, Held)>> {
    hold_in(Path::new(DIR))
}

fn hold_in(dir: &Path) -> io::Result<Option<(Hold, Held)>> {
    std::fs::create_dir_all(dir)?;
    let _lock = sys::FileLock::exclusive(&dir.join(".lock"))?;
    let (live, dead) = live_word(dir);
    if let Some(word) = dead {
        put_back(&word)?;
    }
    let me = std::process::id() as i32;
    let start = start_time(me).ok_or_else(|| io::Error::other("no start time of our own"))?;
    let hold = Hold {
        dir: dir.to_path_buf(),
        file: dir.join(format!("{me}-{start}")),
    };
    if let Some(word) = live {
        record(&hold.file, &word)?;
        return Ok(Some((hold, Held::Joined)));
    }
    let Some(was) = huge::advise_thp_shmem_word() else {
        return Ok(None);
    };
    // Recorded before the change, so a death in between leaves a record.
    record(&hold.file, &was)?;
    if let Err(e) = huge::set_thp_shmem("advise") {
        let _ = std::fs::remove_file(&hold.file);
        return Err(e);
    }
    Ok(Some((hold, Held::Changed { was })))
}

/// Counts out holders that died without letting go, and puts their word
/// back where no live holder is left: what a killed hv would have done.
/// Returns the word put back, if any.
pub fn sweep() -> io::Result<Option<String>> {
    sweep_in(Path::new(DIR))
}

fn sweep_in(dir: &Path) -> io::Result<Option<String>> {
    if !dir.exists() {
        return Ok(None);
    }
    let _lock = sys::FileLock::exclusive(&dir.join(".lock"))?;
    let (_, dead) = live_word(dir);
    if let Some(word) = &dead {
        put_back(word)?;
    }
    Ok(dead)
}

/// Writes `word` to `file` and syncs it.
fn record(file: &Path, word: &str) -> io::Result<()> {
    let mut f = std::fs::File::create(file)?;
    f.write_all(word.as_bytes())?;
    f.sync_all()
}

impl Hold {
    /// This process's hold, where an earlier program of it (hv's upgrade
    /// in place keeps the process) left one.
    pub fn carried() -> Option<Hold> {
        let me = std::process::id() as i32;
        let file = Path::new(DIR).join(format!("{me}-{}", start_time(me)?));
        file.exists().then(|| Hold {
            dir: PathBuf::from(DIR),
            file,
        })
    }

    /// Lets go; the last live holder puts the replaced word back. Returns
    /// the word put back, if this was the last.
    pub fn release(self) -> io::Result<Option<String>> {
        let r = self.let_go();
        std::mem::forget(self);
        r
    }

    fn let_go(&self) -> io::Result<Option<String>> {
        let _lock = sys::FileLock::exclusive(&self.dir.join(".lock"))?;
        let word = std::fs::read_to_string(&self.file)?.trim().to_string();
        std::fs::remove_file(&self.file)?;
        let (live, _) = live_word(&self.dir);
        if live.is_some() {
            return Ok(None);
        }
        put_back(&word)?;
        Ok(Some(word))
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_joins_a_live_one_and_the_last_to_go_is_told() {
        let dir = std::env::temp_dir().join(format!("splitnet-thp-join-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Another live holder: a child process that changed the setting.
        let mut other = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = other.id() as i32;
        record(
            &dir.join(format!("{pid}-{}", start_time(pid).unwrap())),
            "never",
        )
        .unwrap();
        let (hold, how) = hold_in(&dir).unwrap().expect("joined");
        assert_eq!(how, Held::Joined);
        // The other still holds: letting go puts nothing back.
        assert_eq!(hold.release().unwrap(), None);
        assert_eq!(holders(&dir).len(), 1);
        // It dies without letting go: the sweep counts it out and names
        // the word to put back (here the setting is not `advise`, so
        // nothing is written).
        other.kill().unwrap();
        other.wait().unwrap();
        if current().as_deref() == Some("advise") {
            // A real hv holds the host's setting now: leave it be.
            return;
        }
        assert_eq!(sweep_in(&dir).unwrap(), Some("never".into()));
        assert!(holders(&dir).is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn dead_holders_are_counted_out_and_their_word_kept() {
        let dir = std::env::temp_dir().join(format!("splitnet-thp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id() as i32;
        let start = start_time(me).unwrap();
        // A holder that is this process, and one whose start time is not
        // its process's (a pid reused, or a holder gone).
        record(&dir.join(format!("{me}-{start}")), "never").unwrap();
        record(&dir.join(format!("{me}-{}", start + 1)), "never").unwrap();
        assert_eq!(live_word(&dir), (Some("never".into()), None));
        assert_eq!(holders(&dir).len(), 1, "the dead one is counted out");
        std::fs::remove_file(dir.join(format!("{me}-{start}"))).unwrap();
        record(&dir.join("1-1"), "never").unwrap();
        assert_eq!(live_word(&dir), (None, Some("never".into())));
        let _ = std::fs::remove_dir_all(dir);
    }
}
