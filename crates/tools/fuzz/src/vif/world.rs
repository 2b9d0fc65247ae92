//! The world both vif targets share: an hv with a driver domain and a guest
//! joined by one vif the toolstack set up, the fuzz input read a field at a
//! time, and the frames the harness sends.

use abi::netif::{RxRequest, TxRequest};
use abi::ring::{layout, RingEntry};
use abi::{SharedMemory, Window};
use hv::{DomId, DomainSpec, HvClient, Hypervisor};
use std::sync::Arc;
use std::time::Duration;
use toolstack::daemon::{setup_vif, Store};
use toolstack::topology::{Grants, TxMode, VifConfig};

pub(super) const PAGE: usize = 4096;
pub(super) const RING: u32 = 256;
pub(super) const TIMEOUT: Duration = Duration::from_secs(20);
/// The vif's MAC, which netback requires as the source of every TX frame.
pub(super) const MAC: [u8; 6] = [0x00, 0x16, 0x3e, 0x00, 0x00, 0x01];
/// The vif's `ip=`: the template frames' sources.
pub(super) const ALLOWED_IPS: [&str; 2] = ["10.77.0.1", "fd77::1"];
/// The vif's `mtu`.
pub(super) const MTU: u16 = 9000;
/// Frames of the guest's pool (netfront needs 514).
pub(super) const GUEST_FRAMES: u32 = 600;

pub(super) type Mem = Window<Arc<sys::Mapping>>;

/// The input, read a field at a time; past its end every field is zero.
pub(super) struct Input<'a> {
    pub(super) data: &'a [u8],
    pub(super) at: usize,
}

impl Input<'_> {
    pub(super) fn more(&self) -> bool {
        self.at < self.data.len()
    }
    pub(super) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    pub(super) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.u8())
    }
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Threads hv runs for a world: a control and a batch thread per domain.
const HV_THREADS: usize = 4;

/// Drops a world and waits until the threads hv ran for it have ended, so
/// that what they free is freed before libFuzzer looks for leaks (worlds of
/// other configurations may be alive meanwhile, with their own threads).
pub(super) fn bury<W>(world: W) {
    let target = threads().saturating_sub(HV_THREADS);
    drop(world);
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    while threads() > target && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn domain(hv: &Arc<Hypervisor>, name: &str, kind: &str, frames: u32) -> (DomId, HvClient) {
    let spec = DomainSpec::new(name, kind, frames, 2);
    let (id, sock) = hv.create_domain(spec).expect("hv creates a domain");
    (id, HvClient::connect(sock).expect("the domain says hello"))
}

/// A driver domain and a guest with one vif between them, set up by the
/// toolstack, before either end has run.
pub(super) fn domains(grants: Grants, tx_mode: TxMode, offload: bool) -> (Arc<Hypervisor>, Ends) {
    let hv = Hypervisor::new();
    let (drv_id, drv) = domain(&hv, "drv", "driver", 2048 + 512);
    let (g, guest) = domain(&hv, "guest", "guest", GUEST_FRAMES);
    let mut v = VifConfig {
        tx_mode,
        grants,
        offload: abi::offloads::Caps::from_bool(offload),
        ..VifConfig::fast_path("guest", "drv", 0)
    };
    // The vif options on the data path: anti-spoofing with the templates'
    // own addresses, and jumbo frames. (No `rate=`: a credit limit would
    // tie what an input does to the clock.)
    v.opts.ip = ALLOWED_IPS.iter().map(|a| a.parse().unwrap()).collect();
    v.opts.mtu = Some(MTU);
    setup_vif(&mut Store::new(&hv), &v, g, drv_id).expect("the toolstack sets up the vif");
    let ends = Ends {
        drv,
        guest,
        drv_id,
        be: format!("/local/domain/{drv_id}/backend/vif/{g}/0"),
        fe: format!("/local/domain/{g}/device/vif/0"),
        g,
    };
    (hv, ends)
}

/// The two domains' clients and ids, and the vif's backend and frontend
/// paths in the store.
pub(super) struct Ends {
    pub(super) drv: HvClient,
    pub(super) guest: HvClient,
    pub(super) drv_id: DomId,
    pub(super) g: DomId,
    pub(super) be: String,
    pub(super) fe: String,
}

/// Bytes per slot of the TX ring (the request/response union) and the RX ring.
pub(super) const TX_SLOT: usize = TxRequest::SIZE;
pub(super) const RX_SLOT: usize = RxRequest::SIZE;

/// The entry in the ring slot of index `idx`, slots being `stride` bytes.
pub(super) fn slot<E: RingEntry>(mem: &impl SharedMemory, stride: usize, idx: u32) -> E {
    let mut b = [0u8; 16];
    let at = layout::RING + (idx & (RING - 1)) as usize * stride;
    mem.read_bytes(at, &mut b[..E::SIZE]);
    E::decode(&b)
}

/// A frame as the bridge would hand it to a vif: Ethernet, then IPv4 or
/// IPv6 and TCP or UDP (or an unknown ethertype), `len` bytes in all, with
/// lengths in the IP header that agree.
pub(super) fn frame(kind: u8, len: usize, src: [u8; 6]) -> Vec<u8> {
    let mut d = vec![0u8; len.max(14)];
    d[..6].copy_from_slice(&[0xff; 6]);
    d[6..12].copy_from_slice(&src);
    let l3 = len.saturating_sub(14);
    let proto = if kind & 2 == 0 { 6 } else { 17 };
    let mut ip = Vec::new();
    match kind % 4 {
        0 | 2 => {
            d[12..14].copy_from_slice(&[0x08, 0x00]);
            ip.extend_from_slice(&[0x45, 0, (l3 >> 8) as u8, l3 as u8, 0, 1, 0x40, 0, 64, proto]);
            ip.extend_from_slice(&[0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
        }
        1 => {
            d[12..14].copy_from_slice(&[0x86, 0xdd]);
            let pl = l3.saturating_sub(40);
            ip.extend_from_slice(&[0x60, 0, 0, 0, (pl >> 8) as u8, pl as u8, proto, 64]);
            ip.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            ip.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        }
        _ => d[12..14].copy_from_slice(&[0x88, 0xb5]),
    }
    if !ip.is_empty() {
        // TCP with a 20-byte header, or UDP with its length.
        let l4len = l3.saturating_sub(ip.len());
        if proto == 6 {
            ip.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18]);
            ip.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        } else {
            ip.extend_from_slice(&[
                0x30,
                0x39,
                0x00,
                0x35,
                (l4len >> 8) as u8,
                l4len as u8,
                0,
                0,
            ]);
        }
    }
    let n = ip.len().min(d.len() - 14);
    d[14..14 + n].copy_from_slice(&ip[..n]);
    for (i, b) in d.iter_mut().enumerate().skip(14 + n) {
        *b = i as u8;
    }
    d.truncate(len.max(14));
    d
}
