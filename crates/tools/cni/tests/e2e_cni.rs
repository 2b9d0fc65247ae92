//! The CNI plugin end to end, driven as a runtime drives it: `cnitool`
//! (the CNI project's own client) and the reference `host-local` IPAM
//! plugin against a running splitnet, containers in namespaces splitnet did
//! not make; then each kind of bad input, by the plugin's own protocol.
//! Needs root, `cnitool` and the reference plugins (`scripts/setup.sh`).

use serde_json::{json, Value};
use std::time::Duration;
use testutil::wait_until;

mod common;

use common::*;

#[test]
fn cnitool_adds_checks_and_deletes_containers_on_splitnet() {
    let Some(mut lab) = Lab::up("cni", Uplink::Wire, ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    let (a, b) = (lab.netns("a"), lab.netns("b"));
    added(&lab, &a);

    // The container reaches the wire host and another container, and a
    // download arrives intact.
    ping(&a, WIRE);
    let addr_b = added(&lab, &b);
    let addr_b = addr_b.split('/').next().unwrap().to_string();
    ping(&a, &addr_b);
    download_intact(&lab, &a);
    jailed_and_named(&lab, &a);
    lab.cnitool_ok("check", &a);
    lab.cnitool_ok("status", &a);

    // DEL twice; nothing of the container stays, its lease included.
    lab.cnitool_ok("del", &a);
    lab.cnitool_ok("del", &a);
    assert_eq!(lab.container_domains().len(), 1);
    assert!(!ip_in(&a, &["link", "show", "dev", "eth0"]).status.success());
    assert_eq!(lab.leases(), vec![addr_b.clone()]);

    // GC with no valid attachment removes b, and its lease.
    let mut conf = lab.conf(("10.88.0.10", "10.88.0.200"));
    conf["cni.dev/valid-attachments"] = json!([]);
    let (ok, v) = lab.plugin("GC", conf.to_string().as_bytes(), &[]);
    assert!(ok, "GC: {v}");
    assert!(lab.container_domains().is_empty());
    assert!(lab.vifs().is_empty(), "status lists vifs: {:?}", lab.vifs());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
    ping_fails(&b, WIRE);
    del_without_hv(&lab, &b, &conf);
    let (ok, v) = lab.plugin("VERSION", br#"{"cniVersion": "1.1.0"}"#, &[]);
    assert!(ok, "{v}");
    assert_eq!(v["supportedVersions"], json!(["0.4.0", "1.0.0", "1.1.0"]));
}

/// `cnitool add` in `ns`: its result names the sandbox's eth0, whose
/// address (returned, with its prefix) is on the interface.
fn added(lab: &Lab, ns: &str) -> String {
    let out = lab.cnitool_ok("add", ns);
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["cniVersion"], "1.1.0");
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["interfaces"][1]["sandbox"], format!("/run/netns/{ns}"));
    let addr = r["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(addr.starts_with("10.88.0.") && addr.ends_with("/16"), "{r}");
    assert_eq!(address_in(ns), addr);
    addr
}

/// The guests of the two containers are jailed as every guest, and
/// `status`, `network-list` and the metrics name them by container.
fn jailed_and_named(lab: &Lab, a: &str) {
    let doms = lab.container_domains();
    assert_eq!(doms.len(), 2, "{doms:?}");
    let pid = doms[0]["pid"].as_u64().unwrap();
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(st.lines().any(|l| l == "CapEff:\t0000000000001000"), "{st}");
    assert!(st.lines().any(|l| l.starts_with("Seccomp:\t2")), "{st}");
    assert!(!st.lines().any(|l| l.starts_with("Uid:\t0\t")), "{st}");
    let o = lab.splitnet(&["status"]);
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = format!("eth0 in /run/netns/{a}");
    assert!(
        shown.contains("CONTAINERS") && shown.contains(&line),
        "{shown}"
    );
    let cid = doms[0]["container"]["id"].as_str().unwrap();
    let o = lab.splitnet(&["network-list", &cid[..12]]);
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success() && listed.contains("10.88.0."),
        "{}",
        text(&o)
    );
    let o = lab.splitnet(&["status", "--prometheus"]);
    let metrics = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        metrics.matches("splitnet_container_info{").count(),
        2,
        "{metrics}"
    );
}

/// `down` takes `ns`'s vif and leaves the namespace; with hv gone STATUS
/// says so (50); DEL succeeds with hv gone, and again after hv came back
/// without the attachment.
fn del_without_hv(lab: &Lab, ns: &str, conf: &Value) {
    lab.cnitool_ok("add", ns);
    let o = lab.splitnet(&["down"]);
    assert!(o.status.success(), "down: {}", text(&o));
    let link = |dev: &str| ip_in(ns, &["link", "show", "dev", dev]).status.success();
    assert!(!link("eth0"), "down leaves no vif");
    assert!(link("lo"), "down leaves the namespace");
    let (ok, v) = lab.plugin("STATUS", conf.to_string().as_bytes(), &[]);
    assert!(!ok && v["code"] == 50, "{v}");
    lab.cnitool_ok("del", ns);
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
    lab.bring_up();
    lab.cnitool_ok("del", ns);
}

/// The IPv4 address (with prefix) on `ns`'s eth0.
fn address_in(ns: &str) -> String {
    let o = ip_in(ns, &["-4", "-o", "addr", "show", "dev", "eth0"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let a = text.split_whitespace().skip_while(|w| *w != "inet").nth(1);
    a.unwrap_or_else(|| panic!("no address in {ns}: {text}"))
        .to_string()
}

fn ping_fails(ns: &str, to: &str) {
    let o = exec_in(ns, &["ping", "-c", "1", "-W", "1", to]);
    assert!(!o.status.success(), "{ns} still reaches {to}");
}

/// Runs ADD for `netns`/eth0 with `conf`; the error result.
fn add_error(lab: &Lab, conf: &Value, id: &str, netns: &str) -> Value {
    let (ok, v) = lab.plugin(
        "ADD",
        conf.to_string().as_bytes(),
        &[
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
        ],
    );
    assert!(!ok, "ADD {id} in {netns} succeeded: {v}");
    v
}

#[test]
fn bad_input_gets_a_cni_error_naming_it_and_leaves_nothing() {
    let Some(mut lab) = Lab::up("cni-bad", Uplink::Wire, ("10.88.0.10", "10.88.0.10")) else {
        return;
    };
    let conf = lab.conf(("10.88.0.10", "10.88.0.10"));
    let a = lab.netns("bad");
    let path = format!("/run/netns/{a}");
    protocol_errors(&lab, &conf);
    expect(
        add_error(&lab, &conf, "c1", "/run/netns/none-such"),
        4,
        "none-such",
    );
    expect(
        add_error(&lab, &conf, "c1", "/etc/hostname"),
        4,
        "not a namespace",
    );
    let mut nodriver = conf.clone();
    nodriver["driver"] = json!("nope");
    expect(add_error(&lab, &nodriver, "c1", &path), 7, "nope");
    let mut badvif = conf.clone();
    badvif["vif"] = json!("rate=fast");
    expect(add_error(&lab, &badvif, "c1", &path), 7, "rate");
    assert!(
        lab.leases().is_empty(),
        "a refused ADD left a lease: {:?}",
        lab.leases()
    );
    assert!(lab.container_domains().is_empty());
    assert!(lab.vifs().is_empty(), "status lists vifs: {:?}", lab.vifs());
    twice_and_exhausted(&mut lab, &conf, &a);

    // hv not running: try again later (11), naming the socket.
    lab.splitnet(&["down"]);
    wait_until("hv to exit", Duration::from_secs(10), || {
        !lab.run_dir.join("hv.sock").exists()
    });
    expect(add_error(&lab, &conf, "c3", &path), 11, "hv.sock");
}

/// Error result `v` has `code` and says `says`.
fn expect(v: Value, code: u64, says: &str) {
    assert_eq!(v["code"], code, "{v}");
    assert!(v.to_string().contains(says), "{v} does not say {says:?}");
}

/// Malformed JSON, an unknown key and missing or malformed variables,
/// each by the spec's code.
fn protocol_errors(lab: &Lab, conf: &Value) {
    let vars = |id: &'static str| {
        [
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
        ]
    };
    let (_, v) = lab.plugin("ADD", b"{not json", &vars("c1"));
    expect(v, 6, "malformed");
    let mut odd = conf.clone();
    odd["colour"] = json!("blue");
    let (_, v) = lab.plugin("ADD", odd.to_string().as_bytes(), &vars("c1"));
    expect(v, 2, "colour");
    let no_netns = [("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")];
    let (_, v) = lab.plugin("ADD", conf.to_string().as_bytes(), &no_netns);
    expect(v, 4, "CNI_NETNS");
    let (_, v) = lab.plugin("ADD", conf.to_string().as_bytes(), &vars("c/1"));
    expect(v, 4, "CNI_CONTAINERID");
}

/// The range holds one address: the first ADD takes it, the same one again
/// is refused without touching it, and another finds the range exhausted.
fn twice_and_exhausted(lab: &mut Lab, conf: &Value, a: &str) {
    let path = format!("/run/netns/{a}");
    let vars = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", path.as_str()),
        ("CNI_IFNAME", "eth0"),
    ];
    let (ok, v) = lab.plugin("ADD", conf.to_string().as_bytes(), &vars);
    assert!(ok, "{v}\n{}", lab.hv_log());
    expect(add_error(lab, conf, "c1", &path), 100, "DEL it first");
    let b = lab.netns("bad2");
    // host-local's own code (999) and message pass through.
    let v = add_error(lab, conf, "c2", &format!("/run/netns/{b}"));
    expect(v, 999, "no IP addresses available");
    assert_eq!(lab.leases(), vec!["10.88.0.10".to_string()]);
    assert_eq!(lab.container_domains().len(), 1);
    ping(a, WIRE);
}

#[test]
fn twenty_parallel_adds_and_dels_are_race_free() {
    let Some(mut lab) = Lab::up("cni-par", Uplink::Wire, ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    let names: Vec<String> = (0..20).map(|k| lab.netns(&format!("p{k}"))).collect();
    lab.cnitool_all("add", &names);
    let doms = lab.container_domains();
    assert_eq!(doms.len(), 20);
    assert_eq!(lab.leases().len(), 20, "{:?}", lab.leases());
    let mut addrs: Vec<String> = names.iter().map(|ns| address_in(ns)).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(
        addrs.len(),
        20,
        "two containers share an address: {addrs:?}"
    );
    for ns in &names {
        ping(ns, WIRE);
    }
    lab.cnitool_all("del", &names);
    assert!(lab.container_domains().is_empty());
    assert!(lab.vifs().is_empty(), "status lists vifs: {:?}", lab.vifs());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
}

#[test]
fn a_driver_domain_crash_loses_no_byte_of_a_containers_download() {
    let Some(mut lab) = Lab::up("cni-crash", Uplink::Wire, ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    let a = lab.netns("crash");
    lab.cnitool_ok("add", &a);
    let served = serve_blob(&lab, 64);
    let got = lab.run_dir.join("got");
    let mut args = vec!["netns", "exec", a.as_str()];
    args.extend(testutil::files::curl(got.to_str().unwrap(), &served.url));
    // Slowed to last a few seconds, so the crash comes mid-transfer.
    args.extend(["--limit-rate", "16M"]);
    let fetch = std::process::Command::new("ip")
        .args(&args)
        .spawn()
        .unwrap();
    wait_until(
        "the download to be under way",
        Duration::from_secs(30),
        || std::fs::metadata(&got).is_ok_and(|m| m.len() > 8 << 20),
    );
    let drv = lab.domain_pid("drv");
    let _ = std::process::Command::new("kill")
        .args(["-9", &drv.to_string()])
        .status();
    let o = fetch.wait_with_output().unwrap();
    assert!(o.status.success(), "curl: {}", text(&o));
    assert!(std::fs::metadata(&got).unwrap().len() == 64 << 20);
    assert_intact(&got, &served);
    assert_ne!(lab.domain_pid("drv"), drv, "drv was restarted");
    lab.cnitool_ok("check", &a);
}

#[test]
fn two_hundred_containers_share_one_driver_domain() {
    let Some(mut lab) = Lab::up("cni-200", Uplink::Nat, ("10.88.0.10", "10.88.0.250")) else {
        return;
    };
    let names: Vec<String> = (0..200).map(|k| lab.netns(&format!("h{k}"))).collect();
    // Ten at a time, as a busy runtime calls.
    for chunk in names.chunks(10) {
        lab.cnitool_all("add", chunk);
    }
    assert_eq!(lab.container_domains().len(), 200);
    for ns in &names {
        let o = exec_in(ns, &["ping", "-c", "1", "-W", "2", lab.gateway]);
        assert!(o.status.success(), "ping from {ns}: {}", text(&o));
    }
    for chunk in names.chunks(10) {
        lab.cnitool_all("del", chunk);
    }
    assert!(lab.container_domains().is_empty());
    assert!(lab.vifs().is_empty(), "status lists vifs: {:?}", lab.vifs());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
}

/// The configuration's vif keys reach the container's vif, and the IPAM
/// lease becomes its `ip=`: a source the lease did not give goes nowhere
/// and is counted. CHECK sees an address taken away; STATUS fails (50)
/// for a driver domain that is not running.
#[test]
fn a_containers_vif_takes_its_options_and_drops_spoofed_sources() {
    let range = ("10.88.0.20", "10.88.0.30");
    let Some(mut lab) = Lab::up("cni-opts", Uplink::Wire, range) else {
        return;
    };
    let ns = lab.netns("o");
    let path = format!("/run/netns/{ns}");
    let mut conf = lab.conf(range);
    conf["vif"] = json!("rate=300Mb/s");
    let vars = [
        ("CNI_CONTAINERID", "opts1"),
        ("CNI_NETNS", path.as_str()),
        ("CNI_IFNAME", "eth0"),
    ];
    let (ok, r) = lab.plugin("ADD", conf.to_string().as_bytes(), &vars);
    assert!(ok, "ADD: {r}\n{}", lab.hv_log());
    let with_prefix = r["ips"][0]["address"].as_str().unwrap().to_string();
    let addr = with_prefix.split('/').next().unwrap().to_string();
    let vif = &lab.vifs()[0];
    assert_eq!(vif["options"]["ip"], addr.as_str(), "{vif}");
    // 300 Mbit/s as Xen's credit: 1,875,000 bytes each 50 ms.
    assert_eq!(vif["options"]["rate"], "1875000,50000", "{vif}");
    let o = lab.splitnet(&["top", "--batch", "--iterations", "1"]);
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        shown.contains("[opts1/eth0]"),
        "top names the container: {}",
        text(&o)
    );
    spoofed_sources_go_nowhere(&lab, &ns);

    // CHECK holds until the lease's address is taken away, then names it.
    conf["prevResult"] = r.clone();
    let (ok, v) = lab.plugin("CHECK", conf.to_string().as_bytes(), &vars);
    assert!(ok, "CHECK: {v}");
    assert!(ip_in(&ns, &["addr", "del", &with_prefix, "dev", "eth0"])
        .status
        .success());
    let (ok, v) = lab.plugin("CHECK", conf.to_string().as_bytes(), &vars);
    assert!(!ok, "CHECK passed without {addr}: {v}");
    expect(v, 5, &addr);

    // STATUS: a driver domain that does not run cannot take containers.
    let mut other = lab.conf(range);
    other["driver"] = json!("drv2");
    let (ok, v) = lab.plugin("STATUS", other.to_string().as_bytes(), &[]);
    assert!(!ok, "STATUS for drv2: {v}");
    expect(v, 50, "drv2 is not running");

    let (ok, v) = lab.plugin("DEL", conf.to_string().as_bytes(), &vars);
    assert!(ok, "DEL: {v}");
    assert!(lab.vifs().is_empty(), "{:?}", lab.vifs());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
}

/// From `ns`, a ping with a source address of the container's own making
/// is dropped by the driver domain and counted; the lease's still passes.
fn spoofed_sources_go_nowhere(lab: &Lab, ns: &str) {
    ping(ns, WIRE);
    let spoofed = || lab.vifs()[0]["counters"]["spoofed"].as_u64().unwrap_or(0);
    assert_eq!(spoofed(), 0);
    let added = ip_in(ns, &["addr", "add", "10.88.0.99/16", "dev", "eth0"]);
    assert!(added.status.success(), "{}", text(&added));
    let o = exec_in(
        ns,
        &["ping", "-c", "2", "-W", "1", "-I", "10.88.0.99", WIRE],
    );
    assert!(
        !o.status.success(),
        "a spoofed source got an answer: {}",
        text(&o)
    );
    wait_until("the spoofed frames counted", Duration::from_secs(5), || {
        spoofed() >= 2
    });
    ping(ns, WIRE);
}

/// A container's attachment is carried by an upgrade of hv in place and by
/// hv's restart after it is killed: its guest keeps its process, its
/// traffic goes on, and CHECK and DEL work against the hv that took over.
#[test]
fn a_container_survives_an_upgrade_and_a_kill_of_hv() {
    let Some(mut lab) = Lab::up("cni-hv", Uplink::Wire, ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    let a = lab.netns("a");
    added(&lab, &a);
    ping(&a, WIRE);
    let guest = lab.container_domains()[0]["pid"].clone();
    let o = lab.splitnet(&["upgrade", "--hv"]);
    assert!(o.status.success(), "upgrade --hv: {}", text(&o));
    ping(&a, WIRE);
    lab.cnitool_ok("check", &a);
    let hv = lab.status()["hv_pid"].as_i64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &hv.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_until("hv started again", Duration::from_secs(10), || {
        let o = lab.splitnet(&["status", "--json"]);
        let st: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (st["hv_recovery"].as_str()).is_some_and(|r| r.contains(&format!("hv pid {hv} died")))
    });
    assert_eq!(
        lab.container_domains()[0]["pid"],
        guest,
        "the container's guest changed"
    );
    ping(&a, WIRE);
    lab.cnitool_ok("check", &a);
    download_intact(&lab, &a);
    lab.cnitool_ok("del", &a);
    assert!(lab.container_domains().is_empty());
    assert!(!ip_in(&a, &["link", "show", "dev", "eth0"]).status.success());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
}
