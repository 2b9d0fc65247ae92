//! What the container tests share: a running splitnet with a CNI network
//! `sn` on it (the plugin under test, the reference plugins), the runtime's
//! namespaces, and the checks a user would make.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use testutil::files::{curl, random_blob, sha256};

pub const SUBNET: &str = "10.88.0.0/16";
pub const WIRE: &str = "10.88.0.254";

/// A running splitnet of one driver domain and its wire host, and a CNI
/// network `sn` on it; down (and its containers' namespaces gone) when
/// dropped.
pub struct Lab {
    pub run_dir: PathBuf,
    pub bin: PathBuf,
    pub netconf_dir: PathBuf,
    /// The containers' gateway: the wire host, or the host's end of a nat
    /// uplink.
    pub gateway: &'static str,
    topology: PathBuf,
    namespaces: Vec<String>,
    _host: testutil::HostLock,
}

/// The driver domain's uplink: a wire host, or the host itself (`nat`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Uplink {
    Wire,
    Nat,
}

/// The host's end of the nat uplink.
pub const HOST_END: &str = "10.88.0.1";

/// The workspace's `splitnet` binary, built beside this crate's plugin.
pub fn splitnet_exe() -> PathBuf {
    let plugin = PathBuf::from(env!("CARGO_BIN_EXE_splitnet-cni"));
    let exe = plugin.with_file_name("splitnet");
    assert!(
        exe.is_file(),
        "{} is not built: run the workspace's tests (cargo test --workspace)",
        exe.display()
    );
    exe
}

pub fn cnitool() -> PathBuf {
    let found = ["/usr/local/bin/cnitool", "/root/go/bin/cnitool"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    found.expect("cnitool is not installed: scripts/setup.sh installs it (go install github.com/containernetworking/cni/cnitool@v1.3.0)")
}

pub fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

impl Lab {
    pub fn up(name: &str, uplink: Uplink, ipam_range: (&str, &str)) -> Option<Lab> {
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
        let mut lab = Lab {
            run_dir,
            bin,
            netconf_dir,
            gateway: if uplink == Uplink::Nat {
                HOST_END
            } else {
                WIRE
            },
            topology: PathBuf::new(),
            namespaces: Vec::new(),
            _host: host,
        };
        lab.write_conflist("1.1.0", ipam_range, &[]);
        lab.splitnet(&["down"]);
        // The shipped example for a nat uplink: what a host runs.
        let topology = match uplink {
            Uplink::Nat => PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../examples/containers.toml"
            )),
            Uplink::Wire => {
                // Room for 24 vifs (16 frames, then 513 per vif).
                let t = lab.run_dir.join("containers.toml");
                let text = format!(
                    "name = \"containers\"\n[[domain]]\nname = \"drv\"\nkind = \"driver\"\n\
                     memory_frames = 12328\n\
                     [wire]\nname = \"wire\"\ndriver = \"drv\"\naddress = \"{WIRE}/16\"\n"
                );
                std::fs::write(&t, text).unwrap();
                t
            }
        };
        lab.topology = topology;
        lab.bring_up();
        Some(lab)
    }

    /// `splitnet up` with the lab's topology.
    pub fn bring_up(&self) {
        let o = self.splitnet(&["up", "--config", self.topology.to_str().unwrap()]);
        assert!(o.status.success(), "up: {}", text(&o));
    }

    /// The plugin's configuration for network `sn`.
    pub fn conf(&self, ipam_range: (&str, &str)) -> Value {
        json!({
            "cniVersion": "1.1.0", "name": "sn", "type": "splitnet",
            "driver": "drv", "bridge": "xenbr0", "runDir": self.run_dir,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": SUBNET, "rangeStart": ipam_range.0, "rangeEnd": ipam_range.1, "gateway": self.gateway}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.run_dir.join("ipam"),
            }
        })
    }

    /// Network `sn` as a runtime reads it: the plugin in protocol
    /// `version`, then the `chained` plugins.
    pub fn write_conflist(&self, version: &str, ipam_range: (&str, &str), chained: &[Value]) {
        let mut conf = self.conf(ipam_range);
        conf["cniVersion"] = json!(version);
        let mut plugins = vec![conf];
        plugins.extend_from_slice(chained);
        let list = json!({"cniVersion": version, "name": "sn", "plugins": plugins});
        std::fs::write(self.netconf_dir.join("10-sn.conflist"), list.to_string()).unwrap();
    }

    pub fn splitnet(&self, args: &[&str]) -> Output {
        Command::new(splitnet_exe())
            .arg("--run-dir")
            .arg(&self.run_dir)
            .args(args)
            .output()
            .unwrap()
    }

    pub fn cni_path(&self) -> String {
        format!("{}:/usr/lib/cni:/opt/cni/bin", self.bin.display())
    }

    /// `cnitool VERB sn NETNS`.
    pub fn cnitool(&self, verb: &str, netns: &str) -> Output {
        self.cnitool_spawn(verb, netns).wait_with_output().unwrap()
    }

    /// `cnitool VERB sn NETNS`, started.
    pub fn cnitool_spawn(&self, verb: &str, netns: &str) -> std::process::Child {
        Command::new(cnitool())
            .args([verb, "sn", &format!("/run/netns/{netns}")])
            .env("NETCONFPATH", &self.netconf_dir)
            .env("CNI_PATH", self.cni_path())
            .env("CNI_CACHE_DIR", self.run_dir.join("cni-cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `cnitool VERB sn NS` for every namespace of `names` at once; each
    /// must succeed.
    pub fn cnitool_all(&self, verb: &str, names: &[String]) {
        let calls: Vec<_> = names
            .iter()
            .map(|ns| (ns, self.cnitool_spawn(verb, ns)))
            .collect();
        for (ns, c) in calls {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "cnitool {verb} {ns}: {}\nhv.log:\n{}",
                text(&o),
                self.hv_log()
            );
        }
    }

    /// The pid of domain `name`'s process.
    pub fn domain_pid(&self, name: &str) -> u64 {
        let st = self.status();
        let doms = st["domains"].as_array().cloned().unwrap_or_default();
        let d = doms.iter().find(|d| d["name"] == name);
        d.and_then(|d| d["pid"].as_u64())
            .unwrap_or_else(|| panic!("{name} is not running: {st}"))
    }

    pub fn cnitool_ok(&self, verb: &str, netns: &str) -> String {
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
    pub fn plugin(&self, command: &str, conf: &[u8], vars: &[(&str, &str)]) -> (bool, Value) {
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

    pub fn hv_log(&self) -> String {
        std::fs::read_to_string(self.run_dir.join("hv.log")).unwrap_or_default()
    }

    /// A fresh network namespace, as a runtime makes one.
    pub fn netns(&mut self, name: &str) -> String {
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

    /// `splitnet status --json`, which must succeed.
    pub fn status(&self) -> Value {
        let o = self.splitnet(&["status", "--json"]);
        assert!(o.status.success(), "status: {}", text(&o));
        serde_json::from_slice(&o.stdout).expect("status --json is JSON")
    }

    /// The guests that are containers' interfaces.
    pub fn container_domains(&self) -> Vec<Value> {
        let doms = self.status()["domains"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        doms.into_iter()
            .filter(|d| d["container"].is_object())
            .collect()
    }

    /// The vifs `status` lists (a DEL must leave none of its own).
    pub fn vifs(&self) -> Vec<Value> {
        self.status()["vifs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every node in the store (`splitnet store-ls`), by path.
    pub fn store_paths(&self) -> Vec<String> {
        let o = self.splitnet(&["store-ls"]);
        assert!(o.status.success(), "store-ls: {}", text(&o));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.lines()
            .filter_map(|l| l.split(" = ").next())
            .map(str::to_string)
            .collect()
    }

    /// The addresses host-local holds a lease on.
    pub fn leases(&self) -> Vec<String> {
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

pub fn ip_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .unwrap()
}

pub fn exec_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap()
}

pub fn ping(ns: &str, to: &str) {
    let o = exec_in(ns, &["ping", "-c", "2", "-W", "2", to]);
    assert!(o.status.success(), "ping {to} from {ns}: {}", text(&o));
}

/// A file of `mib` MiB of random bytes served over HTTP from the wire
/// host (`http://WIRE:8080/blob`): the server, killed when dropped, and the
/// file.
pub struct Served {
    server: std::process::Child,
    pub blob: PathBuf,
    pub url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

pub fn serve_blob(lab: &Lab, mib: u32) -> Served {
    let www = lab.run_dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    let blob = random_blob(&www, mib);
    let server = Command::new("ip")
        .args([
            "netns",
            "exec",
            "splitnet-wire",
            "python3",
            "-m",
            "http.server",
            "8080",
        ])
        .args(["--bind", WIRE, "--directory"])
        .arg(&www)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://{WIRE}:8080/blob");
    Served { server, blob, url }
}

/// `got` is `served`'s file, byte for byte.
pub fn assert_intact(got: &std::path::Path, served: &Served) {
    let want = std::fs::metadata(&served.blob).unwrap().len();
    assert_eq!(std::fs::metadata(got).unwrap().len(), want);
    assert_eq!(
        sha256(got),
        sha256(&served.blob),
        "the download arrived corrupted"
    );
}

/// 64 MiB of random bytes served from the wire host arrive intact in
/// container namespace `ns`.
pub fn download_intact(lab: &Lab, ns: &str) {
    let served = serve_blob(lab, 64);
    let got = lab.run_dir.join("got");
    let o = exec_in(ns, &curl(got.to_str().unwrap(), &served.url));
    assert!(o.status.success(), "curl in {ns}: {}", text(&o));
    assert_intact(&got, &served);
}
