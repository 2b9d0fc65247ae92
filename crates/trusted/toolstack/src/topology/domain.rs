//! A `[[domain]]` section: its kind, settings and their ranges, the
//! frames and quotas it gets, and the checks of its own settings (those
//! that need no other section).

use super::port::{LocalDelivery, PortBuffer};
use serde::Deserialize;
use std::net::IpAddr;

/// Longest domain name: it becomes part of namespace and interface names.
pub const MAX_NAME: usize = 10;

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DomainKind {
    Driver,
    Guest,
    /// An external VM served over vhost-user (`crate::vm`): hv runs no
    /// process for it; its driver domain listens on its socket.
    Vm,
}

impl DomainKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DomainKind::Driver => "driver",
            DomainKind::Guest => "guest",
            DomainKind::Vm => "vm",
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    pub name: String,
    pub kind: DomainKind,
    /// Frames (4 KiB) in the grantable pool; by default enough for the
    /// domain's vifs ([`Topology::parse`] fills it in).
    /// A VM's stays 0: its memory is its VMM's. 0 is not written, so that
    /// a topology read back from hv's image (an upgrade, a record for its
    /// guardian) takes it as unset again.
    #[serde(
        default,
        deserialize_with = "frames",
        skip_serializing_if = "unset_frames"
    )]
    pub memory_frames: u32,
    /// Pages of grant table (512 entries each).
    #[serde(default = "default_grant_frames")]
    pub grant_frames: u32,
    /// Back the pool with 2 MiB pages (transparent huge pages, else hugetlb).
    #[serde(default)]
    pub hugepages: bool,
    /// IPv4 address with prefix for the guest's virtual NIC; on a driver
    /// domain, for its own interface on its bridge (a TAP named after the
    /// bridge, see `net::tap_port`), so that an application in it sends
    /// and receives through the bridge and the ports.
    pub address: Option<String>,
    /// IPv6 address with prefix, as `address`.
    pub ipv6: Option<String>,
    /// Guests: the driver domain serving the virtual NIC (default: the only one).
    pub backend: Option<String>,
    /// Guests: the virtual NIC's MAC (default 00:16:3e:5e:00:NN).
    pub mac: Option<String>,
    /// Guests: the virtual NICs as xl's vifspecs (xl-network-configuration(5)),
    /// eth0 first; `address`, `ipv6`, `mac` and `backend` apply to the first.
    /// Absent: one vif with every default.
    #[serde(default)]
    pub vif: Vec<String>,
    /// Guests: how received packets reach the guest.
    #[serde(default)]
    pub rx_mode: RxMode,
    /// Guests: how transmitted packets reach the driver domain.
    #[serde(default)]
    pub tx_mode: TxMode,
    /// Guests: the grant mechanism (Ram thesis ch. 4).
    #[serde(default)]
    pub grants: Grants,
    /// Guests: each vif takes a dedicated receive queue on the uplink of
    /// its bridge (multi-queue with direct placement, Ram thesis ch. 3).
    #[serde(default)]
    pub mq: bool,
    /// Guests: the high-level virtual interface (Menon 2006 §3), one
    /// capability at a time: `"none"`, `"csum"`, `"sg"`, `"sg+csum"`,
    /// `"tso"` (= sg+csum+TSO, Xen's whole set) or `"all"` (TSO and
    /// splitnet's UDP segmentation offload); `true` is `"all"` (the
    /// default), `false` `"none"` (the seed baseline).
    #[serde(
        default = "all_offloads",
        deserialize_with = "offload_set",
        serialize_with = "offloads_by_name::serialize"
    )]
    pub offload: Offloads,
    /// Guests: where large receive offload (Ram thesis 5.1) coalesces the
    /// guest's received TCP segments: `guest` (netfront; the default for a
    /// `nic = "vif"` guest receiving by copy, as `bench ram` measured it
    /// faster), `driver` (netback; needs `offload = "tso"`) or `off`.
    pub lro: Option<String>,
    /// Driver domains: what the physical port does itself (Menon 2006
    /// §3.1, Figure 7), as for `offload`: `"none"`, `"csum"`, `"sg"`,
    /// `"sg+csum"`, `"tso"` or `"all"` (`true`, the default); the software
    /// offload driver does the rest (segments, checksums, linearizes).
    #[serde(
        default = "all_offloads",
        deserialize_with = "offload_set",
        serialize_with = "offloads_by_name::serialize"
    )]
    pub port_offload: Offloads,
    /// Driver domains: the size of the ports' receive buffers, `"page"`
    /// (Driver-none) or `"mtu"` (Driver-MTU); none: slots for whole GSO
    /// frames. See [`crate::port_buffer`].
    pub port_buffer: Option<PortBuffer>,
    /// Driver domains with an address: whether frames from the wires to
    /// that address reach its kernel through the bridge (`"bridge"`, the
    /// default) or straight from the port (`"kernel"`, as dom0's own
    /// traffic did); `"send"`: only its sends to the wire hosts go
    /// straight to their ports. See [`crate::local_delivery`].
    #[serde(default)]
    pub local_delivery: LocalDelivery,
    /// Driver domains: how a grant map is made (Menon 2006 §2), `"pte"`
    /// (the default: a page-table entry in a mirror of the granter's pool,
    /// as Xen's) or `"mmap"` (an `mmap` of the frame into a window).
    pub grant_maps: Option<GrantMaps>,
    /// Microseconds the domain keeps polling its event channels without
    /// blocking after its last work, before it sleeps; 0 (the default)
    /// blocks at once. Measured to cost more than it saves on 2 vCPUs.
    #[serde(default)]
    pub spin_us: u32,
    /// Guests: netfront and netback prefetch the next received packet's
    /// header while handling the current one (Ram thesis 5.2).
    #[serde(default)]
    pub prefetch: bool,
    /// Guests: the size of netfront's receive buffers (Ram thesis 5.3).
    #[serde(default)]
    pub rx_buffer: RxBuffer,
    /// What hv does when the domain's process exits (`never`, `on-crash`,
    /// `always`); by default driver domains restart after a crash and
    /// guests do not.
    pub restart: Option<Restart>,
    /// Driver domains: after a crash a new process takes the domain over
    /// in place, its vifs' rings, channels and store entries kept, so its
    /// guests run no handshake (as after an upgrade in place); a second
    /// crash within the crash window, or `false`, restarts it as a new
    /// domain whose guests reconnect (Menon 2006 §3).
    #[serde(default = "yes")]
    pub takeover: bool,
    /// Guests: the kind of virtual NIC (`vif`, `hosted` or `hvm`).
    #[serde(default)]
    pub nic: Nic,
    /// Hosted NIC (Sugerman §3.3): the VMM serves the Lance's ports itself
    /// (its register file lives in the guest's process) and only frame I/O
    /// switches to the VMApp. Off: every NIC port access is a world switch.
    #[serde(default = "yes")]
    pub hosted_ports_in_vmm: bool,
    /// Hosted NIC: up to 3 packets (Sugerman §3.3) wait in the Lance's ring
    /// and leave in one world switch, never past a timer tick. Needs
    /// `hosted_ports_in_vmm`.
    #[serde(default = "yes")]
    pub hosted_send_combining: bool,
    /// Hosted NIC: the VMApp learns of VMNet input from a shared bit vector
    /// the VMNet side sets, instead of a `select()` on every world switch.
    #[serde(default = "yes")]
    pub hosted_irq_bitvector: bool,
    /// HVM NIC (Zhang & Dong §5.1): where the guest's 8259A pair is
    /// emulated, `hv` (the default) or `dm` (the device model, as qemu-dm).
    pub hvm_pic: Option<HvmPic>,
    /// HVM NIC (§5.3): how the device model learns of received frames,
    /// `event` (it sleeps on its TAP; the default) or `poll` (a timer).
    pub hvm_rx: Option<HvmRx>,
    /// HVM NIC with `hvm_rx = "poll"`: the polling period in µs (default
    /// 5000, the paper's 5 ms).
    pub hvm_poll_us: Option<u32>,
    /// HVM NIC (§4.2): how hv's notification reaches the device model,
    /// `direct` (its doorbell wakes the device model; the default) or
    /// `upcall` (Xen's two hops: dom0's upcall handler, then the device model).
    pub hvm_wake: Option<HvmWake>,
    /// HVM NIC (§5.1, Table 4): the guest's periodic timer interrupt, in
    /// Hz (1..=1000); its handler touches the PIC four times, as Linux
    /// 2.6's `mask_and_ack_8259A` and `end_8259A_irq` do. None: no timer.
    pub hvm_timer_hz: Option<u32>,
    /// Event channels the domain may hold (Xen's `max_event_channels`);
    /// by default enough for every vif it can hold ([`DomainConfig::quotas`]).
    pub max_event_channels: Option<u32>,
    /// VMs: the vhost-user socket (absolute) the driver domain listens on,
    /// or dials when `socket_server = "vm"`.
    pub socket: Option<String>,
    /// VMs: who listens on `socket` (default [`SocketServer::Splitnet`]).
    pub socket_server: Option<SocketServer>,
    /// VMs: the driver domain's bridge the VM joins (default xenbr0).
    pub bridge: Option<String>,
    /// VMs: an access VLAN (1..=4094); none: untagged.
    pub vlan: Option<u16>,
    /// The core hv pins the domain's process to (sched_setaffinity), at
    /// start and at every restart; none: the scheduler's choice. `up
    /// --placement` overrides it (crate::placement).
    pub cpu: Option<usize>,
    /// The domain's share of the CPU against the others when they contend
    /// (Xen's credit-scheduler weight, 1..=65535): a domain of weight 512
    /// gets twice the CPU time of one of 256. By default 512 for a driver
    /// domain and 256 (Xen's default) for the rest: a driver domain answers
    /// the others' I/O, and Xen's operators weigh dom0 above its guests so
    /// that the guests it serves cannot starve it ([`DomainConfig::weight`]).
    #[serde(rename = "weight")]
    pub sched_weight: Option<u32>,
}

/// How a driver domain makes its grant maps (`grant_maps`).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum GrantMaps {
    /// A page-table entry in a mirror of the granter's pool.
    #[default]
    Pte,
    /// An `mmap` of each run of frames into a window.
    Mmap,
}

impl GrantMaps {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantMaps::Pte => "pte",
            GrantMaps::Mmap => "mmap",
        }
    }
}

/// Where an HVM guest's virtual PIC pair lives (`hvm_pic`).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum HvmPic {
    #[default]
    Hv,
    Dm,
}

impl HvmPic {
    pub fn as_str(self) -> &'static str {
        match self {
            HvmPic::Hv => "hv",
            HvmPic::Dm => "dm",
        }
    }
}

/// How an HVM guest's device model watches its TAP (`hvm_rx`).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum HvmRx {
    #[default]
    Event,
    Poll,
}

/// How hv wakes an HVM guest's device model (`hvm_wake`).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum HvmWake {
    #[default]
    Direct,
    Upcall,
}

impl HvmWake {
    pub fn as_str(self) -> &'static str {
        match self {
            HvmWake::Direct => "direct",
            HvmWake::Upcall => "upcall",
        }
    }
}

/// The paper's polling period (§5.3), the default of `hvm_poll_us`.
pub const DEFAULT_HVM_POLL_US: u32 = 5000;
/// The range `hvm_timer_hz` accepts (Linux 2.6's HZ was at most 1000).
pub const HVM_TIMER_HZ: std::ops::RangeInclusive<u32> = 1..=1000;
/// The range `hvm_poll_us` accepts.
pub const HVM_POLL_US: std::ops::RangeInclusive<u32> = 100..=1_000_000;

/// Who listens on a VM's vhost-user socket.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum SocketServer {
    /// hv listens; the VMM connects and, after a driver-domain restart,
    /// connects again (QEMU's `reconnect=1`).
    #[default]
    Splitnet,
    /// The VMM listens (QEMU's `server=on`, DPDK virtio-user's `server=1`,
    /// Cloud Hypervisor's `vhost_mode=server`); hv dials it for the driver
    /// domain, again after each restart, so a VMM that cannot reconnect
    /// keeps its link.
    Vm,
}

/// A guest's kind of virtual NIC.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Nic {
    /// The paravirtual split driver: netfront, rings, grants, netback.
    #[default]
    Vif,
    /// An emulated Am79C970A behind a hosted VMM and its VMApp (Sugerman 2001).
    Hosted,
    /// An emulated Am79C970A behind hv's I/O-request relay and a device model
    /// (Zhang & Dong).
    Hvm,
    /// virtio-net: the guest runs a vhost-user frontend over its own
    /// memory, served by its driver domain's vhost-user backend like a VM.
    Virtio,
}

impl Nic {
    pub fn as_str(self) -> &'static str {
        match self {
            Nic::Vif => "vif",
            Nic::Hosted => "hosted",
            Nic::Hvm => "hvm",
            Nic::Virtio => "virtio",
        }
    }
}

/// A guest with an emulated NIC: what hv needs to start its device side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmulatedNic {
    pub guest: String,
    pub kind: Nic,
    /// The driver domain whose namespace the device side runs in and whose
    /// bridge its host interface joins.
    pub backend: String,
    pub mac: String,
    pub ports_in_vmm: bool,
    pub send_combining: bool,
    pub irq_bitvector: bool,
    /// HVM: where the PIC pair lives.
    pub hvm_pic: HvmPic,
    /// HVM: the device model's polling period in µs; None: event-driven.
    pub hvm_poll_us: Option<u32>,
    /// HVM: how hv wakes the device model.
    pub hvm_wake: HvmWake,
    /// HVM: the guest's timer interrupts per second; 0: none.
    pub hvm_timer_hz: u32,
}

impl EmulatedNic {
    /// The host interface in the driver domain's namespace: VMNet's TAP
    /// (hosted) or the device model's (hvm).
    pub fn host_ifname(&self) -> String {
        Self::ifname_of(&self.guest)
    }

    /// The host interface of guest `guest`'s emulated NIC, in its driver
    /// domain's namespace.
    pub fn ifname_of(guest: &str) -> String {
        format!("vn-{guest}")
    }

    /// The HVM options in one line (for `status`).
    pub fn hvm_options(&self) -> String {
        let rx = match self.hvm_poll_us {
            Some(us) => format!("rx=poll poll_us={us}"),
            None => "rx=event".to_string(),
        };
        let timer = match self.hvm_timer_hz {
            0 => String::new(),
            hz => format!(" timer_hz={hz}"),
        };
        format!(
            "pic={} {rx} wake={}{timer}",
            self.hvm_pic.as_str(),
            self.hvm_wake.as_str()
        )
    }
}

impl DomainConfig {
    /// The restart policy in force: the configured one, else `on-crash` for
    /// a driver domain (Xen's answer to a failed driver domain is to reboot
    /// it) and `never` for a guest.
    pub fn restart_policy(&self) -> Restart {
        self.restart.unwrap_or(match self.kind {
            DomainKind::Driver => Restart::OnCrash,
            DomainKind::Guest | DomainKind::Vm => Restart::Never,
        })
    }

    /// The scheduling weight in force: the configured one, else 512 for a
    /// driver domain and 256 for the rest (`weight`).
    pub fn weight(&self) -> u32 {
        self.sched_weight.unwrap_or(match self.kind {
            DomainKind::Driver => 2 * crate::sched::DEFAULT_WEIGHT,
            DomainKind::Guest | DomainKind::Vm => crate::sched::DEFAULT_WEIGHT,
        })
    }

    /// The nice value its weight gives its process ([`crate::sched::nice_of`]).
    pub fn nice(&self) -> i32 {
        crate::sched::nice_of(self.weight())
    }
}

/// When hv restarts a domain whose process exited on its own.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// Never: the domain is destroyed.
    Never,
    /// When it died of a signal or exited with a failure status.
    OnCrash,
    /// Whenever it exits.
    Always,
}

impl Restart {
    /// Whether a process that ended with `status` comes back.
    pub fn applies(self, status: std::process::ExitStatus) -> bool {
        match self {
            Restart::Never => false,
            Restart::OnCrash => !status.success(),
            Restart::Always => true,
        }
    }

    /// [`Restart::applies`] to a process reaped with `status`: one an hv
    /// before this one started (it died) is not this one's child, and its
    /// unknown status is taken as a crash.
    pub fn applies_to(self, status: &std::io::Result<std::process::ExitStatus>) -> bool {
        match status {
            Ok(s) => self.applies(*s),
            Err(_) => self != Restart::Never,
        }
    }
}

/// The longest spin before sleeping a topology may ask for (10 ms).
pub const MAX_SPIN_US: u32 = 10_000;

fn yes() -> bool {
    true
}

/// An offload capability set (see [`abi::offloads::Caps`]).
pub use abi::offloads::Caps as Offloads;

fn all_offloads() -> Offloads {
    Offloads::ALL
}

/// An offload set as its name, for what hv carries across its upgrade.
pub(crate) mod offloads_by_name {
    use super::Offloads;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(o: &Offloads, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&o.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Offloads, D::Error> {
        Offloads::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `offload`/`port_offload`: a boolean (the old form) or a set's name.
fn offload_set<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Offloads, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Bool(bool),
        Name(String),
    }
    match Form::deserialize(d) {
        Ok(Form::Bool(b)) => Ok(Offloads::from_bool(b)),
        Ok(Form::Name(n)) => Offloads::parse(&n).map_err(serde::de::Error::custom),
        Err(_) => Err(serde::de::Error::custom(format!(
            "an offload set is one of {}",
            abi::offloads::VALID
        ))),
    }
}

/// RX transfer mode of a virtual NIC.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RxMode {
    /// Grant copy into guest-posted buffers (Menon 2006 §4.2; later Xen).
    #[default]
    Copy,
    /// Xen 2.0 page flip: the page's ownership moves to the guest.
    Flip,
}

/// TX transfer mode of a virtual NIC.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TxMode {
    /// Menon 2006 §4.1 (the I/O channel): netback copies only the headers
    /// and the port gathers the payload straight from the guest's buffers:
    /// under `grants = "ngm"` through the pool netback maps once, under
    /// `"hv-copy"` through a read-only window while hv holds the grants.
    #[default]
    Gather,
    /// The whole packet is copied out of the guest's buffers (by hv under
    /// `hv-copy`, by netback through the mapped pool under `ngm`).
    Copy,
    /// Xen 2.0: netback maps each packet's page and unmaps it after sending.
    Map,
    /// Menon 2006 §4.1 as Xen ran it (`hv-copy` only): netback reads the
    /// guest's grant entries itself, copies the headers and sends the
    /// payload through the read-only window, with no hypercall; nothing
    /// pins the pages, so a guest that ends a grant early spoils only its
    /// own frame.
    Header,
}

/// The size of a guest's receive buffers (Ram thesis 5.3).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RxBuffer {
    /// One buffer per page.
    #[default]
    Page,
    /// Two 2 KiB buffers per page (`feature-rx-half-page`): a page's grant
    /// serves twice the packets. Needs `rx_mode = "copy"` and `offload`
    /// (a larger frame spans buffers, which takes scatter-gather).
    Half,
}

/// How guest buffers reach the driver domain.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Grants {
    /// Ram thesis ch. 4, the new grant mechanism: hv validates a grant once,
    /// at creation, into a translation table the driver domain reads; the
    /// driver domain maps the guest's I/O pool once and uses no hypercall
    /// per packet.
    #[default]
    Ngm,
    /// Xen's grant table v1 (the thesis's "Orig"): every packet's buffers are
    /// granted and revoked, and hv copies, maps or transfers each one.
    HvCopy,
}

/// Where large receive offload runs for a guest's vifs (Ram thesis 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
pub enum LroAt {
    #[default]
    Off,
    /// netfront coalesces what it writes to the guest's TAP.
    Guest,
    /// netback coalesces what it delivers into the guest's buffers.
    Driver,
}

impl LroAt {
    pub fn as_str(self) -> &'static str {
        match self {
            LroAt::Off => "off",
            LroAt::Guest => "guest",
            LroAt::Driver => "driver",
        }
    }
}

impl std::str::FromStr for LroAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(LroAt::Off),
            "guest" => Ok(LroAt::Guest),
            "driver" => Ok(LroAt::Driver),
            _ => Err(format!("lro = {s:?}: use \"off\", \"guest\" or \"driver\"")),
        }
    }
}

impl DomainConfig {
    /// Where LRO runs for this guest ([`LroAt::Off`] for a value
    /// validation refused).
    pub fn lro_at(&self) -> LroAt {
        match self.lro.as_deref() {
            Some(v) => v.parse().unwrap_or_default(),
            None if self.kind == DomainKind::Guest
                && self.nic == Nic::Vif
                && self.rx_mode == RxMode::Copy =>
            {
                LroAt::Guest
            }
            None => LroAt::Off,
        }
    }
}

/// The `lro` key: a known value, on a guest with a virtual NIC, and
/// `driver` only where the guest takes GSO frames.
fn check_lro(d: &DomainConfig) -> Result<(), String> {
    let Some(v) = d.lro.as_deref() else {
        return Ok(());
    };
    let at: LroAt = v.parse().map_err(|e| format!("domain {:?}: {e}", d.name))?;
    if at == LroAt::Off {
        return Ok(());
    }
    if d.kind != DomainKind::Guest || d.nic != Nic::Vif {
        return Err(format!(
            "domain {:?}: lro applies to guests with nic = \"vif\" only",
            d.name
        ));
    }
    if at == LroAt::Driver && !(d.offload.tso4 && d.offload.tso6) {
        return Err(format!(
            "domain {:?}: lro = \"driver\" hands the guest GSO frames and needs offload = \"tso\" (or true)",
            d.name
        ));
    }
    Ok(())
}

impl Grants {
    pub fn as_str(self) -> &'static str {
        match self {
            Grants::Ngm => "ngm",
            Grants::HvCopy => "hv-copy",
        }
    }
}

impl std::str::FromStr for Grants {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ngm" => Ok(Grants::Ngm),
            "hv-copy" => Ok(Grants::HvCopy),
            _ => Err(format!(
                "unknown grant mechanism {s:?}: use \"ngm\" or \"hv-copy\""
            )),
        }
    }
}

impl RxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RxMode::Copy => "copy",
            RxMode::Flip => "flip",
        }
    }
}

impl TxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TxMode::Gather => "gather",
            TxMode::Copy => "copy",
            TxMode::Map => "map",
            TxMode::Header => "header",
        }
    }
}

/// Named vif configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// splitnet's fast path: the new grant mechanism, TX gather, RX with
    /// one copy, offloads on.
    Default,
    /// Xen's grant-copy path (the Ram thesis's "Orig" receive; its transmit
    /// mapped the guest's pages instead): hv copies every packet, offloads on.
    HvCopy,
    /// The seed papers' Xen 2.0 baseline: RX page flip, TX map, no offloads.
    Baseline,
}

impl Preset {
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Default => "default",
            Preset::HvCopy => "hv-copy",
            Preset::Baseline => "baseline",
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Preset::Default),
            "hv-copy" => Ok(Preset::HvCopy),
            "baseline" => Ok(Preset::Baseline),
            _ => Err(format!("unknown preset {s:?}: use \"default\" (ngm, TX gather, RX copy, offloads, LRO in netfront), \"hv-copy\" (hv copies both ways, offloads) or \"baseline\" (flip+map, no offloads)")),
        }
    }
}

/// Frames a guest needs per vif (netfront's `VIF_FRAMES`): 2 ring pages,
/// 256 TX and 256 RX buffers, about 2 MiB.
pub const GUEST_MIN_FRAMES: u32 = 2 + 2 * 256;
/// Frames a guest with an emulated NIC (hosted or hvm) needs: the guest
/// driver's init block, rings and buffers from guest-physical 64 KiB (about
/// 140 KiB in all).
pub const HOSTED_MIN_FRAMES: u32 = 64;
/// A driver domain's pool: what it keeps, then what each vif needs.
pub use abi::vif_backend::{DRIVER_BASE_FRAMES, DRIVER_FRAMES_PER_VIF};

/// Most vifs a guest may have (netfront's pool layout, `MAX_VIFS` there).
/// Each takes [`GUEST_MIN_FRAMES`] of its pool: vif *h* lives at frame
/// `h * GUEST_MIN_FRAMES`, so a guest holds the handles its memory reaches.
pub const MAX_GUEST_VIFS: u32 = 8;
/// Event channels a vif takes at each end (split TX and RX channels).
pub const EVENT_CHANNELS_PER_VIF: u32 = 2;
/// Largest `max_event_channels` (Xen's FIFO event-channel ABI's limit).
pub(super) const MAX_EVENT_CHANNELS: u32 = 131_072;
/// Store nodes and watches a domain may use per vif it can hold, over the
/// defaults (a backend directory holds about 25 nodes).
const STORE_NODES_PER_VIF: usize = 64;
const STORE_WATCHES_PER_VIF: usize = 4;

impl DomainConfig {
    /// The most vifs the domain can hold: a driver domain as many as its
    /// memory has staging areas for, a guest [`MAX_GUEST_VIFS`].
    pub fn vif_capacity(&self) -> u32 {
        match self.kind {
            DomainKind::Driver => {
                self.memory_frames.saturating_sub(DRIVER_BASE_FRAMES) / DRIVER_FRAMES_PER_VIF
            }
            DomainKind::Guest => MAX_GUEST_VIFS,
            DomainKind::Vm => 0,
        }
    }

    /// What hv lets the domain hold: the defaults, plus room for every vif
    /// it can hold, so that its memory, not a quota, bounds how many it
    /// serves. `max_event_channels` overrides the event channels.
    pub fn quotas(&self) -> hv::Quotas {
        let base = hv::Quotas::default();
        let vifs = self.vif_capacity() as usize;
        hv::Quotas {
            event_channels: self.max_event_channels.map_or(
                base.event_channels + EVENT_CHANNELS_PER_VIF as usize * vifs,
                |n| n as usize,
            ),
            store_nodes: base.store_nodes + STORE_NODES_PER_VIF * vifs,
            store_watches: base.store_watches + STORE_WATCHES_PER_VIF * vifs,
        }
    }
}

/// The pool a domain gets without `memory_frames`: 2048 frames (8 MiB),
/// or more when its vifs need more.
pub(super) const DEFAULT_FRAMES: u32 = 2048;

/// `memory_frames` as written: 0 is refused here, since 0 stands for
/// "unset" until [`Topology::parse`] fills the default in.
fn frames<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(serde::de::Error::custom(
            "memory_frames must be 1..=1048576 (4 KiB each)",
        )),
        n => Ok(n),
    }
}

fn unset_frames(frames: &u32) -> bool {
    *frames == 0
}

impl DomainConfig {
    /// The most vif handles a guest's pool holds, up to [`MAX_GUEST_VIFS`].
    pub fn guest_vif_room(&self) -> u32 {
        (self.memory_frames / GUEST_MIN_FRAMES).min(MAX_GUEST_VIFS)
    }
}
fn default_grant_frames() -> u32 {
    4
}

pub(super) fn check_cidr(field: &str, v: &Option<String>, v6: bool) -> Result<(), String> {
    let Some(s) = v else { return Ok(()) };
    let (ip, len) = s
        .split_once('/')
        .ok_or_else(|| format!("{field} = {s:?} needs a prefix length, like \"10.0.0.1/24\""))?;
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("{field} = {s:?} is not an IP address"))?;
    let max = if ip.is_ipv6() { 128 } else { 32 };
    let len: u32 = len
        .parse()
        .map_err(|_| format!("{field} = {s:?} has a bad prefix length"))?;
    if len > max {
        return Err(format!("{field} = {s:?}: prefix length above {max}"));
    }
    if ip.is_ipv6() != v6 {
        return Err(format!("{field} = {s:?} is the wrong IP version"));
    }
    Ok(())
}

pub(crate) fn check_name(what: &str, n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= MAX_NAME
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && n.starts_with(|c: char| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} name {n:?} must be 1-{MAX_NAME} characters of a-z, 0-9 and '-', starting with a letter"
        ))
    }
}

/// One domain's own settings, each in its range: memory, hugepages, grant
/// frames, spin, addresses, MAC, modes and NIC.
pub(super) fn check_domain_settings(d: &DomainConfig) -> Result<(), String> {
    if d.memory_frames == 0 || d.memory_frames > 1 << 20 {
        return Err(format!(
            "domain {:?}: memory_frames must be 1..=1048576 (4 KiB each)",
            d.name
        ));
    }
    if d.hugepages && !d.memory_frames.is_multiple_of(512) {
        return Err(format!(
            "domain {:?}: with hugepages = true, memory_frames must be a multiple of 512 (2 MiB)",
            d.name
        ));
    }
    if d.grant_frames == 0 || d.grant_frames > 64 {
        return Err(format!("domain {:?}: grant_frames must be 1..=64", d.name));
    }
    if d.sched_weight
        .is_some_and(|w| !crate::sched::WEIGHTS.contains(&w))
    {
        return Err(format!(
            "domain {:?}: weight must be {}..={} (Xen's credit-scheduler weight; 256 is a guest's default)",
            d.name,
            crate::sched::WEIGHTS.start(),
            crate::sched::WEIGHTS.end()
        ));
    }
    if d.spin_us > MAX_SPIN_US {
        return Err(format!(
            "domain {:?}: spin_us must be 0..={MAX_SPIN_US}",
            d.name
        ));
    }
    check_cidr(&format!("domain {:?} address", d.name), &d.address, false)?;
    check_cidr(&format!("domain {:?} ipv6", d.name), &d.ipv6, true)?;
    if let Some(m) = &d.mac {
        abi::xenbus::parse_mac(m).map_err(|e| format!("domain {:?} mac: {e}", d.name))?;
    }
    check_modes(d)?;
    check_nic(d)?;
    check_lro(d)
}

/// No guest settings on a driver domain, and no driver domain's on a guest.
pub(super) fn check_kind_settings(d: &DomainConfig) -> Result<(), String> {
    if d.kind != DomainKind::Driver && d.grant_maps.is_some() {
        return Err(format!(
            "domain {:?}: grant_maps applies to driver domains only (they make the maps)",
            d.name
        ));
    }
    if d.kind == DomainKind::Driver && (d.backend.is_some() || d.mac.is_some() || !d.vif.is_empty())
    {
        return Err(format!(
            "domain {:?} is a driver domain: backend, mac and vif are guest settings",
            d.name
        ));
    }
    Ok(())
}

fn check_modes(d: &DomainConfig) -> Result<(), String> {
    match (d.grants, d.tx_mode, d.rx_mode) {
        (Grants::Ngm, TxMode::Map, _) | (Grants::Ngm, _, RxMode::Flip) => Err(format!(
            "domain {:?}: grants = \"ngm\" maps the guest's I/O pool once; tx_mode = \"map\" and rx_mode = \"flip\" need grants = \"hv-copy\"",
            d.name
        )),
        (Grants::Ngm, TxMode::Header, _) => Err(format!(
            "domain {:?}: tx_mode = \"header\" reads Xen's grant table and needs grants = \"hv-copy\"; under grants = \"ngm\", tx_mode = \"gather\" makes no hypercall either",
            d.name
        )),
        _ if d.rx_buffer == RxBuffer::Half && (d.rx_mode == RxMode::Flip || !d.offload.sg) => {
            Err(format!(
                "domain {:?}: rx_buffer = \"half\" needs rx_mode = \"copy\" (a flipped page is one buffer) and scatter-gather (offload = \"sg\", \"sg+csum\" or \"tso\": a frame over 2 KiB spans buffers); rx_buffer is \"page\" or \"half\"",
                d.name
            ))
        }
        _ => Ok(()),
    }
}

fn check_nic(d: &DomainConfig) -> Result<(), String> {
    let hosted_keys = !d.hosted_ports_in_vmm || !d.hosted_send_combining || !d.hosted_irq_bitvector;
    let hvm_keys = d.hvm_pic.is_some()
        || d.hvm_rx.is_some()
        || d.hvm_poll_us.is_some()
        || d.hvm_wake.is_some()
        || d.hvm_timer_hz.is_some();
    match d.nic {
        Nic::Vif | Nic::Hvm if hosted_keys => Err(format!(
            "domain {:?}: the hosted_* keys apply to nic = \"hosted\" only",
            d.name
        )),
        Nic::Vif | Nic::Hosted if hvm_keys => Err(format!(
            "domain {:?}: the hvm_* keys apply to nic = \"hvm\" only",
            d.name
        )),
        _ if d.kind == DomainKind::Driver && d.nic != Nic::Vif => Err(format!(
            "domain {:?} is a driver domain: nic is a guest setting",
            d.name
        )),
        Nic::Hosted if d.hosted_send_combining && !d.hosted_ports_in_vmm => Err(format!(
            "domain {:?}: hosted_send_combining leaves packets in the Lance's ring held by the VMM, \
             so it needs hosted_ports_in_vmm = true (or set hosted_send_combining = false)",
            d.name
        )),
        Nic::Hvm if d.hvm_poll_us.is_some() && d.hvm_rx != Some(HvmRx::Poll) => Err(format!(
            "domain {:?}: hvm_poll_us is the polling period of hvm_rx = \"poll\" (set it, or drop hvm_poll_us)",
            d.name
        )),
        Nic::Hvm if d.hvm_timer_hz.is_some_and(|hz| !HVM_TIMER_HZ.contains(&hz)) => Err(format!(
            "domain {:?}: hvm_timer_hz must be {}..={}",
            d.name,
            HVM_TIMER_HZ.start(),
            HVM_TIMER_HZ.end()
        )),
        Nic::Hvm if d.hvm_poll_us.is_some_and(|us| !HVM_POLL_US.contains(&us)) => Err(format!(
            "domain {:?}: hvm_poll_us must be {}..={}",
            d.name,
            HVM_POLL_US.start(),
            HVM_POLL_US.end()
        )),
        _ => Ok(()),
    }
}
