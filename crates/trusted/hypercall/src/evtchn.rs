//! The layout of an event channel's shared page (pending and mask words per
//! end, and the channel state), which both ends and hv read and write, and
//! the steps every party takes on it. hv's side of event channels is in
//! `splitnet-hv`.
//!
//! The steps are generic over [`SharedMemory`] so that the model checker
//! (`crates/model`) runs this very code on its own memory. A notifier sets
//! `pending` and then loads `mask`; an unmasker stores `mask` and then loads
//! `pending`. Each side must see the other's store, or both skip the
//! doorbell and the notification waits forever: a Dekker handshake, so both
//! sides put a full fence between their store and their load (as Xen's
//! `evtchn_set_pending` and `unmask_evtchn` use locked bit operations).

use abi::SharedMemory;

/// Byte offset of end `e`'s pending word.
pub fn pending_off(end: u8) -> usize {
    end as usize * 8
}
/// Byte offset of end `e`'s mask word.
pub fn mask_off(end: u8) -> usize {
    end as usize * 8 + 4
}
/// Byte offset of the channel state word.
pub const STATE_OFF: usize = 16;
/// Channel state: waiting for the remote end to bind.
pub const STATE_UNBOUND: u32 = 1;
/// Channel state: both ends bound.
pub const STATE_BOUND: u32 = 2;
/// Channel state: closed by one end or by hv.
pub const STATE_CLOSED: u32 = 3;

/// The shared-memory step of a send (`EVTCHNOP_send`,
/// `notify_remote_via_evtchn`): sets end `peer`'s pending word; true if it
/// was clear and `peer` is unmasked, so the sender must ring its doorbell.
/// The set is a swap, like Xen's `test_and_set_bit`: every write to a
/// pending word is a read-modify-write, so none lands inside
/// [`take_pending`]'s. A send that finds the word already set rings
/// nothing, as Xen's `evtchn_set_pending` does: the earlier send's ring (or,
/// if it was masked, the receiver's [`unmask`]) still stands, and the
/// receiver takes pending only after draining its doorbell. So a peer that
/// notifies a million times a second costs its receiver one ring per
/// wake-up, not a million datagrams.
pub fn set_pending<M: SharedMemory + ?Sized>(page: &M, peer: u8) -> bool {
    if page.swap_u32(pending_off(peer), 1) != 0 {
        return false;
    }
    page.fence_seqcst();
    page.load_u32(mask_off(peer)) == 0
}

/// Clears end `end`'s pending word and says whether it was set. A swap, so a
/// send landing between the read and the clear is not lost; the plain load
/// first keeps an idle poll from writing the shared line.
pub fn take_pending<M: SharedMemory + ?Sized>(page: &M, end: u8) -> bool {
    let off = pending_off(end);
    page.load_u32(off) != 0 && page.swap_u32(off, 0) != 0
}

/// Suppresses end `end`'s wake-ups; sends still set pending.
pub fn mask<M: SharedMemory + ?Sized>(page: &M, end: u8) {
    page.store_u32(mask_off(end), 1);
}

/// Re-enables end `end`'s wake-ups; true if something is pending, so the
/// caller must deliver the wake-up itself (a send that saw the mask skipped it).
pub fn unmask<M: SharedMemory + ?Sized>(page: &M, end: u8) -> bool {
    page.store_u32(mask_off(end), 0);
    page.fence_seqcst();
    page.load_u32(pending_off(end)) != 0
}
