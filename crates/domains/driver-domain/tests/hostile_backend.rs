//! A hostile driver domain against netfront. The handshake is the real one
//! (netback probes and connects); then the test maps the rings itself, as
//! the driver domain may, and writes the responses a malicious or broken
//! backend could: ids netfront never issued, duplicates, data outside the
//! posted buffer, offloads it never negotiated, and producer indices
//! running ahead. Each is refused and counted; at worst the vif's link goes
//! down. The guest never crashes (the checks Linux's netfront gained after
//! Xen's security advisories on backend trust).

mod common;
use common::{domain, Guest};

use abi::netif::{RxFlags, RxRequest, RxResponse, TxRequest, TxResponse};
use abi::ring::{layout, BackRing};
use abi::xenbus::XenbusState;
use abi::SharedMemory;
use driver_domain::netback;
use frame::packet::{Gso, GsoKind, Packet};
use hv::MappedGrant;
use hv::{DomId, HvClient, Hypervisor};
use netfront::Netfront;
use splitnet_driver_domain as driver_domain;
use std::sync::Arc;
use std::time::Duration;
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::VifConfig;

/// The guest's frontend, and the rings as the hostile driver domain sees them.
struct Evil {
    _hv: Arc<Hypervisor>,
    drv: HvClient,
    /// The guest's domain id and its vif's frontend directory.
    g: DomId,
    fe: String,
    guest: Guest,
    rx: BackRing<MappedGrant, RxRequest, RxResponse>,
    tx: BackRing<MappedGrant, TxRequest, TxResponse>,
}

fn evil(offload: bool) -> Evil {
    let hv = Hypervisor::new();
    let (drv_id, mut drv) = domain(&hv, "drv", "driver", 2048 + 512);
    let (g, mut c) = domain(&hv, "guest1", "guest", 600);
    let v = VifConfig {
        offload: abi::offloads::Caps::from_bool(offload),
        ..VifConfig::fast_path("guest1", "drv", 0)
    };
    setup_vif(&mut Store::new(&hv), &v, g, drv_id).unwrap();
    // The real probe publishes the backend's features; the rest of the
    // handshake is the hostile backend's own: it maps the rings itself.
    let be = format!("/local/domain/{drv_id}/backend/vif/{g}/0");
    let fe = format!("/local/domain/{g}/device/vif/0");
    let backend = std::thread::spawn(move || {
        let _probe = netback::probe(&mut drv, g, &be).expect("probe");
        drv.wait_state(&fe, Duration::from_secs(20), |s| {
            s == XenbusState::Connected
        })
        .expect("the frontend connects");
        let rx = attach(&mut drv, g, &fe, "rx-ring-ref");
        let tx = attach(&mut drv, g, &fe, "tx-ring-ref");
        drv.switch_state(&be, XenbusState::Connected).unwrap();
        (drv, rx, tx)
    });
    let fe = format!("/local/domain/{g}/device/vif/0");
    let nf = Netfront::connect(&mut c, &fe, Duration::from_secs(20)).expect("frontend connects");
    let (drv, rx, tx) = backend.join().unwrap();
    let mut guest = Guest {
        hv: c,
        nf,
        mac: [0, 0x16, 0x3e, 0, 0, 1],
    };
    // The first poll posts the RX buffers.
    guest.nf.poll(&mut guest.hv, &mut Vec::new()).unwrap();
    Evil {
        _hv: hv,
        drv,
        g,
        fe,
        guest,
        rx,
        tx,
    }
}

/// Maps the ring the frontend granted under `key`, a second time.
fn attach<Req: abi::ring::RingEntry, Rsp: abi::ring::RingEntry>(
    drv: &mut HvClient,
    g: DomId,
    fe: &str,
    key: &str,
) -> BackRing<MappedGrant, Req, Rsp> {
    let gref: u32 = drv
        .store_read_str(&format!("{fe}/{key}"))
        .unwrap()
        .parse()
        .unwrap();
    BackRing::attach(drv.map_grant(g, gref, true).unwrap()).unwrap()
}

impl Evil {
    /// The next `n` RX requests netfront posted.
    fn take_rx(&mut self, n: usize) -> Vec<RxRequest> {
        (0..n)
            .map(|_| self.rx.next_request().unwrap().expect("a posted buffer"))
            .collect()
    }

    fn answer_rx(&mut self, rsps: &[RxResponse]) -> Vec<Packet> {
        for r in rsps {
            self.rx.push_response(r).unwrap();
        }
        self.rx.push_responses_and_check_notify();
        let mut out = Vec::new();
        self.guest
            .nf
            .poll(&mut self.guest.hv, &mut out)
            .expect("netfront survives");
        out
    }

    fn rejected(&self, reason: &str) -> u64 {
        self.guest.nf.counters.rejected.get(reason)
    }

    fn dropped(&self, reason: &str) -> u64 {
        self.guest.nf.counters.drops.get(reason)
    }
}

fn data(id: u16, offset: u16, len: u16) -> RxResponse {
    RxResponse {
        id,
        offset,
        flags: RxFlags::from_bits_retain(0),
        status: len as i16,
    }
}

#[test]
fn rx_responses_netfront_never_asked_for_are_refused() {
    let mut e = evil(true);
    let reqs = e.take_rx(6);
    // An id never issued, in the first request's place.
    let got = e.answer_rx(&[data(300, 0, 100)]);
    assert!(got.is_empty());
    assert_eq!(e.rejected("rx_response_unknown_id"), 1);
    assert_eq!(e.rejected("rx_response_out_of_order"), 1);
    // A proper answer to the second request, then the same id again.
    let got = e.answer_rx(&[data(reqs[1].id, 0, 80), data(reqs[1].id, 0, 80)]);
    assert_eq!(got.len(), 1, "the proper answer is delivered");
    assert_eq!(got[0].data.len(), 80);
    assert_eq!(e.rejected("rx_response_unknown_id"), 2, "the duplicate");
    // Data outside the posted buffer: past the page, or a negative size
    // that is not a status.
    let bad_before = e.dropped("rx_bad_response");
    let got = e.answer_rx(&[
        data(reqs[3].id, 4000, 200),
        data(reqs[4].id, 0, 5000),
        RxResponse {
            status: -1234,
            ..data(reqs[5].id, 0, 0)
        },
    ]);
    assert!(
        got.is_empty(),
        "nothing outside the buffer reaches the guest"
    );
    assert_eq!(e.dropped("rx_bad_response") - bad_before, 3);
    assert!(e.guest.nf.is_connected(), "refusals alone keep the link");
}

#[test]
fn offloads_never_negotiated_are_refused() {
    let mut e = evil(false);
    let reqs = e.take_rx(4);
    // A GSO extra-info slot: this frontend advertised no GSO.
    let gso = Gso {
        kind: GsoKind::TcpV4,
        size: 1448,
        ecn: false,
    }
    .to_extra()
    .to_rx_slot();
    let first = RxResponse {
        flags: RxFlags::EXTRA_INFO,
        ..data(reqs[0].id, 0, 100)
    };
    let got = e.answer_rx(&[first, gso]);
    assert!(got.is_empty());
    assert_eq!(e.rejected("rx_gso_not_negotiated"), 1);
    // A frame over two buffers: no scatter-gather was advertised either.
    let got = e.answer_rx(&[
        RxResponse {
            flags: RxFlags::MORE_DATA,
            ..data(reqs[2].id, 0, 100)
        },
        data(reqs[3].id, 0, 100),
    ]);
    assert!(got.is_empty());
    assert_eq!(e.rejected("rx_sg_not_negotiated"), 1);
    assert!(e.guest.nf.is_connected());
}

#[test]
fn tx_responses_for_unknown_or_finished_requests_are_refused() {
    let mut e = evil(true);
    // Three frames out, so three responses stay within what is outstanding.
    for seq in 0..3u8 {
        let mut p = vec![0xffu8; 6];
        p.extend_from_slice(&e.guest.mac);
        p.extend_from_slice(&[0x88, 0xb5, seq]);
        p.resize(100, 7);
        e.guest.nf.send(&mut e.guest.hv, Packet::new(p)).unwrap();
    }
    e.guest.nf.flush().unwrap();
    let reqs: Vec<TxRequest> = (0..3)
        .map(|_| e.tx.next_request().unwrap().expect("a frame's request"))
        .collect();
    let req = reqs[0];
    // An id never issued, a proper answer, and the same answer again.
    for r in [
        TxResponse::new(999, abi::netif::NetifStatus::Okay),
        TxResponse::new(req.id, abi::netif::NetifStatus::Okay),
        TxResponse::new(req.id, abi::netif::NetifStatus::Okay),
    ] {
        e.tx.push_response(&r).unwrap();
    }
    e.tx.push_responses_and_check_notify();
    e.guest
        .nf
        .poll(&mut e.guest.hv, &mut Vec::new())
        .expect("netfront survives");
    assert_eq!(
        e.guest.nf.counters.rejected.get("tx_response_unknown_id"),
        2
    );
    assert!(e.guest.nf.is_connected());
    assert!(e.guest.nf.can_send());
}

#[test]
fn a_response_producer_running_ahead_takes_the_link_down_not_the_guest() {
    for ring in ["rx", "tx"] {
        let mut e = evil(true);
        let mem = if ring == "rx" {
            e.rx.memory()
        } else {
            e.tx.memory()
        };
        let prod = mem.load_u32(layout::RSP_PROD);
        mem.store_u32(layout::RSP_PROD, prod.wrapping_add(1000));
        e.guest
            .nf
            .poll(&mut e.guest.hv, &mut Vec::new())
            .expect("netfront survives");
        assert_eq!(e.rejected("ring_overflow"), 1, "{ring}");
        assert!(!e.guest.nf.is_connected(), "{ring}: the link is down");
        // Later polls are no-ops, not repeated errors.
        e.guest.nf.poll(&mut e.guest.hv, &mut Vec::new()).unwrap();
        assert_eq!(e.rejected("ring_overflow"), 1, "{ring}");
    }
}

/// A backend that rings its guest's doorbell in a tight loop with nothing
/// behind it (Xen XSA-391: a frontend must not trust its backend's
/// events either). netfront takes the notifications, finds no responses,
/// and after a run of spurious ones tells its loop to stop listening for
/// a delay that grows while the storm lasts, as the guest's loop does
/// (`splitnet-domain`'s `GuestVif::service`): the storm costs the guest
/// about one look per delay, the link stays up, and a real response
/// afterwards is delivered.
#[test]
fn a_backend_event_storm_is_throttled_and_the_link_stays() {
    use domain_common::storm::{MAX_DELAY, THRESHOLD};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let mut e = evil(false);
    let reqs = e.take_rx(1);
    let port: u32 = e
        .drv
        .store_read_str(&format!("{}/event-channel-rx", e.fe))
        .expect("the RX event channel")
        .parse()
        .unwrap();
    let ch = e.drv.evtchn_bind(e.g, port).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let storm = std::thread::spawn(move || {
        let mut rings = 0u64;
        while !flag.load(Ordering::Relaxed) {
            ch.notify().expect("notify");
            rings += 1;
        }
        (rings, ch)
    });
    // The guest's loop: wait on the doorbells, poll, judge the event, and
    // leave the doorbells out until a throttled channel is due.
    let mut ep = sys::Epoll::new(4).unwrap();
    let own: Vec<_> = e
        .guest
        .nf
        .fds()
        .iter()
        .map(|fd| fd.try_clone_to_owned().unwrap())
        .collect();
    listen(&ep, &own, true);
    let (t0, mut wakes) = (Instant::now(), 0u64);
    while t0.elapsed() < Duration::from_millis(500) {
        let due = e.guest.nf.storm.due();
        let wait = due.map_or(Duration::from_millis(10), |t| {
            t.saturating_duration_since(Instant::now())
        });
        let n = ep.wait(Some(wait)).unwrap();
        if e.guest.nf.storm.resume_due(Instant::now()) {
            listen(&ep, &own, true);
        }
        if n == 0 {
            continue;
        }
        wakes += 1;
        e.guest.nf.poll(&mut e.guest.hv, &mut Vec::new()).unwrap();
        if e.guest.nf.after_event(Instant::now()).is_some() {
            listen(&ep, &own, false);
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (rings, _ch) = storm.join().unwrap();
    let c = &e.guest.nf.counters;
    let bound = f64::from(THRESHOLD) + 2.0 * secs / MAX_DELAY.as_secs_f64() + 20.0;
    eprintln!(
        "{rings} rings in {secs:.1} s: {wakes} wake-ups, {} spurious, {} throttles",
        c.spurious_events, c.event_throttles
    );
    assert!(rings > 10_000, "the storm rang only {rings} times");
    assert!(
        c.event_throttles > 0
            && c.spurious_events >= u64::from(THRESHOLD)
            && (wakes as f64) < bound,
        "{wakes} wake-ups in {secs:.1} s under the storm (at most {bound:.0} expected)"
    );
    assert!(e.guest.nf.is_connected(), "a storm alone keeps the link");
    // The backend turns honest: its response is delivered.
    listen(&ep, &own, true);
    let got = e.answer_rx(&[data(reqs[0].id, 0, 60)]);
    assert_eq!(got.len(), 1, "a real response after the storm");
}

/// Puts the doorbells `own` in the event manager `ep`, or takes them out.
fn listen(ep: &sys::Epoll, own: &[std::os::fd::OwnedFd], on: bool) {
    use std::os::fd::AsFd;
    for fd in own {
        let _ = if on {
            ep.add(fd.as_fd(), 1)
        } else {
            ep.remove(fd.as_fd())
        };
    }
}
