//! Xen's I/O request, `ioreq_t` (`public/hvm/ioreq.h`): what an HVM guest's
//! trapped port access becomes on its way from the hypervisor to the device
//! model (Zhang & Dong §2.1, §2.2), and the slot's state machine
//!
//! ```text
//! NONE --(hv writes the request)--> READY --(DM takes it)--> INPROCESS
//!   ^                                                            |
//!   +--(hv consumes the answer)-- RESP_READY <--(DM answers)-----+
//! ```
//!
//! Layout (32 bytes, x86-64): `addr` u64 at 0, `data` u64 at 8, `count` u32
//! at 16, `size` u32 at 20, `vp_eport` u32 at 24, `_pad0` u16 at 28, then one
//! byte of bit fields at 30 (`state`:4, `data_is_ptr`:1, `dir`:1, `df`:1,
//! `_pad1`:1, from bit 0 up, as GCC packs them) and `type` u8 at 31. The
//! words at 28 (pad, flags, type) are published together with one release
//! store, so a reader's acquire load of that word sees the whole request.
//!
//! [`Ioreq`] is the owned, decoded form; it knows nothing of who may write
//! the slot. Reading and validating a slot another party writes is
//! `hypercall::ioreq`'s job.

use crate::SharedMemory;

/// Width of one port access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoWidth {
    /// `inb`/`outb`.
    Byte,
    /// `inw`/`outw`.
    Word,
    /// `inl`/`outl`.
    Dword,
}

impl IoWidth {
    /// Size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            IoWidth::Byte => 1,
            IoWidth::Word => 2,
            IoWidth::Dword => 4,
        }
    }

    /// All ones at this width: what a read of nothing returns (the ISA/PCI
    /// bus floats high).
    pub fn all_ones(self) -> u32 {
        match self {
            IoWidth::Byte => 0xff,
            IoWidth::Word => 0xffff,
            IoWidth::Dword => 0xffff_ffff,
        }
    }
}

/// `sizeof(ioreq_t)`.
pub const SIZE: usize = 32;
/// `offsetof(ioreq_t, addr)`.
pub const ADDR: usize = 0;
/// `offsetof(ioreq_t, data)`.
pub const DATA: usize = 8;
/// `offsetof(ioreq_t, count)`.
pub const COUNT: usize = 16;
/// `offsetof(ioreq_t, size)`.
pub const SIZE_OFF: usize = 20;
/// `offsetof(ioreq_t, vp_eport)`.
pub const VP_EPORT: usize = 24;
/// The 4-byte word holding `_pad0`, the bit-field byte and `type`.
pub const CTRL_WORD: usize = 28;
/// The bit-field byte (`state`, `data_is_ptr`, `dir`, `df`).
pub const FLAGS_BYTE: usize = 30;
/// `offsetof(ioreq_t, type)`.
pub const TYPE: usize = 31;

/// `STATE_IOREQ_NONE`: the slot is free.
pub const STATE_IOREQ_NONE: u8 = 0;
/// `STATE_IOREQ_READY`: a request waits for the device model.
pub const STATE_IOREQ_READY: u8 = 1;
/// `STATE_IOREQ_INPROCESS`: the device model is handling it.
pub const STATE_IOREQ_INPROCESS: u8 = 2;
/// `STATE_IORESP_READY`: the answer waits for the hypervisor.
pub const STATE_IORESP_READY: u8 = 3;

/// `IOREQ_READ` (`dir`).
pub const IOREQ_READ: u8 = 1;
/// `IOREQ_WRITE` (`dir`).
pub const IOREQ_WRITE: u8 = 0;

/// `IOREQ_TYPE_PIO`: port I/O.
pub const IOREQ_TYPE_PIO: u8 = 0;
/// `IOREQ_TYPE_COPY`: MMIO.
pub const IOREQ_TYPE_COPY: u8 = 1;
/// `IOREQ_TYPE_PCI_CONFIG`.
pub const IOREQ_TYPE_PCI_CONFIG: u8 = 2;
/// `IOREQ_TYPE_TIMEOFFSET`.
pub const IOREQ_TYPE_TIMEOFFSET: u8 = 7;
/// `IOREQ_TYPE_INVALIDATE` (mapcache).
pub const IOREQ_TYPE_INVALIDATE: u8 = 8;

/// Bit positions inside the bit-field byte.
pub mod bits {
    /// `state`: bits 0–3.
    pub const STATE_MASK: u8 = 0x0f;
    /// `data_is_ptr`.
    pub const DATA_IS_PTR: u8 = 1 << 4;
    /// `dir` (1 = read).
    pub const DIR: u8 = 1 << 5;
    /// `df` (the direction flag of a string instruction).
    pub const DF: u8 = 1 << 6;
    /// `_pad1`.
    pub const PAD1: u8 = 1 << 7;
}

/// One I/O request, decoded (`ioreq_t` with its bit fields unpacked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ioreq {
    /// Port number (PIO) or guest-physical address.
    pub addr: u64,
    /// The value written, or read back.
    pub data: u64,
    /// Repetitions (`rep ins/outs`).
    pub count: u32,
    /// Access size in bytes.
    pub size: u32,
    /// Event channel of the vcpu (unused by splitnet: the doorbells are fds).
    pub vp_eport: u32,
    /// `_pad0`.
    pub pad0: u16,
    /// One of the `STATE_*` values (4 bits).
    pub state: u8,
    /// `data` is a guest-physical pointer to the data.
    pub data_is_ptr: bool,
    /// [`IOREQ_READ`] or [`IOREQ_WRITE`].
    pub dir: u8,
    /// String direction flag.
    pub df: bool,
    /// `_pad1`.
    pub pad1: bool,
    /// One of the `IOREQ_TYPE_*` values.
    pub ty: u8,
}

impl Ioreq {
    /// The bit-field byte.
    pub fn flags(&self) -> u8 {
        (self.state & bits::STATE_MASK)
            | if self.data_is_ptr {
                bits::DATA_IS_PTR
            } else {
                0
            }
            | if self.dir & 1 != 0 { bits::DIR } else { 0 }
            | if self.df { bits::DF } else { 0 }
            | if self.pad1 { bits::PAD1 } else { 0 }
    }

    /// The word at [`CTRL_WORD`]: `_pad0`, flags and type, little-endian.
    pub fn ctrl_word(&self) -> u32 {
        u32::from(self.pad0) | u32::from(self.flags()) << 16 | u32::from(self.ty) << 24
    }

    /// Decodes the control word's fields into `self`.
    pub fn set_ctrl_word(&mut self, w: u32) {
        let flags = (w >> 16) as u8;
        self.pad0 = w as u16;
        self.state = flags & bits::STATE_MASK;
        self.data_is_ptr = flags & bits::DATA_IS_PTR != 0;
        self.dir = u8::from(flags & bits::DIR != 0);
        self.df = flags & bits::DF != 0;
        self.pad1 = flags & bits::PAD1 != 0;
        self.ty = (w >> 24) as u8;
    }

    /// The state held in a control word.
    pub fn state_of(ctrl_word: u32) -> u8 {
        (ctrl_word >> 16) as u8 & bits::STATE_MASK
    }

    /// Reads the slot at `off`: the control word first (acquire), then the
    /// rest. The caller validates what it got; another party may be writing.
    pub fn load(mem: &dyn SharedMemory, off: usize) -> Ioreq {
        let mut r = Ioreq::default();
        r.set_ctrl_word(mem.load_u32(off + CTRL_WORD));
        let mut b = [0u8; 24];
        mem.read_bytes(off, &mut b);
        r.addr = u64::from_le_bytes(b[0..8].try_into().unwrap_or_default());
        r.data = u64::from_le_bytes(b[8..16].try_into().unwrap_or_default());
        r.count = u32::from_le_bytes(b[16..20].try_into().unwrap_or_default());
        r.size = u32::from_le_bytes(b[20..24].try_into().unwrap_or_default());
        r.vp_eport = mem.read_u32(off + VP_EPORT);
        r
    }

    /// Writes the slot at `off`: every field, then the control word with a
    /// release store, so the state changes last.
    pub fn store(&self, mem: &dyn SharedMemory, off: usize) {
        let mut b = [0u8; 28];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.data.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..28].copy_from_slice(&self.vp_eport.to_le_bytes());
        mem.write_bytes(off, &b);
        mem.store_u32(off + CTRL_WORD, self.ctrl_word());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HeapMemory;

    #[test]
    fn round_trips_through_memory_and_packs_bits_like_gcc() {
        let r = Ioreq {
            addr: 0x22e,
            data: 0xdead_beef,
            count: 1,
            size: 2,
            vp_eport: 7,
            pad0: 0,
            state: STATE_IOREQ_READY,
            data_is_ptr: false,
            dir: IOREQ_READ,
            df: true,
            pad1: false,
            ty: IOREQ_TYPE_PIO,
        };
        let m = HeapMemory::new(64);
        r.store(&m, 32);
        assert_eq!(Ioreq::load(&m, 32), r);
        let mut flags = [0u8; 1];
        m.read_bytes(32 + FLAGS_BYTE, &mut flags);
        assert_eq!(flags[0], 1 | bits::DIR | bits::DF);
        assert_eq!(Ioreq::state_of(r.ctrl_word()), STATE_IOREQ_READY);
    }
}
