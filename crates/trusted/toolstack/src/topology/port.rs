//! The topology file's port settings: `[[port]]` sections (a driver
//! domain's uplinks, resolved and set up by [`crate::uplink`]) and a driver
//! domain's `port_buffer` (what it means: [`crate::port_buffer`]). Plain
//! data, so that the model holds them without depending on the features.

use serde::Deserialize;

/// Largest MTU an uplink may have (jumbo frames).
pub const MAX_MTU: u32 = 9000;
/// Smallest MTU an IPv4 interface may have (RFC 791).
pub const MIN_MTU: u32 = 68;
/// Most dedicated receive queues a port offers (Ram thesis ch. 3).
pub const MAX_QUEUES: u16 = 64;

/// What a driver domain's port is joined to on the host.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UplinkKind {
    /// A veth to the synthetic `wire` host (`[wire]`).
    Wire,
    /// A host interface moved into the driver domain's namespace.
    Host,
    /// A macvlan on a host interface, with one member per guest MAC.
    Macvlan,
    /// A veth to the host, masqueraded by nftables, with dnsmasq (vif-nat).
    Nat,
    /// A veth to the host, with host routes and proxy ARP (vif-route).
    Route,
    /// The kernel's VXLAN to other hosts ([`crate::uplink::vxlan`]).
    Vxlan,
    /// A veth to a namespace of hv's that pasta joins to the host's
    /// network, masqueraded there: the uplink that needs no root
    /// ([`crate::uplink::pasta`]).
    Pasta,
}

impl UplinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            UplinkKind::Wire => "wire",
            UplinkKind::Host => "host",
            UplinkKind::Macvlan => "macvlan",
            UplinkKind::Nat => "nat",
            UplinkKind::Route => "route",
            UplinkKind::Vxlan => "vxlan",
            UplinkKind::Pasta => "pasta",
        }
    }
}

/// One `[[port]]` section.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// The driver domain whose port this is.
    pub driver: String,
    /// The driver domain's bridge the port joins (default
    /// [`abi::xenbus::DEFAULT_BRIDGE`]).
    pub bridge: Option<String>,
    pub kind: UplinkKind,
    /// `host` and `macvlan`: the host interface.
    pub iface: Option<String>,
    /// The uplink interface's MTU ([`MIN_MTU`]..=[`MAX_MTU`]).
    pub mtu: Option<u32>,
    /// The port is an access port of this VLAN (1..=4094); else a trunk.
    pub vlan: Option<u16>,
    /// Dedicated receive queues it offers (0..=[`MAX_QUEUES`]; default 8).
    pub queues: Option<u16>,
    /// `nat` and `pasta`: the host side's address with the guests'
    /// prefix, e.g. "10.78.0.1/24"; a nat uplink's dnsmasq leases the
    /// upper half of it.
    pub subnet: Option<String>,
    /// `pasta`: host ports forwarded to guests, each
    /// "tcp|udp:HOSTPORT:GUESTADDR:PORT".
    pub publish: Option<Vec<String>>,
    /// `macvlan`: the primary macvlan's own MAC (default: a locally
    /// administered one derived from the driver domain and `iface`).
    pub mac: Option<String>,
    /// `vxlan`: the VNI (1..=16777215), one per bridge.
    pub vni: Option<u32>,
    /// `vxlan`: the VTEP's IPv4 address, on the driver domain's `ul0`.
    pub local: Option<String>,
    /// `vxlan`: the other VTEPs (head-end replication; with `evpn`, the
    /// iBGP neighbours).
    pub peers: Option<Vec<String>>,
    /// `vxlan`: a multicast group instead of `peers`.
    pub group: Option<String>,
    /// `vxlan`: peers and MACs from BGP EVPN (FRR); default false.
    pub evpn: Option<bool>,
    /// `vxlan` with `evpn`: the iBGP AS (default 65000).
    pub asn: Option<u32>,
    /// `vxlan`: who pays the 50 bytes of encapsulation (default guests).
    pub mtu_budget: Option<MtuBudget>,
    /// The kernel's GRO on the port, coalescing the frames that arrive
    /// there as a NIC's driver does (default on, but off for `pasta`, for
    /// a driver domain with `port_buffer`, whose frames stay MTU-sized, and
    /// behind guests with `mq`, whose queues place frames directly; the
    /// topology's `port_gro` sets every port's).
    pub gro: Option<bool>,
}

/// Who pays for the encapsulation.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MtuBudget {
    /// The guests: their vifs get 1450 unless a vif sets `mtu`.
    #[default]
    Guests,
    /// The underlay: its links are made 1550, refused if the host's are smaller.
    Underlay,
}

impl MtuBudget {
    pub fn as_str(self) -> &'static str {
        match self {
            MtuBudget::Guests => "guests",
            MtuBudget::Underlay => "underlay",
        }
    }
}

/// A driver domain's receive buffers (`port_buffer`, see
/// [`crate::port_buffer`]).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PortBuffer {
    /// Driver-none: one 4 KiB page-aligned buffer per frame.
    Page,
    /// Driver-MTU: MTU-sized slots packed into pages.
    Mtu,
}

/// Where frames for a driver domain's own address are handed to its
/// kernel (`local_delivery`, see [`crate::local_delivery`]).
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LocalDelivery {
    /// Through the bridge: the port's socket, then a write to the TAP.
    #[default]
    Bridge,
    /// By the port's own kernel, as dom0's NIC driver handed them up.
    Kernel,
    /// Only the way out by the kernel: what the driver domain sends to a
    /// wire host leaves its TAP for the host's port, while frames to it
    /// still cross the ports' buffers and the bridge (with `port_buffer`).
    Send,
}

impl LocalDelivery {
    pub fn as_str(self) -> &'static str {
        match self {
            LocalDelivery::Bridge => "bridge",
            LocalDelivery::Kernel => "kernel",
            LocalDelivery::Send => "send",
        }
    }
}

impl PortBuffer {
    pub fn as_str(self) -> &'static str {
        match self {
            PortBuffer::Page => "page",
            PortBuffer::Mtu => "mtu",
        }
    }
}
