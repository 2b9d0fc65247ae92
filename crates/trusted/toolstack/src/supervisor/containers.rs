//! Containers as guests (what a CNI ADD and DEL ask for, through
//! `splitnet-cni`): a guest domain whose vif's frontend is a TAP in a network
//! namespace the container runtime made, not one of splitnet's.
//!
//! The guest's process runs in that namespace but joins a user namespace hv
//! made for it (`ENV_USERNS_FD`), which owns nothing there: it holds no
//! privilege over the container's namespace and can only attach to the TAP
//! hv made for its uid. The link's MAC and MTU are hv's; the addresses and
//! routes are the caller's (the runtime's IPAM). Restarting its driver
//! domain reconnects it as any guest.

use super::{fail, home_of, state_of, wait_until, Supervisor, HANDSHAKE};
use crate::host;
use crate::store::Store;
use crate::topology::{DomainConfig, VifConfig, GUEST_MIN_FRAMES};
use crate::vifspec::VifSpec;
use abi::xenbus::XenbusState;
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use hv::proto::ContainerAttach;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the guest's TCP may put in one GSO frame and the TAP's queue, as
/// netfront sets them on the TAPs it makes itself.
const GSO_MAX: &str = "65000";
const TXQUEUELEN: &str = "4096";

/// A container's attachment: container `id`'s interface `ifname` in
/// namespace `netns`, served by guest domain `name`.
#[derive(Clone)]
pub(super) struct Container {
    pub id: String,
    pub ifname: String,
    pub netns: PathBuf,
    /// The CNI network it belongs to (GC is per network).
    pub network: String,
    pub name: String,
    pub config: DomainConfig,
    /// The user namespace its process joins, once made.
    pub userns: Option<Arc<OwnedFd>>,
    /// Whether hv made its TAP (and so may delete it).
    pub tap_made: bool,
}

impl Container {
    /// An attachment to make; its domain's name and configuration follow
    /// from `id` and `ifname`.
    pub fn new(id: &str, ifname: &str, netns: &str, network: &str) -> Container {
        let name = attachment_name(id, ifname);
        Container {
            id: id.to_string(),
            ifname: ifname.to_string(),
            netns: PathBuf::from(netns),
            network: network.to_string(),
            config: guest_config(&name),
            name,
            userns: None,
            tap_made: false,
        }
    }

    fn json(&self, hv: &Arc<Hypervisor>, v: Option<&VifConfig>) -> serde_json::Value {
        let domid = hv.domid_of(&self.name);
        let connected = v.is_some_and(|v| {
            Supervisor::paths(hv, v).is_ok_and(|(fe, be)| {
                [fe, be]
                    .iter()
                    .all(|p| state_of(hv, p) == Some(XenbusState::Connected))
            })
        });
        serde_json::json!({
            "id": self.id,
            "ifname": self.ifname,
            "netns": self.netns,
            "network": self.network,
            "connected": connected,
            "domain": self.name,
            "domid": domid,
            "vif": domid.map(|d| format!("vif{d}.0")),
            "mac": v.map(|v| v.mac.clone()),
            "mtu": v.and_then(|v| v.opts.mtu).unwrap_or(1500),
            "backend": v.map(|v| v.backend.clone()),
            "bridge": v.map(|v| v.opts.bridge.clone().unwrap_or_else(|| abi::xenbus::DEFAULT_BRIDGE.into())),
        })
    }
}

impl Supervisor {
    /// A CNI ADD: a guest domain for container `id`, with one vif whose
    /// frontend is TAP `ifname` in `netns`, connected when this returns.
    /// Replies with the attachment (see [`Container::json`]). Nothing of it
    /// stays when it fails.
    pub(super) fn container_add(
        self: &Arc<Self>,
        c: Container,
        backend: Option<String>,
        spec: Option<String>,
    ) -> HvResult<String> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        ContainerAttach::check_id(&c.id).map_err(bad)?;
        ContainerAttach::check_ifname(&c.ifname).map_err(bad)?;
        check_netns(&c.netns).map_err(bad)?;
        let mut vs = match spec.as_deref() {
            Some(t) => VifSpec::parse(t).map_err(|e| bad(format!("vif {t:?}: {e}")))?,
            None => VifSpec::default(),
        };
        if vs.vhost_user || vs.devid.is_some_and(|d| d != 0) {
            return Err(bad("a container's vif is a netif vif, devid 0".into()));
        }
        if backend.is_some() && vs.backend.is_some() {
            return Err(bad(
                "the driver domain is named twice (driver and backend=)".into(),
            ));
        }
        vs.backend = vs.backend.or(backend);
        let name = c.name.clone();
        self.claim(c)?;
        let hv = self.hv()?;
        if let Err(e) = self.container_build(&hv, &name, vs) {
            self.container_teardown(&hv, &name);
            return Err(e);
        }
        let st = self.lock();
        let c = st.containers.iter().find(|c| c.name == name);
        let v = st.vifs.iter().find(|v| v.guest == name);
        Ok(c.map(|c| c.json(&hv, v)).unwrap_or_default().to_string())
    }

    /// Records attachment `c`, refusing one that exists (ADD twice) or a
    /// name another attachment or the topology holds.
    fn claim(&self, c: Container) -> HvResult<()> {
        let mut st = self.lock();
        if let Some(x) = st.containers.iter().find(|x| x.name == c.name) {
            let msg = if x.id == c.id && x.ifname == c.ifname {
                format!(
                    "container {} has {} already (domain {}); DEL it first",
                    c.id, c.ifname, c.name
                )
            } else {
                format!("domain name {} is taken by container {}", c.name, x.id)
            };
            return Err(fail(ErrorKind::InUse, msg));
        }
        if self.topology.domain(&c.name).is_some() {
            return Err(fail(
                ErrorKind::InUse,
                format!("{} is a domain of the topology", c.name),
            ));
        }
        st.containers.push(c);
        Ok(())
    }

    /// The domain, its user namespace, its TAP and its vif, then its
    /// process, waiting for the vif to connect.
    fn container_build(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        name: &str,
        vs: VifSpec,
    ) -> HvResult<()> {
        let c = self.container(name)?;
        if in_netns(&c.netns, &["ip", "link", "show", "dev", &c.ifname]).is_ok() {
            return Err(fail(
                ErrorKind::InUse,
                format!(
                    "{} has an interface {} already",
                    c.netns.display(),
                    c.ifname
                ),
            ));
        }
        let (domid, sock, cg) = self.create(hv, &c.config).map_err(internal)?;
        let mut ts = Store::new(hv);
        ts.write(&format!("{}/container-ifname", home_of(domid)), &c.ifname)
            .map_err(internal)?;
        let userns = Arc::new(user_namespace(domid).map_err(internal)?);
        let v = self.new_vif(hv, name, vs)?;
        let mtu = v.opts.mtu.unwrap_or(1500).to_string();
        make_tap(&c.netns, &c.ifname, jail::domain_uid(domid), &v.mac, &mtu).map_err(internal)?;
        if let Some(x) = self.lock().containers.iter_mut().find(|x| x.name == name) {
            (x.userns, x.tap_made) = (Some(userns), true);
        }
        self.plumb(hv, &v).map_err(internal)?;
        self.launch(hv, &c.config, domid, sock, cg)
            .map_err(internal)?;
        self.wait_connected(hv, &v)?;
        let info = serde_json::json!({
            "id": c.id, "ifname": c.ifname, "netns": c.netns, "network": c.network,
        });
        hv.set_info(&format!("container.{name}"), &info.to_string());
        Ok(())
    }

    /// A CNI DEL: attachment `id`/`ifname` goes, its domain first (its
    /// vif's backend directory with it), then its TAP. Done when there is
    /// none (DEL is idempotent).
    pub(super) fn container_del(&self, id: &str, ifname: &str) -> HvResult<()> {
        let hv = self.hv()?;
        let name = attachment_name(id, ifname);
        let known = self
            .lock()
            .containers
            .iter()
            .any(|c| c.id == id && c.ifname == ifname);
        if known {
            self.container_teardown(&hv, &name);
        }
        Ok(())
    }

    /// Destroys container domain `name` (if it runs), waits until its
    /// process was reaped, and forgets its vifs, its TAP and its record.
    fn container_teardown(&self, hv: &Arc<Hypervisor>, name: &str) {
        if let Some(domid) = hv.domid_of(name) {
            let reaps = self.lock().reaps.get(name).copied().unwrap_or(0);
            let has_process = self.lock().starts.contains_key(name);
            self.lock()
                .intents
                .insert(name.to_string(), super::Intent::Destroy);
            hv.destroy_domain(domid, "its container's DEL");
            if has_process {
                let reaped = || self.lock().reaps.get(name).copied().unwrap_or(0) > reaps;
                if !wait_until(HANDSHAKE, reaped) {
                    eprintln!("hv: container domain {name} was not reaped within {HANDSHAKE:?}");
                }
            }
        }
        let gone = {
            let mut st = self.lock();
            st.vifs.retain(|v| v.guest != name);
            st.starts.remove(name);
            st.reaps.remove(name);
            let i = st.containers.iter().position(|c| c.name == name);
            i.map(|i| st.containers.remove(i))
        };
        hv.remove_info(&format!("container.{name}"));
        // Its log goes with it: runtimes churn through containers by the
        // thousand, each under a name of its own.
        let _ = std::fs::remove_file(self.run_dir.join(format!("{name}.log")));
        if let Some(c) = gone.filter(|c| c.tap_made) {
            drop_tap(&c.netns, &c.ifname);
        }
    }

    /// Every attachment, as a JSON array (see [`Container::json`]).
    pub(super) fn container_list(&self) -> HvResult<String> {
        let hv = self.hv()?;
        let st = self.lock();
        let all: Vec<serde_json::Value> = st
            .containers
            .iter()
            .map(|c| c.json(&hv, st.vifs.iter().find(|v| v.guest == c.name)))
            .collect();
        Ok(serde_json::Value::Array(all).to_string())
    }

    /// hv is stopping: each container's vif leaves its namespace (the
    /// namespace stays, the runtime's). Its domain is gone with the others.
    pub fn release_containers(&self) {
        let all = std::mem::take(&mut self.lock().containers);
        for c in all.iter().filter(|c| c.tap_made) {
            drop_tap(&c.netns, &c.ifname);
        }
    }

    /// Container domain `name`'s record.
    pub(super) fn container(&self, name: &str) -> HvResult<Container> {
        self.lock()
            .containers
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .ok_or_else(|| {
                fail(
                    ErrorKind::BadDomain,
                    format!("no container domain {name:?}"),
                )
            })
    }
}

fn internal(e: impl std::fmt::Display) -> hv::error::HvError {
    fail(ErrorKind::Internal, e.to_string())
}

/// The domain name of attachment `id`/`ifname`: `c` and 9 hex digits of
/// its hash (domain names are at most 10 characters).
pub(crate) fn attachment_name(id: &str, ifname: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain([0]).chain(ifname.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("c{:09x}", h >> 28)
}

/// A guest's configuration with every default and one vif's memory.
fn guest_config(name: &str) -> DomainConfig {
    let text = format!("name = {name:?}\nkind = \"guest\"\n");
    let mut d: DomainConfig =
        toml::from_str(&text).expect("a guest with every default is a valid configuration");
    d.memory_frames = GUEST_MIN_FRAMES;
    d
}

/// `path` names a network namespace, and not hv's own.
fn check_netns(path: &Path) -> Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("netns {}: {e}", path.display()))?;
    let own = std::fs::metadata("/proc/self/ns/net").map_err(|e| e.to_string())?;
    if m.dev() != own.dev() {
        return Err(format!("netns {} is not a namespace", path.display()));
    }
    if m.ino() == own.ino() {
        return Err(format!(
            "netns {} is the host's own network namespace",
            path.display()
        ));
    }
    in_netns(path, &["true"])
        .map_err(|_| format!("netns {} is not a network namespace", path.display()))?;
    Ok(())
}

/// Runs `args` in network namespace `path`.
fn in_netns(path: &Path, args: &[&str]) -> std::io::Result<String> {
    let net = format!("--net={}", path.display());
    let mut a = vec![net.as_str(), "--"];
    a.extend_from_slice(args);
    host::run("nsenter", &a)
}

/// A user namespace for domain `domid` that owns no network namespace the
/// domain uses: ids 0 map to [`jail::domain_uid`] as for every domain.
fn user_namespace(domid: hv::proto::DomId) -> std::io::Result<OwnedFd> {
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

/// TAP `ifname` in `netns`, owned by `uid`, with the vif's MAC and MTU.
fn make_tap(netns: &Path, ifname: &str, uid: u32, mac: &str, mtu: &str) -> Result<(), String> {
    let uid = uid.to_string();
    let what = |e: std::io::Error| format!("making {ifname} in {}: {e}", netns.display());
    in_netns(
        netns,
        &[
            "ip", "tuntap", "add", "dev", ifname, "mode", "tap", "vnet_hdr", "user", &uid, "group",
            &uid,
        ],
    )
    .map_err(what)?;
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
    if let Err(e) = in_netns(netns, &set) {
        drop_tap(netns, ifname);
        return Err(what(e));
    }
    // The kernel's link-local address from the MAC (EUI-64), which `ip=`
    // allows; a namespace without IPv6 has none to make.
    let _ = in_netns(
        netns,
        &["ip", "link", "set", "dev", ifname, "addrgenmode", "eui64"],
    );
    Ok(())
}

/// Deletes TAP `ifname` from `netns`, if both are still there.
fn drop_tap(netns: &Path, ifname: &str) {
    if netns.exists() {
        let _ = in_netns(
            netns,
            &["ip", "tuntap", "del", "dev", ifname, "mode", "tap"],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_names_are_domain_names_and_differ_by_interface() {
        let a = attachment_name("3f2a9c1b", "eth0");
        let b = attachment_name("3f2a9c1b", "net1");
        assert_ne!(a, b);
        assert_eq!(a, attachment_name("3f2a9c1b", "eth0"));
        assert!(crate::topology::check_name("domain", &a).is_ok(), "{a}");
    }

    #[test]
    fn a_netns_that_is_no_namespace_is_refused_by_name() {
        let e = check_netns(Path::new("/etc/hostname")).unwrap_err();
        assert!(e.contains("/etc/hostname is not a namespace"), "{e}");
        let e = check_netns(Path::new("/nonexistent/ns")).unwrap_err();
        assert!(e.contains("/nonexistent/ns"), "{e}");
        let e = check_netns(Path::new("/proc/self/ns/net")).unwrap_err();
        assert!(e.contains("host's own"), "{e}");
    }
}
