//! hv's primitives end to end over real sockets, memfds and doorbells, with
//! in-process domains: grants, event channels, the store, the batch path,
//! hostile input and domain death.

mod common;
use common::{copy_from, domain};

use abi::grant::{
    CopyPtr, GrantCopy, DOMID_SELF, GNTST_BAD_COPY_ARG, GNTST_BAD_DOMAIN, GNTST_BAD_GNTREF,
    GNTST_BAD_PAGE, GNTST_PERMISSION_DENIED,
};
use abi::SharedMemory;
use hv::proto::Request;
use hv::{DomId, DomainSpec, ErrorKind, HvClient, Hypervisor, MemorySpec};
use splitnet_hv as hv;
use std::sync::Arc;
use std::time::Duration;

const PAGE: usize = 4096;

struct World {
    hv: Arc<Hypervisor>,
    drv: HvClient,
    g1: HvClient,
    g2: HvClient,
}

fn world() -> World {
    let hv = Hypervisor::new();
    let drv = domain(&hv, "drv", "driver");
    let g1 = domain(&hv, "guest1", "guest");
    let g2 = domain(&hv, "guest2", "guest");
    World { hv, drv, g1, g2 }
}

/// Makes `backend` the backend of a vif of `guest`, as the toolstack does.
fn backend_of(w: &World, backend: DomId, guest: DomId) {
    let req = Request::StoreWrite {
        path: format!("/local/domain/{backend}/backend/vif/{guest}/0/state"),
        value: b"1".to_vec(),
    };
    let r = w.hv.handle(hv::proto::DOMID_TOOLSTACK, req);
    assert!(r.0.is_ok(), "{r:?}");
}

/// Whether `fd` was opened read-only (its flags in `/proc/self/fdinfo`).
fn read_only_fd(fd: &std::os::fd::OwnedFd) -> bool {
    let n = std::os::fd::AsRawFd::as_raw_fd(fd);
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{n}")).unwrap_or_default();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .unwrap_or_else(|| panic!("no flags for descriptor {n}: {info:?}"));
    flags & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32
}

fn copy_to(granter: DomId, gref: u32, offset: u16, frame: u64, len: u16) -> GrantCopy {
    GrantCopy {
        source: CopyPtr::Frame {
            domid: DOMID_SELF,
            gmfn: frame,
            offset: 0,
        },
        dest: CopyPtr::Gref {
            domid: granter,
            gref,
            offset,
        },
        len,
        status: 0,
    }
}

fn errors(w: &World, name: &str, kind: ErrorKind) -> u64 {
    let s = w.hv.status();
    s.domains
        .iter()
        .find(|d| d.name == name)
        .map(|d| d.counters.errors_of(kind))
        .unwrap_or(0)
}

/// A known-good transfer between guest2 and the driver domain: hostile input
/// from guest1 must never disturb it.
fn healthy(w: &mut World) {
    let g2 = w.g2.domid();
    w.g2.pool().fill(5 * PAGE, 100, 0x5a);
    let gref = w.g2.grants().grant_access(w.drv.domid(), 5, true).unwrap();
    let st = w.drv.grant_copy(&[copy_from(g2, gref, 0, 9, 100)]).unwrap();
    assert_eq!(st, vec![0]);
    let mut b = [0u8; 100];
    w.drv.pool().read_bytes(9 * PAGE, &mut b);
    assert_eq!(b, [0x5a; 100]);
    w.g2.grants().end_access(gref).unwrap();
}

#[test]
fn grant_copy_moves_bytes_both_ways_over_both_paths() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let msg: Vec<u8> = (0..1514u32).map(|i| (i * 7) as u8).collect();
    w.g1.pool().write_bytes(3 * PAGE + 100, &msg);
    let tx = w.g1.grants().grant_access(drv, 3, true).unwrap();
    assert_eq!(
        w.drv
            .grant_copy(&[copy_from(g1, tx, 100, 7, 1514)])
            .unwrap(),
        vec![0]
    );
    let mut got = vec![0u8; 1514];
    w.drv.pool().read_bytes(7 * PAGE, &mut got);
    assert_eq!(got, msg);

    // RX direction, through the shared batch page: driver domain copies into a guest buffer.
    let rx = w.g1.grants().grant_access(drv, 4, false).unwrap();
    assert_eq!(
        w.drv
            .grant_copy_batch(&[copy_to(g1, rx, 10, 7, 1514)])
            .unwrap(),
        vec![0]
    );
    w.g1.pool().read_bytes(4 * PAGE + 10, &mut got);
    assert_eq!(got, msg);
    // Pins are dropped after a copy: revocation works.
    w.g1.grants().end_access(tx).unwrap();
    w.g1.grants().end_access(rx).unwrap();
    let s = w.hv.status();
    assert_eq!(s.counters.ops_of("grant_copy"), 2);
}

#[test]
fn out_of_range_and_unused_grant_references_are_refused() {
    let mut w = world();
    let g1 = w.g1.domid();
    let huge = w
        .drv
        .grant_copy(&[copy_from(g1, 1_000_000, 0, 0, 10)])
        .unwrap();
    let unused = w.drv.grant_copy(&[copy_from(g1, 100, 0, 0, 10)]).unwrap();
    assert_eq!(huge, vec![GNTST_BAD_GNTREF]);
    assert_eq!(unused, vec![GNTST_BAD_GNTREF]);
    assert_eq!(errors(&w, "drv", ErrorKind::BadGntref), 2);
    let e = w.drv.map_grant(g1, 1_000_000, false).err().unwrap();
    assert_eq!(e.kind, ErrorKind::BadGntref);
    assert!(e.message.contains("out of range"), "{e}");
    healthy(&mut w);
}

#[test]
fn wrong_domain_is_refused() {
    let mut w = world();
    let (g1, g2) = (w.g1.domid(), w.g2.domid());
    // guest1 grants to guest2; the driver domain may not use it.
    let gref = w.g1.grants().grant_access(g2, 1, true).unwrap();
    assert_eq!(
        w.drv.grant_copy(&[copy_from(g1, gref, 0, 0, 10)]).unwrap(),
        vec![GNTST_PERMISSION_DENIED]
    );
    // A domain that does not exist.
    assert_eq!(
        w.drv.grant_copy(&[copy_from(999, gref, 0, 0, 10)]).unwrap(),
        vec![GNTST_BAD_DOMAIN]
    );
    // Naming another domain's frame directly instead of a grant.
    let by_frame = GrantCopy {
        source: CopyPtr::Frame {
            domid: g1,
            gmfn: 1,
            offset: 0,
        },
        dest: CopyPtr::Frame {
            domid: DOMID_SELF,
            gmfn: 0,
            offset: 0,
        },
        len: 10,
        status: 0,
    };
    assert_eq!(
        w.drv.grant_copy(&[by_frame]).unwrap(),
        vec![GNTST_PERMISSION_DENIED]
    );
    assert_eq!(errors(&w, "drv", ErrorKind::PermissionDenied), 2);
    assert_eq!(errors(&w, "drv", ErrorKind::BadDomain), 1);
    let e = w.drv.map_grant(g1, gref, false).err().unwrap();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    assert!(e.message.contains("is for domain"), "{e}");
    healthy(&mut w);
}

/// A read-only view of a guest's grant table (Xen's I/O channel on TX,
/// Menon 2006 §4.1) goes only to a domain the toolstack made the guest's
/// backend and that maps one of its grants, as the pool window does: a
/// guest may grant a page to anyone, and the window shows its whole pool.
/// Through the view the backend sees each grant as the guest wrote it,
/// and reads nothing it was not granted; its descriptor is read-only.
#[test]
fn grant_table_view_is_only_for_a_backend_and_shows_only_its_grants() {
    let mut w = world();
    let (g1, g2, drv) = (w.g1.domid(), w.g2.domid(), w.drv.domid());
    let e = w.drv.grant_table_view(g1).err().unwrap();
    assert_eq!(e.kind, ErrorKind::PermissionDenied);
    assert!(e.message.contains("maps no grant"), "{e}");
    assert!(w.drv.pool_window(g1).is_err(), "nor a window on its pool");
    let ring = w.g1.grants().grant_access(drv, 3, false).unwrap();
    let m = w.drv.map_grant(g1, ring, false).unwrap();
    // Mapping a grant does not make a backend.
    let e = w.drv.grant_table_view(g1).err().unwrap();
    assert!(e.message.contains("is no backend of"), "{e}");
    assert!(w.drv.pool_window(g1).is_err(), "nor a window on its pool");
    backend_of(&w, drv, g1);
    let (reply, fds) = w
        .drv
        .call(&Request::GrantTableView { granter: g1 })
        .unwrap();
    assert!(
        matches!(reply, hv::proto::Reply::GrantTable { .. }),
        "{reply:?}"
    );
    assert_eq!(fds.len(), 1);
    assert!(read_only_fd(&fds[0]), "the view's descriptor is writable");
    let (_, fds) = w.drv.call(&Request::PoolWindow { granter: g1 }).unwrap();
    assert!(
        read_only_fd(&fds[0]),
        "the pool window's descriptor is writable"
    );
    let view = w.drv.grant_table_view(g1).unwrap();
    assert_eq!(view.granter(), g1);
    assert_eq!(view.readable(ring), Ok(3));
    let tx = w.g1.grants().grant_access(drv, 7, true).unwrap();
    let other = w.g1.grants().grant_access(g2, 8, true).unwrap();
    assert_eq!(view.readable(tx), Ok(7), "a grant made after the view");
    assert_eq!(view.readable(other), Err("grant_permission_denied"));
    assert_eq!(view.readable(1_000_000), Err("bad_grant_ref"));
    w.g1.grants().end_access(tx).unwrap();
    assert_eq!(view.readable(tx), Err("bad_grant_ref"), "revoked");
    // Mapping guest1's ring opens nothing of guest2's.
    assert!(w.drv.grant_table_view(g2).is_err());
    w.drv.unmap_grant(m).unwrap();
    healthy(&mut w);
}

#[test]
fn writes_to_read_only_grants_are_refused() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    w.g1.pool().fill(2 * PAGE, PAGE, 0x11);
    let gref = w.g1.grants().grant_access(drv, 2, true).unwrap();
    w.drv.pool().fill(0, PAGE, 0xee);
    assert_eq!(
        w.drv.grant_copy(&[copy_to(g1, gref, 0, 0, 64)]).unwrap(),
        vec![GNTST_PERMISSION_DENIED]
    );
    let mut b = [0u8; 64];
    w.g1.pool().read_bytes(2 * PAGE, &mut b);
    assert_eq!(b, [0x11; 64], "the read-only page was modified");
    // Map writable: refused. Map read-only: reads work, writes are refused.
    assert_eq!(
        w.drv.map_grant(g1, gref, true).err().unwrap().kind,
        ErrorKind::PermissionDenied
    );
    let m = w.drv.map_grant(g1, gref, false).unwrap();
    assert!(!m.writable());
    m.read(0, &mut b).unwrap();
    assert_eq!(b, [0x11; 64]);
    assert_eq!(
        m.write(0, &[1, 2, 3]).err().unwrap().kind,
        ErrorKind::PermissionDenied
    );
    w.drv.unmap_grant(m).unwrap();
    healthy(&mut w);
}

#[test]
fn offset_plus_length_crossing_the_page_is_refused() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let gref = w.g1.grants().grant_access(drv, 1, false).unwrap();
    w.g1.pool().fill(2 * PAGE, 16, 0x33); // the next frame, which must stay intact
    w.drv.pool().fill(0, PAGE, 0xee);
    let st = w
        .drv
        .grant_copy(&[
            copy_to(g1, gref, 4000, 0, 200),
            copy_from(g1, gref, 0, 63, 4097),
        ])
        .unwrap();
    assert_eq!(st, vec![GNTST_BAD_COPY_ARG, GNTST_BAD_COPY_ARG]);
    let mut b = [0u8; 16];
    w.g1.pool().read_bytes(2 * PAGE, &mut b);
    assert_eq!(b, [0x33; 16]);
    // Own frames outside the pool.
    assert_eq!(
        w.drv.grant_copy(&[copy_from(g1, gref, 0, 64, 10)]).unwrap(),
        vec![GNTST_BAD_PAGE]
    );
    // A grant naming a frame outside the granter's memory.
    let bad = w.g1.grants().grant_access(drv, 1, true).unwrap();
    w.g1.grants().raw().write_u32(bad as usize * 8 + 4, 10_000);
    assert_eq!(
        w.drv.grant_copy(&[copy_from(g1, bad, 0, 0, 10)]).unwrap(),
        vec![GNTST_BAD_PAGE]
    );
    assert_eq!(errors(&w, "drv", ErrorKind::BadCopyArg), 2);
    // A mapped grant bounds every access to its page.
    let m = w.drv.map_grant(g1, gref, true).unwrap();
    assert_eq!(
        m.write(4090, &[0; 10]).err().unwrap().kind,
        ErrorKind::BadCopyArg
    );
    w.drv.unmap_grant(m).unwrap();
    healthy(&mut w);
}

#[test]
fn double_map_and_unmap_of_unmapped_are_refused() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let gref = w.g1.grants().grant_access(drv, 1, false).unwrap();
    let m = w.drv.map_grant(g1, gref, true).unwrap();
    let e = w.drv.map_grant(g1, gref, true).err().unwrap();
    assert_eq!(e.kind, ErrorKind::DoubleMap);
    assert_eq!(
        w.drv.unmap_handle(4242).err().unwrap().kind,
        ErrorKind::BadHandle
    );
    let h = m.handle;
    w.drv.unmap_grant(m).unwrap();
    assert_eq!(
        w.drv.unmap_handle(h).err().unwrap().kind,
        ErrorKind::BadHandle
    );
    assert_eq!(errors(&w, "drv", ErrorKind::DoubleMap), 1);
    assert_eq!(errors(&w, "drv", ErrorKind::BadHandle), 2);
    healthy(&mut w);
}

#[test]
fn mapped_grant_shares_the_frame_and_revocation_waits_for_unmap() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let gref = w.g1.grants().grant_access(drv, 6, false).unwrap();
    let m = w.drv.map_grant(g1, gref, true).unwrap();
    m.write(10, b"from drv").unwrap();
    let mut b = [0u8; 8];
    w.g1.pool().read_bytes(6 * PAGE + 10, &mut b);
    assert_eq!(&b, b"from drv");
    let e = w.g1.grants().end_access(gref).err().unwrap();
    assert_eq!(e.kind, ErrorKind::InUse);
    w.drv.unmap_grant(m).unwrap();
    w.g1.grants().end_access(gref).unwrap();
    // Revoked: no longer usable.
    assert_eq!(
        w.drv.map_grant(g1, gref, false).err().unwrap().kind,
        ErrorKind::BadGntref
    );
}

#[test]
fn transfer_moves_the_page_and_zeroes_the_source() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    w.drv.pool().fill(8 * PAGE, PAGE, 0x77);
    let gref = w.g1.grants().accept_transfer(drv, 12).unwrap();
    assert!(!w.g1.grants().transfer_completed(gref));
    assert_eq!(w.drv.transfer(8, g1, gref).unwrap(), 12);
    assert!(w.g1.grants().transfer_completed(gref));
    let mut b = [0u8; 32];
    w.g1.pool().read_bytes(12 * PAGE + PAGE - 32, &mut b);
    assert_eq!(b, [0x77; 32]);
    w.drv.pool().read_bytes(8 * PAGE, &mut b);
    assert_eq!(
        b, [0; 32],
        "a page that left the driver domain must be zeroed"
    );
    // Used once: a second transfer is refused; so is one from the wrong domain.
    assert_eq!(
        w.drv.transfer(8, g1, gref).err().unwrap().kind,
        ErrorKind::BadGntref
    );
    let g2gref = w.g1.grants().accept_transfer(drv, 13).unwrap();
    assert_eq!(
        w.g2.transfer(0, g1, g2gref).err().unwrap().kind,
        ErrorKind::PermissionDenied
    );
}

/// A batch of flips moves each page whose grant accepts it, and refuses
/// the rest op by op: a used grant, a frame beyond the domain's memory
/// (also one whose number needs more than 32 bits), another domain's offer.
#[test]
fn transfer_batches_flip_op_by_op() {
    use abi::grant::{GrantTransfer, GrantTransferView, GNTST_BAD_GNTREF};
    use hv::batch::{BatchKind, KIND_OFF, OPS_OFF, RESULT_OFF};
    use hypercall::Flip;
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    w.drv.pool().fill(8 * PAGE, PAGE, 0x31);
    w.drv.pool().fill(9 * PAGE, PAGE, 0x32);
    let a = w.g1.grants().accept_transfer(drv, 20).unwrap();
    let b = w.g1.grants().accept_transfer(drv, 21).unwrap();
    let c = w.g1.grants().accept_transfer(drv, 22).unwrap();
    let flips = [
        Flip { frame: 8, gref: a },
        Flip { frame: 9, gref: b },
        Flip { frame: 10, gref: a },
        Flip {
            frame: u32::MAX,
            gref: c,
        },
    ];
    let mut st = Vec::new();
    w.drv.transfer_batch(g1, &flips, &mut st).unwrap();
    assert_eq!(st[..3], [0, 0, GNTST_BAD_GNTREF], "{st:?}");
    assert_ne!(st[3], 0, "a frame outside the pool: {st:?}");
    let mut got = [0u8; 16];
    for (frame, byte) in [(20, 0x31), (21, 0x32)] {
        w.g1.pool().read_bytes(frame * PAGE + 100, &mut got);
        assert_eq!(got, [byte; 16], "frame {frame}");
    }
    assert!(!w.g1.grants().transfer_completed(c), "refused: untouched");
    // The flipped pages left the driver domain (Menon 2006 §4.2): it reads
    // zeros there, and cannot flip a frame it gave away twice in a batch.
    for frame in [8, 9] {
        w.drv.pool().read_bytes(frame * PAGE + 100, &mut got);
        assert_eq!(got, [0; 16], "driver frame {frame}");
    }
    w.drv.pool().fill(11 * PAGE, PAGE, 0x33);
    let twice = [23, 24].map(|f| w.g1.grants().accept_transfer(drv, f).unwrap());
    let again = twice.map(|gref| Flip { frame: 11, gref });
    w.drv.transfer_batch(g1, &again, &mut st).unwrap();
    assert_eq!(st[..2], [0, abi::grant::GNTST_BAD_PAGE], "{st:?}");
    // A record whose frame number does not fit 32 bits, written raw.
    let page = w.drv.batch_page();
    let mut rec = [0u8; GrantTransfer::SIZE];
    let mut v = GrantTransferView::new_checked(&mut rec[..]).unwrap();
    v.set_mfn(1 << 40 | 9);
    v.set_domid(g1);
    v.set_gref(c);
    page.write_bytes(OPS_OFF, &rec);
    page.write_u32(KIND_OFF, BatchKind::Transfer as u32);
    w.drv.submit_raw_batch(1).unwrap();
    let page = w.drv.batch_page();
    page.write_u32(KIND_OFF, BatchKind::Copy as u32);
    assert_eq!(page.read_u32(RESULT_OFF), 0);
    page.read_bytes(OPS_OFF, &mut rec);
    let status = GrantTransferView::new_checked(&rec[..]).unwrap().status();
    assert_ne!(status, 0, "a 40-bit frame number is refused");
    assert!(!w.g1.grants().transfer_completed(c));
    // Only the driver domain's own offer is taken.
    assert_eq!(
        w.g2.transfer_batch(g1, &[Flip { frame: 0, gref: c }], &mut st)
            .map(|()| st.clone())
            .unwrap(),
        [abi::grant::GNTST_PERMISSION_DENIED]
    );
    healthy(&mut w);
}

#[test]
fn event_channels_notify_mask_and_close() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let a = w.g1.evtchn_alloc_unbound(drv).unwrap();
    // Only the named remote may bind.
    assert_eq!(
        w.g2.evtchn_bind(g1, a.port).err().unwrap().kind,
        ErrorKind::BadPort
    );
    assert_eq!(
        w.drv.evtchn_bind(g1, 999).err().unwrap().kind,
        ErrorKind::BadPort
    );
    let b = w.drv.evtchn_bind(g1, a.port).unwrap();
    assert!(!b.wait(Some(Duration::from_millis(1))).unwrap());
    a.notify().unwrap();
    assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    // Masked: pending is recorded but nobody is woken; unmask delivers it.
    b.mask();
    a.notify().unwrap();
    assert!(!sys::poll_readable(&[b.fd()], Some(Duration::from_millis(20))).unwrap()[0]);
    b.unmask().unwrap();
    assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    // The hv slow path.
    w.drv.evtchn_send(b.port).unwrap();
    assert!(a.wait(Some(Duration::from_secs(1))).unwrap());
    // Close wakes the peer, which sees the channel closed.
    w.g1.evtchn_close(a).unwrap();
    assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    assert!(b.is_closed());
    assert_eq!(
        w.drv.evtchn_send(b.port).err().unwrap().kind,
        ErrorKind::BadPort
    );
}

/// A wake-up with nothing pending (a late ring of a notification already
/// taken) does not end a wait: it returns true at the next notification,
/// and false only once its timeout has passed.
#[test]
fn a_stale_ring_does_not_end_a_wait() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let a = w.g1.evtchn_alloc_unbound(drv).unwrap();
    let b = w.drv.evtchn_bind(g1, a.port).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| b.wait(Some(Duration::from_secs(10))).unwrap());
        // The stale ring, then (once the waiter rode it out) the real one.
        b.kick_self().unwrap();
        while sys::poll_readable(&[b.fd()], Some(Duration::ZERO)).unwrap()[0] {
            std::thread::yield_now();
        }
        a.notify().unwrap();
        assert!(
            waiter.join().unwrap(),
            "the notification after a stale ring wakes the wait"
        );
    });
    b.kick_self().unwrap();
    let t0 = std::time::Instant::now();
    assert!(!b.wait(Some(Duration::from_millis(50))).unwrap());
    assert!(
        t0.elapsed() >= Duration::from_millis(50),
        "false only after the timeout"
    );
}

/// guest1's vif 0 device directory, which the driver domain may read (the
/// frontend sets that first, so the keys written below inherit it), with
/// its MAC 00:16:3e:00:00:01.
fn g1_vif_readable_by_drv(w: &mut World) -> String {
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let dev = format!("/local/domain/{g1}/device/vif/0");
    w.g1.store_mkdir(&dev).unwrap();
    w.g1.store_set_perms(&dev, &[&format!("n{g1}"), &format!("r{drv}")])
        .unwrap();
    w.g1.store_write(&format!("{dev}/mac"), "00:16:3e:00:00:01")
        .unwrap();
    dev
}

#[test]
fn store_permissions_watches_and_handshake() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    // Own subtree: fine.
    let dev = g1_vif_readable_by_drv(&mut w);
    w.g1.store_write("device/vif/0/handle", "0").unwrap();
    // Another domain's subtree: refused and counted.
    let e =
        w.g1.store_write(&format!("/local/domain/{drv}/backend/x"), "1")
            .err()
            .unwrap();
    assert_eq!(e.kind, ErrorKind::Store);
    assert!(
        e.message.contains("EACCES") || e.message.to_lowercase().contains("permission"),
        "{e}"
    );
    assert_eq!(
        w.g2.store_read(&format!("/local/domain/{g1}/device/vif/0/mac"))
            .err()
            .unwrap()
            .kind,
        ErrorKind::Store
    );
    assert!(errors(&w, "guest1", ErrorKind::Store) >= 1);
    // Given access: the backend reads the frontend's keys.
    assert_eq!(
        w.drv.store_read_str(&format!("{dev}/mac")).unwrap(),
        "00:16:3e:00:00:01"
    );
    // Watches fire on writes below the watched path, via the watch socket.
    w.drv.watch(&dev, "fe").unwrap();
    let first = w.drv.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(first.token, "fe");
    w.g1.switch_state(&dev, abi::xenbus::XenbusState::Initialised)
        .unwrap();
    let ev = w.drv.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(ev.path, format!("{dev}/state"));
    assert_eq!(
        w.drv.read_state(&dev).unwrap(),
        abi::xenbus::XenbusState::Initialised
    );
    // Garbage in a state key is an error, not a panic.
    w.g1.store_write(&format!("{dev}/state"), "banana").unwrap();
    assert_eq!(
        w.drv.read_state(&dev).err().unwrap().kind,
        ErrorKind::Invalid
    );
}

#[test]
fn a_gather_reads_each_path_as_a_read_would_and_read_ahead_ends_with_its_scope() {
    let mut w = world();
    let g2 = w.g2.domid();
    let dev = g1_vif_readable_by_drv(&mut w);
    w.g2.store_write("data/secret", "x").unwrap();
    let paths = [
        format!("{dev}/mac"),
        format!("{dev}/missing"),
        format!("/local/domain/{g2}/data/secret"),
    ];
    let before = errors(&w, "drv", ErrorKind::Store);
    let got = w.drv.store_gather(&paths).unwrap();
    let gathered = errors(&w, "drv", ErrorKind::Store) - before;
    let one_by_one: Vec<_> = paths.iter().map(|p| w.drv.store_read(p)).collect();
    // hv counts a gather's refused reads as it counts the reads.
    let read = errors(&w, "drv", ErrorKind::Store) - before - gathered;
    assert_eq!((gathered, read), (2, 2));
    assert_eq!(got, one_by_one);
    assert_eq!(got[0].as_deref().unwrap(), b"00:16:3e:00:00:01");
    assert!(got[1].is_err() && got[2].is_err(), "{got:?}");
    // Another guest reads nothing of g1's by gathering either.
    assert!(w.g2.store_gather(&paths[..1]).unwrap()[0].is_err());
    // A gather past its bound is refused whole, named.
    let many = vec![format!("{dev}/mac"); hv::proto::GATHER_MAX + 1];
    let e = w.drv.call(&hv::proto::Request::StoreGather { paths: many });
    let e = e.err().unwrap();
    assert!(
        e.kind == ErrorKind::Invalid && e.message.contains("at most"),
        "{e}"
    );
    // Read ahead: values and missing keys as the store had them; after the
    // scope, a change is seen.
    let mac = w.drv.with_read_ahead(&dev, |drv| {
        assert!(drv.store_read(&format!("{dev}/missing")).is_err());
        drv.store_read_str(&format!("{dev}/mac")).unwrap()
    });
    assert_eq!(mac, "00:16:3e:00:00:01");
    w.g1.store_write(&format!("{dev}/mac"), "00:16:3e:00:00:02")
        .unwrap();
    let now = w.drv.store_read_str(&format!("{dev}/mac")).unwrap();
    assert_eq!(now, "00:16:3e:00:00:02");
    // A write by a relative path forgets what was read ahead by the
    // absolute one, and the other way round.
    w.g1.with_read_ahead("device/vif/0", |g1| {
        g1.store_write("device/vif/0/mac", "00:16:3e:00:00:03")
            .unwrap();
        assert_eq!(
            g1.store_read_str(&format!("{dev}/mac")).unwrap(),
            "00:16:3e:00:00:03"
        );
        g1.store_write(&format!("{dev}/mac"), "00:16:3e:00:00:04")
            .unwrap();
        assert_eq!(
            g1.store_read_str("device/vif/0/mac").unwrap(),
            "00:16:3e:00:00:04"
        );
    });
}

#[test]
fn a_domain_whose_watch_socket_overflowed_is_told_before_its_next_event() {
    let mut w = world();
    let g1 = w.g1.domid();
    let node = format!("/local/domain/{g1}/x");
    w.g1.watch(&node, "x").unwrap();
    // Written far more often than the watch socket holds, never drained.
    for i in 0..20_000 {
        w.g1.store_write(&node, &i.to_string()).unwrap();
    }
    let mut seen = Vec::new();
    while let Some(ev) = w.g1.next_watch(Duration::ZERO).unwrap() {
        seen.push(ev.token);
    }
    assert!(seen.len() < 20_000, "the socket held every event");
    assert!(!seen.iter().any(|t| t == hv::proto::WATCHES_LOST));
    // The next event that finds room comes after the word that some were lost.
    w.g1.store_write(&node, "last").unwrap();
    let lost = w.g1.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(lost.token, hv::proto::WATCHES_LOST);
    let ev = w.g1.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!((ev.token.as_str(), ev.path.as_str()), ("x", node.as_str()));
    // Told once.
    w.g1.store_write(&node, "again").unwrap();
    let ev = w.g1.next_watch(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(ev.token, "x");
}

#[test]
fn hostile_batch_count_and_garbage_messages_are_refused() {
    let mut w = world();
    // A count far beyond the batch page.
    let e = {
        let r = w.g1.submit_raw_batch(1_000_000);
        assert!(r.is_ok(), "hv must answer the batch");
        w.g1.grant_copy_batch(&[]).unwrap();
        errors(&w, "guest1", ErrorKind::Invalid)
    };
    assert_eq!(e, 1);
    // Garbage on the control socket gets an error reply; the domain lives on.
    let e =
        w.g1.call(&Request::GrantCopy { ops: vec![1, 2, 3] })
            .err()
            .unwrap();
    assert_eq!(e.kind, ErrorKind::Invalid);
    // Toolstack-only calls from a domain.
    assert_eq!(
        w.g1.call(&Request::Shutdown).err().unwrap().kind,
        ErrorKind::NotPrivileged
    );
    assert!(!w.hv.is_shutting_down());
    w.g1.nop().unwrap();
    healthy(&mut w);
}

/// Grants guest1's frames `frames` to the driver domain, each filled
/// with its own number; returns the grant references.
fn grant_frames(w: &World, frames: &[u32], readonly: bool) -> Vec<u32> {
    let drv = w.drv.domid();
    frames
        .iter()
        .map(|&f| {
            w.g1.pool().fill(f as usize * PAGE, PAGE, f as u8);
            w.g1.grants().grant_access(drv, f, readonly).unwrap()
        })
        .collect()
}

#[test]
fn map_batch_maps_every_grant_in_one_hypercall_and_unmap_batch_ends_them() {
    map_and_unmap_batches(true);
}

#[test]
fn map_batch_through_the_window_does_the_same() {
    map_and_unmap_batches(false);
}

/// Batch maps and unmaps into a pool mirror (page-table entries) when
/// `mirrors`, else into the window (an mmap per run of frames).
fn map_and_unmap_batches(mirrors: bool) {
    let mut w = world();
    w.drv.set_pool_mirrors(mirrors);
    let g1 = w.g1.domid();
    // Frames 3, 4, 5 are consecutive (one mmap), 9 stands alone.
    let grefs = grant_frames(&w, &[3, 4, 5, 9], true);
    let before = w.hv.status().counters.ops_of("batch");
    let maps = w.drv.map_batch(g1, &grefs, false).unwrap();
    let maps: Vec<_> = maps.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(
        maps.iter().map(|m| m.frame).collect::<Vec<_>>(),
        [3, 4, 5, 9]
    );
    assert_eq!(w.drv.maps_by_mirror(g1, false), mirrors);
    for m in &maps {
        let mut b = [0u8; 8];
        w.drv.read_mapped(m.handle, PAGE - 8, &mut b).unwrap();
        assert_eq!(b, [m.frame as u8; 8]);
    }
    // Reads stay inside the frame; the grants are in use meanwhile.
    let mut b = [0u8; 8];
    let e = w
        .drv
        .read_mapped(maps[0].handle, PAGE - 4, &mut b)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadCopyArg);
    assert_eq!(
        w.g1.grants().end_access(grefs[0]).unwrap_err().kind,
        ErrorKind::InUse
    );
    let handles: Vec<u32> = maps.iter().map(|m| m.handle).collect();
    assert_eq!(w.drv.unmap_batch(&handles).unwrap(), vec![0; 4]);
    assert_eq!(
        w.drv
            .read_mapped(maps[0].handle, 0, &mut b)
            .unwrap_err()
            .kind,
        ErrorKind::BadHandle
    );
    for g in grefs {
        w.g1.grants().end_access(g).unwrap();
    }
    let s = w.hv.status();
    // The first map came over the control socket with the pool descriptor,
    // the other three in one batch; the four unmaps in one more.
    assert_eq!(s.counters.ops_of("batch") - before, 2);
    assert_eq!(s.counters.ops_of("grant_map"), 4);
    assert_eq!(s.counters.ops_of("grant_unmap"), 4);
    // Now the descriptor is held: a batch maps all in one hypercall.
    let grefs = grant_frames(&w, &[6, 7], true);
    let maps = w.drv.map_batch(g1, &grefs, false).unwrap();
    let handles: Vec<u32> = maps.iter().map(|m| m.as_ref().unwrap().handle).collect();
    assert_eq!(w.drv.unmap_batch(&handles).unwrap(), vec![0; 2]);
    assert_eq!(w.hv.status().counters.ops_of("batch") - before, 4);
    // A batch-mapped grant may also be unmapped on its own.
    let m = w.drv.map_batch(g1, &grefs[..1], false).unwrap();
    let h = m[0].as_ref().unwrap().handle;
    w.drv.unmap_handle(h).unwrap();
    assert_eq!(
        w.drv.read_mapped(h, 0, &mut b).unwrap_err().kind,
        ErrorKind::BadHandle
    );
    // One frame granted twice and mapped by both grants in a batch: each
    // handle reads it until its own unmap, whatever the other's.
    let twice = grant_frames(&w, &[7, 7], true);
    let m = w.drv.map_batch(g1, &twice, false).unwrap();
    let (h1, h2) = (m[0].as_ref().unwrap().handle, m[1].as_ref().unwrap().handle);
    assert_eq!(w.drv.unmap_batch(&[h1]).unwrap(), vec![0]);
    w.drv.read_mapped(h2, 0, &mut b).unwrap();
    assert_eq!(b, [7; 8]);
    assert_eq!(w.drv.unmap_batch(&[h2]).unwrap(), vec![0]);
    for g in twice {
        w.g1.grants().end_access(g).unwrap();
    }
    for g in grefs {
        w.g1.grants().end_access(g).unwrap();
    }
    healthy(&mut w);
}

#[test]
fn hostile_map_and_unmap_batches_get_per_op_errors_and_disturb_nothing() {
    let mut w = world();
    let (g1, g2, drv) = (w.g1.domid(), w.g2.domid(), w.drv.domid());
    let good = grant_frames(&w, &[3, 4], true);
    let ro = good[1];
    let unused = 200;
    let for_g2 = w.g1.grants().grant_access(g2, 7, true).unwrap();
    // Hand over the pool descriptor first, so the rest is one batch.
    let first = w.drv.map_batch(g1, &good[..1], false).unwrap();
    let kinds = |r: &[hv::HvResult<hv::client::BatchMapped>]| -> Vec<Option<ErrorKind>> {
        r.iter().map(|m| m.as_ref().err().map(|e| e.kind)).collect()
    };
    let r = w
        .drv
        .map_batch(g1, &[1_000_000, unused, for_g2, good[0], ro, ro], false)
        .unwrap();
    assert_eq!(
        kinds(&r),
        [
            Some(ErrorKind::BadGntref),
            Some(ErrorKind::BadGntref),
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::DoubleMap),
            None,
            Some(ErrorKind::DoubleMap),
        ]
    );
    let ro_map = r[4].as_ref().unwrap().handle;
    // Writable maps of a read-only grant, and of one's own grant, are refused.
    let ro8 = grant_frames(&w, &[8], true)[0];
    let r = w.drv.map_batch(g1, &[ro8], true).unwrap();
    assert_eq!(kinds(&r), [Some(ErrorKind::PermissionDenied)]);
    let own = w.drv.grants().grant_access(g1, 1, true).unwrap();
    let r = w.drv.map_batch(drv, &[own], false).unwrap();
    assert_eq!(kinds(&r), [Some(ErrorKind::BadDomain)]);
    // The driver's good mapping went through the hostile batch untouched.
    let mut b = [0u8; 4];
    w.drv.read_mapped(ro_map, 0, &mut b).unwrap();
    assert_eq!(b, [4; 4]);
    assert_eq!(w.drv.unmap_batch(&[ro_map]).unwrap(), [0]);
    // guest1 maps one of guest2's grants: the driver cannot unmap it by
    // its handle; a double unmap and a handle never given are refused too.
    let g2_gref = w.g2.grants().grant_access(g1, 2, true).unwrap();
    let theirs = w.g1.map_grant(g2, g2_gref, false).unwrap();
    let mine = first[0].as_ref().unwrap().handle;
    let st = w
        .drv
        .unmap_batch(&[mine, mine, theirs.handle, 4242])
        .unwrap();
    let bad = abi::grant::GNTST_BAD_HANDLE;
    assert_eq!(st, [0, bad, bad, bad]);
    theirs.read(0, &mut b).unwrap();
    w.g1.unmap_grant(theirs).unwrap();
    w.g2.grants().end_access(g2_gref).unwrap();
    for g in [good[0], ro, ro8, for_g2] {
        w.g1.grants().end_access(g).unwrap();
    }
    assert_eq!(errors(&w, "drv", ErrorKind::BadHandle), 3);
    assert_eq!(errors(&w, "drv", ErrorKind::DoubleMap), 2);
    healthy(&mut w);
}

#[test]
fn hostile_raw_map_batches_are_refused_whole_or_op_by_op() {
    use abi::grant::{GrantMap, GrantMapView, MapFlags, GNTST_GENERAL_ERROR};
    use hv::batch::{BatchKind, KIND_OFF, OPS_OFF, RESULT_OFF};
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let gref = w.g1.grants().grant_access(drv, 3, true).unwrap();
    // Hand over the pool descriptor, so what follows is batches only.
    let m = w.drv.map_batch(g1, &[gref], false).unwrap();
    let handle = m[0].as_ref().unwrap().handle;
    let page = w.drv.batch_page();
    let invalid = errors(&w, "drv", ErrorKind::Invalid);
    // A count beyond what the page holds, and an unknown kind: refused whole.
    page.write_u32(KIND_OFF, BatchKind::Map as u32);
    w.drv.submit_raw_batch(1_000_000).unwrap();
    assert_eq!(
        w.drv.batch_page().read_u32(RESULT_OFF) as i32,
        -libc::EINVAL
    );
    w.drv.batch_page().write_u32(KIND_OFF, 99);
    w.drv.submit_raw_batch(1).unwrap();
    assert_eq!(
        w.drv.batch_page().read_u32(RESULT_OFF) as i32,
        -libc::EINVAL
    );
    // Unknown flag bits, a device map, no host map: refused op by op.
    let page = w.drv.batch_page();
    let flags = [
        1 << 5,
        (MapFlags::HOST_MAP | MapFlags::DEVICE_MAP).bits(),
        MapFlags::READONLY.bits(),
    ];
    for (i, f) in flags.iter().enumerate() {
        let mut rec = [0u8; GrantMap::SIZE];
        let mut v = GrantMapView::new_checked(&mut rec[..]).unwrap();
        v.set_flags(*f | MapFlags::READONLY.bits());
        v.set_gref(gref);
        v.set_dom(g1);
        page.write_bytes(OPS_OFF + i * GrantMap::SIZE, &rec);
    }
    page.write_u32(KIND_OFF, BatchKind::Map as u32);
    w.drv.submit_raw_batch(3).unwrap();
    let page = w.drv.batch_page();
    page.write_u32(KIND_OFF, BatchKind::Copy as u32);
    assert_eq!(page.read_u32(RESULT_OFF), 0);
    for i in 0..3 {
        let mut rec = [0u8; GrantMap::SIZE];
        page.read_bytes(OPS_OFF + i * GrantMap::SIZE, &mut rec);
        let v = GrantMapView::new_checked(&rec[..]).unwrap();
        assert_eq!(v.status(), GNTST_GENERAL_ERROR, "op {i}");
        assert_eq!(ErrorKind::from_code(v.handle()), ErrorKind::Invalid);
    }
    assert_eq!(errors(&w, "drv", ErrorKind::Invalid), invalid + 5);
    // The mapping from before is intact, and ends normally.
    let mut b = [0u8; 4];
    w.drv.read_mapped(handle, 0, &mut b).unwrap();
    assert_eq!(w.drv.unmap_batch(&[handle]).unwrap(), [0]);
    w.g1.grants().end_access(gref).unwrap();
    healthy(&mut w);
}

#[test]
fn a_dead_domain_is_cleaned_up_and_others_carry_on() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    // guest1 holds: a grant the driver maps, a mapping of the driver's grant,
    // an event channel, and store entries.
    let g_gref = w.g1.grants().grant_access(drv, 1, false).unwrap();
    let mapped_by_drv = w.drv.map_grant(g1, g_gref, true).unwrap();
    let d_gref = w.drv.grants().grant_access(g1, 2, false).unwrap();
    let m = w.g1.map_grant(drv, d_gref, true).unwrap();
    let ch = w.g1.evtchn_alloc_unbound(drv).unwrap();
    let peer = w.drv.evtchn_bind(g1, ch.port).unwrap();
    w.g1.store_write("device/vif/0/state", "1").unwrap();
    w.drv.watch("@releaseDomain", "gone").ok();
    assert_eq!(
        w.drv.grants().end_access(d_gref).err().unwrap().kind,
        ErrorKind::InUse
    );

    // guest1 dies: its connection closes.
    drop(m);
    drop(ch);
    drop(std::mem::replace(
        &mut w.g1,
        domain(&w.hv, "guest3", "guest"),
    ));
    testutil::wait_until(
        "hv to clean up the dead domain",
        Duration::from_secs(5),
        || w.hv.status().domains.iter().all(|d| d.id != g1),
    );
    // Its pin on the driver's grant is released, so the driver can revoke.
    w.drv.grants().end_access(d_gref).unwrap();
    // Its channel is closed and the peer was woken.
    assert!(peer.wait(Some(Duration::from_secs(1))).unwrap());
    assert!(peer.is_closed());
    // Its store subtree is gone.
    let e = w
        .drv
        .store_read(&format!("/local/domain/{g1}/device/vif/0/state"))
        .err()
        .unwrap();
    assert_eq!(e.kind, ErrorKind::Store);
    // The driver's old mapping of the dead guest's page stays safe to use and to unmap.
    mapped_by_drv.write(0, b"still mapped").unwrap();
    w.drv.unmap_grant(mapped_by_drv).unwrap();
    // Grants of the dead domain are unusable.
    assert_eq!(
        w.drv.map_grant(g1, g_gref, false).err().unwrap().kind,
        ErrorKind::BadDomain
    );
    healthy(&mut w);
    assert_eq!(w.hv.status().counters.ops_of("domains_destroyed"), 1);
}

/// Reserves at least `n` free 2 MiB hugepages (root), returning the old setting.
fn reserve_hugepages(n: u64) -> u64 {
    let path = "/proc/sys/vm/nr_hugepages";
    let old: u64 = std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let free: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    if free < n {
        std::fs::write(path, (old + n - free).to_string()).expect("reserving hugepages needs root");
    }
    old
}

#[test]
fn a_hugepage_backed_pool_serves_grants() {
    let Some(_host) = testutil::root_or_skip("reserving huge pages") else {
        return;
    };
    let old = reserve_hugepages(2);
    let hv = Hypervisor::new();
    let spec = DomainSpec {
        name: "huge".into(),
        kind: "guest".into(),
        memory: MemorySpec {
            pool_frames: 512,
            grant_frames: 1,
            hugepages: true,
        },
    };
    // Transparent huge pages where the host allows them for shared
    // memory (they come first), else the hugetlb pages reserved above.
    let want = if sys::huge::thp_shmem().0.advised_ranges_get_them() {
        "thp"
    } else {
        "hugetlb"
    };
    let (_, sock) = hv.create_domain(spec).expect("a hugepage pool");
    let mut g = HvClient::connect(sock).unwrap();
    let mut drv = domain(&hv, "drv", "driver");
    assert!(hv
        .status()
        .domains
        .iter()
        .any(|d| d.name == "huge" && d.hugepages && d.huge_backing == want));
    g.pool().fill(511 * PAGE, PAGE, 0x42);
    let gref = g.grants().grant_access(drv.domid(), 511, true).unwrap();
    assert_eq!(
        drv.grant_copy(&[copy_from(g.domid(), gref, 0, 0, 4096)])
            .unwrap(),
        vec![0]
    );
    let mut b = [0u8; 8];
    drv.pool().read_bytes(4088, &mut b);
    assert_eq!(b, [0x42; 8]);
    // A map of one 4 KiB frame of a pool on 2 MiB pages (its rings):
    // mapped within its huge page, the frame alone accessible.
    let m = drv.map_grant(g.domid(), gref, false).unwrap();
    assert_eq!(m.len(), PAGE);
    m.read(PAGE - 8, &mut b).unwrap();
    assert_eq!(b, [0x42; 8]);
    assert!(
        m.read(PAGE - 4, &mut b).is_err(),
        "only the frame is accessible"
    );
    g.pool().write_bytes(511 * PAGE, b"shared");
    let mut w = [0u8; 6];
    m.read(0, &mut w).unwrap();
    assert_eq!(&w, b"shared");
    drv.unmap_grant(m).unwrap();
    hugepage_batch_maps_go_through_a_mirror(&mut g, &mut drv);
    // A size that is not whole 2 MiB pages is refused up front.
    let bad = DomainSpec {
        name: "odd".into(),
        kind: "guest".into(),
        memory: MemorySpec {
            pool_frames: 100,
            grant_frames: 1,
            hugepages: true,
        },
    };
    assert_eq!(
        hv.create_domain(bad).err().unwrap().kind,
        ErrorKind::Invalid
    );
    g.nop().unwrap();
    drop(g);
    hv.shutdown();
    let _ = std::fs::write("/proc/sys/vm/nr_hugepages", old.to_string());
}

/// Batch maps of a pool on 2 MiB pages install page-table entries in a
/// mirror a huge page at a time (read-only and writable), each handle
/// reading only its own frame, the owner's stores showing through.
fn hugepage_batch_maps_go_through_a_mirror(g: &mut HvClient, drv: &mut HvClient) {
    let (gd, dd) = (g.domid(), drv.domid());
    for writable in [false, true] {
        let frames = [0u32, 1, 200, 511];
        let grefs: Vec<u32> = frames
            .iter()
            .map(|&f| {
                g.pool().fill(f as usize * PAGE, PAGE, f as u8 ^ 0x5a);
                g.grants().grant_access(dd, f, !writable).unwrap()
            })
            .collect();
        let maps = drv.map_batch(gd, &grefs, writable).unwrap();
        let maps: Vec<_> = maps.into_iter().map(|r| r.unwrap()).collect();
        assert!(drv.maps_by_mirror(gd, writable), "writable {writable}");
        let mut b = [0u8; 8];
        for m in &maps {
            drv.read_mapped(m.handle, PAGE - 8, &mut b).unwrap();
            assert_eq!(b, [m.frame as u8 ^ 0x5a; 8]);
            assert_eq!(
                drv.read_mapped(m.handle, PAGE - 4, &mut b)
                    .unwrap_err()
                    .kind,
                ErrorKind::BadCopyArg
            );
        }
        g.pool().write_bytes(200 * PAGE + 16, b"through!");
        drv.read_mapped(maps[2].handle, 16, &mut b).unwrap();
        assert_eq!(&b, b"through!");
        // Half the batch unmapped: the huge page stays for the rest.
        let handles: Vec<u32> = maps.iter().map(|m| m.handle).collect();
        assert_eq!(drv.unmap_batch(&handles[..2]).unwrap(), vec![0; 2]);
        drv.read_mapped(maps[3].handle, 0, &mut b).unwrap();
        assert_eq!(b, [511u32 as u8 ^ 0x5a; 8]);
        assert_eq!(
            drv.read_mapped(maps[0].handle, 0, &mut b).unwrap_err().kind,
            ErrorKind::BadHandle
        );
        assert_eq!(drv.unmap_batch(&handles[2..]).unwrap(), vec![0; 2]);
        for gref in grefs {
            g.grants().end_access(gref).unwrap();
        }
    }
}

#[test]
fn a_guest_that_never_drains_its_doorbell_cannot_stall_hv_or_the_driver() {
    let mut w = world();
    let (g1, drv) = (w.g1.domid(), w.drv.domid());
    let a = w.g1.evtchn_alloc_unbound(drv).unwrap();
    let b = w.drv.evtchn_bind(g1, a.port).unwrap();
    // guest1 never reads its doorbell; the driver and hv keep ringing it.
    for _ in 0..20_000 {
        b.notify().unwrap();
    }
    for _ in 0..500 {
        w.drv.evtchn_send(b.port).unwrap();
    }
    // Still responsive for everyone, and closing still wakes the driver.
    w.g1.evtchn_close(a).unwrap();
    assert!(b.wait(Some(Duration::from_secs(1))).unwrap());
    assert!(b.is_closed());
    healthy(&mut w);
}

/// The toolstack's `capture_open` (hv's view of `splitnet capture`).
fn open_capture(w: &World, spec: &str) -> hv::HvResult<(u32, std::os::fd::OwnedFd)> {
    let (r, fds) = w.hv.handle(
        hv::proto::DOMID_TOOLSTACK,
        Request::CaptureOpen {
            domain: "drv".into(),
            spec: spec.into(),
        },
    );
    match r? {
        hv::proto::Reply::Channel { id, domid } => {
            assert_eq!(domid, w.drv.domid());
            Ok((id, fds.into_iter().next().expect("the toolstack's end")))
        }
        r => panic!("unexpected reply {r:?}"),
    }
}

#[test]
fn a_capture_channel_reaches_only_the_domain_it_was_opened_for() {
    let mut w = world();
    // Only the toolstack opens one.
    let e =
        w.g1.call(&Request::CaptureOpen {
            domain: "drv".into(),
            spec: "bridge in 100".into(),
        })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotPrivileged);
    let (id, ours) = open_capture(&w, "bridge in 100").unwrap();
    let node = format!("/local/domain/{}/splitnet/capture/{id}", w.drv.domid());
    // The driver domain reads its spec; a guest can neither read it nor
    // take the channel.
    assert_eq!(w.drv.store_read_str(&node).unwrap(), "bridge in 100");
    assert!(w.g1.store_read_str(&node).is_err());
    assert!(w.g1.capture_attach(id).is_err());
    let theirs = w.drv.capture_attach(id).unwrap();
    // Once collected, it is gone from hv.
    assert!(w.drv.capture_attach(id).is_err());
    assert!(theirs.try_send(b"frame", &[]).unwrap());
    let ours = sys::SeqPacket::from_fd(ours);
    let mut b = [0u8; 16];
    assert_eq!(ours.recv(&mut b).unwrap().0, 5);
    // The driver domain owns the node: it removes it when the reader goes.
    w.drv.store_rm(&node).unwrap();
    assert!(w.drv.store_read_str(&node).is_err());
}

#[test]
fn uncollected_capture_channels_are_bounded_and_die_with_their_domain() {
    let w = world();
    let mut ends = Vec::new();
    for _ in 0..8 {
        ends.push(open_capture(&w, "bridge in 100").unwrap());
    }
    let e = open_capture(&w, "bridge in 100").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Quota);
    w.hv.destroy_domain(w.drv.domid(), "test");
    // Our ends see the domain's ends close.
    for (_, fd) in ends {
        let s = sys::SeqPacket::from_fd(fd);
        assert!(s.peer_closed());
    }
}
