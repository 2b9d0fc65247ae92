//! Cost classes (Ram's thesis, Table 2.1): where a function's cycles go in
//! the split driver architecture.

use crate::attribution::DomainKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The class of work a function does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostClass {
    /// The hypervisor (the hv daemon), except its copies and grant operations.
    Hypervisor,
    /// Copies between domains' memory made by the hypervisor (grant copy).
    InterDomainCopy,
    /// The driver: our port to the wire and the kernel's packet/veth/tun drivers.
    Driver,
    /// The guest's netfront.
    Netfront,
    /// The driver domain's netback.
    Netback,
    /// Protocol stacks and bridging, in the kernel and ours.
    Network,
    /// Grant table operations: acquire, release, map, unmap, transfer.
    Grant,
    /// Copies between the kernel and user space.
    Usercopy,
    /// Everything else.
    Other,
}

impl CostClass {
    /// Every class, in table order.
    pub const ALL: [CostClass; 9] = [
        CostClass::Hypervisor,
        CostClass::InterDomainCopy,
        CostClass::Driver,
        CostClass::Netfront,
        CostClass::Netback,
        CostClass::Network,
        CostClass::Grant,
        CostClass::Usercopy,
        CostClass::Other,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            CostClass::Hypervisor => "hypervisor",
            CostClass::InterDomainCopy => "inter_domain_copy",
            CostClass::Driver => "driver",
            CostClass::Netfront => "netfront",
            CostClass::Netback => "netback",
            CostClass::Network => "network",
            CostClass::Grant => "grant",
            CostClass::Usercopy => "usercopy",
            CostClass::Other => "other",
        }
    }
}

impl fmt::Display for CostClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn starts_with_any(s: &str, prefixes: &[&str]) -> bool {
    prefixes.iter().any(|p| s.starts_with(p))
}

/// The libc/compiler memory copy routines.
fn is_memcpy(f: &str) -> bool {
    starts_with_any(
        f,
        &[
            "memcpy",
            "memmove",
            "__memcpy",
            "__memmove",
            "core::intrinsics::copy",
        ],
    ) || f.contains("copy_nonoverlapping")
}

/// Kernel <-> user copies.
fn is_usercopy(f: &str) -> bool {
    starts_with_any(
        f,
        &[
            "copy_user",
            "__copy_user",
            "_copy_to_user",
            "_copy_from_user",
            "__copy_to_user",
            "__copy_from_user",
            "rep_movs",
            "copyout",
            "copyin",
            "skb_copy_datagram_",
            "_copy_to_iter",
            "_copy_from_iter",
            "copy_page_to_iter",
            "copy_page_from_iter",
            "copy_to_user",
            "copy_from_user",
        ],
    )
}

fn is_kernel_driver(f: &str, module: &str) -> bool {
    matches!(module, "veth" | "tun")
        || starts_with_any(
            f,
            &[
                "packet_",
                "tpacket_",
                "__packet_",
                "veth_",
                "tun_",
                "__tun_",
            ],
        )
}

fn is_kernel_network(f: &str, module: &str) -> bool {
    matches!(
        module,
        "bridge" | "br_netfilter" | "nf_conntrack" | "nf_tables"
    ) || starts_with_any(
        f,
        &[
            "tcp_",
            "__tcp_",
            "ip_",
            "__ip_",
            "ipv6_",
            "ip6_",
            "udp_",
            "__udp",
            "udp4_",
            "udpv6_",
            "__netif_",
            "netif_",
            "net_rx_action",
            "napi_",
            "__napi_",
            "br_",
            "dev_",
            "__dev_",
            "skb_",
            "__skb_",
            "inet_",
            "sock_",
            "__sock_",
            "sk_",
            "nf_",
            "neigh_",
            "eth_",
            "process_backlog",
            "validate_xmit",
            "sch_direct_xmit",
            "__qdisc_",
            "csum_partial",
        ],
    )
}

/// The cost class of `function` (demangled) in `module`, sampled in a domain
/// of kind `kind`. Usercopy is checked before the `skb_` network prefix, so
/// `skb_copy_datagram_iter` is usercopy.
pub fn cost_class(function: &str, module: &str, kind: DomainKind) -> CostClass {
    let f = function;
    // Our own Rust code, by module path (also inside trait impls: `<a::b as T>::f`).
    if f.contains("splitnet_hv::grant") {
        let last = f.rsplit("::").next().unwrap_or(f);
        if last.starts_with("copy") {
            return CostClass::InterDomainCopy;
        }
        if starts_with_any(last, &["acquire", "release", "map", "unmap", "transfer"]) {
            return CostClass::Grant;
        }
    }
    if kind == DomainKind::Hv {
        if is_memcpy(f) {
            return CostClass::InterDomainCopy;
        }
        if f.contains("splitnet_hv::grant::") {
            return CostClass::Grant;
        }
        return CostClass::Hypervisor;
    }
    // The new grant mechanism's checks, done by the domains themselves.
    if f.contains("splitnet_hypercall::ngm_client") {
        return CostClass::Grant;
    }
    // A domain's calls into hv (its client library), and hv's own code.
    if f.contains("splitnet_hv::") || f.contains("splitnet_hypercall::") {
        return CostClass::Hypervisor;
    }
    if f.contains("splitnet_net::netfront") {
        return CostClass::Netfront;
    }
    if f.contains("splitnet_net::netback") {
        return CostClass::Netback;
    }
    if f.contains("splitnet_net::bridge") || f.contains("splitnet_net::offload") {
        return CostClass::Network;
    }
    if f.contains("splitnet_net::port")
        || f.contains("splitnet_sys::packet")
        || f.contains("splitnet_sys::tap")
    {
        return CostClass::Driver;
    }
    if f.contains("::") {
        return CostClass::Other;
    }
    // C names: the kernel's (and libc's).
    if is_usercopy(f) {
        return CostClass::Usercopy;
    }
    if is_kernel_driver(f, module) {
        return CostClass::Driver;
    }
    if is_kernel_network(f, module) {
        return CostClass::Network;
    }
    CostClass::Other
}

#[cfg(test)]
mod tests {
    use super::*;
    use CostClass::*;

    #[test]
    fn table_of_real_looking_names() {
        let d = DomainKind::Domain;
        let cases: &[(&str, &str, DomainKind, CostClass)] = &[
            (
                "splitnet_hv::grant::copy_one",
                "splitnet",
                DomainKind::Hv,
                InterDomainCopy,
            ),
            (
                "splitnet_hv::grant::copy_batch",
                "splitnet",
                DomainKind::Hv,
                InterDomainCopy,
            ),
            (
                "__memmove_avx_unaligned_erms",
                "libc.so.6",
                DomainKind::Hv,
                InterDomainCopy,
            ),
            (
                "splitnet_hv::grant::acquire",
                "splitnet",
                DomainKind::Hv,
                Grant,
            ),
            (
                "splitnet_hv::grant::release",
                "splitnet",
                DomainKind::Hv,
                Grant,
            ),
            (
                "splitnet_hv::grant::transfer",
                "splitnet",
                DomainKind::Hv,
                Grant,
            ),
            (
                "splitnet_hv::evtchn::EventChannels::send",
                "splitnet",
                DomainKind::Hv,
                Hypervisor,
            ),
            (
                "splitnet_toolstack::daemon::serve",
                "splitnet",
                DomainKind::Hv,
                Hypervisor,
            ),
            ("epoll_wait", "kernel", DomainKind::Hv, Hypervisor),
            ("__libc_recvmsg", "libc.so.6", DomainKind::Hv, Hypervisor),
            (
                "splitnet_hypercall::client::Client::hypercall",
                "splitnet",
                d,
                Hypervisor,
            ),
            (
                "<splitnet_hypercall::ngm_client::NgmView>::acquire",
                "splitnet",
                d,
                Grant,
            ),
            (
                "<splitnet_hv::grant::GrantTable>::map",
                "splitnet",
                d,
                Grant,
            ),
            (
                "splitnet_net::netfront::Netfront::poll",
                "splitnet",
                d,
                Netfront,
            ),
            (
                "<splitnet_net::netfront::Netfront as core::ops::Drop>::drop",
                "splitnet",
                d,
                Netfront,
            ),
            (
                "splitnet_net::netback::Netback::tx_batch",
                "splitnet",
                d,
                Netback,
            ),
            (
                "splitnet_net::bridge::Bridge::forward",
                "splitnet",
                d,
                Network,
            ),
            ("splitnet_net::offload::segment", "splitnet", d, Network),
            ("splitnet_net::port::Port::send", "splitnet", d, Driver),
            (
                "splitnet_sys::packet::PacketSocket::recv",
                "splitnet",
                d,
                Driver,
            ),
            ("packet_rcv", "kernel", d, Driver),
            ("tpacket_rcv", "kernel", d, Driver),
            ("packet_sendmsg", "kernel", d, Driver),
            ("veth_xmit", "veth", d, Driver),
            ("veth_poll", "veth", d, Driver),
            ("tun_get_user", "tun", d, Driver),
            ("tcp_sendmsg_locked", "kernel", d, Network),
            ("tcp_v4_rcv", "kernel", d, Network),
            ("ip_rcv", "kernel", d, Network),
            ("ip_finish_output2", "kernel", d, Network),
            ("ipv6_rcv", "kernel", d, Network),
            ("udp_sendmsg", "kernel", d, Network),
            ("__netif_receive_skb_core", "kernel", d, Network),
            ("net_rx_action", "kernel", d, Network),
            ("br_handle_frame", "bridge", d, Network),
            ("dev_hard_start_xmit", "kernel", d, Network),
            ("skb_release_data", "kernel", d, Network),
            ("skb_copy_datagram_iter", "kernel", d, Usercopy),
            ("copy_user_enhanced_fast_string", "kernel", d, Usercopy),
            ("_copy_to_user", "kernel", d, Usercopy),
            ("_copy_from_user", "kernel", d, Usercopy),
            ("rep_movs_alternative", "kernel", d, Usercopy),
            ("_copy_to_iter", "kernel", d, Usercopy),
            ("memcpy", "libc.so.6", d, Other),
            ("schedule", "kernel", d, Other),
            ("do_syscall_64", "kernel", DomainKind::Host, Other),
            ("std::io::stdio::_print", "splitnet", d, Other),
            ("[unknown]", "[anon]", d, Other),
            ("default_idle", "kernel", DomainKind::Idle, Other),
        ];
        for (f, m, k, want) in cases {
            assert_eq!(cost_class(f, m, *k), *want, "{f} in {m} ({k:?})");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = CostClass::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CostClass::ALL.len());
    }
}
