//! Dedicated receive queues made by hv (`QueueOpen`, `QueueClose`): only a
//! driver domain hv has a queue maker for may ask, the request reaches
//! that domain's maker alone, with the receive buffer capped, and a
//! forgotten driver domain may ask no more. Run under the namespace lock
//! (the domains' memory is `splitnet-*` memfds): `flock
//! /tmp/splitnet-ns.lock cargo test -p splitnet-hv --test hv_queues`.

mod common;
use common::domain;

use hv::{ErrorKind, HvError, HvResult, Hypervisor, QueueMaker};
use splitnet_hv as hv;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

/// A maker that records each request and answers with a socket of no
/// consequence, or refuses every MAC but `ours`.
struct Recorder {
    ours: [u8; 6],
    seen: Mutex<Vec<String>>,
}

impl QueueMaker for Recorder {
    fn open(&self, port: &str, owner: u32, mac: [u8; 6], rcvbuf: usize) -> HvResult<OwnedFd> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("open {port} {owner} {rcvbuf}"));
        if mac != self.ours {
            return Err(HvError::new(ErrorKind::Invalid, "not its vif's MAC"));
        }
        Ok(OwnedFd::from(
            std::os::unix::net::UnixDatagram::pair().unwrap().0,
        ))
    }
    fn close(&self, port: &str, owner: u32) -> HvResult<()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("close {port} {owner}"));
        Ok(())
    }
}

#[test]
fn only_a_driver_domain_with_a_maker_gets_queues_from_its_own_maker() {
    let _ns = testutil::root_or_skip("hv's domains' memfds");
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut drv2 = domain(&hv, "drv2", "driver");
    let mut guest = domain(&hv, "guest1", "guest");
    let mac = [0, 0x16, 0x3e, 0, 0, 1];
    let maker = Arc::new(Recorder {
        ours: mac,
        seen: Mutex::new(Vec::new()),
    });
    hv.queue_maker("drv", maker.clone());

    // The receive buffer asked for is capped.
    let fd = drv.queue_open("peth0", 3, mac, u32::MAX).unwrap();
    drop(fd);
    drv.queue_close("peth0", 3).unwrap();
    // The maker's refusal reaches the domain as it was.
    let e = drv
        .queue_open("peth0", 4, [0, 0x16, 0x3e, 0, 0, 9], 4096)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("not its vif's MAC"), "{e}");
    // Another driver domain, or a guest, has no maker: refused, and drv's
    // maker never hears of it.
    for d in [&mut drv2, &mut guest] {
        let e = d.queue_open("peth0", 1, mac, 4096).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotPrivileged, "{e}");
        assert!(d.queue_close("peth0", 1).is_err());
    }
    let cap = hv::proto::QUEUE_RCVBUF_MAX;
    assert_eq!(
        *maker.seen.lock().unwrap(),
        [
            format!("open peth0 3 {cap}"),
            "close peth0 3".to_string(),
            "open peth0 4 4096".to_string(),
        ]
    );
    // A driver domain hv forgot (it will not come back) may ask no more.
    hv.port_forget("drv");
    let e = drv.queue_open("peth0", 3, mac, 4096).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotPrivileged);
}
