//! Guest-physical memory as an emulated device sees it.
//!
//! The device's DMA (descriptor rings, the init block, packet buffers) goes
//! through [`GuestMemory`]. The memory is any [`abi::SharedMemory`]: a
//! `sys::Mapping` of the guest's memfd when the device model runs in another
//! process (the VMApp, qemu-dm's role), or `abi::HeapMemory` in tests. Either
//! way the guest can rewrite it at any moment, so nothing here hands out a
//! reference into it: values are copied out (or loaded atomically) and the
//! caller validates them.
//!
//! Every guest-physical address is guest input. Unlike `SharedMemory`, whose
//! offsets are splitnet's own arithmetic and panic when out of range, every
//! access here is bounds-checked first and an address outside the memory is
//! an [`OutOfRange`] error (the NIC reports it as CSR0 MERR), never a panic.

use abi::SharedMemory;
use thiserror::Error;

/// A guest-physical range that does not lie inside the guest's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("guest-physical range {gpa:#x}+{len} lies outside the guest's {size} bytes")]
pub struct OutOfRange {
    /// First guest-physical address of the access.
    pub gpa: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// Size of the guest's memory.
    pub size: usize,
}

/// Bounds-checked access to a guest's physical memory, starting at
/// guest-physical address 0. Multi-byte values are little-endian, as on the
/// PCI bus the Am79C970A masters.
#[derive(Debug, Clone)]
pub struct GuestMemory<M> {
    mem: M,
}

impl<M: SharedMemory> GuestMemory<M> {
    /// Guest memory backed by `mem` (guest-physical 0 is offset 0).
    pub fn new(mem: M) -> Self {
        GuestMemory { mem }
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.mem.len()
    }

    /// The backing memory.
    pub fn backing(&self) -> &M {
        &self.mem
    }

    /// The offset of `len` bytes at `gpa`, if they all lie inside.
    fn range(&self, gpa: u64, len: usize) -> Result<usize, OutOfRange> {
        let size = self.mem.len();
        let err = OutOfRange { gpa, len, size };
        let off = usize::try_from(gpa).map_err(|_| err)?;
        match off.checked_add(len) {
            Some(end) if end <= size => Ok(off),
            _ => Err(err),
        }
    }

    /// Whether `len` bytes at `gpa` lie inside the memory.
    pub fn contains(&self, gpa: u64, len: usize) -> bool {
        self.range(gpa, len).is_ok()
    }

    /// Copies `dst.len()` bytes at `gpa` out of guest memory.
    pub fn read(&self, gpa: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let off = self.range(gpa, dst.len())?;
        self.mem.read_bytes(off, dst);
        Ok(())
    }

    /// Copies `src` into guest memory at `gpa`.
    pub fn write(&self, gpa: u64, src: &[u8]) -> Result<(), OutOfRange> {
        let off = self.range(gpa, src.len())?;
        self.mem.write_bytes(off, src);
        Ok(())
    }

    /// Loads a little-endian u32. Aligned loads are atomic with acquire
    /// ordering (a descriptor's ownership word, read before the rest of it);
    /// unaligned ones are byte copies.
    pub fn read_u32(&self, gpa: u64) -> Result<u32, OutOfRange> {
        let off = self.range(gpa, 4)?;
        if off % 4 == 0 {
            Ok(u32::from_le(self.mem.load_u32(off)))
        } else {
            let mut b = [0u8; 4];
            self.mem.read_bytes(off, &mut b);
            Ok(u32::from_le_bytes(b))
        }
    }

    /// Stores a little-endian u32. Aligned stores are atomic with release
    /// ordering, so a descriptor's other words written before it are visible
    /// to whoever sees its ownership change.
    pub fn write_u32(&self, gpa: u64, v: u32) -> Result<(), OutOfRange> {
        let off = self.range(gpa, 4)?;
        if off % 4 == 0 {
            self.mem.store_u32(off, v.to_le());
        } else {
            self.mem.write_bytes(off, &v.to_le_bytes());
        }
        Ok(())
    }

    /// Loads a little-endian u16 (byte copy).
    pub fn read_u16(&self, gpa: u64) -> Result<u16, OutOfRange> {
        let mut b = [0u8; 2];
        self.read(gpa, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Stores a little-endian u16 (byte copy).
    pub fn write_u16(&self, gpa: u64, v: u16) -> Result<(), OutOfRange> {
        self.write(gpa, &v.to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::HeapMemory;

    #[test]
    fn accesses_inside_round_trip() {
        let g = GuestMemory::new(HeapMemory::new(64));
        g.write(10, b"abc").unwrap();
        let mut b = [0u8; 3];
        g.read(10, &mut b).unwrap();
        assert_eq!(&b, b"abc");
        g.write_u32(60, 0x1122_3344).unwrap();
        assert_eq!(g.read_u32(60).unwrap(), 0x1122_3344);
        g.write_u32(13, 0xdead_beef).unwrap();
        assert_eq!(g.read_u32(13).unwrap(), 0xdead_beef);
        g.write_u16(62, 0xabcd).unwrap();
        assert_eq!(g.read_u16(62).unwrap(), 0xabcd);
        // Little-endian in memory.
        g.read(60, &mut b[..2]).unwrap();
        assert_eq!(b[..2], [0x44, 0x33]);
    }

    #[test]
    fn accesses_outside_are_errors_not_panics() {
        let g = GuestMemory::new(HeapMemory::new(64));
        assert!(g.read_u32(61).is_err());
        assert!(g.read_u32(64).is_err());
        assert!(g.write_u32(u64::MAX - 1, 0).is_err());
        assert!(g.write(u64::MAX, &[0]).is_err());
        let mut big = [0u8; 65];
        assert!(g.read(0, &mut big).is_err());
        assert!(g.read(u64::from(u32::MAX), &mut [0u8; 4]).is_err());
        let e = g.read_u16(63).unwrap_err();
        assert_eq!(
            e,
            OutOfRange {
                gpa: 63,
                len: 2,
                size: 64
            }
        );
        assert!(g.contains(0, 64) && !g.contains(1, 64));
        // Zero-length accesses at the very end are fine, past it are not.
        assert!(g.read(64, &mut []).is_ok());
        assert!(g.read(65, &mut []).is_err());
    }
}
