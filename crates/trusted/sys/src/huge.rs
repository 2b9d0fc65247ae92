//! Huge pages (Menon 2006 §5.3, superpages): what the kernel's settings
//! allow, the hugetlb pool's state and size, and transparent huge pages
//! asked for with `madvise(MADV_HUGEPAGE)`.
//!
//! A hugetlb page is reserved up front (`/proc/sys/vm/nr_hugepages`) and
//! never split; a transparent huge page is taken at fault time when the
//! kernel's THP setting allows it and a 2 MiB block is free, and may fall
//! back to 4 KiB pages silently. Anonymous memory follows
//! `/sys/kernel/mm/transparent_hugepage/enabled`; shared memory (memfds,
//! a domain's pool) follows `shmem_enabled`, which defaults to `never`.

use std::io;

/// Size of one huge page (x86-64's 2 MiB superpage).
pub const HUGE_PAGE: usize = 2 << 20;

const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
/// The host's global shared-memory THP setting.
pub const SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

/// What a THP setting lets `madvise(MADV_HUGEPAGE)` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thp {
    /// Huge pages wherever they fit, advised or not.
    Always,
    /// Huge pages where advised.
    Madvise,
    /// No transparent huge pages (`never`, `deny`, or no THP in the kernel).
    Never,
}

impl Thp {
    /// Whether an advised 2 MiB-aligned range gets huge pages.
    pub fn advised_ranges_get_them(self) -> bool {
        self != Thp::Never
    }
}

/// The selected word of a sysfs setting such as `always [madvise] never`.
pub fn selected(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

fn parse_thp(text: &str) -> Thp {
    match selected(text) {
        Some("always" | "within_size" | "force") => Thp::Always,
        Some("madvise" | "advise") => Thp::Madvise,
        _ => Thp::Never,
    }
}

fn read_setting(file: &str) -> (Thp, String) {
    let path = format!("{THP_DIR}/{file}");
    match std::fs::read_to_string(&path) {
        Ok(t) => (
            parse_thp(&t),
            format!("{path} = {}", selected(&t).unwrap_or("?")),
        ),
        Err(e) => (Thp::Never, format!("{path}: {e}")),
    }
}

/// The THP setting for anonymous memory (a domain's private buffers), and
/// where it was read, for messages.
pub fn thp_anon() -> (Thp, String) {
    read_setting("enabled")
}

/// The THP setting for shared memory (memfds: a domain's pool), and where
/// it was read. A 2 MiB size set to its own value overrides the global one.
pub fn thp_shmem() -> (Thp, String) {
    if shmem_size_inherits() {
        read_setting("shmem_enabled")
    } else {
        read_setting("hugepages-2048kB/shmem_enabled")
    }
}

/// Whether the 2 MiB size's own shared-memory setting defers to the
/// global one (`inherit`, or a kernel without per-size settings).
fn shmem_size_inherits() -> bool {
    std::fs::read_to_string(format!("{THP_DIR}/hugepages-2048kB/shmem_enabled"))
        .map(|t| selected(&t) == Some("inherit"))
        .unwrap_or(true)
}

/// The global `shmem_enabled` word that setting `advise` would replace:
/// Some only where it is the kernel's default `never` and the 2 MiB size
/// inherits it (a deliberate `deny` or a per-size value is the host's
/// choice, left alone).
pub fn advise_thp_shmem_word() -> Option<String> {
    let text = std::fs::read_to_string(SHMEM_ENABLED).ok()?;
    (selected(&text) == Some("never") && shmem_size_inherits()).then(|| "never".to_string())
}

/// Sets the global `shmem_enabled` to `word` (root).
pub fn set_thp_shmem(word: &str) -> io::Result<()> {
    std::fs::write(SHMEM_ENABLED, word)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {SHMEM_ENABLED}: {e}")))
}

/// The hugetlb pool of 2 MiB pages (`/proc/meminfo`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HugetlbPool {
    /// `HugePages_Total`: the pool's size (`nr_hugepages` plus surplus).
    pub total: u64,
    /// `HugePages_Free`: pages no mapping has faulted in.
    pub free: u64,
    /// `HugePages_Rsvd`: free pages promised to mappings already made.
    pub reserved: u64,
}

impl HugetlbPool {
    /// Pages a new mapping can still reserve.
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }

    fn parse(meminfo: &str) -> HugetlbPool {
        let field = |name: &str| {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or(0)
        };
        HugetlbPool {
            total: field("HugePages_Total:"),
            free: field("HugePages_Free:"),
            reserved: field("HugePages_Rsvd:"),
        }
    }

    /// The pool now.
    pub fn read() -> io::Result<HugetlbPool> {
        Ok(HugetlbPool::parse(&std::fs::read_to_string(
            "/proc/meminfo",
        )?))
    }
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// `/proc/sys/vm/nr_hugepages`: the persistent pool size asked for.
pub fn nr_hugepages() -> io::Result<u64> {
    std::fs::read_to_string(NR_HUGEPAGES)?
        .trim()
        .parse()
        .map_err(|_| io::Error::other("nr_hugepages is not a number"))
}

/// Asks the kernel for a pool of `n` persistent huge pages (root). It may
/// give fewer (memory fragmented); read [`nr_hugepages`] back to know.
pub fn set_nr_hugepages(n: u64) -> io::Result<()> {
    std::fs::write(NR_HUGEPAGES, n.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("writing {NR_HUGEPAGES}: {e}")))
}

/// The 2 MiB-aligned part of `len` bytes at `addr`: (start, length), the
/// length 0 when no whole huge page fits.
pub(crate) fn aligned_part(addr: usize, len: usize) -> (usize, usize) {
    let start = addr.next_multiple_of(HUGE_PAGE);
    let end = (addr + len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        (start, end - start)
    } else {
        (start, 0)
    }
}

pub(crate) fn madvise_huge(start: usize, len: usize) -> io::Result<()> {
    // SAFETY: MADV_HUGEPAGE only changes how the kernel backs the pages of
    // a range the caller owns (never their contents); the range lies
    // inside a live mapping or allocation the caller holds.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    crate::count_syscall();
    crate::cvt(r as libc::c_long, "madvise(MADV_HUGEPAGE)").map(|_| ())
}

/// Bytes of the mapping that starts at `addr` which the kernel maps with
/// 2 MiB entries: its `ShmemPmdMapped`, `FilePmdMapped` and
/// `AnonHugePages` in `/proc/self/smaps`; an error when no mapping starts
/// there.
pub(crate) fn pmd_mapped(addr: usize) -> io::Result<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    pmd_mapped_in(&smaps, addr)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no mapping starts there"))
}

fn pmd_mapped_in(smaps: &str, addr: usize) -> Option<usize> {
    let head = format!("{addr:08x}-");
    let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
    lines.next()?;
    let kb: usize = lines
        .take_while(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.ends_with(':'))
        })
        .filter_map(|l| {
            let (key, rest) = l.split_once(':')?;
            let huge = ["ShmemPmdMapped", "FilePmdMapped", "AnonHugePages"].contains(&key);
            huge.then(|| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<usize>()
                    .ok()
            })?
        })
        .sum();
    Some(kb * 1024)
}

/// Asks for transparent huge pages under the whole 2 MiB pages inside
/// `buf` (a private buffer, best allocated before it is first touched).
/// Returns the bytes advised: 0 when no whole huge page fits or the
/// kernel refused.
pub fn advise_huge(buf: &mut [u8]) -> usize {
    let (start, len) = aligned_part(buf.as_mut_ptr() as usize, buf.len());
    if len == 0 || madvise_huge(start, len).is_err() {
        return 0;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_thp("always [madvise] never\n"), Thp::Madvise);
        assert_eq!(parse_thp("[always] madvise never"), Thp::Always);
        assert_eq!(parse_thp("always madvise [never]"), Thp::Never);
        assert_eq!(
            parse_thp("always within_size advise [never] deny force"),
            Thp::Never
        );
        assert_eq!(
            parse_thp("always within_size [advise] never deny force"),
            Thp::Madvise
        );
        assert_eq!(parse_thp("[deny]"), Thp::Never);
        assert_eq!(parse_thp("garbage"), Thp::Never);
    }

    #[test]
    fn smaps_give_a_mappings_huge_bytes() {
        let smaps = "7f00000000-7f00200000 rw-s 00000000 00:01 5 /memfd:pool (deleted)\n\
                     Size:               2048 kB\n\
                     ShmemPmdMapped:     2048 kB\n\
                     FilePmdMapped:         0 kB\n\
                     VmFlags: rd wr sh mr mw me ms hg\n\
                     7f00200000-7f00400000 rw-s 00000000 00:01 6 /memfd:other (deleted)\n\
                     ShmemPmdMapped:     2048 kB\n";
        assert_eq!(pmd_mapped_in(smaps, 0x007f_0000_0000), Some(2 << 20));
        assert_eq!(pmd_mapped_in(smaps, 0x007f_0010_0000), None);
    }

    #[test]
    fn meminfo_gives_the_pool() {
        let p = HugetlbPool::parse(
            "MemTotal: 1 kB\nHugePages_Total:       8\nHugePages_Free:        6\nHugePages_Rsvd:        2\nHugepagesize: 2048 kB\n",
        );
        assert_eq!(
            p,
            HugetlbPool {
                total: 8,
                free: 6,
                reserved: 2
            }
        );
        assert_eq!(p.available(), 4);
        assert!(HugetlbPool::read().is_ok());
    }

    #[test]
    fn only_whole_aligned_huge_pages_are_advised() {
        assert_eq!(aligned_part(HUGE_PAGE, HUGE_PAGE), (HUGE_PAGE, HUGE_PAGE));
        assert_eq!(aligned_part(HUGE_PAGE + 1, HUGE_PAGE).1, 0);
        assert_eq!(aligned_part(1, 3 * HUGE_PAGE), (HUGE_PAGE, 2 * HUGE_PAGE));
        let mut small = vec![0u8; 4096];
        assert_eq!(advise_huge(&mut small), 0);
        // A buffer of 3 huge pages holds at least two whole aligned ones;
        // the kernel takes the advice when THP is built in.
        let mut big = vec![0u8; 3 * HUGE_PAGE];
        let advised = advise_huge(&mut big);
        let (thp, what) = thp_anon();
        if thp != Thp::Never || std::path::Path::new(THP_DIR).exists() {
            assert!(advised >= HUGE_PAGE, "{what}: advised {advised}");
        }
        big[HUGE_PAGE] = 7;
        assert_eq!(big[HUGE_PAGE], 7, "contents unchanged by the advice");
    }
}
