//! The vhost-user control channel of one connection, served in a thread of
//! its own so a frontend that stalls mid-message blocks only that thread.
//! The vhost crate's `BackendReqHandler` reads, checks and answers each
//! message (sizes, versions, attached descriptors, REPLY_ACK); splitnet's
//! [`Handler`] decides on their content: features, the memory table
//! (validated before anything is mapped), ring layout and state.

use super::device::{self, Device, Region, RX, TX};
use std::fs::File;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserProtocolFeatures, VhostUserShMemConfig,
    VhostUserSharedMsg, VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{
    BackendReqHandler, Error as VhostError, GpuBackend, Result as VhostResult,
    VhostUserBackendReqHandlerMut,
};
use vhost::VhostUserMemoryRegionBase;
use virtio_queue::QueueT;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

/// Most regions a memory table may have (QEMU sends at most 8).
pub const MAX_REGIONS: usize = 8;
/// Largest guest memory the backend maps, in all.
pub const MAX_MEMORY: u64 = 1 << 40;
/// The virtio-net config space's `status`: link up (virtio 1.x §5.1.4).
const LINK_UP: u16 = 1;

/// The protocol features offered: REPLY_ACK and CONFIG (crosvm reads the
/// MAC through GET_CONFIG); not MQ (one queue pair).
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::REPLY_ACK | VhostUserProtocolFeatures::CONFIG
}

/// Wakes the driver loop when the control thread changed what it polls
/// (a kick descriptor) or the connection ended.
pub trait Wake: Send + 'static {
    fn wake(&self);
}

/// Serves connection `conn` until it ends, then records why.
pub fn serve(stream: UnixStream, dev: Arc<Mutex<Device>>, conn: u64, wake: impl Wake) {
    let handler = Arc::new(Mutex::new(Handler {
        dev: dev.clone(),
        conn,
        reason: None,
        wake: Box::new(wake),
    }));
    // The driver loop holds a handle on the socket too: shutting it down
    // when the thread ends is what tells the frontend (a refused message
    // gets no reply it could wait for forever).
    let closer = stream.try_clone();
    let mut req = BackendReqHandler::from_stream(stream, handler.clone());
    let err = loop {
        match req.handle_request() {
            Ok(()) => {}
            // QEMU (7.2) sends its SET_VRING_ENABLEs before SET_FEATURES,
            // which the vhost crate refuses (PROTOCOL_FEATURES not acked
            // yet; its only InactiveFeature) after reading the whole
            // message: the connection is still in step, so it goes on, and
            // rings count as enabled until disabled ([`device::Ring`]).
            Err(VhostError::InactiveFeature(_)) if lock(&handler).reason.is_none() => {
                lock(&dev).ignored += 1;
            }
            Err(e) => break e,
        }
    };
    let mut h = lock(&handler);
    let reason = h.reason.take();
    if let Ok(c) = closer {
        let _ = c.shutdown(std::net::Shutdown::Both);
    }
    // Counted even when a newer connection has taken the device over.
    let mut d = lock(&dev);
    match (reason, &err) {
        (Some(r), _) => d.refuse(r),
        (None, VhostError::Disconnected | VhostError::PartialMessage) => d.disconnects += 1,
        (None, VhostError::SocketBroken(_)) => d.disconnects += 1,
        (None, e) => d.refuse(classify(e)),
    }
    if d.conn == conn {
        d.connected = false;
        d.reset();
    }
    drop(d);
    h.wake.wake();
}

/// The counted reason for a message the vhost crate refused.
pub fn classify(e: &VhostError) -> &'static str {
    match e {
        VhostError::InvalidMessage => "invalid_message",
        VhostError::InactiveOperation(_) | VhostError::InactiveFeature(_) => "inactive_feature",
        VhostError::OversizedMsg => "oversized_message",
        VhostError::IncorrectFds => "incorrect_fds",
        VhostError::InvalidParam => "invalid_param",
        VhostError::PartialMessage | VhostError::Disconnected => "disconnected",
        _ => "socket_error",
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The backend's answers to one connection's messages.
pub struct Handler {
    dev: Arc<Mutex<Device>>,
    conn: u64,
    /// Why the handler refused the last message, if it did.
    reason: Option<&'static str>,
    wake: Box<dyn Wake>,
}

impl Handler {
    /// The device, if this connection still owns it.
    fn dev(&mut self) -> VhostResult<MutexGuard<'_, Device>> {
        let d = lock(&self.dev);
        if d.conn != self.conn {
            self.reason = Some("replaced");
            return Err(VhostError::InvalidOperation(
                "replaced by a newer connection",
            ));
        }
        Ok(d)
    }

    /// Whether this connection still owns the device.
    fn owned(&mut self) -> VhostResult<()> {
        self.dev().map(drop)
    }

    /// Refuses the message for `reason` (the connection then closes).
    fn refuse<T>(&mut self, reason: &'static str) -> VhostResult<T> {
        self.reason = Some(reason);
        Err(VhostError::InvalidOperation(reason))
    }

    /// Ring `index`, if the device has it.
    fn ring_index(&mut self, index: u32) -> VhostResult<usize> {
        match index as usize {
            i @ (RX | TX) => Ok(i),
            _ => self.refuse("bad_ring_index"),
        }
    }

    /// Re-arms ring `i` after a change; a ring that cannot run is refused.
    fn rearm(&mut self, i: usize) -> VhostResult<()> {
        let r = self.dev()?.arm(i);
        match r {
            Ok(()) => Ok(()),
            Err(_) => self.refuse("bad_ring_address"),
        }
    }
}

/// Checks a memory table and maps it. Refused: no regions or more than
/// [`MAX_REGIONS`], empty or huge regions, address arithmetic that
/// overflows, regions overlapping in guest-physical or frontend
/// addresses, descriptors shorter than their region (a mapping past a
/// file's end faults on access) or that cannot be mapped shared.
///
/// Each file is sealed against shrinking where it can be (a memfd that
/// allows sealing, as QEMU's `memory-backend-memfd` makes by default): a
/// frontend that shrinks a mapped file afterwards would turn the driver's
/// accesses into SIGBUS. A file that cannot be sealed (DPDK's, a
/// hugetlbfs file) is still taken, and [`Table::sealed`] says so (status
/// shows it).
pub fn map_table(regions: &[(Region, u64)], files: Vec<File>) -> Result<Table, &'static str> {
    if regions.is_empty() || regions.len() > MAX_REGIONS || files.len() != regions.len() {
        return Err("bad_memory_table");
    }
    let mut total = 0u64;
    for (i, (r, off)) in regions.iter().enumerate() {
        let sane = r.size > 0
            && r.size <= MAX_MEMORY
            && r.guest.checked_add(r.size).is_some()
            && r.user.checked_add(r.size).is_some()
            && off.checked_add(r.size).is_some();
        total = total.saturating_add(r.size);
        if !sane || total > MAX_MEMORY {
            return Err("bad_memory_table");
        }
        for (q, _) in &regions[..i] {
            let apart = |a: u64, b: u64| a + r.size <= b || b + q.size <= a;
            if !apart(r.guest, q.guest) || !apart(r.user, q.user) {
                return Err("overlapping_memory_table");
            }
        }
    }
    let mut mapped = Vec::with_capacity(regions.len());
    let mut sealed = true;
    for ((r, off), file) in regions.iter().zip(files) {
        sealed &= sys::seal_shrink(std::os::fd::AsFd::as_fd(&file));
        let meta = file.metadata().map_err(|_| "bad_memory_fd")?;
        if !meta.file_type().is_file() || meta.len() < off + r.size {
            return Err("bad_memory_fd");
        }
        let size = usize::try_from(r.size).map_err(|_| "bad_memory_table")?;
        let m = MmapRegion::from_file(FileOffset::new(file, *off), size)
            .map_err(|_| "bad_memory_fd")?;
        mapped.push(GuestRegionMmap::new(m, GuestAddress(r.guest)).ok_or("bad_memory_table")?);
    }
    mapped.sort_by_key(vm_memory::GuestMemoryRegion::start_addr);
    let mem = GuestMemoryMmap::from_regions(mapped).map_err(|_| "bad_memory_table")?;
    Ok(Table {
        mem,
        regions: regions.iter().map(|(r, _)| *r).collect(),
        sealed,
    })
}

/// A mapped memory table.
pub struct Table {
    pub mem: GuestMemoryMmap,
    pub regions: Vec<Region>,
    /// Every file is sealed against shrinking.
    pub sealed: bool,
}

/// The virtio-net config space (virtio 1.x §5.1.4): MAC, status.
fn config_space(mac: [u8; 6]) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[..6].copy_from_slice(&mac);
    c[6..8].copy_from_slice(&LINK_UP.to_le_bytes());
    // max_virtqueue_pairs: one.
    c[8..10].copy_from_slice(&1u16.to_le_bytes());
    c
}

impl VhostUserBackendReqHandlerMut for Handler {
    fn set_owner(&mut self) -> VhostResult<()> {
        self.owned()?;
        Ok(())
    }
    fn reset_owner(&mut self) -> VhostResult<()> {
        self.dev()?.reset();
        self.wake.wake();
        Ok(())
    }
    fn reset_device(&mut self) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn get_features(&mut self) -> VhostResult<u64> {
        self.owned()?;
        Ok(device::OFFERED)
    }
    fn set_features(&mut self, features: u64) -> VhostResult<()> {
        if features & !device::OFFERED != 0 {
            return self.refuse("bad_features");
        }
        let mut d = self.dev()?;
        d.features = features;
        drop(d);
        for i in [RX, TX] {
            self.rearm(i)?;
        }
        Ok(())
    }
    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy: Option<bool>,
    ) -> VhostResult<Option<Vec<VhostUserMemoryRegionBase>>> {
        let regions: Vec<(Region, u64)> = ctx
            .iter()
            .map(|r| {
                let reg = Region {
                    guest: r.guest_phys_addr,
                    size: r.memory_size,
                    user: r.user_addr,
                };
                (reg, r.mmap_offset)
            })
            .collect();
        // Mapped before the device is locked: the driver loop never waits
        // for the frontend's memory.
        let t = match map_table(&regions, files) {
            Ok(t) => t,
            Err(r) => return self.refuse(r),
        };
        if !t.sealed && self.dev()?.require_sealed {
            return self.refuse("unsealed_memory");
        }
        let mut d = self.dev()?;
        d.mem = Some(t.mem);
        d.table = t.regions;
        d.memory_sealed = Some(t.sealed);
        drop(d);
        for i in [RX, TX] {
            self.rearm(i)?;
        }
        Ok(None)
    }
    fn set_vring_num(&mut self, index: u32, num: u32) -> VhostResult<()> {
        let i = self.ring_index(index)?;
        let ok = u16::try_from(num).ok().is_some_and(|n| {
            self.dev()
                .is_ok_and(|mut d| d.rings[i].queue.try_set_size(n).is_ok())
        });
        if !ok {
            return self.refuse("bad_ring_size");
        }
        self.rearm(i)
    }
    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> VhostResult<()> {
        let i = self.ring_index(index)?;
        self.dev()?.rings[i].addr = Some([descriptor, used, available]);
        self.rearm(i)
    }
    fn set_vring_base(&mut self, index: u32, base: u32) -> VhostResult<()> {
        let i = self.ring_index(index)?;
        let Ok(base) = u16::try_from(base) else {
            return self.refuse("bad_ring_base");
        };
        let mut d = self.dev()?;
        d.rings[i].queue.set_next_avail(base);
        d.rings[i].queue.set_next_used(base);
        d.rings[i].looked_at = std::num::Wrapping(base);
        Ok(())
    }
    /// Stops the ring and hands back where it stopped, so a restarted
    /// backend (or a migration) resumes there.
    fn get_vring_base(&mut self, index: u32) -> VhostResult<VhostUserVringState> {
        let i = self.ring_index(index)?;
        let mut d = self.dev()?;
        let r = &mut d.rings[i];
        r.started = false;
        r.kick = None;
        r.queue.set_ready(false);
        let base = r.queue.next_avail();
        lock(&d.calls)[i] = None;
        d.kick_changed = true;
        drop(d);
        self.wake.wake();
        Ok(VhostUserVringState::new(index, u32::from(base)))
    }
    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> VhostResult<()> {
        let i = self.ring_index(u32::from(index))?;
        if fd
            .as_ref()
            .is_some_and(|f| sys::set_nonblocking(f).is_err())
        {
            return self.refuse("bad_kick_fd");
        }
        let mut d = self.dev()?;
        d.rings[i].kick = fd;
        d.rings[i].started = true;
        d.kick_changed = true;
        drop(d);
        self.rearm(i)?;
        self.wake.wake();
        Ok(())
    }
    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VhostResult<()> {
        let i = self.ring_index(u32::from(index))?;
        // Non-blocking for the caller thread's sake; a VM that clears it
        // again can stall only that thread.
        if fd
            .as_ref()
            .is_some_and(|f| sys::set_nonblocking(f).is_err())
        {
            return self.refuse("bad_call_fd");
        }
        let d = self.dev()?;
        lock(&d.calls)[i] = fd.map(Arc::new);
        Ok(())
    }
    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> VhostResult<()> {
        // The backend reports no ring errors through it: it closes the
        // connection instead.
        self.ring_index(u32::from(index)).map(|_| ())
    }
    fn get_protocol_features(&mut self) -> VhostResult<VhostUserProtocolFeatures> {
        self.owned()?;
        Ok(protocol_features())
    }
    fn set_protocol_features(&mut self, features: u64) -> VhostResult<()> {
        if features & !protocol_features().bits() != 0 {
            return self.refuse("bad_protocol_features");
        }
        self.dev()?.protocol_features = features;
        Ok(())
    }
    fn get_queue_num(&mut self) -> VhostResult<u64> {
        Ok(2)
    }
    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VhostResult<()> {
        let i = self.ring_index(index)?;
        self.dev()?.rings[i].enabled = enable;
        self.rearm(i)?;
        self.wake.wake();
        Ok(())
    }
    fn get_config(
        &mut self,
        offset: u32,
        size: u32,
        _flags: VhostUserConfigFlags,
    ) -> VhostResult<Vec<u8>> {
        let c = config_space(self.dev()?.mac);
        let (o, s) = (offset as usize, size as usize);
        match o.checked_add(s).filter(|&e| e <= c.len()) {
            Some(e) => Ok(c[o..e].to_vec()),
            None => Err(VhostError::InvalidParam),
        }
    }
    fn set_config(&mut self, _: u32, _: &[u8], _: VhostUserConfigFlags) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn set_gpu_socket(&mut self, _: GpuBackend) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn get_shared_object(&mut self, _: VhostUserSharedMsg) -> VhostResult<File> {
        self.refuse("unsupported_message")
    }
    fn get_inflight_fd(&mut self, _: &VhostUserInflight) -> VhostResult<(VhostUserInflight, File)> {
        self.refuse("unsupported_message")
    }
    fn set_inflight_fd(&mut self, _: &VhostUserInflight, _: File) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn get_max_mem_slots(&mut self) -> VhostResult<u64> {
        self.refuse("unsupported_message")
    }
    fn add_mem_region(
        &mut self,
        _: &VhostUserSingleMemoryRegion,
        _: File,
        _: Option<bool>,
    ) -> VhostResult<Option<VhostUserMemoryRegionBase>> {
        self.refuse("unsupported_message")
    }
    fn remove_mem_region(&mut self, _: &VhostUserSingleMemoryRegion) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn set_device_state_fd(
        &mut self,
        _: VhostTransferStateDirection,
        _: VhostTransferStatePhase,
        _: File,
    ) -> VhostResult<Option<File>> {
        self.refuse("unsupported_message")
    }
    fn check_device_state(&mut self) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
    fn get_shmem_config(&mut self) -> VhostResult<VhostUserShMemConfig> {
        self.refuse("unsupported_message")
    }
    fn set_log_base(&mut self, _: &VhostUserLog, _: File) -> VhostResult<()> {
        self.refuse("unsupported_message")
    }
}
