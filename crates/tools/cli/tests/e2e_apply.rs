//! `splitnet apply` and SIGHUP on a running instance: guests and vifs come
//! and go while a TCP stream through guest1 carries on; what cannot change
//! in place, and a file with errors, are refused whole with every entry
//! named; a guest is re-created only when --restart names it; nothing is
//! left of what was removed. Needs root; run one test at a time.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const GUEST3: &str =
    "\n[[domain]]\nname = \"guest3\"\nkind = \"guest\"\naddress = \"10.77.0.3/24\"\n";

/// The default topology with guest3 at the end and a second vif on guest2.
fn grown_text() -> String {
    let base = toolstack::topology::DEFAULT_TOML.replacen(
        "address = \"10.77.0.2/24\"",
        "address = \"10.77.0.2/24\"\nvif = [\"\", \"mac=00:16:3e:00:00:77\"]",
        1,
    );
    format!("{base}{GUEST3}")
}

fn write(env: &Env, name: &str, text: &str) -> String {
    let p = env.run_dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// guest1's iperf3 stream finished, and finished well.
fn ran_to_its_end(stream: &mut Background) {
    assert!(
        stream.wait_exit(Duration::from_secs(40)),
        "iperf3 did not finish"
    );
    let code = stream.0.wait().unwrap();
    assert!(code.success(), "guest1's stream broke: {code}");
}

fn pid_of(env: &Env, d: &str) -> Value {
    domain(&env.status(), d)["pid"].clone()
}

/// `apply` with `args` fails; its error text.
fn refused(env: &Env, args: &[&str]) -> String {
    let o = env.splitnet(args);
    assert!(!o.status.success(), "{args:?} was not refused");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The domains and their processes, and the vifs: what a refused apply
/// must leave as it was.
fn shape(env: &Env) -> (Vec<(Value, Value)>, usize) {
    let st = env.status();
    let doms = st["domains"].as_array().unwrap();
    let doms = doms.iter().map(|d| (d["name"].clone(), d["pid"].clone()));
    (doms.collect(), st["vifs"].as_array().unwrap().len())
}

/// Refused whole, each entry named, and nothing changes: a file with two
/// errors, a driver domain's change, a guest's change without --restart.
/// Returns that last file.
fn refusals_change_nothing(env: &Env) -> String {
    let before = shape(env);
    let two_errors = grown_text().replace("10.77.0.3/24", "10.77.0.3/99")
        + "\n[[domain]]\nname = \"guest1\"\nkind = \"guest\"\n";
    let e = refused(
        env,
        &["apply", "--config", &write(env, "bad.toml", &two_errors)],
    );
    assert!(
        e.contains("guest3") && e.contains("\"guest1\" is used twice"),
        "{e}"
    );
    let driver = grown_text().replacen(
        "memory_frames = 4096",
        "memory_frames = 4096\nspin_us = 7",
        1,
    );
    let e = refused(
        env,
        &["apply", "--config", &write(env, "drv.toml", &driver)],
    );
    assert!(
        e.contains("domain drv: a driver domain's settings changed") && e.contains("--restart drv"),
        "{e}"
    );
    let moved = grown_text().replace("10.77.0.3/24", "10.77.0.13/24");
    let moved = write(env, "moved.toml", &moved);
    let e = refused(env, &["apply", "--config", &moved]);
    assert!(
        e.contains("guest3") && e.contains("--restart guest3"),
        "{e}"
    );
    assert_eq!(shape(env), before, "a refused apply changed something");
    env.ping("guest3", "10.77.0.254", 1);
    moved
}

/// guest3's address changed: re-created when --restart names it.
fn restart_recreates_guest3(env: &Env, moved: &str) {
    let g3 = pid_of(env, "guest3");
    env.ok(&["apply", "--config", moved, "--restart", "guest3"]);
    assert_ne!(pid_of(env, "guest3"), g3);
    env.ping("guest3", "10.77.0.254", 3);
    let addrs = env.ok(&["exec", "guest3", "--", "ip", "-br", "addr"]);
    assert!(addrs.contains("10.77.0.13/24"), "{addrs}");
}

#[test]
fn apply_adds_and_removes_guests_and_vifs_and_leaves_the_rest_running() {
    let Some(env) = Env::new("apply") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let before = &held.status;
    let g1 = pid_of(&env, "guest1");
    let (_srv, mut stream) = env.stream_to_wire("guest1", 25);
    let grown = write(&env, "grown.toml", &grown_text());

    // The plan first: nothing changes.
    let plan = env.ok(&["apply", "--config", &grown, "--dry-run"]);
    assert_eq!(
        plan,
        "add vif 1 of guest2 on drv (MAC 00:16:3e:00:00:77)\nadd guest guest3\n"
    );
    assert!(domain(&env.status(), "guest3").is_null());

    let out = env.ok(&["apply", "--config", &grown]);
    assert!(
        out.contains("add guest guest3") && out.contains("applied in"),
        "{out}"
    );
    env.ping("guest3", "10.77.0.254", 3);
    let links = env.ok(&["exec", "guest2", "--", "ip", "-br", "link"]);
    assert!(links.contains("eth1"), "{links}");
    assert_eq!(pid_of(&env, "guest1"), g1, "guest1 was not touched");
    assert_eq!(
        env.ok(&["apply", "--config", &grown]),
        "nothing to change\n"
    );

    let moved = refusals_change_nothing(&env);
    restart_recreates_guest3(&env, &moved);

    // SIGHUP applies hv's own file: the one `up` wrote, unchanged, so
    // guest3 and guest2's second vif go.
    signal(before["hv_pid"].as_i64().unwrap(), "HUP");
    wait_until(
        "guest3 and vif 1 of guest2 to go",
        Duration::from_secs(20),
        || {
            let st = env.status();
            domain(&st, "guest3").is_null() && st["vifs"].as_array().unwrap().len() == 2
        },
    );
    assert!(
        !netns().contains(&"splitnet-guest3".to_string()),
        "{:?}",
        netns()
    );
    env.settled_as(&held).assert_holds_as(&held);
    assert_eq!(pid_of(&env, "guest1"), g1);
    // The stream through guest1 ran to its end across all of it.
    ran_to_its_end(&mut stream);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The default topology with guest1's vif given `spec` (xl's vifspec).
fn guest1_vif(spec: &str) -> String {
    toolstack::topology::DEFAULT_TOML.replacen(
        "address = \"10.77.0.1/24\"",
        &format!("address = \"10.77.0.1/24\"\nvif = [\"{spec}\"]"),
        1,
    )
}

/// guest1's vif counter `k`.
fn counter(env: &Env, k: &str) -> u64 {
    vif(&env.status(), "guest1")["counters"][k]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_vifs_options_change_in_place_and_its_guest_keeps_its_connection() {
    let Some(env) = Env::new("apply-opts") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let g1 = pid_of(&env, "guest1");
    let (_srv, mut stream) = env.stream_to_wire("guest1", 20);
    let apply = |name: &str, spec: &str| {
        let file = write(&env, name, &guest1_vif(spec));
        env.ok(&["apply", "--config", &file])
    };

    // A jumbo MTU and a transmit credit: the guest's link follows the
    // backend's node, and the credit holds the stream back.
    let out = apply("a.toml", "mtu=9000,rate=8Mb/s");
    assert!(
        out.contains("change vif 0 of guest1 on drv") && out.contains("mtu none → 9000"),
        "{out}"
    );
    wait_until("guest1's eth0 at MTU 9000", Duration::from_secs(5), || {
        env.ok(&["exec", "guest1", "--", "cat", "/sys/class/net/eth0/mtu"])
            .trim()
            == "9000"
    });
    let waits = counter(&env, "credit_waits");
    wait_until(
        "the credit to hold the stream",
        Duration::from_secs(5),
        || counter(&env, "credit_waits") > waits,
    );
    let st = env.status();
    let opts = &vif(&st, "guest1")["options"];
    assert_eq!(opts["mtu"], "9000", "{opts}");

    // An address filter that is not guest1's: its frames are dropped.
    let spoofed = counter(&env, "spoofed");
    apply("b.toml", "ip=10.77.0.99");
    assert!(
        !env.reaches("guest1", "10.77.0.2"),
        "a spoofed guest1 still reached guest2"
    );
    wait_until(
        "netback to count the spoofed frames",
        Duration::from_secs(5),
        || counter(&env, "spoofed") > spoofed,
    );

    // Another VLAN: guest2, untagged, is out of reach.
    apply("c.toml", "vlan=7");
    assert!(
        !env.reaches("guest1", "10.77.0.2"),
        "guest1 on VLAN 7 still reached guest2"
    );

    // Back as it was: reachable again, the same process, and the stream
    // through guest1 ran to its end across all of it.
    let out = env.ok(&[
        "apply",
        "--config",
        &write(&env, "d.toml", toolstack::topology::DEFAULT_TOML),
    ]);
    assert!(out.contains("vlan 7 → none"), "{out}");
    // guest1's kernel was still resolving guest2's address when it was cut
    // off: that resolution fails first (a few seconds), then a new one
    // finds guest2.
    wait_until(
        "guest1 to reach guest2 again",
        Duration::from_secs(10),
        || env.reaches("guest1", "10.77.0.2"),
    );
    env.ping("guest1", "10.77.0.2", 3);
    wait_until(
        "guest1's eth0 back at MTU 1500",
        Duration::from_secs(5),
        || {
            env.ok(&["exec", "guest1", "--", "cat", "/sys/class/net/eth0/mtu"])
                .trim()
                == "1500"
        },
    );
    assert_eq!(pid_of(&env, "guest1"), g1, "guest1 was not touched");
    ran_to_its_end(&mut stream);
    // What stays is the count of option changes and netback's answer.
    let (added, removed) = env.snapshot().nodes_since(&held);
    assert!(removed.is_empty(), "{removed:?}");
    assert_eq!(added.len(), 2, "{added:?}");
    assert!(
        added.iter().all(|n| n.contains("/splitnet-options")),
        "{added:?}"
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The nice value of every thread of process `pid` (field 19 of each
/// `/proc/PID/task/TID/stat`, after the command's closing parenthesis).
fn thread_nices(pid: i64) -> Vec<i64> {
    thread_files(pid, "stat")
        .iter()
        .map(|s| stat_nice(s))
        .collect()
}

/// The nice value on a `/proc/PID/task/TID/stat` line.
fn stat_nice(stat: &str) -> i64 {
    let rest = stat.rsplit_once(") ").expect("a stat line").1;
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// The nice values of hv's threads serving domain `d` (`hv-ctl-ID` and
/// `hv-batch-ID`), by name from their stat lines.
fn serving_nices(env: &Env, d: &str) -> Vec<i64> {
    let st = env.status();
    let id = domain(&st, d)["id"].as_i64().unwrap();
    let names = [format!("(hv-ctl-{id})"), format!("(hv-batch-{id})")];
    thread_files(st["hv_pid"].as_i64().unwrap(), "stat")
        .iter()
        .filter(|s| names.iter().any(|n| s.contains(n.as_str())))
        .map(|s| stat_nice(s))
        .collect()
}

/// A domain's weight is its process's nice value, every thread of it: the
/// driver domain at twice a guest's by default (nice -3), a new weight set
/// by `apply` on the running process without a restart, and kept by a
/// restart.
#[test]
fn a_domains_weight_is_its_threads_nice_value_and_apply_sets_it_in_place() {
    let Some(env) = Env::new("apply-weight") else {
        return;
    };
    env.ok(&["up"]);
    let nices = |d: &str| thread_nices(pid_of(&env, d).as_i64().unwrap());
    assert!(nices("drv").iter().all(|&n| n == -3), "{:?}", nices("drv"));
    // hv's work for a domain runs at its weight too.
    assert_eq!(serving_nices(&env, "drv"), [-3, -3]);
    assert_eq!(serving_nices(&env, "guest1"), [0, 0]);
    assert!(
        nices("guest1").iter().all(|&n| n == 0),
        "{:?}",
        nices("guest1")
    );
    let g1 = pid_of(&env, "guest1");
    let heavier = toolstack::topology::DEFAULT_TOML.replacen(
        "address = \"10.77.0.1/24\"",
        "address = \"10.77.0.1/24\"\nweight = 1024",
        1,
    );
    let path = write(&env, "w.toml", &heavier);
    let plan = env.ok(&["apply", "--config", &path, "--dry-run"]);
    assert_eq!(plan.trim(), "set the weight of guest1 from 256 to 1024");
    env.ok(&["apply", "--config", &path]);
    assert_eq!(pid_of(&env, "guest1"), g1, "guest1 was not restarted");
    let n = nices("guest1");
    assert!(!n.is_empty() && n.iter().all(|&n| n == -6), "{n:?}");
    assert_eq!(serving_nices(&env, "guest1"), [-6, -6]);
    let e = refused(
        &env,
        &[
            "apply",
            "--config",
            &write(&env, "bad.toml", &heavier.replace("1024", "0")),
        ],
    );
    assert!(e.contains("weight must be 1..=65535"), "{e}");
    env.ok(&["restart", "guest1"]);
    assert_ne!(pid_of(&env, "guest1"), g1);
    assert!(
        nices("guest1").iter().all(|&n| n == -6),
        "{:?}",
        nices("guest1")
    );
    assert_eq!(serving_nices(&env, "guest1"), [-6, -6]);
    // An upgrade of hv carries it to the new program's threads.
    env.ok(&["upgrade", "--hv"]);
    assert_eq!(serving_nices(&env, "drv"), [-3, -3]);
    assert_eq!(serving_nices(&env, "guest1"), [-6, -6]);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The default topology with a second driver domain, its wire host and a
/// guest on it (the example a user applies to a running default).
const TWO_DRIVERS: &str = include_str!("../../../../examples/two-drivers.toml");

#[test]
fn apply_adds_and_removes_a_driver_domain_with_its_wire_host_and_guest() {
    let Some(env) = Env::new("apply-driver") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let (g1, drv) = (pid_of(&env, "guest1"), pid_of(&env, "drv"));
    let (_srv, mut stream) = env.stream_to_wire("guest1", 20);

    let two = write(&env, "two.toml", TWO_DRIVERS);
    assert_eq!(
        env.ok(&["apply", "--config", &two, "--dry-run"]),
        "add driver domain drv2 (its ports and wire hosts)\nadd guest guest4\n"
    );
    env.ok(&["apply", "--config", &two]);
    env.ping("guest4", "10.78.0.254", 3);
    env.ping("wire2", "10.78.0.4", 3);
    assert!(
        netns().contains(&"splitnet-wire2".to_string()),
        "{:?}",
        netns()
    );

    // Its wire host changes only with drv2 re-created; guest4 keeps its
    // process and reconnects, as after a crash of drv2.
    let moved = write(
        &env,
        "two-b.toml",
        &TWO_DRIVERS.replace("10.78.0.254/24", "10.78.0.253/24"),
    );
    let why = refused(&env, &["apply", "--config", &moved]);
    assert!(
        why.contains("wire hosts of running driver domain drv2") && why.contains("--restart drv2"),
        "{why}"
    );
    let (g4, d2) = (pid_of(&env, "guest4"), pid_of(&env, "drv2"));
    env.ok(&["apply", "--config", &moved, "--restart", "drv2"]);
    env.ping("guest4", "10.78.0.253", 3);
    assert_eq!(pid_of(&env, "guest4"), g4);
    assert_ne!(pid_of(&env, "drv2"), d2);

    let back = write(&env, "back.toml", toolstack::topology::DEFAULT_TOML);
    assert_eq!(
        env.ok(&["apply", "--config", &back, "--dry-run"]),
        "remove guest guest4\nremove driver domain drv2 (its ports and wire hosts)\n"
    );
    // A vif the file does not know (network-attach's) keeps drv2: refused
    // before any step, naming it, until it is detached.
    let out = env.ok(&["network-attach", "guest1", "backend=drv2"]);
    let handle = out.split_whitespace().nth(2).expect("a handle").to_string();
    let why = refused(&env, &["apply", "--config", &back]);
    assert!(
        why.contains(&format!(
            "driver domain drv2 still serves vif {handle} of guest1"
        )),
        "{why}"
    );
    assert!(
        !domain(&env.status(), "guest4").is_null(),
        "the refusal removed guest4"
    );
    env.ok(&["network-detach", "guest1", &handle]);
    env.ok(&["apply", "--config", &back]);
    let st = env.status();
    assert!(domain(&st, "drv2").is_null() && domain(&st, "guest4").is_null());
    // Nothing in status names them: no uplink, wire host or fact left.
    let text = st.to_string();
    for gone in ["drv2", "wire2", "guest4"] {
        assert!(!text.contains(gone), "status still names {gone}: {st:#}");
    }
    let left = netns();
    for ns in ["splitnet-drv2", "splitnet-guest4", "splitnet-wire2"] {
        assert!(!left.contains(&ns.to_string()), "{ns} is left: {left:?}");
    }
    // The store, watches and grants as they were before drv2 came.
    env.settled_as(&held).assert_holds_as(&held);
    assert_eq!((pid_of(&env, "guest1"), pid_of(&env, "drv")), (g1, drv));
    ran_to_its_end(&mut stream);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The default topology with guests 3, 4 and 5 at the end, whose NICs are
/// `nics`' (hosted, hvm or virtio).
fn own_nics(nics: [&str; 3]) -> String {
    let mut t = toolstack::topology::DEFAULT_TOML.to_string();
    for (i, nic) in nics.iter().enumerate() {
        let n = i + 3;
        t += &format!(
            "\n[[domain]]\nname = \"guest{n}\"\nkind = \"guest\"\naddress = \"10.77.0.{n}/24\"\nnic = \"{nic}\"\n"
        );
    }
    t
}

#[test]
fn apply_adds_and_removes_guests_whose_nic_is_emulated_or_virtio() {
    let Some(env) = Env::new("apply-nics") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let (g1, drv) = (pid_of(&env, "guest1"), pid_of(&env, "drv"));
    let (_srv, mut stream) = env.stream_to_wire("guest1", 25);

    let three = write(&env, "three.toml", &own_nics(["hosted", "hvm", "virtio"]));
    assert_eq!(
        env.ok(&["apply", "--config", &three, "--dry-run"]),
        "add guest guest3\nadd guest guest4\nadd guest guest5\n"
    );
    env.ok(&["apply", "--config", &three]);
    for (g, ip) in [
        ("guest3", "10.77.0.3"),
        ("guest4", "10.77.0.4"),
        ("guest5", "10.77.0.5"),
    ] {
        env.ping(g, "10.77.0.254", 3);
        env.ping("wire", ip, 3);
    }
    let st = env.status();
    assert!(!domain(&st, "guest3")["emulated_nic"].is_null(), "{st}");

    // A NIC's kind changes only when its guest may be re-created.
    let swapped = write(&env, "swapped.toml", &own_nics(["hvm", "hvm", "virtio"]));
    let why = refused(&env, &["apply", "--config", &swapped]);
    assert!(
        why.contains("guest3: its NIC would change from hosted to hvm")
            && why.contains("--restart guest3"),
        "{why}"
    );
    env.ok(&["apply", "--config", &swapped, "--restart", "guest3"]);
    env.ping("wire", "10.77.0.3", 3);

    let back = write(&env, "back.toml", toolstack::topology::DEFAULT_TOML);
    assert_eq!(
        env.ok(&["apply", "--config", &back, "--dry-run"]),
        "remove guest guest3\nremove guest guest4\nremove guest guest5\n"
    );
    env.ok(&["apply", "--config", &back]);
    let st = env.status();
    for g in ["guest3", "guest4", "guest5"] {
        assert!(domain(&st, g).is_null(), "{g} is left: {st}");
        let ns = format!("splitnet-{g}");
        assert!(!netns().contains(&ns), "{ns} is left");
    }
    // drv's extra ports, the virtio vif's listener, the store, watches and
    // grants as they were before the three came.
    assert!(
        st["vhost_vifs"].as_array().is_none_or(|v| v.is_empty()),
        "{st}"
    );
    env.settled_as(&held).assert_holds_as(&held);
    assert_eq!((pid_of(&env, "guest1"), pid_of(&env, "drv")), (g1, drv));
    ran_to_its_end(&mut stream);
    env.ok(&["down"]);
    assert_nothing_left();
}
