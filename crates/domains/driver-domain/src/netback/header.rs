//! Xen's I/O channel on TX under Xen's grants (Menon 2006 §4.1,
//! `tx_mode = "header"`): no hypercall per packet, batch or page.
//!
//! In the paper the guest hands netback each packet's header through a
//! header channel and its fragments by address; netback copies the small
//! header, decides from it, and the NIC reads the fragments by DMA: "the
//! cost of two page remaps per transmit operation is replaced in the
//! common case by the cost of copying a small header". Here netback reads
//! each slot's grant entry in the guest's table itself (a read-only view
//! hv handed it at connect, [`hypercall::gnttab_view`]), checks the frame
//! against the read-only window on the guest's pool, copies the frame's
//! first [`HEAD`](super::grants::HEAD) bytes out of the window as its headers, and the port
//! gathers the payload from the window.
//!
//! Nothing is pinned, as nothing was in Xen's I/O channel: a guest that
//! ends a grant, or rewrites its page, while the frame is being sent can
//! spoil only that frame's payload. What is sent as headers is the copy
//! netback checked, and the window reaches the guest's pool alone.

use super::grants::{window_seg, Reach, TxGrants};
use super::{Netback, TxPacket};
use abi::netif::XEN_NETIF_NR_SLOTS_MIN;
use hypercall::HvClient;
use sys::Mapping;

/// Xen's I/O channel as a [`TxGrants`] mechanism: stateless, as each
/// packet's grants are read while it is reached.
pub(super) struct HeaderTx;

impl TxGrants for HeaderTx {
    /// No hypercall, so no staging frames bound the batch.
    fn room(&self, _slots: usize) -> bool {
        true
    }

    /// Reads each slot's grant, checks its frame and range against the
    /// window, and copies the frame's headers into held packet `k`.
    fn reach(&mut self, nb: &mut Netback, _hv: &mut HvClient, p: &TxPacket, k: usize) -> Reach {
        let (Some(table), Some(window)) = (nb.gnttab.as_ref(), nb.window.as_ref()) else {
            return Err("grant_absent");
        };
        let mut segs = [(0usize, 0usize); XEN_NETIF_NR_SLOTS_MIN];
        let mut read = 0;
        let reached = p.slots().iter().enumerate().try_for_each(|(i, s)| {
            read += 1;
            let frame = table.readable(s.gref)?;
            segs[i] = window_seg(window, frame, s)?;
            Ok(())
        });
        // Every entry read counts, a refused packet's too.
        nb.counters.grant("table_read", read);
        reached?;
        nb.tx_held[k].fill_from(window, p, &segs[..p.count]);
        Ok(())
    }

    fn pool<'a>(&self, nb: &'a Netback) -> Option<&'a Mapping> {
        nb.window.as_ref()
    }
}
