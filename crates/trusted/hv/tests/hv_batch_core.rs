//! Where hv serves a domain's hypercall batches: on the core the caller
//! rang from (Xen ran a hypercall on the calling CPU), or, with the option
//! off, wherever the scheduler wakes hv's thread.

mod common;
use common::domain;

use hv::{HvClient, Hypervisor};
use splitnet_hv as hv;
use std::time::{Duration, Instant};

/// The cores domain `client`'s batch thread (`hv-batch-N`, a thread of
/// this process) may run on, as the kernel lists them; None until the
/// thread has taken its name, which it does once it runs.
fn batch_thread_cores(client: &HvClient) -> Option<String> {
    let comm = format!("hv-batch-{}", client.domid());
    let found: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .map(|t| t.path())
        .filter(|p| {
            std::fs::read_to_string(p.join("comm"))
                .unwrap_or_default()
                .trim()
                == comm
        })
        .map(|p| {
            let status = std::fs::read_to_string(p.join("status")).unwrap();
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap();
            line.trim().to_string()
        })
        .collect();
    assert!(found.len() <= 1, "threads named {comm}: {found:?}");
    found.into_iter().next()
}

/// Waits until the batch thread's cores are `want`; what it had last.
fn wait_for_cores(client: &HvClient, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = batch_thread_cores(client).unwrap_or_else(|| "(not named yet)".into());
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The kernel's list of `cores` (consecutive numbers as a range).
fn listed(cores: &[usize]) -> String {
    match cores {
        [one] => one.to_string(),
        [first, .., last] if last - first + 1 == cores.len() => format!("{first}-{last}"),
        _ => cores
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(","),
    }
}

#[test]
fn batches_move_to_the_callers_core_and_stay_free_when_told() {
    let cores = sys::allowed_cpus().unwrap();
    if cores.len() < 2 {
        eprintln!("one core only: there is no other core for hv to follow a caller to");
        return;
    }
    let all = listed(&cores);

    // On by default: after a batch rung from core c, hv's thread is there.
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    assert_eq!(wait_for_cores(&drv, &all), all, "free until a batch comes");
    for &c in [cores[1], cores[0], cores[1]].iter() {
        sys::set_thread_cpus(&[c]).unwrap();
        drv.grant_copy_batch(&[]).unwrap();
        assert_eq!(wait_for_cores(&drv, &c.to_string()), c.to_string());
    }

    // Off: the thread keeps every core whatever core the caller rings from
    // (made from a thread free to use them all: a thread starts with its
    // maker's cores).
    sys::set_thread_cpus(&cores).unwrap();
    let hv = Hypervisor::new();
    hv.set_batches_follow_caller(false);
    // Domain 2: the first hypervisor's domain 1 has a thread of that name.
    let _drv = domain(&hv, "drv", "driver");
    let mut g = domain(&hv, "guest1", "guest");
    sys::set_thread_cpus(&[cores[1]]).unwrap();
    for _ in 0..3 {
        g.grant_copy_batch(&[]).unwrap();
    }
    // hv's thread runs one batch after the other: by the third's answer it
    // was past the point where it would have moved after the first two.
    assert_eq!(batch_thread_cores(&g).as_deref(), Some(all.as_str()));
    sys::set_thread_cpus(&cores).unwrap();
}
