//! vhost-user vifs: an external VM (`[[domain]] kind = "vm"`, or
//! `network-attach NAME 'type=vhost-user,...'`) or a `nic = "virtio"` guest,
//! served by its driver domain's vhost-user backend. hv runs no process for
//! a VM; it listens on the VM's socket (`hv::vhost`) and the driver domain
//! learns of the vif from `/local/domain/<drv>/splitnet/vhost/<name>`.

use crate::topology::{check_name, Check, DomainConfig, DomainKind, Nic, SocketServer, Topology};
pub use crate::vifspec::{check_socket, MAX_SOCKET_PATH};
use crate::vifspec::{parse_ifname, VLAN_RANGE};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The keys a `kind = "vm"` domain takes.
pub const VM_KEYS: [&str; 8] = [
    "name",
    "kind",
    "socket",
    "socket_server",
    "mac",
    "backend",
    "bridge",
    "vlan",
];
/// The guest memory the printed VMM arguments give a VM.
pub const VM_MEMORY: &str = "512M";

/// A vhost-user vif, resolved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VhostVif {
    /// The VM's (or guest's) name, which names the vif.
    pub name: String,
    /// The driver domain serving it.
    pub backend: String,
    pub socket: PathBuf,
    pub mac: String,
    /// None: [`abi::xenbus::DEFAULT_BRIDGE`].
    pub bridge: Option<String>,
    pub vlan: Option<u16>,
    /// A `nic = "virtio"` guest's own vif (its socket in hv's run
    /// directory); false: an external VM's.
    pub guest: bool,
    /// The VMM listens on `socket` and hv dials it (`socket_server = "vm"`).
    pub vm_listens: bool,
}

impl VhostVif {
    /// The bridge it joins.
    pub fn bridge(&self) -> &str {
        self.bridge
            .as_deref()
            .unwrap_or(abi::xenbus::DEFAULT_BRIDGE)
    }

    /// Its store node in the driver domain's home, `vhost/<name>`.
    pub fn store_path(&self, home: &str) -> String {
        format!("{home}/vhost/{}", self.name)
    }

    /// Its store node's value: `mac=..,bridge=..[,vlan=..][,guest=1][,dial=1]`
    /// (the style of `uplinks/<if>`). `guest=1` marks a `nic = "virtio"`
    /// guest, an untrusted domain: its memory must be sealed against
    /// shrinking. `dial=1`: the VMM listens, and the driver domain has hv
    /// dial it.
    pub fn store_value(&self) -> String {
        let mut v = format!("mac={},bridge={}", self.mac, self.bridge());
        if let Some(n) = self.vlan {
            v += &format!(",vlan={n}");
        }
        if self.guest {
            v += ",guest=1";
        }
        if self.vm_listens {
            v += ",dial=1";
        }
        v
    }

    /// The `status` fact naming it.
    pub fn info_key(&self) -> String {
        format!("vhost.{}", self.name)
    }

    /// The `status` fact's value: `vm|backend|socket|mac|bridge|vlan|server`
    /// (`guest` in the place of `vm` for a `nic = "virtio"` guest; the
    /// server `vm` or `splitnet`).
    pub fn info_value(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}",
            if self.guest { "guest" } else { "vm" },
            self.backend,
            self.socket.display(),
            self.mac,
            self.bridge(),
            self.vlan.map(|v| v.to_string()).unwrap_or_default(),
            if self.vm_listens { "vm" } else { "splitnet" }
        )
    }

    /// Reads back a `status` fact ([`VhostVif::info_key`], [`VhostVif::info_value`]).
    pub fn from_info(key: &str, value: &str) -> Option<VhostVif> {
        let name = key.strip_prefix("vhost.")?;
        let f: Vec<&str> = value.split('|').collect();
        let [kind, backend, socket, mac, bridge, vlan, rest @ ..] = f.as_slice() else {
            return None;
        };
        Some(VhostVif {
            name: name.to_string(),
            backend: backend.to_string(),
            socket: PathBuf::from(socket),
            mac: mac.to_string(),
            bridge: Some(bridge.to_string()),
            vlan: vlan.parse().ok(),
            guest: *kind == "guest",
            vm_listens: rest.first() == Some(&"vm"),
        })
    }

    /// What hv needs to listen for it.
    pub fn hv_spec(&self) -> hv::VhostSpec {
        hv::VhostSpec {
            name: self.name.clone(),
            socket: self.socket.clone(),
            backend: self.backend.clone(),
            guest: self.guest.then(|| self.name.clone()),
            dial: self.vm_listens,
        }
    }

    /// QEMU's arguments for a virtio-net device on this vif (QEMU 7.2):
    /// the socket as a chardev that reconnects after a driver-domain
    /// restart, a vhost-user netdev on it, and guest RAM the backend can
    /// map (a shared memfd as the only NUMA node). `vectors=0` keeps the
    /// device on INTx: under TCG, QEMU 7.2 crashes in its MSI-X path when
    /// the guest sets DRIVER_OK.
    pub fn qemu_args(&self) -> Vec<String> {
        let (n, m) = (&self.name, VM_MEMORY);
        vec![
            "-m".into(),
            m.into(),
            "-object".into(),
            format!("memory-backend-memfd,id=mem,size={m},share=on"),
            "-numa".into(),
            "node,memdev=mem".into(),
            "-chardev".into(),
            format!(
                "socket,id={n},path={},{}",
                self.socket.display(),
                self.qemu_role()
            ),
            "-netdev".into(),
            format!("vhost-user,id=n-{n},chardev={n}"),
            "-device".into(),
            format!("virtio-net-pci,netdev=n-{n},mac={},vectors=0", self.mac),
        ]
    }

    /// QEMU's chardev role: a client that reconnects after a driver-domain
    /// restart, or, when the VMM listens, a server that does not wait for
    /// its first connection.
    fn qemu_role(&self) -> &'static str {
        if self.vm_listens {
            "server=on,wait=off"
        } else {
            "reconnect=1"
        }
    }

    /// Cloud Hypervisor's arguments: shared guest memory and a vhost-user net device.
    pub fn cloud_hypervisor_args(&self) -> Vec<String> {
        let mode = if self.vm_listens {
            ",vhost_mode=server"
        } else {
            ""
        };
        vec![
            "--memory".into(),
            format!("size={VM_MEMORY},shared=on"),
            "--net".into(),
            format!(
                "vhost_user=true,socket={},mac={}{mode}",
                self.socket.display(),
                self.mac
            ),
        ]
    }

    /// DPDK's virtio-user device for this vif (`--vdev`), as testpmd or
    /// any DPDK application takes it. DPDK reconnects only as the server
    /// (`server=1`): as a client it loses its link for good when the
    /// driver domain restarts, so a DPDK VM wants `socket_server = "vm"`.
    pub fn dpdk_vdev(&self) -> String {
        let server = if self.vm_listens { ",server=1" } else { "" };
        format!(
            "net_virtio_user0,path={},mac={},queues=1{server}",
            self.socket.display(),
            self.mac
        )
    }

    /// The two VMMs' arguments as `up` and `vm-args` print them.
    pub fn vmm_args_text(&self) -> String {
        format!(
            "{} (vhost-user on {}{}, MAC {}, bridge {}{}, served by {}):\n  qemu-system-x86_64 ... {}\n  cloud-hypervisor ... {}\n  dpdk-testpmd ... --vdev {}\n",
            self.name,
            self.socket.display(),
            if self.vm_listens { ", where the VM listens" } else { "" },
            self.mac,
            self.bridge(),
            self.vlan.map(|v| format!(" VLAN {v}")).unwrap_or_default(),
            self.backend,
            self.qemu_args().join(" "),
            self.cloud_hypervisor_args().join(" "),
            self.dpdk_vdev()
        )
    }
}

/// Where a `nic = "virtio"` guest's socket lives: hv's run directory, never
/// a path an outsider chose.
pub fn guest_socket(run_dir: &Path, guest: &str) -> PathBuf {
    run_dir.join("vhost").join(format!("{guest}.sock"))
}

/// A VM's MAC: unicast and not all zeros; returned lowercase.
pub fn check_mac(m: &str) -> Result<String, String> {
    let b = abi::xenbus::parse_mac(m)?;
    if b == [0; 6] {
        return Err(format!("{m:?} is the all-zero MAC"));
    }
    Ok(m.to_ascii_lowercase())
}

/// The topology's VM rules ([`crate::checks`]): a VM's keys and settings,
/// no VM keys on another kind, and unique sockets and MACs.
pub struct VmCheck;

impl Check for VmCheck {
    fn text(&self, text: &str) -> Result<(), String> {
        check_vm_keys(text)
    }
    fn domain(&self, d: &DomainConfig) -> Result<(), String> {
        if d.kind == DomainKind::Vm {
            check_vm(d)
        } else {
            check_not_vm(d)
        }
    }
    fn macs(&self, t: &Topology, taken: &mut HashSet<String>) -> Result<(), String> {
        check_unique(t, taken)
    }
}

/// Refuses a key a `kind = "vm"` domain does not take, naming it (serde
/// fills every other field with its default, so this reads the raw TOML).
fn check_vm_keys(text: &str) -> Result<(), String> {
    let Ok(v) = text.parse::<toml::Table>() else {
        return Ok(()); // the typed parse reports syntax errors
    };
    let Some(domains) = v.get("domain").and_then(|d| d.as_array()) else {
        return Ok(());
    };
    for d in domains.iter().filter_map(|d| d.as_table()) {
        if d.get("kind").and_then(|k| k.as_str()) != Some("vm") {
            continue;
        }
        let name = d.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        if let Some(k) = d.keys().find(|k| !VM_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "domain {name:?} is a vm (an external VM served over vhost-user; hv runs nothing for it): \
                 key `{k}` does not apply to it; a vm takes {}",
                VM_KEYS.join(", ")
            ));
        }
    }
    Ok(())
}

/// A `kind = "vm"` domain's own settings: a socket and a MAC, a bridge
/// name and a VLAN in range.
fn check_vm(d: &DomainConfig) -> Result<(), String> {
    let at = |e: String| format!("domain {:?}: {e}", d.name);
    let socket = d.socket.as_deref().ok_or_else(|| {
        at(
            "a vm needs socket = \"/run/splitnet/<name>.sock\" (where its driver domain listens)"
                .into(),
        )
    })?;
    check_socket(socket).map_err(at)?;
    let mac = d
        .mac
        .as_deref()
        .ok_or_else(|| at("a vm needs mac = \"52:54:00:..\" (its virtio-net device's)".into()))?;
    check_mac(mac).map_err(|e| at(format!("mac: {e}")))?;
    if let Some(b) = &d.bridge {
        parse_ifname("bridge", b).map_err(at)?;
    }
    if let Some(v) = d.vlan.filter(|v| !VLAN_RANGE.contains(v)) {
        return Err(at(format!(
            "vlan = {v}: give a number {}..={}",
            VLAN_RANGE.start(),
            VLAN_RANGE.end()
        )));
    }
    Ok(())
}

/// Refuses the vm keys on a driver domain or a guest.
fn check_not_vm(d: &DomainConfig) -> Result<(), String> {
    let given = [
        ("socket", d.socket.is_some()),
        ("socket_server", d.socket_server.is_some()),
        ("bridge", d.bridge.is_some()),
        ("vlan", d.vlan.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((k, _)) => Err(format!(
            "domain {:?}: `{k}` is a setting of kind = \"vm\"; {}",
            d.name,
            if d.kind == DomainKind::Guest {
                "a guest picks its bridge and VLAN per vif: vif = [\"bridge=xenbr1,vlan=10\"]"
            } else {
                "a driver domain takes none of them"
            }
        )),
        None => Ok(()),
    }
}

/// No two VMs share a socket, and no MAC of a vhost-user vif is taken
/// (`macs` holds the netif vifs' MACs, lowercase).
fn check_unique(t: &Topology, macs: &mut HashSet<String>) -> Result<(), String> {
    let mut sockets = HashSet::new();
    for v in t.vhost_vifs(Path::new("/")) {
        if !macs.insert(v.mac.to_ascii_lowercase()) {
            return Err(format!(
                "MAC {} is used twice (again by {:?})",
                v.mac, v.name
            ));
        }
        if !v.guest && !sockets.insert(v.socket.clone()) {
            return Err(format!(
                "socket {} is used twice (again by {:?})",
                v.socket.display(),
                v.name
            ));
        }
    }
    Ok(())
}

impl Topology {
    /// Every vhost-user vif: the VMs', then the `nic = "virtio"` guests'
    /// (their sockets in `run_dir`).
    pub fn vhost_vifs(&self, run_dir: &Path) -> Vec<VhostVif> {
        let mut out = Vec::new();
        for d in self.domains.iter().filter(|d| d.kind == DomainKind::Vm) {
            let (Ok(backend), Some(socket), Some(mac)) = (self.backend_of(d), &d.socket, &d.mac)
            else {
                continue;
            };
            out.push(VhostVif {
                name: d.name.clone(),
                backend,
                socket: socket.into(),
                mac: mac.to_ascii_lowercase(),
                bridge: d.bridge.clone(),
                vlan: d.vlan,
                guest: false,
                vm_listens: d.socket_server == Some(SocketServer::Vm),
            });
        }
        let guests = self.domains.iter().filter(|d| d.kind == DomainKind::Guest);
        for (i, d) in guests.enumerate() {
            let Ok(backend) = self.backend_of(d) else {
                continue;
            };
            if d.nic == Nic::Virtio {
                out.push(VhostVif {
                    name: d.name.clone(),
                    backend,
                    socket: guest_socket(run_dir, &d.name),
                    mac: crate::topology::guest_mac(d, i),
                    bridge: None,
                    vlan: None,
                    guest: true,
                    vm_listens: false,
                });
            }
        }
        out
    }

    /// The external VMs' vifs (`kind = "vm"`).
    pub fn vms(&self) -> Vec<VhostVif> {
        let mut v = self.vhost_vifs(Path::new("/"));
        v.retain(|v| !v.guest);
        v
    }

    /// The domains hv runs a process for (every one but the VMs).
    pub fn hv_domains(&self) -> impl Iterator<Item = &DomainConfig> {
        self.domains.iter().filter(|d| d.kind != DomainKind::Vm)
    }
}

/// A vif name for `network-attach NAME 'type=vhost-user,...'`.
pub fn check_vm_name(name: &str) -> Result<(), String> {
    check_name("vm", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRV: &str = "[[domain]]\nname = \"drv\"\nkind = \"driver\"\n";
    const VM1: &str = "[[domain]]\nname = \"vm1\"\nkind = \"vm\"\nsocket = \"/run/splitnet/vm1.sock\"\nmac = \"52:54:00:12:34:56\"\n";

    fn topo(extra: &str) -> Result<Topology, String> {
        Topology::parse(&format!("{DRV}{extra}"), "t.toml").map_err(|e| e.to_string())
    }

    /// hv's image carries the topology as JSON: a VM's unset pool must
    /// read back (an upgrade or hv's record for its guardian would fail).
    #[test]
    fn a_topology_with_a_vm_reads_back_from_json() {
        let t = topo(VM1).unwrap();
        let text = serde_json::to_string(&t).unwrap();
        let back: Topology = serde_json::from_str(&text).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn the_issues_vm_parses_and_runs_no_process() {
        let t = topo(&format!(
            "{VM1}[[domain]]\nname = \"g1\"\nkind = \"guest\"\n"
        ))
        .unwrap();
        let vms = t.vms();
        assert_eq!(vms.len(), 1);
        let v = &vms[0];
        assert_eq!((v.name.as_str(), v.backend.as_str()), ("vm1", "drv"));
        assert_eq!(v.socket, Path::new("/run/splitnet/vm1.sock"));
        assert_eq!(v.store_value(), "mac=52:54:00:12:34:56,bridge=xenbr0");
        assert!(!v.guest && v.hv_spec().guest.is_none());
        let names: Vec<&str> = t.hv_domains().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["drv", "g1"]);
        // A vm takes no vif and no memory from the driver domain's count.
        assert_eq!(t.vifs().len(), 1);
        assert_eq!(
            t.domain("vm1").unwrap().restart_policy(),
            crate::topology::Restart::Never
        );
        // Its status fact reads back.
        let back = VhostVif::from_info(&v.info_key(), &v.info_value()).unwrap();
        assert_eq!(back.bridge(), "xenbr0");
        assert_eq!(
            (back.mac, back.socket, back.guest),
            (v.mac.clone(), v.socket.clone(), false)
        );
    }

    #[test]
    fn a_vm_picks_its_driver_bridge_and_vlan() {
        let t = Topology::parse(
            &format!(
                "{DRV}[[domain]]\nname = \"drv2\"\nkind = \"driver\"\n\
                 [[domain]]\nname = \"vm1\"\nkind = \"vm\"\nsocket = \"/run/splitnet/vm1.sock\"\n\
                 mac = \"52:54:00:12:34:56\"\nbackend = \"drv2\"\nbridge = \"xenbr1\"\nvlan = 20\n"
            ),
            "t",
        )
        .unwrap();
        let v = &t.vms()[0];
        assert_eq!(v.backend, "drv2");
        assert_eq!(
            v.store_value(),
            "mac=52:54:00:12:34:56,bridge=xenbr1,vlan=20"
        );
        assert_eq!(
            v.store_path("/local/domain/2/splitnet"),
            "/local/domain/2/splitnet/vhost/vm1"
        );
    }

    #[test]
    fn a_virtio_guest_gets_a_socket_in_hvs_run_directory() {
        let t = topo("[[domain]]\nname = \"g1\"\nkind = \"guest\"\nnic = \"virtio\"\naddress = \"10.77.0.1/24\"\n").unwrap();
        assert!(t.vifs().is_empty() && t.emulated_nics().is_empty() && t.vms().is_empty());
        let v = t.vhost_vifs(Path::new("/run/x"));
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].socket, Path::new("/run/x/vhost/g1.sock"));
        assert_eq!((v[0].mac.as_str(), v[0].guest), ("00:16:3e:5e:00:01", true));
        assert_eq!(v[0].hv_spec().guest.as_deref(), Some("g1"));
        assert_eq!(v[0].info_value().split('|').next(), Some("guest"));
        let e =
            topo("[[domain]]\nname = \"g1\"\nkind = \"guest\"\nnic = \"virtio\"\nvif = [\"\"]\n")
                .unwrap_err();
        assert!(e.contains("nic = \"virtio\" has one of its own"), "{e}");
    }

    #[test]
    fn the_qemu_and_cloud_hypervisor_arguments_name_the_socket_and_mac() {
        let v = &topo(VM1).unwrap().vms()[0];
        let q = v.qemu_args().join(" ");
        assert_eq!(
            q,
            "-m 512M -object memory-backend-memfd,id=mem,size=512M,share=on -numa node,memdev=mem \
             -chardev socket,id=vm1,path=/run/splitnet/vm1.sock,reconnect=1 \
             -netdev vhost-user,id=n-vm1,chardev=vm1 \
             -device virtio-net-pci,netdev=n-vm1,mac=52:54:00:12:34:56,vectors=0"
        );
        assert_eq!(
            v.cloud_hypervisor_args().join(" "),
            "--memory size=512M,shared=on --net vhost_user=true,socket=/run/splitnet/vm1.sock,mac=52:54:00:12:34:56"
        );
        assert!(v.vmm_args_text().contains("served by drv"));
    }

    #[test]
    fn a_vm_that_listens_is_dialed_and_its_vmms_listen() {
        let v = &topo(&format!("{VM1}socket_server = \"vm\"\n"))
            .unwrap()
            .vms()[0];
        assert!(v.vm_listens);
        assert!(v.hv_spec().dial);
        assert!(v.store_value().ends_with(",dial=1"), "{}", v.store_value());
        let q = v.qemu_args().join(" ");
        assert!(
            q.contains("path=/run/splitnet/vm1.sock,server=on,wait=off"),
            "{q}"
        );
        let ch = v.cloud_hypervisor_args().join(" ");
        assert!(ch.ends_with(",vhost_mode=server"), "{ch}");
        assert!(v.dpdk_vdev().ends_with(",server=1"), "{}", v.dpdk_vdev());
        assert!(v.vmm_args_text().contains("where the VM listens"));
        // The status fact carries it, and one written before it existed
        // reads back as hv listening.
        let back = VhostVif::from_info(&v.info_key(), &v.info_value()).unwrap();
        assert!(back.vm_listens);
        let old =
            VhostVif::from_info("vhost.vm1", "vm|drv|/s.sock|52:54:00:12:34:56|xenbr0|").unwrap();
        assert!(!old.vm_listens);
        // Only "vm" and "splitnet" listen; a guest takes no such key.
        let bad = topo(&format!("{VM1}socket_server = \"qemu\"\n")).unwrap_err();
        assert!(bad.contains("socket_server"), "{bad}");
        let g = "[[domain]]\nname = \"g1\"\nkind = \"guest\"\nsocket_server = \"vm\"\n";
        let bad = topo(g).unwrap_err();
        assert!(
            bad.contains("`socket_server` is a setting of kind = \"vm\""),
            "{bad}"
        );
    }

    #[test]
    fn bad_vms_are_refused_naming_the_key() {
        let vm = |body: &str| format!("[[domain]]\nname = \"vm1\"\nkind = \"vm\"\n{body}");
        let sock = "socket = \"/run/splitnet/vm1.sock\"\n";
        let mac = "mac = \"52:54:00:12:34:56\"\n";
        for (body, needle) in [
            (
                format!("{sock}{mac}memory_frames = 64\n"),
                "key `memory_frames` does not apply to it",
            ),
            (
                format!("{sock}{mac}address = \"10.0.0.1/24\"\n"),
                "key `address` does not apply",
            ),
            (
                format!("{sock}{mac}nic = \"virtio\"\n"),
                "key `nic` does not apply",
            ),
            (
                format!("{sock}{mac}weight = 512\n"),
                "key `weight` does not apply",
            ),
            (
                format!("{sock}{mac}rx_mode = \"copy\"\n"),
                "key `rx_mode` does not apply",
            ),
            (
                format!("{sock}{mac}vif = [\"\"]\n"),
                "key `vif` does not apply",
            ),
            (mac.to_string(), "a vm needs socket ="),
            (sock.to_string(), "a vm needs mac ="),
            (
                format!("socket = \"vm1.sock\"\n{mac}"),
                "must be an absolute path",
            ),
            (format!("{sock}mac = \"01:00:5e:00:00:01\"\n"), "multicast"),
            (format!("{sock}mac = \"00:00:00:00:00:00\"\n"), "all-zero"),
            (
                format!("{sock}mac = \"52:54:00:12:34\"\n"),
                "is not a MAC address",
            ),
            (
                format!("{sock}{mac}vlan = 4095\n"),
                "vlan = 4095: give a number 1..=4094",
            ),
            (
                format!("{sock}{mac}bridge = \"a b\"\n"),
                "vif option `bridge`",
            ),
            (
                format!("{sock}{mac}backend = \"vm1\"\n"),
                "backend = \"vm1\" is not a driver domain",
            ),
            (
                format!("{sock}{mac}restart = \"always\"\n"),
                "key `restart` does not apply",
            ),
        ] {
            let e = topo(&vm(&body)).unwrap_err();
            assert!(e.contains(needle), "{body}: {e:?} lacks {needle:?}");
            assert!(e.starts_with("t.toml"), "{e}");
        }
    }

    #[test]
    fn vms_share_no_socket_or_mac_and_others_take_no_vm_keys() {
        let two = |sock2: &str, mac2: &str| {
            topo(&format!(
                "{VM1}[[domain]]\nname = \"vm2\"\nkind = \"vm\"\nsocket = \"{sock2}\"\nmac = \"{mac2}\"\n"
            ))
        };
        assert!(two("/run/splitnet/vm2.sock", "52:54:00:12:34:57").is_ok());
        let e = two("/run/splitnet/vm1.sock", "52:54:00:12:34:57").unwrap_err();
        assert!(
            e.contains("socket /run/splitnet/vm1.sock is used twice"),
            "{e}"
        );
        let e = two("/run/splitnet/vm2.sock", "52:54:00:12:34:56").unwrap_err();
        assert!(e.contains("MAC 52:54:00:12:34:56 is used twice"), "{e}");
        // Against a guest's vif.
        let e = topo(&format!(
            "{VM1}[[domain]]\nname = \"g1\"\nkind = \"guest\"\nmac = \"52:54:00:12:34:56\"\n"
        ))
        .unwrap_err();
        assert!(e.contains("used twice"), "{e}");
        let e =
            topo("[[domain]]\nname = \"g1\"\nkind = \"guest\"\nbridge = \"xenbr1\"\n").unwrap_err();
        assert!(
            e.contains("`bridge` is a setting of kind = \"vm\"") && e.contains("vif = ["),
            "{e}"
        );
        let e = Topology::parse(
            "[[domain]]\nname = \"d\"\nkind = \"driver\"\nsocket = \"/x\"\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`socket` is a setting of kind = \"vm\""), "{e}");
        // No driver domain to serve it.
        let e = Topology::parse(VM1, "t").unwrap_err().to_string();
        assert!(e.contains("no driver domain"), "{e}");
    }
}
