//! The hosted NIC (Sugerman 2001) end to end: guest1 runs the pcnet32-like
//! driver behind its VMM and a VMApp in the driver domain's namespace,
//! guest2 a paravirtual vif. Real applications (ping, iperf3, curl against
//! python's HTTP server) with the optimizations off and on, and a hostile
//! guest that scribbles over its rings and the world-switch channel. Needs
//! root and iperf3, curl, python3 and ping.

mod common;

use common::*;
use serde_json::Value;

fn up(env: &Env, optimized: bool) {
    let on = if optimized { "true" } else { "false" };
    env.up_emulated(
        "hosted",
        &format!(
            "nic = \"hosted\"\nhosted_ports_in_vmm = {on}\nhosted_send_combining = {on}\nhosted_irq_bitvector = {on}"
        ),
    );
}

/// guest1's hosted-NIC entry in `status --json`, once its counters are in.
fn hosted(env: &Env) -> Value {
    env.emulated_nic(|h| h["world_switches"].as_u64().is_some())
}

fn report(what: &str, h: &Value) {
    eprintln!(
        "{what}: {} world switches, mean {} cycles ({} of them in the VMApp; an empty one {} min, {} mean), \
         {:.2} per packet; NIC accesses {} in VMM, {} switched; \
         {} IRQs, {} PIC accesses; {} packets out, {} in; {} combined sends ({} frames); vmapp {}",
        h["world_switches"],
        h["switch_mean_cycles"],
        h["service_mean_cycles"],
        h["null_switch_min_cycles"],
        h["null_switch_mean_cycles"],
        h["switches_per_packet"].as_f64().unwrap_or(0.0),
        h["nic_accesses_in_vmm"],
        h["nic_accesses_switched"],
        h["irqs"],
        h["pic_accesses"],
        h["tx_packets"],
        h["rx_packets"],
        h["combined_sends"],
        h["combined_frames"],
        h["vmapp"],
    );
}

fn everything(env: &Env, optimized: bool) {
    up(env, optimized);
    env.ping_guest1_all_ways();
    let before = hosted(env);
    let tx = iperf(env, "wire", "10.77.0.254", "guest1", false, 3) * 1000.0;
    let rx = iperf(env, "wire", "10.77.0.254", "guest1", true, 3) * 1000.0;
    let after_iperf = hosted(env);
    let http = http_fetch_64mib(env);
    let g2 = env.guest2_unaffected();
    let h = hosted(env);
    let label = if optimized {
        "optimized"
    } else {
        "unoptimized"
    };
    eprintln!(
        "{label}: iperf3 guest1->wire {tx:.1} Mbit/s, wire->guest1 {rx:.1}; 64 MiB HTTP {http:.1} Mbit/s; guest2->wire {g2:.1}"
    );
    report(
        &format!("{label} (iperf3 only)"),
        &diff(&before, &after_iperf),
    );
    report(label, &h);
    assert!(h["world_switches"].as_u64().unwrap() > 0);
    assert!(h["irqs"].as_u64().unwrap() > 0);
    assert!(h["pic_accesses"].as_u64().unwrap() >= 4 * h["irqs"].as_u64().unwrap());
    if optimized {
        assert!(h["nic_accesses_in_vmm"].as_u64().unwrap() > 0);
        assert_eq!(h["nic_accesses_switched"].as_u64(), Some(0));
        assert!(
            h["combined_sends"].as_u64().unwrap() > 0,
            "no send was combined"
        );
        assert!(h["vmapp"]["bitvector_checks"].as_u64().unwrap() > 0);
    } else {
        assert_eq!(h["nic_accesses_in_vmm"].as_u64(), Some(0));
        assert!(h["nic_accesses_switched"].as_u64().unwrap() > 0);
        assert!(h["vmapp"]["selects"].as_u64().unwrap() > 0);
        assert_eq!(h["combined_sends"].as_u64(), Some(0));
    }
    let plain = env.ok(&["status"]);
    assert!(plain.contains("hosted NIC guest1"), "{plain}");
    let prom = env.ok(&["status", "--prometheus"]);
    assert!(
        prom.contains("splitnet_hosted_world_switches_total{domain=\"guest1\"}"),
        "{prom}"
    );
    // guest1's world switches and halts are trace events too.
    let trace = env.trace_while_guest1_pings();
    assert!(
        trace.contains("world_switch:hosted") && trace.contains("halt:hosted"),
        "{trace}"
    );
}

/// The numeric fields of `b` minus those of `a` (the top-level counters).
fn diff(a: &Value, b: &Value) -> Value {
    let mut out = b.clone();
    for k in [
        "world_switches",
        "nic_accesses_in_vmm",
        "nic_accesses_switched",
        "irqs",
        "pic_accesses",
        "tx_packets",
        "rx_packets",
        "combined_sends",
        "combined_frames",
    ] {
        out[k] = (b[k].as_u64().unwrap_or(0) - a[k].as_u64().unwrap_or(0)).into();
    }
    let pk = out["tx_packets"].as_u64().unwrap_or(0) + out["rx_packets"].as_u64().unwrap_or(0);
    out["switches_per_packet"] =
        (out["world_switches"].as_u64().unwrap_or(0) as f64 / pk.max(1) as f64).into();
    out
}

#[test]
fn hosted_guest_unoptimized_carries_real_applications() {
    let Some(env) = Env::new("hosted-unopt") else {
        return;
    };
    everything(&env, false);
    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn hosted_guest_optimized_carries_real_applications() {
    let Some(env) = Env::new("hosted-opt") else {
        return;
    };
    everything(&env, true);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A hostile guest: its rings and buffers, and the world-switch channel,
/// overwritten with garbage while it sends. The VMApp (which holds the NIC
/// model here) survives, guest2 and hv are undisturbed.
#[test]
fn a_hostile_hosted_guest_harms_nobody_else() {
    use abi::SharedMemory;
    let Some(env) = Env::new("hosted-hostile") else {
        return;
    };
    up(&env, false);
    env.ping("guest1", "10.77.0.254", 3);
    let h = hosted(&env);
    let vmapp = h["vmapp_pid"].as_u64().expect("the VMApp's pid");
    // The VMApp is jailed: seccomp, no capability, not root on the host.
    assert_jailed(vmapp);
    let pool = mapping_of(vmapp, "splitnet-guest1-pool");
    let chan = mapping_of(vmapp, "splitnet-hosted-guest1");
    let mut g = Garbage(0x9e37_79b9_7f4a_7c15);
    while_guest1_floods(&env, || {
        g.scribble_driver_area(&pool);
        // The request's words (op, port, width, value, counts) and the
        // slots' lengths, racing the VM's own writes.
        for _ in 0..2048 {
            let x = g.next();
            let off = if x & 1 == 0 {
                x as usize % 24
            } else {
                64 + x as usize % 128
            };
            chan.store_u32(off & !3, (x >> 32) as u32);
        }
    });
    let h = hosted(&env);
    report("hostile", &h);
    // The VMApp is alive, and everyone else carries on.
    assert_others_carry_on(&env, "VMApp", vmapp, "guest1-vmapp.log");
    drop((pool, chan));
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The driver domain restarts (its new process bridges VMNet's interface
/// again from the store) and the hosted guest restarts (a new VM, a new
/// VMApp, the same interface name): guest1 reaches the wire after each.
#[test]
fn a_hosted_guest_survives_restarts() {
    let Some(env) = Env::new("hosted-restart") else {
        return;
    };
    up(&env, true);
    env.guest1_survives_restarts("a new VMApp", |e| hosted(e)["vmapp_pid"].as_u64());
}
