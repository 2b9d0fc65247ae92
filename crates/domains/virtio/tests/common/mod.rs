//! A test frontend: the vhost crate's `Frontend` on one side of a real
//! listener, and the VM's memory a memfd whose split rings the test writes
//! as a virtio driver would (virtio 1.x §2.7).
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a test waits for the backend or the VM.
pub const WAIT: Duration = Duration::from_secs(10);
use vhost::vhost_user::message::VhostUserHeaderFlag;
use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio::backend::device::{self, OFFERED};
use virtio::backend::Backend;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub const MEM: usize = 4 << 20;
/// Where the frontend "has" guest memory in its own address space.
pub const USER: u64 = 0x7f00_0000_0000;
pub const QSIZE: u16 = 256;
pub const BUFS: u64 = 0x10_0000;
pub const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

/// A listener at a fresh path, and the path.
pub fn listener(tag: &str) -> (UnixListener, PathBuf) {
    let path = std::env::temp_dir().join(format!("splitnet-vu-{tag}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (UnixListener::bind(&path).unwrap(), path)
}

/// A backend serving a fresh listener.
pub fn backend(tag: &str) -> (Backend, PathBuf) {
    let (l, path) = listener(tag);
    (Backend::new(tag, MAC, false, l.into()).unwrap(), path)
}

/// Polls `b` (dropping what the VM sends) until `cond` holds, or panics.
pub fn poll_until(b: &mut Backend, what: &str, mut cond: impl FnMut(&mut Backend) -> bool) {
    testutil::wait_until(what, WAIT, || {
        if cond(b) {
            return Ok(());
        }
        b.poll(&mut |_, _| true).unwrap();
        Err(b.status())
    });
}

/// Waits for the backend's caller thread to write `call`; its count.
pub fn wait_call(call: &EventFd) -> u64 {
    testutil::wait_until("the VM to be called", WAIT, || call.read())
}

/// The count of refusals for `reason` in `b`'s status.
pub fn refused(b: &Backend, reason: &str) -> u64 {
    b.status()["refused"][reason].as_u64().unwrap_or(0)
}

pub fn drops(b: &Backend, reason: &str) -> u64 {
    b.status()["drops"][reason].as_u64().unwrap()
}

/// The driver's side of one split ring in guest memory.
pub struct DriverRing {
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    pub avail_idx: u16,
    pub used_seen: u16,
    next_desc: u16,
}

impl DriverRing {
    fn new(q: u64) -> DriverRing {
        let base = q * 0x1_0000;
        DriverRing {
            desc: base,
            avail: base + 0x1000 * 4,
            used: base + 0x1000 * 5,
            avail_idx: 0,
            used_seen: 0,
            next_desc: 0,
        }
    }

    /// Writes descriptor `i` as given.
    pub fn write_desc(
        &self,
        mem: &GuestMemoryMmap,
        i: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    ) {
        let at = GuestAddress(self.desc + 16 * u64::from(i));
        mem.write_obj(addr, at).unwrap();
        mem.write_obj(len, GuestAddress(at.0 + 8)).unwrap();
        mem.write_obj(flags, GuestAddress(at.0 + 12)).unwrap();
        mem.write_obj(next, GuestAddress(at.0 + 14)).unwrap();
    }

    /// Makes chain `head` available (without a kick).
    pub fn publish(&mut self, mem: &GuestMemoryMmap, head: u16) {
        let slot = u64::from(self.avail_idx % QSIZE);
        mem.write_obj(head, GuestAddress(self.avail + 4 + 2 * slot))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        mem.store(
            self.avail_idx,
            GuestAddress(self.avail + 2),
            Ordering::Release,
        )
        .unwrap();
    }

    /// Posts a chain of buffers `(addr, len)`, device-writable or not.
    pub fn post(&mut self, mem: &GuestMemoryMmap, bufs: &[(u64, u32)], write: bool) -> u16 {
        let head = self.next_desc;
        for (k, &(addr, len)) in bufs.iter().enumerate() {
            let i = (head + k as u16) % QSIZE;
            let last = k + 1 == bufs.len();
            let flags = if last { 0 } else { 1 } | if write { 2 } else { 0 };
            self.write_desc(mem, i, addr, len, flags, (i + 1) % QSIZE);
        }
        self.next_desc = (head + bufs.len() as u16) % QSIZE;
        self.publish(mem, head);
        head
    }

    /// Used entries since the last look: (id, len).
    pub fn take_used(&mut self, mem: &GuestMemoryMmap) -> Vec<(u32, u32)> {
        let idx: u16 = mem
            .load(GuestAddress(self.used + 2), Ordering::Acquire)
            .unwrap();
        let mut out = Vec::new();
        while self.used_seen != idx {
            let at = self.used + 4 + 8 * u64::from(self.used_seen % QSIZE);
            let id: u32 = mem.read_obj(GuestAddress(at)).unwrap();
            let len: u32 = mem.read_obj(GuestAddress(at + 4)).unwrap();
            out.push((id, len));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }
}

/// A VM: the frontend connection, its memory and its rings.
pub struct Vm {
    pub fe: Frontend,
    /// The same connection, for messages the frontend would not send.
    pub raw: UnixStream,
    pub mem: GuestMemoryMmap,
    pub memfd: sys::Memfd,
    pub kick: [EventFd; 2],
    pub call: [EventFd; 2],
    pub rings: [DriverRing; 2],
}

impl Vm {
    /// Connects to `path` and has `b` accept.
    pub fn connect(b: &mut Backend, path: &PathBuf) -> Vm {
        let vm = Vm::from_stream(UnixStream::connect(path).unwrap());
        b.poll(&mut |_, _| true).unwrap();
        poll_until(b, "the connection", |b| b.connected());
        vm
    }

    /// A VM on a connection the backend has accepted (or will).
    pub fn from_stream(stream: UnixStream) -> Vm {
        let raw = stream.try_clone().unwrap();
        let fe = Frontend::from_stream(stream, 2);
        let memfd = sys::Memfd::create("vm", MEM, false).unwrap();
        let file = File::from(memfd.dup().unwrap());
        let region = MmapRegion::from_file(FileOffset::new(file, 0), MEM).unwrap();
        let mem =
            GuestMemoryMmap::from_regions(vec![
                GuestRegionMmap::new(region, GuestAddress(0)).unwrap()
            ])
            .unwrap();
        Vm {
            fe,
            raw,
            mem,
            memfd,
            kick: [0, 1].map(|_| EventFd::new(EFD_NONBLOCK).unwrap()),
            call: [0, 1].map(|_| EventFd::new(EFD_NONBLOCK).unwrap()),
            rings: [DriverRing::new(0), DriverRing::new(1)],
        }
    }

    /// Negotiates `features` (with PROTOCOL_FEATURES: REPLY_ACK and CONFIG).
    pub fn negotiate(&mut self, features: u64) {
        self.fe.set_owner().unwrap();
        assert_eq!(self.fe.get_features().unwrap(), OFFERED);
        self.fe.set_features(features).unwrap();
        if features & device::F_PROTOCOL_FEATURES != 0 {
            let p = self.fe.get_protocol_features().unwrap();
            assert!(p.contains(
                VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIG
            ));
            assert!(!p.contains(VhostUserProtocolFeatures::MQ));
            self.fe
                .set_protocol_features(
                    VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIG,
                )
                .unwrap();
            self.fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }
    }

    /// The memory table: one region, the whole memfd.
    pub fn region(&self) -> VhostUserMemoryRegionInfo {
        VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: USER,
            mmap_offset: 0,
            mmap_handle: self.memfd.as_fd().as_raw_fd(),
        }
    }

    /// The same VM after its VMM lost the connection and made a new one
    /// (guest memory and rings kept).
    pub fn reconnect(self, b: &mut Backend, path: &PathBuf) -> Vm {
        let Vm {
            fe,
            raw,
            mem,
            memfd,
            kick,
            call,
            rings,
        } = self;
        drop((fe, raw));
        poll_until(b, "the disconnect", |b| !b.connected());
        let stream = UnixStream::connect(path).unwrap();
        let raw = stream.try_clone().unwrap();
        let fe = Frontend::from_stream(stream, 2);
        b.poll(&mut |_, _| true).unwrap();
        poll_until(b, "the connection", |b| b.connected());
        Vm {
            fe,
            raw,
            mem,
            memfd,
            kick,
            call,
            rings,
        }
    }

    /// Sets up both rings from `base` and starts them.
    pub fn start_rings(&mut self, base: u16) -> vhost::Result<()> {
        self.start_rings_with(base, true)
    }

    /// As [`Vm::start_rings`], enabling the rings only with `enable`.
    pub fn start_rings_with(&mut self, base: u16, enable: bool) -> vhost::Result<()> {
        for q in 0..2 {
            let r = &self.rings[q];
            self.fe.set_vring_num(q, QSIZE)?;
            self.fe.set_vring_base(q, base)?;
            self.fe.set_vring_addr(
                q,
                &VringConfigData {
                    queue_max_size: QSIZE,
                    queue_size: QSIZE,
                    flags: 0,
                    desc_table_addr: USER + r.desc,
                    used_ring_addr: USER + r.used,
                    avail_ring_addr: USER + r.avail,
                    log_addr: None,
                },
            )?;
            self.fe.set_vring_call(q, &self.call[q])?;
            self.fe.set_vring_kick(q, &self.kick[q])?;
            if enable {
                self.fe.set_vring_enable(q, true)?;
            }
        }
        Ok(())
    }

    /// The whole handshake a VMM does.
    pub fn up(b: &mut Backend, path: &PathBuf, features: u64) -> Vm {
        let mut vm = Vm::connect(b, path);
        vm.negotiate(features);
        vm.fe.set_mem_table(&[vm.region()]).unwrap();
        vm.start_rings(0).unwrap();
        vm
    }

    /// Queues frame `data` (with its 12-byte header) on the TX ring, split
    /// over descriptors of at most `piece` bytes, and kicks.
    pub fn send(&mut self, at: u64, data: &[u8], piece: usize) {
        self.mem.write_slice(data, GuestAddress(at)).unwrap();
        let bufs: Vec<(u64, u32)> = data
            .chunks(piece)
            .enumerate()
            .map(|(k, c)| (at + (k * piece) as u64, c.len() as u32))
            .collect();
        self.rings[device::TX].post(&self.mem, &bufs, false);
        self.kick[device::TX].write(1).unwrap();
    }
}

/// All features the backend offers.
pub const ALL: u64 = OFFERED;
