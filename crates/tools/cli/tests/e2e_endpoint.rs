//! The driver domain as an endpoint with several NICs, end to end: a
//! driver domain with an address of its own on its bridge and three wire
//! hosts, each behind a port of its own; the driver domain reaches every
//! wire host and the guest, carries TCP both ways with its bytes intact,
//! keeps its address through restarts, receives into page or MTU
//! buffers (`port_buffer`), and takes the frames to it from its wires in
//! its kernel (`local_delivery`). Needs root; run one test at a time, under the
//! namespace lock.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

const DRV_IP: &str = "10.77.0.100";
const WIRES: [(&str, &str); 3] = [
    ("wire", "10.77.0.254"),
    ("wire2", "10.77.0.253"),
    ("wire3", "10.77.0.252"),
];

/// A driver domain `drv` at [`DRV_IP`] (and fd77::100) with `keys` (one
/// line), guest1 at 10.77.0.1, and the three [`WIRES`].
fn topology(keys: &str) -> String {
    let mut t = format!(
        "name = \"endpoint\"\n\
         [[domain]]\nname = \"drv\"\nkind = \"driver\"\naddress = \"{DRV_IP}/24\"\n\
         ipv6 = \"fd77::100/64\"\n{keys}\n\
         [[domain]]\nname = \"guest1\"\nkind = \"guest\"\naddress = \"10.77.0.1/24\"\n"
    );
    for (i, (name, ip)) in WIRES.iter().enumerate() {
        t += &format!(
            "[[wire]]\nname = \"{name}\"\ndriver = \"drv\"\naddress = \"{ip}/24\"\nipv6 = \"fd77::{:x}/64\"\n",
            0xfe - i
        );
    }
    t
}

fn up(env: &Env, keys: &str) {
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join("endpoint.toml");
    std::fs::write(&path, topology(keys)).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
}

/// A random blob of `mib` MiB served over HTTP from `host` at `ip`; curl in
/// `client` fetches it, and it arrives whole and unchanged.
fn fetch_intact(env: &Env, host: &str, ip: &str, client: &str, mib: u32) {
    let dir = env.run_dir.join(format!("www-{host}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = random_blob(&dir, mib);
    let _server = env.spawn(&[
        "exec",
        host,
        "--",
        "python3",
        "-m",
        "http.server",
        "8080",
        "--bind",
        ip,
        "--directory",
        dir.to_str().unwrap(),
    ]);
    wait_until(
        &format!("the HTTP server in {host}"),
        Duration::from_secs(10),
        || listening(host, 8080),
    );
    let got = env.run_dir.join(format!("got-{client}"));
    let url = format!("http://{ip}:8080/blob");
    let mut args = vec!["exec", client, "--"];
    args.extend(curl(got.to_str().unwrap(), &url));
    env.ok(&args);
    assert_eq!(
        std::fs::metadata(&got).unwrap().len(),
        u64::from(mib) << 20,
        "{host} -> {client}: the whole blob"
    );
    assert_eq!(
        sha256(&got),
        sha256(&file),
        "{host} -> {client}: the blob arrived changed"
    );
    let _ = std::fs::remove_file(&got);
}

/// The driver domain answers at its address from `from`, within `limit`
/// (its TAP is attached again after a restart).
fn wait_answers(env: &Env, from: &str, limit: Duration) {
    wait_until("the driver domain's address to answer", limit, || {
        env.splitnet(&["exec", from, "--", "ping", "-c", "1", "-W", "1", DRV_IP])
            .status
            .success()
    });
}

/// Port `name`'s counters in `status --json`.
fn port_counters(env: &Env, name: &str) -> serde_json::Value {
    let st = env.status();
    st["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name && !p["counters"].is_null())
        .map(|p| p["counters"].clone())
        .unwrap_or_else(|| panic!("no port {name} in {st:#}"))
}

/// SIGKILLs the driver domain and waits for hv to start it again.
fn crash_drv(env: &Env) {
    let st = env.status();
    let pid = domain(&st, "drv")["pid"].as_i64().unwrap();
    kill9(pid);
    wait_until("drv to come back", Duration::from_secs(10), || {
        let st = env.status();
        domain(&st, "drv")["pid"].as_i64().is_some_and(|p| p != pid)
    });
}

fn log_of(run_dir: &Path, name: &str) -> String {
    std::fs::read_to_string(run_dir.join(format!("{name}.log"))).unwrap_or_default()
}

#[test]
fn the_driver_domain_is_an_endpoint_on_three_wires_and_keeps_its_address() {
    let Some(env) = Env::new("endpoint") else {
        return;
    };
    up(&env, "port_buffer = \"page\"");
    // Status shows the driver domain's address, on the TAP named after
    // its bridge, and the three wire hosts behind peth0..peth2.
    let st = env.status();
    let addrs = domain(&st, "drv")["addresses"].to_string();
    assert!(addrs.contains(&format!("xenbr0:{DRV_IP}/24")), "{addrs}");
    assert!(addrs.contains("xenbr0:fd77::100/64"), "{addrs}");
    let hosts: Vec<(String, String)> = st["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].to_string(), h["port"].to_string()))
        .collect();
    assert_eq!(hosts.len(), 3, "{hosts:?}");
    assert_eq!(hosts[2], ("\"wire3\"".into(), "\"peth2\"".into()));
    let text = env.ok(&["status"]);
    assert!(text.contains(&format!("xenbr0:{DRV_IP}/24")), "{text}");

    for (_, ip) in WIRES {
        env.ping("drv", ip, 3);
    }
    env.ping("drv", "10.77.0.1", 3);
    env.ping("drv", "fd77::fe", 2);
    env.ping("guest1", DRV_IP, 2);
    // TCP both ways through the bridge and the ports, bytes intact.
    fetch_intact(&env, "drv", DRV_IP, "wire", 32);
    fetch_intact(&env, "wire2", "10.77.0.253", "drv", 32);
    // A guest reaches the third wire host.
    env.ping("guest1", "10.77.0.252", 3);
    iperf(&env, "wire3", "10.77.0.252", "guest1", false, 2);
    // Received frames fit the page buffers: none was too long.
    let c = port_counters(&env, "peth1");
    assert_eq!(c["rx_errors"], 0, "{c}");
    assert!(c["rx_packets"].as_u64().unwrap() > 20_000, "{c}");
    assert!(log_of(&env.run_dir, "drv").contains("4096-byte slots"));

    // A restart by hand: the TAP stays, with its addresses.
    env.ok(&["restart", "drv"]);
    wait_answers(&env, "wire", Duration::from_secs(10));
    env.ping("drv", "10.77.0.254", 3);
    env.ping("drv", "10.77.0.1", 3);
    // A crash: hv starts the driver domain again; it answers again.
    crash_drv(&env);
    wait_answers(&env, "wire2", Duration::from_secs(10));
    env.ping("drv", "10.77.0.253", 3);
    fetch_intact(&env, "wire3", "10.77.0.252", "drv", 8);

    env.ok(&["down"]);
    assert_nothing_left();
}

#[test]
fn mtu_sized_receive_buffers_carry_traffic() {
    let Some(env) = Env::new("endpoint-mtu") else {
        return;
    };
    up(&env, "port_buffer = \"mtu\"");
    assert!(log_of(&env.run_dir, "drv").contains("2048-byte slots (mtu:2048)"));
    // Into the driver domain from a wire host, and through it to the guest.
    let gbps = iperf(&env, "wire2", "10.77.0.253", "drv", true, 2);
    assert!(gbps > 0.01, "{gbps}");
    fetch_intact(&env, "wire", "10.77.0.254", "guest1", 16);
    for port in ["peth0", "peth1"] {
        // The driver domain publishes its counters from time to time: wait
        // for the transfer to show.
        wait_until(
            &format!("{port}'s counters to show the transfer"),
            Duration::from_secs(10),
            || {
                port_counters(&env, port)["rx_packets"]
                    .as_u64()
                    .unwrap_or(0)
                    > 1000
            },
        );
        let c = port_counters(&env, port);
        let (bytes, pkts) = (
            c["rx_bytes"].as_u64().unwrap(),
            c["rx_packets"].as_u64().unwrap(),
        );
        assert_eq!(c["rx_errors"], 0, "{port}: {c}");
        assert!(pkts > 1000, "{port}: {c}");
        // MTU-sized frames: none is a coalesced GSO frame.
        assert!(bytes / pkts <= 1514, "{port}: {c}");
    }
    env.ok(&["down"]);
    assert_nothing_left();
}

/// The bytes the mirred actions of `dev`'s filters on hook `dir`
/// (`ingress`, `egress`) in `domain` took, summed (`tc -s`: "Sent N bytes
/// M pkt" under each action).
fn redirected(domain: &str, dev: &str, dir: &str) -> u64 {
    let out = in_netns(domain, &["tc", "-s", "filter", "show", "dev", dev, dir]);
    out.split("mirred")
        .skip(1)
        .filter_map(|after| {
            let sent = after.split("Sent ").nth(1)?;
            sent.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// 16 MiB out of the driver domain to a wire host arrive intact: the
/// TAP's egress classifier puts the frames on the host's port, and the
/// driver domain's process never reads them from the TAP.
fn sends_by_classifier(env: &Env) {
    let read_before = if_stat("drv", "xenbr0", "tx_bytes");
    let sent_before = redirected("drv", "xenbr0", "egress");
    fetch_intact(env, "drv", DRV_IP, "wire", 16);
    let read = if_stat("drv", "xenbr0", "tx_bytes") - read_before;
    let sent = redirected("drv", "xenbr0", "egress") - sent_before;
    assert!(sent > 16 << 20, "the TAP's classifier sent {sent} bytes");
    assert!(read < 1 << 20, "the bridge read {read} bytes from the TAP");
}

#[test]
fn the_kernel_takes_the_frames_from_the_wires_to_the_driver_domain() {
    let Some(env) = Env::new("endpoint-kernel") else {
        return;
    };
    up(&env, "local_delivery = \"kernel\"");
    assert!(
        log_of(&env.run_dir, "drv").contains("reach its kernel from the uplinks"),
        "{}",
        log_of(&env.run_dir, "drv")
    );
    // Into the driver domain from a wire host: its TAP is not written
    // (the bridge does not carry the frames), the port's classifier
    // hands them up, and they arrive whole.
    let tap_before = rx_bytes("drv", "xenbr0");
    let took_before = redirected("drv", "peth1", "ingress");
    fetch_intact(&env, "wire2", "10.77.0.253", "drv", 32);
    let tap = rx_bytes("drv", "xenbr0") - tap_before;
    let took = redirected("drv", "peth1", "ingress") - took_before;
    assert!(took > 32 << 20, "the classifier took {took} bytes");
    assert!(tap < 1 << 20, "the bridge wrote {tap} bytes to the TAP");
    sends_by_classifier(&env);
    // To a guest and from a guest: the bridge still carries those, both
    // ways.
    fetch_intact(&env, "drv", DRV_IP, "guest1", 16);
    fetch_intact(&env, "guest1", "10.77.0.1", "drv", 16);
    env.ping("drv", "fd77::fe", 2);
    // A crash: the new process leaves the same frames to the kernel.
    crash_drv(&env);
    wait_answers(&env, "wire3", Duration::from_secs(10));
    fetch_intact(&env, "wire3", "10.77.0.252", "drv", 8);
    fetch_intact(&env, "drv", DRV_IP, "wire3", 8);
    env.ok(&["down"]);
    assert_nothing_left();
}

/// `local_delivery = "send"` with page buffers (Menon 2006's Xen-driver):
/// the driver domain's sends to a wire host leave its TAP by the egress
/// classifier, never read by its process, while what it receives still
/// crosses the port's page buffers and the bridge into the TAP.
#[test]
fn the_kernel_takes_only_the_driver_domain_s_sends_with_page_buffers() {
    let Some(env) = Env::new("endpoint-send") else {
        return;
    };
    up(&env, "local_delivery = \"send\"\nport_buffer = \"page\"");
    assert!(log_of(&env.run_dir, "drv").contains("4096-byte slots"));
    sends_by_classifier(&env);
    // Into it: the bridge writes the TAP, and the port has no classifier.
    let tap_before = rx_bytes("drv", "xenbr0");
    fetch_intact(&env, "wire2", "10.77.0.253", "drv", 16);
    let tap = rx_bytes("drv", "xenbr0") - tap_before;
    assert!(tap > 16 << 20, "the bridge wrote {tap} bytes to the TAP");
    assert_eq!(redirected("drv", "peth1", "ingress"), 0);
    fetch_intact(&env, "drv", DRV_IP, "guest1", 8);
    env.ok(&["down"]);
    assert_nothing_left();
}
