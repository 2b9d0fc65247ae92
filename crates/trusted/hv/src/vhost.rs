//! vhost-user vifs' listening sockets. A VM (or a `nic = "virtio"` guest)
//! reaches its driver domain's vhost-user backend through a Unix stream
//! socket. hv, not the driver domain, owns that socket: it creates the
//! listener when the vif is declared and keeps it until the vif goes, so a
//! restarted driver domain takes the same listener again, and QEMU's
//! `reconnect=1` finds the path it knew. The driver domain gets a duplicate
//! of the listener ([`Request::VhostListener`]); a `nic = "virtio"` guest
//! gets a connected client ([`Request::VhostConnect`]), never the path.
//!
//! A VM whose VMM listens itself (`socket_server = "vm"`: QEMU's
//! `server=on`, DPDK virtio-user's `server=1`) is dialed instead: hv binds
//! nothing and connects to the VM's socket for its driver domain
//! ([`Request::VhostDial`]), again after each driver-domain restart, so a
//! VMM that cannot reconnect itself keeps its link (OVS's
//! `dpdkvhostuserclient` ports work the same way).
//!
//! [`Request::VhostListener`]: crate::proto::Request::VhostListener
//! [`Request::VhostConnect`]: crate::proto::Request::VhostConnect
//! [`Request::VhostDial`]: crate::proto::Request::VhostDial

use crate::error::{err, ErrorKind, HvError, HvResult};
use crate::proto::DomId;
use std::collections::BTreeMap;
use std::io::ErrorKind as IoKind;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A vhost-user vif as hv needs it: where it listens, and who may use it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VhostSpec {
    /// The vif's name (the VM's or the guest's domain name).
    pub name: String,
    /// The socket path the frontend connects to (absolute).
    pub socket: PathBuf,
    /// The driver domain (by name) that serves it: it alone gets the listener.
    pub backend: String,
    /// The `nic = "virtio"` guest (by name) whose vif this is: it alone may
    /// connect through hv. None: an external VM, which connects by path.
    pub guest: Option<String>,
    /// The VM's VMM listens on `socket` and hv dials it for the driver
    /// domain; hv binds nothing there and never removes the file.
    pub dial: bool,
}

/// One live listener: the socket and the file's identity, so that only
/// hv's own socket file is unlinked (neither for a vif hv dials), and the
/// listener's own identity.
struct Listener {
    spec: VhostSpec,
    sock: Option<(UnixListener, (u64, u64))>,
    /// Unique among the listeners of this hv: a vif detached and attached
    /// again under the same name, MAC and bridge gets a new one, so the
    /// driver domain can tell its new listener from the old.
    id: u64,
}

impl Drop for Listener {
    fn drop(&mut self) {
        // The file is ours only if it is still the inode we bound.
        let Some((_, dev_ino)) = self.sock else {
            return;
        };
        let ours = std::fs::symlink_metadata(&self.spec.socket)
            .is_ok_and(|m| (m.dev(), m.ino()) == dev_ino);
        if ours {
            let _ = std::fs::remove_file(&self.spec.socket);
        }
    }
}

/// Every vhost-user vif's listener, by vif name.
#[derive(Default)]
pub(crate) struct VhostListeners {
    all: Mutex<BTreeMap<String, Listener>>,
    /// The last listener id given.
    last_id: AtomicU64,
}

impl VhostListeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Listener>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes every listener and removes its socket file.
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.lock());
        drop(all);
    }

    /// The identity of vif `name`'s listener; None when hv has none.
    pub(crate) fn id(&self, name: &str) -> Option<u64> {
        self.lock().get(name).map(|l| l.id)
    }

    /// Listens for vif `spec`; see [`Hypervisor::vhost_add`].
    ///
    /// [`Hypervisor::vhost_add`]: crate::Hypervisor::vhost_add
    pub(crate) fn add(&self, spec: VhostSpec) -> HvResult<()> {
        free_in(&self.lock(), &spec)?;
        // The path is probed and bound without the lock; a vif that took
        // the name meanwhile wins, and this listener goes with its file.
        let l = listen(spec, self.last_id.fetch_add(1, Ordering::Relaxed) + 1)?;
        // Checked again and inserted under one lock: of two adds of one
        // name, the second is refused, never put in the first's place.
        let mut all = self.lock();
        free_in(&all, &l.spec)?;
        all.insert(l.spec.name.clone(), l);
        Ok(())
    }

    /// Closes vif `name`'s listener; whether it existed.
    pub(crate) fn remove(&self, name: &str) -> bool {
        let gone = self.lock().remove(name);
        gone.is_some()
    }

    /// Every vif listened for.
    pub(crate) fn specs(&self) -> Vec<VhostSpec> {
        self.lock().values().map(|l| l.spec.clone()).collect()
    }

    /// A duplicate of vif `name`'s listener for domain `caller` (named
    /// `me`), which must be the driver domain that backs it.
    pub(crate) fn listener(&self, caller: DomId, me: &str, name: &str) -> HvResult<OwnedFd> {
        let all = self.lock();
        let l = backed(&all, caller, me, name)?;
        let Some((sock, _)) = &l.sock else {
            return err(
                ErrorKind::Invalid,
                format!("vhost-user vif {name}'s VM listens on its socket itself: ask hv to dial it (VhostDial)"),
            );
        };
        sock.try_clone()
            .map(OwnedFd::from)
            .map_err(|e| HvError::internal("dup of a vhost listener", e))
    }

    /// A new blocking connection to the socket VM vif `name`'s VMM listens
    /// on (`socket_server = "vm"`), for domain `caller` (named `me`), which
    /// must be the driver domain that backs it. hv never waits: a VMM not
    /// listening yet, or whose backlog is full, is an error the driver
    /// domain retries.
    pub(crate) fn dial(&self, caller: DomId, me: &str, name: &str) -> HvResult<OwnedFd> {
        let path = {
            let all = self.lock();
            let l = backed(&all, caller, me, name)?;
            if l.sock.is_some() {
                return err(
                    ErrorKind::Invalid,
                    format!(
                        "hv listens for vhost-user vif {name}: take its listener (VhostListener)"
                    ),
                );
            }
            l.spec.socket.clone()
        };
        trusted_socket(&path)?;
        connect_blocking(&path)
    }

    /// A new blocking connection to the vif of `nic = "virtio"` guest
    /// `caller` (named `me`), handed over blocking. hv never waits for it:
    /// a full backlog (a driver domain that accepts nothing) is an error
    /// the guest may retry.
    pub(crate) fn connect(&self, caller: DomId, me: &str) -> HvResult<OwnedFd> {
        let (path, dev_ino) = self
            .lock()
            .values()
            .find(|l| l.spec.guest.as_deref() == Some(me))
            .and_then(|l| Some((l.spec.socket.clone(), l.sock.as_ref()?.1)))
            .ok_or_else(|| {
                HvError::new(
                    ErrorKind::PermissionDenied,
                    format!("domain {caller} ({me}) has no vhost-user vif (it is not a nic = \"virtio\" guest)"),
                )
            })?;
        // The file must still be the socket hv bound, not one put in its
        // place (hv connects by path; the run directory is root's).
        let same = std::fs::symlink_metadata(&path).is_ok_and(|m| (m.dev(), m.ino()) == dev_ino);
        if !same {
            return err(
                ErrorKind::Internal,
                format!("{} is no longer the socket hv listens on", path.display()),
            );
        }
        connect_blocking(&path)
    }
}

/// Vif `name`'s entry, if domain `caller` (named `me`) is its driver
/// domain.
fn backed<'a>(
    all: &'a BTreeMap<String, Listener>,
    caller: DomId,
    me: &str,
    name: &str,
) -> HvResult<&'a Listener> {
    let l = all.get(name).ok_or_else(|| {
        HvError::new(
            ErrorKind::BadDomain,
            format!("no vhost-user vif named {name:?}"),
        )
    })?;
    if l.spec.backend != me {
        return err(
            ErrorKind::PermissionDenied,
            format!(
                "domain {caller} ({me}) does not back vhost-user vif {name} ({} does)",
                l.spec.backend
            ),
        );
    }
    Ok(l)
}

/// Refuses to dial `path` unless it is a socket (not a link to one) owned
/// by hv's user, in a directory of hv's user that no one else may write:
/// hv connects as root and hands the connection to a driver domain, so a
/// path someone else could put another socket at (a service of the host's)
/// would hand that service to the driver domain.
fn trusted_socket(path: &Path) -> HvResult<()> {
    let me = sys::euid();
    let refuse = |why: String| {
        err(
            ErrorKind::PermissionDenied,
            format!("{}: {why}", path.display()),
        )
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    match std::fs::metadata(dir) {
        Ok(m) if m.uid() != me => {
            return refuse(format!(
                "its directory is owned by uid {}, not hv's",
                m.uid()
            ))
        }
        Ok(m) if m.mode() & 0o022 != 0 => {
            return refuse(format!(
                "its directory (mode {:o}) is writable by others",
                m.mode() & 0o7777
            ))
        }
        Ok(_) => {}
        Err(e) => return refuse(format!("its directory: {e}")),
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => refuse("not a socket (a link, or a file)".into()),
        Ok(m) if m.uid() != me => refuse(format!("owned by uid {}, not hv's", m.uid())),
        Ok(_) => Ok(()),
        // Nobody listens yet: the connect says so, to be retried.
        Err(e) if e.kind() == IoKind::NotFound => Ok(()),
        Err(e) => refuse(e.to_string()),
    }
}

/// A connection to the socket at `path`, made without waiting and handed
/// over blocking: a full backlog is a `Quota` error, nobody listening an
/// `Invalid` one, both worth retrying.
fn connect_blocking(path: &Path) -> HvResult<OwnedFd> {
    let fd = sys::connect_stream_nonblocking(path).map_err(|e| {
        let kind = match e.kind() {
            IoKind::WouldBlock => ErrorKind::Quota,
            IoKind::ConnectionRefused | IoKind::NotFound => ErrorKind::Invalid,
            _ => ErrorKind::Internal,
        };
        HvError::new(kind, format!("connecting to {}: {e}", path.display()))
    })?;
    let s = UnixStream::from(fd);
    s.set_nonblocking(false)
        .map_err(|e| HvError::internal("vhost connection", e))?;
    Ok(OwnedFd::from(s))
}

/// Refuses `spec` if its name or its socket is a vif's already.
fn free_in(all: &BTreeMap<String, Listener>, spec: &VhostSpec) -> HvResult<()> {
    if all.contains_key(&spec.name) {
        return err(
            ErrorKind::InUse,
            format!("vhost-user vif {} exists already", spec.name),
        );
    }
    if let Some(l) = all.values().find(|l| l.spec.socket == spec.socket) {
        return err(
            ErrorKind::InUse,
            format!(
                "{} is in use: vif {} listens on it",
                spec.socket.display(),
                l.spec.name
            ),
        );
    }
    Ok(())
}

fn invalid(msg: String) -> HvError {
    HvError::new(ErrorKind::Invalid, msg)
}

/// Makes `path` free for a new socket: a missing parent directory is
/// created; a stale socket (nobody listens) is removed; a live socket or
/// anything that is not a socket is refused.
fn clear_path(path: &Path) -> HvResult<()> {
    absolute(path)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            invalid(format!(
                "creating {} for a vhost-user socket: {e}",
                dir.display()
            ))
        })?;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(()),
        Err(e) => return err(ErrorKind::Invalid, format!("{}: {e}", path.display())),
    };
    if !meta.file_type().is_socket() {
        return err(
            ErrorKind::Invalid,
            format!(
                "{} exists and is not a socket; remove it or choose another socket path",
                path.display()
            ),
        );
    }
    // A probe that never waits: a full backlog is a listener too.
    match sys::connect_stream_nonblocking(path) {
        Ok(_) => in_use(path),
        Err(e) if e.kind() == IoKind::WouldBlock => in_use(path),
        Err(e) if e.kind() == IoKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| invalid(format!("removing stale socket {}: {e}", path.display()))),
        Err(e) => err(
            ErrorKind::Invalid,
            format!("{}: cannot tell whether it is in use: {e}", path.display()),
        ),
    }
}

fn in_use(path: &Path) -> HvResult<()> {
    err(
        ErrorKind::InUse,
        format!(
            "{} is in use: something listens on it; stop it or choose another socket path",
            path.display()
        ),
    )
}

/// Refuses a socket path that is not absolute.
fn absolute(path: &Path) -> HvResult<()> {
    if path.is_absolute() {
        return Ok(());
    }
    err(
        ErrorKind::Invalid,
        format!(
            "vhost-user socket {} is not an absolute path",
            path.display()
        ),
    )
}

/// vif `spec`'s listener, bound (or, for a VM that listens itself, only
/// recorded) under identity `id`.
fn listen(spec: VhostSpec, id: u64) -> HvResult<Listener> {
    if spec.dial {
        absolute(&spec.socket)?;
        return Ok(Listener {
            spec,
            sock: None,
            id,
        });
    }
    clear_path(&spec.socket)?;
    let path = spec.socket.display().to_string();
    let sock = UnixListener::bind(&spec.socket)
        .map_err(|e| invalid(format!("listening on {path}: {e}")))?;
    // Root's alone, whatever hv's umask: whoever connects becomes the VM
    // on the bridge (a new connection replaces the old).
    std::fs::set_permissions(&spec.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| HvError::internal("vhost listener", e))?;
    // The driver domain polls it in its main loop.
    sock.set_nonblocking(true)
        .map_err(|e| HvError::internal("vhost listener", e))?;
    let meta = std::fs::symlink_metadata(&spec.socket)
        .map_err(|e| HvError::internal("vhost listener", e))?;
    Ok(Listener {
        spec,
        sock: Some((sock, (meta.dev(), meta.ino()))),
        id,
    })
}

/// One listener as an upgrade's image names it: its spec, the listening
/// socket's descriptor and file identity (None: a VM hv dials), and its id.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct VhostImage {
    pub spec: VhostSpec,
    pub listener: Option<(std::os::fd::RawFd, (u64, u64))>,
    pub id: u64,
}

/// Listeners taken from an image, not installed yet: dropping them closes
/// the duplicates only, never the socket files the old program still
/// listens on.
pub struct AdoptedVhost(Vec<Carried>, u64);

/// A listener as carried: its spec, its socket and file identity (None: a
/// VM hv dials), and its id.
type Carried = (VhostSpec, Option<(UnixListener, (u64, u64))>, u64);

impl VhostListeners {
    /// Every listener, its descriptor by number, and the last id given.
    pub(crate) fn image(&self) -> (Vec<VhostImage>, u64) {
        use std::os::fd::AsRawFd;
        let all = self.lock();
        let v = (all.values())
            .map(|l| VhostImage {
                spec: l.spec.clone(),
                listener: l.sock.as_ref().map(|(s, file)| (s.as_raw_fd(), *file)),
                id: l.id,
            })
            .collect();
        (v, self.last_id.load(Ordering::Relaxed))
    }

    /// Installs listeners an image carried (`Adopted::start`).
    pub(crate) fn install(&self, adopted: AdoptedVhost) {
        let mut all = self.lock();
        for (spec, sock, id) in adopted.0 {
            all.insert(spec.name.clone(), Listener { spec, sock, id });
        }
        self.last_id.fetch_max(adopted.1, Ordering::Relaxed);
    }
}

impl AdoptedVhost {
    /// `image`'s listeners, each descriptor taken through `take`.
    pub fn adopt(
        image: &[VhostImage],
        last_id: u64,
        mut take: impl FnMut(std::os::fd::RawFd) -> HvResult<OwnedFd>,
    ) -> HvResult<AdoptedVhost> {
        let mut v = Vec::new();
        for l in image {
            let sock = match l.listener {
                Some((fd, file)) => Some((UnixListener::from(take(fd)?), file)),
                None => None,
            };
            v.push((l.spec.clone(), sock, l.id));
        }
        Ok(AdoptedVhost(v, last_id))
    }
}
