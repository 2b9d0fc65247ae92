//! NGM use counts against revocation (Ram thesis 4.4, 4.6.2-4.6.3;
//! `hypercall::ngm`): the driver domain takes a use of a grant and reads its
//! entry (`acquire_use`, as `NgmView::acquire`), hv withdraws the entry and
//! reads the count (`withdraw`, as `NgmTable::revoke`). A revocation never
//! succeeds while a use is in flight, and a count never goes below zero.

use abi::SharedMemory;
use hypercall::ngm::{self, NgmEntry, NGM_ENTRY_SIZE, NGM_STATUS_SIZE, NGM_VALID, NGM_WRITABLE};
use hypercall::ngm_client::{acquire_use, Grantee};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;
use splitnet_model::{check, Flavor, LoomMemory};
use std::sync::Arc;

const GREF: u32 = 0;
const DRIVER: Grantee = Grantee {
    me: 1,
    pool_frames: 1,
};
const ENTRY: NgmEntry = NgmEntry {
    frame: 0,
    flags: NGM_VALID | NGM_WRITABLE,
    grantee: 1,
};
/// What the granted frame holds while granted, and after the guest reuses it.
const GRANTED: u32 = 1;
const REUSED: u32 = 2;

/// The two sub-tables with one grant in them.
fn tables(flavor: Flavor) -> (Arc<LoomMemory>, Arc<LoomMemory>) {
    let translation = LoomMemory::wide(NGM_ENTRY_SIZE, NGM_ENTRY_SIZE, flavor);
    translation.store_u64_seqcst(0, ENTRY.encode());
    let status = LoomMemory::words(NGM_STATUS_SIZE, NGM_STATUS_SIZE, flavor);
    (Arc::new(translation), Arc::new(status))
}

/// A driver domain's use of the frame against hv's revocation and the
/// guest's reuse of the frame once the revocation stands.
fn use_against_revoke(flavor: Flavor) -> usize {
    check(move || {
        let (translation, status) = tables(flavor);
        let frame = Arc::new(AtomicU32::new(GRANTED));
        let driver = {
            let (t, s, frame) = (translation.clone(), status.clone(), frame.clone());
            thread::spawn(move || {
                if acquire_use(&*t, &*s, DRIVER, GREF, true).is_ok() {
                    assert_eq!(
                        frame.load(Ordering::Relaxed),
                        GRANTED,
                        "revoked under a use: the guest reused a frame the driver domain is using"
                    );
                    assert!(ngm::end_use(&*s, GREF));
                }
            })
        };
        if ngm::withdraw(&*translation, &*status, GREF, ENTRY).is_ok() {
            frame.store(REUSED, Ordering::Relaxed);
        }
        driver.join().expect("driver");
        assert_eq!(status.load_u32(0), 0, "every use ended");
    })
}

/// `NgmView::release` before the fix: a subtract, and an add back when it
/// went below zero.
fn release_before_the_fix(status: &LoomMemory, gref: u32) {
    let off = gref as usize * NGM_STATUS_SIZE;
    if status.fetch_add_u32(off, u32::MAX) == 0 {
        status.fetch_add_u32(off, 1);
    }
}

fn release_fixed(status: &LoomMemory, gref: u32) {
    ngm::end_use(status, gref);
}

/// A release with no use behind it (a driver domain's bug, or a stale one
/// after a restart) beside a real use, while hv revokes: hv must never see
/// more uses than the one that can be in flight, and the count ends at zero.
fn stray_release_against_revoke(release: fn(&LoomMemory, u32)) -> usize {
    check(move || {
        let (translation, status) = tables(Flavor::Fixed);
        let stray = {
            let status = status.clone();
            thread::spawn(move || release(&status, GREF))
        };
        let driver = {
            let (t, s) = (translation.clone(), status.clone());
            thread::spawn(move || {
                if acquire_use(&*t, &*s, DRIVER, GREF, false).is_ok() {
                    release(&s, GREF);
                }
            })
        };
        let revoked = ngm::withdraw(&*translation, &*status, GREF, ENTRY);
        stray.join().expect("stray release");
        driver.join().expect("driver");
        if let Err(uses) = revoked {
            assert!(
                uses <= 1,
                "use count went below zero: hv saw {uses} uses with at most one in flight"
            );
        }
        let left = status.load_u32(0);
        assert_eq!(
            left, 0,
            "use count ends at {left}, not zero, with no use in flight"
        );
    })
}

#[test]
fn a_revocation_never_succeeds_under_a_use() {
    assert!(use_against_revoke(Flavor::Fixed) > 1);
}

#[test]
fn a_count_never_goes_below_zero() {
    assert!(stray_release_against_revoke(release_fixed) > 1);
}

/// Without the fences in `take_use` and `withdraw`, the driver domain can
/// read the entry from before the withdrawal while hv reads the count from
/// before the use: both go ahead.
#[test]
#[should_panic(expected = "revoked under a use")]
fn without_fences_a_revocation_succeeds_under_a_use() {
    use_against_revoke(Flavor::NoFence);
}

/// The release before the fix takes the count to `u32::MAX` for a moment:
/// hv refuses the revocation for 4294967295 uses, or a concurrent use's add
/// in that moment brings the count to zero and its own release leaves a
/// count of one behind when the stray release adds back (a use that never
/// ends, so the grant can never be revoked).
#[test]
#[should_panic(expected = "use count")]
fn the_release_before_the_fix_underflows() {
    stray_release_against_revoke(release_before_the_fix);
}
