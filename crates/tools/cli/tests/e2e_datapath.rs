//! The split-driver data path end to end, as a user sees it: real
//! applications (ping, iperf3, an HTTP server and curl) in the guests and
//! the wire host, over netfront → rings → netback → bridge → port. Needs root
//! and iperf3, curl, python3 and ping.

mod common;

use common::*;
use std::time::{Duration, Instant};

fn ping(env: &Env, from: &str, to: &str) {
    let mut args = vec![
        "exec", from, "--", "ping", "-c", "2", "-W", "2", "-w", "10", "-i", "0.2",
    ];
    if to.contains(':') {
        args.insert(4, "-6");
    }
    args.push(to);
    // With `-w`, ping sends until two are answered: requests 1 and 2 must be.
    let out = env.ok(&args);
    if let Err(e) = testutil::ping::answered_in_full(&out, 2) {
        panic!("{from} -> {to}: {e}:\n{out}");
    }
}

/// Writes topology `text` as `name` in the run directory; its path.
fn write_topology(env: &Env, name: &str, text: &str) -> String {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn traffic_everywhere(env: &Env) {
    ping(env, "guest1", "10.77.0.254");
    ping(env, "guest2", "10.77.0.254");
    ping(env, "guest1", "10.77.0.2");
    ping(env, "guest2", "10.77.0.1");
    ping(env, "guest1", "fd77::fe");
    ping(env, "guest1", "fd77::2");
    // ARP resolved the wire host's MAC through the bridge.
    let neigh = env.ok(&["exec", "guest1", "--", "ip", "neigh", "show", "10.77.0.254"]);
    let wire_mac = env.ok(&["exec", "wire", "--", "cat", "/sys/class/net/eth0/address"]);
    assert!(
        neigh.contains(wire_mac.trim()),
        "ARP: {neigh:?} lacks {wire_mac:?}"
    );
    let tx = iperf(env, "wire", "10.77.0.254", "guest1", false, 2);
    let rx = iperf(env, "wire", "10.77.0.254", "guest1", true, 2);
    let gg = iperf(env, "guest2", "10.77.0.2", "guest1", false, 2);
    eprintln!("iperf3: guest1->wire {tx:.2} Gbit/s, wire->guest1 {rx:.2}, guest1->guest2 {gg:.2}");
    udp_wire_to_guest1();
}

/// UDP from the wire host to guest1 (iperf3 -u -R). The wire's UDP stack
/// hands its veth partial checksums; each datagram must reach guest1's
/// kernel complete or marked partial, never as a checksum error.
fn udp_wire_to_guest1() {
    let before = udp_in("guest1");
    let r = flow(
        "wire",
        "10.77.0.254",
        "guest1",
        true,
        1,
        bench::netenv::Workload::UdpSmall,
    );
    // The counters first: they say why iperf3 failed, if it did.
    assert_udp_checksums_good("guest1", before, "iperf3 -u wire -> guest1");
    let r = r.unwrap_or_else(|e| panic!("iperf3 -u wire -> guest1: {e:#}"));
    assert!(r.packets > 0.0, "iperf3 -u wire -> guest1 carried nothing");
}

#[test]
fn default_mode_carries_real_applications() {
    let Some(env) = Env::new("dp-default") else {
        return;
    };
    env.ok(&["up"]);
    traffic_everywhere(&env);
    http_fetch_64mib(&env);
    let st = env.status();
    let v = vif(&st, "guest1");
    assert_eq!(
        (
            v["grants"].as_str(),
            v["rx_mode"].as_str(),
            v["tx_mode"].as_str(),
            v["offload"].as_bool()
        ),
        (Some("ngm"), Some("copy"), Some("gather"), Some(true))
    );
    assert_eq!(v["features"]["feature-gso-tcpv4"], true);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let st = env.status();
        let v = vif(&st, "guest1");
        let (c, fc, g) = (&v["counters"], &v["frontend_counters"], &v["grant_track"]);
        let uses = g["uses"].as_u64().unwrap_or(0);
        if c["rx_bytes"].as_u64().unwrap_or(0) > 64 << 20
            && fc["rx_bytes"].as_u64().unwrap_or(0) > 64 << 20
        {
            assert!(c["tx_packets"].as_u64().unwrap() > 0);
            assert!(c["notifications_sent"].as_u64().unwrap() > 0);
            // Under the new grant mechanism no packet needs a grant hypercall.
            assert_eq!(c["grant_ops"], serde_json::json!({}), "{c}");
            let ops = &st["counters"]["ops"];
            assert_eq!(ops["grant_copy"].as_u64().unwrap_or(0), 0, "{ops}");
            // Each guest granted its pool of 512 frames in one hypercall.
            assert_eq!(ops["ngm_grant"].as_u64().unwrap_or(0), 0, "{ops}");
            assert_eq!(ops["ngm_grant_many"].as_u64().unwrap_or(0), 2, "{ops}");
            // A few hundred pages served every packet (Ram thesis 4.8).
            let pages = g["created"].as_u64().unwrap();
            assert!(pages <= 512 && uses > 20 * pages, "grant track: {g}");
            assert_eq!(c["rejected"], serde_json::json!({}));
            assert_eq!(fc["rejected"], serde_json::json!({}), "{fc}");
            assert_eq!(fc["drops"], serde_json::json!({}), "{fc}");
            // The loops' own counts: wake-ups and system calls per frame
            // (how few per frame is `bench baseline`'s to report).
            let dl = &st["bridges"][0]["loop"];
            assert!(dl["frames"].as_u64().unwrap() > 1000, "{dl}");
            let per = |l: &serde_json::Value, k: &str| l[k].as_f64().unwrap_or(f64::MAX);
            assert!(per(dl, "wakeups_per_frame") > 0.0, "{dl}");
            assert!(per(dl, "syscalls_per_frame") > 0.0, "{dl}");
            let gl = &v["guest_loop"];
            assert!(gl["wakeups"].as_u64().unwrap() > 0, "{gl}");
            assert!(gl["syscalls_per_frame"].as_f64().is_some(), "{gl}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counters never showed the transfer: backend {c}, frontend {fc}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    env.ok(&["down"]);
    assert_nothing_left();
}

/// guest1 on half-page RX buffers with prefetch (Ram thesis 5.2, 5.3):
/// real applications, including 64 KiB GSO frames over 2 KiB buffers, and
/// its 256 RX buffers in 128 granted pages.
#[test]
fn half_page_buffers_and_prefetch_carry_real_applications() {
    let Some(env) = Env::new("dp-halfpg") else {
        return;
    };
    let topo = toolstack::topology::DEFAULT_TOML.replace(
        "address = \"10.77.0.1/24\"",
        "address = \"10.77.0.1/24\"\nrx_buffer = \"half\"\nprefetch = true",
    );
    let path = write_topology(&env, "halfpg.toml", &topo);
    env.ok(&["up", "--config", &path]);
    traffic_everywhere(&env);
    http_fetch_64mib(&env);
    let st = env.status();
    let (v1, v2) = (vif(&st, "guest1"), vif(&st, "guest2"));
    let (g1, g2) = (&v1["grant_track"], &v2["grant_track"]);
    // 256 TX pages and 128 RX pages against 256 and 256.
    assert_eq!(g1["created"].as_u64(), Some(256 + 128), "{g1}");
    assert_eq!(g2["created"].as_u64(), Some(512), "{g2}");
    assert!(g1["uses"].as_u64().unwrap() > 20 * 384, "{g1}");
    for v in [&v1, &v2] {
        assert_eq!(v["counters"]["rejected"], serde_json::json!({}), "{v}");
        assert_eq!(
            v["frontend_counters"]["rejected"],
            serde_json::json!({}),
            "{v}"
        );
    }
    let text = env.ok(&["status"]);
    assert!(text.contains("384 pages granted served"), "{text}");
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn hv_copy_preset_carries_real_applications() {
    let Some(env) = Env::new("dp-hvcopy") else {
        return;
    };
    // The bounded spin before sleeping rides along: traffic must flow the same.
    env.ok(&["up", "--preset", "hv-copy", "--spin-us", "50"]);
    let st = env.status();
    for d in ["drv", "guest1", "guest2"] {
        assert_eq!(domain(&st, d)["spin_us"], 50, "{d}");
    }
    traffic_everywhere(&env);
    let v = wait_until("grant copies counted", Duration::from_secs(3), || {
        let st = env.status();
        let v = vif(&st, "guest1").clone();
        assert_eq!(
            (
                v["grants"].as_str(),
                v["rx_mode"].as_str(),
                v["tx_mode"].as_str()
            ),
            (Some("hv-copy"), Some("copy"), Some("copy"))
        );
        if v["counters"]["grant_ops"]["copy"].as_u64().unwrap_or(0) > 0 {
            Ok(v)
        } else {
            Err(v)
        }
    });
    assert!(v["grant_track"].is_null(), "no track table under hv-copy");
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn seed_baseline_mode_carries_real_applications() {
    let Some(env) = Env::new("dp-baseline") else {
        return;
    };
    env.ok(&["up", "--preset", "baseline"]);
    let g = baseline_grant_ops(&env);
    // On this host (userfaultfd, no swap) every map is a page-table entry
    // in the guest's pool mirror, through the driver domain's jail.
    if !std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() > 1) {
        assert_eq!(g["map_pte"], g["map"], "maps by page-table entry: {g}");
    }
    // Each flip did its page work (Menon 2006 §4.2): the guest unmapped the
    // pages it offered and mapped the flipped ones back in a run at a time,
    // the driver domain took replacements for its own.
    let v = wait_until("a flip's page work counted", Duration::from_secs(3), || {
        let v = vif(&env.status(), "guest1").clone();
        let n = |k: &str, op: &str| v[k]["grant_ops"][op].as_u64().unwrap_or(0);
        let front = n("frontend_counters", "unmap") > 0 && n("frontend_counters", "remap") > 0;
        if front && n("counters", "replace") > 0 {
            Ok(v)
        } else {
            Err(v)
        }
    });
    let be = &v["counters"]["grant_ops"];
    assert!(
        be["replace"].as_u64() <= be["transfer"].as_u64(),
        "a replacement per flip at most: {be}"
    );
    let fe = &v["frontend_counters"]["grant_ops"];
    assert!(
        fe["remap"].as_u64() <= fe["transfer_done"].as_u64(),
        "a page mapped back per flip at most: {fe}"
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

/// `grant_maps = "mmap"` on the driver domain: the same traffic, every map
/// an mmap into the window, none a page-table entry.
#[test]
fn seed_baseline_mode_maps_by_mmap_when_asked() {
    let Some(env) = Env::new("dp-mmap") else {
        return;
    };
    let topo = toolstack::topology::DEFAULT_TOML.replace(
        "kind = \"driver\"\n",
        "kind = \"driver\"\ngrant_maps = \"mmap\"\n",
    );
    let path = write_topology(&env, "mmap.toml", &topo);
    env.ok(&["up", "--preset", "baseline", "--config", &path]);
    let g = baseline_grant_ops(&env);
    assert_eq!(
        g["map_pte"].as_u64().unwrap_or(0),
        0,
        "no map by page-table entry: {g}"
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

/// Real traffic over Xen 2.0's flips and maps: guest1's grant counters once
/// both moved, after checking each map was unmapped and nothing copied.
fn baseline_grant_ops(env: &Env) -> serde_json::Value {
    traffic_everywhere(env);
    let v = wait_until("flips and maps counted", Duration::from_secs(3), || {
        let st = env.status();
        let v = vif(&st, "guest1").clone();
        assert_eq!(
            (v["rx_mode"].as_str(), v["tx_mode"].as_str()),
            (Some("flip"), Some("map"))
        );
        let g = &v["counters"]["grant_ops"];
        if g["transfer"].as_u64().unwrap_or(0) > 0 && g["map"].as_u64().unwrap_or(0) > 0 {
            Ok(v)
        } else {
            Err(v)
        }
    });
    let g = v["counters"]["grant_ops"].clone();
    assert_eq!(g["map"], g["unmap"], "every map is unmapped");
    assert!(
        g["copy"].as_u64().unwrap_or(0) == 0,
        "baseline mode must not copy: {g}"
    );
    g
}

#[test]
fn killing_a_guest_mid_transfer_spares_the_driver_and_the_other_guest() {
    let Some(env) = Env::new("dp-killguest") else {
        return;
    };
    env.ok(&["up"]);
    let st = env.status();
    let pid = domain(&st, "guest1")["pid"].as_i64().unwrap();
    // guest1 streams to the wire host (returns once the wire host has
    // received data from it); kill it in the middle.
    let stream = env.stream_to_wire("guest1", 10);
    // netback's own counters (published twice a second) show it too.
    wait_until(
        "netback to count guest1's stream",
        Duration::from_secs(5),
        || {
            vif(&env.status(), "guest1")["counters"]["tx_bytes"]
                .as_u64()
                .unwrap_or(0)
                > 4 << 20
        },
    );
    kill9(pid);
    wait_until("guest1 reclaimed", Duration::from_secs(10), || {
        let st = env.status();
        // The backend closes; then the toolstack removes its directory.
        let closed = ["Closed", "gone"]
            .contains(&vif(&st, "guest1")["backend_state"].as_str().unwrap_or(""));
        if domain(&st, "guest1").is_null() && closed {
            Ok(())
        } else {
            Err(format!("{st:#}"))
        }
    });
    drop(stream);
    // The driver domain and guest2 carry on.
    let st = env.status();
    assert_eq!(domain(&st, "drv")["connected"], true);
    assert_eq!(vif(&st, "guest2")["backend_state"], "Connected");
    ping(&env, "guest2", "10.77.0.254");
    iperf(&env, "wire", "10.77.0.254", "guest2", false, 1);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn a_driver_domain_that_may_not_restart_takes_guest_links_down_cleanly() {
    let Some(env) = Env::new("dp-killdrv") else {
        return;
    };
    // By default hv restarts a driver domain that crashed; this one may not.
    let topo = toolstack::topology::DEFAULT_TOML.replace(
        "kind = \"driver\"",
        "kind = \"driver\"\nrestart = \"never\"",
    );
    let path = write_topology(&env, "never.toml", &topo);
    env.ok(&["up", "--config", &path]);
    let st = env.status();
    let drv = domain(&st, "drv")["pid"].as_i64().unwrap();
    let g1 = domain(&st, "guest1")["pid"].as_i64().unwrap();
    ping(&env, "guest1", "10.77.0.254");
    kill9(drv);
    wait_until("guest1's link to go down", Duration::from_secs(10), || {
        let link = env.ok(&["exec", "guest1", "--", "ip", "link", "show", "eth0"]);
        if link.contains("NO-CARRIER") {
            Ok(())
        } else {
            Err(link)
        }
    });
    // The guests neither hung nor crashed, and hv still answers.
    let st = env.status();
    assert!(domain(&st, "drv").is_null());
    assert_eq!(domain(&st, "guest1")["pid"], g1);
    assert!(std::path::Path::new(&format!("/proc/{g1}")).exists());
    let o = env.splitnet(&[
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        "10.77.0.254",
    ]);
    assert!(
        !o.status.success(),
        "no path should remain without the driver domain"
    );
    env.ok(&["down"]);
    assert_nothing_left();
}
