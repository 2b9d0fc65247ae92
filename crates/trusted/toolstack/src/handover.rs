//! hv upgraded in place: the running `splitnet-hv` replaces its own program
//! with a new one in the same process (Xen's Live Update hands running
//! domains to a new hypervisor binary; here the process stays, so its
//! domains stay its children, its uplink keeper keeps its pipe, and every
//! descriptor it names survives the `execve`).
//!
//! 1. hv's gate closes: the toolstack's requests under way finish, then
//!    every request that comes waits unread.
//! 2. hv, the supervisor and the daemon record their state as an
//!    [`Image`] (JSON, descriptors by number, versioned by [`FORMAT`]),
//!    written to a file in the run directory.
//! 3. The new program reads it in a child (`--handover-check -- ARGS`,
//!    hv's arguments too): one that cannot, or does not run, is refused,
//!    and the old hv goes on.
//! 4. The request is answered; the named descriptors lose close-on-exec
//!    and the process `execve`s the new program with `--resume FILE`, its
//!    signal mask kept.
//! 5. The new program adopts the image (`daemon::resume`), or, when it
//!    cannot, runs the old program again (kept open for this) on the same
//!    image, told why.

use hv::core::HvImage;
use serde::{Deserialize, Serialize};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::supervisor::SupervisorImage;

/// The image's format; a program refuses an image of a newer one. Format 2
/// writes the store's values as text where they are UTF-8 (format 1 wrote
/// every value as a list of bytes, and is still read).
pub const FORMAT: u32 = 2;
/// The argument that makes `splitnet-hv` take over from an image.
pub const RESUME_ARG: &str = "--resume";
/// The argument that makes `splitnet-hv` only read an image from stdin.
pub const CHECK_ARG: &str = "--handover-check";

/// What the daemon itself carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonImage {
    /// The toolstack's listening socket.
    pub listener: RawFd,
    /// `$NOTIFY_SOCKET`, when a service manager listens.
    pub notify: Option<String>,
    /// hv's arguments, without a `--resume`.
    pub argv: Vec<String>,
    /// The old program, open: a new one that cannot take over runs it
    /// again through this descriptor, whatever was installed at its path.
    pub exe: Option<RawFd>,
    /// hv's guardian (`crate::guardian`): its pid and hv's end of their
    /// connection, which the new program goes on using.
    #[serde(default)]
    pub guardian: Option<(i32, RawFd)>,
}

/// The hv that died, and when it recorded the state its successor adopts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Crash {
    pub pid: i32,
    pub recorded_ns: u64,
    /// The upgrade in place that hv was handing over when it died (its
    /// number, the new program): that program died before it took over.
    #[serde(default)]
    pub upgrade: Option<(u64, PathBuf)>,
}

/// Everything one program of hv hands the next.
#[derive(Debug, Serialize, Deserialize)]
pub struct Image {
    pub format: u32,
    /// The upgrade's number (1 for the instance's first).
    pub attempt: u64,
    /// The program handing over, and the one taking over.
    pub from: PathBuf,
    pub to: PathBuf,
    /// When the upgrade was asked, before the gate began to close (ns
    /// since the epoch).
    pub began_ns: u64,
    /// Set when the new program could not take over and gives the image
    /// back to the old one: why.
    pub rollback: Option<String>,
    /// Set when hv died and its guardian starts it again on its last
    /// record (`crate::guardian`): `began_ns` is then when that was seen.
    #[serde(default)]
    pub crash: Option<Crash>,
    pub daemon: DaemonImage,
    pub sup: SupervisorImage,
    pub hv: HvImage,
}

impl Image {
    /// Every descriptor the image names.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = self.hv.fds();
        v.extend(self.daemon_fds());
        v
    }

    /// The descriptors of the daemon's own that the image names (the
    /// containers' namespaces, the listener, the keeper's pipe, the old
    /// program, the guardian's connection), which the new
    /// program closes once it has taken over.
    pub fn daemon_fds(&self) -> Vec<RawFd> {
        let mut v = self.sup.fds();
        v.push(self.daemon.listener);
        v.extend(self.sup.uplinks.keeper.map(|k| k.1));
        v.extend(self.daemon.exe);
        v.extend(self.daemon.guardian.map(|g| g.1));
        v
    }

    /// Reads an image: its format first, so that a newer one is refused
    /// by name rather than by whatever field it added.
    pub fn parse(text: &str) -> Result<Image, String> {
        #[derive(Deserialize)]
        struct Format {
            format: Option<u64>,
        }
        let head: Format = serde_json::from_str(text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => format!("the state's format is not a number: {e}"),
            _ => format!("the state is not JSON: {e}"),
        })?;
        match head.format {
            None => return Err("the state names no format".into()),
            Some(f) if f > u64::from(FORMAT) => {
                return Err(format!(
                    "the state is in format {f}, newer than this hv reads ({FORMAT})"
                ))
            }
            Some(_) => {}
        }
        serde_json::from_str(text).map_err(|e| format!("the state cannot be read: {e}"))
    }

    /// Where the image waits for the new program.
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join("hv-handover.json")
    }

    /// Writes the image (mode 0600) at [`Image::path`].
    pub fn write(&self, run_dir: &Path) -> Result<PathBuf, String> {
        let path = Image::path(run_dir);
        let text = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        write_private(&path, &text)?;
        Ok(path)
    }
}

/// Writes `bytes` to `path` (mode 0600) whole: to a file beside it first,
/// then renamed over it, so a reader never sees half of it.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let said = |e: std::io::Error| format!("{}: {e}", path.display());
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(said)?;
    f.write_all(bytes).map_err(said)?;
    std::fs::rename(&tmp, path).map_err(said)
}

/// Image `text` with `why` as its roll-back reason: what a new program
/// that cannot take over gives the old one back.
pub fn with_rollback(text: &str, why: &str) -> Result<String, String> {
    let mut v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the state is not JSON: {e}"))?;
    v["rollback"] = serde_json::Value::String(why.to_string());
    Ok(v.to_string())
}

/// Outcomes `status` keeps, one fact each (`hv_upgrade.<n>`), beside the
/// last (`hv_upgrade`): upgrades asked at once run one after the other,
/// and each asker reads its own.
const OUTCOMES_KEPT: u64 = 16;

/// Records upgrade `n`'s outcome in `status` (`<n> ok …`, `<n> rolled
/// back: …`, `<n> failed: …`).
pub fn record_outcome(hv: &hv::Hypervisor, n: u64, fact: &str) {
    hv.set_info("hv_upgrade", fact);
    hv.set_info(&format!("hv_upgrade.{n}"), fact);
    if let Some(old) = n.checked_sub(OUTCOMES_KEPT) {
        hv.remove_info(&format!("hv_upgrade.{old}"));
    }
}

/// Waits up to `limit` for upgrade `n`'s outcome in `status`
/// ([`record_outcome`]), asking on `ts` every half millisecond: the
/// connection crosses the upgrade, and is answered by whichever program
/// then serves. Returns the outcome.
pub fn wait_outcome(
    ts: &mut hv::Toolstack,
    socket: &Path,
    n: &str,
    limit: std::time::Duration,
) -> Result<String, String> {
    let until = std::time::Instant::now() + limit;
    loop {
        match ts.status() {
            Ok(s) => {
                if let Some(fact) = s.info.get(&format!("hv_upgrade.{n}")) {
                    return Ok(fact.clone());
                }
            }
            // The new program died before it served this connection, and
            // hv's guardian starts hv again: ask the next one.
            Err(_) => {
                if let Ok(t) = hv::Toolstack::connect(socket) {
                    *ts = t;
                }
            }
        }
        if std::time::Instant::now() > until {
            return Err(format!(
                "hv did not report the outcome of upgrade {n} within {limit:?}: see its log"
            ));
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
}

/// `splitnet-hv --handover-check`: reads an image on stdin and says
/// whether this program could take it over (exit 0) or why not.
pub fn check_stdin() -> i32 {
    use std::io::Read;
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("reading the state: {e}");
        return 1;
    }
    match Image::parse(&text) {
        Ok(i) => {
            println!("format {} readable by format {FORMAT}", i.format);
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// hv's arguments without a `--resume FILE` (what the next program gets).
pub fn argv_without_resume(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == RESUME_ARG {
            skip = true;
        } else if !a.starts_with(&format!("{RESUME_ARG}=")) {
            out.push(a);
        }
    }
    out
}

/// Nanoseconds since the epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_format_is_refused_by_name() {
        let e = Image::parse(r#"{"format": 99, "whatever": 1}"#).unwrap_err();
        assert!(e.contains("format 99, newer than this hv reads (2)"), "{e}");
        let e = Image::parse(r#"{"format": "2"}"#).unwrap_err();
        assert!(e.contains("format is not a number"), "{e}");
        let e = Image::parse(r#"{"attempt": 1}"#).unwrap_err();
        assert!(e.contains("no format"), "{e}");
        let e = Image::parse("not json").unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = Image::parse(r#"{"format": 1}"#).unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
    }

    /// The running topology crosses an upgrade whole: what it carries is
    /// what was running, tuned, with memory filled in.
    #[test]
    fn a_topology_crosses_as_it_ran() {
        use crate::topology::{LinkRate, Topology};
        let rich = r#"
name = "rich"
[[domain]]
name = "drv"
kind = "driver"
port_offload = "csum"
[[domain]]
name = "g1"
kind = "guest"
address = "10.77.0.1/24"
offload = "sg"
lro = "guest"
vif = ["bridge=xenbr0,ip=10.77.0.1,rate=10Mb/s,mtu=9000", "mac=00:16:3e:00:01:01"]
[[domain]]
name = "g2"
kind = "guest"
grants = "hv-copy"
rx_mode = "flip"
[[wire]]
name = "w1"
driver = "drv"
address = "10.77.0.254/24"
[[port]]
driver = "drv"
kind = "nat"
subnet = "10.78.0.1/24"
"#;
        for text in [crate::topology::DEFAULT_TOML, rich] {
            let mut t = Topology::parse(text, "test").unwrap();
            t.apply_link_rate(LinkRate(1_000_000_000)).unwrap();
            let json = serde_json::to_string(&t).unwrap();
            let back: Topology = serde_json::from_str(&json).unwrap();
            assert_eq!(back, t, "{json}");
        }
    }

    #[test]
    fn resume_arguments_are_not_passed_on() {
        let a = [
            "--config",
            "/t.toml",
            "--resume",
            "/r/x.json",
            "--run-dir=/r",
        ];
        let got = argv_without_resume(a.iter().map(|s| s.to_string()));
        assert_eq!(got, ["--config", "/t.toml", "--run-dir=/r"]);
    }
}
