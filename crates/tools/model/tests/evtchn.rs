//! Event channels (`hypercall::evtchn`): a sender sets the receiver's
//! pending word and rings its doorbell unless masked (`EventChannel::notify`,
//! hv's `Channel::send_from`); the receiver masks, takes pending, works,
//! and unmasks, ringing its own doorbell if something is pending
//! (`EventChannel::{mask, take_pending, unmask}`). No lost wake-up: the
//! receiver has seen the sender's work, or its doorbell is left ringing.

use abi::SharedMemory;
use hypercall::evtchn::{self, pending_off};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;
use splitnet_model::{check, Bell, Flavor, LoomMemory};
use std::sync::Arc;

/// The receiving end.
const END: u8 = 1;

/// One send against one round of the receiver (drain its doorbell, mask,
/// take pending, unmask), with `pending` already set by an earlier send
/// (which rang, as an unmasked receiver's sends do) or not. A send that
/// finds pending set rings nothing: the receiver drains before it takes.
fn model(flavor: Flavor, pending: bool) -> usize {
    check(move || {
        let page = Arc::new(LoomMemory::words(64, 24, flavor));
        let bell = Arc::new(Bell::new());
        if pending {
            page.store_u32(pending_off(END), 1);
            bell.ring();
        }
        // What the sender published before notifying (a ring index, say).
        let work = Arc::new(AtomicU32::new(0));
        let sender = {
            let (page, bell, work) = (page.clone(), bell.clone(), work.clone());
            thread::spawn(move || {
                work.store(1, Ordering::Relaxed);
                if evtchn::set_pending(&*page, END) {
                    bell.ring();
                }
            })
        };
        bell.drain();
        evtchn::mask(&*page, END);
        let seen = evtchn::take_pending(&*page, END) && work.load(Ordering::Relaxed) == 1;
        if evtchn::unmask(&*page, END) {
            bell.ring();
        }
        sender.join().expect("sender");
        assert!(
            seen || bell.rung(),
            "lost wake-up: the receiver sleeps without the sender's work and with no ring"
        );
    })
}

#[test]
fn a_send_always_wakes_the_receiver() {
    assert!(model(Flavor::Fixed, false) > 1);
    assert!(model(Flavor::Fixed, true) > 1);
}

/// Before the fix: notify stored pending and loaded mask, unmask stored mask
/// and loaded pending, with no fence between; each can read the other's old
/// word, and neither rings.
#[test]
#[should_panic(expected = "lost wake-up")]
fn without_fences_notify_and_unmask_lose_a_wake_up() {
    model(Flavor::NoFence, false);
}

/// Before the fix: take_pending loaded pending and then stored zero; a send
/// landing in between is wiped out with the earlier one it was taken for.
#[test]
#[should_panic(expected = "lost wake-up")]
fn take_pending_as_load_then_store_loses_a_wake_up() {
    model(Flavor::SplitSwap, true);
}

/// Both at once: `notify`, `unmask` and `take_pending` exactly as they were.
#[test]
#[should_panic(expected = "lost wake-up")]
fn the_code_before_the_fix_loses_a_wake_up() {
    model(Flavor::BeforeFix, false);
}
