//! A real hv and the real driver-domain loop in process, with frontends
//! that play well-behaved or hostile guests (shared by the hostile tests).
#![allow(dead_code)]

use abi::netif::{Extra, ExtraFlags, ExtraInfo, GsoType, TxFlags, TxRequest};
use frame::packet::Packet;
use hv::proto::{Reply, Request, DOMID_TOOLSTACK};
use hv::{DomId, DomainSpec, HvClient, Hypervisor};
use netfront::Netfront;
use serde_json::Value;
use splitnet_driver_domain as driver_domain;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::{Grants, TxMode, VifConfig, VifOptions};

pub use testutil::wait_until;

pub struct Guest {
    pub hv: HvClient,
    pub nf: Netfront,
    pub mac: [u8; 6],
}

pub fn domain(hv: &Arc<Hypervisor>, name: &str, kind: &str, frames: u32) -> (DomId, HvClient) {
    let spec = DomainSpec::new(name, kind, frames, 2);
    let (id, sock) = hv.create_domain(spec).unwrap();
    (id, HvClient::connect(sock).unwrap())
}

pub fn store_read(hv: &Arc<Hypervisor>, path: &str) -> Option<String> {
    match hv
        .handle(DOMID_TOOLSTACK, Request::StoreRead { path: path.into() })
        .0
    {
        Ok(Reply::Value(v)) => String::from_utf8(v).ok(),
        _ => None,
    }
}

/// Writes `value` at `path` as the toolstack; the write must succeed.
pub fn store_write(hv: &Arc<Hypervisor>, path: &str, value: &str) {
    let req = Request::StoreWrite {
        path: path.into(),
        value: value.as_bytes().to_vec(),
    };
    let r = hv.handle(DOMID_TOOLSTACK, req);
    assert!(r.0.is_ok(), "writing {path}: {r:?}");
}

/// The backend's published counters of guest `g`'s vif.
pub fn stats(hv: &Arc<Hypervisor>, drv: DomId, g: DomId) -> Value {
    store_read(hv, &format!("/local/domain/{drv}/backend/vif/{g}/0/stats"))
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

pub fn backend_state(hv: &Arc<Hypervisor>, drv: DomId, g: DomId) -> String {
    store_read(hv, &format!("/local/domain/{drv}/backend/vif/{g}/0/state")).unwrap_or_default()
}

/// How long a test waits for the driver loop to do something.
pub const WAIT: Duration = Duration::from_secs(10);

pub fn frame(dst: [u8; 6], src: [u8; 6], seq: u32) -> Packet {
    frame_sized(dst, src, seq, 200)
}

/// [`frame`] with `payload` bytes after the sequence number.
pub fn frame_sized(dst: [u8; 6], src: [u8; 6], seq: u32, payload: u32) -> Packet {
    let mut d = dst.to_vec();
    d.extend_from_slice(&src);
    d.extend_from_slice(&[0x88, 0xb5]); // local experimental ethertype
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend((0..payload).map(|i| (i ^ seq) as u8));
    Packet::new(d)
}

/// guest a sends `n` frames to guest b, which must receive every one intact.
pub fn good_traffic_flows(a: &mut Guest, b: &mut Guest, n: u32, base: u32) {
    traffic_flows_sized(a, b, n, base, 200);
}

/// [`good_traffic_flows`] with frames of `payload` bytes after the header.
pub fn traffic_flows_sized(a: &mut Guest, b: &mut Guest, n: u32, base: u32, payload: u32) {
    let mut got = std::collections::BTreeSet::new();
    let mut sent = 0;
    let mut rx = Vec::new();
    wait_until("good traffic", WAIT, || {
        while sent < n && a.nf.can_send() {
            a.nf.send(&mut a.hv, frame_sized(b.mac, a.mac, base + sent, payload))
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
            let want = frame_sized(b.mac, a.mac, seq, payload).data;
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
        if got.len() < n as usize {
            Err(format!("{} of {n} frames arrived", got.len()))
        } else {
            Ok(())
        }
    });
}

pub fn push(g: &mut Guest, reqs: &[TxRequest]) {
    for r in reqs {
        g.nf.tx_ring().push_request(r).unwrap();
    }
    g.nf.flush().unwrap();
}

/// A driver domain running netback in a thread, and one connected
/// frontend per name, each vif set up with `grants` and `tx_mode`.
pub struct World {
    pub hv: Arc<Hypervisor>,
    pub drv_id: DomId,
    pub ids: Vec<DomId>,
    pub guests: Vec<Guest>,
    /// The clients of the guests whose frontend was not run, by index.
    pub unconnected: Vec<(usize, HvClient)>,
    pub driver: JoinHandle<()>,
}

pub fn world(names: &[&'static str], grants: Grants, tx_mode: TxMode) -> World {
    world_connecting(names, grants, tx_mode, |_| true)
}

/// Like [`world`], but only the guests `connect` names run their frontend;
/// the others have a vif that never connects. `guests` holds the connected.
pub fn world_connecting(
    names: &[&'static str],
    grants: Grants,
    tx_mode: TxMode,
    connect: impl Fn(&str) -> bool,
) -> World {
    world_driven(names, grants, tx_mode, connect, |mut drv| {
        let _ = driver_domain::driver::run(&mut drv, None);
    })
}

/// Like [`world_connecting`], with the driver domain's client handed to
/// `driver` in its own thread (which runs the driver loop its own way).
pub fn world_driven(
    names: &[&'static str],
    grants: Grants,
    tx_mode: TxMode,
    connect: impl Fn(&str) -> bool,
    driver: impl FnOnce(HvClient) + Send + 'static,
) -> World {
    world_configured(names, grants, tx_mode, connect, driver, |_, _| {})
}

/// Like [`world_connecting`], each guest's vif with its options (bridge,
/// VLAN, ...).
pub fn world_with(
    names: &[&'static str],
    opts: &[VifOptions],
    connect: impl Fn(&str) -> bool,
) -> World {
    let opts = opts.to_vec();
    world_configured(
        names,
        Grants::Ngm,
        TxMode::Gather,
        connect,
        |mut drv| {
            let _ = driver_domain::driver::run(&mut drv, None);
        },
        move |i, v| v.opts = opts[i].clone(),
    )
}

/// Like [`world_driven`], with each vif's configuration (its index, its
/// [`VifConfig`]) adjusted by `configure` before the toolstack writes it.
pub fn world_configured(
    names: &[&'static str],
    grants: Grants,
    tx_mode: TxMode,
    connect: impl Fn(&str) -> bool,
    driver: impl FnOnce(HvClient) + Send + 'static,
    configure: impl Fn(usize, &mut VifConfig),
) -> World {
    let hv = Hypervisor::new();
    // Room for four vifs or more, and some spare.
    let frames = driver_domain::netback::FRAMES_PER_VIF * (names.len().max(4) as u32 + 1);
    let (drv_id, drv) = domain(&hv, "drv", "driver", frames);
    let mut ids = Vec::new();
    let mut clients = Vec::new();
    for n in names {
        let (id, c) = domain(&hv, n, "guest", 600);
        ids.push(id);
        clients.push(c);
    }
    let mut ts = Store::new(&hv);
    for (i, (&g, n)) in ids.iter().zip(names.iter()).enumerate() {
        let mut v = VifConfig {
            tx_mode,
            grants,
            ..VifConfig::fast_path(n, "drv", i)
        };
        configure(i, &mut v);
        setup_vif(&mut ts, &v, g, drv_id).unwrap();
    }
    let driver = std::thread::spawn(move || driver(drv));
    // Frontends connect concurrently, as separate guests would.
    let (run, unconnected): (Vec<_>, Vec<_>) = clients
        .into_iter()
        .zip(ids.clone())
        .enumerate()
        .partition(|(i, _)| connect(names[*i]));
    let unconnected = unconnected.into_iter().map(|(i, (c, _))| (i, c)).collect();
    let handles: Vec<_> = run
        .into_iter()
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
    let guests: Vec<Guest> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    World {
        hv,
        drv_id,
        ids,
        guests,
        unconnected,
        driver,
    }
}

/// The toolstack sets up guest `g`'s vif `vif` on driver domain `drv_id`;
/// a real netback (on `drv`) and netfront (on `c`) connect it, and the
/// guest posts its RX buffers. For tests that drive netback themselves.
pub fn attach_vif(
    hv: &Arc<Hypervisor>,
    mut drv: HvClient,
    drv_id: DomId,
    mut c: HvClient,
    g: DomId,
    vif: &VifConfig,
) -> (HvClient, driver_domain::netback::Netback, Guest) {
    use driver_domain::netback::{self, Netback};
    setup_vif(&mut Store::new(hv), vif, g, drv_id).unwrap();
    let h = vif.handle;
    let be = format!("/local/domain/{drv_id}/backend/vif/{g}/{h}");
    let backend = std::thread::spawn(move || {
        let p = netback::probe(&mut drv, g, &be).expect("probe");
        let nb = Netback::connect(&mut drv, p, Duration::from_secs(20)).expect("netback connects");
        (drv, nb)
    });
    let fe = format!("/local/domain/{g}/device/vif/{h}");
    let nf = Netfront::connect(&mut c, &fe, Duration::from_secs(20)).expect("frontend connects");
    let (drv, nb) = backend.join().unwrap();
    let mut mac = [0u8; 6];
    for (b, hex) in mac.iter_mut().zip(vif.mac.split(':')) {
        *b = u8::from_str_radix(hex, 16).expect("a MAC of six hex bytes");
    }
    let mut g = Guest { hv: c, nf, mac };
    // The first poll posts the RX buffers.
    g.nf.poll(&mut g.hv, &mut Vec::new()).unwrap();
    (drv, nb, g)
}

/// Ethertype of the probe frames tests send besides the good traffic.
pub const PROBE: [u8; 2] = [0x88, 0xb6];

/// A probe frame of `len` bytes: dst, src, the probe ethertype, a sequence
/// number, then a pattern derived from it.
pub fn probe(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut d = dst.to_vec();
    d.extend_from_slice(&src);
    d.extend_from_slice(&PROBE);
    d.extend_from_slice(&seq.to_be_bytes());
    d.extend((18..len).map(|i| (i as u32 ^ seq.wrapping_mul(7)) as u8));
    d
}

/// Probe frames `g` has received since its last poll.
pub fn probes(g: &mut Guest) -> Vec<Vec<u8>> {
    let mut rx = Vec::new();
    g.nf.poll(&mut g.hv, &mut rx).unwrap();
    rx.into_iter()
        .map(|p| p.data)
        .filter(|d| d.len() >= 18 && d[12..14] == PROBE)
        .collect()
}

/// `r` with more slots to follow.
pub fn more(r: TxRequest) -> TxRequest {
    TxRequest {
        flags: r.flags | TxFlags::MORE_DATA,
        ..r
    }
}

/// `r` followed by a GSO extra-info slot of segment size `size`.
pub fn gso(r: TxRequest, size: u16, gso_type: GsoType) -> Vec<TxRequest> {
    let extra = ExtraInfo {
        flags: ExtraFlags::EMPTY,
        extra: Extra::Gso {
            size,
            gso_type,
            features: 0,
        },
    };
    vec![
        TxRequest {
            flags: TxFlags::EXTRA_INFO,
            ..r
        },
        extra.to_tx_slot(),
    ]
}

/// A 2000-byte IPv4/UDP frame from `src` to `dst`.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (2000u16 - 14).to_be_bytes();
    f.extend_from_slice(&[0x45, 0, ip_len[0], ip_len[1], 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 3, 10, 0, 0, 2]);
    let udp_len = (2000u16 - 34).to_be_bytes();
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, udp_len[0], udp_len[1], 0, 0]);
    f.resize(2000, 0xab);
    f
}
