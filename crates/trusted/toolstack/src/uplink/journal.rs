//! The undo journal: what hv changed on the host for the uplinks, written
//! down BEFORE each change, so that whoever comes after a crash (the
//! keeper, `splitnet down`, the next `up`) can put the host back. One JSON
//! object a line in `<run dir>/uplinks.journal`; every undo is idempotent
//! (undoing what is already undone succeeds), and the file is locked
//! (flock) while it is read or rewritten.

use crate::host::{self, ip_in, run};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Owner of the changes made for the whole topology (not one domain).
pub const TOPOLOGY: &str = "";

/// One change to undo.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "kebab-case")]
pub enum Undo {
    /// A host interface lent to namespace `ns`: it goes back to the host
    /// with its MTU, its addresses (`ip addr add` arguments), up-state and
    /// routes (`ip -4|-6 route add` arguments: family, destination, the
    /// rest).
    Lend {
        ns: String,
        iface: String,
        mtu: u32,
        up: bool,
        addrs: Vec<Vec<String>>,
        #[serde(default)]
        routes: Vec<Vec<String>>,
    },
    /// A link splitnet created, in namespace `ns` or the host's (None).
    Link { ns: Option<String>, ifname: String },
    /// An nftables table of splitnet's own.
    Table { family: String, name: String },
    /// A sysctl (path under /proc/sys) and its value before.
    Sysctl { path: String, old: String },
    /// A process splitnet started, by pid and start time (so that a reused
    /// pid is never killed).
    Process { pid: i32, start: u64 },
    /// A daemon splitnet starts with `--pid-file=<pid_file>` (or
    /// `<pid_file>` as an argument of its own, FRR's `-i <pid_file>`),
    /// journaled before it is started (so a crash right after leaves it
    /// known): the process that has that argument and started no earlier
    /// than `after` (its starter's own start time) is stopped; no other is
    /// touched.
    Daemon { pid_file: String, after: u64 },
    /// A directory a daemon makes for its sockets (FRR's
    /// `/var/run/frr/<pathspace>`), removed with what is in it.
    Dir { path: String },
    /// A network namespace splitnet made for an uplink (a pasta uplink's),
    /// deleted with everything in it.
    Netns { name: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Entry {
    owner: String,
    #[serde(flatten)]
    undo: Undo,
}

/// The journal file of run directory `run_dir`.
pub fn path(run_dir: &Path) -> PathBuf {
    run_dir.join("uplinks.journal")
}

/// The file of undos that can never succeed, in run directory `run_dir`.
pub fn attention_path(run_dir: &Path) -> PathBuf {
    run_dir.join("uplinks.attention")
}

/// An undo that can never succeed (what it would restore is gone): taken
/// out of the journal, reported once, and listed by `splitnet status`
/// until `splitnet down --forget`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    /// The driver domain it was done for ("" for the whole topology).
    pub owner: String,
    /// What the undo would have done.
    pub what: String,
    /// Why it cannot.
    pub reason: String,
}

impl Attention {
    /// The line that reports it, once, when it is set aside.
    pub fn report(&self) -> String {
        format!(
            "{}: {} ({NEVER}: `splitnet status` lists it under \"needs attention\" until \
             `splitnet down --forget`)",
            self.what, self.reason
        )
    }
}

/// Why an undo failed, and whether trying again could ever help.
struct Failed {
    reason: String,
    /// What it would restore is gone (an interface, a sysctl), so no later
    /// replay can succeed either.
    lasting: bool,
}

impl Failed {
    fn again(reason: String) -> Failed {
        Failed {
            reason,
            lasting: false,
        }
    }

    fn never(reason: String) -> Failed {
        Failed {
            reason,
            lasting: true,
        }
    }
}

impl Undo {
    /// What undoing it does, for people.
    pub fn describe(&self) -> String {
        match self {
            Undo::Lend { ns, iface, .. } => {
                format!("give host interface {iface} back from namespace {ns}")
            }
            Undo::Link { ns, ifname } => match ns {
                Some(ns) => format!("delete link {ifname} in namespace {ns}"),
                None => format!("delete host link {ifname}"),
            },
            Undo::Table { family, name } => format!("delete nftables table {family} {name}"),
            Undo::Sysctl { path, old } => format!("restore /proc/sys/{path} to {old}"),
            Undo::Process { pid, .. } => format!("stop process {pid}"),
            Undo::Daemon { pid_file, .. } => format!("stop the daemon of {pid_file}"),
            Undo::Dir { path } => format!("remove directory {path}"),
            Undo::Netns { name } => format!("delete namespace {name}"),
        }
    }
}

/// Opens (creating) and locks the journal.
fn open_locked(run_dir: &Path, create: bool) -> std::io::Result<Option<File>> {
    let p = path(run_dir);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .append(create)
        .create(create)
        .open(&p);
    let f = match f {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    f.lock()?;
    Ok(Some(f))
}

/// Writes down `undo`, owned by `owner` (a driver domain, or
/// [`TOPOLOGY`]), before the change it undoes is made.
pub fn record(run_dir: &Path, owner: &str, undo: Undo) -> Result<(), String> {
    let what = || format!("the undo journal {}", path(run_dir).display());
    let mut f = open_locked(run_dir, true)
        .map_err(|e| format!("{}: {e}", what()))?
        .ok_or_else(what)?;
    let mut line = serde_json::to_string(&Entry {
        owner: owner.to_string(),
        undo,
    })
    .map_err(|e| e.to_string())?;
    line.push('\n');
    f.write_all(line.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| format!("{}: {e}", what()))
}

/// The journal's entries, from its locked file.
fn read_entries(f: &mut File) -> std::io::Result<Vec<Entry>> {
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Undoes, newest first, the entries whose owner `pick` accepts, and
/// keeps the rest, and those whose undo failed (so that a later replay
/// tries again, e.g. an interface that could not be given back); returns
/// what failed. An undo that can never succeed is reported here once and
/// moved to the attention list ([`needs_attention`]). Without a journal,
/// nothing to do.
pub fn replay(run_dir: &Path, pick: impl Fn(&str, &Undo) -> bool) -> Vec<String> {
    let mut f = match open_locked(run_dir, false) {
        Ok(Some(f)) => f,
        Ok(None) => return Vec::new(),
        Err(e) => return vec![format!("the undo journal: {e}")],
    };
    let entries = match read_entries(&mut f) {
        Ok(v) => v,
        Err(e) => return vec![format!("reading the undo journal: {e}")],
    };
    let mut keep = vec![true; entries.len()];
    let mut errors = Vec::new();
    for (i, e) in entries.iter().enumerate().rev() {
        if !pick(&e.owner, &e.undo) {
            continue;
        }
        match undo(&e.undo) {
            Ok(()) => keep[i] = false,
            Err(x) if x.lasting => match set_aside(run_dir, e, &x.reason) {
                Ok(said) => {
                    keep[i] = false;
                    errors.push(said);
                }
                // Not listed: it stays here, to be tried (and set aside) again.
                Err(why) => errors.push(format!(
                    "{}: {} (cannot be undone, and listing it failed: {why}; kept in the \
                     undo journal)",
                    e.undo.describe(),
                    x.reason
                )),
            },
            Err(x) => errors.push(format!(
                "{} (kept in the undo journal, tried again later)",
                x.reason
            )),
        }
    }
    let rest: String = entries
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .filter_map(|(e, _)| serde_json::to_string(e).ok())
        .map(|l| l + "\n")
        .collect();
    let rewrite = f
        .set_len(0)
        .and_then(|()| f.rewind())
        .and_then(|()| f.write_all(rest.as_bytes()))
        .and_then(|()| f.sync_data());
    if let Err(e) = rewrite {
        errors.push(format!("rewriting the undo journal: {e}"));
    }
    if rest.is_empty() {
        let _ = fs::remove_file(path(run_dir));
    }
    errors
}

/// Adds entry `e`, whose undo can never succeed, to the attention list
/// (the caller holds the journal's lock); the line that reports it.
fn set_aside(run_dir: &Path, e: &Entry, reason: &str) -> std::io::Result<String> {
    let a = Attention {
        owner: e.owner.clone(),
        what: e.undo.describe(),
        reason: reason.to_string(),
    };
    let line = serde_json::to_string(&a).map_err(std::io::Error::other)? + "\n";
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(attention_path(run_dir))
        .and_then(|mut f| f.write_all(line.as_bytes()).and_then(|()| f.sync_data()))?;
    Ok(a.report())
}

/// What the line reporting an undo set aside says (callers that list the
/// attention list themselves leave such lines out).
pub const NEVER: &str = "it can never be undone";

/// The undos that can never succeed, oldest first.
pub fn needs_attention(run_dir: &Path) -> Vec<Attention> {
    fs::read_to_string(attention_path(run_dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Clears the attention list (`splitnet down --forget`); what it held.
/// Entries are set aside only by a replay, which holds the journal's lock.
pub fn forget(run_dir: &Path) -> std::io::Result<Vec<Attention>> {
    let _replays_wait = open_locked(run_dir, false)?;
    let held = needs_attention(run_dir);
    match fs::remove_file(attention_path(run_dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(held),
    }
}

/// The host interfaces the journal says were lent to namespace `ns` and
/// are still in it.
pub fn still_lent(run_dir: &Path, ns: &str) -> Result<Vec<String>, String> {
    let entries = match open_locked(run_dir, false) {
        Ok(Some(mut f)) => read_entries(&mut f),
        Ok(None) => return Ok(Vec::new()),
        Err(e) => Err(e),
    }
    .map_err(|e| format!("reading the undo journal: {e}"))?;
    Ok(entries
        .into_iter()
        .filter_map(|e| match e.undo {
            Undo::Lend { ns: n, iface, .. } if n == ns && exists(Some(ns), &iface) => Some(iface),
            _ => None,
        })
        .collect())
}

/// Undoes everything in the journal (hv's exit, the keeper, `down`, `up`).
pub fn replay_all(run_dir: &Path) -> Vec<String> {
    replay(run_dir, |_, _| true)
}

/// The host namespace, as this process sees it: where lent interfaces go
/// back to (`ip -n NS` runs in NS, so it cannot name the host by itself).
fn host_netns() -> String {
    format!("/proc/{}/ns/net", std::process::id())
}

pub(super) fn exists(ns: Option<&str>, ifname: &str) -> bool {
    show_link(ns, ifname).is_ok()
}

/// `ip link show dev IFNAME` in `ns`, or in this process's namespace.
fn show_link(ns: Option<&str>, ifname: &str) -> std::io::Result<String> {
    let args = ["link", "show", "dev", ifname];
    match ns {
        Some(ns) => ip_in(ns, &args),
        None => run("ip", &args),
    }
}

/// Undoes one change; what is already undone is fine.
fn undo(u: &Undo) -> Result<(), Failed> {
    let e = |x: std::io::Error| Failed::again(x.to_string());
    match u {
        Undo::Lend {
            ns,
            iface,
            mtu,
            up,
            addrs,
            routes,
        } => give_back(ns, iface, *mtu, (*up).then_some(routes.as_slice()), addrs),
        Undo::Sysctl { path, old } => {
            let full = Path::new("/proc/sys").join(path);
            fs::write(&full, old).map_err(|x| {
                let reason = format!("restoring /proc/sys/{path} to {old}: {x}");
                // A sysctl whose file is gone (IPv6 switched off since, say)
                // can never be written again.
                match x.kind() {
                    std::io::ErrorKind::NotFound => Failed::never(reason),
                    _ => Failed::again(reason),
                }
            })
        }
        Undo::Link { ns, ifname } => {
            if exists(ns.as_deref(), ifname) {
                let args = ["link", "del", "dev", ifname.as_str()];
                match ns {
                    Some(ns) => ip_in(ns, &args).map(drop).map_err(e)?,
                    None => run("ip", &args).map(drop).map_err(e)?,
                }
            }
            Ok(())
        }
        Undo::Table { family, name } => {
            if run("nft", &["list", "table", family, name]).is_ok() {
                run("nft", &["delete", "table", family, name]).map_err(e)?;
            }
            Ok(())
        }
        Undo::Process { pid, start } => {
            if start_time(*pid) == Some(*start) {
                stop(*pid);
            }
            Ok(())
        }
        Undo::Daemon { pid_file, after } => {
            daemon_pids(pid_file, *after).into_iter().for_each(stop);
            let _ = fs::remove_file(pid_file);
            Ok(())
        }
        Undo::Dir { path } => match fs::remove_dir_all(path) {
            Err(x) if x.kind() != std::io::ErrorKind::NotFound => {
                Err(Failed::again(format!("removing {path}: {x}")))
            }
            _ => Ok(()),
        },
        Undo::Netns { name } => {
            crate::host::netns_del(name);
            Ok(())
        }
    }
}

/// SIGTERM to `pid`, and waits for it to go.
fn stop(pid: i32) {
    host::signal_all(&[pid], libc::SIGTERM);
    wait_gone(pid);
}

/// The daemon of [`Undo::Daemon`]: the pid in its pid file if that is it;
/// else (it has not written the file yet) any process that is it.
pub(super) fn daemon_pids(pid_file: &str, after: u64) -> Vec<i32> {
    let arg = format!("--pid-file={pid_file}");
    let is_it = |pid: i32| {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let has_arg = cmdline
            .split(|b| *b == 0)
            .any(|a| a == arg.as_bytes() || a == pid_file.as_bytes());
        has_arg && start_time(pid).is_some_and(|t| t >= after)
    };
    let listed = fs::read_to_string(pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    if let Some(pid) = listed.filter(|p| is_it(*p)) {
        return vec![pid];
    }
    let all = fs::read_dir("/proc").into_iter().flatten().flatten();
    all.filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| is_it(*p))
        .collect()
}

/// Moves `iface` from `ns` back to the host and restores its settings;
/// `up`: it was up, with these routes (a down link has none).
fn give_back(
    ns: &str,
    iface: &str,
    mtu: u32,
    up: Option<&[Vec<String>]>,
    addrs: &[Vec<String>],
) -> Result<(), Failed> {
    let e = |x: std::io::Error| Failed::again(format!("giving {iface} back to the host: {x}"));
    if exists(Some(ns), iface) {
        ip_in(ns, &["link", "set", "dev", iface, "down"]).map_err(e)?;
        ip_in(ns, &["link", "set", "dev", iface, "netns", &host_netns()]).map_err(e)?;
    }
    if !exists(None, iface) {
        return Err(vanished(ns, iface));
    }
    run(
        "ip",
        &["link", "set", "dev", iface, "mtu", &mtu.to_string()],
    )
    .map_err(e)?;
    for a in addrs {
        let mut args = vec!["addr", "replace"];
        args.extend(a.iter().map(String::as_str));
        args.extend(["dev", iface]);
        run("ip", &args).map_err(e)?;
    }
    if let Some(routes) = up {
        run("ip", &["link", "set", "dev", iface, "up"]).map_err(e)?;
        for r in routes {
            restore_route(iface, r).map_err(e)?;
        }
    }
    Ok(())
}

/// How long the kernel may take to bring a NIC home from a namespace being
/// deleted (its cleanup runs later, in a worker).
const NIC_HOME: std::time::Duration = std::time::Duration::from_secs(2);

/// A lent interface found neither in its namespace nor on the host. It is
/// gone for good (unplugged, or a veth destroyed with its namespace) only
/// when `ip` says so plainly in both places, and again once a NIC on its
/// way home from a deleted namespace would have arrived; otherwise the
/// undo is tried again later.
fn vanished(ns: &str, iface: &str) -> Failed {
    let reason = format!("host interface {iface} is neither in {ns} nor on the host");
    let gone = || absent(Some(ns), iface) && absent(None, iface);
    if gone() && {
        std::thread::sleep(NIC_HOME);
        gone()
    } {
        Failed::never(reason)
    } else {
        Failed::again(reason)
    }
}

/// Whether `ip` says plainly that `ifname` is not in `ns` (or the host's
/// namespace), or that `ns` is gone; a failure of any other kind is not
/// taken for an answer.
fn absent(ns: Option<&str>, ifname: &str) -> bool {
    match show_link(ns, ifname) {
        Ok(_) => false,
        Err(e) => {
            let e = e.to_string();
            e.contains("does not exist")
                || e.contains("Cannot open network namespace")
                || e.contains("cannot open /proc")
        }
    }
}

/// Adds route `r` (family, destination, the rest) through `iface` again,
/// unless it is there already (an earlier replay did it).
fn restore_route(iface: &str, r: &[String]) -> std::io::Result<()> {
    let [family, dst, rest @ ..] = r else {
        return Ok(());
    };
    let shown = run("ip", &[family, "route", "show", dst, "dev", iface])?;
    if !shown.trim().is_empty() {
        return Ok(());
    }
    let mut args = vec![family.as_str(), "route", "add", dst.as_str()];
    args.extend(rest.iter().map(String::as_str));
    args.extend(["dev", iface]);
    run("ip", &args).map(drop)
}

/// A process's start time (field 22 of /proc/PID/stat), if it runs.
pub fn start_time(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    if f.first() == Some(&"Z") {
        return None;
    }
    f.get(19)?.parse().ok()
}

/// Waits for `pid` to exit: SIGKILL after 5 s, given up after 10 s.
fn wait_gone(pid: i32) {
    let start = std::time::Instant::now();
    while host::pid_alive(pid) && start.elapsed() < std::time::Duration::from_secs(10) {
        if start.elapsed() > std::time::Duration::from_secs(5) {
            host::signal_all(&[pid], libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A process entry whose start time matches no process: undoing it is
    /// a no-op, so the journal's bookkeeping can be tested without root.
    fn gone(pid: i32) -> Undo {
        Undo::Process {
            pid,
            start: u64::MAX,
        }
    }

    /// An entry whose undo fails without harm, and may succeed later: a
    /// directory to remove that is a file (`dir`'s `splitnet-no-such`).
    fn failing(dir: &Path) -> Undo {
        let file = dir.join("splitnet-no-such");
        fs::write(&file, "a file, not a directory").unwrap();
        Undo::Dir {
            path: file.display().to_string(),
        }
    }

    /// An entry whose undo can never succeed: a sysctl that does not exist
    /// (as IPv6's, once IPv6 is switched off).
    fn lasting() -> Undo {
        Undo::Sysctl {
            path: "splitnet-no-such/sysctl".into(),
            old: "0".into(),
        }
    }

    #[test]
    fn an_undo_that_fails_stays_in_the_journal_and_is_reported() {
        let dir = std::env::temp_dir().join(format!("splitnet-journal-f-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        record(&dir, "a", gone(1)).unwrap();
        record(&dir, "a", failing(&dir)).unwrap();
        record(&dir, "b", gone(2)).unwrap();
        let errors = replay(&dir, |owner, _| owner == "a");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("splitnet-no-such"), "{errors:?}");
        assert!(errors[0].contains("tried again later"), "{errors:?}");
        let left = fs::read_to_string(path(&dir)).unwrap();
        let lines: Vec<&str> = left.lines().collect();
        assert_eq!(lines.len(), 2, "{left}");
        assert!(lines[0].contains("splitnet-no-such"), "{left}");
        assert!(lines[1].contains("\"pid\":2,"), "{left}");
        // Tried again by every later replay, and kept while it fails.
        assert_eq!(replay_all(&dir).len(), 1);
        assert_eq!(fs::read_to_string(path(&dir)).unwrap().lines().count(), 1);
        assert!(needs_attention(&dir).is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_undo_that_can_never_succeed_is_reported_once_and_listed_until_forgotten() {
        let dir = std::env::temp_dir().join(format!("splitnet-journal-n-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let vanished = Undo::Lend {
            ns: "splitnet-no-such-ns".into(),
            iface: "snnosuch0".into(),
            mtu: 1500,
            up: true,
            addrs: Vec::new(),
            routes: Vec::new(),
        };
        record(&dir, "drv", vanished).unwrap();
        record(&dir, TOPOLOGY, lasting()).unwrap();
        record(&dir, "drv", gone(1)).unwrap();
        let errors = replay_all(&dir);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors
                .iter()
                .all(|e| e.contains("can never be undone") && e.contains("splitnet down --forget")),
            "{errors:?}"
        );
        assert!(!path(&dir).exists(), "nothing is left to try again");
        // Reported once: later replays have nothing to say.
        assert!(replay_all(&dir).is_empty());
        let listed = needs_attention(&dir);
        let whats: Vec<&str> = listed.iter().map(|a| a.what.as_str()).collect();
        // Newest first, as replay undoes them.
        assert_eq!(
            whats,
            [
                "restore /proc/sys/splitnet-no-such/sysctl to 0",
                "give host interface snnosuch0 back from namespace splitnet-no-such-ns",
            ]
        );
        assert_eq!(listed[1].owner, "drv");
        assert!(
            listed[1]
                .reason
                .contains("neither in splitnet-no-such-ns nor on the host"),
            "{listed:?}"
        );
        assert_eq!(forget(&dir).unwrap(), listed);
        assert!(needs_attention(&dir).is_empty());
        assert!(forget(&dir).unwrap().is_empty(), "forgetting twice is fine");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_daemon_is_found_by_its_pid_file_argument_and_start_time() {
        let dir = std::env::temp_dir().join(format!("splitnet-journal-d-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("d.pid").display().to_string();
        let after = start_time(std::process::id() as i32).unwrap();
        // A stand-in daemon: a shell with the argument in its command line,
        // waiting on its stdin (it forks nothing).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x", &format!("--pid-file={pid_file}")])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        testutil::wait_until("sh to exec", std::time::Duration::from_secs(5), || {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with(b"sh\0"))
        });
        // Not written yet: found by its command line; a stale or foreign
        // pid in the file is not taken.
        fs::write(&pid_file, "1\n").unwrap();
        assert_eq!(daemon_pids(&pid_file, after), vec![pid]);
        fs::write(&pid_file, format!("{pid}\n")).unwrap();
        assert_eq!(daemon_pids(&pid_file, after), vec![pid]);
        // Started before its starter: a reused pid, left alone.
        assert!(daemon_pids(&pid_file, u64::MAX).is_empty());
        record(
            &dir,
            "a",
            Undo::Daemon {
                pid_file: pid_file.clone(),
                after,
            },
        )
        .unwrap();
        assert!(replay_all(&dir).is_empty());
        assert!(
            child.try_wait().unwrap().is_some(),
            "the daemon was stopped"
        );
        assert!(!Path::new(&pid_file).exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn replay_undoes_what_it_picks_and_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("splitnet-journal-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        record(&dir, "a", gone(1)).unwrap();
        record(&dir, "b", gone(2)).unwrap();
        record(&dir, TOPOLOGY, gone(3)).unwrap();
        assert!(replay(&dir, |owner, _| owner == "a").is_empty());
        let left = fs::read_to_string(path(&dir)).unwrap();
        assert_eq!(left.lines().count(), 2, "{left}");
        assert!(!left.contains("\"pid\":1,"));
        assert!(replay_all(&dir).is_empty());
        assert!(!path(&dir).exists(), "an empty journal is removed");
        assert!(replay_all(&dir).is_empty(), "no journal, nothing to do");
        let _ = fs::remove_dir_all(&dir);
    }
}
