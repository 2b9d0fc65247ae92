//! A driver domain that replaced its program in place (`splitnet upgrade`):
//! `Resume` on the control socket it kept gives it its descriptors again,
//! with a fresh watch socket and the pools given afresh, and `EvtchnRebind`
//! its own bound ports, untouched; nothing more, and to no one else.

mod common;
use common::domain;

use hv::{DomainSpec, ErrorKind, HvClient, Hypervisor};
use splitnet_hv as hv;
use std::sync::Arc;
use std::time::Duration;

/// The program after `execve`: a client on the same control socket.
fn next_program(old: &HvClient) -> hv::HvResult<HvClient> {
    let fd = old.control_fd().try_clone_to_owned().unwrap();
    HvClient::resume(sys::SeqPacket::from_fd(fd))
}

#[test]
fn resume_comes_after_hello_and_only_from_a_driver_domain() {
    let hv = Hypervisor::new();
    let (_, sock) = hv
        .create_domain(DomainSpec::new("drv", "driver", 64, 1))
        .unwrap();
    let e = HvClient::resume(sock).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("after Hello"), "{e}");
    let g1 = domain(&hv, "guest1", "guest");
    let e = next_program(&g1).err().unwrap();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("only a driver domain"), "{e}");
}

#[test]
fn a_resumed_driver_domain_has_its_own_channels_and_pools_again_and_fresh_watches() {
    let hv: Arc<Hypervisor> = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let mut g2 = domain(&hv, "guest2", "guest");
    let (d, g) = (drv.domid(), g1.domid());
    let a = g1.evtchn_alloc_unbound(d).unwrap();
    let b = drv.evtchn_bind(g, a.port).unwrap();
    let gref = g1.grants().grant_access(d, 3, false).unwrap();
    let m = drv.map_grant(g, gref, true).unwrap();
    let home = format!("/local/domain/{d}/x");
    drv.store_write(&home, "1").unwrap();
    drv.watch(&home, "t").unwrap();

    let mut next = next_program(&drv).unwrap();
    assert_eq!(next.domid(), d);
    // Its own port, as bound: a notification crosses both ways.
    let b2 = next.evtchn_rebind(g, a.port).unwrap();
    assert_eq!(b2.port, b.port);
    a.notify().unwrap();
    assert!(b2.wait(Some(Duration::from_secs(1))).unwrap());
    b2.notify().unwrap();
    assert!(a.wait(Some(Duration::from_secs(1))).unwrap());
    // No one else's, nor one it never bound.
    let e = g2.evtchn_rebind(g, a.port).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadPort, "{e}");
    let e = next.evtchn_rebind(g, a.port + 7).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadPort, "{e}");
    // The guest's pool is given again to the program that has no copy.
    let gref2 = g1.grants().grant_access(d, 4, false).unwrap();
    next.map_grant(g, gref2, true).unwrap();
    // The old program's watch went with its socket: the same one again is
    // no duplicate, and fires on the new socket.
    next.watch(&home, "t").unwrap();
    let first = next.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(first.token, "t");
    next.store_write(&home, "2").unwrap();
    let ev = next.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!((ev.path.as_str(), ev.token.as_str()), (home.as_str(), "t"));
    // What it mapped before stays mapped in hv, and unmaps by its handle.
    next.unmap_handle(m.handle).unwrap();
    drop(g2);
}
