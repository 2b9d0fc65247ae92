//! A hostile frontend against the real netback, in process: a real hv, the
//! real driver-domain loop in a thread, two well-behaved frontends that keep
//! exchanging frames, and hostile frontends that write garbage into their
//! rings. netback must refuse and count each bad request, disconnect the
//! offender past a threshold (or at once for a ring overflow), and never stop
//! the good guests' traffic.

use abi::netif::{Extra, ExtraFlags, ExtraInfo, GsoType, TxFlags, TxRequest};
use abi::SharedMemory;
use hv::daemon::{setup_vif, Store};
use hv::proto::{Reply, Request, DOMID_TOOLSTACK};
use hv::topology::{RxMode, TxMode, VifConfig};
use hv::{DomId, DomainSpec, HvClient, Hypervisor, MemorySpec};
use net::netfront::Netfront;
use net::packet::Packet;
use serde_json::Value;
use splitnet_net as net;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Guest {
    hv: HvClient,
    nf: Netfront,
    mac: [u8; 6],
}

fn domain(hv: &Arc<Hypervisor>, name: &str, kind: &str, frames: u32) -> (DomId, HvClient) {
    let spec = DomainSpec {
        name: name.into(),
        kind: kind.into(),
        memory: MemorySpec {
            pool_frames: frames,
            grant_frames: 2,
            hugepages: false,
        },
    };
    let (id, sock) = hv.create_domain(spec).unwrap();
    (id, HvClient::connect(sock).unwrap())
}

fn store_read(hv: &Arc<Hypervisor>, path: &str) -> Option<String> {
    match hv
        .handle(DOMID_TOOLSTACK, Request::StoreRead { path: path.into() })
        .0
    {
        Ok(Reply::Value(v)) => String::from_utf8(v).ok(),
        _ => None,
    }
}

/// The backend's published counters of guest `g`'s vif.
fn stats(hv: &Arc<Hypervisor>, drv: DomId, g: DomId) -> Value {
    store_read(hv, &format!("/local/domain/{drv}/backend/vif/{g}/0/stats"))
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

fn backend_state(hv: &Arc<Hypervisor>, drv: DomId, g: DomId) -> String {
    store_read(hv, &format!("/local/domain/{drv}/backend/vif/{g}/0/state")).unwrap_or_default()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u32) -> Packet {
    let mut d = dst.to_vec();
    d.extend_from_slice(&src);
    d.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend((0..200u32).map(|i| (i ^ seq) as u8));
    Packet::new(d)
}

/// guest a sends `n` frames to guest b, which must receive every one intact.
fn good_traffic_flows(a: &mut Guest, b: &mut Guest, n: u32, base: u32) {
    let mut got = std::collections::BTreeSet::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rx = Vec::new();
    while got.len() < n as usize {
        assert!(
            Instant::now() < deadline,
            "good traffic stalled: {} of {n} frames arrived",
            got.len()
        );
        while sent < n && a.nf.can_send() {
            a.nf.send(&mut a.hv, frame(b.mac, a.mac, base + sent))
                .unwrap();
            sent += 1;
        }
        a.nf.flush().unwrap();
        let mut ignore = Vec::new();
        a.nf.poll(&mut a.hv, &mut ignore).unwrap();
        b.nf.poll(&mut b.hv, &mut rx).unwrap();
        for p in rx.drain(..) {
            if p.data.len() < 18 || p.data[6..12] != a.mac || p.data[12..14] != [0x88, 0xb5] {
                continue; // not from the sender under test
            }
            let seq = u32::from_be_bytes([p.data[14], p.data[15], p.data[16], p.data[17]]);
            let want = frame(b.mac, a.mac, seq).data;
            assert_eq!(
                p.data.len(),
                want.len(),
                "frame {seq} arrived with the wrong length (csum {:?}, gso {:?})",
                p.csum,
                p.gso
            );
            assert_eq!(p.data, want, "frame {seq} arrived corrupted");
            got.insert(seq);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn push(g: &mut Guest, reqs: &[TxRequest]) {
    for r in reqs {
        g.nf.tx_ring().push_request(r).unwrap();
    }
    g.nf.flush().unwrap();
}

#[test]
fn a_hostile_frontend_is_refused_counted_and_disconnected_while_others_flow() {
    let hv = Hypervisor::new();
    let (drv_id, mut drv) = domain(&hv, "drv", "driver", 2048 + 512);
    let names = ["good1", "good2", "evil1", "evil2"];
    let mut ids = Vec::new();
    let mut clients = Vec::new();
    for n in names {
        let (id, c) = domain(&hv, n, "guest", 600);
        ids.push(id);
        clients.push(c);
    }
    let mut ts = Store::new(&hv);
    for (i, (&g, n)) in ids.iter().zip(names).enumerate() {
        let v = VifConfig {
            guest: n.into(),
            backend: "drv".into(),
            mac: format!("00:16:3e:00:00:{:02x}", i + 1),
            rx_mode: RxMode::Copy,
            tx_mode: TxMode::Copy,
            grants: hv::topology::Grants::HvCopy,
            offload: true,
            index: i,
        };
        setup_vif(&mut ts, &v, g, drv_id).unwrap();
    }
    let driver = std::thread::spawn(move || {
        let _ = net::driver::run(&mut drv);
    });
    // Frontends connect concurrently, as separate guests would.
    let handles: Vec<_> = clients
        .into_iter()
        .zip(ids.clone())
        .enumerate()
        .map(|(i, (mut c, g))| {
            std::thread::spawn(move || {
                let nf = Netfront::connect(
                    &mut c,
                    &format!("/local/domain/{g}/device/vif/0"),
                    Duration::from_secs(20),
                )
                .expect("frontend connects");
                Guest {
                    hv: c,
                    nf,
                    mac: [0, 0x16, 0x3e, 0, 0, i as u8 + 1],
                }
            })
        })
        .collect();
    let mut guests: Vec<Guest> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut evil2 = guests.pop().unwrap();
    let mut evil1 = guests.pop().unwrap();
    let mut good2 = guests.pop().unwrap();
    let mut good1 = guests.pop().unwrap();
    let (e1, e2) = (ids[2], ids[3]);

    good_traffic_flows(&mut good1, &mut good2, 100, 0);
    good_traffic_flows(&mut good2, &mut good1, 100, 1000);

    // evil1: one of each malformed request, then a flood of them.
    // One valid buffer, outside netfront's TX and RX buffers (frames 2..514).
    let gref_ok = evil1.hv.grants().grant_access(drv_id, 590, true).unwrap();
    let req = |gref, offset, size, id| TxRequest {
        gref,
        offset,
        flags: TxFlags::EMPTY,
        id,
        size,
    };
    // A frame that claims to come from good2: netback must not let evil1
    // take over good2's MAC in the bridge.
    let mut spoof = good2.mac.to_vec();
    spoof.extend_from_slice(&good2.mac);
    spoof.extend_from_slice(&[0x88, 0xb5, 0, 0, 0, 0]);
    spoof.resize(60, 0);
    evil1.hv.pool().write_bytes(590 * 4096, &spoof);
    let gso_extra = ExtraInfo {
        flags: ExtraFlags::EMPTY,
        extra: Extra::Gso {
            size: 1,
            gso_type: GsoType::TcpV4,
            features: 0,
        },
    };
    let attacks: Vec<(&str, Vec<TxRequest>)> = vec![
        ("bad_grant_ref", vec![req(99_999, 0, 100, 1)]),
        ("bad_grant_ref", vec![req(gref_ok + 1, 0, 100, 2)]),
        ("size_too_small", vec![req(gref_ok, 0, 0, 3)]),
        ("crosses_page", vec![req(gref_ok, 4000, 200, 4)]),
        ("crosses_page", vec![req(gref_ok, 0, 5000, 5)]),
        (
            "duplicate_id",
            vec![req(gref_ok, 0, 100, 6), req(gref_ok, 0, 100, 6)],
        ),
        ("spoofed_mac", vec![req(gref_ok, 0, 60, 7)]),
        (
            "bad_gso",
            vec![
                TxRequest {
                    flags: TxFlags::EXTRA_INFO,
                    ..req(gref_ok, 0, 200, 8)
                },
                gso_extra.to_tx_slot(),
            ],
        ),
    ];
    for (reason, reqs) in attacks {
        let before = stats(&hv, drv_id, e1)["rejected"][reason]
            .as_u64()
            .unwrap_or(0);
        push(&mut evil1, &reqs);
        wait_for(&format!("netback to count {reason}"), || {
            stats(&hv, drv_id, e1)["rejected"][reason]
                .as_u64()
                .unwrap_or(0)
                > before
        });
        good_traffic_flows(&mut good1, &mut good2, 20, 2000);
    }
    // Every consumed request got exactly one response.
    let mut ignore = Vec::new();
    evil1.nf.poll(&mut evil1.hv, &mut ignore).unwrap();
    assert_eq!(
        backend_state(&hv, drv_id, e1),
        "4",
        "still connected below the threshold"
    );

    // A flood of bad requests crosses the threshold: evil1 is disconnected.
    for round in 0..8u16 {
        let reqs: Vec<TxRequest> = (0..16u16)
            .map(|i| req(50_000 + i as u32, 0, 64, round * 16 + i))
            .collect();
        if evil1.nf.tx_ring().free_requests() < 16 {
            break;
        }
        push(&mut evil1, &reqs);
        good_traffic_flows(&mut good1, &mut good2, 10, 3000 + round as u32 * 10);
    }
    wait_for("evil1's vif to be disconnected", || {
        backend_state(&hv, drv_id, e1) == "6"
    });
    let s = stats(&hv, drv_id, e1);
    assert!(
        s["rejected"]["bad_grant_ref"].as_u64().unwrap_or(0) >= net::netback::FATAL_LIMIT - 5,
        "the flood was counted: {s}"
    );
    let reason = store_read(
        &hv,
        &format!("/local/domain/{drv_id}/backend/vif/{e1}/0/disconnect-reason"),
    );
    assert!(reason.unwrap_or_default().contains("refused requests"));

    // evil2: a producer index far ahead of the consumer is fatal at once.
    good_traffic_flows(&mut good2, &mut good1, 50, 5000);
    let ring = evil2.nf.tx_ring();
    let prod = ring.memory().load_u32(0);
    ring.memory().store_u32(0, prod.wrapping_add(100_000));
    evil2.nf.tx_channel().notify().unwrap();
    wait_for("evil2's vif to be disconnected", || {
        backend_state(&hv, drv_id, e2) == "6"
    });
    assert_eq!(stats(&hv, drv_id, e2)["rejected"]["ring_overflow"], 1);

    // The good guests never noticed.
    good_traffic_flows(&mut good1, &mut good2, 100, 6000);
    good_traffic_flows(&mut good2, &mut good1, 100, 7000);
    assert_eq!(backend_state(&hv, drv_id, ids[0]), "4");
    let g1 = stats(&hv, drv_id, ids[0]);
    assert_eq!(
        g1["rejected"],
        serde_json::json!({}),
        "good1 had nothing refused: {g1}"
    );

    hv.shutdown();
    driver.join().unwrap();
}
