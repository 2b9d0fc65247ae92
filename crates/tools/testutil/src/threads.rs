//! The threads of a process and the cores each may run on, from /proc.

/// Each thread of process `pid` (a number, or `self`) whose name starts
/// with `prefix`: its name and the cores it may run on, as its
/// `Cpus_allowed_list` gives them.
pub fn thread_cores(pid: impl std::fmt::Display, prefix: &str) -> Vec<(String, Vec<usize>)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process runs");
    tasks
        .flatten()
        .filter_map(|t| {
            let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let name = name.trim().to_string();
            if !name.starts_with(prefix) {
                return None;
            }
            // A thread that ended since the listing is left out.
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            Some((name, cpu_list(list.trim())))
        })
        .collect()
}

/// A core list in the kernel's list format ("0-1,4", cpuset(7)) as its
/// cores, lowest first.
pub fn cpu_list(list: &str) -> Vec<usize> {
    let mut cores = Vec::new();
    for part in list.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let bound = |s: &str| {
            s.parse::<usize>()
                .unwrap_or_else(|e| panic!("{list:?}: {e}"))
        };
        cores.extend(bound(lo)..=bound(hi));
    }
    cores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list("0"), vec![0]);
        assert_eq!(cpu_list("0-1,4-5,7"), vec![0, 1, 4, 5, 7]);
    }

    #[test]
    fn this_process_has_a_main_thread_with_cores() {
        let all = thread_cores("self", "");
        assert!(!all.is_empty());
        assert!(all.iter().all(|(_, cores)| !cores.is_empty()), "{all:?}");
    }
}
