//! The hugetlb pages a topology's pools need (Menon 2006 §5.3, superpages),
//! reserved when hv starts: hv raises `/proc/sys/vm/nr_hugepages` by what
//! is missing and no more, says so, and gives back what it added when it
//! stops. When it cannot, it says why; each pool that does not fit then
//! falls back to transparent huge pages or 4 KiB pages, and hv's log and
//! `splitnet status` (`huge_backing`) say which.

use crate::topology::Topology;
use sys::huge::{self, HugetlbPool};

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
}

/// Makes room in the hugetlb pool for `t`'s pools, logging what it did
/// or why it could not.
pub fn reserve(t: &Topology) -> Reservation {
    let need = pages_needed(t);
    if need == 0 {
        return Reservation::default();
    }
    match grow(need) {
        Ok((added, msg)) => {
            eprintln!("hv: huge pages: {msg}");
            Reservation { added }
        }
        Err(msg) => {
            let (thp, setting) = huge::thp_shmem();
            let fallback = if thp.advised_ranges_get_them() {
                format!("pools that do not fit take transparent huge pages ({setting})")
            } else {
                format!("pools that do not fit take 4 KiB pages: transparent huge pages for shared memory are off ({setting})")
            };
            eprintln!("hv: huge pages: {msg}; {fallback}");
            Reservation::default()
        }
    }
}

/// Grows the pool by what `need` pages lack: the pages added and what
/// was done, or why not enough could be.
fn grow(need: u64) -> Result<(u64, String), String> {
    let pool = HugetlbPool::read().map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    let lacking = need.saturating_sub(pool.available());
    if lacking == 0 {
        return Ok((
            0,
            format!(
                "{need} 2 MiB pages needed, {} free already",
                pool.available()
            ),
        ));
    }
    let before = huge::nr_hugepages().map_err(|e| format!("cannot read nr_hugepages: {e}"))?;
    let asked = before + lacking;
    let set = huge::set_nr_hugepages(asked);
    let after = huge::nr_hugepages().unwrap_or(before);
    let added = after.saturating_sub(before);
    if let Err(e) = set {
        return Err(format!(
            "{need} 2 MiB pages needed, {} free, and raising the pool failed: {e}",
            pool.available()
        ));
    }
    if added < lacking {
        // Keep what the kernel did give: some pools may still fit.
        return Err(format!(
            "{need} 2 MiB pages needed, {} free; nr_hugepages {before} -> {asked} was asked, the kernel gave {after} (memory too fragmented or too small)",
            pool.available()
        ));
    }
    Ok((
        added,
        format!("reserved {added} 2 MiB pages for the pools (nr_hugepages {before} -> {after})"),
    ))
}

impl Reservation {
    /// Gives back the pages hv added (those still free: a page some
    /// other mapping holds stays until it is freed, as the kernel does).
    pub fn release(self) {
        if self.added == 0 {
            return;
        }
        let Ok(now) = huge::nr_hugepages() else {
            return;
        };
        let to = now.saturating_sub(self.added);
        match huge::set_nr_hugepages(to) {
            Ok(()) => eprintln!(
                "hv: huge pages: gave back {} (nr_hugepages {now} -> {to})",
                self.added
            ),
            Err(e) => eprintln!("hv: huge pages: could not give back {}: {e}", self.added),
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
