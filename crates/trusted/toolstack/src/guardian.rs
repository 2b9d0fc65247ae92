//! hv restarted after it dies, its domains kept: a guardian process of hv's
//! own (`splitnet-hv --guardian DIR HV-PID FD`) holds what hv last recorded
//! of itself and a duplicate of every descriptor that record names. The
//! domains' ends of their control sockets, doorbells and memory then stay
//! open when hv dies, so a domain's requests wait instead of failing, and
//! its data path, which does not pass through hv, runs on.
//!
//! - hv records its state as an upgrade does ([`Image`]), whenever it
//!   changed, writes it to the run directory with the numbers of
//!   duplicates it holds meanwhile, and says `commit`; the guardian takes
//!   those duplicates (`pidfd_getfd`) and answers, naming the record (an
//!   answer the program before an upgrade did not read is passed over).
//! - `forget`: hv's state became one it cannot record (what an upgrade
//!   does not carry); the guardian drops the record it holds.
//! - `stop` (hv stopping, or handing over to a new program) lets it go.
//! - When hv's end of the connection closes without a `stop`, hv died:
//!   the guardian puts every descriptor back at the number the record
//!   names and becomes hv (`execve` with `--resume`), which adopts the
//!   record as an upgraded hv adopts an image.
//!
//! An upgrade of hv in place carries the guardian: the new program goes on
//! with it, and a new program that dies before its first record is
//! started again on the old program's.
//!
//! What a crash loses that an upgrade does not: what changed since the
//! last record, a request hv had read and not answered, the toolstack's
//! connections and capture channels, and the exit status of a domain
//! process (hv's children are not the new hv's; their ends are seen by
//! pidfd, as crashes).

use crate::handover::{Crash, Image, RESUME_ARG};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;
use sys::SeqPacket;

/// The argument that makes `splitnet-hv` hv's guardian.
pub const GUARDIAN_ARG: &str = "--guardian";

/// How long hv waits for the guardian to take a record.
const COMMIT_LIMIT: Duration = Duration::from_secs(5);

/// One record: the image, and the descriptors hv holds for it as
/// (number in the image, number of the duplicate hv holds).
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    hv_pid: i32,
    recorded_ns: u64,
    held: Vec<(RawFd, RawFd)>,
    image: Image,
}

fn record_path(run_dir: &Path) -> PathBuf {
    run_dir.join("hv-record.json")
}

/// Where the guardian's pid is kept while it guards (`splitnet down` stops
/// it before it kills an hv that does not stop, and waits for the hv it
/// starts after a crash).
pub fn pid_file(run_dir: &Path) -> PathBuf {
    run_dir.join("guardian.pid")
}

/// The guardian's pid, if one guards the hv of `run_dir` now.
pub fn running(run_dir: &Path) -> Option<i32> {
    let pid = std::fs::read_to_string(pid_file(run_dir))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    crate::host::pid_alive(pid).then_some(pid)
}

/// hv's side: the guardian it started.
pub struct Guardian {
    pid: i32,
    conn: SeqPacket,
    run_dir: PathBuf,
    /// Records handed over so far: each answer names its record, so one
    /// that arrives late (a program before this one asked) is told apart.
    commits: u64,
    /// A record the guardian did not answer in time, and the duplicates
    /// it names: they stay open, and no other record is written, until
    /// it answers (it may be taking them still).
    unanswered: Option<(u64, Vec<(RawFd, OwnedFd)>)>,
    /// How long hv waits for an answer ([`COMMIT_LIMIT`]).
    limit: Duration,
}

impl Guardian {
    /// Starts hv's guardian (this program, `GUARDIAN_ARG`), out of hv's
    /// process group, its output hv's.
    pub fn start(run_dir: &Path) -> Result<Guardian, String> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        use sys::signals::SpawnUnblocked;
        let (mine, theirs) = SeqPacket::pair().map_err(|e| format!("a socket pair: {e}"))?;
        let child = {
            // No other child is spawned while its end is inheritable.
            let _guard = crate::host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
            sys::set_inheritable(theirs.as_fd(), true).map_err(|e| e.to_string())?;
            // This program even if a newer one was installed at its path.
            let named = std::env::current_exe().map_err(|e| e.to_string())?;
            Command::new("/proc/self/exe")
                .arg0(named)
                .arg(GUARDIAN_ARG)
                .arg(run_dir)
                .arg(std::process::id().to_string())
                .arg(theirs.as_fd().as_raw_fd().to_string())
                .stdin(Stdio::null())
                .process_group(0)
                .spawn_unblocked()
                .map_err(|e| format!("starting hv's guardian: {e}"))?
        };
        drop(theirs);
        let _ = std::fs::write(pid_file(run_dir), child.id().to_string());
        Ok(Guardian {
            pid: child.id() as i32,
            conn: mine,
            run_dir: run_dir.to_path_buf(),
            commits: 0,
            unanswered: None,
            limit: COMMIT_LIMIT,
        })
    }

    /// The guardian an earlier program of this process started (hv's
    /// upgrade in place): its pid and hv's end of their connection.
    pub fn adopt(run_dir: &Path, pid: i32, conn: OwnedFd) -> Guardian {
        Guardian {
            pid,
            conn: SeqPacket::from_fd(conn),
            run_dir: run_dir.to_path_buf(),
            // Past any number a program before this one used.
            commits: crate::handover::now_ns(),
            unanswered: None,
            limit: COMMIT_LIMIT,
        }
    }

    /// (pid, hv's end of the connection), for an upgrade of hv to carry.
    pub fn raw_parts(&self) -> (i32, RawFd) {
        (self.pid, self.conn.as_fd().as_raw_fd())
    }

    /// Hands the guardian `image`, with `held`: a duplicate of each
    /// descriptor it names, by its number in the image. Returns once the
    /// guardian holds them (the duplicates may close then); one it does
    /// not answer in time keeps them, and refuses another record until
    /// it answers.
    pub fn commit(&mut self, image: Image, held: Vec<(RawFd, OwnedFd)>) -> Result<(), String> {
        let record = Record {
            hv_pid: std::process::id() as i32,
            recorded_ns: crate::handover::now_ns(),
            held: held.iter().map(|(n, d)| (*n, d.as_raw_fd())).collect(),
            image,
        };
        let text = serde_json::to_vec(&record).map_err(|e| e.to_string())?;
        self.hand_over(&text, held)
    }

    /// [`Guardian::commit`] of a record already written out as `text`.
    fn hand_over(&mut self, text: &[u8], held: Vec<(RawFd, OwnedFd)>) -> Result<(), String> {
        self.settle(Duration::ZERO)?;
        crate::handover::write_private(&record_path(&self.run_dir), text)?;
        self.commits += 1;
        let n = self.commits;
        self.conn
            .send(format!("commit {n}").as_bytes(), &[])
            .map_err(|e| format!("hv's guardian: {e}"))?;
        self.unanswered = Some((n, held));
        self.settle(self.limit)
    }

    /// Waits up to `limit` for the answer to the record not yet answered,
    /// if any, and then lets its duplicates go.
    fn settle(&mut self, limit: Duration) -> Result<(), String> {
        let Some((n, _)) = &self.unanswered else {
            return Ok(());
        };
        let n = *n;
        let answer = self.answer_to(n, limit);
        if answer
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
        {
            return Err(format!(
                "hv's guardian has not answered record {n} within {} ms",
                self.limit.as_millis()
            ));
        }
        self.unanswered = None;
        match answer.map_err(|e| format!("hv's guardian: {e}"))?.as_str() {
            "ok" => Ok(()),
            other => Err(format!("hv's guardian: {other}")),
        }
    }

    /// The guardian's answer to record `n`, waited for up to `limit`
    /// (zero: only one already sent); answers to earlier records are
    /// passed over.
    fn answer_to(&self, n: u64, limit: Duration) -> std::io::Result<String> {
        let gone = || std::io::Error::other("it is gone");
        // A zero timeout would wait for ever: a microsecond instead.
        let limit = limit.max(Duration::from_micros(1));
        self.conn.set_read_timeout(Some(limit))?;
        let mut buf = [0u8; 512];
        loop {
            let (len, _) = self.conn.recv(&mut buf).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => std::io::ErrorKind::WouldBlock.into(),
                _ => e,
            })?;
            let answer = String::from_utf8_lossy(&buf[..len]);
            let (num, what) = answer.split_once(' ').ok_or_else(gone)?;
            if num.parse::<u64>().map_err(|_| gone())? >= n {
                return Ok(what.to_string());
            }
        }
    }

    /// Whether another record may be handed over: the guardian answered
    /// the last (an error if it did not, or refused it).
    pub fn ready(&mut self) -> Result<(), String> {
        self.settle(Duration::ZERO)
    }

    /// Whether the guardian still owes an answer to a record.
    pub fn owes_answer(&self) -> bool {
        self.unanswered.is_some()
    }

    /// Has the guardian drop the record it holds: hv's state became one
    /// it cannot record, and an older record would bring back what is
    /// gone. A crash of hv then takes its domains.
    pub fn forget(&self) -> Result<(), String> {
        self.conn
            .send(b"forget", &[])
            .map_err(|e| format!("hv's guardian: {e}"))
    }

    /// Lets the guardian go (hv stops, or hands over) and reaps it.
    pub fn stop(self) {
        let _ = self.conn.send(b"stop", &[]);
        drop(self.conn);
        let _ = sys::reap(self.pid);
        let _ = std::fs::remove_file(record_path(&self.run_dir));
        let _ = std::fs::remove_file(pid_file(&self.run_dir));
    }
}

/// What the guardian holds: the last record as hv wrote it, what it reads
/// of it at once (the image itself is read only when hv died), and its
/// descriptors by their numbers in the image.
struct Held {
    text: Vec<u8>,
    head: RecordHead,
    fds: Vec<(RawFd, OwnedFd)>,
}

/// A [`Record`] but its image.
#[derive(Deserialize)]
struct RecordHead {
    hv_pid: i32,
    recorded_ns: u64,
    held: Vec<(RawFd, RawFd)>,
}

/// The guardian's body: holds hv's records until `stop`, and becomes hv
/// when hv dies. Returns (with what to say) only when it cannot.
pub fn guard(run_dir: &Path, hv_pid: i32, conn_fd: RawFd) -> Result<(), String> {
    let conn = SeqPacket::from_fd(
        sys::take_inherited_fd(conn_fd).map_err(|e| format!("descriptor {conn_fd}: {e}"))?,
    );
    let hv = sys::PidFd::open(hv_pid).map_err(|e| format!("hv (pid {hv_pid}): {e}"))?;
    let mut held: Option<Held> = None;
    let mut buf = [0u8; 64];
    loop {
        let n = match conn.recv(&mut buf) {
            Ok((n, _)) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        let said = String::from_utf8_lossy(&buf[..n]);
        match said.split_once(' ') {
            Some(("commit", num)) => {
                let answer = match take_record(run_dir, &hv) {
                    Ok(h) => {
                        held = Some(h);
                        "ok".to_string()
                    }
                    Err(e) => e,
                };
                let _ = conn.send(format!("{num} {answer}").as_bytes(), &[]);
            }
            _ if said == "forget" => held = None,
            _ if said == "stop" => return Ok(()),
            // hv's end closed: it died (nothing else closes it).
            _ if n == 0 => break,
            _ => {}
        }
    }
    let noticed = crate::handover::now_ns();
    // Its descriptors must be closed before they are taken from it; an hv
    // that closed its end and runs on is left alone.
    match hv.wait_ended(Some(Duration::from_secs(5))) {
        Ok(true) => {}
        _ => {
            return Err(format!(
                "hv (pid {hv_pid}) closed its connection without a stop and runs on: not starting another"
            ))
        }
    }
    let Some(held) = held else {
        return Err(format!(
            "hv (pid {hv_pid}) died before it recorded its state: its domains go with it"
        ));
    };
    eprintln!("splitnet-hv guardian: hv (pid {hv_pid}) died: starting it again on its last record");
    drop((conn, hv));
    Err(become_hv(run_dir, held, noticed))
}

/// The record hv just wrote, with a duplicate of each descriptor it names
/// taken from hv; an error keeps the record before.
fn take_record(run_dir: &Path, hv: &sys::PidFd) -> Result<Held, String> {
    let path = record_path(run_dir);
    let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let head: RecordHead =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut fds = Vec::with_capacity(head.held.len());
    for &(n, dup) in &head.held {
        let fd = hv
            .take_fd(dup)
            .map_err(|e| format!("hv's descriptor {dup}: {e}"))?;
        fds.push((n, fd));
    }
    Ok(Held { text, head, fds })
}

/// hv died (noticed at `noticed_ns`): this process becomes hv on the last
/// record, every descriptor back at its number. Returns only on failure.
fn become_hv(run_dir: &Path, held: Held, noticed_ns: u64) -> String {
    let Held { text, head, fds } = held;
    let mut image = match serde_json::from_slice::<Record>(&text) {
        Ok(record) => record.image,
        Err(e) => return format!("hv's last record: {e}"),
    };
    // An upgrade's image left in place: hv was handing over, and the new
    // program died before it took over (it removes the file once it has).
    let upgrade = (std::fs::read_to_string(Image::path(run_dir)).ok())
        .and_then(|t| Image::parse(&t).ok())
        .filter(|u| u.crash.is_none() && u.attempt > image.attempt)
        .map(|u| (u.attempt, u.to));
    if let Some((n, _)) = &upgrade {
        image.attempt = *n;
    }
    image.crash = Some(Crash {
        pid: head.hv_pid,
        recorded_ns: head.recorded_ns,
        upgrade,
    });
    image.began_ns = noticed_ns;
    let path = match image.write(run_dir) {
        Ok(p) => p,
        Err(e) => return format!("writing hv's state for the next hv: {e}"),
    };
    let mut args: Vec<std::ffi::OsString> = image.daemon.argv.iter().map(Into::into).collect();
    args.push(RESUME_ARG.into());
    args.push(path.into());
    if let Err(e) = sys::place_fds(fds.into_iter().map(|(n, fd)| (fd, n)).collect()) {
        return format!("putting hv's descriptors back: {e}");
    }
    let e = sys::signals::exec_named(Path::new("/proc/self/exe"), &image.to, &args);
    format!("starting hv again: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What descriptor `fd` of this process is now, if open.
    fn what_is(fd: RawFd) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
    }

    fn guardian(dir: &Path) -> (Guardian, SeqPacket) {
        let (mine, theirs) = SeqPacket::pair().unwrap();
        let mut g = Guardian::adopt(dir, 1, mine.into());
        (g.commits, g.limit) = (0, Duration::from_millis(50));
        (g, theirs)
    }

    #[test]
    fn a_record_not_answered_in_time_keeps_its_descriptors_until_it_is() {
        let dir = std::env::temp_dir().join(format!("splitnet-guardian-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (mut g, peer) = guardian(&dir);
        let (kept, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let dup = OwnedFd::from(kept).try_clone().unwrap();
        let (num, was) = (dup.as_raw_fd(), what_is(dup.as_raw_fd()));
        let e = g.hand_over(b"first", vec![(7, dup)]).unwrap_err();
        assert!(e.contains("has not answered record 1"), "{e}");
        assert_eq!(what_is(num), was, "the guardian may be taking it still");
        // No second record over the first while it is owed an answer.
        let e = g.hand_over(b"second", vec![]).unwrap_err();
        assert!(e.contains("has not answered record 1"), "{e}");
        let path = record_path(&dir);
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert!(g.owes_answer());
        peer.send(b"1 ok", &[]).unwrap();
        g.ready().unwrap();
        assert!(!g.owes_answer());
        assert_ne!(what_is(num), was, "answered: the duplicate is closed");
        // A late answer to an earlier record is passed over.
        peer.send(b"1 ok", &[]).unwrap();
        peer.send(b"2 no such file", &[]).unwrap();
        let e = g.hand_over(b"third", vec![]).unwrap_err();
        assert_eq!(e, "hv's guardian: no such file");
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
