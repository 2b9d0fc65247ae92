//! Large receive offload (Ram thesis 5.1) end to end: with `lro = "guest"`
//! netfront, and with `lro = "driver"` netback, coalesce the TCP segments
//! guest1 receives into GSO frames. The guest's kernel must take them as
//! good: iperf3 and a 64 MiB download arrive intact, the coalescer's
//! counter moves, and `nstat` shows no TCP checksum error. Needs root,
//! iperf3, curl, python3, ethtool and nstat; run one test at a time, under
//! the lock.

mod common;

use common::*;
use std::time::Duration;

/// drv, guest1 with `lro` and the `extra` lines, the wire host, and the
/// `ports` lines after it.
fn topology(lro: &str, extra: &str, ports: &str) -> String {
    // GRO off on the port: coalescing there would leave LRO nothing to merge.
    format!(
        "name = \"lro\"\nport_gro = false\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n\
         ipv6 = \"fd77::1/64\"\nlro = \"{lro}\"\n{extra}\n\
         [wire]\ndriver = \"drv\"\naddress = \"10.77.0.254/24\"\nipv6 = \"fd77::fe/64\"\n{ports}"
    )
}

/// `domain`'s TCP checksum errors, as `nstat` reports them.
fn tcp_in_csum_errors(env: &Env, domain: &str) -> u64 {
    let out = env.ok(&["exec", domain, "--", "nstat", "-az", "TcpInCsumErrors"]);
    out.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some("TcpInCsumErrors")).then(|| f.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no TcpInCsumErrors in nstat's output:\n{out}"))
}

/// Brings up the topology with `lro` (`extra` lines in guest1, `ports`
/// after the wire), moves TCP from the wire to guest1, and checks what a
/// user would: data intact, no checksum error, the coalescer's counters
/// moved at the end that runs it (`counters`: the vif's netback counters or
/// netfront's), and not at the other. Returns the environment, still up,
/// for further checks (None: skipped).
fn receives_through_lro(
    name: &str,
    lro: &str,
    extra: &str,
    ports: &str,
    counters: &str,
    other: &str,
) -> Option<Env> {
    let env = Env::new(name)?;
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("lro.toml");
    std::fs::write(&path, topology(lro, extra, ports)).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
    // The wire sends MTU-size segments, as a physical NIC receives them
    // (over veth its TSO would hand the driver domain 64 KiB frames that
    // leave nothing to merge).
    env.ok(&[
        "exec", "wire", "--", "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
    ]);
    wait_until(
        &format!("status shows LRO on in the {lro}"),
        Duration::from_secs(10),
        || {
            let v = vif(&env.status(), "guest1")["lro"].clone();
            v["where"] == lro && v["on"] == true
        },
    );

    let errors = tcp_in_csum_errors(&env, "guest1");
    let gbps = iperf(&env, "wire", "10.77.0.254", "guest1", true, 3);
    let mbps = http_fetch_64mib(&env);
    eprintln!(
        "lro = {lro}: iperf3 wire -> guest1 {gbps:.2} Gbit/s, 64 MiB download {mbps:.0} Mbit/s"
    );
    assert_eq!(
        tcp_in_csum_errors(&env, "guest1"),
        errors,
        "TCP checksum errors in guest1 with lro = {lro}"
    );

    let read = |key: &str, at: &str| vif(&env.status(), "guest1")[at][key].as_u64();
    wait_until(
        &format!("{counters}.lro_merged moves"),
        Duration::from_secs(10),
        || read("lro_merged", counters).unwrap_or(0) > 0,
    );
    let (merged, flushed) = (
        read("lro_merged", counters).unwrap_or(0),
        read("lro_flushed", counters).unwrap_or(0),
    );
    eprintln!("lro = {lro}: {merged} frames merged, {flushed} put out");
    assert!(flushed > 0, "frames came out of the coalescer");
    assert_eq!(
        read("lro_merged", other),
        Some(0),
        "the other end ran no LRO"
    );
    Some(env)
}

#[test]
fn lro_in_the_guest_delivers_intact_gso_frames() {
    receives_through_lro(
        "lro-guest",
        "guest",
        "",
        "",
        "frontend_counters",
        "counters",
    );
}

/// Without the high-level interface the channel carries MTU frames with
/// complete checksums; the guest's TAP still takes the merged GSO frames
/// (a TAP's offload flags govern what it hands netfront, not what it takes).
#[test]
fn lro_in_the_guest_without_offloads_delivers_intact_gso_frames() {
    receives_through_lro(
        "lro-guest-nooff",
        "guest",
        "offload = false",
        "",
        "frontend_counters",
        "counters",
    );
}

#[test]
fn lro_in_the_driver_domain_delivers_intact_gso_frames() {
    receives_through_lro(
        "lro-driver",
        "driver",
        "",
        "",
        "counters",
        "frontend_counters",
    );
}

/// LRO in the guest over half-page RX buffers with prefetch (Ram thesis
/// 5.1-5.3 together). A 4000-byte MTU on the wire and the vif makes every
/// segment span two 2 KiB buffers, which LRO takes as one frame; the
/// buffers are half pages (256 TX pages and 128 RX pages granted), none
/// refused.
#[test]
fn lro_in_the_guest_over_half_page_buffers_with_prefetch() {
    let Some(env) = receives_through_lro(
        "lro-guest-halfpg",
        "guest",
        "rx_buffer = \"half\"\nprefetch = true\nvif = [\"mtu=4000\"]",
        "[[port]]\ndriver = \"drv\"\nkind = \"wire\"\nmtu = 4000\n",
        "frontend_counters",
        "counters",
    ) else {
        return;
    };
    let link = env.ok(&["exec", "guest1", "--", "ip", "link", "show", "dev", "eth0"]);
    assert!(link.contains("mtu 4000"), "{link}");
    let st = env.status();
    let v = vif(&st, "guest1");
    assert_eq!(v["grant_track"]["created"].as_u64(), Some(256 + 128), "{v}");
    for at in ["counters", "frontend_counters"] {
        assert_eq!(v[at]["rejected"], serde_json::json!({}), "{at}: {v}");
    }
}
