//! x86 port I/O: what a guest's IN and OUT instructions reach.
//!
//! A guest driver is written against [`PortIo`]. In process, the port space
//! is a [`crate::Machine`] that calls the devices directly; in the hosted and
//! HVM architectures every access is a trap, handled in the VMM or sent to
//! the VMApp or device model (Sugerman §2.1, Zhang & Dong §2.2), so counting
//! accesses ([`CountingIo`]) is counting traps.

pub use abi::ioreq::IoWidth;

/// A port-I/O space: the guest side of IN and OUT.
pub trait PortIo {
    /// An IN of `width` at `port`; the value is zero-extended.
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32;
    /// An OUT of `width` at `port`; bits above the width are ignored.
    fn port_out(&mut self, port: u16, width: IoWidth, value: u32);

    /// `inb`.
    fn inb(&mut self, port: u16) -> u8 {
        self.port_in(port, IoWidth::Byte) as u8
    }
    /// `inw`.
    fn inw(&mut self, port: u16) -> u16 {
        self.port_in(port, IoWidth::Word) as u16
    }
    /// `inl`.
    fn inl(&mut self, port: u16) -> u32 {
        self.port_in(port, IoWidth::Dword)
    }
    /// `outb`.
    fn outb(&mut self, port: u16, v: u8) {
        self.port_out(port, IoWidth::Byte, u32::from(v))
    }
    /// `outw`.
    fn outw(&mut self, port: u16, v: u16) {
        self.port_out(port, IoWidth::Word, u32::from(v))
    }
    /// `outl`.
    fn outl(&mut self, port: u16, v: u32) {
        self.port_out(port, IoWidth::Dword, v)
    }
}

impl<P: PortIo + ?Sized> PortIo for &mut P {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        (**self).port_in(port, width)
    }
    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        (**self).port_out(port, width, value)
    }
}

/// The master and slave 8259A ports.
pub const PIC_PORTS: [u16; 4] = [0x20, 0x21, 0xa0, 0xa1];

/// Port accesses by device and kind, as [`CountingIo`] counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounts {
    /// Reads of the NIC's ports.
    pub nic_reads: u64,
    /// Writes of the NIC's ports.
    pub nic_writes: u64,
    /// Of the NIC's accesses, those to the address port (RAP): the ones
    /// Sugerman §3.3 handles in the VMM as plain memory.
    pub nic_rap: u64,
    /// Reads of the PICs' ports.
    pub pic_reads: u64,
    /// Writes of the PICs' ports.
    pub pic_writes: u64,
    /// Accesses to any other port.
    pub other: u64,
}

impl PortCounts {
    /// All NIC accesses.
    pub fn nic(&self) -> u64 {
        self.nic_reads + self.nic_writes
    }

    /// All PIC accesses.
    pub fn pic(&self) -> u64 {
        self.pic_reads + self.pic_writes
    }

    /// The counts accumulated since `earlier` (a snapshot of the same counter).
    pub fn since(&self, earlier: &PortCounts) -> PortCounts {
        PortCounts {
            nic_reads: self.nic_reads - earlier.nic_reads,
            nic_writes: self.nic_writes - earlier.nic_writes,
            nic_rap: self.nic_rap - earlier.nic_rap,
            pic_reads: self.pic_reads - earlier.pic_reads,
            pic_writes: self.pic_writes - earlier.pic_writes,
            other: self.other - earlier.other,
        }
    }
}

/// A [`PortIo`] that counts what passes through it: NIC accesses (a port
/// range), PIC accesses, and the rest.
#[derive(Debug)]
pub struct CountingIo<P> {
    inner: P,
    nic_base: u16,
    nic_len: u16,
    rap_offset: u16,
    counts: PortCounts,
}

impl<P: PortIo> CountingIo<P> {
    /// Counts accesses through `inner`; the NIC's ports are
    /// `nic_base..nic_base + nic_len`, its address port at `rap_offset`.
    pub fn new(inner: P, nic_base: u16, nic_len: u16, rap_offset: u16) -> Self {
        CountingIo {
            inner,
            nic_base,
            nic_len,
            rap_offset,
            counts: PortCounts::default(),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> PortCounts {
        self.counts
    }

    /// The wrapped port space.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped port space, mutably (accesses made through it directly
    /// are not counted).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    fn count(&mut self, port: u16, write: bool) {
        let c = &mut self.counts;
        if port.wrapping_sub(self.nic_base) < self.nic_len {
            if write {
                c.nic_writes += 1;
            } else {
                c.nic_reads += 1;
            }
            if port == self.nic_base.wrapping_add(self.rap_offset) {
                c.nic_rap += 1;
            }
        } else if PIC_PORTS.contains(&port) {
            if write {
                c.pic_writes += 1;
            } else {
                c.pic_reads += 1;
            }
        } else {
            c.other += 1;
        }
    }
}

impl<P: PortIo> PortIo for CountingIo<P> {
    fn port_in(&mut self, port: u16, width: IoWidth) -> u32 {
        self.count(port, false);
        self.inner.port_in(port, width)
    }
    fn port_out(&mut self, port: u16, width: IoWidth, value: u32) {
        self.count(port, true);
        self.inner.port_out(port, width, value)
    }
}
