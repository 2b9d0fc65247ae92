//! Recovery and hotplug end to end: a driver domain killed mid-stream is
//! taken over in place (or, killed again at once, restarted, and its
//! guests reconnect) without its guests losing their TCP connections; a
//! guest restarts without disturbing the others; vifs are attached to and
//! detached from running guests. Needs root; run one test at a time.

mod common;

use common::numbered::{self, DATAGRAMS};
use common::*;
use serde_json::Value;
use std::time::Duration;

/// The interface index of `ifname` in `domain`: the same index means the
/// same device (a TAP that was not recreated).
fn ifindex(domain: &str, ifname: &str) -> String {
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &toolstack::host::netns_name(domain)])
        .args(["cat", &format!("/sys/class/net/{ifname}/ifindex")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// What a handshake would make anew for guest1's first vif: its rings'
/// grant references, its event channels, its backend directory.
fn vif_channel(env: &Env) -> Value {
    let rows: Value = serde_json::from_str(&env.ok(&["network-list", "guest1", "--json"])).unwrap();
    let r = &rows[0];
    serde_json::json!([
        r["tx_ring_ref"],
        r["rx_ring_ref"],
        r["evtchn"],
        r["backend_path"]
    ])
}

fn vifs_of<'a>(st: &'a Value, guest: &str) -> Vec<&'a Value> {
    st["vifs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["guest"] == guest)
        .collect()
}

/// A driver domain killed mid-stream is taken over in place by a new
/// process: the same domain id, guest1's vif served on without a
/// handshake. Killed again at once, it is restarted as a new domain
/// instead (its successor may have died of what the rings hold), and
/// guest1 reconnects. The stream survives both.
#[test]
fn a_killed_driver_domain_is_restarted_and_a_tcp_stream_survives_it() {
    let Some(env) = Env::new("rec-drv") else {
        return;
    };
    env.ok(&["up"]);
    let st = env.status();
    let (drv_pid, drv_id) = (
        domain(&st, "drv")["pid"].clone(),
        domain(&st, "drv")["id"].clone(),
    );
    let tap = ifindex("guest1", "eth0");
    let channel = vif_channel(&env);
    // A stream from guest1 to the wire host, flowing before the kill.
    let (_srv, mut client) = env.stream_to_wire("guest1", 8);
    kill9(drv_pid.as_i64().unwrap());
    let successor = wait_until("drv taken over", Duration::from_secs(10), || {
        let st = env.status();
        let d = domain(&st, "drv");
        let pid = d["pid"].as_i64().filter(|&p| Some(p) != drv_pid.as_i64())?;
        (d["id"] == drv_id && vif(&st, "guest1")["backend_state"] == "Connected").then_some(pid)
    });
    assert_eq!(vif_channel(&env), channel, "guest1's vif was set up again");
    kill9(successor);
    wait_until(
        "drv restarted as a new domain",
        Duration::from_secs(10),
        || {
            let st = env.status();
            let d = domain(&st, "drv");
            !d["id"].is_null()
                && d["id"] != drv_id
                && vif(&st, "guest1")["backend_state"] == "Connected"
                && vif(&st, "guest1")["frontend_state"] == "Connected"
        },
    );
    assert_ne!(
        vif_channel(&env),
        channel,
        "guest1 reconnected without a handshake"
    );
    // The stream ends normally: iperf3 exits 0 only when its connection
    // carried on to the end.
    assert!(
        client.wait_exit(Duration::from_secs(30)),
        "the iperf3 client did not finish"
    );
    let code = client.0.wait().unwrap();
    assert!(code.success(), "iperf3 failed after the restart: {code}");
    // The guest's NIC is the same device: its addresses never went away.
    assert_eq!(ifindex("guest1", "eth0"), tap);
    let st = env.status();
    assert_eq!(st["restarts_after_crash"], 2, "{st:#}");
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("guest2", "10.77.0.1", 3);
    // A restart by hand too.
    env.ok(&["restart", "drv"]);
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// What arrives while the driver domain restarts waits for it, both ways:
/// frames from outside in the uplink socket hv keeps, frames from the
/// guest in its NIC's queue. Without that, datagrams sent during the
/// outage (tens of them at this rate) were lost, and a TCP flow from
/// outside waited out a retransmission timeout.
#[test]
fn lost_nothing_while_the_driver_domain_restarts() {
    let Some(env) = Env::new("rec-hold") else {
        return;
    };
    env.ok(&["up"]);
    env.ping("guest1", "10.77.0.254", 1);
    let flows = numbered::Flows::start();
    wait_until("the first third sent", Duration::from_secs(10), || {
        flows.sent() > DATAGRAMS / 3
    });
    let st = env.status();
    let old = domain(&st, "drv")["pid"].clone();
    kill9(old.as_i64().unwrap());
    wait_until("drv to come back", Duration::from_secs(10), || {
        let st = env.status();
        let pid = &domain(&st, "drv")["pid"];
        !pid.is_null() && *pid != old && vif(&st, "guest1")["backend_state"] == "Connected"
    });
    for (what, missing) in flows.missing() {
        // The killed domain may have taken one frame each way off a socket
        // or a ring and died before passing it on; nothing else may go.
        assert!(
            missing.len() <= 1,
            "{what}: {} of {DATAGRAMS} datagrams lost across the restart: {missing:?}",
            missing.len()
        );
    }
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_restarted_guest_comes_back_with_its_addresses_and_others_see_nothing() {
    let Some(env) = Env::new("rec-guest") else {
        return;
    };
    env.ok(&["up"]);
    let before = domain(&env.status(), "guest1")["id"].clone();
    // guest2 pings the wire host all through guest1's restart.
    let mut pinger = env.spawn(&[
        "exec",
        "guest2",
        "--",
        "ping",
        "-c",
        "40",
        "-i",
        "0.05",
        "-W",
        "1",
        "10.77.0.254",
    ]);
    env.ok(&["restart", "guest1"]);
    assert!(pinger.wait_exit(Duration::from_secs(30)));
    let code = pinger.0.wait().unwrap();
    assert!(code.success(), "guest2 lost packets while guest1 restarted");
    let st = env.status();
    assert_ne!(domain(&st, "guest1")["id"], before, "a new domain id");
    let addrs = env.ok(&["exec", "guest1", "--", "ip", "-br", "addr", "show", "eth0"]);
    assert!(addrs.contains("10.77.0.1/24"), "{addrs}");
    env.ping("guest1", "10.77.0.254", 3);
    env.ping("guest1", "10.77.0.2", 3);
    // A domain that does not exist is a clear error.
    let o = env.splitnet(&["restart", "nosuch"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no domain named \"nosuch\""));
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn vifs_attach_to_and_detach_from_running_guests_and_leave_nothing() {
    let Some(env) = Env::new("rec-hotplug") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let before = &held.status;
    let out = env.ok(&["network-attach", "guest1"]);
    assert!(out.contains("vif 1 connected as eth1"), "{out}");
    env.ok(&[
        "network-attach",
        "guest2",
        "--mac",
        "00:16:3e:00:00:99",
        "--bridge",
        "drv",
    ]);
    let st = env.status();
    assert_eq!(vifs_of(&st, "guest1").len(), 2);
    let g2 = vifs_of(&st, "guest2");
    assert!(g2.iter().any(|v| v["mac"] == "00:16:3e:00:00:99"
        && v["handle"] == 1
        && v["frontend_state"] == "Connected"
        && v["backend_state"] == "Connected"));
    // Traffic crosses the new NICs.
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "ip",
        "addr",
        "add",
        "10.78.0.1/24",
        "dev",
        "eth1",
    ]);
    env.ok(&[
        "exec",
        "guest2",
        "--",
        "ip",
        "addr",
        "add",
        "10.78.0.2/24",
        "dev",
        "eth1",
    ]);
    env.ping("guest1", "10.78.0.2", 3);
    // A third vif fits guest1's 2048 frames; a fourth is refused, clearly.
    env.ok(&["network-attach", "guest1"]);
    let o = env.splitnet(&["network-attach", "guest1"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("holds vifs eth0..eth2 only"), "{e}");
    assert!(e.contains("raise its memory_frames to 2056"), "{e}");
    env.ok(&["network-detach", "guest1", "eth2"]);
    // Detach both; the devices go, and so does everything hv held for them.
    env.ok(&["network-detach", "guest1", "1"]);
    env.ok(&["network-detach", "guest2", "eth1"]);
    let links = env.ok(&["exec", "guest1", "--", "ip", "-br", "link"]);
    assert!(!links.contains("eth1"), "{links}");
    wait_until("guest2's eth1 to go", Duration::from_secs(5), || {
        !env.ok(&["exec", "guest2", "--", "ip", "-br", "link"])
            .contains("eth1")
    });
    let o = env.splitnet(&["network-detach", "guest1", "1"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("guest1 has no vif 1"));
    let now = env.settled_as(&held);
    let after = &now.status;
    assert_eq!(after["vifs"].as_array().unwrap().len(), 2);
    for d in ["guest1", "guest2", "drv"] {
        for k in ["event_channels", "grant_maps"] {
            assert_eq!(domain(after, d)[k], domain(before, d)[k], "{d} {k}");
        }
    }
    now.assert_holds_as(&held);
    // Every grant the detached vifs made under the new mechanism is revoked.
    let live = |st: &Value| -> u64 {
        st["ngm_tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["created"].as_u64().unwrap() - t["revoked"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(live(after), live(before), "live grants");
    env.ping("guest1", "10.77.0.2", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_driver_domain_in_a_crash_loop_is_not_restarted_forever() {
    let Some(env) = Env::new("rec-loop") else {
        return;
    };
    env.ok(&["up"]);
    // Ten crashes within ten seconds: the tenth is not restarted.
    for k in 1..=10 {
        let st = env.status();
        let pid = domain(&st, "drv")["pid"].as_i64().unwrap();
        kill9(pid);
        wait_until(
            "drv to be restarted or given up",
            Duration::from_secs(10),
            || {
                let st = env.status();
                let d = domain(&st, "drv");
                if k < 10 {
                    // Restarted means a new process: an entry between two
                    // processes has no pid yet.
                    d["pid"].as_i64().is_some_and(|p| p != pid)
                } else {
                    d.is_null()
                }
            },
        );
    }
    // hv says why, and the namespace goes (just after the domain).
    wait_until("hv to give up on drv", Duration::from_secs(5), || {
        std::fs::read_to_string(env.run_dir.join("hv.log"))
            .unwrap()
            .contains("drv: crashed 10 times within 10s; not restarting it again")
            && !netns().contains(&"splitnet-drv".to_string())
    });
    assert_eq!(env.status()["restarts_after_crash"], 9);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A vif detached and attached again under the same handle while its guest
/// is stopped: the guest sees both changes in one pass over its store
/// watches, with the directory listed as before. It must take the new
/// attachment for a new device (its old channel released, a new TAP with
/// the new MAC), carry traffic over it, and leave nothing of either behind.
#[test]
fn a_vif_replaced_while_its_guest_could_not_look_is_a_new_device() {
    let Some(env) = Env::new("rec-replace") else {
        return;
    };
    env.ok(&["up"]);
    let held = env.settled();
    let before = &held.status;
    env.ok(&["network-attach", "guest1", "--mac", "00:16:3e:00:00:a1"]);
    env.ok(&["network-attach", "guest2", "--mac", "00:16:3e:00:00:b1"]);
    let old = ifindex("guest1", "eth1");
    let pid = domain(&env.status(), "guest1")["pid"].as_i64().unwrap();
    signal(pid, "STOP");
    // The stopped guest cannot close its end: hv removes the vif after its
    // handshake time, then writes the new attachment into the same place.
    let detached = env.splitnet(&["network-detach", "guest1", "1"]);
    let run_dir = env.run_dir.clone();
    let attach = std::thread::spawn(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["network-attach", "guest1", "--mac", "00:16:3e:00:00:a2"])
            .output()
    });
    wait_until("the new vif's directories", Duration::from_secs(10), || {
        vifs_of(&env.status(), "guest1").len() == 2
    });
    signal(pid, "CONT");
    let attached = attach.join().unwrap().unwrap();
    assert!(detached.status.success(), "{detached:?}");
    assert!(
        attached.status.success() && String::from_utf8_lossy(&attached.stdout).contains("as eth1"),
        "{attached:?}"
    );
    let mac = env.ok(&["exec", "guest1", "--", "cat", "/sys/class/net/eth1/address"]);
    assert_eq!(
        mac.trim(),
        "00:16:3e:00:00:a2",
        "the new device, not the old"
    );
    assert_ne!(ifindex("guest1", "eth1"), old, "a new TAP for a new device");
    for (g, a) in [("guest1", "10.78.0.1/24"), ("guest2", "10.78.0.2/24")] {
        env.ok(&["exec", g, "--", "ip", "addr", "add", a, "dev", "eth1"]);
    }
    env.ping("guest1", "10.78.0.2", 3);
    env.ok(&["network-detach", "guest1", "1"]);
    env.ok(&["network-detach", "guest2", "1"]);
    // A guest lets go of a removed vif (its store watches, then its TAP)
    // after the detach returns: the snapshot waits for the TAPs to go.
    for g in ["guest1", "guest2"] {
        wait_until(&format!("{g}'s eth1 to go"), Duration::from_secs(5), || {
            !env.ok(&["exec", g, "--", "ip", "-br", "link"])
                .contains("eth1")
        });
    }
    let now = env.settled_as(&held);
    for d in ["guest1", "guest2", "drv"] {
        for k in ["event_channels", "grant_maps"] {
            assert_eq!(domain(&now.status, d)[k], domain(before, d)[k], "{d} {k}");
        }
    }
    now.assert_holds_as(&held);
    env.ping("guest1", "10.77.0.2", 3);
}

/// A hot-plug that a driver-domain crash interrupts completes on the
/// restarted driver domain: the restart sets up every vif it knows,
/// the new one too, and the attach follows the vif to the new domain id.
/// (The driver domain is stopped first, so the attach is surely waiting on
/// it when it dies.)
#[test]
fn an_attach_interrupted_by_a_driver_domain_crash_completes_after_the_restart() {
    let Some(env) = Env::new("rec-attach-crash") else {
        return;
    };
    env.ok(&["up"]);
    let drv = domain(&env.status(), "drv").clone();
    let pid = drv["pid"].as_i64().unwrap();
    signal(pid, "STOP");
    let run_dir = env.run_dir.clone();
    let attach = std::thread::spawn(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_splitnet"))
            .arg("--run-dir")
            .arg(&run_dir)
            .args(["network-attach", "guest1", "--mac", "00:16:3e:00:00:c1"])
            .output()
    });
    wait_until("the new vif's directories", Duration::from_secs(10), || {
        vifs_of(&env.status(), "guest1").len() == 2
    });
    kill9(pid);
    let attached = attach.join().unwrap().unwrap();
    assert!(
        attached.status.success() && String::from_utf8_lossy(&attached.stdout).contains("as eth1"),
        "{attached:?}"
    );
    let st = env.status();
    assert_ne!(
        domain(&st, "drv")["pid"],
        drv["pid"],
        "drv was not restarted"
    );
    // Traffic crosses it, on a subnet only it is on.
    env.addr_add("guest1", "10.78.0.1/24", "eth1");
    env.addr_add("wire", "10.78.0.254/24", "eth0");
    env.ping("guest1", "10.78.0.254", 3);
    env.ok(&["network-detach", "guest1", "1"]);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// `curl` arguments that fetch `url` into `out` once, without retrying:
/// a connection the outage broke fails the fetch. At most `rate` bytes a
/// second (`0`: unlimited).
fn curl_once<'a>(out: &'a str, url: &'a str, rate: &'a str) -> Vec<&'a str> {
    let mut args = vec!["curl", "-sS", "--fail", "--max-time", "120", "-o", out];
    if rate != "0" {
        args.extend(["--limit-rate", rate]);
    }
    args.push(url);
    args
}

/// The wire's link goes down at the driver domain's end for two seconds,
/// as a failing NIC or its admin would take it, and comes up again. The
/// wire host sees its carrier lost (a pulled cable) and keeps its routes.
/// The driver domain opens its port again and carries on as the same
/// process: a download that spans the outage arrives intact, and one
/// whose connection began while the link was down completes once it is up.
#[test]
fn a_port_taken_down_and_up_again_carries_its_traffic_on() {
    let Some(env) = Env::new("rec-flap") else {
        return;
    };
    env.ok(&["up"]);
    env.ping("guest1", "10.77.0.254", 1);
    let drv_pid = domain(&env.status(), "drv")["pid"].clone();
    let (_server, file) = serve_blob_on_wire(&env, 24);
    let (long, late) = (env.run_dir.join("long"), env.run_dir.join("late"));
    let url = "http://10.77.0.254:8080/blob";
    let mut args = vec!["exec", "guest1", "--"];
    args.extend(curl_once(long.to_str().unwrap(), url, "4M"));
    let mut spanning = env.spawn(&args);
    wait_until(
        "the download to be under way",
        Duration::from_secs(20),
        || std::fs::metadata(&long).is_ok_and(|m| m.len() > 2 << 20),
    );
    env.ok(&[
        "exec", "drv", "--", "ip", "link", "set", "dev", "peth0", "down",
    ]);
    let carrier = in_netns("wire", &["ip", "-o", "link", "show", "eth0"]);
    assert!(carrier.contains("NO-CARRIER"), "{carrier}");
    let routes = in_netns("wire", &["ip", "route", "show", "dev", "eth0"]);
    assert!(
        routes.contains("10.77.0.0/24"),
        "the wire host lost its route: {routes}"
    );
    let mut args = vec!["exec", "guest1", "--"];
    args.extend(curl_once(late.to_str().unwrap(), url, "0"));
    let mut begun_down = env.spawn(&args);
    // The outage itself: how long the link stays down.
    std::thread::sleep(Duration::from_secs(2));
    env.ok(&[
        "exec", "drv", "--", "ip", "link", "set", "dev", "peth0", "up",
    ]);
    for (what, bg, got) in [
        ("the download across the outage", &mut spanning, &long),
        ("the download begun while down", &mut begun_down, &late),
    ] {
        assert!(bg.wait_exit(Duration::from_secs(60)), "{what} did not end");
        let code = bg.0.wait().unwrap();
        assert!(code.success(), "{what} failed: {code}");
        assert_eq!(sha256(got), sha256(&file), "{what} arrived changed");
    }
    let st = env.status();
    assert_eq!(
        domain(&st, "drv")["pid"],
        drv_pid,
        "the driver domain was restarted"
    );
    assert_eq!(st["restarts_after_crash"], 0, "{st:#}");
    env.ping("guest2", "10.77.0.254", 3);
    env.ok(&["down"]);
    assert_nothing_left();
}
