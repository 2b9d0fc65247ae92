//! Escape attempts by a hostile domain process, each of which must be
//! refused.
//!
//! The hostile process is this test binary, re-executed the way hv starts a
//! domain: `ip netns exec` into a namespace made by `toolstack::host::domain_netns_add`,
//! holding a control socket from a real in-process hv, and confined by the
//! same `jail::enter` a domain calls. It then tries to get out and
//! prints one line per attempt (`REFUSED ...` or `ESCAPED ...`, and `OK ...`
//! for the controls that show the attempt was real). No hook in the
//! `splitnet` command is involved.
//!
//! A custom harness (`harness = false`): the jail needs a single-threaded
//! process, and libtest runs each test on a thread of its own. Needs root;
//! brings up `splitnet-esc*` namespaces, so run it under the namespace lock
//! like the other end-to-end tests.

use splitnet_toolstack as toolstack;

use hv::proto::{Reply, Request};
use hv::{DomId, DomainSpec, HvClient, Hypervisor};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

const ATTACK: &str = "SPLITNET_ESCAPE_ATTACK";
const HOSTILE: &str = "eschostile";
const PEER: &str = "escpeer";

fn main() {
    if let Ok(attack) = std::env::var(ATTACK) {
        std::process::exit(hostile::run(&attack));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tests: &[(&str, fn())] = &[
        (
            "jail_credentials_are_the_domains",
            jail_credentials_are_the_domains,
        ),
        (
            "escape_reopen_readonly_pool_writable",
            escape_reopen_readonly_pool_writable,
        ),
        (
            "escape_setns_other_domain_and_host",
            escape_setns_other_domain_and_host,
        ),
        (
            "escape_netlink_into_host_netns",
            escape_netlink_into_host_netns,
        ),
        ("escape_toolstack_socket", escape_toolstack_socket),
        (
            "escape_store_outside_own_subtree",
            escape_store_outside_own_subtree,
        ),
        ("escape_signal_hv", escape_signal_hv),
    ];
    if args.iter().any(|a| a == "--list") {
        for (name, _) in tests {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|a| !a.starts_with('-'));
    let chosen: Vec<_> = tests
        .iter()
        .filter(|(n, _)| filter.is_none_or(|f| n.contains(f.as_str())))
        .collect();
    if !toolstack::host::is_root() {
        assert!(
            std::env::var("SPLITNET_REQUIRE_ROOT").as_deref() != Ok("1"),
            "the escape tests need root (network namespaces, a jailed process), and SPLITNET_REQUIRE_ROOT=1"
        );
        println!(
            "\ntest result: ok. 0 passed; 0 failed; {} SKIPPED (not root)\n",
            chosen.len()
        );
        return;
    }
    // The domains' namespaces are the host's `splitnet-*` ones, which
    // `splitnet up` elsewhere would wipe: one such test at a time.
    let _host = testutil::host_lock();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, f) in &chosen {
        let r = std::panic::catch_unwind(f);
        println!(
            "test {name} ... {}",
            if r.is_ok() { "ok" } else { "FAILED" }
        );
        if r.is_err() {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {} filtered out\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        chosen.len() - failed.len(),
        failed.len(),
        tests.len() - chosen.len()
    );
    if !failed.is_empty() {
        std::process::exit(101);
    }
}

/// A real hv with a hostile guest and a peer guest, each with the
/// namespaces hv's daemon gives a domain; torn down on drop.
struct World {
    hv: Arc<Hypervisor>,
    hostile: DomId,
    hostile_sock: Option<sys::SeqPacket>,
    peer: DomId,
    peer_client: HvClient,
}

fn spec(name: &str) -> DomainSpec {
    DomainSpec::new(name, "guest", 64, 1)
}

impl World {
    fn new() -> World {
        for n in [HOSTILE, PEER] {
            toolstack::host::netns_del(&toolstack::host::netns_name(n));
        }
        let hv = Hypervisor::new();
        let (hostile, hostile_sock) = hv.create_domain(spec(HOSTILE)).expect("hostile domain");
        let (peer, peer_sock) = hv.create_domain(spec(PEER)).expect("peer domain");
        for (n, id) in [(HOSTILE, hostile), (PEER, peer)] {
            toolstack::host::domain_netns_add(&toolstack::host::netns_name(n), id)
                .expect("domain namespace");
        }
        let peer_client = HvClient::connect(peer_sock).expect("peer says hello");
        World {
            hv,
            hostile,
            hostile_sock: Some(hostile_sock),
            peer,
            peer_client,
        }
    }

    /// Runs `attack` in the hostile domain; returns its report lines.
    fn attack(&mut self, attack: &str, env: &[(&str, String)]) -> Vec<String> {
        self.attack_with(attack, env, |_| {})
    }

    /// Runs `attack`; once the domain is jailed and says READY, calls
    /// `ready` with its pid (it waits until then), and returns its report.
    fn attack_with(
        &mut self,
        attack: &str,
        env: &[(&str, String)],
        ready: impl FnOnce(i32),
    ) -> Vec<String> {
        let sock = self.hostile_sock.take().expect("one attack per world");
        sys::set_inheritable(sock.as_fd(), true).expect("inheritable");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &toolstack::host::netns_name(HOSTILE)])
            .arg(std::env::current_exe().expect("own path"))
            .env(ATTACK, attack)
            .env(
                toolstack::daemon::ENV_HV_FD,
                sock.as_fd().as_raw_fd().to_string(),
            )
            .env("ESC_DOMID", self.hostile.to_string())
            .env("ESC_PEER", self.peer.to_string())
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the hostile domain");
        drop(sock);
        let pid = child.id() as i32;
        let mut stdin = child.stdin.take();
        let mut lines = Vec::new();
        let mut ready = Some(ready);
        for l in BufReader::new(child.stdout.take().expect("stdout")).lines() {
            let l = l.expect("report line");
            if l == "READY" {
                if let Some(f) = ready.take() {
                    f(pid);
                }
                drop(stdin.take());
                continue;
            }
            println!("    {l}");
            lines.push(l);
        }
        drop(stdin);
        let out = child.wait_with_output().expect("hostile domain exits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the hostile domain failed ({}):\n{lines:#?}\n{stderr}",
            out.status
        );
        let escaped: Vec<_> = lines.iter().filter(|l| l.starts_with("ESCAPED")).collect();
        assert!(escaped.is_empty(), "escapes: {escaped:#?}\n{stderr}");
        lines
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.hv.shutdown();
        for n in [HOSTILE, PEER] {
            toolstack::host::netns_del(&toolstack::host::netns_name(n));
        }
    }
}

fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

fn jail_credentials_are_the_domains() {
    let mut w = World::new();
    let mut host_view = String::new();
    let lines = w.attack_with("creds", &[], |pid| {
        host_view = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    });
    let status: BTreeMap<String, String> = host_view
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    // From the host: its own uid and gid, no group, CAP_NET_ADMIN alone.
    let id = jail::domain_uid(w.hostile).to_string();
    let four = [id.as_str(); 4].join(" ");
    assert_eq!(status["Uid"], four, "{host_view}");
    assert_eq!(status["Gid"], four);
    assert_eq!(status["Groups"], "");
    let net_admin = format!("{:016x}", 1u64 << sys::jail::CAP_NET_ADMIN);
    for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status[k], net_admin, "{k}");
    }
    assert_eq!(status["NoNewPrivs"], "1");
    assert_eq!(status["Seccomp"], "2");
    assert_eq!(count(&lines, "REFUSED"), 2, "{lines:#?}");
}

fn escape_reopen_readonly_pool_writable() {
    let mut w = World::new();
    let gref = w
        .peer_client
        .grants()
        .grant_access(w.hostile, 0, true)
        .expect("grant");
    let lines = w.attack("pool", &[("ESC_GREF", gref.to_string())]);
    assert_eq!(count(&lines, "OK"), 1, "{lines:#?}");
    assert_eq!(count(&lines, "REFUSED"), 4, "{lines:#?}");
}

fn escape_setns_other_domain_and_host() {
    let mut w = World::new();
    let lines = w.attack("setns", &[]);
    assert_eq!(count(&lines, "REFUSED"), 3, "{lines:#?}");
}

fn escape_netlink_into_host_netns() {
    let mut w = World::new();
    let lines = w.attack("netlink", &[]);
    assert_eq!(count(&lines, "OK"), 1, "{lines:#?}");
    assert_eq!(count(&lines, "REFUSED"), 2, "{lines:#?}");
    assert!(
        !Path::new("/sys/class/net/escx1").exists(),
        "an interface appeared in the host's namespace"
    );
}

fn escape_toolstack_socket() {
    let mut w = World::new();
    let dir = PathBuf::from(format!("/run/splitnet-escape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut paths = Vec::new();
    // As hv makes it, and one anybody may open: hv must refuse by itself.
    for (name, mode) in [("hv.sock", None), ("open.sock", Some(0o777))] {
        let p = dir.join(name);
        let l = sys::SeqPacketListener::bind(&p).expect("listen");
        if let Some(m) = mode {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).expect("chmod");
        }
        let hv = w.hv.clone();
        std::thread::spawn(move || toolstack::daemon::accept_loop(hv, l));
        paths.push(p.display().to_string());
    }
    let lines = w.attack(
        "toolstack",
        &[
            ("ESC_SOCKS", paths.join(":")),
            (
                "ESC_REAL",
                toolstack::daemon::socket_path(Path::new(toolstack::daemon::DEFAULT_RUN_DIR))
                    .display()
                    .to_string(),
            ),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(count(&lines, "REFUSED"), 3, "{lines:#?}");
}

fn escape_store_outside_own_subtree() {
    let mut w = World::new();
    let lines = w.attack("store", &[]);
    assert_eq!(count(&lines, "OK"), 1, "{lines:#?}");
    assert_eq!(count(&lines, "REFUSED"), 6, "{lines:#?}");
}

fn escape_signal_hv() {
    let mut w = World::new();
    let lines = w.attack("signal", &[("ESC_HV_PID", std::process::id().to_string())]);
    assert_eq!(count(&lines, "REFUSED"), 2, "{lines:#?}");
}

/// The hostile domain's side: exactly a domain's start, then the attack.
mod hostile {
    use super::*;

    fn env(k: &str) -> String {
        std::env::var(k).unwrap_or_else(|_| panic!("{k} is set by the test"))
    }

    fn verdict<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) {
        match r {
            Ok(_) => println!("ESCAPED {what}"),
            Err(e) => println!("REFUSED {what}: {e}"),
        }
    }

    pub fn run(attack: &str) -> i32 {
        let fd: i32 = env(toolstack::daemon::ENV_HV_FD).parse().expect("fd");
        let sock = sys::take_inherited_fd(fd).expect("inherited hv socket");
        let mut hv = HvClient::connect(sys::SeqPacket::from_fd(sock)).expect("hello");
        let role = jail::Role::of_kind(&hv.welcome().kind).expect("role");
        if let Err(e) = jail::enter(role) {
            eprintln!("{e}");
            return 2;
        }
        let peer: DomId = env("ESC_PEER").parse().expect("peer");
        match attack {
            "creds" => creds(),
            "pool" => pool(&mut hv, peer),
            "setns" => setns(),
            "netlink" => netlink(),
            "toolstack" => toolstack(),
            "store" => store(&mut hv, peer),
            "signal" => signal(),
            other => {
                eprintln!("no attack {other:?}");
                return 3;
            }
        }
        0
    }

    fn creds() {
        // Jailed: let the test look at us from the host, and wait for it.
        println!("READY");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        // The host's file systems are read-only, and not ours anyway.
        verdict(
            "write a file on the host",
            std::fs::write(format!("/tmp/splitnet-escape-{}", std::process::id()), "x"),
        );
        verdict(
            "create a file in /dev/shm",
            std::fs::write(
                format!("/dev/shm/splitnet-escape-{}", std::process::id()),
                "x",
            ),
        );
    }

    fn pool(hv: &mut HvClient, peer: DomId) {
        let gref: u32 = env("ESC_GREF").parse().expect("gref");
        verdict(
            "ask hv for a writable map of a read-only grant",
            hv.call(&Request::GrantMap {
                granter: peer,
                gref,
                writable: true,
            }),
        );
        let (reply, mut fds) = hv
            .call(&Request::GrantMap {
                granter: peer,
                gref,
                writable: false,
            })
            .expect("a read-only map of a read-only grant is allowed");
        let Reply::Mapped { frame, .. } = reply else {
            panic!("unexpected reply {reply:?}");
        };
        let fd: OwnedFd = fds.pop().expect("hv passed the pool descriptor");
        let off = u64::from(frame) * sys::PAGE_SIZE as u64;
        match sys::Mapping::new(fd.as_fd(), off, sys::PAGE_SIZE, false) {
            Ok(_) => println!("OK a read-only mapping of the granted frame"),
            Err(e) => println!("ESCAPED? the read-only mapping failed too: {e}"),
        }
        verdict(
            "mmap the read-only pool descriptor writable",
            sys::Mapping::new(fd.as_fd(), off, sys::PAGE_SIZE, true),
        );
        verdict(
            "reopen it writable through /proc/self/fd",
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        );
        let file = std::fs::File::from(fd.try_clone().expect("dup"));
        verdict(
            "fchmod it to 0666",
            file.set_permissions(std::fs::Permissions::from_mode(0o666)),
        );
    }

    fn setns() {
        let other = format!("/run/netns/{}", toolstack::host::netns_name(PEER));
        for (what, path) in [
            (
                "setns into another domain's network namespace",
                other.as_str(),
            ),
            ("setns into the host's network namespace", "/proc/1/ns/net"),
            ("setns into the host's user namespace", "/proc/1/ns/user"),
        ] {
            let r = std::fs::File::open(path).and_then(|f| sys::jail::setns(f.as_fd(), 0));
            verdict(what, r);
        }
    }

    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    fn netlink() {
        // Control: the capability works inside the domain's own namespace.
        match ip(&[
            "link", "add", "escx2", "type", "veth", "peer", "name", "escx3",
        ]) {
            Ok(()) => println!("OK a veth pair inside its own namespace"),
            Err(e) => println!("ESCAPED? even its own namespace refused: {e}"),
        }
        verdict(
            "create an interface in the host's namespace (netns 1)",
            ip(&[
                "link", "add", "escx0", "type", "veth", "peer", "name", "escx1", "netns", "1",
            ]),
        );
        verdict(
            "move its interface into the host's namespace",
            ip(&["link", "set", "escx2", "netns", "1"]),
        );
    }

    fn toolstack() {
        let socks = env("ESC_SOCKS");
        let mut paths: Vec<String> = socks.split(':').map(str::to_string).collect();
        paths.push(env("ESC_REAL"));
        for p in &paths {
            let r = hv::Toolstack::connect(Path::new(p)).and_then(|mut t| t.status());
            verdict(&format!("act as the toolstack on {p}"), r);
        }
    }

    fn store(hv: &mut HvClient, peer: DomId) {
        let me = hv.domid();
        match hv.store_write(&format!("/local/domain/{me}/data/x"), "1") {
            Ok(()) => println!("OK a write in its own subtree"),
            Err(e) => println!("ESCAPED? its own subtree refused: {e}"),
        }
        let theirs = format!("/local/domain/{peer}");
        verdict(
            "write in another domain's subtree",
            hv.store_write(&format!("{theirs}/name"), "x"),
        );
        verdict(
            "create a node in another domain's subtree",
            hv.store_write(&format!("{theirs}/data/y"), "x"),
        );
        verdict(
            "remove another domain's node",
            hv.store_rm(&format!("{theirs}/name")),
        );
        verdict(
            "change another domain's permissions",
            hv.store_set_perms(&format!("{theirs}/name"), &[&format!("n{me}")]),
        );
        verdict(
            "write at the top of the store",
            hv.store_write("/tool/escape", "x"),
        );
        verdict(
            "write in the toolstack's domain",
            hv.store_write("/local/domain/0/escape", "x"),
        );
    }

    fn signal() {
        let pid: i32 = env("ESC_HV_PID").parse().expect("pid");
        verdict("probe hv with a signal", sys::kill(pid, 0));
        verdict("kill hv", sys::kill(pid, libc::SIGKILL));
    }
}
