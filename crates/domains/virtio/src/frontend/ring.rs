//! The driver's side of a split virtqueue (virtio 1.x §2.7): the driver
//! owns the descriptor table and the available ring, the device (the
//! vhost-user backend, as hostile as any peer) owns the used ring, and every
//! entry it writes there is checked before it is believed.
//!
//! Each descriptor is a whole buffer (no chains, no indirect tables): buffer
//! `id` always lives at the same place, so a used entry names a buffer by
//! its id alone, and the only thing to check is that the id is one the
//! device holds.

use abi::SharedMemory;
use sys::Mapping;
use virtio_bindings::virtio_ring::{
    VRING_AVAIL_F_NO_INTERRUPT, VRING_DESC_F_WRITE, VRING_USED_F_NO_NOTIFY,
};

/// The device writes this buffer (a receive buffer).
pub const DESC_F_WRITE: u16 = VRING_DESC_F_WRITE as u16;
/// The driver asks not to be notified.
const AVAIL_F_NO_INTERRUPT: u16 = VRING_AVAIL_F_NO_INTERRUPT as u16;
/// The device asks not to be kicked.
const USED_F_NO_NOTIFY: u16 = VRING_USED_F_NO_NOTIFY as u16;
/// Bytes of one descriptor: addr u64, len u32, flags u16, next u16.
const DESC_SIZE: usize = 16;
/// Bytes of one used element: id u32, len u32.
const USED_ELEM: usize = 8;

/// Where one virtqueue's three parts lie in the shared memory (offsets,
/// each page-aligned, which is more than §2.7's alignment asks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLayout {
    pub size: u16,
    pub desc: usize,
    pub avail: usize,
    pub used: usize,
}

impl QueueLayout {
    /// The layout of a queue of `size` entries (a power of two) starting at
    /// `base` (page-aligned); returns it and the offset just past it.
    pub fn at(base: usize, size: u16) -> (QueueLayout, usize) {
        let n = usize::from(size);
        let desc = base;
        let avail = page_up(desc + DESC_SIZE * n);
        // flags, idx, ring[n], used_event
        let used = page_up(avail + 4 + 2 * n + 2);
        // flags, idx, ring[n], avail_event
        let end = page_up(used + 4 + USED_ELEM * n + 2);
        (
            QueueLayout {
                size,
                desc,
                avail,
                used,
            },
            end,
        )
    }

    fn avail_idx(&self) -> usize {
        self.avail + 2
    }
    fn avail_slot(&self, i: u16) -> usize {
        self.avail + 4 + 2 * usize::from(i % self.size)
    }
    /// `used_event` (EVENT_IDX): after the available ring.
    fn used_event(&self) -> usize {
        self.avail + 4 + 2 * usize::from(self.size)
    }
    fn used_idx(&self) -> usize {
        self.used + 2
    }
    fn used_elem(&self, i: u16) -> usize {
        self.used + 4 + USED_ELEM * usize::from(i % self.size)
    }
    /// `avail_event` (EVENT_IDX): after the used ring.
    fn avail_event(&self) -> usize {
        self.used + 4 + USED_ELEM * usize::from(self.size)
    }
}

fn page_up(x: usize) -> usize {
    x.next_multiple_of(sys::PAGE_SIZE)
}

/// What the device wrote into the used ring that no honest device writes.
/// Each breaks the queue (as Linux's virtio_ring marks it broken): the
/// driver can no longer tell which buffers the device holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsedError {
    #[error("used.idx ran {ahead} entries ahead, but the device held only {held} buffers")]
    IdxAhead { ahead: u16, held: u16 },
    #[error("used entry names buffer {id}, which is out of range (queue size {size})")]
    IdOutOfRange { id: u32, size: u16 },
    #[error("used entry names buffer {id}, which the device does not hold")]
    NotHeld { id: u32 },
    #[error("used.idx moved back under entries it had published")]
    IdxBack,
}

/// The driver's state of one split virtqueue.
#[derive(Debug)]
pub struct DriverRing {
    lay: QueueLayout,
    event_idx: bool,
    /// The next `avail.idx` (entries written, maybe not yet published).
    next_avail: u16,
    /// The `avail.idx` last published (the old index of §2.7.10's test).
    published: u16,
    /// The next used entry to read.
    last_used: u16,
    /// Buffers the driver holds, to hand out.
    free: Vec<u16>,
    /// Which buffers the device holds.
    held: Vec<bool>,
    /// Published entries set aside until more come ([`DriverRing::set_waiting`]).
    waiting: u16,
}

impl DriverRing {
    /// A queue over `lay` in `mem`, its parts zeroed, every buffer free.
    pub fn new(mem: &Mapping, lay: QueueLayout, event_idx: bool) -> DriverRing {
        let n = usize::from(lay.size);
        assert!(lay.size.is_power_of_two(), "queue size {n}");
        mem.fill(lay.desc, DESC_SIZE * n, 0);
        mem.fill(lay.avail, 4 + 2 * n + 2, 0);
        mem.fill(lay.used, 4 + USED_ELEM * n + 2, 0);
        DriverRing {
            lay,
            event_idx,
            next_avail: 0,
            published: 0,
            last_used: 0,
            // Popped from the end: buffer 0 first.
            free: (0..lay.size).rev().collect(),
            held: vec![false; n],
            waiting: 0,
        }
    }

    pub fn layout(&self) -> QueueLayout {
        self.lay
    }

    /// Buffers the driver may hand out now.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Buffers the device holds.
    pub fn held_count(&self) -> u16 {
        self.lay.size - self.free.len() as u16
    }

    /// Takes a free buffer id.
    pub fn take_free(&mut self) -> Option<u16> {
        self.free.pop()
    }

    /// Returns a buffer taken with [`DriverRing::take_free`] but not offered.
    pub fn give_back(&mut self, id: u16) {
        debug_assert!(!self.held[usize::from(id)]);
        self.free.push(id);
    }

    /// Writes descriptor `id`: a whole buffer at guest address `addr`.
    pub fn set_desc(&self, mem: &Mapping, id: u16, addr: u64, len: u32, flags: u16) {
        let off = self.lay.desc + DESC_SIZE * usize::from(id);
        let mut d = [0u8; DESC_SIZE];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        mem.write_bytes(off, &d);
    }

    /// Changes only descriptor `id`'s length (a transmit buffer's frame).
    pub fn set_desc_len(&self, mem: &Mapping, id: u16, len: u32) {
        let off = self.lay.desc + DESC_SIZE * usize::from(id) + 8;
        mem.write_bytes(off, &len.to_le_bytes());
    }

    /// Offers buffer `id` (taken from the free list) to the device; it is
    /// seen once [`DriverRing::publish`] runs.
    pub fn offer(&mut self, mem: &Mapping, id: u16) {
        let slot = self.lay.avail_slot(self.next_avail);
        mem.write_bytes(slot, &id.to_le_bytes());
        self.held[usize::from(id)] = true;
        self.next_avail = self.next_avail.wrapping_add(1);
    }

    /// Publishes the offered buffers (`avail.idx`, release) and says
    /// whether the device wants a kick for them (§2.7.10: `avail_event`
    /// with EVENT_IDX, else `used.flags`).
    pub fn publish(&mut self, mem: &Mapping) -> bool {
        let (old, new) = (self.published, self.next_avail);
        if old == new {
            return false;
        }
        mem.store_u16(self.lay.avail_idx(), new);
        self.published = new;
        // The index store must be visible before the device's request is read.
        mem.fence_seqcst();
        if self.event_idx {
            let event = u16::from_le(mem.load_u16(self.lay.avail_event()));
            need_event(event, new, old)
        } else {
            u16::from_le(mem.load_u16(self.lay.used)) & USED_F_NO_NOTIFY == 0
        }
    }

    /// How many used entries the device has published and the driver not
    /// yet taken; more than the device holds buffers is an error.
    pub fn ready(&self, mem: &Mapping) -> Result<u16, UsedError> {
        let used = u16::from_le(mem.load_u16_acquire(self.lay.used_idx()));
        let ahead = used.wrapping_sub(self.last_used);
        let held = self.held_count();
        if ahead > held {
            return Err(UsedError::IdxAhead { ahead, held });
        }
        Ok(ahead)
    }

    /// The next used entry, checked but not taken: `(id, len)`. Only
    /// after [`DriverRing::ready`] said there is one.
    pub fn peek_used(&self, mem: &Mapping) -> Result<(u16, u32), UsedError> {
        let e = self.lay.used_elem(self.last_used);
        let id = u32::from_le(mem.load_u32(e));
        let len = u32::from_le(mem.load_u32(e + 4));
        if id >= u32::from(self.lay.size) {
            return Err(UsedError::IdOutOfRange {
                id,
                size: self.lay.size,
            });
        }
        if !self.held[id as usize] {
            return Err(UsedError::NotHeld { id });
        }
        Ok((id as u16, len))
    }

    /// The next used entry: `(id, len)`, the buffer given back to the
    /// driver. `len` is the device's word, for the caller to check against
    /// the buffer. An id the device does not hold is an error.
    pub fn pop_used(&mut self, mem: &Mapping) -> Result<Option<(u16, u32)>, UsedError> {
        if self.ready(mem)? == 0 {
            return Ok(None);
        }
        let (id, len) = self.peek_used(mem)?;
        self.held[usize::from(id)] = false;
        self.free.push(id);
        self.last_used = self.last_used.wrapping_add(1);
        Ok(Some((id, len)))
    }

    /// Says that the next `n` published entries are to stay until more
    /// come (the first buffers of a frame whose last ones the device has
    /// not published yet): a notification is then asked for past them.
    pub fn set_waiting(&mut self, n: u16) {
        self.waiting = n;
    }

    /// Whether used entries are waiting beyond those set aside (a peek:
    /// the next pop checks them).
    pub fn has_used(&self, mem: &Mapping) -> bool {
        let used = u16::from_le(mem.load_u16_acquire(self.lay.used_idx()));
        used.wrapping_sub(self.last_used) > self.waiting
    }

    /// Asks the device to notify the driver at its next used entry past
    /// those set aside (`used_event` with EVENT_IDX, else clearing
    /// NO_INTERRUPT). Returns
    /// whether entries arrived meanwhile (then no notification may come:
    /// the caller looks again).
    pub fn enable_notify(&self, mem: &Mapping) -> bool {
        if self.event_idx {
            let event = self.last_used.wrapping_add(self.waiting);
            mem.write_bytes(self.lay.used_event(), &event.to_le_bytes());
        } else {
            mem.write_bytes(self.lay.avail, &0u16.to_le_bytes());
        }
        mem.fence_seqcst();
        self.has_used(mem)
    }

    /// Asks the device not to notify the driver (only a hint: without
    /// EVENT_IDX a flag, with it the `used_event` left behind stays passed).
    pub fn disable_notify(&self, mem: &Mapping) {
        if !self.event_idx {
            mem.write_bytes(self.lay.avail, &AVAIL_F_NO_INTERRUPT.to_le_bytes());
        }
    }

    /// The driver's ring positions, for the status page.
    pub fn positions(&self) -> (u16, u16) {
        (self.next_avail, self.last_used)
    }
}

/// §2.7.10's `vring_need_event`: whether moving an index from `old` to
/// `new` passed `event`.
pub fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn mem(len: usize) -> (sys::Memfd, Mapping) {
        let m = sys::Memfd::create("ring", len, false).unwrap();
        let map = Mapping::new(m.as_fd(), 0, len, true).unwrap();
        (m, map)
    }

    /// What a device does: takes avail entries, returns used ones.
    struct Device<'a> {
        mem: &'a Mapping,
        lay: QueueLayout,
        last_avail: u16,
        used: u16,
    }

    impl Device<'_> {
        fn new(mem: &Mapping, lay: QueueLayout) -> Device<'_> {
            Device {
                mem,
                lay,
                last_avail: 0,
                used: 0,
            }
        }
        fn take(&mut self) -> Option<u16> {
            let idx = self.mem.load_u16(self.lay.avail_idx());
            if idx == self.last_avail {
                return None;
            }
            let id = self.mem.read_u16(self.lay.avail_slot(self.last_avail));
            self.last_avail = self.last_avail.wrapping_add(1);
            Some(id)
        }
        fn put(&mut self, id: u32, len: u32) {
            let e = self.lay.used_elem(self.used);
            self.mem.write_u32(e, id);
            self.mem.write_u32(e + 4, len);
            self.used = self.used.wrapping_add(1);
            self.mem.store_u16(self.lay.used_idx(), self.used);
        }
        fn set_avail_event(&self, v: u16) {
            self.mem.write_u16(self.lay.avail_event(), v);
        }
    }

    #[test]
    fn layout_is_page_aligned_and_disjoint() {
        let (q, end) = QueueLayout::at(0, 256);
        assert_eq!((q.desc, q.avail, q.used), (0, 4096, 8192));
        assert_eq!(end, 8192 + 4096);
        let (q2, _) = QueueLayout::at(end, 256);
        assert_eq!(q2.desc, end);
        let (q, end) = QueueLayout::at(0, 1024);
        assert_eq!((q.avail, q.used, end), (16384, 20480, 32768));
    }

    #[test]
    fn need_event_follows_the_spec() {
        assert!(need_event(0, 1, 0));
        assert!(!need_event(1, 1, 0));
        assert!(need_event(5, 10, 0));
        assert!(!need_event(10, 10, 0));
        // Across the wrap.
        assert!(need_event(0xffff, 2, 0xfffe));
        assert!(!need_event(3, 2, 0xfffe));
    }

    #[test]
    fn buffers_go_round_and_come_back() {
        let (_m, map) = mem(64 * 1024);
        let (lay, _) = QueueLayout::at(0, 8);
        let mut r = DriverRing::new(&map, lay, false);
        let mut dev = Device::new(&map, lay);
        // Many rounds, so the 16-bit indices wrap.
        for round in 0..20_000u32 {
            let n = 1 + round % 8;
            for _ in 0..n {
                let id = r.take_free().unwrap();
                r.set_desc(&map, id, 0x1000 * u64::from(id), 100, 0);
                r.offer(&map, id);
            }
            assert!(r.publish(&map), "no NO_NOTIFY: always kick");
            assert_eq!(r.free_count(), 8 - n as usize);
            let mut taken = Vec::new();
            while let Some(id) = dev.take() {
                taken.push(id);
            }
            assert_eq!(taken.len(), n as usize);
            // Out of order, as a device may.
            for id in taken.iter().rev() {
                dev.put(u32::from(*id), 7);
            }
            for id in taken.iter().rev() {
                assert_eq!(r.pop_used(&map).unwrap(), Some((*id, 7)));
            }
            assert_eq!(r.pop_used(&map).unwrap(), None);
            assert_eq!(r.free_count(), 8);
        }
    }

    #[test]
    fn kicks_are_suppressed_as_the_device_asks() {
        let (_m, map) = mem(64 * 1024);
        let (lay, _) = QueueLayout::at(0, 8);
        let mut r = DriverRing::new(&map, lay, true);
        let dev = Device::new(&map, lay);
        // The device wants a kick when entry 2 appears (avail.idx passes 2).
        dev.set_avail_event(2);
        let offer = |r: &mut DriverRing| {
            let id = r.take_free().unwrap();
            r.offer(&map, id);
            r.publish(&map)
        };
        assert!(!offer(&mut r), "idx 0 -> 1: event 2 not passed");
        assert!(!offer(&mut r), "idx 1 -> 2");
        assert!(offer(&mut r), "idx 2 -> 3 passes event 2");
        assert!(!offer(&mut r), "already passed");
        // Without EVENT_IDX, the used ring's flag decides.
        let (_m2, map2) = mem(64 * 1024);
        let mut r = DriverRing::new(&map2, lay, false);
        map2.write_u16(lay.used, USED_F_NO_NOTIFY);
        let id = r.take_free().unwrap();
        r.offer(&map2, id);
        assert!(!r.publish(&map2));
        // Nothing new offered: nothing to kick.
        assert!(!r.publish(&map2));
    }

    #[test]
    fn notification_requests_land_where_the_device_reads_them() {
        let (_m, map) = mem(64 * 1024);
        let (lay, _) = QueueLayout::at(0, 8);
        let r = DriverRing::new(&map, lay, true);
        assert!(!r.enable_notify(&map));
        assert_eq!(map.read_u16(lay.used_event()), 0);
        let r = DriverRing::new(&map, lay, false);
        r.disable_notify(&map);
        assert_eq!(map.read_u16(lay.avail), AVAIL_F_NO_INTERRUPT);
        assert!(!r.enable_notify(&map));
        assert_eq!(map.read_u16(lay.avail), 0);
    }

    /// Entries set aside (the first buffers of a frame not yet whole)
    /// move the notification request past them, and do not count as new.
    #[test]
    fn waiting_entries_move_the_notification_point() {
        let (_m, map) = mem(64 * 1024);
        let (lay, _) = QueueLayout::at(0, 8);
        let mut r = DriverRing::new(&map, lay, true);
        let mut dev = Device::new(&map, lay);
        for _ in 0..3 {
            let id = r.take_free().unwrap();
            r.offer(&map, id);
        }
        r.publish(&map);
        let id = dev.take().unwrap();
        dev.put(u32::from(id), 12);
        assert_eq!(r.ready(&map), Ok(1));
        assert_eq!(r.peek_used(&map), Ok((id, 12)));
        r.set_waiting(1);
        assert!(!r.enable_notify(&map), "the one entry is set aside");
        assert_eq!(map.read_u16(lay.used_event()), 1, "notify at the second");
        let id2 = dev.take().unwrap();
        dev.put(u32::from(id2), 20);
        assert!(r.has_used(&map));
        assert_eq!(r.pop_used(&map), Ok(Some((id, 12))));
        assert_eq!(r.pop_used(&map), Ok(Some((id2, 20))));
    }

    /// A hostile device: ids out of range, ids it does not hold, the same
    /// id twice, and used.idx running ahead are all refused, and a refused
    /// entry changes nothing.
    #[test]
    fn hostile_used_entries_are_refused() {
        let (_m, map) = mem(64 * 1024);
        let (lay, _) = QueueLayout::at(0, 8);
        let mut r = DriverRing::new(&map, lay, false);
        let mut dev = Device::new(&map, lay);
        for _ in 0..2 {
            let id = r.take_free().unwrap();
            r.offer(&map, id);
        }
        r.publish(&map);
        // Buffers 0 and 1 are held. Id 8 is out of range.
        dev.put(8, 0);
        assert_eq!(
            r.pop_used(&map),
            Err(UsedError::IdOutOfRange { id: 8, size: 8 })
        );
        assert_eq!(r.held_count(), 2);
        // Rewrite the same entry: id 5 is in range but not held.
        dev.used = 0;
        dev.put(5, 0);
        assert_eq!(r.pop_used(&map), Err(UsedError::NotHeld { id: 5 }));
        // A good entry, then the same id again.
        dev.used = 0;
        dev.put(1, 0);
        dev.put(1, 0);
        assert_eq!(r.pop_used(&map), Ok(Some((1, 0))));
        assert_eq!(r.pop_used(&map), Err(UsedError::NotHeld { id: 1 }));
        // used.idx far ahead of what the device holds.
        map.store_u16(lay.used_idx(), 1 + 5);
        assert_eq!(
            r.pop_used(&map),
            Err(UsedError::IdxAhead { ahead: 5, held: 1 })
        );
        assert_eq!(r.held_count(), 1);
        assert_eq!(r.free_count(), 7);
    }
}
