//! xl's vif syntax end to end: a guest with 8 vifs from `vif = [...]`,
//! `network-attach GUEST 'VIFSPEC'`, `network-list`, detach by MAC, and
//! `script=` hotplug scripts (their environment, a failing one, a hanging
//! one). Needs root and ping; run one test at a time, under the lock.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `splitnet up --config <text>` with extra environment for hv.
fn up(env: &Env, topology: &str, vars: &[(&str, &str)]) -> Output {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("vifspec.toml");
    std::fs::write(&path, topology).unwrap();
    Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .arg("--run-dir")
        .arg(&env.run_dir)
        .args(["up", "--config", path.to_str().unwrap()])
        .envs(vars.iter().copied())
        .output()
        .expect("run splitnet up")
}

fn up_ok(env: &Env, topology: &str, vars: &[(&str, &str)]) {
    let o = up(env, topology, vars);
    assert!(
        o.status.success(),
        "up failed:\n{}\n{}\nhv.log:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default()
    );
}

/// The default topology's shape: drv, guest1 (whose vifs are `vifs`),
/// guest2 and the wire.
fn topology(guest1_vifs: &str) -> String {
    format!(
        "name = \"vifspec\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n{guest1_vifs}\n\
         [[domain]]\nname = \"guest2\"\nkind = \"guest\"\naddress = \"10.77.0.2/24\"\n\
         [wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\n"
    )
}

/// A hotplug script in a fresh directory: `body` after the shebang.
fn script(env: &Env, name: &str, body: &str) -> PathBuf {
    let dir = env.run_dir.join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A script that appends its command, environment and namespace to `marker`.
fn marker_script(env: &Env, marker: &Path) -> PathBuf {
    script(
        env,
        "vif-mark",
        &format!(
            "echo \"$1 vif=$vif XENBUS_PATH=$XENBUS_PATH XENBUS_TYPE=$XENBUS_TYPE netns=$(ip netns identify)\" >> {}",
            marker.display()
        ),
    )
}

fn network_list(env: &Env, guest: &str) -> Vec<Value> {
    serde_json::from_str::<Value>(&env.ok(&["network-list", guest, "--json"]))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn links(env: &Env, guest: &str) -> String {
    env.ok(&["exec", guest, "--", "ip", "-br", "link"])
}

fn fails_with(o: &Output, needle: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "should have failed: {needle}");
    assert!(e.contains(needle), "{e:?} lacks {needle:?}");
}

#[test]
fn a_guest_with_eight_vifs_from_its_topology_reaches_the_wire_on_each() {
    let Some(env) = Env::new("vs-eight") else {
        return;
    };
    let marker = env.run_dir.join("eight.marker");
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let mark = marker_script(&env, &marker);
    let specs: Vec<String> = (0..8)
        .map(|k| {
            let extra = if k == 7 {
                format!(",script={}", mark.display())
            } else {
                String::new()
            };
            format!("\"mac=00:16:3e:77:00:{k:02x}{extra}\"")
        })
        .collect();
    up_ok(
        &env,
        &topology(&format!("vif = [{}]", specs.join(", "))),
        &[],
    );
    // Each interface is up with its MAC.
    let l = links(&env, "guest1");
    for k in 0..8 {
        let line = l
            .lines()
            .find(|x| x.starts_with(&format!("eth{k} ")))
            .unwrap_or_else(|| panic!("no eth{k}:\n{l}"));
        assert!(line.contains(&format!("00:16:3e:77:00:{k:02x}")), "{line}");
        assert!(line.contains("UP"), "{line}");
    }
    let rows = network_list(&env, "guest1");
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r["state"] == "4"), "{rows:?}");
    // The topology's script ran for eth7 at `up`, in the driver domain.
    let m = std::fs::read_to_string(&marker).unwrap();
    assert!(m.starts_with("online vif=vif"), "{m}");
    assert!(
        m.contains("/backend/vif/") && m.contains("netns=splitnet-drv"),
        "{m}"
    );
    assert_eq!(rows[7]["hotplug_status"], "connected");
    // Traffic over the last vif, on a subnet only it is on.
    env.addr_add("guest1", "10.79.0.1/24", "eth7");
    env.addr_add("wire", "10.79.0.254/24", "eth0");
    let before = rx_bytes("guest1", "eth7");
    env.ping("guest1", "10.79.0.254", 3);
    assert!(rx_bytes("guest1", "eth7") > before);
    env.ping("guest1", "10.77.0.254", 2);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_vifspec_attaches_lists_and_detaches_by_mac() {
    let Some(env) = Env::new("vs-attach") else {
        return;
    };
    env.ok(&["up"]);
    let out = env.ok(&[
        "network-attach",
        "guest1",
        "mac=00:16:3E:00:00:42,ip=10.78.0.1,mtu=9000,rate=1Gb/s@10ms,vifname=web1",
    ]);
    assert!(out.contains("vif 1 connected as eth1"), "{out}");
    // xl's columns, then the options.
    let table = env.ok(&["network-list", "guest1"]);
    let head = table.lines().next().unwrap();
    assert!(
        head.starts_with("Idx BE  Mac Addr.         handle state evt-ch  tx-/rx-ring-ref BE-path"),
        "{table}"
    );
    let line = table.lines().find(|l| l.starts_with("1 ")).unwrap();
    for want in [
        "00:16:3e:00:00:42",
        " 4 ",
        "9000",
        "10.78.0.1",
        "1250000,10000",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
    let rows = network_list(&env, "guest1");
    let r = rows.iter().find(|r| r["handle"] == 1).unwrap();
    assert_eq!(r["vifname"], "web1");
    // vifname names the vif in status (and so in top and the metrics).
    let st = env.status();
    assert!(st["vifs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["guest"] == "guest1" && v["handle"] == 1 && v["vif"] == "web1"));
    assert_eq!(r["bridge"], "xenbr0");
    assert!(r["backend_path"].as_str().unwrap().ends_with("/1"));
    assert_ne!(r["tx_ring_ref"], "-1");
    assert!(links(&env, "guest1").contains("00:16:3e:00:00:42"));
    // Traffic crosses it.
    env.addr_add("guest1", "10.78.0.1/24", "eth1");
    env.addr_add("wire", "10.78.0.254/24", "eth0");
    env.ping("guest1", "10.78.0.254", 3);
    // The MAC is taken; a wrong MAC names no vif.
    fails_with(
        &env.splitnet(&["network-attach", "guest2", "mac=00:16:3e:00:00:42"]),
        "MAC 00:16:3e:00:00:42 is in use",
    );
    fails_with(
        &env.splitnet(&["network-detach", "guest1", "00:16:3e:00:00:43"]),
        "guest1 has no vif with MAC 00:16:3e:00:00:43",
    );
    env.ok(&["network-detach", "guest1", "00:16:3E:00:00:42"]);
    assert_eq!(network_list(&env, "guest1").len(), 1);
    wait_until("eth1 to go", Duration::from_secs(5), || {
        !links(&env, "guest1").contains("eth1")
    });
    env.ping("guest1", "10.77.0.254", 2);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn malformed_vifspecs_are_refused_at_up_and_at_attach() {
    let Some(env) = Env::new("vs-bad") else {
        return;
    };
    fails_with(
        &up(&env, &topology("vif = [\"mtu=9001\"]"), &[]),
        "vif[0] \"mtu=9001\": vif option `mtu` = \"9001\": give a number 68..=9000",
    );
    fails_with(
        &up(&env, &topology("vif = [\"\", \"model=e1000\"]"), &[]),
        "vif option `model` is not supported by splitnet",
    );
    assert_nothing_left();
    env.ok(&["up"]);
    for (spec, needle) in [
        ("colour=blue", "unknown vif option `colour`"),
        ("rate=10Mb", "vif option `rate` = \"10Mb\": no /s"),
        ("ip=10.0.0.1/24", "no prefix length"),
        ("vlan=5000", "1..=4094"),
        ("type=ioemu", "`type` is not supported by splitnet"),
        ("mac=00:16:3e:00:00:01,mac=00:16:3e:00:00:02", "given twice"),
        ("script=./vif-up", "a relative path is refused"),
        ("script=../vif-up", "`..` and `.` are refused"),
    ] {
        fails_with(&env.splitnet(&["network-attach", "guest1", spec]), needle);
    }
    fails_with(
        &env.splitnet(&[
            "network-attach",
            "guest1",
            "mac=00:16:3e:00:00:51",
            "--mac",
            "00:16:3e:00:00:52",
        ]),
        "--mac and the vifspec's mac= both name it",
    );
    assert_eq!(network_list(&env, "guest1").len(), 1);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn hotplug_scripts_run_with_xens_environment_and_their_failures_fail_the_attach() {
    let Some(env) = Env::new("vs-script") else {
        return;
    };
    let marker = env.run_dir.join("script.marker");
    std::fs::create_dir_all(&env.run_dir).unwrap();
    marker_script(&env, &marker);
    script(
        &env,
        "vif-fail",
        "echo \"vif-fail: no bridge for $vif\" >&2\nexit 3",
    );
    let hang = script(&env, "vif-hang", "sleep 617");
    let dir = env.run_dir.join("scripts");
    up_ok(
        &env,
        &topology(""),
        &[
            ("SPLITNET_SCRIPT_DIR", dir.to_str().unwrap()),
            ("SPLITNET_HOTPLUG_TIMEOUT_MS", "1500"),
        ],
    );
    failing_scripts_leave_nothing(&env, &hang);
    scripts_run_online_and_offline(&env, &marker);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A failing, a refused and a hanging script each fail the attach with a
/// clear message, and what the failed vifs held is given back.
fn failing_scripts_leave_nothing(env: &Env, hang: &std::path::Path) {
    // A failing script fails the attach with its message; nothing stays.
    let held = |st: &Value| {
        let mut v = vec![st["store_nodes"].clone(), st["watches"].clone()];
        for d in ["guest1", "drv"] {
            v.push(domain(st, d)["event_channels"].clone());
        }
        v
    };
    let before = held(&env.settled().status);
    let o = env.splitnet(&["network-attach", "guest1", "script=vif-fail"]);
    fails_with(&o, "failed (exit status 3): vif-fail: no bridge for vif");
    assert_eq!(network_list(env, "guest1").len(), 1);
    // A name not in the script directory is refused, never run from PATH.
    let o = env.splitnet(&["network-attach", "guest1", "script=rm"]);
    fails_with(&o, "hotplug script \"rm\" is not in the script directory");
    assert_eq!(network_list(env, "guest1").len(), 1);
    assert!(!links(env, "guest1").contains("eth1"));
    // A hanging script is killed, with its children, after the timeout.
    let t0 = Instant::now();
    let o = env.splitnet(&[
        "network-attach",
        "guest1",
        &format!("script={}", hang.display()),
    ]);
    fails_with(&o, "did not finish within 1.5s and was killed");
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    wait_until(
        "the hung script's sleep to go",
        Duration::from_secs(5),
        || {
            !Command::new("pgrep")
                .args(["-f", "sleep 617"])
                .status()
                .unwrap()
                .success()
        },
    );
    assert_eq!(network_list(env, "guest1").len(), 1);
    wait_until(
        "what the failed vifs held to go",
        Duration::from_secs(5),
        || held(&env.status()) == before,
    );
    env.ping("guest1", "10.77.0.254", 2);
}

/// A script named in the script directory runs with Xen's environment in
/// the driver domain's namespace: online on attach and on the guest's
/// restart, offline when the guest dies and on detach; a driver domain
/// taken over in place after a crash leaves it alone.
fn scripts_run_online_and_offline(env: &Env, marker: &std::path::Path) {
    // The next vif takes the freed handle. A name resolves in the script
    // directory (only there); the script gets Xen's environment, in the driver domain's
    // namespace.
    let out = env.ok(&["network-attach", "guest1", "script=vif-mark,vifname=mk0"]);
    assert!(out.contains("vif 1 connected as eth1"), "{out}");
    let m = std::fs::read_to_string(marker).unwrap();
    let drv = domain(&env.status(), "drv")["id"].as_u64().unwrap();
    let g1 = domain(&env.status(), "guest1")["id"].as_u64().unwrap();
    let be = format!("/local/domain/{drv}/backend/vif/{g1}/1");
    assert_eq!(
        m.trim(),
        format!("online vif=mk0 XENBUS_PATH={be} XENBUS_TYPE=vif netns=splitnet-drv")
    );
    let rows = network_list(env, "guest1");
    assert_eq!(rows[1]["hotplug_status"], "connected");
    assert_eq!(rows[1]["script"], "vif-mark");
    // A guest's restart takes the vif offline and brings it online again
    // under the guest's new id; a driver domain taken over in place after
    // a crash keeps it (neither offline nor online: the vif never went);
    // detach takes it offline.
    env.ok(&["restart", "guest1"]);
    let g1 = domain(&env.status(), "guest1")["id"].as_u64().unwrap();
    let be2 = format!("/local/domain/{drv}/backend/vif/{g1}/1");
    let pid = domain(&env.status(), "drv")["pid"].as_i64().unwrap();
    kill9(pid);
    wait_until(
        "drv taken over, its scripted vif served",
        Duration::from_secs(20),
        || {
            let st = env.status();
            let d = domain(&st, "drv");
            let taken = d["pid"].as_i64().is_some_and(|p| p != pid);
            // XenbusState Connected, as xl prints it.
            taken && network_list(env, "guest1")[1]["state"] == "4"
        },
    );
    assert_eq!(domain(&env.status(), "drv")["id"].as_u64(), Some(drv));
    env.ok(&["network-detach", "guest1", "eth1"]);
    let m = std::fs::read_to_string(marker).unwrap();
    let lines: Vec<&str> = m.lines().collect();
    assert_eq!(lines.len(), 4, "{m}");
    for (line, want) in lines[1..].iter().zip([
        format!("offline vif=mk0 XENBUS_PATH={be} "),
        format!("online vif=mk0 XENBUS_PATH={be2} "),
        format!("offline vif=mk0 XENBUS_PATH={be2} "),
    ]) {
        assert!(line.starts_with(&want), "{m}");
    }
}

/// The MAC of `dev` in `domain`, from `ip -br link`.
fn mac_of(env: &Env, domain: &str, dev: &str) -> [u8; 6] {
    let l = links(env, domain);
    let line = l
        .lines()
        .find(|x| {
            x.split_whitespace()
                .next()
                .and_then(|n| n.split('@').next())
                == Some(dev)
        })
        .unwrap_or_else(|| panic!("{domain} has no {dev}:\n{l}"));
    let text = line.split_whitespace().nth(2).unwrap();
    let mut mac = [0u8; 6];
    for (b, h) in mac.iter_mut().zip(text.split(':')) {
        *b = u8::from_str_radix(h, 16).unwrap();
    }
    mac
}

/// An ARP request from `from` (10.77.0.254) for 10.77.0.1, sent to `to`.
fn arp_request(to: [u8; 6], from: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42);
    f.extend_from_slice(&to);
    f.extend_from_slice(&from);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&from);
    f.extend_from_slice(&[10, 77, 0, 254]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&[10, 77, 0, 1]);
    f
}

/// The sender MAC of an ARP reply for 10.77.0.1 in `frame`.
fn arp_reply_from(frame: &[u8]) -> Option<[u8; 6]> {
    let is_reply = frame.len() >= 42 && frame[12..14] == [0x08, 0x06] && frame[20..22] == [0, 2];
    (is_reply && frame[28..32] == [10, 77, 0, 1]).then(|| frame[22..28].try_into().unwrap())
}

/// A guest with a hot-plugged vif on its first vif's bridge answers ARP
/// for its address only on the first: asked on the second (by unicast, so
/// only that interface hears it) it stays silent. With Linux's default
/// every interface answers for every address, a peer may learn the second
/// NIC's MAC, and after that NIC's detach the peer's traffic to the guest
/// went nowhere until its neighbor entry expired (a 29 s stall in the soak).
#[test]
fn a_hot_plugged_vif_does_not_answer_arp_for_the_first_vifs_address() {
    let Some(env) = Env::new("vs-arp") else {
        return;
    };
    env.ok(&["up"]);
    env.ok(&["network-attach", "guest1"]);
    let (eth0, eth1) = (
        mac_of(&env, "guest1", "eth0"),
        mac_of(&env, "guest1", "eth1"),
    );
    let wire = mac_of(&env, "wire", "eth0");
    let replies = toolstack::host::in_netns(&toolstack::host::netns_name("wire"), || {
        let sock = sys::PacketSocket::bind("eth0", false)?;
        sock.send(&[&arp_request(eth1, wire)])?;
        sock.send(&[&arp_request(eth0, wire)])?;
        let mut from = Vec::new();
        let mut buf = [0u8; 2048];
        let mut heard = |mac: [u8; 6]| {
            while let Some(n) = sock.recv(&mut buf).unwrap() {
                from.extend(arp_reply_from(&buf[..n]));
            }
            from.contains(&mac)
        };
        // eth0's answer is awaited (the path works); eth1, asked first, has
        // had as long, and half a second more, to answer.
        let _ = testutil::poll_until(Duration::from_secs(5), || heard(eth0));
        let _ = testutil::poll_until(Duration::from_millis(500), || heard(eth1));
        Ok(from)
    })
    .unwrap();
    assert_eq!(
        replies,
        vec![eth0],
        "ARP replies for 10.77.0.1 (eth0 {eth0:02x?}, eth1 {eth1:02x?})"
    );
    env.ok(&["network-detach", "guest1", "1"]);
    env.ping("wire", "10.77.0.1", 2);
    env.ok(&["down"]);
    assert_nothing_left();
}
