//! The frontend against a hostile backend: one that negotiates honestly
//! (through the vhost crate's backend side) and then writes into the used
//! rings what no honest device writes. Frames with bad lengths, buffer
//! counts or offloads are dropped and counted; used entries that break the
//! ring (an id out of range or not held, an index running ahead) end the
//! connection, counted, and the frontend connects again.

mod front_common;

use abi::SharedMemory;
use front_common::{counter, nic_on_tap, wait_until, Front, WAIT};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Mutex};
use sys::Mapping;
use vhost::vhost_user::message::*;
use vhost::vhost_user::{
    Backend, BackendReqHandler, Error, GpuBackend, Result, VhostUserBackendReqHandlerMut,
};
use vhost::VhostUserMemoryRegionBase;

/// VERSION_1, MRG_RXBUF, EVENT_IDX: no protocol features, no offloads.
const FEATURES: u64 = 1 << 32 | 1 << 15 | 1 << 29;

/// One queue as the backend sees it: where its parts are in the mapping.
#[derive(Default, Clone, Copy)]
struct Queue {
    desc: usize,
    avail: usize,
    used: usize,
    size: u16,
    last_avail: u16,
    used_idx: u16,
}

/// The backend's state for the connection it serves.
#[derive(Default)]
struct Hostile {
    mem: Option<Mapping>,
    /// The frontend's user address of the mapping's start.
    user_base: u64,
    queues: [Queue; 2],
    calls: [Option<File>; 2],
}

impl Hostile {
    fn mem(&self) -> &Mapping {
        self.mem.as_ref().expect("a memory table")
    }

    /// The next buffer the driver offered on queue `q`: its id and offset.
    fn next_offered(&mut self, q: usize) -> (u16, usize) {
        let qu = self.queues[q];
        let mem = self.mem();
        assert_ne!(mem.load_u16(qu.avail + 2), qu.last_avail, "nothing offered");
        let slot = qu.avail + 4 + 2 * usize::from(qu.last_avail % qu.size);
        let id = mem.read_u16(slot);
        let addr = mem.read_u32(qu.desc + 16 * usize::from(id)) as usize;
        self.queues[q].last_avail = qu.last_avail.wrapping_add(1);
        (id, addr)
    }

    /// Writes used entries `(id, len)` on queue `q`, moves `used.idx` past
    /// them and `ahead` more, and calls the driver.
    fn put_used(&mut self, q: usize, entries: &[(u32, u32)], ahead: u16) {
        let qu = self.queues[q];
        let mem = self.mem();
        let mut idx = qu.used_idx;
        for &(id, len) in entries {
            let e = qu.used + 4 + 8 * usize::from(idx % qu.size);
            mem.write_u32(e, id);
            mem.write_u32(e + 4, len);
            idx = idx.wrapping_add(1);
        }
        let idx = idx.wrapping_add(ahead);
        mem.store_u16(qu.used + 2, idx);
        self.queues[q].used_idx = idx;
        let call = self.calls[q].as_ref().expect("a call eventfd");
        (&*call).write_all(&1u64.to_ne_bytes()).unwrap();
    }

    /// Delivers a frame on the receive queue: header `hdr`, then `frame`,
    /// into the next offered buffer, with used length `len` (None: the
    /// true one).
    fn deliver(&mut self, hdr: [u8; 12], frame: &[u8], len: Option<u32>) {
        let (id, off) = self.next_offered(0);
        self.mem().write_bytes(off, &hdr);
        self.mem().write_bytes(off + 12, frame);
        let len = len.unwrap_or((12 + frame.len()) as u32);
        self.put_used(0, &[(u32::from(id), len)], 0);
    }

    /// Delivers the rest of a frame (no header) into the next offered buffer.
    fn deliver_rest(&mut self, data: &[u8]) {
        let (id, off) = self.next_offered(0);
        self.mem().write_bytes(off, data);
        self.put_used(0, &[(u32::from(id), data.len() as u32)], 0);
    }
}

fn unsupported<T>() -> Result<T> {
    Err(Error::InvalidOperation(
        "not supported by this test backend",
    ))
}

impl VhostUserBackendReqHandlerMut for Hostile {
    fn set_owner(&mut self) -> Result<()> {
        Ok(())
    }
    fn reset_owner(&mut self) -> Result<()> {
        Ok(())
    }
    fn reset_device(&mut self) -> Result<()> {
        unsupported()
    }
    fn get_features(&mut self) -> Result<u64> {
        Ok(FEATURES)
    }
    fn set_features(&mut self, features: u64) -> Result<()> {
        assert_eq!(features & !FEATURES, 0, "only offered features");
        Ok(())
    }
    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _: Option<bool>,
    ) -> Result<Option<Vec<VhostUserMemoryRegionBase>>> {
        let r = ctx[0];
        let map = Mapping::new(
            files[0].as_fd(),
            r.mmap_offset,
            r.memory_size as usize,
            true,
        )
        .map_err(Error::ReqHandlerError)?;
        let gpa = r.guest_phys_addr;
        assert_eq!(gpa, 0);
        self.mem = Some(map);
        self.user_base = r.user_addr;
        Ok(None)
    }
    fn set_vring_num(&mut self, index: u32, num: u32) -> Result<()> {
        self.queues[index as usize].size = num as u16;
        Ok(())
    }
    fn set_vring_addr(
        &mut self,
        index: u32,
        _: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _: u64,
    ) -> Result<()> {
        let off = |a: u64| (a - self.user_base) as usize;
        let q = &mut self.queues[index as usize];
        (q.desc, q.used, q.avail) = (off(descriptor), off(used), off(available));
        Ok(())
    }
    fn set_vring_base(&mut self, index: u32, base: u32) -> Result<()> {
        self.queues[index as usize].last_avail = base as u16;
        Ok(())
    }
    fn get_vring_base(&mut self, index: u32) -> Result<VhostUserVringState> {
        let q = self.queues[index as usize];
        Ok(VhostUserVringState::new(index, q.last_avail.into()))
    }
    fn set_vring_kick(&mut self, _: u8, _: Option<File>) -> Result<()> {
        Ok(())
    }
    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> Result<()> {
        self.calls[usize::from(index)] = fd;
        Ok(())
    }
    fn set_vring_err(&mut self, _: u8, _: Option<File>) -> Result<()> {
        Ok(())
    }
    fn get_protocol_features(&mut self) -> Result<VhostUserProtocolFeatures> {
        Ok(VhostUserProtocolFeatures::empty())
    }
    fn set_protocol_features(&mut self, _: u64) -> Result<()> {
        Ok(())
    }
    fn get_queue_num(&mut self) -> Result<u64> {
        Ok(2)
    }
    fn set_vring_enable(&mut self, _: u32, _: bool) -> Result<()> {
        Ok(())
    }
    fn get_config(&mut self, _: u32, _: u32, _: VhostUserConfigFlags) -> Result<Vec<u8>> {
        unsupported()
    }
    fn set_config(&mut self, _: u32, _: &[u8], _: VhostUserConfigFlags) -> Result<()> {
        unsupported()
    }
    fn set_backend_req_fd(&mut self, _: Backend) {}
    fn set_gpu_socket(&mut self, _: GpuBackend) -> Result<()> {
        unsupported()
    }
    fn get_shared_object(&mut self, _: VhostUserSharedMsg) -> Result<File> {
        unsupported()
    }
    fn get_inflight_fd(&mut self, _: &VhostUserInflight) -> Result<(VhostUserInflight, File)> {
        unsupported()
    }
    fn set_inflight_fd(&mut self, _: &VhostUserInflight, _: File) -> Result<()> {
        unsupported()
    }
    fn get_max_mem_slots(&mut self) -> Result<u64> {
        unsupported()
    }
    fn add_mem_region(
        &mut self,
        _: &VhostUserSingleMemoryRegion,
        _: File,
        _: Option<bool>,
    ) -> Result<Option<VhostUserMemoryRegionBase>> {
        unsupported()
    }
    fn remove_mem_region(&mut self, _: &VhostUserSingleMemoryRegion) -> Result<()> {
        unsupported()
    }
    fn set_device_state_fd(
        &mut self,
        _: VhostTransferStateDirection,
        _: VhostTransferStatePhase,
        _: File,
    ) -> Result<Option<File>> {
        unsupported()
    }
    fn check_device_state(&mut self) -> Result<()> {
        unsupported()
    }
    fn get_shmem_config(&mut self) -> Result<VhostUserShMemConfig> {
        unsupported()
    }
    fn set_log_base(&mut self, _: &VhostUserLog, _: File) -> Result<()> {
        unsupported()
    }
}

/// Serves connection after connection on `sock`, each with a fresh state
/// published in `slot` once the rings are set up.
fn serve(listener: UnixListener, slot: Arc<Mutex<Option<Arc<Mutex<Hostile>>>>>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let state = Arc::new(Mutex::new(Hostile::default()));
        *slot.lock().unwrap() = Some(state.clone());
        let mut h = BackendReqHandler::from_stream(stream, state);
        while h.handle_request().is_ok() {}
    }
}

/// A header with `flags`, `gso_type` and `num_buffers`.
fn hdr(flags: u8, gso_type: u8, num_buffers: u16) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = flags;
    h[1] = gso_type;
    h[10..12].copy_from_slice(&num_buffers.to_le_bytes());
    h
}

/// A broadcast Ethernet frame of 60 bytes.
fn frame() -> Vec<u8> {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x88, 0xb5]);
    f.resize(60, 0xab);
    f
}

#[test]
fn a_hostile_backend_is_refused_and_counted() {
    let Some(_host) = testutil::root_or_skip("TAP devices") else {
        return;
    };
    let sock = format!("/tmp/vthostile-{}.sock", std::process::id());
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).unwrap();
    let slot = Arc::new(Mutex::new(None));
    let s2 = slot.clone();
    std::thread::spawn(move || serve(listener, s2));
    let (nic, _tap) = nic_on_tap("vth", true);
    let mut front = Front::start(nic, &sock);
    // The backend's state once both rings are set up (without REPLY_ACK,
    // the frontend may be done before the backend has read every message).
    let backend = || {
        let mut b = None;
        wait_until("the backend's rings", WAIT, || {
            b = slot.lock().unwrap().clone();
            b.as_ref()
                .is_some_and(|b| b.lock().unwrap().calls.iter().all(Option::is_some))
        });
        b.unwrap()
    };

    let st = front.wait_connected(1);
    assert!(
        st["rings"][0]["held"] == 256,
        "every rx buffer offered: {st}"
    );
    let b = backend();
    // An honest frame first: it reaches the TAP.
    b.lock().unwrap().deliver(hdr(0, 0, 1), &frame(), None);
    wait_until("the frame on the TAP", WAIT, || {
        counter(&front.status(), "rx_packets") == 1
    });
    bad_entries_are_dropped(&mut front, &b);

    // A used id out of range breaks the ring: the connection ends.
    b.lock().unwrap().put_used(0, &[(999, 60)], 0);
    let st = front.wait_connected(2);
    assert_eq!(st["broken"]["used_id_out_of_range"], 1, "{st}");
    assert_eq!(counter(&st, "disconnects"), 1, "{st}");
    // used.idx running far ahead of what the device holds.
    backend().lock().unwrap().put_used(0, &[(0, 60)], 999);
    let st = front.wait_connected(3);
    assert_eq!(st["broken"]["used_idx_ahead"], 1, "{st}");
    // The same buffer given back twice in one batch: the second time, the
    // device no longer holds it.
    let b = backend();
    {
        let mut b = b.lock().unwrap();
        let (id, off) = b.next_offered(0);
        b.mem().write_bytes(off, &hdr(0, 0, 1));
        b.mem().write_bytes(off + 12, &frame());
        b.put_used(0, &[(u32::from(id), 72), (u32::from(id), 72)], 0);
    }
    let st = front.wait_connected(4);
    assert_eq!(st["broken"]["used_id_not_held"], 1, "{st}");
    // And after all that, an honest frame still gets through.
    backend()
        .lock()
        .unwrap()
        .deliver(hdr(0, 0, 1), &frame(), None);
    wait_until("a frame on the fourth connection", WAIT, || {
        counter(&front.status(), "rx_packets") == 4
    });
    let _ = std::fs::remove_file(&sock);
}

/// Entries the frontend drops and counts, its connection kept: a length
/// past the buffer, no buffer or too many, a frame whose second buffer
/// comes late (it waits, then crosses whole), an offload never agreed.
fn bad_entries_are_dropped(front: &mut Front, b: &Arc<Mutex<Hostile>>) {
    let drops = |front: &mut Front, k: &str| front.status()["drops"][k].as_u64().unwrap();
    // A used length past the buffer (4096 with MRG_RXBUF).
    b.lock()
        .unwrap()
        .deliver(hdr(0, 0, 1), &frame(), Some(5000));
    wait_until("rx_bad_len", WAIT, || drops(front, "rx_bad_len") == 1);
    // A frame said to span no buffer at all.
    b.lock().unwrap().deliver(hdr(0, 0, 0), &frame(), None);
    wait_until("rx_bad_num_buffers", WAIT, || {
        drops(front, "rx_bad_num_buffers") == 1
    });
    // A frame in two buffers, published one at a time: it waits for the
    // second (the first stays in the used ring), then crosses whole.
    let seen = |front: &mut Front| front.status()["rings"][0]["next_used"].clone();
    let before = seen(front);
    b.lock()
        .unwrap()
        .deliver(hdr(0, 0, 2), &frame()[..30], None);
    b.lock().unwrap().deliver_rest(&frame()[30..]);
    wait_until("the two-buffer frame on the TAP", WAIT, || {
        counter(&front.status(), "rx_packets") == 2
    });
    assert_eq!(seen(front), before.as_u64().unwrap() + 2);
    assert_eq!(counter(&front.status(), "rx_bytes"), 60 + 60);
    // A frame said to span more buffers than the device holds.
    b.lock().unwrap().deliver(hdr(0, 0, 300), &frame(), None);
    wait_until("rx_bad_num_buffers", WAIT, || {
        drops(front, "rx_bad_num_buffers") == 2
    });
    // TCP segmentation the driver never agreed to.
    b.lock().unwrap().deliver(hdr(1, 1, 1), &frame(), None);
    wait_until("rx_offload_mismatch", WAIT, || {
        drops(front, "rx_offload_mismatch") == 1
    });
    let st = front.status();
    assert_eq!(st["connected"], true, "drops keep the connection: {st}");
    assert_eq!(counter(&st, "rx_packets"), 2, "{st}");
}

/// A backend that accepts and never answers: each handshake times out,
/// counted as a failed connection, and the frontend keeps trying without
/// hanging (its loop still ticks).
#[test]
fn a_silent_backend_times_out_and_is_tried_again() {
    let Some(_host) = testutil::root_or_skip("TAP devices") else {
        return;
    };
    let sock = format!("/tmp/vtsilent-{}.sock", std::process::id());
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let h2 = held.clone();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            h2.lock().unwrap().push(s);
        }
    });
    let (nic, _tap) = nic_on_tap("vts", false);
    let mut front = Front::start(nic, &sock);
    let mut st = serde_json::Value::Null;
    wait_until("a handshake to time out", WAIT, || {
        st = front.status();
        st["connect_failures"].as_u64().unwrap_or(0) >= 1 && st["connected"] == false
    });
    wait_until("another handshake", WAIT, || {
        held.lock().unwrap().len() >= 2
    });
    let st = front.status();
    let err = st["last_error"].as_str().unwrap_or("");
    assert!(err.contains("did not finish the handshake"), "{st}");
    let _ = std::fs::remove_file(&sock);
}
