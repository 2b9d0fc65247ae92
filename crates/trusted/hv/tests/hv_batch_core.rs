//! Where hv serves a domain's hypercall batches: on the core the caller
//! rang from (Xen ran a hypercall on the calling CPU), or, with the option
//! off, wherever the scheduler wakes hv's thread.

mod common;
use common::domain;

use hv::{HvClient, Hypervisor};
use splitnet_hv as hv;
use std::time::{Duration, Instant};

/// The cores domain `client`'s batch thread (`hv-batch-N`, a thread of
/// this process) may run on; None until the thread has taken its name,
/// which it does once it runs.
fn batch_thread_cores(client: &HvClient) -> Option<Vec<usize>> {
    let name = format!("hv-batch-{}", client.domid());
    let found: Vec<Vec<usize>> = testutil::thread_cores("self", &name)
        .into_iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, cores)| cores)
        .collect();
    assert!(found.len() <= 1, "threads named {name}: {found:?}");
    found.into_iter().next()
}

/// Waits until the batch thread's cores are `want`; what it had last.
fn wait_for_cores(client: &HvClient, want: &[usize]) -> Option<Vec<usize>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = batch_thread_cores(client);
        if now.as_deref() == Some(want) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn batches_move_to_the_callers_core_and_stay_free_when_told() {
    let cores = sys::allowed_cpus().unwrap();
    if cores.len() < 2 {
        eprintln!("one core only: there is no other core for hv to follow a caller to");
        return;
    }

    // On by default: after a batch rung from core c, hv's thread is there.
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    assert_eq!(
        wait_for_cores(&drv, &cores),
        Some(cores.clone()),
        "free until a batch comes"
    );
    for &c in [cores[1], cores[0], cores[1]].iter() {
        sys::set_thread_cpus(&[c]).unwrap();
        drv.grant_copy_batch(&[]).unwrap();
        assert_eq!(wait_for_cores(&drv, &[c]), Some(vec![c]));
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
    assert_eq!(batch_thread_cores(&g), Some(cores.clone()));
    sys::set_thread_cpus(&cores).unwrap();
}
