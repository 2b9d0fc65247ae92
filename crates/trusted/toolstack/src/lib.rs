//! The toolstack (Xen's xl and its libraries): what turns a topology file
//! into running domains and what answers the user about them. It is not
//! the hypervisor: it acts on hv only through hv's toolstack requests, as
//! domain 0. Its supervisor runs inside the `splitnet-hv` process, so this
//! crate is part of the trusted computing base.
//!
//! - [`topology`]: the topology file, parsed and checked (each feature's
//!   checks listed in [`checks`]), and [`tuning`]
//!   what `up`'s options change in it;
//! - [`daemon`]: the daemon's wiring: hv, the supervisor, the toolstack socket;
//!   [`store`] its store writes (a vif's frontend and backend directories);
//! - [`supervisor`]: the domains' processes, namespaces, cgroups, restart policy;
//! - [`host`]: host plumbing (network namespaces, veth, cgroups, `ip`);
//! - [`uplink`]: driver domains' uplinks (`[[port]]`: host NIC, macvlan,
//!   nat, route, vxlan), their undo journal and keeper; [`kept_ports`] the
//!   uplink sockets hv holds across a driver domain's restarts;
//! - [`status`], [`metrics`], [`listen`]: what the user is told (the status
//!   document, the Prometheus text, its HTTP endpoint; `vhost_status` its
//!   vhost-user vifs, `vxlan_status` its tunnels); the CLI prints them;
//! - [`handover`]: hv's state as one program of it hands it to the next
//!   (an upgrade in place); [`guardian`]: the process that holds hv's
//!   last record and starts hv again on it when hv dies;
//! - [`readiness`]: when a topology is up; [`notify`]: telling a service
//!   manager so (`sd_notify`);
//! - [`capture`]: which driver domain serves a capture target;
//! - [`hotplug`]: restart, network-attach, network-detach and network-list;
//! - [`apply`]: the plan that brings a running topology to a changed one;
//! - [`placement`]: which core each domain's process runs on (`cpu`,
//!   `up --placement`);
//! - [`vifspec`]: xl's vif syntax, for the topology and network-attach;
//! - [`vifscript`]: a vif's hotplug script (`script=`), run in its driver domain;
//! - [`vm`]: vhost-user vifs (`kind = "vm"`, `nic = "virtio"`): their
//!   sockets, store entries and the VMM arguments that reach them.
#![forbid(unsafe_code)]

pub mod apply;
pub mod capture;
pub mod cgroup;
pub mod checks;
pub mod daemon;
pub mod guardian;
pub mod handover;
pub mod host;
pub mod hotplug;
pub mod hugepages;
pub mod kept_ports;
pub mod laps;
pub mod listen;
pub mod local_delivery;
mod logs;
pub mod metrics;
pub mod notify;
pub mod placement;
pub mod port_buffer;
pub mod queues;
pub mod readiness;
pub mod rootless;
pub mod sandbox;
pub mod sched;
pub mod status;
pub mod store;
pub mod supervisor;
pub mod thp_shmem;
pub mod topology;
pub mod tuning;
pub mod underlay;
pub mod uplink;
mod vhost_status;
pub mod vifscript;
pub mod vifspec;
pub mod vm;
mod vxlan_status;
