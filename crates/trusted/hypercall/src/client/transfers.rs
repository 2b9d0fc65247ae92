//! Page flips a batch at a time: GNTTABOP_transfer over the shared batch
//! page, one hypercall per receive batch, as Xen 2.0's netback flipped a
//! batch of pages in one multicall (Menon 2006 §2).

use super::HvClient;
use crate::batch::{self, BatchKind};
use crate::error::{err, ErrorKind, HvResult};
use crate::proto::DomId;
use abi::grant::{GrantTransfer, GrantTransferView};
use abi::SharedMemory;

/// One page flip of a batch: own `frame`, into the slot the destination's
/// accept-transfer grant `gref` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flip {
    pub frame: u32,
    pub gref: u32,
}

impl HvClient {
    /// Most flips one batch may carry.
    pub fn max_transfers(&self) -> usize {
        BatchKind::Transfer.max_ops(self.welcome.batch_pages)
    }

    /// Gives each of `flips`' frames to `dest` (GNTTABOP_transfer), in one
    /// batch; writes each flip's GNTST_* status to `statuses` (cleared
    /// first, so a data path reuses it). At most [`Self::max_transfers`].
    pub fn transfer_batch(
        &mut self,
        dest: DomId,
        flips: &[Flip],
        statuses: &mut Vec<i16>,
    ) -> HvResult<()> {
        statuses.clear();
        if flips.len() > self.max_transfers() {
            return err(
                ErrorKind::Invalid,
                format!("at most {} transfers per batch", self.max_transfers()),
            );
        }
        let at = |i: usize| batch::OPS_OFF + i * GrantTransfer::SIZE;
        let mut rec = [0u8; GrantTransfer::SIZE];
        for (i, f) in flips.iter().enumerate() {
            let op = GrantTransfer {
                mfn: u64::from(f.frame),
                domid: dest,
                gref: f.gref,
                status: 0,
            };
            let mut v = GrantTransferView::new_checked(&mut rec[..])
                .map_err(|e| crate::error::HvError::internal("encoding a transfer", e))?;
            op.emit(&mut v);
            self.batch.write_bytes(at(i), &rec);
        }
        self.kind_raw_batch(BatchKind::Transfer, flips.len())?;
        let st = BatchKind::Transfer.status_in_op();
        statuses.extend((0..flips.len()).map(|i| self.batch.read_u16(at(i) + st) as i16));
        Ok(())
    }
}
