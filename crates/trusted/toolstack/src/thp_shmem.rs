//! The host's one setting for transparent huge pages in shared memory
//! (`shmem_enabled`), shared by every hv on the host (Menon 2006 §5.3:
//! the pools' superpages, see `hugepages`).
//!
//! Where it is the kernel's default `never`, the first hv whose pools want
//! huge pages sets it to `advise` (huge pages only for mappings that ask)
//! and every later one joins it: each holder is a file in [`DIR`] named by
//! its process and start time and holding the word the first replaced,
//! written before the setting changes, all under one `flock`. The last
//! live holder to let go puts that word back, if the setting still reads
//! `advise`. A holder that died without letting go is counted out by the
//! next hv to hold, let go or sweep; an hv restarted after a crash takes
//! over its dead program's file ([`adopt`]).

use crate::uplink::journal::start_time;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Where the holders are recorded (one host, whatever each hv's run
/// directory).
pub const DIR: &str = "/run/splitnet/thp-shmem";

/// The kernel's setting.
const SETTING: &str = sys::huge::SHMEM_ENABLED;

/// The words the kernel's setting takes: only these are put back.
const WORDS: [&str; 6] = ["always", "within_size", "advise", "never", "deny", "force"];

/// The holders' directory and the setting they share (a file of one's own
/// in tests).
#[derive(Debug, Clone)]
struct Registry {
    dir: PathBuf,
    setting: PathBuf,
}

/// What the holders' files say: the live ones' word, and the dead ones.
struct Census {
    live: Option<String>,
    dead: Vec<(PathBuf, String)>,
}

/// An error about `path`, saying which.
fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Registry {
    fn host() -> Registry {
        Registry {
            dir: PathBuf::from(DIR),
            setting: PathBuf::from(SETTING),
        }
    }

    fn lock(&self) -> io::Result<sys::FileLock> {
        let path = self.dir.join(".lock");
        sys::FileLock::exclusive(&path).map_err(|e| at(&path, e))
    }

    /// The setting's selected word now (the bracketed one of the kernel's
    /// list; a file of one word is that word).
    fn current(&self) -> Option<String> {
        let t = std::fs::read_to_string(&self.setting).ok()?;
        Some(sys::huge::selected(&t).unwrap_or(t.trim()).to_string())
    }

    fn set(&self, word: &str) -> io::Result<()> {
        std::fs::write(&self.setting, word).map_err(|e| at(&self.setting, e))
    }

    /// The word setting `advise` would replace: the kernel's default
    /// `never` only, where the 2 MiB size inherits it (a deliberate
    /// `deny` or a per-size value is the host's choice, left alone).
    fn replaceable(&self) -> Option<String> {
        if self.setting == Path::new(SETTING) {
            return sys::huge::advise_thp_shmem_word();
        }
        (self.current().as_deref() == Some("never")).then(|| "never".into())
    }

    /// Puts `word` back where it is one of the kernel's words and the
    /// setting still reads `advise`; whether it wrote.
    fn put_back(&self, word: &str) -> io::Result<bool> {
        let known = WORDS.contains(&word) && word != "advise";
        if known && self.current().as_deref() == Some("advise") {
            self.set(word)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The holders' files but `mine`, live or dead.
    fn census(&self, mine: &Path) -> Census {
        let mut c = Census {
            live: None,
            dead: Vec::new(),
        };
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return c;
        };
        for e in rd.flatten() {
            let path = e.path();
            let name = e.file_name().into_string().unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            let Some((pid, start)) = name.split_once('-') else {
                continue;
            };
            let word = std::fs::read_to_string(&path).unwrap_or_default();
            let word = word.trim().to_string();
            let alive = matches!(
                (pid.parse().ok().and_then(start_time), start.parse::<u64>().ok()),
                (Some(a), Some(b)) if a == b
            );
            if path == mine {
                continue;
            } else if alive {
                c.live = Some(word);
            } else {
                c.dead.push((path, word));
            }
        }
        c
    }

    /// Counts the dead out: where no live holder is left, the first of
    /// their words that is one of the kernel's is put back first, and
    /// their files go only once it is. Returns the word written, if any.
    fn count_out(&self, c: &Census) -> io::Result<Option<String>> {
        let mut written = None;
        if c.live.is_none() {
            let words = c.dead.iter().map(|(_, w)| w);
            if let Some(w) = words.clone().find(|w| WORDS.contains(&w.as_str())) {
                written = self.put_back(w)?.then(|| w.clone());
            }
        }
        self.forget_dead(c);
        Ok(written)
    }

    /// Removes the dead holders' files.
    fn forget_dead(&self, c: &Census) {
        for (path, _) in &c.dead {
            let _ = std::fs::remove_file(path);
        }
    }

    /// This process's holder file.
    fn mine(&self) -> io::Result<PathBuf> {
        let me = std::process::id() as i32;
        let start =
            start_time(me).ok_or_else(|| io::Error::other("/proc/self/stat gave no start time"))?;
        Ok(self.dir.join(format!("{me}-{start}")))
    }
}

/// This process's hold on `advise`; let go by [`Hold::release`] or when
/// dropped.
#[derive(Debug)]
pub struct Hold {
    reg: Registry,
    file: PathBuf,
    done: bool,
}

/// What [`hold`] did, for hv's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Held {
    /// The setting was `was`; now `advise`, held.
    Changed { was: String },
    /// Other live holders keep it; joined.
    Joined,
}

/// Holds `advise` for this process where the setting is the kernel's
/// default `never` (changing it) or other hv's already hold it (joining
/// them); None where it needs nothing (it allows huge pages already, or
/// the host chose `deny` or a value of its own).
pub fn hold() -> io::Result<Option<(Hold, Held)>> {
    hold_in(Registry::host())
}

fn hold_in(reg: Registry) -> io::Result<Option<(Hold, Held)>> {
    std::fs::create_dir_all(&reg.dir).map_err(|e| at(&reg.dir, e))?;
    let _lock = reg.lock()?;
    let file = reg.mine()?;
    let c = reg.census(&file);
    reg.count_out(&c)?;
    let held = if let Some(word) = c.live {
        record(&file, &word)?;
        Held::Joined
    } else {
        let Some(was) = reg.replaceable() else {
            return Ok(None);
        };
        // Recorded before the change, so a death in between leaves a record.
        record(&file, &was)?;
        if let Err(e) = reg.set("advise") {
            let _ = std::fs::remove_file(&file);
            return Err(e);
        }
        Held::Changed { was }
    };
    let hold = Hold {
        reg,
        file,
        done: false,
    };
    Ok(Some((hold, held)))
}

/// Counts out holders that died without letting go, and puts their word
/// back where no live holder is left: what a killed hv would have done.
/// Returns the word put back, if any.
pub fn sweep() -> io::Result<Option<String>> {
    sweep_in(&Registry::host())
}

fn sweep_in(reg: &Registry) -> io::Result<Option<String>> {
    if !reg.dir.exists() {
        return Ok(None);
    }
    let _lock = reg.lock()?;
    let c = reg.census(&reg.mine()?);
    reg.count_out(&c)
}

/// Takes over the holder file of this hv's program before a crash
/// (process `dead`), so that the hold lives on with the pools it kept
/// (the guardian's restart gives hv a process of its own); what
/// [`Hold::carried`] then finds. Returns whether there was one.
pub fn adopt(dead: i32) -> io::Result<bool> {
    let reg = Registry::host();
    if !reg.dir.exists() {
        return Ok(false);
    }
    let _lock = reg.lock()?;
    let file = reg.mine()?;
    let prefix = format!("{dead}-");
    let c = reg.census(&file);
    let named = |p: &&PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&prefix))
    };
    // Only a holder that is gone: a live one with that pid is another.
    let Some(old) = c.dead.iter().map(|(p, _)| p).find(named) else {
        return Ok(false);
    };
    std::fs::rename(old, &file).map_err(|e| at(old, e))?;
    Ok(true)
}

/// Writes `word` to `file`, whole or not at all (a synced file of its
/// own renamed into place: the census skips names that start with a dot).
fn record(file: &Path, word: &str) -> io::Result<()> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("holder");
    let tmp = file.with_file_name(format!(".{name}"));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(word.as_bytes())?;
        f.sync_all()
    });
    let r = written.and_then(|()| std::fs::rename(&tmp, file));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(|e| at(file, e))
}

impl Hold {
    /// This process's hold, where an earlier program of it (hv's upgrade
    /// in place keeps the process) left one.
    pub fn carried() -> Option<Hold> {
        let reg = Registry::host();
        let file = reg.mine().ok()?;
        file.exists().then(|| Hold {
            reg,
            file,
            done: false,
        })
    }

    /// Lets go; the last live holder puts the replaced word back. Returns
    /// the word put back, if this was the last.
    pub fn release(mut self) -> io::Result<Option<String>> {
        self.let_go()
    }

    fn let_go(&mut self) -> io::Result<Option<String>> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(None);
        }
        let _lock = self.reg.lock()?;
        let word = std::fs::read_to_string(&self.file).map_err(|e| at(&self.file, e))?;
        let word = word.trim().to_string();
        let c = self.reg.census(&self.file);
        // The last puts back its own word: the files go only once it is
        // back (else the next hv finds ours dead and tries again).
        let written = c.live.is_none() && self.reg.put_back(&word)?;
        self.reg.forget_dead(&c);
        std::fs::remove_file(&self.file).map_err(|e| at(&self.file, e))?;
        Ok(written.then_some(word))
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

#[cfg(test)]
mod tests;
