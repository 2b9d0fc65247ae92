//! A shared mapping's bytes copied straight into a vhost-user VM's memory
//! (a vm-memory [`VolatileSlice`]), without a private bounce buffer: the
//! driver domain's pool holds a received frame, the VM's buffer takes it.

use crate::Mapping;
use abi::mem::MemError;
use vm_memory::bitmap::BitmapSlice;
use vm_memory::VolatileSlice;

impl Mapping {
    /// Copies `dst.len()` bytes of this mapping at `off` into `dst`. The
    /// range is checked first; out of bounds copies nothing.
    pub fn copy_to_volatile<B: BitmapSlice>(
        &self,
        off: usize,
        dst: &VolatileSlice<'_, B>,
    ) -> Result<(), MemError> {
        let p = self.range(off, dst.len())?;
        // SAFETY: `p` and the `dst.len()` bytes after it lie inside this live
        // mapping (checked just above), which outlives the slice made here;
        // the slice is only read from (copy_to_volatile_slice copies it into
        // `dst` with memmove), so a read-only mapping is never written, and
        // a peer writing the same bytes meanwhile can only tear them, which
        // the VM's consumer validates like any received frame.
        let src = unsafe { VolatileSlice::new(p, dst.len()) };
        src.copy_to_volatile_slice(dst.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Mapping, Memfd};
    use abi::SharedMemory;
    use std::os::fd::AsFd;
    use vm_memory::VolatileSlice;

    #[test]
    fn copies_the_range_and_refuses_one_outside() {
        let fd = Memfd::create("copy-to-volatile", 4096, false).unwrap();
        let m = Mapping::new(fd.as_fd(), 0, 4096, true).unwrap();
        m.write_bytes(100, b"payload");
        let mut buf = [0u8; 7];
        let dst = VolatileSlice::from(&mut buf[..]);
        m.copy_to_volatile(100, &dst).unwrap();
        assert_eq!(&buf, b"payload");
        let mut big = [0u8; 16];
        let dst = VolatileSlice::from(&mut big[..]);
        assert!(m.copy_to_volatile(4090, &dst).is_err());
        assert_eq!(big, [0u8; 16]);
    }
}
