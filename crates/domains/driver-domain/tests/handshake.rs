//! netfront's handshake driven by the backend's state, as xenbus drives a
//! Linux frontend: `Netfront::begin` publishes the frontend's half and
//! returns without waiting for the backend, so a guest's event loop keeps
//! serving its other vifs while one backend is slow or dead (a driver
//! domain killed mid hot-plug held a guest's loop for 20 s when the
//! handshake blocked). `finish` completes once the backend is Connected,
//! and reports a backend that closed instead.

mod common;
use common::domain;

use abi::xenbus::XenbusState;
use driver_domain::netback::{self, Netback};
use netfront::Netfront;
use splitnet_driver_domain as driver_domain;
use std::sync::mpsc;
use std::time::Duration;
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::VifConfig;

const LONG: Duration = Duration::from_secs(20);

/// A driver domain and a guest with one vif between them, not probed yet.
struct Vif {
    _hv: std::sync::Arc<hv::Hypervisor>,
    drv: hv::HvClient,
    g: hv::DomId,
    c: hv::HvClient,
    be: String,
    fe: String,
}

fn vif() -> Vif {
    let hv = hv::Hypervisor::new();
    let (drv_id, drv) = domain(&hv, "drv", "driver", 2048 + 512);
    let (g, c) = domain(&hv, "guest1", "guest", 600);
    let v = VifConfig::fast_path("guest1", "drv", 0);
    setup_vif(&mut Store::new(&hv), &v, g, drv_id).unwrap();
    Vif {
        _hv: hv,
        drv,
        g,
        c,
        be: format!("/local/domain/{drv_id}/backend/vif/{g}/0"),
        fe: format!("/local/domain/{g}/device/vif/0"),
    }
}

#[test]
fn begin_returns_before_the_backend_connects_and_finish_completes_after() {
    let Vif {
        _hv,
        mut drv,
        g,
        mut c,
        be,
        fe,
    } = vif();
    // The backend probes, then connects only when the test says so.
    let (go, wait) = mpsc::channel::<()>();
    let be2 = be.clone();
    let backend = std::thread::spawn(move || {
        let p = netback::probe(&mut drv, g, &be2).expect("probe");
        wait.recv().unwrap();
        let nb = Netback::connect(&mut drv, p, LONG).expect("the backend connects");
        (drv, nb)
    });
    testutil::wait_until("the backend's InitWait", LONG, || {
        c.read_state(&be).ok() == Some(XenbusState::InitWait)
    });
    let mut nf = Netfront::begin(&mut c, &fe, LONG).expect("begin");
    // The backend is held: begin did not wait for it.
    assert_eq!(c.read_state(&be).unwrap(), XenbusState::InitWait);
    assert_eq!(c.read_state(&fe).unwrap(), XenbusState::Connected);
    // Too early: not an error, the channel stays for the next look.
    assert!(!nf.finish(&mut c).expect("finish before Connected"));
    go.send(()).unwrap();
    c.wait_state(&be, LONG, |s| s == XenbusState::Connected)
        .expect("the backend connects");
    nf.finish(&mut c)
        .expect("finish once the backend is Connected");
    let (_drv, nb) = backend.join().unwrap();
    assert!(nb.is_connected());
    // finish posted the RX buffers.
    assert!(nf.buffer_ids().unwrap().rx_posted > 0);
}

#[test]
fn finish_names_a_backend_that_closed_instead_of_connecting() {
    let mut v = vif();
    let (drv, c, be) = (&mut v.drv, &mut v.c, v.be.as_str());
    let _p = netback::probe(drv, v.g, be).expect("probe");
    let mut nf = Netfront::begin(c, &v.fe, LONG).expect("begin");
    drv.store_write(
        &format!("{be}/{}", abi::xenbus::keys::DISCONNECT_REASON),
        "no room",
    )
    .unwrap();
    drv.switch_state(be, XenbusState::Closed).unwrap();
    let e = nf.finish(c).unwrap_err().to_string();
    assert!(
        e.contains("closed instead of connecting") && e.contains("no room"),
        "{e}"
    );
    nf.release(c);
}
