//! The hugetlb pages a topology's pools need (Menon 2006 §5.3, superpages),
//! reserved when hv starts: hv raises `/proc/sys/vm/nr_hugepages` by what
//! is missing and no more, says so, and gives back what it added when it
//! stops. When it cannot, it says why; each pool that does not fit then
//! falls back to transparent huge pages or 4 KiB pages, and hv's log and
//! `splitnet status` (`huge_backing`) say which.

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

/// What hv added to the hugetlb pool, to give back when it stops.
#[derive(Debug, Default)]
pub struct Reservation {
    added: u64,
    /// Where the count is recorded (none when nothing was added).
    record: Option<PathBuf>,
}

/// Gives back what an earlier hv with this run directory added and did
/// not give back (it was killed), then makes room in the hugetlb pool for
/// `t`'s pools, logging what it did or why it could not. What it adds is
/// recorded in `run_dir` until [`Reservation::release`].
pub fn reserve(t: &Topology, run_dir: &Path) -> Reservation {
    let record = run_dir.join(ADDED_FILE);
    if let Some(left) = std::fs::read_to_string(&record)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        give_back(left, "an earlier hv's");
        let _ = std::fs::remove_file(&record);
    }
    let need = pages_needed(t);
    if need == 0 {
        return Reservation::default();
    }
    let (added, res) = grow(need);
    let reservation = if added > 0 && std::fs::write(&record, added.to_string()).is_ok() {
        Reservation {
            added,
            record: Some(record),
        }
    } else {
        Reservation {
            added,
            record: None,
        }
    };
    match res {
        Ok(msg) => hv::log!(Info, "huge pages: {msg}"),
        Err(msg) => {
            let (thp, setting) = huge::thp_shmem();
            let fallback = if thp.advised_ranges_get_them() {
                format!("pools that do not fit take transparent huge pages ({setting})")
            } else {
                format!("pools that do not fit take 4 KiB pages: transparent huge pages for shared memory are off ({setting})")
            };
            hv::log!(Warning, "huge pages: {msg}; {fallback}");
        }
    }
    reservation
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
    /// upgrade in place), as its record in `run_dir` says.
    pub fn carried(run_dir: &Path) -> Reservation {
        let record = run_dir.join(ADDED_FILE);
        match std::fs::read_to_string(&record)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            Some(added) => Reservation {
                added,
                record: Some(record),
            },
            None => Reservation::default(),
        }
    }

    /// Gives back the pages hv added, and forgets the record.
    pub fn release(self) {
        give_back(self.added, "its");
        if let Some(r) = self.record {
            let _ = std::fs::remove_file(r);
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
