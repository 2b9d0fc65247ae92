//! Multi-queue with direct placement (Ram thesis ch. 3) end to end: with
//! `mq = true` each guest's vif gets a macvlan queue on the driver
//! domain's port, whose frames land straight in the guest's posted
//! buffers, without the bridge. Needs root, iperf3, curl, python3, ping.

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(10);

/// The default topology with `guest_lines` added to both guests and
/// `wire_lines` to the wire host.
fn topology(guest_lines: &str, wire_lines: &str) -> String {
    let mut t =
        "name = \"mq\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\nmemory_frames = 4096\n"
            .to_string();
    for i in 1..=2 {
        t += &format!(
            "[[domain]]\nname = \"guest{i}\"\nkind = \"guest\"\naddress = \"10.77.0.{i}/24\"\nipv6 = \"fd77::{i}/64\"\n{guest_lines}\n"
        );
    }
    t + "[wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\nipv6 = \"fd77::fe/64\"\n"
        + wire_lines
}

fn up(env: &Env, text: &str) {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("mq.toml");
    std::fs::write(&path, text).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
}

/// `guest`'s first vif's `queue` object.
fn queue(env: &Env, guest: &str) -> Value {
    vif(&env.status(), guest)["queue"].clone()
}

fn num(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// Waits for `guest`'s queue to be dedicated (the vif connected and the
/// driver published it).
fn dedicated(env: &Env, guest: &str) -> Value {
    wait_until(&format!("{guest}'s queue dedicated"), LIMIT, || {
        queue(env, guest)["state"] == "dedicated"
    });
    queue(env, guest)
}

/// Waits until `guest`'s queue has taken more than `before` frames, and
/// returns its vif as the status that showed it: the vif's counters and
/// its queue's are one document the driver domain writes at once, so they
/// compare as one snapshot.
fn direct_rises(env: &Env, guest: &str, before: u64) -> Value {
    wait_until("rx_direct_packets to move", LIMIT, || {
        let v = vif(&env.status(), guest).clone();
        (num(&v["queue"], "rx_direct_packets") > before).then_some(v)
    })
}

#[test]
fn frames_land_straight_in_the_guest_and_broadcast_arrives_once() {
    let Some(env) = Env::new("mq-direct") else {
        return;
    };
    up(&env, &topology("mq = true", ""));
    let q = dedicated(&env, "guest1");
    assert_eq!(q["port"], "peth0");
    let name = q["name"].as_str().unwrap().to_string();
    assert!(macvlans().contains(&name), "{name} not in {:?}", macvlans());
    dedicated(&env, "guest2");
    // Broadcast from the wire (ping -b) reaches guest1 once: one reply per
    // request, never a duplicate.
    env.ok(&[
        "exec",
        "guest1",
        "--",
        "sysctl",
        "-qw",
        "net.ipv4.icmp_echo_ignore_broadcasts=0",
    ]);
    let out = env.ok(&[
        "exec",
        "wire",
        "--",
        "ping",
        "-b",
        "-c",
        "4",
        "-i",
        "0.3",
        "-W",
        "2",
        "10.77.0.255",
    ]);
    let from_g1 = out
        .lines()
        .filter(|l| l.contains("from 10.77.0.1:"))
        .count();
    assert_eq!(from_g1, 4, "one reply per broadcast:\n{out}");
    assert!(!out.contains("DUP!"), "a broadcast arrived twice:\n{out}");
    let uni = env.ok(&[
        "exec",
        "wire",
        "--",
        "ping",
        "-c",
        "4",
        "-i",
        "0.2",
        "10.77.0.1",
    ]);
    if let Err(e) = testutil::ping::answered_in_full(&uni, 4) {
        panic!("wire -> guest1: {e}:\n{uni}");
    }
    // TCP and a 64 MiB download from the wire: through the queue, not the
    // bridge (guest1's frames that did not come by its queue stay few).
    let st = env.status();
    let (rx0, direct0) = (
        num(&vif(&st, "guest1")["counters"], "rx_packets"),
        num(&vif(&st, "guest1")["queue"], "rx_direct_packets"),
    );
    let gbps = iperf(&env, "wire", "10.77.0.254", "guest1", true, 3);
    let tx_gbps = iperf(&env, "wire", "10.77.0.254", "guest1", false, 2);
    let mbps = http_fetch_64mib(&env);
    eprintln!("mq: guest1 -> wire iperf3 {tx_gbps:.2} Gbit/s (through its queue)");
    eprintln!("mq: wire -> guest1 iperf3 {gbps:.2} Gbit/s, HTTP 64 MiB {mbps:.0} Mbit/s");
    let v = direct_rises(&env, "guest1", direct0 + 1000);
    let (q, rx1) = (&v["queue"], num(&v["counters"], "rx_packets"));
    let direct1 = num(q, "rx_direct_packets");
    // Frames the queue copied to the shared path came by the queue too.
    let copied = num(q, "rx_fallback_packets") + num(q, "rx_spilled_packets");
    let bridged = (rx1 - rx0).saturating_sub(direct1 - direct0 + copied);
    eprintln!(
        "guest1: {} frames by its queue, {bridged} through the bridge, {} to the shared path",
        direct1 - direct0,
        num(q, "rx_fallback_packets")
    );
    assert!(
        bridged * 100 < direct1 - direct0,
        "{bridged} frames came through the bridge, {} by the queue",
        direct1 - direct0
    );
    assert_eq!(q["state"], "dedicated");
    assert!(
        num(q, "tx_packets") > 1000,
        "guest1's frames left by its queue: {q}"
    );
}

#[test]
fn vifs_beyond_the_queue_limit_share_the_default_queue_and_say_why() {
    let Some(env) = Env::new("mq-limit") else {
        return;
    };
    up(&env, &topology("mq = true", "queues = 1\n"));
    // The guests connect in no fixed order: the first takes the one queue.
    let mut owner = "";
    wait_until("one guest's queue dedicated", LIMIT, || {
        owner = ["guest1", "guest2"]
            .into_iter()
            .find(|g| queue(&env, g)["state"] == "dedicated")
            .unwrap_or("");
        !owner.is_empty()
    });
    let (q1, other) = (
        queue(&env, owner),
        if owner == "guest1" {
            "guest2"
        } else {
            "guest1"
        },
    );
    wait_until("the other guest's queue state", LIMIT, || {
        queue(&env, other)["state"] == "shared"
    });
    let q2 = queue(&env, other);
    let why = q2["why"].as_str().unwrap_or("");
    assert!(why.contains("queues are all in use"), "{q2}");
    assert_eq!(macvlans(), [q1["name"].as_str().unwrap().to_string()]);
    // The shared one still carries traffic, through the bridge.
    env.ping(other, "10.77.0.254", 3);
    let text = env.ok(&["status"]);
    assert!(
        text.contains("queue: shared on peth0 (the port's 1 queues are all in use)"),
        "{text}"
    );
    // A vif with the port's own MAC is refused a queue, and counted.
    let port_mac = Command::new("ip")
        .args(["-n", "splitnet-drv", "-br", "link", "show", "peth0"])
        .output()
        .unwrap();
    let port_mac = String::from_utf8_lossy(&port_mac.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string();
    env.ok(&["network-detach", owner, "0"]);
    wait_until("the dedicated queue to go", LIMIT, || macvlans().is_empty());
    env.ok(&[
        "network-attach",
        owner,
        &format!("mac={port_mac},pdev=peth0"),
    ]);
    wait_until("the port-MAC vif's queue refused", LIMIT, || {
        vifs_of(&env.status(), owner).iter().any(|v| {
            v["queue"]["why"]
                .as_str()
                .is_some_and(|w| w.contains("port's own"))
        })
    });
    assert!(macvlans().is_empty(), "{:?}", macvlans());
}

/// Every vif of `guest` in `status --json`.
fn vifs_of(st: &Value, guest: &str) -> Vec<Value> {
    st["vifs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["guest"] == guest)
        .cloned()
        .collect()
}

/// 200 attach/detach cycles by default (`SPLITNET_MQ_CYCLES` sets another
/// count): a queue left behind per cycle, or per hundred, shows in the
/// exact count of macvlans at the end.
#[test]
fn attach_detach_cycles_and_a_killed_driver_leave_no_queue_behind() {
    let Some(env) = Env::new("mq-lost") else {
        return;
    };
    up(&env, &topology("mq = true", ""));
    dedicated(&env, "guest1");
    let cycles: usize = std::env::var("SPLITNET_MQ_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let t0 = std::time::Instant::now();
    for i in 0..cycles {
        env.ok(&["network-attach", "guest2", "pdev=peth0"]);
        env.ok(&["network-detach", "guest2", "1"]);
        if i % 100 == 0 {
            eprintln!("cycle {i}: {:?}, macvlans {:?}", t0.elapsed(), macvlans());
        }
    }
    wait_until("only the first vifs' queues left", LIMIT, || {
        macvlans().len() == 2
    });
    // The driver domain dies: its restart deletes what it left and makes
    // the queues again; traffic resumes through them.
    let st = env.status();
    let pid = domain(&st, "drv")["pid"].as_i64().unwrap();
    kill9(pid);
    wait_until(
        "the driver domain restarted",
        Duration::from_secs(20),
        || {
            let d = domain(&env.status(), "drv").clone();
            d["pid"].as_i64().is_some_and(|p| p != pid)
                && queue(&env, "guest1")["state"] == "dedicated"
        },
    );
    let names = macvlans();
    assert_eq!(names.len(), 2, "{names:?}");
    let before = num(&queue(&env, "guest1"), "rx_direct_packets");
    env.ping("wire", "10.77.0.1", 3);
    direct_rises(&env, "guest1", before);
    env.ok(&["down"]);
}

/// The thesis's "MQ" without the new grant mechanism: the queue fills the
/// vif's staging frames and hv copies them into the guest's buffers.
#[test]
fn under_hv_copy_the_queue_fills_staging_frames_and_data_arrives_intact() {
    let Some(env) = Env::new("mq-hvcopy") else {
        return;
    };
    up(
        &env,
        &topology("mq = true\ngrants = \"hv-copy\"\ntx_mode = \"copy\"", ""),
    );
    let before = num(&dedicated(&env, "guest1"), "rx_direct_packets");
    let gbps = iperf(&env, "wire", "10.77.0.254", "guest1", true, 3);
    let mbps = http_fetch_64mib(&env);
    eprintln!("mq + hv-copy: wire -> guest1 iperf3 {gbps:.2} Gbit/s, HTTP 64 MiB {mbps:.0} Mbit/s");
    let q = &direct_rises(&env, "guest1", before + 1000)["queue"];
    assert_eq!(num(q, "rx_fallback_packets"), 0, "{q}");
    let st = env.status();
    let c = &vif(&st, "guest1")["counters"];
    assert!(
        c["rejected"].as_object().is_none_or(|r| r.is_empty()),
        "{c}"
    );
}

/// A queue's frames in half-page (2 KiB) buffers: each lands in the half
/// of its page the guest posted, whose offset its response carries; a
/// frame in the wrong half would fail the file's SHA-256.
fn half_page_buffers_through_the_queue(env: &Env, extra: &str) {
    up(
        env,
        &topology(
            &format!("mq = true\nrx_buffer = \"half\"\nprefetch = true\n{extra}"),
            "",
        ),
    );
    let before = num(&dedicated(env, "guest1"), "rx_direct_packets");
    // MTU frames, as a NIC delivers them: the queue receives in batches,
    // each frame in one half page.
    env.ok(&[
        "exec", "wire", "--", "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
    ]);
    let mbps = http_fetch_64mib(env);
    let q = &direct_rises(env, "guest1", before + 40_000)["queue"];
    eprintln!("mq + half-page buffers {extra}: HTTP 64 MiB {mbps:.0} Mbit/s; {q}");
    assert_eq!(q["state"], "dedicated", "{q}");
    let st = env.status();
    let v = vif(&st, "guest1");
    assert_eq!(v["counters"]["rejected"], serde_json::json!({}), "{v}");
    assert_eq!(
        v["frontend_counters"]["rejected"],
        serde_json::json!({}),
        "{v}"
    );
    env.ok(&["down"]);
}

#[test]
fn half_page_buffers_take_queue_frames_at_their_offset() {
    let Some(env) = Env::new("mq-half") else {
        return;
    };
    half_page_buffers_through_the_queue(&env, "");
}

#[test]
fn half_page_buffers_take_staged_queue_frames_at_their_offset() {
    let Some(env) = Env::new("mq-half-hvcopy") else {
        return;
    };
    half_page_buffers_through_the_queue(&env, "grants = \"hv-copy\"\ntx_mode = \"copy\"");
}

/// `lro = "driver"` on a vif with a dedicated queue: netback never reads
/// the queue's frames, so status says LRO is bypassed and why.
#[test]
fn driver_domain_lro_says_a_dedicated_queue_bypasses_it() {
    let Some(env) = Env::new("mq-lro") else {
        return;
    };
    up(&env, &topology("mq = true\nlro = \"driver\"", ""));
    // Frames the queue received: placed straight in the guest's buffers,
    // or spilled from a batch to the shared path. 64 MiB in frames of at
    // most 64 KiB is more than 1,000 of them, however they split.
    let took = |q: &Value| num(q, "rx_direct_packets") + num(q, "rx_spilled_packets");
    let before = took(&dedicated(&env, "guest1"));
    http_fetch_64mib(&env);
    wait_until("the download to come by the queue", LIMIT, || {
        took(&queue(&env, "guest1")) > before + 1000
    });
    let st = env.status();
    let lro = &vif(&st, "guest1")["lro"];
    assert_eq!(lro["where"], "driver", "{lro}");
    assert_eq!(lro["on"], false, "{lro}");
    let why = lro["why"].as_str().unwrap_or_default();
    assert!(why.contains("dedicated queue"), "{lro}");
    env.ok(&["down"]);
}

/// 64-byte UDP datagrams to guest2's discard port as fast as one core
/// sends them, for 5 seconds (no receiver: nothing in guest2 slows it).
const FLOOD: &str = "import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nd=b'x'*64\nend=time.time()+5\nwhile time.time()<end:\n    for _ in range(1000):\n        s.sendto(d,('10.77.0.2',9))\n";

/// TCP wire → guest1 for `secs` seconds (guest1 serves): Gbit/s.
fn tcp_to_guest1(secs: u32) -> f64 {
    let r = flow(
        "guest1",
        "10.77.0.1",
        "wire",
        false,
        secs,
        bench::netenv::Workload::TcpCopy,
    )
    .unwrap_or_else(|e| panic!("iperf3 wire -> guest1: {e:#}"));
    r.gbps
}

/// guest1's TCP from the wire alone and while guest2 is flooded with
/// UDP from the wire (the median of three runs each); and the frames
/// guest2 received meanwhile.
fn tcp_alone_and_flooded(env: &Env) -> (f64, f64, u64) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let alone = median((0..3).map(|_| tcp_to_guest1(3)).collect());
    let rx = || num(&vif(&env.status(), "guest2")["counters"], "rx_packets");
    let before = rx();
    let mut together = Vec::new();
    for _ in 0..3 {
        let start = rx();
        let flood = env.spawn(&["exec", "wire", "--", "python3", "-c", FLOOD]);
        // The flood is under way once guest2's count moves.
        wait_until("the flood reaching guest2", Duration::from_secs(10), || {
            rx() > start
        });
        together.push(tcp_to_guest1(3));
        drop(flood);
    }
    // What guest2 took, once the driver domain has published it.
    wait_until(
        "guest2's count of the flood",
        Duration::from_secs(10),
        || rx().saturating_sub(before) > 10_000,
    );
    (alone, median(together), rx().saturating_sub(before))
}

/// A guest whose queue is flooded (64-byte UDP from the wire, as fast as
/// one core sends) cannot starve another guest's queue: the loop serves
/// each queue at most `QUEUE_BUDGET` frames a turn. The goal is guest1's
/// TCP within 20% of what it gets alone; on a machine whose cores the
/// flood's sender and the kernel share with both guests and the driver
/// domain, that measures the CPU as much as the queues, so the test holds
/// guest1 to what it gets through the bridge under the same flood (within
/// 20%), and never below a fifth of its rate alone. The two are compared
/// in Gbit/s, not as shares of each one's rate alone: a queue skips the
/// bridge, so guest1 alone is faster with one (5.67 against 3.34 Gbit/s
/// in a run where it then kept 3.05 under the flood against the bridge's
/// 2.51), and a share of that larger rate failed a run in which the queue
/// did better than the bridge.
#[test]
fn a_flooded_queue_does_not_starve_another_guests_queue() {
    let Some(env) = Env::new("mq-starve") else {
        return;
    };
    up(&env, &topology("", ""));
    let (b_alone, b_flooded, b_rx) = tcp_alone_and_flooded(&env);
    env.ok(&["down"]);
    up(&env, &topology("mq = true", ""));
    dedicated(&env, "guest1");
    dedicated(&env, "guest2");
    let (alone, flooded, rx) = tcp_alone_and_flooded(&env);
    let (ratio, bridge_ratio) = (flooded / alone, b_flooded / b_alone);
    eprintln!(
        "guest1 TCP from the wire, alone / while guest2 is flooded: mq {alone:.2} / {flooded:.2} Gbit/s ({:.0}%, guest2 took {rx} frames); bridge {b_alone:.2} / {b_flooded:.2} ({:.0}%, guest2 took {b_rx})",
        100.0 * ratio,
        100.0 * bridge_ratio
    );
    assert!(rx > 10_000, "the flood never reached guest2's queue");
    assert!(
        ratio >= 0.2,
        "guest1 starved: {flooded:.2} Gbit/s, {alone:.2} alone"
    );
    assert!(
        flooded >= 0.8 * b_flooded,
        "guest1 keeps {flooded:.2} Gbit/s with queues, {b_flooded:.2} through the bridge"
    );
}
