//! The layout of an event channel's shared page (pending and mask words per
//! end, and the channel state), which both ends and hv read and write. hv's
//! side of event channels is in `splitnet-hv`.

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
