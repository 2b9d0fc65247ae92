//! The HVM NIC (Zhang & Dong) end to end: guest1's port accesses are I/O
//! exits through hv to a device-model process in the driver domain's
//! namespace, guest2 has a paravirtual vif. Real applications (ping, iperf3,
//! curl against python's HTTP server) with the vPIC in hv and in the device
//! model, event-driven and polling receive; a hostile guest; restarts.
//! Needs root and iperf3, curl, python3 and ping.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

fn up(env: &Env, hvm_keys: &str) {
    env.up_emulated("hvm", &format!("nic = \"hvm\"\n{hvm_keys}"));
}

/// guest1's HVM-NIC entry in `status --json`, once hv's accounting is in.
fn hvm(env: &Env) -> Value {
    env.emulated_nic(|h| h["exits"].as_u64().is_some() && h["exit_reasons"].is_object())
}

fn report(what: &str, h: &Value) {
    eprintln!(
        "{what}: PIC in {}, {} exits (mean {} cycles as the guest sees them), {} forwarded \
         (round trip {} cycles, stages {}); by reason {}; {} IRQs; {} packets out, {} in",
        h["pic"],
        h["exits"],
        h["exit_mean_cycles"],
        h["forwarded_exits"],
        h["round_trip_mean_cycles"],
        h["stage_mean_cycles"],
        h["exit_reasons"],
        h["irqs"],
        h["tx_packets"],
        h["rx_packets"],
    );
}

/// Pings both ways and over IPv6, iperf3 both ways for `secs`, the HTTP
/// download of `mib` MiB (SHA-256 checked), guest2 meanwhile.
fn everything(env: &Env, hvm_keys: &str, label: &str, secs: u32, mib: u32) -> Value {
    up(env, hvm_keys);
    env.ping_guest1_all_ways();
    let tx = iperf(env, "wire", "10.77.0.254", "guest1", false, secs) * 1000.0;
    let rx = iperf(env, "wire", "10.77.0.254", "guest1", true, secs) * 1000.0;
    let http = http_fetch_mib(env, mib);
    let g2 = env.guest2_unaffected();
    let h = hvm(env);
    eprintln!(
        "{label}: iperf3 guest1->wire {tx:.1} Mbit/s, wire->guest1 {rx:.1}; {mib} MiB HTTP {http:.1} Mbit/s; guest2->wire {g2:.1}"
    );
    report(label, &h);
    let reasons = &h["exit_reasons"];
    assert!(reasons["io_nic"]["count"].as_u64().unwrap() > 0, "{h}");
    assert!(
        reasons["interrupt"]["count"].as_u64().unwrap_or(0) > 0 || h["irqs"].as_u64().unwrap() > 0,
        "{h}"
    );
    assert!(h["forwarded_exits"].as_u64().unwrap() > 0, "{h}");
    let plain = env.ok(&["status"]);
    assert!(plain.contains("hvm NIC guest1"), "{plain}");
    let prom = env.ok(&["status", "--prometheus"]);
    assert!(
        prom.contains("splitnet_hvm_exits_total{domain=\"guest1\",reason=\"io_nic\"}"),
        "{prom}"
    );
    // trace counts what happens while it runs: give it exits to see.
    let trace = env.trace_while_guest1_pings();
    assert!(trace.contains("hvm:io_nic"), "{trace}");
    h
}

#[test]
fn hvm_guest_pic_in_hv_event_driven_carries_real_applications() {
    let Some(env) = Env::new("hvm-hv-event") else {
        return;
    };
    let h = everything(
        &env,
        "hvm_pic = \"hv\"\nhvm_rx = \"event\"",
        "PIC in hv, event",
        3,
        16,
    );
    assert_eq!(h["pic"], "hv");
    assert!(h["exit_reasons"]["io_pic_hv"]["count"].as_u64().unwrap() > 0);
    assert!(h["exit_reasons"]["io_pic_dm"].is_null(), "{h}");
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn hvm_guest_pic_in_dm_event_driven_carries_real_applications() {
    let Some(env) = Env::new("hvm-dm-event") else {
        return;
    };
    // With the guest's timer (Zhang & Dong Table 4): four PIC accesses per
    // tick, every one a round trip to the device model.
    let h = everything(
        &env,
        "hvm_pic = \"dm\"\nhvm_timer_hz = 100",
        "PIC in the DM, event, timer",
        3,
        16,
    );
    assert_eq!(h["pic"], "dm");
    assert!(h["exit_reasons"]["io_pic_hv"].is_null(), "{h}");
    assert!(
        h["options"]
            .as_str()
            .unwrap_or_default()
            .contains("timer_hz=100"),
        "{h}"
    );
    let ticks = h["timer_interrupts"].as_u64().unwrap_or(0);
    assert!(ticks >= 100, "the guest's timer ran for seconds: {h}");
    // The guest published its ticks before hv counted these exits.
    let pic = h["exit_reasons"]["io_pic_dm"]["count"]
        .as_u64()
        .unwrap_or(0);
    assert!(pic >= 4 * ticks, "{pic} PIC exits for {ticks} ticks: {h}");
    env.ok(&["down"]);
    assert_nothing_left();
}

/// Polling receive is slow (frames wait for the next tick): little traffic.
#[test]
fn hvm_guest_polling_carries_real_applications() {
    let Some(env) = Env::new("hvm-poll") else {
        return;
    };
    everything(
        &env,
        "hvm_rx = \"poll\"\nhvm_poll_us = 5000",
        "PIC in hv, polling 5 ms",
        2,
        2,
    );
    env.ok(&["down"]);
    assert_nothing_left();
}

/// Also Xen's two-hop wake: each request reaches the device model through
/// dom0's upcall handler (Zhang & Dong §4.2).
#[test]
fn hvm_guest_pic_in_dm_polling_woken_through_an_upcall_carries_real_applications() {
    let Some(env) = Env::new("hvm-dm-poll") else {
        return;
    };
    let h = everything(
        &env,
        "hvm_pic = \"dm\"\nhvm_rx = \"poll\"\nhvm_poll_us = 5000\nhvm_wake = \"upcall\"",
        "PIC in the DM, polling 5 ms, upcall wake",
        2,
        2,
    );
    let options = h["options"].as_str().unwrap_or_default();
    assert!(options.contains("wake=upcall"), "{h}");
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A hostile HVM guest: its rings and buffers and its exit slot (the vcpu
/// page) overwritten with garbage while it floods pings, and the device
/// model's ioreq page scribbled too. The device model and hv live, guest2
/// and the driver domain carry on.
#[test]
fn a_hostile_hvm_guest_harms_nobody_else() {
    use abi::SharedMemory;
    let Some(env) = Env::new("hvm-hostile") else {
        return;
    };
    up(&env, "hvm_pic = \"dm\"");
    env.ping("guest1", "10.77.0.254", 3);
    let h = hvm(&env);
    let dm = h["dm_pid"].as_u64().expect("the device model's pid");
    let guest_pid = domain(&env.status(), "guest1")["pid"]
        .as_u64()
        .expect("guest1's pid");
    // The device model is jailed: seccomp, no capability, not root on the host.
    assert_jailed(dm);
    let pool = mapping_of(dm, "splitnet-guest1-pool");
    let ioreq = mapping_of(dm, "splitnet-guest1-ioreq");
    let vcpu = mapping_of(guest_pid, "splitnet-guest1-vcpu0");
    let mut g = Garbage(0x9e37_79b9_7f4a_7c15);
    while_guest1_floods(&env, || {
        g.scribble_driver_area(&pool);
        // The exit slot and the ioreq slot's words, racing their writers.
        for _ in 0..256 {
            let x = g.next();
            let off = (x as usize % 256) & !3;
            if x & 1 == 0 {
                vcpu.store_u32(off, (x >> 32) as u32);
            } else {
                ioreq.store_u32(off, (x >> 32) as u32);
            }
        }
    });
    // The device model and hv are alive, and everyone else carries on.
    assert_others_carry_on(&env, "device model", dm, "guest1-dm.log");
    report("hostile", &domain(&env.status(), "guest1")["emulated_nic"]);
    drop((pool, ioreq, vcpu));
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The driver domain restarts (the device model lives on in its namespace,
/// and the new driver process bridges its TAP again from the store) and the
/// HVM guest restarts (a new I/O path in hv, a new device model, the same
/// interface name): guest1 reaches the wire after each.
#[test]
fn an_hvm_guest_survives_restarts() {
    let Some(env) = Env::new("hvm-restart") else {
        return;
    };
    up(&env, "");
    env.guest1_survives_restarts("a new device model", |e| hvm(e)["dm_pid"].as_u64());
}

/// A device model stopped for longer than hv waits on it (several of hv's
/// `dm_timeout`s in a row, as a loaded host can make it) costs guest1 time,
/// not its NIC: the same guest process and device model carry pings again
/// once it runs, as a Xen vcpu waits out a slow qemu-dm.
#[test]
fn an_hvm_guest_waits_out_a_stalled_device_model() {
    let Some(env) = Env::new("hvm-stall") else {
        return;
    };
    up(&env, "");
    env.ping("guest1", "10.77.0.254", 2);
    let dm = hvm(&env)["dm_pid"]
        .as_u64()
        .expect("the device model's pid");
    let guest_pid = |e: &Env| domain(&e.status(), "guest1")["pid"].as_u64();
    let guest = guest_pid(&env).expect("guest1's pid");
    // Exits hv forwarded and the device model did not answer: timed out,
    // or found it still holding a request it took as it stopped.
    let unanswered = |e: &Env| {
        let c = &hvm(e)["hv_counters"];
        c["dm_timeouts"].as_u64().unwrap_or(0) + c["dm_busy"].as_u64().unwrap_or(0)
    };
    let before = unanswered(&env);
    signal(dm as i64, "STOP");
    // guest1 sends while its device model is stopped: hv gives up on each
    // exit it forwards after its `dm_timeout`, and the guest tries again.
    let mut ping = env.spawn(&[
        "exec",
        "guest1",
        "--",
        "ping",
        "-c",
        "40",
        "-i",
        "0.2",
        "10.77.0.254",
    ]);
    let stalled = testutil::poll_until(Duration::from_secs(30), || unanswered(&env) >= before + 4);
    signal(dm as i64, "CONT");
    assert!(
        stalled.is_ok(),
        "hv never gave up on the stopped device model"
    );
    ping.wait_exit(Duration::from_secs(30));
    env.ping("guest1", "10.77.0.254", 3);
    assert_eq!(guest_pid(&env), Some(guest), "guest1 was restarted");
    assert_eq!(hvm(&env)["dm_pid"].as_u64(), Some(dm), "a new device model");
    env.ok(&["down"]);
    assert_nothing_left();
}
