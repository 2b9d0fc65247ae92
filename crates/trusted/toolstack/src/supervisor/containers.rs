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

use super::{
    fail, home_of, state_of, vif_info_key, wait_until, Intent, State, Supervisor, HANDSHAKE,
};
use crate::sandbox::{self, Sandbox};
use crate::store::Store;
use crate::topology::{DomainConfig, VifConfig, GUEST_MIN_FRAMES};
use crate::vifspec::VifSpec;
use abi::xenbus::XenbusState;
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use hv::proto::{ContainerAttach, DomId};
use std::os::fd::{OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// A container's attachment: container `id`'s interface `ifname` in the
/// runtime's namespace, served by guest domain `name`.
#[derive(Clone)]
pub(super) struct Container {
    pub id: String,
    pub ifname: String,
    pub sandbox: Arc<Sandbox>,
    /// The CNI network it belongs to (GC is per network).
    pub network: String,
    pub name: String,
    pub config: DomainConfig,
    /// The user namespace its process joins, once made.
    pub userns: Option<Arc<OwnedFd>>,
    /// Whether hv made its TAP (and so may delete it).
    pub tap_made: bool,
    /// Its ADD has not returned yet: a DEL waits for it.
    pub building: bool,
}

/// A container's attachment as an upgrade's image names it (its
/// namespace and user namespace by descriptor number).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ContainerImage {
    pub id: String,
    pub ifname: String,
    pub netns: std::path::PathBuf,
    pub netns_fd: RawFd,
    pub network: String,
    pub name: String,
    pub config: DomainConfig,
    pub userns: Option<RawFd>,
    pub tap_made: bool,
}

impl ContainerImage {
    /// The descriptors it names.
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        std::iter::once(self.netns_fd).chain(self.userns)
    }
}

impl Container {
    /// Its image; None while its ADD is under way.
    pub(super) fn image(&self) -> Option<ContainerImage> {
        use std::os::fd::AsRawFd;
        (!self.building).then(|| ContainerImage {
            id: self.id.clone(),
            ifname: self.ifname.clone(),
            netns: self.sandbox.path.clone(),
            netns_fd: self.sandbox.raw_fd(),
            network: self.network.clone(),
            name: self.name.clone(),
            config: self.config.clone(),
            userns: self.userns.as_ref().map(|u| u.as_raw_fd()),
            tap_made: self.tap_made,
        })
    }

    /// The attachment `i` names, its descriptors taken through `take`.
    pub(super) fn adopt(
        i: &ContainerImage,
        mut take: impl FnMut(RawFd) -> Result<OwnedFd, String>,
    ) -> Result<Container, String> {
        Ok(Container {
            id: i.id.clone(),
            ifname: i.ifname.clone(),
            sandbox: Arc::new(Sandbox::adopt(i.netns.clone(), take(i.netns_fd)?)),
            network: i.network.clone(),
            name: i.name.clone(),
            config: i.config.clone(),
            userns: i.userns.map(&mut take).transpose()?.map(Arc::new),
            tap_made: i.tap_made,
            building: false,
        })
    }

    /// An attachment to make, checked: its ID and interface name, and its
    /// namespace (opened now, and used through that descriptor ever after).
    pub fn new(a: &ContainerAttach) -> HvResult<Container> {
        let bad = |m: String| fail(ErrorKind::Invalid, m);
        ContainerAttach::check_id(&a.id).map_err(bad)?;
        ContainerAttach::check_ifname(&a.ifname).map_err(bad)?;
        let sandbox = Sandbox::open(std::path::Path::new(&a.netns)).map_err(bad)?;
        let name = attachment_name(&a.id, &a.ifname);
        Ok(Container {
            id: a.id.clone(),
            ifname: a.ifname.clone(),
            sandbox: Arc::new(sandbox),
            network: a.network.clone(),
            config: guest_config(&name),
            name,
            userns: None,
            tap_made: false,
            building: true,
        })
    }

    /// What `status` and CNI's CHECK read: the attachment, its domain and
    /// its vif, and whether both ends of the vif are connected.
    fn json(&self, hv: &Arc<Hypervisor>, v: Option<&VifConfig>) -> serde_json::Value {
        let domid = hv.domid_of(&self.name);
        let connected = v.is_some_and(|v| {
            Supervisor::paths(hv, v).is_ok_and(|(fe, be)| {
                [fe, be]
                    .iter()
                    .all(|p| state_of(hv, p) == Some(XenbusState::Connected))
            })
        });
        let bridge = v.map(|v| v.opts.bridge.clone().unwrap_or_else(|| "xenbr0".into()));
        serde_json::json!({
            "id": self.id,
            "ifname": self.ifname,
            "netns": self.sandbox.path,
            "network": self.network,
            "connected": connected,
            "domain": self.name,
            "domid": domid,
            "vif": domid.map(|d| format!("vif{d}.0")),
            "mac": v.map(|v| v.mac.clone()),
            "mtu": v.and_then(|v| v.opts.mtu).unwrap_or(1500),
            "backend": v.map(|v| v.backend.clone()),
            "bridge": bridge,
        })
    }
}

impl Supervisor {
    /// A CNI ADD: a guest domain for attachment `c`, with one vif whose
    /// frontend is TAP `c.ifname` in `c.sandbox`, connected when this
    /// returns. Replies with the attachment (see [`Container::json`]).
    /// Nothing of it stays when it fails.
    pub(super) fn container_add(
        self: &Arc<Self>,
        c: Container,
        backend: Option<String>,
        spec: Option<String>,
    ) -> HvResult<String> {
        let vs = container_vifspec(backend, spec)?;
        let hv = self.hv()?;
        let name = c.name.clone();
        self.claim(c)?;
        let built = self.container_build(&hv, &name, vs);
        if built.is_err() {
            self.container_teardown(&hv, &name);
        }
        if let Some(x) = self.lock().containers.iter_mut().find(|x| x.name == name) {
            x.building = false;
        }
        self.changed.notify_all();
        built?;
        let (c, v) = self.attachment(&name);
        Ok(c.map(|c| c.json(&hv, v.as_ref()))
            .unwrap_or_default()
            .to_string())
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
        if self.topo().domain(&c.name).is_some() {
            return Err(fail(
                ErrorKind::InUse,
                format!("{} is a domain of the topology", c.name),
            ));
        }
        st.containers.push(c);
        Ok(())
    }

    /// The domain, its user namespace, its vif and TAP, then its process,
    /// waiting for the vif to connect. What it made before a failure is
    /// recorded for [`Supervisor::container_teardown`].
    fn container_build(
        self: &Arc<Self>,
        hv: &Arc<Hypervisor>,
        name: &str,
        vs: VifSpec,
    ) -> HvResult<()> {
        let c = self.container(name)?;
        if c.sandbox.has_link(&c.ifname) {
            let at = c.sandbox.path.display();
            let msg = format!("{at} has an interface {} already", c.ifname);
            return Err(fail(ErrorKind::InUse, msg));
        }
        let (domid, sock, cg) = self.create(hv, &c.config).map_err(internal)?;
        let made = self.container_plumb(hv, &c, domid, vs);
        let v = match made {
            Ok(v) => v,
            Err(e) => {
                cg.destroy(Duration::ZERO);
                return Err(e);
            }
        };
        self.launch(hv, &c.config, domid, sock, cg)
            .map_err(internal)?;
        self.wait_connected(hv, &v)?;
        let info = serde_json::json!({
            "id": c.id, "ifname": c.ifname, "netns": c.sandbox.path, "network": c.network,
        });
        hv.set_info(&format!("container.{name}"), &info.to_string());
        Ok(())
    }

    /// Container domain `c`'s home, user namespace, vif and TAP, and the
    /// vif's store directories.
    fn container_plumb(
        &self,
        hv: &Arc<Hypervisor>,
        c: &Container,
        domid: DomId,
        vs: VifSpec,
    ) -> HvResult<VifConfig> {
        let mut ts = Store::new(hv);
        ts.write(&format!("{}/container-ifname", home_of(domid)), &c.ifname)
            .map_err(internal)?;
        let userns = Arc::new(sandbox::user_namespace(domid).map_err(internal)?);
        let v = self.new_vif(hv, &c.name, vs)?;
        let mtu = v.opts.mtu.unwrap_or(1500).to_string();
        let uid = jail::domain_uid(domid);
        c.sandbox
            .make_tap(&c.ifname, uid, &v.mac, &mtu)
            .map_err(internal)?;
        if let Some(x) = self.lock().containers.iter_mut().find(|x| x.name == c.name) {
            (x.userns, x.tap_made) = (Some(userns), true);
        }
        self.plumb(hv, &v).map_err(internal)?;
        Ok(v)
    }

    /// A CNI DEL: attachment `id`/`ifname` goes, its domain first (its
    /// vif's backend directory with it), then its TAP. Done when there is
    /// none (DEL is idempotent); an ADD still under way finishes first.
    pub(super) fn container_del(&self, id: &str, ifname: &str) -> HvResult<()> {
        let hv = self.hv()?;
        let name = attachment_name(id, ifname);
        let mine = |c: &Container| c.id == id && c.ifname == ifname;
        let building = |st: &State| st.containers.iter().any(|c| mine(c) && c.building);
        let Some(st) = self.wait_changed(3 * HANDSHAKE, building, || false) else {
            return Err(fail(
                ErrorKind::InUse,
                format!("the ADD of {ifname} of container {id} is still under way"),
            ));
        };
        let known = st.containers.iter().any(mine);
        drop(st);
        if known {
            self.container_teardown(&hv, &name);
        }
        Ok(())
    }

    /// Destroys container domain `name` (if it runs), waits until its
    /// process was reaped (or undoes what its process would have), and
    /// forgets its vifs, its TAP and its record.
    fn container_teardown(&self, hv: &Arc<Hypervisor>, name: &str) {
        self.destroy_and_reap(hv, name, "its container's DEL");
        self.forget_container(hv, name);
    }

    /// Destroys domain `name`, which must not come back, if it runs, and
    /// waits until its process was reaped; without a process, undoes what
    /// its process's end would have (its vifs' backends).
    pub(super) fn destroy_and_reap(&self, hv: &Arc<Hypervisor>, name: &str, why: &str) {
        let Some(domid) = hv.domid_of(name) else {
            return;
        };
        let reaps = self.lock().reaps.get(name).copied().unwrap_or(0);
        let has_process = self.lock().starts.contains_key(name);
        self.lock()
            .intents
            .insert(name.to_string(), Intent::Destroy);
        hv.destroy_domain(domid, why);
        if has_process {
            let reaped = || self.lock().reaps.get(name).copied().unwrap_or(0) > reaps;
            if !wait_until(HANDSHAKE, reaped) {
                hv::log!(Warning, dom = name, "not reaped within {HANDSHAKE:?}");
            }
        } else {
            self.forget_guest_backends(hv, name, domid);
        }
    }

    /// Container domain `name`'s records go: its vifs (their `status`
    /// entries too), its bookkeeping, its log and its record; then its TAP.
    fn forget_container(&self, hv: &Arc<Hypervisor>, name: &str) {
        let gone = {
            let mut st = self.lock();
            for v in st.vifs.iter().filter(|v| v.guest == name) {
                hv.remove_info(&vif_info_key(v));
            }
            st.vifs.retain(|v| v.guest != name);
            st.forget_domain(name);
            let i = st.containers.iter().position(|c| c.name == name);
            i.map(|i| st.containers.remove(i))
        };
        hv.remove_info(&format!("container.{name}"));
        // Its log goes with it: runtimes churn through containers by the
        // thousand, each under a name of its own.
        let _ = std::fs::remove_file(self.run_dir.join(format!("{name}.log")));
        if let Some(c) = gone.filter(|c| c.tap_made) {
            c.sandbox.drop_tap(&c.ifname);
        }
    }

    /// Container domain `name`'s record and vif, read under the lock.
    fn attachment(&self, name: &str) -> (Option<Container>, Option<VifConfig>) {
        let st = self.lock();
        let c = st.containers.iter().find(|c| c.name == name).cloned();
        let v = st.vifs.iter().find(|v| v.guest == name).cloned();
        (c, v)
    }

    /// Every attachment, as a JSON array (see [`Container::json`]); the
    /// store is read after the lock is let go.
    pub(super) fn container_list(&self) -> HvResult<String> {
        let hv = self.hv()?;
        let all: Vec<(Container, Option<VifConfig>)> = {
            let st = self.lock();
            st.containers
                .iter()
                .filter(|c| !c.building)
                .map(|c| {
                    (
                        c.clone(),
                        st.vifs.iter().find(|v| v.guest == c.name).cloned(),
                    )
                })
                .collect()
        };
        let list: Vec<serde_json::Value> =
            all.iter().map(|(c, v)| c.json(&hv, v.as_ref())).collect();
        Ok(serde_json::Value::Array(list).to_string())
    }

    /// hv is stopping: each container's vif leaves its namespace (the
    /// namespace stays, the runtime's). Its domain is gone with the others.
    pub fn release_containers(&self) {
        let all = std::mem::take(&mut self.lock().containers);
        for c in all.iter().filter(|c| c.tap_made) {
            c.sandbox.drop_tap(&c.ifname);
        }
    }

    /// Container domain `name`'s record.
    pub(super) fn container(&self, name: &str) -> HvResult<Container> {
        let found = self
            .lock()
            .containers
            .iter()
            .find(|c| c.name == name)
            .cloned();
        found.ok_or_else(|| {
            fail(
                ErrorKind::BadDomain,
                format!("no container domain {name:?}"),
            )
        })
    }

    /// Refuses what only a topology guest may be asked (a restart, another
    /// vif): a container's guest lives and dies with its attachment.
    pub(super) fn not_a_container(&self, name: &str, what: &str) -> HvResult<()> {
        match self.container(name) {
            Ok(c) => Err(fail(
                ErrorKind::Invalid,
                format!(
                    "{name} is container {}'s {}: it cannot {what}; its runtime DELs and ADDs it",
                    c.id, c.ifname
                ),
            )),
            Err(_) => Ok(()),
        }
    }
}

/// The vifspec of a container's vif, with the driver domain named once.
fn container_vifspec(backend: Option<String>, spec: Option<String>) -> HvResult<VifSpec> {
    let bad = |m: String| fail(ErrorKind::Invalid, m);
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
    Ok(vs)
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
    fn a_containers_vifspec_names_its_driver_domain_once() {
        let vs = container_vifspec(Some("drv".into()), Some("rate=10Mb/s".into())).unwrap();
        assert_eq!(vs.backend.as_deref(), Some("drv"));
        let e = container_vifspec(Some("drv".into()), Some("backend=drv2".into())).unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
        assert!(container_vifspec(None, Some("devid=1".into())).is_err());
    }
}
