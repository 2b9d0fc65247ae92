//! A driver domain whose process died, kept for a successor
//! (`Hypervisor::revive`): its channels stay bound and its id stays, what
//! the dead process mapped is released, the successor resumes on a fresh
//! control socket, and the ports it does not take back are closed when it
//! says so. A domain not kept, or not a driver domain, is
//! destroyed when its process hangs up, as always.

mod common;
use common::domain;

use hv::{ErrorKind, HvClient, Hypervisor};
use splitnet_hv as hv;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits up to a second for domain `name` to be gone from hv.
fn gone(hv: &Hypervisor, name: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(1);
    while hv.domid_of(name).is_some() {
        if Instant::now() > until {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

#[test]
fn a_kept_driver_domain_is_revived_with_its_channels_and_without_its_maps() {
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let (d, g) = (drv.domid(), g1.domid());
    hv.keep_on_hangup(d, true);
    let a = g1.evtchn_alloc_unbound(d).unwrap();
    let mut drv = drv;
    let b = drv.evtchn_bind(g, a.port).unwrap();
    // A second vif's port, whose vif goes while no one serves it.
    let gone_vif = g1.evtchn_alloc_unbound(d).unwrap();
    let c = drv.evtchn_bind(g, gone_vif.port).unwrap();
    let gref = g1.grants().grant_access(d, 3, false).unwrap();
    drv.map_grant(g, gref, true).unwrap();
    // The process dies: everything it held in its own memory goes.
    drop((drv, b, c));
    let sock = hv.revive(d).unwrap();
    assert_eq!(hv.domid_of("drv"), Some(d), "the same domain");
    let mut next = HvClient::resume(sock).unwrap();
    assert_eq!(next.domid(), d);
    // Its port, still bound: a kick sent while no one served it waits.
    a.notify().unwrap();
    let b2 = next.evtchn_rebind(g, a.port).unwrap();
    assert!(b2.wait(Some(Duration::from_secs(1))).unwrap());
    // The port it did not take back is closed once it says so.
    assert_eq!(next.evtchn_close_unclaimed().unwrap(), 1);
    let e = next.evtchn_rebind(g, gone_vif.port).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadPort, "{e}");
    assert_eq!(next.evtchn_close_unclaimed().unwrap(), 0);
    // The dead process's map was released: the grant maps again.
    let m = next.map_grant(g, gref, true).unwrap();
    next.unmap_handle(m.handle).unwrap();
    // A successor that dies too is kept again; one given up on is
    // destroyed by whoever decided so.
    drop((next, b2));
    let sock = hv.revive(d).unwrap();
    drop(sock);
    assert!(hv.destroy_domain(d, "given up"));
    assert!(gone(&hv, "drv"));
}

#[test]
fn a_domain_not_kept_is_destroyed_when_it_hangs_up_and_cannot_be_revived() {
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let drv = domain(&hv, "drv", "driver");
    let g1 = domain(&hv, "guest1", "guest");
    let (d, g) = (drv.domid(), g1.domid());
    // Only a driver domain is ever kept.
    hv.keep_on_hangup(g, true);
    drop((drv, g1));
    assert!(gone(&hv, "drv") && gone(&hv, "guest1"));
    let e = hv.revive(d).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadDomain, "{e}");
}

#[test]
fn a_live_process_is_not_replaced() {
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    hv.keep_on_hangup(drv.domid(), true);
    let e = hv.revive(drv.domid()).err().unwrap();
    assert!(e.to_string().contains("has not hung up"), "{e}");
    drv.nop().unwrap();
}
