//! Host plumbing: network namespaces, veth links and process launch, done
//! with iproute2; cgroups are [`crate::cgroup`]'s.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use sys::signals::SpawnUnblocked;

/// hv's control socket inside run directory `run_dir`.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join("hv.sock")
}

/// Prefix of every namespace the default instance creates.
pub const PREFIX: &str = "splitnet-";

/// The environment variable naming the instance a process belongs to
/// (`splitnet --host NAME`); hv and every process it starts inherit it.
pub const HOST_ENV: &str = "SPLITNET_HOST";

/// Prefix of the namespaces that belong to no one instance: each host's
/// own (`splitnet@NAME`) and the underlay's router ([`crate::underlay`]).
pub const SHARED_PREFIX: &str = "splitnet@";

/// Name of the physical port in the driver domain's namespace.
pub const PHYS_PORT: &str = "peth0";
/// Name of the wire host's interface.
pub const WIRE_IF: &str = "eth0";

/// The underlay router's name (its namespace is `splitnet@underlay`): no
/// host may have it.
pub const ROUTER: &str = "underlay";

static INSTANCE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Checks a host name: 1 to 8 of `a-z` and `0-9`, so that no host's prefix
/// is another's, and a namespace name stays short.
pub fn valid_host_name(name: &str) -> Result<(), String> {
    let ok = (1..=8).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !ok {
        return Err(format!(
            "host name {name:?}: use 1 to 8 lowercase letters and digits"
        ));
    }
    if name == ROUTER {
        return Err(format!("host name {name:?} is the underlay router's"));
    }
    Ok(())
}

/// Sets this process's instance before anything asks for it: `None` is
/// the default instance, `Some(name)` host `name` of a multi-host setup.
/// Fails if it was already settled otherwise.
pub fn set_instance(name: Option<&str>) -> Result<(), String> {
    if let Some(n) = name {
        valid_host_name(n)?;
    }
    let want = name.map(str::to_string);
    let got = INSTANCE.get_or_init(|| want.clone());
    if *got != want {
        return Err(format!("this process already belongs to instance {got:?}"));
    }
    Ok(())
}

/// This process's instance: set by [`set_instance`], else taken from
/// [`HOST_ENV`] (ignored unless it is a valid host name).
pub fn instance() -> Option<&'static str> {
    INSTANCE
        .get_or_init(|| {
            std::env::var(HOST_ENV)
                .ok()
                .filter(|n| valid_host_name(n).is_ok())
        })
        .as_deref()
}

/// Prefix of every namespace this instance creates: [`PREFIX`], or
/// `splitnet@NAME-` for host `NAME`.
pub fn prefix() -> String {
    match instance() {
        None => PREFIX.to_string(),
        Some(h) => format!("{SHARED_PREFIX}{h}-"),
    }
}

/// The namespace name of a domain or host called `name`.
pub fn netns_name(name: &str) -> String {
    format!("{}{name}", prefix())
}

/// Serializes process creation: a descriptor made inheritable for one child
/// must not leak into another started at the same moment.
pub static SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether this process runs as root (its real uid is 0).
pub fn is_root() -> bool {
    let uid = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_string())
    });
    uid.as_deref() == Some("0")
}

/// The directories splitnet's tools live in (`ip`, `sysctl`, `nft`,
/// `dnsmasq`, `pasta`, FRR's daemons), whatever PATH a user or service
/// manager gave it.
const TOOL_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// PATH `path` with the [`TOOL_DIRS`] it lacks appended.
pub fn with_tool_dirs(path: &str) -> String {
    let mut dirs: Vec<&str> = path.split(':').filter(|d| !d.is_empty()).collect();
    for d in TOOL_DIRS {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs.join(":")
}

/// Runs a command to completion; its stderr becomes the error.
pub fn run(cmd: &str, args: &[&str]) -> io::Result<String> {
    let guard = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let child = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_unblocked();
    drop(guard);
    let out = child
        .and_then(|c| c.wait_with_output())
        .map_err(|e| io::Error::new(e.kind(), format!("{cmd}: {e} (is it installed?)")))?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `ip` inside namespace `ns`.
pub fn ip_in(ns: &str, args: &[&str]) -> io::Result<String> {
    // A path (a container's namespace) is no name `ip -n` can take.
    if ns.starts_with('/') {
        let net = format!("--net={ns}");
        let mut a = vec![net.as_str(), "--", "ip"];
        a.extend_from_slice(args);
        return run("nsenter", &a);
    }
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// Creates namespace `ns` with its loopback up.
pub fn netns_add(ns: &str) -> io::Result<()> {
    if jail::in_host_userns() {
        run("ip", &["netns", "add", ns])?;
    } else {
        name_held(ns, sys::jail::NamespaceHolder::spawn_net, |_| Ok(()))?;
    }
    ip_in(ns, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// The jail's first half (the domain's is `jail::enter`): creates network namespace `ns` for domain `domid`, owned by a
/// new user namespace whose uid and gid 0 are [`jail::domain_uid`] on the host,
/// with its loopback up.
pub fn domain_netns_add(ns: &str, domid: hv::DomId) -> io::Result<()> {
    let id = jail::domain_uid(domid);
    name_held(ns, sys::jail::NamespaceHolder::spawn, |h| {
        h.map_ids(0, id, id)
    })?;
    ip_in(ns, &["link", "set", "lo", "up"])?;
    arp_on_own_interface_only(ns)
}

/// A domain with several NICs on one segment (a guest with a hot-plugged
/// vif on its first one's bridge) answers ARP for an address only on the
/// interface that has it, and names only that interface's address in its
/// own requests, as a multi-homed Linux host is set up (`arp_ignore` 1,
/// `arp_announce` 2). With Linux's defaults every interface answers for
/// every address: a peer can learn the second NIC's MAC for the first's
/// address, and when that NIC is unplugged its traffic to the address
/// goes nowhere until its neighbor entry expires (tens of seconds, or
/// never while the connection's own replies keep confirming it).
fn arp_on_own_interface_only(ns: &str) -> io::Result<()> {
    in_netns(ns, || {
        for (key, value) in [("arp_ignore", "1"), ("arp_announce", "2")] {
            let path = format!("/proc/sys/net/ipv4/conf/all/{key}");
            fs::write(&path, value)
                .map_err(|e| io::Error::new(e.kind(), format!("{ns}: {path}: {e}")))?;
        }
        Ok(())
    })
}

/// Names `ns` the namespaces of a holder `spawn` starts, once `prepare`
/// (the id maps, for a new user namespace) is done with it; errors say
/// which step failed.
fn name_held(
    ns: &str,
    spawn: fn() -> io::Result<sys::jail::NamespaceHolder>,
    prepare: impl FnOnce(&sys::jail::NamespaceHolder) -> io::Result<()>,
) -> io::Result<()> {
    let ctx =
        |what: &str, e: io::Error| io::Error::new(e.kind(), format!("namespace {ns}: {what}: {e}"));
    let holder = {
        let _guard = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        spawn().map_err(|e| ctx("creating", e))?
    };
    prepare(&holder).map_err(|e| ctx("mapping ids", e))?;
    run("ip", &["netns", "attach", ns, &holder.pid().to_string()]).map_err(|e| ctx("naming", e))?;
    holder.release().map_err(|e| ctx("releasing", e))
}

/// Sends `sig` to each pid.
pub fn signal_all(pids: &[i32], sig: i32) {
    for &p in pids {
        if p > 1 {
            let _ = sys::kill(p, sig);
        }
    }
}

/// Deletes namespace `ns` (and every interface in it); absent is fine.
/// Processes still inside (commands a user started there with `splitnet
/// exec`) are killed first: deleting a namespace does not stop them.
pub fn netns_del(ns: &str) {
    for _ in 0..50 {
        let pids: Vec<i32> = run("ip", &["netns", "pids", ns])
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        signal_all(&pids, libc::SIGKILL);
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = run("ip", &["netns", "del", ns]);
}

/// Names of existing namespaces that start with this instance's [`prefix`].
pub fn our_netns() -> Vec<String> {
    let p = prefix();
    netns_list()
        .into_iter()
        .filter(|n| n.starts_with(&p))
        .collect()
}

/// Names of every existing named network namespace: the entries of
/// `/run/netns`, where `ip netns` names them (read here, not by running
/// `ip netns list`, which a driver domain's restart waited for).
pub fn netns_list() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Creates a veth pair `a`@`ns_a` <-> `b`@`ns_b`, both up. It is made in
/// `ns_a`, not in hv's own namespace, over which a rootless hv has no say.
pub fn veth_pair(a: &str, ns_a: &str, b: &str, ns_b: &str) -> io::Result<()> {
    ip_in(
        ns_a,
        &[
            "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
        ],
    )?;
    ip_in(ns_a, &["link", "set", a, "up"])?;
    ip_in(ns_b, &["link", "set", b, "up"])?;
    Ok(())
}

/// Shapes what `dev` in `ns` sends to `bits_per_s` with a token bucket
/// (tc tbf): a burst of 10 ms at that rate, at least 64 KiB so that one
/// segmentation-offload frame fits, and at most 50 ms of queue.
pub fn shape(ns: &str, dev: &str, bits_per_s: u64) -> io::Result<()> {
    let rate = format!("{bits_per_s}bit");
    let burst = (bits_per_s / 8 / 100).max(64 << 10).to_string();
    run(
        "tc",
        &[
            "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate, "burst",
            &burst, "latency", "50ms",
        ],
    )
    .map(|_| ())
}

/// Sets `dev`'s offload features in `ns` (`ethtool -K DEV FEATURES...`,
/// e.g. `["gro", "on"]`).
pub fn ethtool_in(ns: &str, dev: &str, features: &[&str]) -> io::Result<()> {
    let mut a = vec!["netns", "exec", ns, "ethtool", "-K", dev];
    a.extend_from_slice(features);
    run("ip", &a).map(|_| ())
}

/// Runs `dev`'s receive processing in `ns` on core `cpu` (receive packet
/// steering: its queue's `rps_cpus`), whatever core the frame was sent on.
pub fn steer_receive(ns: &str, dev: &str, cpu: usize) -> io::Result<()> {
    if !is_ifname(dev) || cpu >= 64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot steer {dev:?} to core {cpu}"),
        ));
    }
    let write = format!(
        "echo {:x} > /sys/class/net/{dev}/queues/rx-0/rps_cpus",
        1u64 << cpu
    );
    // `ip netns exec` mounts the namespace's own sysfs, where `dev` is.
    run("ip", &["netns", "exec", ns, "sh", "-c", &write]).map(|_| ())
}

/// Whether `s` is a plausible interface name (nothing a shell reads).
fn is_ifname(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 16
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Where named namespace `ns` is pinned (the directory `ip netns` uses).
pub fn netns_path(ns: &str) -> std::path::PathBuf {
    std::path::Path::new("/run/netns").join(ns)
}

/// Whether named namespace `ns` exists.
pub fn netns_exists(ns: &str) -> bool {
    netns_path(ns).exists()
}

/// Moves the calling thread into named network namespace `ns`.
pub fn enter_netns(ns: &str) -> io::Result<()> {
    let path = netns_path(ns);
    let f = std::fs::File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    sys::enter_netns(&f).map_err(|e| io::Error::new(e.kind(), format!("entering {ns}: {e}")))
}

/// Runs `f` on a thread of its own in named namespace `ns`; the thread
/// (and the namespace it entered) ends with it.
pub fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_netns(ns)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other(format!("a thread in {ns} panicked"))))
    })
}

/// Adds an address (CIDR) to `dev` in `ns`.
pub fn addr_add(ns: &str, dev: &str, cidr: &str) -> io::Result<()> {
    let mut args = vec!["addr", "add", cidr, "dev", dev];
    if cidr.contains(':') {
        args.push("nodad");
    }
    ip_in(ns, &args).map(|_| ())
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: i32) -> bool {
    pid > 0
        && Path::new(&format!("/proc/{pid}")).exists()
        && fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_directories_join_a_users_path_once() {
        let p = with_tool_dirs("/home/u/bin:/usr/bin:/bin");
        assert!(p.starts_with("/home/u/bin:/usr/bin:/bin:"), "{p}");
        assert!(
            p.contains("/usr/sbin") && p.matches(":/usr/bin").count() == 1,
            "{p}"
        );
        assert_eq!(with_tool_dirs(""), TOOL_DIRS.join(":"));
    }

    #[test]
    fn steering_refuses_a_name_a_shell_would_read_and_a_core_past_the_mask() {
        for bad in [
            "",
            "eth0; reboot",
            "a b",
            "$(x)",
            "eth0/../x",
            "sixteen_chars_xx",
        ] {
            let e = steer_receive("splitnet-none", bad, 1).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let e = steer_receive("splitnet-none", "eth0", 64).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(is_ifname("eth0") && is_ifname("vx100") && is_ifname("peth0.1"));
    }
}
