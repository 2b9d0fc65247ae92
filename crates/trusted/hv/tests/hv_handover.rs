//! hv's state recorded for an upgrade in place and adopted again
//! (`Hypervisor::export`, `Hypervisor::adopt`), in one process: what the
//! adopted hv holds is what the running one held, descriptor for
//! descriptor; an image it cannot take is refused and leaves every
//! original open.

mod common;
use common::domain;

use hv::proto::{Reply, Request, DOMID_TOOLSTACK};
use hv::{HvClient, Hypervisor};
use splitnet_hv as hv;
use std::sync::Arc;

/// Three domains holding what a running instance holds: an event channel
/// bound between guest1 and the driver domain, a grant mapped, a table of
/// the new grant mechanism with a grant in it, store nodes and a watch.
fn running() -> (Arc<Hypervisor>, Vec<HvClient>) {
    let hv = Hypervisor::new();
    let mut drv = domain(&hv, "drv", "driver");
    let mut g1 = domain(&hv, "guest1", "guest");
    let g2 = domain(&hv, "guest2", "guest");
    let (d, g) = (drv.domid(), g1.domid());
    let a = g1.evtchn_alloc_unbound(d).unwrap();
    drv.evtchn_bind(g, a.port).unwrap();
    let gref = g1.grants().grant_access(d, 3, false).unwrap();
    std::mem::forget(drv.map_grant(g, gref, true).unwrap());
    g1.ngm_setup(d).unwrap();
    g1.ngm_grant(d, 5, 10, true).unwrap();
    let home = format!("/local/domain/{d}/x");
    drv.store_write(&home, "carried").unwrap();
    drv.watch(&home, "t").unwrap();
    std::mem::forget(a);
    (hv, vec![drv, g1, g2])
}

/// What status shows of each domain and of hv, without counters of
/// hypercalls (the adopted hv was asked none).
fn held(hv: &Hypervisor) -> serde_json::Value {
    let s = hv.status();
    let doms: Vec<_> = (s.domains.iter())
        .map(|d| {
            let c = (
                d.event_channels,
                d.grant_maps,
                d.grant_entries,
                d.pool_frames,
            );
            (d.id, d.name.clone(), d.kind.clone(), c)
        })
        .collect();
    serde_json::json!({
        "domains": doms, "store_nodes": s.store_nodes, "grant_pins": s.grant_pins,
        "watches": s.watches, "ngm_tables": s.ngm_tables,
    })
}

fn read(hv: &Arc<Hypervisor>, path: &str) -> String {
    let req = Request::StoreRead { path: path.into() };
    match hv.handle(DOMID_TOOLSTACK, req).0 {
        Ok(Reply::Value(v)) => String::from_utf8(v).unwrap(),
        r => panic!("read {path}: {r:?}"),
    }
}

fn is_open(fd: i32) -> bool {
    sys::dup_fd(&fd).is_ok()
}

#[test]
fn an_adopted_hv_holds_what_the_running_one_held() {
    let (old, _domains) = running();
    let image = old.export().unwrap();
    // The image survives its own format: what the new program reads.
    let image: hv::core::HvImage =
        serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
    let named = image.fds();
    let mut sorted = named.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), named.len(), "a descriptor named twice");
    let adopted = Hypervisor::adopt(image).unwrap();
    assert_eq!(held(&adopted.hv), held(&old));
    assert_eq!(read(&adopted.hv, "/local/domain/1/x"), "carried");
    // Not started: dropping it leaves the originals to their owner.
    drop(adopted);
    assert!(named.iter().all(|&fd| is_open(fd)));
    assert_eq!(read(&old, "/local/domain/1/x"), "carried");
}

#[test]
fn an_image_it_cannot_take_is_refused_and_leaves_every_original_open() {
    let (old, _domains) = running();
    let named = old.export().unwrap().fds();
    // A descriptor named twice.
    let mut image = old.export().unwrap();
    image.domains[1].control = image.domains[0].control;
    let e = Hypervisor::adopt(image).err().unwrap();
    assert!(e.to_string().contains("twice"), "{e}");
    // One that is not open.
    let mut image = old.export().unwrap();
    image.channels[0].page = 1_000_000;
    let e = Hypervisor::adopt(image).err().unwrap();
    assert!(e.to_string().contains("descriptor 1000000"), "{e}");
    // Memory where a doorbell should be: not a sealed memfd.
    let mut image = old.export().unwrap();
    image.domains[0].memfds[0] = image.domains[0].bells[0];
    image.domains[0].bells[0] = old.export().unwrap().domains[0].memfds[0];
    let e = Hypervisor::adopt(image).err().unwrap();
    assert!(e.to_string().contains("memory descriptor"), "{e}");
    assert!(named.iter().all(|&fd| is_open(fd)));
    assert_eq!(read(&old, "/local/domain/1/x"), "carried");
}

/// The image, as bytes, with its traffic set aside (what hv's guardian
/// compares to tell whether a new record is needed).
fn shape(hv: &Hypervisor) -> Vec<u8> {
    let (mut image, _held) = hv.export_held().unwrap();
    let whole = serde_json::to_vec(&image).unwrap();
    let shape = image.with_traffic_aside(|i| serde_json::to_vec(i).unwrap());
    assert_eq!(serde_json::to_vec(&image).unwrap(), whole, "put back whole");
    shape
}

#[test]
fn traffic_does_not_change_an_images_shape_but_state_does() {
    let (hv, mut domains) = running();
    let d = domains[0].domid();
    let stats = format!("/local/domain/{d}/backend/vif/2/0/stats");
    domains[0].store_write(&stats, "rx 1").unwrap();
    let (before, whole) = (
        shape(&hv),
        serde_json::to_vec(&hv.export().unwrap()).unwrap(),
    );
    // Traffic: statistics published again, requests counted.
    domains[0].store_write(&stats, "rx 2").unwrap();
    assert_eq!(read(&hv, "/local/domain/1/x"), "carried");
    assert_ne!(serde_json::to_vec(&hv.export().unwrap()).unwrap(), whole);
    assert_eq!(shape(&hv), before, "only traffic moved");
    // State: a node's value.
    domains[0]
        .store_write(&format!("/local/domain/{d}/x"), "changed")
        .unwrap();
    assert_ne!(shape(&hv), before);
}

#[test]
fn a_crash_loses_no_store_change_answered_after_the_guardians_record() {
    let (old, mut domains) = running();
    let d = domains[0].domid();
    // The record the guardian holds: an image with a duplicate of every
    // descriptor it names, taken before the changes below.
    let (image, _held) = old.export_held().unwrap();
    let record = serde_json::to_string(&image).unwrap();
    let (home, other) = (
        format!("/local/domain/{d}/x"),
        format!("/local/domain/{d}/y"),
    );
    domains[0].store_write(&home, "changed after").unwrap();
    domains[0].store_write(&other, "made after").unwrap();
    domains[0].watch(&other, "u").unwrap();
    domains[0].unwatch(&home, "t").unwrap();
    domains[1].watch(&other, "v").unwrap();
    // Statistics are not kept: the domains publish them again.
    let stats = format!("/local/domain/{d}/stats");
    domains[0].store_write(&stats, "rx 1").unwrap();
    let image: hv::core::HvImage = serde_json::from_str(&record).unwrap();
    let adopted = Hypervisor::adopt(image).unwrap();
    assert_eq!(read(&adopted.hv, &home), "changed after");
    assert_eq!(read(&adopted.hv, &other), "made after");
    let (mut a, mut o) = (held(&adopted.hv), held(&old));
    assert_eq!(o["store_nodes"], a["store_nodes"].as_u64().unwrap() + 1);
    (a["store_nodes"], o["store_nodes"]) = (0.into(), 0.into());
    assert_eq!(
        a, o,
        "watches and everything else as the running hv has them"
    );
    // An adopted hv starts a journal of its own; an image of it has the
    // changes in its store, and none after.
    let again = adopted.hv.export().unwrap();
    assert_ne!(again.journal.unwrap().fd, image_journal_fd(&record));
    let adopted_again = Hypervisor::adopt(again).unwrap();
    assert_eq!(read(&adopted_again.hv, &home), "changed after");
}

fn image_journal_fd(record: &str) -> i32 {
    let image: hv::core::HvImage = serde_json::from_str(record).unwrap();
    image.journal.unwrap().fd
}
