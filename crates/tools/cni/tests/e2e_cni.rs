//! The CNI plugin end to end, driven as a runtime drives it: `cnitool`
//! (the CNI project's own client) and the reference `host-local` IPAM
//! plugin against a running splitnet, containers in namespaces splitnet did
//! not make; then each kind of bad input, by the plugin's own protocol.
//! Needs root, `cnitool` and the reference plugins (`scripts/setup.sh`).

use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use testutil::files::{curl, random_blob, sha256};
use testutil::wait_until;

const SUBNET: &str = "10.88.0.0/16";
const WIRE: &str = "10.88.0.254";

/// A running splitnet of one driver domain and its wire host, and a CNI
/// network `sn` on it; down (and its containers' namespaces gone) when
/// dropped.
struct Lab {
    run_dir: PathBuf,
    bin: PathBuf,
    netconf_dir: PathBuf,
    namespaces: Vec<String>,
    _host: testutil::HostLock,
}

/// The workspace's `splitnet` binary, built beside this crate's plugin.
fn splitnet_exe() -> PathBuf {
    let plugin = PathBuf::from(env!("CARGO_BIN_EXE_splitnet-cni"));
    let exe = plugin.with_file_name("splitnet");
    assert!(
        exe.is_file(),
        "{} is not built: run the workspace's tests (cargo test --workspace)",
        exe.display()
    );
    exe
}

fn cnitool() -> PathBuf {
    let found = ["/usr/local/bin/cnitool", "/root/go/bin/cnitool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    found.expect("cnitool is not installed: scripts/setup.sh installs it (go install github.com/containernetworking/cni/cnitool@v1.3.0)")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Lab {
    fn up(name: &str, ipam_range: (&str, &str)) -> Option<Lab> {
        let host = testutil::root_or_skip("network namespaces, TAP devices, cgroups")?;
        let run_dir =
            std::env::temp_dir().join(format!("splitnet-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&run_dir).unwrap();
        let bin = run_dir.join("cni-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let _ = std::fs::remove_file(bin.join("splitnet"));
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_splitnet-cni"), bin.join("splitnet"))
            .unwrap();
        let netconf_dir = run_dir.join("net.d");
        std::fs::create_dir_all(&netconf_dir).unwrap();
        let lab = Lab {
            run_dir,
            bin,
            netconf_dir,
            namespaces: Vec::new(),
            _host: host,
        };
        std::fs::write(
            lab.netconf_dir.join("10-sn.conflist"),
            lab.conflist(ipam_range).to_string(),
        )
        .unwrap();
        lab.splitnet(&["down"]);
        let topology = lab.run_dir.join("containers.toml");
        std::fs::write(
            &topology,
            format!(
                "name = \"containers\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
                 [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"{WIRE}/16\"\n"
            ),
        )
        .unwrap();
        let o = lab.splitnet(&["up", "--config", topology.to_str().unwrap()]);
        assert!(o.status.success(), "up: {}", text(&o));
        Some(lab)
    }

    /// The plugin's configuration for network `sn`.
    fn conf(&self, ipam_range: (&str, &str)) -> Value {
        json!({
            "cniVersion": "1.1.0", "name": "sn", "type": "splitnet",
            "driver": "drv", "bridge": "xenbr0", "runDir": self.run_dir,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": SUBNET, "rangeStart": ipam_range.0, "rangeEnd": ipam_range.1, "gateway": WIRE}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.run_dir.join("ipam"),
            }
        })
    }

    fn conflist(&self, ipam_range: (&str, &str)) -> Value {
        json!({"cniVersion": "1.1.0", "name": "sn", "plugins": [self.conf(ipam_range)]})
    }

    fn splitnet(&self, args: &[&str]) -> Output {
        Command::new(splitnet_exe())
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(args)
            .output()
            .unwrap()
    }

    fn cni_path(&self) -> String {
        format!("{}:/usr/lib/cni:/opt/cni/bin", self.bin.display())
    }

    /// `cnitool VERB sn NETNS`.
    fn cnitool(&self, verb: &str, netns: &str) -> Output {
        Command::new(cnitool())
            .args([verb, "sn", &format!("/run/netns/{netns}")])
            .env("NETCONFPATH", &self.netconf_dir)
            .env("CNI_PATH", self.cni_path())
            .env("CNI_CACHE_DIR", self.run_dir.join("cni-cache"))
            .output()
            .unwrap()
    }

    fn cnitool_ok(&self, verb: &str, netns: &str) -> String {
        let o = self.cnitool(verb, netns);
        assert!(
            o.status.success(),
            "cnitool {verb} {netns}: {}\nhv.log:\n{}",
            text(&o),
            self.hv_log()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Runs the plugin itself with `command`, `conf` on its input and the
    /// given `CNI_*` variables.
    fn plugin(&self, command: &str, conf: &[u8], vars: &[(&str, &str)]) -> (bool, Value) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_splitnet-cni"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CNI_COMMAND", command)
            .env("CNI_PATH", self.cni_path())
            .envs(vars.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(conf).unwrap();
        let o = child.wait_with_output().unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        (o.status.success(), v)
    }

    fn hv_log(&self) -> String {
        std::fs::read_to_string(self.run_dir.join("hv.log")).unwrap_or_default()
    }

    /// A fresh network namespace, as a runtime makes one.
    fn netns(&mut self, name: &str) -> String {
        // Not `splitnet-*`: `splitnet down` wipes those, and a runtime's
        // namespaces must outlive splitnet.
        let ns = format!("sncni-{name}");
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        assert!(Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap()
            .success());
        self.namespaces.push(ns.clone());
        ns
    }

    fn container_domains(&self) -> Vec<Value> {
        let o = self.splitnet(&["status", "--json"]);
        let st: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        let doms = st["domains"].as_array().cloned().unwrap_or_default();
        doms.into_iter()
            .filter(|d| d["container"].is_object())
            .collect()
    }

    /// The addresses host-local holds a lease on.
    fn leases(&self) -> Vec<String> {
        let dir = self.run_dir.join("ipam").join("sn");
        let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
        names
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("10."))
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.splitnet(&["down"]);
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

fn ip_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .unwrap()
}

fn exec_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap()
}

fn ping(ns: &str, to: &str) {
    let o = exec_in(ns, &["ping", "-c", "2", "-W", "2", to]);
    assert!(o.status.success(), "ping {to} from {ns}: {}", text(&o));
}

/// 64 MiB of random bytes served from the wire host arrive intact in
/// container namespace `ns`.
fn download_intact(lab: &Lab, ns: &str) {
    let www = lab.run_dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    let blob = random_blob(&www, 64);
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            "splitnet-wire",
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            WIRE,
            "--directory",
        ])
        .arg(&www)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let got = lab.run_dir.join("got");
    let url = format!("http://{WIRE}:8080/blob");
    let o = exec_in(ns, &curl(got.to_str().unwrap(), &url));
    let _ = server.kill();
    let _ = server.wait();
    assert!(o.status.success(), "curl in {ns}: {}", text(&o));
    assert_eq!(std::fs::metadata(&got).unwrap().len(), 64 << 20);
    assert_eq!(
        sha256(&got),
        sha256(&blob),
        "the download arrived corrupted"
    );
}

#[test]
fn cnitool_adds_checks_and_deletes_containers_on_splitnet() {
    let Some(mut lab) = Lab::up("cni", ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    let (a, b) = (lab.netns("a"), lab.netns("b"));
    let out = lab.cnitool_ok("add", &a);
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(r["cniVersion"], "1.1.0");
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["interfaces"][1]["sandbox"], format!("/run/netns/{a}"));
    let addr = r["ips"][0]["address"].as_str().unwrap().to_string();
    assert!(addr.starts_with("10.88.0.") && addr.ends_with("/16"), "{r}");
    let shown = String::from_utf8_lossy(&ip_in(&a, &["-o", "addr", "show", "dev", "eth0"]).stdout)
        .into_owned();
    assert!(shown.contains(&addr), "{shown}");

    // The container reaches the wire host and another container, and a
    // download arrives intact.
    ping(&a, WIRE);
    let rb: Value = serde_json::from_str(&lab.cnitool_ok("add", &b)).unwrap();
    let addr_b = rb["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    ping(&a, &addr_b);
    download_intact(&lab, &a);

    // Its guest is jailed as every guest, and status names it by container.
    let doms = lab.container_domains();
    assert_eq!(doms.len(), 2, "{doms:?}");
    let pid = doms[0]["pid"].as_u64().unwrap();
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(st.lines().any(|l| l == "CapEff:\t0000000000001000"), "{st}");
    assert!(st.lines().any(|l| l.starts_with("Seccomp:\t2")), "{st}");
    assert!(!st.lines().any(|l| l.starts_with("Uid:\t0\t")), "{st}");

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
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
    ping_fails(&b, WIRE);

    // With hv gone, STATUS says so (50) and DEL still succeeds.
    lab.cnitool_ok("add", &b);
    let o = lab.splitnet(&["down"]);
    assert!(o.status.success(), "down: {}", text(&o));
    let (ok, v) = lab.plugin("STATUS", conf.to_string().as_bytes(), &[]);
    assert!(!ok && v["code"] == 50, "{v}");
    lab.cnitool_ok("del", &b);
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
    assert!(
        !ip_in(&b, &["link", "show", "dev", "eth0"]).status.success(),
        "down leaves no vif"
    );
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
    let Some(mut lab) = Lab::up("cni-bad", ("10.88.0.10", "10.88.0.10")) else {
        return;
    };
    let conf = lab.conf(("10.88.0.10", "10.88.0.10"));
    let a = lab.netns("bad");
    let path = format!("/run/netns/{a}");
    let vars = |id: &'static str| {
        [
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
        ]
    };
    let expect = |v: Value, code: u64, says: &str| {
        assert_eq!(v["code"], code, "{v}");
        assert!(v.to_string().contains(says), "{v} does not say {says:?}");
    };

    let (_, v) = lab.plugin("ADD", b"{not json", &vars("c1"));
    expect(v, 6, "malformed");
    let mut odd = conf.clone();
    odd["colour"] = json!("blue");
    let (_, v) = lab.plugin("ADD", odd.to_string().as_bytes(), &vars("c1"));
    expect(v, 2, "colour");
    let (_, v) = lab.plugin(
        "ADD",
        conf.to_string().as_bytes(),
        &[("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")],
    );
    expect(v, 4, "CNI_NETNS");
    let (_, v) = lab.plugin("ADD", conf.to_string().as_bytes(), &vars("c/1"));
    expect(v, 4, "CNI_CONTAINERID");
    expect(
        add_error(&lab, &conf, "c1", "/run/netns/none-such"),
        100,
        "none-such",
    );
    expect(
        add_error(&lab, &conf, "c1", "/etc/hostname"),
        100,
        "not a namespace",
    );
    let mut nodriver = conf.clone();
    nodriver["driver"] = json!("nope");
    expect(add_error(&lab, &nodriver, "c1", &path), 100, "nope");
    assert!(
        lab.leases().is_empty(),
        "a refused ADD left a lease: {:?}",
        lab.leases()
    );
    assert!(lab.container_domains().is_empty());

    // The range holds one address: the first ADD takes it, the same one
    // again is refused without touching it, and another finds the range
    // exhausted.
    let (ok, v) = lab.plugin(
        "ADD",
        conf.to_string().as_bytes(),
        &[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", &path),
            ("CNI_IFNAME", "eth0"),
        ],
    );
    assert!(ok, "{v}\n{}", lab.hv_log());
    expect(add_error(&lab, &conf, "c1", &path), 100, "DEL it first");
    let b = lab.netns("bad2");
    // host-local's own code (999) and message pass through.
    expect(
        add_error(&lab, &conf, "c2", &format!("/run/netns/{b}")),
        999,
        "no IP addresses available",
    );
    assert_eq!(lab.leases(), vec!["10.88.0.10".to_string()]);
    assert_eq!(lab.container_domains().len(), 1);
    ping(&a, WIRE);

    // hv not running: try again later (11), naming the socket.
    lab.splitnet(&["down"]);
    wait_until("hv to exit", Duration::from_secs(10), || {
        !lab.run_dir.join("hv.sock").exists()
    });
    expect(add_error(&lab, &conf, "c3", &path), 11, "hv.sock");
}
