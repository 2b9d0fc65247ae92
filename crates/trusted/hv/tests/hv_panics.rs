//! hv's panic policy: hostile offsets and frames handed to hv come back as
//! errors, and a thread of hv that panics anyway takes down only the domain
//! it serves, while hv goes on serving the others.

mod common;
use common::{copy_from, domain};

use abi::grant::{CopyPtr, GrantCopy, DOMID_SELF, GNTST_BAD_COPY_ARG, GNTST_BAD_PAGE};
use abi::SharedMemory;
use hv::{HvClient, Hypervisor};
use splitnet_hv as hv;
use std::sync::Arc;
use std::time::Duration;
use testutil::wait_until;

const PAGE: usize = 4096;

/// guest2 grants the driver domain a frame and the driver copies it out,
/// over the batch page: the path a hostile guest1 must not disturb.
fn serves(drv: &mut HvClient, g2: &mut HvClient, fill: u8) {
    g2.pool().fill(5 * PAGE, 64, fill);
    let gref = g2.grants().grant_access(drv.domid(), 5, false).unwrap();
    let st = drv
        .grant_copy_batch(&[copy_from(g2.domid(), gref, 0, 9, 64)])
        .unwrap();
    assert_eq!(st, vec![0]);
    let mut b = [0u8; 64];
    drv.pool().read_bytes(9 * PAGE, &mut b);
    assert_eq!(b, [fill; 64]);
    g2.grants().end_access(gref).unwrap();
}

fn own(gmfn: u64, offset: u16) -> CopyPtr {
    CopyPtr::Frame {
        domid: DOMID_SELF,
        gmfn,
        offset,
    }
}

/// How long a test waits for hv to clean up.
const WAIT: Duration = Duration::from_secs(10);

#[test]
fn out_of_range_offsets_handed_to_hv_are_errors_and_hv_serves_on() {
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let mut g2 = domain(&hv, "guest2", "guest");
    let g1_grant = g1.grants().grant_access(drv.domid(), 1, true).unwrap();
    // guest1's grant entry names a frame far outside its 64.
    g1.grants()
        .raw()
        .write_u32(g1_grant as usize * 8 + 4, u32::MAX);
    let copy = |source, dest, len| GrantCopy {
        source,
        dest,
        len,
        status: 0,
    };
    let hostile = [
        copy(own(u64::MAX, 0), own(0, 0), 8),
        copy(own(63, 0), own(u64::from(u32::MAX) + 1, 0), 8),
        copy(own(0, u16::MAX), own(1, 0), 1),
        copy(own(0, 4095), own(1, 0), 2),
        copy(own(0, 0), own(1, 1), u16::MAX),
    ];
    for path in ["batch page", "control socket"] {
        let st = match path {
            "batch page" => g1.grant_copy_batch(&hostile).unwrap(),
            _ => g1.grant_copy(&hostile).unwrap(),
        };
        assert_eq!(
            st,
            [
                GNTST_BAD_PAGE,
                GNTST_BAD_PAGE,
                GNTST_BAD_COPY_ARG,
                GNTST_BAD_COPY_ARG,
                GNTST_BAD_COPY_ARG
            ],
            "{path}"
        );
        let via_grant = copy_from(g1.domid(), g1_grant, 0, 0, 8);
        assert_eq!(
            drv.grant_copy_batch(&[via_grant]).unwrap(),
            [GNTST_BAD_PAGE]
        );
        assert_eq!(
            drv.map_grant(g1.domid(), g1_grant, false)
                .err()
                .unwrap()
                .kind,
            hv::ErrorKind::BadPage
        );
        serves(&mut drv, &mut g2, 0x11);
    }
    g1.nop().unwrap();
    assert_eq!(hv.status().counters.ops_of("thread_panics"), 0);
}

#[test]
fn a_panic_in_a_thread_of_hv_destroys_only_its_domain() {
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let mut g2 = domain(&hv, "guest2", "guest");
    let id = g1.domid();
    // A bug in a thread serving guest1 (as hv-batch or hv-dm would have
    // died of one uncaught, leaving guest1 hung and hv's state half-done).
    hv.spawn_guarded(format!("hv-test-{id}"), Some(id), || {
        panic!("an injected bug")
    })
    .unwrap();
    wait_until("guest1 destroyed", WAIT, || {
        hv.status().domains.iter().all(|d| d.id != id)
    });
    assert_eq!(hv.status().counters.ops_of("thread_panics"), 1);
    assert!(g1.nop().is_err(), "guest1's connection is closed");
    // hv itself, and every other domain, carry on.
    assert!(!hv.is_shutting_down());
    serves(&mut drv, &mut g2, 0x22);
    drv.nop().unwrap();
    // A thread serving no domain panics without taking one down.
    hv.spawn_guarded("hv-test-none".into(), None, || panic!("another"))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(hv.status().counters.ops_of("thread_panics"), 2);
    assert_eq!(hv.status().domains.len(), 2);
    serves(&mut drv, &mut g2, 0x33);
}
