use super::*;
use crate::{INTRODUCE_DOMAIN, RELEASE_DOMAIN, XENSTORE_ABS_PATH_MAX};

/// A store with the given guests introduced.
fn store_with(guests: &[DomId]) -> Store {
    let mut s = Store::new();
    for &d in guests {
        s.introduce_domain(d).unwrap();
    }
    s
}

/// (conn, path, token) of each event, for compact assertions.
fn seen(events: &[WatchEvent]) -> Vec<(ConnId, &str, &str)> {
    events
        .iter()
        .map(|e| (e.conn, e.path.as_str(), e.token.as_str()))
        .collect()
}

fn errno<T: std::fmt::Debug>(r: Result<T, StoreError>) -> &'static str {
    r.unwrap_err().errno()
}

#[test]
fn new_store_is_dom0_private() {
    let s = Store::new();
    assert_eq!(s.directory(0, "/").unwrap(), ["local"]);
    assert_eq!(s.directory(0, "/local").unwrap(), ["domain"]);
    assert_eq!(s.get_perms(0, "/local/domain").unwrap().to_string(), "n0");
    assert_eq!(errno(s.read(1, "/local")), "EACCES");
    assert_eq!(errno(s.directory(1, "/")), "EACCES");
    assert_eq!(s.counters().nodes.get(), 3);
}

#[test]
fn introduce_creates_a_home_owned_by_the_domain() {
    let mut s = Store::new();
    s.watch(0, 100, INTRODUCE_DOMAIN, "intro").unwrap();
    s.watch(0, 100, "/local/domain", "doms").unwrap();
    let ev = s.introduce_domain(3).unwrap();
    assert_eq!(
        seen(&ev),
        [
            (100, "/local/domain/3", "doms"),
            (100, INTRODUCE_DOMAIN, "intro")
        ]
    );
    assert_eq!(s.get_perms(3, "/local/domain/3").unwrap().to_string(), "n3");
    assert!(s.is_introduced(3));
    assert_eq!(s.node_usage(3), 1);
    // Guests cannot see each other's homes.
    s.introduce_domain(4).unwrap();
    assert_eq!(errno(s.read(4, "/local/domain/3")), "EACCES");
    assert_eq!(errno(s.introduce_domain(3)), "EEXIST");
}

#[test]
fn relative_and_absolute_paths_name_the_same_node() {
    let mut s = store_with(&[3]);
    s.write(3, "device/vif/0/state", b"1").unwrap();
    assert_eq!(
        s.read(3, "/local/domain/3/device/vif/0/state").unwrap(),
        b"1"
    );
    s.write(3, "/local/domain/3/device/vif/0/state", b"2")
        .unwrap();
    assert_eq!(s.read(3, "device/vif/0/state").unwrap(), b"2");
    assert_eq!(s.directory(3, "device/vif").unwrap(), ["0"]);
    // dom0's relative paths resolve under its own home.
    s.introduce_domain(0).unwrap();
    s.write(0, "name", b"Domain-0").unwrap();
    assert_eq!(s.read(0, "/local/domain/0/name").unwrap(), b"Domain-0");
}

#[test]
fn guests_stay_in_their_own_subtrees() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "secret", b"x").unwrap();
    // Writing outside its home, at the top or in another guest's home.
    assert_eq!(errno(s.write(1, "/tool/x", b"1")), "EACCES");
    assert_eq!(errno(s.write(1, "/local/domain/2/x", b"1")), "EACCES");
    assert_eq!(errno(s.mkdir(1, "/local/domain/2/dir")), "EACCES");
    assert_eq!(errno(s.rm(2, "/local/domain/1/secret")), "EACCES");
    assert_eq!(errno(s.rm(2, "/local/domain/1")), "EACCES");
    // Reading another guest's node, listing it, reading its permissions.
    assert_eq!(errno(s.read(2, "/local/domain/1/secret")), "EACCES");
    assert_eq!(errno(s.directory(2, "/local/domain/1")), "EACCES");
    assert_eq!(errno(s.get_perms(2, "/local/domain/1/secret")), "EACCES");
    // A missing node behind an unreadable one is EACCES too: no probing.
    assert_eq!(errno(s.read(2, "/local/domain/1/nothing")), "EACCES");
    // In its own tree, missing is ENOENT.
    assert_eq!(errno(s.read(1, "nothing")), "ENOENT");
    // dom0 can do anything.
    assert_eq!(s.read(0, "/local/domain/1/secret").unwrap(), b"x");
    s.write(0, "/local/domain/1/secret", b"y").unwrap();
    assert_eq!(s.read(1, "secret").unwrap(), b"y");
}

#[test]
fn backend_and_frontend_share_through_granted_permissions() {
    // dom2 is the driver domain, dom1 the guest with vif 0.
    let mut s = store_with(&[1, 2]);
    let be = "/local/domain/2/backend/vif/1/0";
    let fe = "/local/domain/1/device/vif/0";

    // The toolstack creates both directories and their links.
    s.write(0, &format!("{be}/frontend"), fe.as_bytes())
        .unwrap();
    s.set_perms(0, be, Perms::new(2, Perm::None).with(1, Perm::Read))
        .unwrap();
    s.set_perms(
        0,
        &format!("{be}/frontend"),
        Perms::new(2, Perm::None).with(1, Perm::Read),
    )
    .unwrap();
    s.write(0, &format!("{fe}/backend"), be.as_bytes()).unwrap();
    s.set_perms(0, fe, Perms::new(1, Perm::None).with(2, Perm::Read))
        .unwrap();
    s.set_perms(
        0,
        &format!("{fe}/backend"),
        Perms::new(1, Perm::None).with(2, Perm::Read),
    )
    .unwrap();

    // Each end writes its own directory; new nodes inherit the grant.
    s.write(2, &format!("{be}/feature-sg"), b"1").unwrap();
    s.switch_state(2, be, XenbusState::InitWait.as_u32())
        .unwrap();
    s.write(1, "device/vif/0/tx-ring-ref", b"8").unwrap();
    s.switch_state(1, "device/vif/0", XenbusState::Initialised.as_u32())
        .unwrap();
    assert_eq!(
        s.get_perms(2, &format!("{be}/state")).unwrap().to_string(),
        "n2 r1"
    );
    assert_eq!(
        s.get_perms(1, "device/vif/0/tx-ring-ref")
            .unwrap()
            .to_string(),
        "n1 r2"
    );

    // Each end reads the other's.
    assert_eq!(s.read(1, &format!("{be}/feature-sg")).unwrap(), b"1");
    assert_eq!(s.read_state(1, be).unwrap(), XenbusState::InitWait);
    assert_eq!(s.read_u32(2, &format!("{fe}/tx-ring-ref")).unwrap(), 8);
    assert_eq!(s.read_state(2, fe).unwrap(), XenbusState::Initialised);
    assert_eq!(s.read_str(2, &format!("{fe}/backend")).unwrap(), be);

    // Neither writes the other's, nor can a bystander read either.
    assert_eq!(errno(s.write(1, &format!("{be}/state"), b"4")), "EACCES");
    assert_eq!(errno(s.write(2, &format!("{fe}/state"), b"4")), "EACCES");
    assert_eq!(errno(s.write(1, &format!("{be}/new"), b"1")), "EACCES");
    s.introduce_domain(3).unwrap();
    assert_eq!(errno(s.read(3, &format!("{be}/state"))), "EACCES");
    assert_eq!(errno(s.read(3, &format!("{fe}/state"))), "EACCES");
}

#[test]
fn a_guest_writes_where_dom0_granted_it_write() {
    let mut s = store_with(&[1]);
    s.mkdir(0, "/shared").unwrap();
    s.set_perms(0, "/shared", Perms::new(0, Perm::None).with(1, Perm::Write))
        .unwrap();
    // Write but not read: it may create, not read back the directory.
    s.write(1, "/shared/drop/box", b"hi").unwrap();
    assert_eq!(errno(s.directory(1, "/shared")), "EACCES");
    // What it created it owns, so it may read that.
    assert_eq!(s.read(1, "/shared/drop/box").unwrap(), b"hi");
    let p = s.get_perms(1, "/shared/drop/box").unwrap();
    assert_eq!(p.owner, 1);
    assert_eq!(s.node_usage(1), 3, "home, drop and box");
    // Intermediate parents need write on the nearest existing ancestor.
    assert_eq!(errno(s.write(1, "/other/a/b", b"1")), "EACCES");
    assert_eq!(errno(s.read(0, "/other")), "ENOENT");
}

#[test]
fn dom0_creations_keep_the_ancestor_owner() {
    let mut s = store_with(&[5]);
    s.write(0, "/local/domain/5/name", b"guest").unwrap();
    assert_eq!(s.get_perms(0, "/local/domain/5/name").unwrap().owner, 5);
    assert_eq!(s.read(5, "name").unwrap(), b"guest");
    s.write(0, "/tool/x", b"1").unwrap();
    assert_eq!(s.get_perms(0, "/tool/x").unwrap().owner, 0);
}

#[test]
fn invalid_paths_are_rejected_everywhere() {
    let mut s = store_with(&[1]);
    let too_long_abs = format!("/{}", "a".repeat(XENSTORE_ABS_PATH_MAX));
    let too_long_rel = "a".repeat(crate::XENSTORE_REL_PATH_MAX + 1);
    for bad in [
        "",
        "/a b",
        "bad.char",
        "/x//y",
        "x//y",
        "/x/",
        "x/",
        "/ümlaut",
        too_long_abs.as_str(),
        too_long_rel.as_str(),
    ] {
        assert_eq!(errno(s.write(1, bad, b"1")), "EINVAL", "write {bad:?}");
        assert_eq!(errno(s.read(0, bad)), "EINVAL", "read {bad:?}");
        assert_eq!(errno(s.mkdir(0, bad)), "EINVAL", "mkdir {bad:?}");
        assert_eq!(errno(s.rm(0, bad)), "EINVAL", "rm {bad:?}");
        assert_eq!(errno(s.watch(1, 1, bad, "t")), "EINVAL", "watch {bad:?}");
    }
    // Special paths only mean something to watches and permissions.
    assert_eq!(errno(s.watch(1, 1, "@bogus", "t")), "EINVAL");
    assert!(s.watch(0, 1, RELEASE_DOMAIN, "t").is_ok());
    // A long path's error does not echo the whole path.
    let msg = s.read(0, &too_long_abs).unwrap_err().to_string();
    assert!(msg.len() < 600, "{msg}");
    assert!(msg.contains("3073 bytes"), "{msg}");
}

#[test]
fn oversize_values_are_rejected() {
    let mut s = Store::with_limits(StoreLimits {
        max_value_len: 100,
        ..StoreLimits::default()
    });
    s.introduce_domain(1).unwrap();
    s.write(1, "ok", &[b'x'; 100]).unwrap();
    let e = s.write(1, "big", &[b'x'; 101]).unwrap_err();
    assert_eq!(e.errno(), "E2BIG");
    assert!(e.to_string().contains("101 bytes"), "{e}");
    // dom0 is exempt from the quota, not from the protocol limit.
    s.write(0, "/big", &[b'x'; XENSTORE_PAYLOAD_MAX]).unwrap();
    assert_eq!(
        errno(s.write(0, "/bigger", &[b'x'; XENSTORE_PAYLOAD_MAX + 1])),
        "E2BIG"
    );
    // Nothing was created by the refused writes.
    assert_eq!(errno(s.read(1, "big")), "ENOENT");
}

#[test]
fn node_quota_stops_one_guest_and_not_the_others() {
    let mut s = Store::with_limits(StoreLimits {
        max_nodes_per_domain: 5,
        ..StoreLimits::default()
    });
    s.introduce_domain(1).unwrap();
    s.introduce_domain(2).unwrap();
    // Home counts as one; four more fit.
    s.write(1, "a/b/c", b"1").unwrap();
    s.write(1, "d", b"1").unwrap();
    let e = s.write(1, "e", b"1").unwrap_err();
    assert_eq!(e.errno(), "EQUOTA");
    assert!(e.to_string().contains("domain 1"), "{e}");
    // A multi-node write that would overflow creates nothing.
    s.rm(1, "d").unwrap();
    assert_eq!(errno(s.write(1, "x/y", b"1")), "EQUOTA");
    assert_eq!(errno(s.read(1, "x")), "ENOENT");
    // Updating existing nodes still works.
    s.write(1, "a/b/c", b"2").unwrap();
    // Other domains are served as usual.
    s.write(2, "a/b/c/d", b"1").unwrap();
    assert_eq!(s.read(2, "a/b/c/d").unwrap(), b"1");
    for i in 0..20 {
        s.write(0, &format!("/tool/n{i}"), b"1").unwrap();
    }
    // Freeing nodes frees quota.
    s.rm(1, "a").unwrap();
    assert_eq!(s.node_usage(1), 1);
    s.write(1, "x/y", b"1").unwrap();
}

#[test]
fn a_domains_own_quota_replaces_the_default_until_it_is_released() {
    let mut s = Store::with_limits(StoreLimits {
        max_nodes_per_domain: 2,
        max_watches_per_domain: 1,
        ..StoreLimits::default()
    });
    s.introduce_domain(1).unwrap();
    s.introduce_domain(2).unwrap();
    s.set_quota(1, 4, 2);
    assert_eq!(s.quota(1), (4, 2));
    // Home counts as one; three more fit for domain 1, one for domain 2.
    s.write(1, "a/b/c", b"1").unwrap();
    assert_eq!(errno(s.write(1, "d", b"1")), "EQUOTA");
    s.write(2, "a", b"1").unwrap();
    assert_eq!(errno(s.write(2, "b", b"1")), "EQUOTA");
    s.watch(1, 10, "a", "t1").unwrap();
    s.watch(1, 10, "a", "t2").unwrap();
    assert_eq!(errno(s.watch(1, 10, "a", "t3")), "EQUOTA");
    // A later domain with the same id starts from the defaults.
    s.release_domain(1);
    s.introduce_domain(1).unwrap();
    assert_eq!(s.quota(1), (2, 1));
}

#[test]
fn watch_quota_and_duplicates() {
    let mut s = Store::with_limits(StoreLimits {
        max_watches_per_domain: 2,
        ..StoreLimits::default()
    });
    s.introduce_domain(1).unwrap();
    s.watch(1, 10, "a", "t1").unwrap();
    assert_eq!(errno(s.watch(1, 10, "a", "t1")), "EEXIST");
    // Same node, absolute form: still a duplicate.
    assert_eq!(errno(s.watch(1, 10, "/local/domain/1/a", "t1")), "EEXIST");
    s.watch(1, 11, "a", "t1").unwrap();
    assert_eq!(errno(s.watch(1, 12, "b", "t")), "EQUOTA");
    assert_eq!(s.watch_usage(1), 2);
    // dom0 is exempt.
    for i in 0..10 {
        s.watch(0, 1, "/", &format!("t{i}")).unwrap();
    }
    s.unwatch(1, 10, "/local/domain/1/a", "t1").unwrap();
    assert_eq!(errno(s.unwatch(1, 10, "a", "t1")), "ENOENT");
    s.watch(1, 12, "b", "t").unwrap();
    // Tokens must fit the wire format.
    assert_eq!(errno(s.watch(0, 1, "/", "nul\0byte")), "EINVAL");
    assert_eq!(errno(s.watch(0, 1, "/", &"t".repeat(5000))), "E2BIG");
}

#[test]
fn registering_a_watch_fires_once() {
    let mut s = store_with(&[1]);
    let ev = s.watch(1, 7, "device", "tok").unwrap();
    assert_eq!(
        ev,
        [WatchEvent {
            conn: 7,
            domid: 1,
            path: "device".into(),
            token: "tok".into(),
        }]
    );
    assert_eq!(s.counters().watch_events.get(), 1);
}

#[test]
fn watches_fire_for_changes_at_or_below_only() {
    let mut s = store_with(&[1]);
    s.mkdir(1, "device/vif/0").unwrap();
    s.mkdir(1, "device/vif/1").unwrap();
    s.watch(1, 7, "/local/domain/1/device/vif/0", "vif0")
        .unwrap();
    s.watch(1, 7, "/local/domain/1/device", "dev").unwrap();

    // Below the watch: fires, reporting the changed path, once per watch.
    let ev = s.write(1, "device/vif/0/a/b/state", b"1").unwrap();
    assert_eq!(
        seen(&ev),
        [
            (7, "/local/domain/1/device/vif/0/a/b/state", "vif0"),
            (7, "/local/domain/1/device/vif/0/a/b/state", "dev"),
        ]
    );
    // At the watched node itself.
    let ev = s.write(1, "device/vif/0", b"x").unwrap();
    assert_eq!(ev.len(), 2);
    // A sibling, or a name that merely shares a prefix: only the parent watch.
    let ev = s.write(1, "device/vif/1/state", b"1").unwrap();
    assert_eq!(
        seen(&ev),
        [(7, "/local/domain/1/device/vif/1/state", "dev")]
    );
    let ev = s.write(1, "device/vif/0-extra", b"1").unwrap();
    assert_eq!(
        seen(&ev),
        [(7, "/local/domain/1/device/vif/0-extra", "dev")]
    );
    // Above the watch: nothing.
    let ev = s.write(1, "name", b"g").unwrap();
    assert!(ev.is_empty());
    // mkdir of something that exists changes nothing and fires nothing.
    assert!(s.mkdir(1, "device/vif/0").unwrap().is_empty());
    // Permission changes fire.
    let ev = s
        .set_perms(1, "device/vif/0", Perms::new(1, Perm::None))
        .unwrap();
    assert_eq!(ev.len(), 2);
}

#[test]
fn relative_watches_report_relative_paths() {
    let mut s = store_with(&[4]);
    s.watch(4, 1, "device/vif", "rel").unwrap();
    s.watch(4, 1, "/local/domain/4/device/vif", "abs").unwrap();
    let ev = s.write(4, "device/vif/0/state", b"1").unwrap();
    assert_eq!(
        seen(&ev),
        [
            (1, "device/vif/0/state", "rel"),
            (1, "/local/domain/4/device/vif/0/state", "abs"),
        ]
    );
    // A removal that takes out the watched node reports the watch's path.
    let ev = s.rm(4, "device").unwrap();
    assert_eq!(
        seen(&ev),
        [
            (1, "device/vif", "rel"),
            (1, "/local/domain/4/device/vif", "abs")
        ]
    );
}

#[test]
fn watch_events_do_not_leak_to_domains_without_read() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "private/key", b"1").unwrap();
    // dom2 may register a watch anywhere, but hears only what it may read.
    s.watch(2, 20, "/local/domain/1", "spy").unwrap();
    s.watch(0, 1, "/local/domain/1", "tool").unwrap();
    let ev = s.write(1, "private/key", b"2").unwrap();
    assert_eq!(seen(&ev), [(1, "/local/domain/1/private/key", "tool")]);
    let ev = s.rm(1, "private").unwrap();
    assert_eq!(seen(&ev), [(1, "/local/domain/1/private", "tool")]);

    // Once granted read, it hears; the grant itself is a change it sees.
    s.write(1, "public", b"1").unwrap();
    let ev = s
        .set_perms(1, "public", Perms::new(1, Perm::None).with(2, Perm::Read))
        .unwrap();
    assert_eq!(
        seen(&ev),
        [
            (20, "/local/domain/1/public", "spy"),
            (1, "/local/domain/1/public", "tool")
        ]
    );
    let ev = s.write(1, "public", b"2").unwrap();
    assert_eq!(ev.len(), 2);
    // Revoking is announced to those who could read before.
    let ev = s.set_perms(1, "public", Perms::new(1, Perm::None)).unwrap();
    assert_eq!(ev.len(), 2);
    let ev = s.write(1, "public", b"3").unwrap();
    assert_eq!(seen(&ev), [(1, "/local/domain/1/public", "tool")]);
}

#[test]
fn removal_fires_above_and_inside_the_subtree() {
    let mut s = store_with(&[1]);
    s.write(1, "a/b/c", b"1").unwrap();
    s.watch(1, 1, "/local/domain/1", "above").unwrap();
    s.watch(1, 1, "a/b", "at").unwrap();
    s.watch(1, 1, "a/b/c", "inside").unwrap();
    s.watch(1, 1, "a/b/c/never/existed", "deep").unwrap();
    s.watch(1, 1, "z", "elsewhere").unwrap();
    let ev = s.rm(1, "a/b").unwrap();
    assert_eq!(
        seen(&ev),
        [
            (1, "/local/domain/1/a/b", "above"),
            (1, "a/b", "at"),
            (1, "a/b/c", "inside"),
            (1, "a/b/c/never/existed", "deep"),
        ]
    );
    assert_eq!(errno(s.read(1, "a/b/c")), "ENOENT");
    assert_eq!(s.directory(1, "a").unwrap(), Vec::<String>::new());
    // Removing what is already gone, under an existing parent, is fine.
    assert!(s.rm(1, "a/b").unwrap().is_empty());
    assert_eq!(errno(s.rm(1, "q/r")), "ENOENT");
}

#[test]
fn removal_checks_read_against_the_removed_nodes() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "shared/open", b"1").unwrap();
    s.write(1, "shared/closed", b"1").unwrap();
    s.set_perms(1, "shared", Perms::new(1, Perm::None).with(2, Perm::Read))
        .unwrap();
    s.set_perms(
        1,
        "shared/open",
        Perms::new(1, Perm::None).with(2, Perm::Read),
    )
    .unwrap();
    s.watch(2, 2, "/local/domain/1/shared/open", "open")
        .unwrap();
    s.watch(2, 2, "/local/domain/1/shared/closed", "closed")
        .unwrap();
    s.watch(2, 2, "/local/domain/1/shared", "dir").unwrap();
    let ev = s.rm(1, "shared").unwrap();
    assert_eq!(
        seen(&ev),
        [
            (2, "/local/domain/1/shared/open", "open"),
            (2, "/local/domain/1/shared", "dir")
        ]
    );
}

#[test]
fn the_root_cannot_be_removed() {
    let mut s = store_with(&[1]);
    let e = s.rm(0, "/").unwrap_err();
    assert_eq!(e.errno(), "EINVAL");
    assert!(e.to_string().contains("root"), "{e}");
    assert_eq!(errno(s.rm(1, "/")), "EINVAL");
    assert_eq!(s.directory(0, "/").unwrap(), ["local"]);
}

#[test]
fn set_perms_rules() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "n", b"1").unwrap();
    // Only the owner or dom0.
    assert_eq!(
        errno(s.set_perms(2, "/local/domain/1/n", Perms::new(2, Perm::Both))),
        "EACCES"
    );
    // A guest may not give its node away.
    assert_eq!(
        errno(s.set_perms(1, "n", Perms::new(2, Perm::Both))),
        "EACCES"
    );
    // dom0 may, and the quota charge moves with it.
    s.set_perms(0, "/local/domain/1/n", Perms::new(2, Perm::None))
        .unwrap();
    assert_eq!((s.node_usage(1), s.node_usage(2)), (1, 2));
    assert_eq!(s.read(2, "/local/domain/1/n").unwrap(), b"1");
    assert_eq!(errno(s.read(1, "n")), "EACCES");
    // Missing node.
    assert_eq!(
        errno(s.set_perms(1, "none", Perms::new(1, Perm::None))),
        "ENOENT"
    );
    // Oversized list.
    let mut huge = Perms::new(1, Perm::None);
    huge.acl = (0..1000).map(|d| (d, Perm::Read)).collect();
    assert_eq!(errno(s.set_perms(0, "/local/domain/1", huge)), "E2BIG");
}

#[test]
fn release_domain_cleans_up_everything() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "device/vif/0/state", b"4").unwrap();
    s.set_perms(
        1,
        "device/vif/0",
        Perms::new(1, Perm::None).with(2, Perm::Read),
    )
    .unwrap();
    s.set_perms(
        1,
        "device/vif/0/state",
        Perms::new(1, Perm::None).with(2, Perm::Read),
    )
    .unwrap();
    // Something it owns outside its home, and a grant naming it.
    s.mkdir(0, "/shared").unwrap();
    s.set_perms(0, "/shared", Perms::new(0, Perm::None).with(1, Perm::Write))
        .unwrap();
    s.write(1, "/shared/left", b"1").unwrap();
    s.write(2, "granted", b"1").unwrap();
    s.set_perms(2, "granted", Perms::new(2, Perm::None).with(1, Perm::Read))
        .unwrap();

    s.watch(1, 10, "device", "own").unwrap();
    s.watch(1, 11, "/", "own-root").unwrap();
    s.watch(2, 20, "/local/domain/1/device/vif/0/state", "backend")
        .unwrap();
    s.watch(0, 1, RELEASE_DOMAIN, "rel").unwrap();
    s.watch(2, 20, RELEASE_DOMAIN, "no-perm").unwrap();
    assert_eq!(s.watch_usage(1), 2);

    let ev = s.release_domain(1);
    assert_eq!(
        seen(&ev),
        [
            (20, "/local/domain/1/device/vif/0/state", "backend"),
            (1, RELEASE_DOMAIN, "rel")
        ]
    );
    assert_eq!(errno(s.read(0, "/local/domain/1")), "ENOENT");
    assert_eq!(s.watch_usage(1), 0);
    assert_eq!(s.node_usage(1), 0);
    assert!(!s.is_introduced(1));
    // Leftovers pass to dom0; grants naming the dead domain are gone.
    assert_eq!(s.get_perms(0, "/shared/left").unwrap().to_string(), "n0");
    assert_eq!(
        s.get_perms(0, "/local/domain/2/granted")
            .unwrap()
            .to_string(),
        "n2"
    );
    assert_eq!(s.get_perms(0, "/shared").unwrap().to_string(), "n0");

    // Its watches are gone: nothing more reaches conns 10 and 11.
    let ev = s.write(0, "/x", b"1").unwrap();
    assert!(ev.iter().all(|e| e.domid != 1), "{ev:?}");
    // The id can be reused cleanly.
    s.introduce_domain(1).unwrap();
    assert_eq!(errno(s.read(1, "/shared/left")), "EACCES");
    // Releasing dom0 or an unknown domain is harmless.
    assert!(s.release_domain(0).is_empty());
    assert!(s.release_domain(9).is_empty());
}

#[test]
fn special_watches_need_permission() {
    let mut s = store_with(&[2]);
    s.watch(2, 20, INTRODUCE_DOMAIN, "t").unwrap();
    assert!(s.introduce_domain(3).unwrap().is_empty());
    assert_eq!(errno(s.get_perms(2, INTRODUCE_DOMAIN)), "EACCES");
    assert_eq!(
        errno(s.set_perms(2, INTRODUCE_DOMAIN, Perms::new(2, Perm::Read))),
        "EACCES"
    );
    s.set_perms(
        0,
        INTRODUCE_DOMAIN,
        Perms::new(0, Perm::None).with(2, Perm::Read),
    )
    .unwrap();
    assert_eq!(
        s.get_perms(2, INTRODUCE_DOMAIN).unwrap().to_string(),
        "n0 r2"
    );
    assert_eq!(
        seen(&s.introduce_domain(4).unwrap()),
        [(20, INTRODUCE_DOMAIN, "t")]
    );
}

#[test]
fn drop_connection_forgets_its_watches_only() {
    let mut s = store_with(&[1]);
    s.watch(1, 10, "a", "t").unwrap();
    s.watch(1, 11, "a", "t").unwrap();
    s.drop_connection(10);
    assert_eq!(s.watch_usage(1), 1);
    assert_eq!(s.counters().watches.get(), 1);
    let ev = s.write(1, "a", b"1").unwrap();
    assert_eq!(seen(&ev), [(11, "a", "t")]);
}

#[test]
fn xenbus_state_round_trip_and_garbage() {
    let mut s = store_with(&[1]);
    let dev = "device/vif/0";
    for st in XenbusState::ALL {
        s.switch_state(1, dev, st.as_u32()).unwrap();
        assert_eq!(s.read_state(1, dev).unwrap(), st);
    }
    assert_eq!(s.read(1, "device/vif/0/state").unwrap(), b"8");
    // Out of range is refused and the old state stays.
    assert_eq!(errno(s.switch_state(1, dev, 9)), "EINVAL");
    assert_eq!(errno(s.switch_state(1, dev, u32::MAX)), "EINVAL");
    assert_eq!(s.read_state(1, dev).unwrap(), XenbusState::Reconfigured);
    // Garbage in the node is an error naming the path and value.
    for garbage in [
        &b""[..],
        b"4 ",
        b" 4",
        b"+4",
        b"-1",
        b"4\0",
        b"four",
        b"\xff",
        b"99999999999",
        b"9",
    ] {
        s.write(1, "device/vif/0/state", garbage).unwrap();
        let e = s.read_state(1, dev).unwrap_err();
        assert_eq!(e.errno(), "EINVAL", "{garbage:?}");
        assert!(e.to_string().contains("device/vif/0/state"), "{e}");
    }
    // Missing is not Unknown: it is NotFound.
    assert_eq!(errno(s.read_state(1, "device/vif/7")), "ENOENT");
    // The device path is validated like any path.
    assert_eq!(errno(s.switch_state(1, "", 1)), "EINVAL");
    assert_eq!(errno(s.switch_state(1, "dev/", 1)), "EINVAL");
}

#[test]
fn typed_reads_are_strict() {
    let mut s = store_with(&[1]);
    s.write(1, "n", b"4294967295").unwrap();
    assert_eq!(s.read_u32(1, "n").unwrap(), u32::MAX);
    s.write(1, "n", b"4294967296").unwrap();
    let e = s.read_u32(1, "n").unwrap_err();
    assert_eq!(e.errno(), "EINVAL");
    assert!(e.to_string().contains("4294967296"), "{e}");
    s.write(1, "s", "héllo".as_bytes()).unwrap();
    assert_eq!(s.read_str(1, "s").unwrap(), "héllo");
    s.write(1, "s", b"\xff\xfe").unwrap();
    assert_eq!(errno(s.read_str(1, "s")), "EINVAL");
}

#[test]
fn snapshot_lists_readable_nodes_depth_first() {
    let mut s = store_with(&[1, 2]);
    s.write(1, "b", b"2").unwrap();
    s.write(1, "a/x", b"1").unwrap();
    s.write(1, "a-z", b"3").unwrap();
    s.write(2, "hidden", b"1").unwrap();
    let all = s.snapshot(0, "/local/domain").unwrap();
    let paths: Vec<&str> = all.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/local/domain",
            "/local/domain/1",
            "/local/domain/1/a",
            "/local/domain/1/a/x",
            "/local/domain/1/a-z",
            "/local/domain/1/b",
            "/local/domain/2",
            "/local/domain/2/hidden",
        ]
    );
    assert_eq!(all[3].value_lossy(), "1");
    // A guest sees only what it may read, even from the top.
    let mine = s.snapshot(1, "/").unwrap();
    assert_eq!(mine.len(), 5);
    assert!(mine.iter().all(|e| e.path.starts_with("/local/domain/1")));
    assert_eq!(errno(s.snapshot(0, "/nothing")), "ENOENT");
}

#[test]
fn directory_lists_sorted_child_names() {
    let mut s = store_with(&[1]);
    for name in ["c", "a", "b", "10", "2"] {
        s.mkdir(1, &format!("d/{name}")).unwrap();
    }
    s.write(1, "d/a/deep", b"").unwrap();
    assert_eq!(s.directory(1, "d").unwrap(), ["10", "2", "a", "b", "c"]);
    s.rm(1, "d/b").unwrap();
    assert_eq!(s.directory(1, "d").unwrap(), ["10", "2", "a", "c"]);
}

#[test]
fn counters_count_each_error_kind() {
    let mut s = Store::with_limits(StoreLimits {
        max_nodes_per_domain: 1,
        max_watches_per_domain: 1,
        max_value_len: 10,
    });
    s.introduce_domain(1).unwrap();
    let before = s.counters().snapshot();
    assert_eq!(before.ops, 1);
    assert_eq!(before.nodes, 4);

    let _ = s.read(1, "/local/domain");
    let _ = s.write(1, "/x", b"1");
    let _ = s.read(1, "missing");
    let _ = s.unwatch(1, 1, "missing", "t");
    let _ = s.read(1, "bad//path");
    let _ = s.rm(0, "/");
    let _ = s.read_u32(0, "/local/domain/1");
    let _ = s.switch_state(0, "/local/domain/1", 42);
    let _ = s.write(1, "v", &[0; 11]);
    let _ = s.write(1, "q", b"1");
    s.watch(1, 1, "w", "t").unwrap();
    let _ = s.watch(1, 1, "w", "t");
    let _ = s.watch(1, 1, "w2", "t");

    let c = s.counters().snapshot();
    assert_eq!(c.permission_denied, 2);
    assert_eq!(c.not_found, 2);
    assert_eq!(c.invalid_path, 2);
    assert_eq!(c.invalid_value, 2);
    assert_eq!(c.too_big, 1);
    assert_eq!(c.quota, 2);
    assert_eq!(c.exists, 1);
    assert_eq!(c.ops, before.ops + 13);
    assert_eq!(c.watches, 1);
    assert_eq!(c.watch_events, before.watch_events + 1);
    assert_eq!(c.nodes, 4);
}

#[test]
fn store_can_be_shared_by_the_daemon() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
    assert_send_sync::<StoreError>();
}

/// Checks the bookkeeping the store keeps beside its tree.
fn check_invariants(s: &Store) {
    assert!(s.nodes.contains_key("/"), "root vanished");
    assert_eq!(s.counters.nodes.get() as usize, s.nodes.len());
    assert_eq!(s.owned_nodes.values().sum::<usize>(), s.nodes.len());
    for (path, node) in &s.nodes {
        if let Some(p) = parent(path) {
            let parent = s.nodes.get(p).unwrap_or_else(|| panic!("orphan {path}"));
            assert!(parent.children.contains(basename(path)), "{path} unlisted");
        }
        for child in &node.children {
            assert!(s.nodes.contains_key(&join(path, child)), "dangling {child}");
        }
    }
    for (&d, &n) in &s.owned_nodes {
        let owned = s.nodes.values().filter(|x| x.perms.owner == d).count();
        assert_eq!(owned, n, "quota count for domain {d}");
    }
    assert_eq!(s.counters.watches.get() as usize, s.watches.len());
    assert_eq!(s.watch_use.values().sum::<usize>(), s.watches.len());
}

#[test]
fn random_hostile_operations_keep_the_books_straight() {
    let mut s = Store::with_limits(StoreLimits {
        max_nodes_per_domain: 12,
        max_watches_per_domain: 4,
        max_value_len: 64,
    });
    let parts = [
        "a",
        "b",
        "a/b",
        "/local/domain/1/x",
        "/local/domain/2",
        "/",
        "//",
        "x/",
        "@releaseDomain",
        "/local",
        "c/d/e",
        "/local/domain/3/c",
        "../x",
    ];
    // xorshift64: deterministic, no dependency.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut ok = 0;
    for _ in 0..5000 {
        let who = next(4) as DomId;
        let path = parts[next(parts.len())];
        let conn = next(3) as ConnId + u64::from(who) * 10;
        let r = match next(12) {
            0 => s.write(who, path, &vec![b'v'; next(80)]),
            1 => s.mkdir(who, path),
            2 => s.rm(who, path),
            3 => s.read(who, path).map(|_| Vec::new()),
            4 => s.directory(who, path).map(|_| Vec::new()),
            5 => s.set_perms(
                who,
                path,
                Perms::new(next(4) as DomId, Perm::Read).with(next(4) as DomId, Perm::Write),
            ),
            6 => s.watch(who, conn, path, "t"),
            7 => s.unwatch(who, conn, path, "t").map(|_| Vec::new()),
            8 => s.introduce_domain(1 + next(3) as DomId),
            9 => Ok(s.release_domain(next(4) as DomId)),
            10 => s.switch_state(who, path, next(10) as u32),
            _ => {
                s.drop_connection(conn);
                Ok(Vec::new())
            }
        };
        ok += usize::from(r.is_ok());
        check_invariants(&s);
        // Only the domain itself adds watches, so this bound is strict (dom0
        // may hand nodes to a guest beyond its node quota).
        for d in 1..4 {
            assert!(s.watch_usage(d) <= 4, "domain {d} over its watch quota");
        }
    }
    // The mix must exercise success paths too, not only refusals.
    assert!(ok > 1000, "only {ok} operations succeeded");
    assert!(s.counters().quota.get() > 0 && s.counters().permission_denied.get() > 0);
}

#[test]
fn a_carried_store_keeps_text_as_text_and_reads_the_older_all_bytes_form() {
    let mut s = store_with(&[]);
    s.write(0, "/text", b"Connected 4").unwrap();
    s.write(0, "/bytes", &[0xff, 0, 7]).unwrap();
    let mut carried = serde_json::to_value(&s).unwrap();
    assert_eq!(carried["nodes"]["/text"]["value"], "Connected 4");
    let bytes = serde_json::json!([255, 0, 7]);
    assert_eq!(carried["nodes"]["/bytes"]["value"], bytes);
    let back: Store = serde_json::from_value(carried.clone()).unwrap();
    assert_eq!(back.read(0, "/text").unwrap(), b"Connected 4");
    assert_eq!(back.read(0, "/bytes").unwrap(), [0xff, 0, 7]);
    // The form before values were written as text: every one a list.
    carried["nodes"]["/text"]["value"] = serde_json::json!(b"Connected 4".to_vec());
    let older: Store = serde_json::from_value(carried).unwrap();
    assert_eq!(older.read(0, "/text").unwrap(), b"Connected 4");
}

#[test]
fn a_stores_shape_is_the_store_but_its_counters_and_statistics() {
    let mut s = store_with(&[1]);
    s.write(1, "/local/domain/1/stats", b"rx 1").unwrap();
    s.write(1, "/local/domain/1/state", b"4").unwrap();
    s.watch(1, 0, "/local/domain/1/state", "t").unwrap();
    let mut whole = serde_json::to_value(&s).unwrap();
    whole.as_object_mut().unwrap().remove("counters");
    let stats = whole["nodes"]
        .as_object_mut()
        .unwrap()
        .remove("/local/domain/1/stats");
    assert!(stats.is_some());
    assert_eq!(serde_json::to_value(s.shape()).unwrap(), whole);
}
