//! The shared ring (`abi::ring`, Xen `io/ring.h`) with event-index
//! suppression: a producer publishes with `RING_PUSH_*_AND_CHECK_NOTIFY`
//! and rings only when asked; a consumer drains, then sleeps after
//! `RING_FINAL_CHECK_FOR_*`. Checked in both directions, over the real
//! `FrontRing` and `BackRing`: no lost notification (whatever is published
//! is consumed, or the consumer's doorbell is left ringing) and no double
//! consume (each entry once, in order).

use abi::ring::{BackRing, FrontRing, RingEntry, PAGE_SIZE, RING_HDR_SIZE};
use abi::Error;
use loom::thread;
use splitnet_model::{check, Bell, Flavor, LoomMemory};
use std::sync::Arc;

/// Entries each model sends: the second one is where a lost notification
/// shows (the first one always notifies: the initial event index asks).
const SENT: u32 = 2;

/// A 4-byte entry: its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seq(u32);

impl RingEntry for Seq {
    const SIZE: usize = 4;
    fn decode(b: &[u8]) -> Self {
        Seq(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn encode(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.0.to_ne_bytes());
    }
}

type Mem = Arc<LoomMemory>;

fn ring_memory(flavor: Flavor) -> Mem {
    let backed = RING_HDR_SIZE + Seq::SIZE * SENT as usize;
    Arc::new(LoomMemory::words(PAGE_SIZE, backed, flavor))
}

/// A consumer's loop, as netback's and netfront's: wake (take the doorbell's
/// rings), consume everything, and sleep once the final check finds nothing.
/// Returns how many entries it consumed, checking each comes once, in order.
fn consume<R>(
    bell: &Bell,
    ring: &mut R,
    next: fn(&mut R) -> Result<Option<Seq>, Error>,
    final_check: fn(&mut R) -> Result<bool, Error>,
) -> u32 {
    let mut got = 0;
    loop {
        bell.drain();
        while let Some(Seq(n)) = next(ring).expect("the ring stays consistent") {
            got += 1;
            assert_eq!(n, got, "entry consumed twice or out of order");
        }
        if !final_check(ring).expect("the ring stays consistent") {
            return got;
        }
    }
}

/// Runs `produce` on a thread of its own (it rings the doorbell when the
/// ring says to) against the consumer's loop on this one, and checks that
/// the consumer goes to sleep with everything consumed or with a ring left.
fn exchange<R>(
    produce: impl FnOnce(&Bell) + Send + 'static,
    ring: &mut R,
    next: fn(&mut R) -> Result<Option<Seq>, Error>,
    final_check: fn(&mut R) -> Result<bool, Error>,
) {
    let bell = Arc::new(Bell::new());
    let producer = {
        let bell = bell.clone();
        thread::spawn(move || produce(&bell))
    };
    let got = consume(&bell, ring, next, final_check);
    producer.join().expect("producer");
    assert!(
        got == SENT || bell.rung(),
        "lost notification: the consumer sleeps with {} of {SENT} entries unconsumed and no ring",
        SENT - got
    );
}

/// Front end produces requests, back end consumes them.
fn requests(flavor: Flavor) -> usize {
    check(move || {
        let mem = ring_memory(flavor);
        let mut front = FrontRing::<Mem, Seq, Seq>::init(mem.clone()).expect("a page");
        let mut back = BackRing::<Mem, Seq, Seq>::attach(mem).expect("a page");
        let produce = move |bell: &Bell| {
            for n in 1..=SENT {
                front.push_request(&Seq(n)).expect("room");
                if front.push_requests_and_check_notify() {
                    bell.ring();
                }
            }
        };
        exchange(
            produce,
            &mut back,
            BackRing::next_request,
            BackRing::final_check_for_requests,
        );
    })
}

/// Requests already posted; the back end answers them one by one and the
/// front end consumes the responses.
fn responses(flavor: Flavor) -> usize {
    check(move || {
        let mem = ring_memory(flavor);
        let mut front = FrontRing::<Mem, Seq, Seq>::init(mem.clone()).expect("a page");
        let mut back = BackRing::<Mem, Seq, Seq>::attach(mem).expect("a page");
        for n in 1..=SENT {
            front.push_request(&Seq(n)).expect("room");
        }
        front.push_requests_and_check_notify();
        let produce = move |bell: &Bell| {
            while let Some(req) = back.next_request().expect("posted requests") {
                back.push_response(&req).expect("one per request");
                if back.push_responses_and_check_notify() {
                    bell.ring();
                }
            }
        };
        exchange(
            produce,
            &mut front,
            FrontRing::next_response,
            FrontRing::final_check_for_responses,
        );
    })
}

#[test]
fn requests_are_never_lost_nor_consumed_twice() {
    assert!(requests(Flavor::Fixed) > 1);
}

#[test]
fn responses_are_never_lost_nor_consumed_twice() {
    assert!(responses(Flavor::Fixed) > 1);
}

/// Without the fences in `publish_and_check` and `ask_for_event`, each side
/// can read the other's old index: the producer skips the notification and
/// the consumer sleeps.
#[test]
#[should_panic(expected = "lost notification")]
fn requests_without_fences_lose_a_notification() {
    requests(Flavor::NoFence);
}

#[test]
#[should_panic(expected = "lost notification")]
fn responses_without_fences_lose_a_notification() {
    responses(Flavor::NoFence);
}
