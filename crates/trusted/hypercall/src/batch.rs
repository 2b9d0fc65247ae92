//! The shared-memory hypercall path for frequent operations (grant-copy,
//! map, unmap and transfer batches): the domain fills a page with
//! `gnttab_copy`, `gnttab_map_grant_ref`, `gnttab_unmap_grant_ref` or
//! `gnttab_transfer` records and rings a
//! doorbell; hv validates and runs them and rings back. No message encoding,
//! no socket; the Menon 2006 §4 point that per-packet hypervisor entry costs
//! must be amortized over batches, as Linux netback batches its
//! GNTTABOP_map_grant_ref calls over a ring batch, and Xen 2.0's netback
//! its page flips (one multicall per receive batch).

use abi::grant::{layout, GrantCopy, GrantMap, GrantTransfer, GrantUnmap};
use abi::SharedMemory;
use sys::PAGE_SIZE;

/// Sequence number the domain bumps to submit.
pub const SEQ_OFF: usize = 0;
/// Number of ops in the batch.
pub const COUNT_OFF: usize = 4;
/// Sequence number hv writes when the batch is done.
pub const DONE_OFF: usize = 8;
/// 0, or a negative errno when the batch as a whole was refused.
pub const RESULT_OFF: usize = 12;
/// What the batch asks ([`BatchKind`]); 0, a plain copy batch, in a
/// fresh page.
pub const KIND_OFF: usize = 16;
/// The core the caller was running on when it rang ([`NO_CPU`] if it
/// could not say): a hint that hv serves the batch there, as Xen ran a
/// hypercall on the calling CPU. hv checks it against the cores it may use.
pub const CPU_OFF: usize = 20;
/// [`CPU_OFF`]'s value for no hint.
pub const NO_CPU: u32 = u32::MAX;
/// Where the ops start.
pub const OPS_OFF: usize = 64;
/// Where, inside one op of a hold batch, hv writes the frame it pinned:
/// the upper half of `source.u`, which a grant reference leaves unused.
pub const HELD_FRAME_IN_OP: usize = 4;

/// What a batch's ops are for: grant copies (Xen's GNTTABOP_copy), the
/// I/O-channel optimization's holds under hv-copy (each a copy of a
/// header part whose source grant stays pinned) and their releases, or
/// grant maps and unmaps (GNTTABOP_map_grant_ref / unmap_grant_ref, the
/// Xen 2.0 transmit path, Menon 2006 §2), or page flips (GNTTABOP_transfer,
/// its receive path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    Copy = 0,
    Hold = 1,
    Release = 2,
    Map = 3,
    Unmap = 4,
    Transfer = 5,
}

impl BatchKind {
    /// The kind a page names; `None` for an unknown one.
    pub fn from_raw(raw: u32) -> Option<BatchKind> {
        match raw {
            0 => Some(BatchKind::Copy),
            1 => Some(BatchKind::Hold),
            2 => Some(BatchKind::Release),
            3 => Some(BatchKind::Map),
            4 => Some(BatchKind::Unmap),
            5 => Some(BatchKind::Transfer),
            _ => None,
        }
    }

    /// Bytes of one op record of this kind.
    pub fn op_size(self) -> usize {
        match self {
            BatchKind::Copy | BatchKind::Hold | BatchKind::Release => GrantCopy::SIZE,
            BatchKind::Map => GrantMap::SIZE,
            BatchKind::Unmap => GrantUnmap::SIZE,
            BatchKind::Transfer => GrantTransfer::SIZE,
        }
    }

    /// Offset of the status field inside one op record of this kind.
    pub fn status_in_op(self) -> usize {
        match self {
            BatchKind::Copy | BatchKind::Hold | BatchKind::Release => STATUS_IN_OP,
            BatchKind::Map => layout::gnttab_map_grant_ref::STATUS,
            BatchKind::Unmap => layout::gnttab_unmap_grant_ref::STATUS,
            BatchKind::Transfer => layout::gnttab_transfer::STATUS,
        }
    }

    /// Most ops of this kind one batch may hold in `pages` pages.
    pub fn max_ops(self, pages: u32) -> usize {
        (pages as usize * PAGE_SIZE - OPS_OFF) / self.op_size()
    }
}
/// Offset of the status field inside one `gnttab_copy`.
pub const STATUS_IN_OP: usize = 36;

/// Most grant copies (or holds, or releases) one batch may hold in `pages` pages.
pub fn max_ops(pages: u32) -> usize {
    BatchKind::Copy.max_ops(pages)
}

/// A batch as hv reads it: copied out of shared memory once, into a
/// buffer its reader keeps from one batch to the next.
pub struct Submitted<'a> {
    pub seq: u32,
    pub kind: BatchKind,
    pub ops: &'a mut [u8],
}

/// Reads a submitted batch into `buf`, refusing a count the page cannot
/// hold. `buf` grows to the largest batch read and is reused, so that a
/// batch allocates nothing once the first of its size has been read.
pub fn read_batch<'a>(
    page: &dyn SharedMemory,
    pages: u32,
    buf: &'a mut Vec<u8>,
) -> Result<Submitted<'a>, (u32, String)> {
    let seq = page.load_u32(SEQ_OFF);
    let count = page.read_u32(COUNT_OFF) as usize;
    let Some(kind) = BatchKind::from_raw(page.read_u32(KIND_OFF)) else {
        return Err((seq, "unknown batch kind".to_string()));
    };
    // What `pages` can hold, and never more than the memory at hand.
    let size = kind.op_size();
    let room = kind
        .max_ops(pages)
        .min(page.len().saturating_sub(OPS_OFF) / size);
    if count > room {
        return Err((
            seq,
            format!("batch of {count} {kind:?} ops exceeds the {room} that fit"),
        ));
    }
    let len = count * size;
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let ops = &mut buf[..len];
    page.read_bytes(OPS_OFF, ops);
    Ok(Submitted { seq, kind, ops })
}

/// Publishes, for a hold batch, the frame hv wrote into each op of `ops`
/// (its copy of the batch) back into the page, where the domain reads it.
pub fn publish_held_frames(page: &dyn SharedMemory, ops: &[u8]) {
    for (i, op) in ops.chunks_exact(GrantCopy::SIZE).enumerate() {
        let at = HELD_FRAME_IN_OP;
        page.write_bytes(OPS_OFF + i * GrantCopy::SIZE + at, &op[at..at + 4]);
    }
}

/// Publishes, for a map batch, each op of `ops` (hv's copy of the batch,
/// its OUT fields filled) back into the page, where the domain reads them.
pub fn publish_ops(page: &dyn SharedMemory, ops: &[u8]) {
    page.write_bytes(OPS_OFF, ops);
}

/// Publishes the outcome of batch `seq`, whose ops are of `kind`.
pub fn complete(page: &dyn SharedMemory, seq: u32, kind: BatchKind, result: i32, statuses: &[i16]) {
    let (size, at) = (kind.op_size(), kind.status_in_op());
    for (i, s) in statuses.iter().enumerate() {
        page.write_u16(OPS_OFF + i * size + at, *s as u16);
    }
    page.write_u32(RESULT_OFF, result as u32);
    page.store_u32(DONE_OFF, seq);
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::HeapMemory;

    /// A page holding batch `seq` of `count` copy ops, op `i`'s bytes
    /// `i + 1` (the first three: a count past them is one to refuse).
    fn page(seq: u32, count: usize) -> HeapMemory {
        let mem = HeapMemory::new(PAGE_SIZE);
        mem.write_u32(SEQ_OFF, seq);
        mem.write_u32(COUNT_OFF, count as u32);
        mem.write_u32(KIND_OFF, BatchKind::Copy as u32);
        for i in 0..count.min(3) {
            mem.write_bytes(
                OPS_OFF + i * GrantCopy::SIZE,
                &[i as u8 + 1; GrantCopy::SIZE],
            );
        }
        mem
    }

    #[test]
    fn a_batch_is_read_into_the_kept_buffer_at_its_own_length() {
        let mut buf = Vec::new();
        let b = read_batch(&page(7, 3), 1, &mut buf).unwrap();
        assert_eq!(
            (b.seq, b.kind, b.ops.len()),
            (7, BatchKind::Copy, 3 * GrantCopy::SIZE)
        );
        assert!(b
            .ops
            .chunks(GrantCopy::SIZE)
            .enumerate()
            .all(|(i, op)| op.iter().all(|&x| x == i as u8 + 1)));
        // A smaller batch next: only its own ops, nothing of the one before.
        let b = read_batch(&page(8, 1), 1, &mut buf).unwrap();
        assert_eq!((b.seq, b.ops.len()), (8, GrantCopy::SIZE));
        assert!(b.ops.iter().all(|&x| x == 1));
        assert_eq!(
            buf.len(),
            3 * GrantCopy::SIZE,
            "kept at the largest, not shrunk"
        );
        // Refused as before: more ops than the page holds, an unknown kind.
        let e = read_batch(&page(9, 1000), 1, &mut buf).err().unwrap();
        assert!(e.0 == 9 && e.1.contains("exceeds"), "{e:?}");
        let p = page(10, 1);
        p.write_u32(KIND_OFF, 99);
        assert_eq!(
            read_batch(&p, 1, &mut buf).err().unwrap().1,
            "unknown batch kind"
        );
    }
}
