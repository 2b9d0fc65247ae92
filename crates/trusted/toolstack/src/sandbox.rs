//! A container's network namespace as hv touches it (the "sandbox" of a
//! CNI ADD): opened once, when the attachment is made, and reached through
//! that descriptor ever after, so that a path the runtime named can never
//! come to mean another namespace (a `/proc/PID/ns/net` whose PID was
//! reused). hv makes the attachment's TAP there and deletes it again;
//! nothing else it does in the namespace.

use crate::host;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the guest's TCP may put in one GSO frame and the TAP's queue, as
/// netfront sets them on the TAPs it makes itself.
const GSO_MAX: &str = "65000";
const TXQUEUELEN: &str = "4096";

/// A runtime's network namespace, held open.
pub struct Sandbox {
    /// The path the runtime gave (what `status` shows).
    pub path: PathBuf,
    fd: OwnedFd,
}

impl Sandbox {
    /// Opens `path`: a network namespace, not hv's own nor one of
    /// splitnet's domains'.
    pub fn open(path: &Path) -> Result<Sandbox, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("netns {shown}: {e}"))?;
        let m = file.metadata().map_err(|e| format!("netns {shown}: {e}"))?;
        let own = std::fs::metadata("/proc/self/ns/net").map_err(|e| e.to_string())?;
        if m.dev() != own.dev() {
            return Err(format!("netns {shown} is not a namespace"));
        }
        if m.ino() == own.ino() {
            return Err(format!("netns {shown} is the host's own network namespace"));
        }
        if let Some(d) = splitnet_namespace(m.ino()) {
            return Err(format!("netns {shown} is splitnet's own ({d})"));
        }
        let s = Sandbox {
            path: path.to_path_buf(),
            fd: OwnedFd::from(file),
        };
        s.run(&["true"])
            .map_err(|_| format!("netns {shown} is not a network namespace"))?;
        Ok(s)
    }

    /// A namespace an earlier program of hv opened (an upgrade in place),
    /// by its descriptor.
    pub fn adopt(path: PathBuf, fd: OwnedFd) -> Sandbox {
        Sandbox { path, fd }
    }

    /// Its descriptor's number, for an upgrade's image.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// The descriptor as a path another process can open (through hv's
    /// own descriptor table), for `nsenter --net=`.
    pub fn fd_path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    /// Runs `args` in the namespace.
    pub fn run(&self, args: &[&str]) -> io::Result<String> {
        let net = format!("--net={}", self.fd_path());
        let mut a = vec![net.as_str(), "--"];
        a.extend_from_slice(args);
        host::run("nsenter", &a)
    }

    /// Whether an interface `ifname` is there.
    pub fn has_link(&self, ifname: &str) -> bool {
        self.run(&["ip", "link", "show", "dev", ifname]).is_ok()
    }

    /// TAP `ifname`, owned by `uid`, with the vif's MAC and MTU; made only
    /// if no interface has that name (`ip tuntap add` refuses one).
    pub fn make_tap(&self, ifname: &str, uid: u32, mac: &str, mtu: &str) -> Result<(), String> {
        let uid = uid.to_string();
        let what = |e: io::Error| format!("making {ifname} in {}: {e}", self.path.display());
        let add = [
            "ip", "tuntap", "add", "dev", ifname, "mode", "tap", "vnet_hdr", "user", &uid, "group",
            &uid,
        ];
        self.run(&add).map_err(what)?;
        let set = [
            "ip",
            "link",
            "set",
            "dev",
            ifname,
            "address",
            mac,
            "mtu",
            mtu,
            "gso_max_size",
            GSO_MAX,
            "txqueuelen",
            TXQUEUELEN,
        ];
        if let Err(e) = self.run(&set) {
            self.drop_tap(ifname);
            return Err(what(e));
        }
        // The kernel's link-local address from the MAC (EUI-64), which `ip=`
        // allows; a namespace without IPv6 has none to make.
        let _ = self.run(&["ip", "link", "set", "dev", ifname, "addrgenmode", "eui64"]);
        Ok(())
    }

    /// Deletes TAP `ifname` (hv's: the caller made it).
    pub fn drop_tap(&self, ifname: &str) {
        let _ = self.run(&["ip", "tuntap", "del", "dev", ifname, "mode", "tap"]);
    }
}

/// The splitnet domain whose named namespace has inode `ino`, if any.
fn splitnet_namespace(ino: u64) -> Option<String> {
    let dir = std::fs::read_dir("/run/netns").ok()?;
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&host::prefix()))
        .find(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.ino() == ino))
        .map(|e| e.file_name().to_string_lossy().into_owned())
}

/// A user namespace for domain `domid` that owns no network namespace the
/// domain uses: ids 0 map to [`jail::domain_uid`] as for every domain.
pub fn user_namespace(domid: hv::proto::DomId) -> io::Result<OwnedFd> {
    let holder = {
        let _guard = host::SPAWN.lock().unwrap_or_else(|p| p.into_inner());
        sys::jail::NamespaceHolder::spawn()?
    };
    let id = jail::domain_uid(domid);
    holder.map_ids(0, id, id)?;
    let fd = std::fs::File::open(format!("/proc/{}/ns/user", holder.pid()))?;
    holder.release()?;
    Ok(OwnedFd::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netns_that_is_no_namespace_is_refused_by_name() {
        let e = Sandbox::open(Path::new("/etc/hostname")).err().unwrap();
        assert!(e.contains("/etc/hostname is not a namespace"), "{e}");
        let e = Sandbox::open(Path::new("/nonexistent/ns")).err().unwrap();
        assert!(e.contains("/nonexistent/ns"), "{e}");
        let e = Sandbox::open(Path::new("/proc/self/ns/net")).err().unwrap();
        assert!(e.contains("host's own"), "{e}");
        let e = Sandbox::open(Path::new("/proc/self/ns/user"))
            .err()
            .unwrap();
        assert!(e.contains("not a network namespace"), "{e}");
    }
}
