//! The huge pages a topology's pools need (Menon 2006 §5.3, superpages),
//! arranged when hv starts. Transparent huge pages come first (hv's
//! `memory::huge_pool` says why): where the kernel's shared-memory setting
//! is its default `never`, hv holds it at `advise` while it runs, with
//! every other hv on the host ([`crate::thp_shmem`]). Where shared memory
//! may not take them, hv raises `/proc/sys/vm/nr_hugepages` by what the
//! pools lack and no more, records it in its run directory, and gives back
//! what it added when it stops (or the next hv does, if it was killed).
//! When neither can be had, hv says why; the pools then take 4 KiB pages,
//! and hv's log and `splitnet status` (`huge_backing`) say which.

use crate::topology::Topology;
use std::path::{Path, PathBuf};
use sys::huge::{self, HugetlbPool};

/// The file in hv's run directory that records the pages it added, so
/// that the next hv gives back what a killed one could not.
const ADDED_FILE: &str = "hugepages-added";

/// 2 MiB pages a pool of `frames` 4 KiB frames takes.
const FRAMES_PER_HUGE_PAGE: u64 = (huge::HUGE_PAGE / sys::PAGE_SIZE) as u64;

/// The 2 MiB pages the pools of `t`'s domains with `hugepages = true` take.
pub fn pages_needed(t: &Topology) -> u64 {
    t.hv_domains()
        .filter(|d| d.hugepages)
        .map(|d| u64::from(d.memory_frames).div_ceil(FRAMES_PER_HUGE_PAGE))
        .sum()
}

/// What hv added to the hugetlb pool, to give back when it stops, and
/// the shared-memory THP setting it replaced, to put back.
#[derive(Debug, Default)]
pub struct Reservation {
    added: u64,
    /// Where the count is recorded (none when nothing was added).
    record: Option<PathBuf>,
    /// hv's hold on the shared-memory THP setting.
    shmem: Option<crate::thp_shmem::Hold>,
}

/// Undoes what an earlier hv with this run directory changed and did not
/// undo (it was killed), then arranges huge pages for `t`'s pools:
/// transparent ones where shared memory may take them (allowing it where
/// the setting is the default `never`), else room in the hugetlb pool;
/// logs what it did or why it could not. What it changes is recorded in
/// `run_dir` until [`Reservation::release`].
pub fn reserve(t: &Topology, run_dir: &Path) -> Reservation {
    let record = run_dir.join(ADDED_FILE);
    if let Some(left) = read_record(&record).and_then(|s| s.parse::<u64>().ok()) {
        give_back(left, "an earlier hv's");
        let _ = std::fs::remove_file(&record);
    }
    let need = pages_needed(t);
    if need == 0 {
        sweep_thp_shmem();
        return Reservation::default();
    }
    let shmem = hold_thp_shmem();
    let (thp, setting) = huge::thp_shmem();
    if thp.advised_ranges_get_them() {
        hv::log!(
            Info,
            "huge pages: the pools take transparent huge pages ({setting}): each domain maps its own 2 MiB at a time, a peer's grant map one 4 KiB frame"
        );
        return Reservation {
            shmem,
            ..Reservation::default()
        };
    }
    let (added, res) = grow(need);
    let recorded = added > 0 && std::fs::write(&record, added.to_string()).is_ok();
    let reservation = Reservation {
        added,
        record: recorded.then_some(record),
        shmem,
    };
    match res {
        Ok(msg) => hv::log!(Info, "huge pages: {msg}"),
        Err(msg) => hv::log!(
            Warning,
            "huge pages: {msg}; pools that do not fit take 4 KiB pages"
        ),
    }
    reservation
}

/// A record's text, trimmed; None when there is none.
fn read_record(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Puts back the shared-memory THP setting that hv's killed without
/// letting go held, where no live hv holds it (logged).
fn sweep_thp_shmem() {
    if crate::rootless::active() {
        return; // the setting is root's
    }
    match crate::thp_shmem::sweep() {
        Ok(Some(word)) => hv::log!(
            Info,
            "huge pages: put back shmem_enabled = {word}, which a killed hv held at advise"
        ),
        Ok(None) => {}
        Err(e) => hv::log!(Warning, "huge pages: checking shmem_enabled's holders: {e}"),
    }
}

/// Holds the shared-memory THP setting at `advise` where it needs it,
/// logging what it did; None where nothing was held (logged when it could
/// not be).
fn hold_thp_shmem() -> Option<crate::thp_shmem::Hold> {
    use crate::thp_shmem::Held;
    if crate::rootless::active() {
        return None; // the setting is root's
    }
    match crate::thp_shmem::hold() {
        Ok(Some((hold, how))) => {
            let how = match how {
                Held::Changed { was } => format!("shmem_enabled {was} -> advise"),
                Held::Joined => "held at advise with the host's other hv".into(),
            };
            hv::log!(
                Info,
                "huge pages: shared memory takes transparent huge pages where advised ({how}, put back when the last hv stops)"
            );
            Some(hold)
        }
        Ok(None) => None,
        Err(e) => {
            hv::log!(
                Warning,
                "huge pages: cannot allow transparent huge pages for shared memory: {e}"
            );
            None
        }
    }
}

/// Grows the pool by what `need` pages lack: the pages added (also when
/// the kernel gave fewer than asked: those are given back at the end too),
/// and what was done or why not enough could be.
fn grow(need: u64) -> (u64, Result<String, String>) {
    let pool = match HugetlbPool::read() {
        Ok(p) => p,
        Err(e) => return (0, Err(format!("cannot read /proc/meminfo: {e}"))),
    };
    let lacking = need.saturating_sub(pool.available());
    if lacking == 0 {
        return (
            0,
            Ok(format!(
                "{need} 2 MiB pages needed, {} free already",
                pool.available()
            )),
        );
    }
    let before = match huge::nr_hugepages() {
        Ok(n) => n,
        Err(e) => return (0, Err(format!("cannot read nr_hugepages: {e}"))),
    };
    let asked = before + lacking;
    let set = huge::set_nr_hugepages(asked);
    let after = huge::nr_hugepages().unwrap_or(before);
    let added = after.saturating_sub(before);
    if let Err(e) = set {
        return (
            added,
            Err(format!(
                "{need} 2 MiB pages needed, {} free, and raising the pool failed: {e}",
                pool.available()
            )),
        );
    }
    if added < lacking {
        // Keep what the kernel did give: some pools may still fit.
        return (
            added,
            Err(format!(
                "{need} 2 MiB pages needed, {} free; nr_hugepages {before} -> {asked} was asked, the kernel gave {after} (memory too fragmented or too small)",
                pool.available()
            )),
        );
    }
    (
        added,
        Ok(format!(
            "reserved {added} 2 MiB pages for the pools (nr_hugepages {before} -> {after})"
        )),
    )
}

/// Lowers the pool by `n` pages `whose` hv added (those still free: a
/// page some other mapping holds stays until it is freed, as the kernel
/// does).
fn give_back(n: u64, whose: &str) {
    if n == 0 {
        return;
    }
    let Ok(now) = huge::nr_hugepages() else {
        return;
    };
    let to = now.saturating_sub(n);
    match huge::set_nr_hugepages(to) {
        Ok(()) => hv::log!(
            Info,
            "huge pages: gave back {whose} {n} (nr_hugepages {now} -> {to})"
        ),
        Err(e) => hv::log!(Warning, "huge pages: could not give back {whose} {n}: {e}"),
    }
}

impl Reservation {
    /// The reservation an earlier program of this process made (hv's
    /// upgrade in place), as its record in `run_dir` and its hold say.
    pub fn carried(run_dir: &Path) -> Reservation {
        let record = run_dir.join(ADDED_FILE);
        let added = read_record(&record).and_then(|s| s.parse::<u64>().ok());
        Reservation {
            added: added.unwrap_or(0),
            record: added.map(|_| record),
            shmem: crate::thp_shmem::Hold::carried(),
        }
    }

    /// Gives back the pages hv added and lets go of the setting, and
    /// forgets the record.
    pub fn release(self) {
        give_back(self.added, "its");
        if let Some(r) = self.record {
            let _ = std::fs::remove_file(r);
        }
        let Some(hold) = self.shmem else {
            sweep_thp_shmem();
            return;
        };
        match hold.release() {
            Ok(Some(word)) => hv::log!(Info, "huge pages: put back shmem_enabled = {word}"),
            Ok(None) => {}
            Err(e) => hv::log!(
                Warning,
                "huge pages: letting go of shmem_enabled failed: {e}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_domains_with_hugepages_count() {
        let t = Topology::parse(
            "[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\nhugepages = true\n\
             [[domain]]\nname = \"g1\"\nkind = \"guest\"\nmemory_frames = 1024\nhugepages = true\n\
             [[domain]]\nname = \"g2\"\nkind = \"guest\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(pages_needed(&t), 8 + 2);
    }
}
