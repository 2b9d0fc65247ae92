//! podman on splitnet, as a user runs it: Debian's podman with its CNI
//! backend, the shipped `examples/containers.toml` (a driver domain whose
//! uplink is the host, by NAT), the plugin chained with the reference
//! `portmap` and `tuning`, and a busybox image imported offline. Needs
//! root, podman, runc and busybox-static (`scripts/setup.sh`).

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use testutil::wait_until;

/// podman with its own storage, configuration and networks under the
/// lab's run directory.
struct Podman {
    conf: PathBuf,
    root: PathBuf,
    run: PathBuf,
}

impl Podman {
    fn new(lab: &Lab) -> Podman {
        let conf = lab.run_dir.join("containers.conf");
        let text = format!(
            "[network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{}\", \"/usr/lib/cni\"]\n\
             network_config_dir = \"{}\"\n[engine]\nruntime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n",
            lab.bin.display(),
            lab.netconf_dir.display()
        );
        std::fs::write(&conf, text).unwrap();
        let p = Podman {
            conf,
            root: lab.run_dir.join("podman-root"),
            run: lab.run_dir.join("podman-run"),
        };
        p.import_busybox(lab);
        p
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("podman")
            .env("CONTAINERS_CONF", &self.conf)
            .arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.run)
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .expect("podman is not installed: scripts/setup.sh installs it")
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert!(o.status.success(), "podman {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// `podman run` on network `sn`, with the options this host needs.
    fn run(&self, extra: &[&str], command: &[&str]) -> String {
        let mut args = vec![
            "run",
            "--runtime",
            "runc",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1000:1000",
            "--network",
            "sn",
        ];
        args.extend_from_slice(extra);
        args.push("localhost/sn-busybox");
        args.extend_from_slice(command);
        self.ok(&args)
    }

    /// A busybox image, made offline: busybox-static and its applets as
    /// the root file system, `podman import`ed.
    fn import_busybox(&self, lab: &Lab) {
        let busybox = PathBuf::from("/bin/busybox");
        let kind = Command::new("file")
            .arg("-L")
            .arg(&busybox)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&kind.stdout).contains("statically linked"),
            "/bin/busybox is not busybox-static: scripts/setup.sh installs it"
        );
        let rootfs = lab.run_dir.join("rootfs");
        let bin = rootfs.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for d in ["etc", "tmp", "proc", "sys", "dev"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::fs::copy(&busybox, bin.join("busybox")).unwrap();
        let list = Command::new(&busybox).arg("--list").output().unwrap();
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            if applet != "busybox" {
                let _ = std::os::unix::fs::symlink("busybox", bin.join(applet));
            }
        }
        let tar = lab.run_dir.join("rootfs.tar");
        let st = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success());
        self.ok(&["import", tar.to_str().unwrap(), "localhost/sn-busybox"]);
    }
}

#[test]
fn podman_runs_containers_on_splitnet_and_publishes_a_port() {
    let Some(lab) = Lab::up("podman", Uplink::Nat, ("10.88.0.10", "10.88.0.200")) else {
        return;
    };
    // Debian 12's podman reads CNI results up to 1.0.0; a runtime chains
    // portmap (for -p) and tuning after the plugin.
    let chained = [
        serde_json::json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        serde_json::json!({"type": "tuning"}),
    ];
    lab.write_conflist("1.0.0", ("10.88.0.10", "10.88.0.200"), &chained);
    let podman = Podman::new(&lab);
    // The first vif a driver domain serves, and its first traffic, make
    // nodes that stay (its backend directories, as under Xen, and its
    // port's counters); what each container adds must not.
    podman.run(&["--rm"], &["ping", "-c", "1", "-W", "2", HOST_END]);
    // The driver domain publishes its stats a moment after traffic.
    let nodes = wait_until("the driver domain's stats", Duration::from_secs(5), || {
        let paths = lab.store_paths();
        paths
            .iter()
            .any(|p| p.ends_with("/splitnet/stats"))
            .then_some(paths)
    });
    podman.run(
        &["-d", "--name", "web", "-p", "18080:80"],
        &["sh", "-c", "mkdir -p /www && echo hello-from-splitnet > /www/index.html && exec httpd -f -p 80 -h /www"],
    );
    let ip = podman.ok(&[
        "inspect",
        "web",
        "--format",
        "{{.NetworkSettings.Networks.sn.IPAddress}}",
    ]);
    assert!(ip.starts_with("10.88.0."), "{ip}");
    let doms = lab.container_domains();
    assert_eq!(doms.len(), 1, "{doms:?}");
    assert_eq!(doms[0]["container"]["ifname"], "eth0");

    // The published port, through portmap on the host.
    let url = format!("http://{HOST_END}:18080/");
    let page = wait_until(
        "the published port to serve",
        Duration::from_secs(10),
        || {
            let o = Command::new("curl")
                .args(["-s", "--max-time", "2", &url])
                .output()
                .unwrap();
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        },
    );
    assert_eq!(page.trim(), "hello-from-splitnet");

    // Another container reaches it, and the host's end of the uplink.
    let got = podman.run(&["--rm"], &["wget", "-qO-", &format!("http://{ip}/")]);
    assert_eq!(got, "hello-from-splitnet");
    podman.run(&["--rm"], &["ping", "-c", "1", "-W", "2", HOST_END]);

    // `podman rm -f` leaves no vif, domain, store node or lease.
    podman.ok(&["rm", "-f", "-t", "0", "web"]);
    assert!(lab.container_domains().is_empty());
    assert!(lab.vifs().is_empty(), "status lists vifs: {:?}", lab.vifs());
    assert!(lab.leases().is_empty(), "{:?}", lab.leases());
    let left: Vec<String> = lab
        .store_paths()
        .into_iter()
        .filter(|p| !nodes.contains(p))
        .collect();
    assert!(left.is_empty(), "store nodes left: {left:?}");
}
