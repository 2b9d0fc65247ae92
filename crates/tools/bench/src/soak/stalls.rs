//! What the system was doing when a flow stopped for long. A watchdog
//! looks at every flow twice a second; when one has delivered nothing for
//! [`STALLED`], it writes down every task that is blocked in the kernel
//! (state `D`) and every thread of splitnet's own processes, each with its
//! kernel stack (`/proc/TID/stack`) and the function it waits in
//! (`wchan`), and the stalled flows' TCP sockets (`ss`: retransmissions,
//! back-off, RTO) and neighbour tables in both ends' namespaces. A freeze
//! that no event explains is then read from where the tasks were waiting
//! and what TCP was waiting for, not guessed at.

use super::background::Background;
use super::progress::Progress;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A flow that delivered nothing this long is stalled: longer than any
/// stop the soak makes on purpose to a watched flow (a driver domain
/// stopped for 3 s, a link down for 3 s; the soak does not watch the
/// flows of the guest it stalls for up to 6 s, nor the cross-host one a
/// dropped BGP session stops for about 7 s), and well short of a flow's
/// give-up (20 s).
pub(crate) const STALLED: Duration = Duration::from_secs(5);
/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_millis(500);
/// Dumps per run, at most.
const MAX_DUMPS: usize = 3;

/// One dump: when, which flows had stalled, where it is, and what it says.
#[derive(Debug, Clone, Serialize)]
pub struct StallDump {
    pub at_s: f64,
    pub flows: Vec<String>,
    pub file: PathBuf,
    /// Tasks in the kernel's uninterruptible sleep.
    pub blocked: usize,
    /// The kernel functions the most tasks wait in, with their counts.
    pub waits: Vec<(String, usize)>,
}

/// A flow the watchdog watches: its name, the network namespaces of its
/// two ends, and its record.
pub struct Watched {
    pub name: String,
    pub netns: [String; 2],
    pub progress: Arc<Progress>,
}

/// The running watchdog.
pub struct Watchdog(Background<Vec<StallDump>>);

impl Watchdog {
    /// Watches `flows` (name, record); dumps go to `dir`, times are seconds
    /// since `t0`.
    pub fn start(
        t0: Instant,
        flows: Vec<Watched>,
        dir: PathBuf,
        say: bool,
    ) -> std::io::Result<Watchdog> {
        Watchdog::after(STALLED, t0, flows, dir, say)
    }

    /// The same, a flow counting as stalled after `stalled`.
    fn after(
        stalled: Duration,
        t0: Instant,
        flows: Vec<Watched>,
        dir: PathBuf,
        say: bool,
    ) -> std::io::Result<Watchdog> {
        let look = Look { t0, stalled, say };
        Background::spawn("soak-watchdog", move |stop| {
            watch(&look, &flows, &dir, stop)
        })
        .map(Watchdog)
    }

    /// Stops it: the dumps it took.
    pub fn finish(self) -> Vec<StallDump> {
        self.0.finish()
    }
}

/// How the watchdog looks.
struct Look {
    t0: Instant,
    stalled: Duration,
    say: bool,
}

fn watch(look: &Look, flows: &[Watched], dir: &Path, stop: &AtomicBool) -> Vec<StallDump> {
    let mut dumps = Vec::new();
    // A flow's stall is dumped once, when it begins.
    let mut dumped: Vec<bool> = vec![false; flows.len()];
    while !stop.load(Ordering::Relaxed) && dumps.len() < MAX_DUMPS {
        std::thread::sleep(LOOK_EVERY);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        let mut stalled = Vec::new();
        let mut netns = Vec::new();
        for (k, f) in flows.iter().enumerate() {
            let quiet = f
                .progress
                .last()
                .is_some_and(|l| now.saturating_duration_since(l) >= look.stalled);
            if quiet && !dumped[k] {
                stalled.push(f.name.clone());
                netns.extend(f.netns.iter().cloned());
            }
            dumped[k] = quiet;
        }
        if stalled.is_empty() {
            continue;
        }
        let at_s = now.saturating_duration_since(look.t0).as_secs_f64();
        let file = dir.join(format!("stall-{at_s:.1}s.txt"));
        let what = format!(
            "{} delivered nothing for {:.1} s",
            stalled.join(", "),
            look.stalled.as_secs_f64()
        );
        netns.sort();
        netns.dedup();
        match dump(&file, at_s, &what, &netns) {
            Ok((blocked, waits)) => {
                if look.say {
                    eprintln!(
                        "bench soak: {what}: {blocked} tasks blocked in the kernel, written to {}",
                        file.display()
                    );
                }
                dumps.push(StallDump {
                    at_s,
                    flows: stalled,
                    file,
                    blocked,
                    waits,
                });
            }
            Err(e) => eprintln!("bench soak: writing {}: {e}", file.display()),
        }
    }
    dumps
}

/// One task's line of the dump.
struct Task {
    pid: String,
    tid: String,
    comm: String,
    state: char,
    wchan: String,
    stack: String,
}

/// Writes the dump to `file`: the tasks blocked in the kernel,
/// splitnet's own threads, and the TCP sockets and neighbours of each of
/// `netns`. Returns how many were blocked and the commonest waits.
fn dump(
    file: &Path,
    at_s: f64,
    what: &str,
    netns: &[String],
) -> std::io::Result<(usize, Vec<(String, usize)>)> {
    let tasks = tasks();
    let blocked: Vec<&Task> = tasks.iter().filter(|t| t.state == 'D').collect();
    let mut waits: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &blocked {
        *waits.entry(t.wchan.as_str()).or_default() += 1;
    }
    let mut waits: Vec<(String, usize)> =
        waits.into_iter().map(|(w, n)| (w.to_string(), n)).collect();
    waits.sort_by_key(|w| std::cmp::Reverse(w.1));
    waits.truncate(5);
    let mut out = format!(
        "{at_s:.1} s: {what}\n\n## {} tasks blocked in the kernel (D)\n",
        blocked.len()
    );
    let ours = tasks
        .iter()
        .filter(|t| t.state != 'D' && t.comm.starts_with("splitnet"));
    for (k, t) in blocked.iter().copied().chain(ours).enumerate() {
        if k == blocked.len() {
            out += "\n## splitnet's other threads\n";
        }
        let _ = writeln!(
            out,
            "\n{} (pid {} tid {}) {} in {}\n{}",
            t.comm, t.pid, t.tid, t.state, t.wchan, t.stack
        );
    }
    for ns in netns {
        out += &sockets(ns);
    }
    std::fs::write(file, out)?;
    Ok((blocked.len(), waits))
}

/// The TCP sockets (`ss -tinoe`: state, timers, RTO, back-off,
/// retransmissions) and the neighbour table of network namespace `ns`,
/// as a section of the dump.
fn sockets(ns: &str) -> String {
    let run = |args: &[&str]| match std::process::Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
    {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("{}: {e}\n", args[0]),
    };
    format!(
        "\n## {ns}: TCP sockets\n{}\n## {ns}: neighbours\n{}",
        run(&["ss", "-tinoe"]),
        run(&["ip", "neigh", "show"])
    )
}

/// Every thread blocked in the kernel and every thread of splitnet's
/// processes, as `/proc` shows it now; only these have their `wchan` and
/// kernel stack read.
fn tasks() -> Vec<Task> {
    let mut kept = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return kept;
    };
    for p in procs.flatten() {
        let pid = p.file_name().to_string_lossy().to_string();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(threads) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in threads.flatten() {
            let Some(mut task) = task(&pid, &t.path()) else {
                continue;
            };
            if task.state == 'D' || task.comm.starts_with("splitnet") {
                let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                task.wchan = read("wchan").trim().to_string();
                task.stack = read("stack");
                kept.push(task);
            }
        }
    }
    kept
}

/// One thread's identity and state, from `/proc/PID/task/TID/stat`
/// (its `wchan` and stack left empty); None if it is gone.
fn task(pid: &str, dir: &Path) -> Option<Task> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    // The command is in parentheses and may hold any byte, ')' too: the
    // state follows the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let state = rest.trim_start().chars().next()?;
    Some(Task {
        pid: pid.to_string(),
        tid: dir.file_name()?.to_string_lossy().to_string(),
        comm,
        state,
        wchan: String::new(),
        stack: String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_lists_blocked_tasks_and_this_process_reads_as_running_or_sleeping() {
        let me = std::process::id().to_string();
        let t = task(&me, &PathBuf::from(format!("/proc/{me}/task/{me}"))).unwrap();
        assert!("RS".contains(t.state), "{}", t.state);
        let comm = std::fs::read_to_string(format!("/proc/{me}/comm")).unwrap();
        assert_eq!(t.comm, comm.trim());
        let dir = std::env::temp_dir().join(format!("soak-stall-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("d.txt");
        let ns = vec!["splitnet-no-such-netns".to_string()];
        let (blocked, waits) = dump(&file, 12.0, "f delivered nothing", &ns).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with("12.0 s: f delivered nothing\n"), "{text}");
        assert!(text.contains(&format!("{blocked} tasks blocked")), "{text}");
        assert!(waits.iter().map(|w| w.1).sum::<usize>() <= blocked);
        // A namespace that cannot be entered is named with ip's reason.
        assert!(
            text.contains("## splitnet-no-such-netns: TCP sockets\n")
                && text.contains("splitnet-no-such-netns"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A flow that stops delivering is dumped once, when its stall
    /// begins; one that keeps delivering never is.
    #[test]
    fn a_stalled_flow_is_dumped_once_per_stall() {
        let dir = std::env::temp_dir().join(format!("soak-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t0 = Instant::now();
        let (quiet, busy) = (Arc::new(Progress::new(t0)), Arc::new(Progress::new(t0)));
        quiet.delivered(1);
        busy.delivered(1);
        let watched = |name: &str, progress: &Arc<Progress>| Watched {
            name: name.into(),
            netns: ["splitnet-no-a".into(), "splitnet-no-b".into()],
            progress: progress.clone(),
        };
        let flows = vec![watched("quiet", &quiet), watched("busy", &busy)];
        let stall = Duration::from_millis(300);
        let w = Watchdog::after(stall, t0, flows, dir.clone(), false).unwrap();
        let files = || std::fs::read_dir(&dir).unwrap().count();
        let deadline = Instant::now() + Duration::from_secs(30);
        while files() == 0 && Instant::now() < deadline {
            busy.delivered(1);
            std::thread::sleep(Duration::from_millis(20));
        }
        // Two more looks at the same stall add nothing.
        for _ in 0..(2 * LOOK_EVERY.as_millis() / 20) {
            busy.delivered(1);
            std::thread::sleep(Duration::from_millis(20));
        }
        let dumps = w.finish();
        assert_eq!(dumps.len(), 1, "{dumps:?}");
        assert_eq!(dumps[0].flows, vec!["quiet".to_string()]);
        assert!(dumps[0].file.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
