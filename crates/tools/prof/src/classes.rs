//! Cost classes (Ram's thesis, Table 2.1, with Xenoprof's kernel and idle
//! lines): where a sample's cycles go in the split driver architecture.
//!
//! A sample is classed by its call chain, walked from the leaf until a frame
//! falls in a class ([`chain_class`]): libc's `memcpy` called from netback is
//! netback's, a spin-lock release under `try_to_wake_up` is scheduling.

use crate::attribution::DomainKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Declares [`CostClass`] and its table from one list: variant, JSON name,
/// short column heading, chart colour, and the doc line.
macro_rules! cost_classes {
    ($($(#[doc = $doc:literal])+ $v:ident = $name:literal, $short:literal, $color:literal;)+) => {
        /// The class of work a sample does.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum CostClass {
            $($(#[doc = $doc])+ $v,)+
        }

        impl CostClass {
            /// Every class, in table order.
            pub const ALL: [CostClass; [$($name),+].len()] = [$(CostClass::$v),+];

            /// The name used in tables and JSON.
            pub fn name(self) -> &'static str {
                match self { $(CostClass::$v => $name,)+ }
            }

            /// The column heading in the per-domain table.
            pub fn short(self) -> &'static str {
                match self { $(CostClass::$v => $short,)+ }
            }

            /// The colour of its segment in charts.
            pub fn color(self) -> &'static str {
                match self { $(CostClass::$v => $color,)+ }
            }

            /// What it holds, in one line.
            pub fn doc(self) -> &'static str {
                match self { $(CostClass::$v => concat!($($doc),+).trim_ascii(),)+ }
            }
        }
    };
}

cost_classes! {
    /// The hypervisor (the hv daemon), except its copies and grant operations.
    Hypervisor = "hypervisor", "hv", "#4e79a7";
    /// Copies between domains' memory made by the hypervisor (grant copy).
    InterDomainCopy = "inter_domain_copy", "idcopy", "#f28e2b";
    /// The driver: our port to the wire and the kernel's packet/veth/tun drivers.
    Driver = "driver", "driver", "#e15759";
    /// Host work that stands for the NIC's hardware: a packet socket's send
    /// and receive (a NIC's descriptor rings and DMA), macvlan's sorting by
    /// MAC (a multi-queue NIC's filter), and the qdisc shaping a link to a
    /// line rate. Charged to no domain (Ram thesis §3.3).
    Nic = "nic", "nic", "#17becf";
    /// The guest's netfront.
    Netfront = "netfront", "netfront", "#76b7b2";
    /// The driver domain's netback, its poll loop and credit scheduler.
    Netback = "netback", "netback", "#59a14f";
    /// Protocol stacks and bridging, in the kernel and ours.
    Network = "network", "network", "#edc948";
    /// Grant table operations: acquire, release, map, unmap, transfer.
    Grant = "grant", "grant", "#b07aa1";
    /// Copies between the kernel and user space, with their checks.
    Usercopy = "usercopy", "usercopy", "#ff9da7";
    /// Context switches, wake-ups and waits (the scheduler, futexes, a domain's poll-then-block loop).
    Scheduling = "scheduling", "sched", "#9c755f";
    /// System-call entry and exit, and the generic file and poll layers behind them.
    Syscall = "syscall", "syscall", "#86bcb6";
    /// Interrupts and softirqs: their entry, exit and dispatch (NAPI polling).
    Softirq = "softirq", "softirq", "#d37295";
    /// Memory management: page faults, page and slab allocation, clearing pages.
    Memory = "memory", "memory", "#8cd17d";
    /// The idle task and cpuidle: the CPU had nothing to run.
    Idle = "idle", "idle", "#e8e8e8";
    /// Everything else.
    Other = "other", "other", "#bab0ac";
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

/// Kernel C functions by class, checked in this order (the first list with a
/// matching prefix wins, so `skb_copy_datagram_iter` is usercopy and
/// `net_rx_action` softirq before the `skb_`/`net` prefixes of network).
const KERNEL: &[(CostClass, &[&str])] = &[
    (
        CostClass::Usercopy,
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
            "__check_object_size",
            "check_heap_object",
            "check_stack_object",
            "__virt_addr_valid",
            "__get_user_",
            "__put_user_",
            "copy_msghdr_from_user",
            "__copy_msghdr",
            "iovec_from_user",
            "import_iovec",
            "__import_iovec",
            "fault_in_",
            "simple_copy_to_iter",
        ],
    ),
    (
        CostClass::Driver,
        &[
            "packet_",
            "tpacket_",
            "__packet_",
            "veth_",
            "tun_",
            "__tun_",
        ],
    ),
    (
        CostClass::Softirq,
        &[
            "__do_softirq",
            "handle_softirqs",
            "do_softirq",
            "__local_bh_enable_ip",
            "local_bh_enable",
            "irq_exit",
            "__irq_exit_rcu",
            "net_rx_action",
            "__napi_poll",
            "napi_poll",
            "run_ksoftirqd",
            "asm_sysvec_",
            "sysvec_",
            "__sysvec_",
            "asm_common_interrupt",
            "common_interrupt",
            "hrtimer_interrupt",
            "__hrtimer_run_queues",
            "tick_sched_",
            "run_timer_softirq",
            "rcu_core",
            "tasklet_",
            "smpboot_thread_fn",
            "irq_enter",
        ],
    ),
    (
        CostClass::Scheduling,
        &[
            "__schedule",
            "schedule",
            "finish_task_switch",
            "try_to_wake_up",
            "wake_up_",
            "__wake_up",
            "default_wake_function",
            "autoremove_wake_function",
            "woken_wake_function",
            "pollwake",
            "ep_poll_callback",
            "ttwu_",
            "sched_",
            "__sched_",
            "enqueue_task",
            "dequeue_task",
            "enqueue_entity",
            "dequeue_entity",
            "update_curr",
            "pick_next_",
            "__pick_next",
            "set_next_entity",
            "put_prev_",
            "check_preempt",
            "wakeup_preempt",
            "resched_curr",
            "select_task_rq",
            "context_switch",
            "__switch_to",
            "switch_mm",
            "prepare_task_switch",
            "psi_",
            "do_sched_yield",
            "__x64_sys_sched_yield",
            "yield",
            "update_load_avg",
            "update_rq_clock",
            "raw_spin_rq_",
            "activate_task",
            "newidle_balance",
            "sched_balance",
            "load_balance",
            "futex_",
            "__futex",
            "do_futex",
            "__x64_sys_futex",
            "preempt_schedule",
            "__cond_resched",
            "hrtimer_wakeup",
            "do_nanosleep",
            "hrtimer_nanosleep",
            "schedule_hrtimeout",
        ],
    ),
    (
        CostClass::Memory,
        &[
            "clear_page",
            "__alloc_pages",
            "alloc_pages",
            "__alloc_frozen_pages",
            "get_page_from_freelist",
            "rmqueue",
            "__rmqueue",
            "free_unref_",
            "free_pcppages",
            "__free_pages",
            "free_pages",
            "__folio_",
            "folio_",
            "kmem_cache_",
            "__kmem_cache",
            "kmalloc",
            "__kmalloc",
            "kfree",
            "__slab_",
            "slab_",
            "___slab_alloc",
            "kmalloc_reserve",
            "exc_page_fault",
            "asm_exc_page_fault",
            "do_user_addr_fault",
            "handle_mm_fault",
            "__handle_mm_fault",
            "do_anonymous_page",
            "do_fault",
            "do_wp_page",
            "wp_page_copy",
            "filemap_",
            "mm_",
            "__mm_",
            "vma_",
            "find_vma",
            "lock_vma",
            "__pte_",
            "pte_",
            "unmap_",
            "zap_",
            "tlb_",
            "flush_tlb",
            "native_flush_tlb",
            "do_mmap",
            "mmap_region",
            "__vm_",
            "vm_",
            "__memcg_",
            "mem_cgroup_",
            "__mod_memcg",
            "mod_memcg",
            "memcg_",
            "page_counter_",
            "refill_stock",
            "obj_cgroup_",
            "__put_page",
            "put_page",
            "release_pages",
            "lru_",
            "__lru_",
            "__page_",
            "page_",
            "__get_free_pages",
            "get_user_pages",
            "gup_",
            "pin_user_pages",
            "follow_page",
            "damon_",
            "__damon",
            "__mod_lruvec",
            "mod_lruvec",
            "__count_memcg",
            "count_memcg",
            "pfn_to_online_page",
        ],
    ),
    (
        CostClass::Syscall,
        &[
            "entry_SYSCALL_64",
            "do_syscall_64",
            "syscall_exit_to_user_mode",
            "syscall_enter_from_user_mode",
            "exit_to_user_mode",
            "__x64_sys_",
            "__do_sys_",
            "__se_sys_",
            "x64_sys_call",
            "syscall_",
            "entry_SYSRETQ",
            "__fdget",
            "fdget",
            "fput",
            "__fget",
            "ksys_",
            "do_epoll_",
            "ep_poll",
            "ep_item_poll",
            "ep_send_events",
            "do_sys_poll",
            "do_poll",
            "do_select",
            "core_sys_select",
            "__sys_",
            "vfs_read",
            "vfs_write",
            "rw_verify_area",
            "new_sync_read",
            "new_sync_write",
            "do_iter_",
            "security_",
            "apparmor_",
            "bpf_lsm_",
            "__seccomp_",
            "seccomp_",
            "__secure_computing",
            "entry_",
        ],
    ),
    (
        CostClass::Idle,
        &[
            "default_idle",
            "pv_native_safe_halt",
            "native_safe_halt",
            "cpuidle_",
            "call_cpuidle",
            "do_idle",
            "cpu_startup_entry",
            "acpi_idle",
            "intel_idle",
            "mwait_idle",
            "haltpoll_",
            "poll_idle",
            "arch_cpu_idle",
            "tick_nohz_idle_",
            "start_secondary",
            "rest_init",
            "cpu_idle_poll",
        ],
    ),
];

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
            "napi_",
            "__napi_",
            "br_",
            "dev_",
            "__dev_",
            "skb_",
            "__skb_",
            "kfree_skb",
            "consume_skb",
            "__alloc_skb",
            "__build_skb",
            "alloc_skb",
            "__kfree_skb",
            "inet_",
            "sock_",
            "__sock_",
            "sk_",
            "__sk_",
            "release_sock",
            "lock_sock",
            "nf_",
            "neigh_",
            "eth_",
            "process_backlog",
            "validate_xmit",
            "sch_direct_xmit",
            "__qdisc_",
            "qdisc_",
            "pfifo_",
            "csum_partial",
            "__dev_queue_xmit",
            "raw_v4_",
            "raw_local_deliver",
            "icmp_",
            "fib_",
            "rt_",
            "dst_",
            "__inet",
            "gro_",
            "__gro",
            "inet_gro",
            "net_",
            "__net_",
            "rps_",
            "enqueue_to_backlog",
            "__copy_skb",
            "pskb_",
            "__pskb_",
        ],
    )
}

/// The class of a kernel (or libc) C function, if it has one.
fn kernel_class(f: &str, module: &str) -> Option<CostClass> {
    if matches!(module, "veth" | "tun") {
        return Some(CostClass::Driver);
    }
    for (class, prefixes) in KERNEL {
        if starts_with_any(f, prefixes) {
            return Some(*class);
        }
    }
    is_kernel_network(f, module).then_some(CostClass::Network)
}

/// Our own Rust code, by module path (also inside trait impls:
/// `<a::b as T>::f`); None for code of no class (std, core, glue).
fn rust_class(f: &str) -> Option<CostClass> {
    const PATHS: &[(&str, CostClass)] = &[
        // The new grant mechanism's checks, done by the domains themselves.
        ("splitnet_hypercall::ngm_client", CostClass::Grant),
        // A domain's calls into hv (its client library), and hv's own code.
        ("splitnet_hv::", CostClass::Hypervisor),
        ("splitnet_hypercall::", CostClass::Hypervisor),
        // netfront is the guest's crate, whole.
        ("splitnet_netfront::", CostClass::Netfront),
        ("splitnet_frame::lro", CostClass::Netfront),
        ("splitnet_driver_domain::netback", CostClass::Netback),
        ("splitnet_driver_domain::credit", CostClass::Netback),
        ("splitnet_driver_domain::driver", CostClass::Netback),
        ("splitnet_driver_domain::switch", CostClass::Network),
        ("splitnet_driver_domain::antispoof", CostClass::Network),
        ("splitnet_frame::", CostClass::Network),
        ("splitnet_driver_domain::port", CostClass::Driver),
        ("splitnet_sys::packet", CostClass::Driver),
        ("splitnet_sys::tap", CostClass::Driver),
        ("splitnet_domain_common::idle", CostClass::Scheduling),
    ];
    PATHS.iter().find(|(p, _)| f.contains(p)).map(|(_, c)| *c)
}

/// The class of one frame: `function` (demangled) in `module`, sampled in a
/// domain of kind `kind`; None when the function belongs to no class, so that
/// its caller decides.
pub fn frame_class(function: &str, module: &str, kind: DomainKind) -> Option<CostClass> {
    let f = function;
    if f.contains("splitnet_hv::grant") {
        let last = f.rsplit("::").next().unwrap_or(f);
        if last.starts_with("copy") {
            return Some(CostClass::InterDomainCopy);
        }
        if starts_with_any(last, &["acquire", "release", "map", "unmap", "transfer"]) {
            return Some(CostClass::Grant);
        }
    }
    if kind == DomainKind::Hv {
        if is_memcpy(f) {
            return Some(CostClass::InterDomainCopy);
        }
        if f.contains("splitnet_hv::grant::") {
            return Some(CostClass::Grant);
        }
    }
    if f.contains("::") {
        return rust_class(f);
    }
    kernel_class(f, module)
}

/// Kernel functions that stand for the NIC: af_packet's data path, macvlan,
/// and the shaping qdiscs. A chain through any of them is the NIC's, whatever
/// its leaf (the copy into a posted buffer is the NIC's DMA).
const NIC: &[&str] = &[
    "packet_recvmsg",
    "packet_rcv",
    "tpacket_rcv",
    "packet_sendmsg",
    "packet_snd",
    "tpacket_snd",
    "macvlan_",
    "tbf_",
    "htb_",
];

/// A page fault (x86's entry points). The page it brings in is the
/// faulting domain's memory work, even where the NIC's copy takes the
/// fault: a receive buffer the driver domain freshly allocated is its own
/// cost, as Xen 2.0's dom0 paid for a new zeroed page per received packet
/// (Menon 2006 §4.2, §6.4.1).
const FAULT: &[&str] = &["asm_exc_page_fault", "exc_page_fault"];

/// Interrupt and softirq entry: work beneath it is the interrupt's, not
/// that of the fault or system call it interrupted.
const INTERRUPT: &[&str] = &[
    "asm_sysvec_",
    "asm_common_interrupt",
    "irq_exit",
    "__irq_exit_rcu",
    "handle_softirqs",
    "__do_softirq",
];

/// Walking a chain from its leaf: whether the leaf's work is a page
/// fault's, decided by the first fault or interrupt entry met.
#[derive(Clone, Copy, PartialEq)]
enum Beneath {
    Nothing,
    Fault,
    Interrupt,
}

impl Beneath {
    fn after(self, function: &str) -> Beneath {
        match self {
            Beneath::Nothing if starts_with_any(function, FAULT) => Beneath::Fault,
            Beneath::Nothing if starts_with_any(function, INTERRUPT) => Beneath::Interrupt,
            other => other,
        }
    }
}

/// Whether a frame is host work standing for the NIC ([`CostClass::Nic`]).
pub fn is_nic_frame(function: &str, module: &str) -> bool {
    matches!(module, "macvlan" | "sch_tbf" | "sch_htb") || starts_with_any(function, NIC)
}

/// Our user-space wrappers whose system calls stand for something else:
/// the packet socket's for the NIC's descriptor rings (its kernel side is
/// the NIC's work), the hypercall client's for a trap into the hypervisor
/// (Xen took it on the caller's CPU; here it is a system call and hv's
/// wake-up).
const SYSCALL_STANDS_FOR: &[(&str, CostClass)] = &[
    ("splitnet_sys::packet::", CostClass::Nic),
    ("splitnet_hypercall::client::", CostClass::Hypervisor),
];

/// The class of a sample in kernel mode whose chain passes through one of
/// [`SYSCALL_STANDS_FOR`]'s wrappers, the innermost deciding; never the
/// NIC's for a page fault beneath the wrapper.
fn syscall_class<'a>(frames: &[(&'a str, &'a str)]) -> Option<(CostClass, usize)> {
    let (class, i) = frames.iter().enumerate().find_map(|(i, (f, _))| {
        SYSCALL_STANDS_FOR
            .iter()
            .find(|(p, _)| f.contains(p))
            .map(|(_, c)| (*c, i))
    })?;
    let beneath = frames[..i]
        .iter()
        .fold(Beneath::Nothing, |b, (f, _)| b.after(f));
    (class != CostClass::Nic || beneath != Beneath::Fault).then_some((class, i))
}

/// The class a sample falls back to when no frame of its chain has one:
/// hv's code is the hypervisor's, the idle task's is idle.
pub fn fallback_class(kind: DomainKind) -> CostClass {
    match kind {
        DomainKind::Hv => CostClass::Hypervisor,
        DomainKind::Idle => CostClass::Idle,
        DomainKind::Domain | DomainKind::Host => CostClass::Other,
    }
}

/// The class of a single function, with no chain to walk.
pub fn cost_class(function: &str, module: &str, kind: DomainKind) -> CostClass {
    frame_class(function, module, kind).unwrap_or_else(|| fallback_class(kind))
}

/// The class of a sample from its call chain, leaf first, as
/// (function, module) pairs: the NIC's when any frame stands for the NIC
/// and the leaf's work is not a page fault's, else the first frame with a class
/// decides. Returns the class and the index of the deciding frame (None:
/// the fallback).
pub fn chain_class<'a>(
    frames: impl IntoIterator<Item = (&'a str, &'a str)>,
    kind: DomainKind,
) -> (CostClass, Option<usize>) {
    let mut first = None;
    let mut beneath = Beneath::Nothing;
    for (i, (f, m)) in frames.into_iter().enumerate() {
        if beneath != Beneath::Fault && is_nic_frame(f, m) {
            return (CostClass::Nic, Some(i));
        }
        beneath = beneath.after(f);
        if first.is_none() {
            first = frame_class(f, m, kind).map(|c| (c, Some(i)));
        }
    }
    first.unwrap_or((fallback_class(kind), None))
}

/// The class of a sample, as [`chain_class`], except that a sample taken in
/// the kernel under one of [`SYSCALL_STANDS_FOR`]'s wrappers is what that
/// system call stands for (the NIC's, or the hypervisor's), unless a frame
/// beneath it already makes it the NIC's.
pub fn sample_class<'a>(
    frames: &[(&'a str, &'a str)],
    kind: DomainKind,
    kernel: bool,
) -> (CostClass, Option<usize>) {
    let by_chain = chain_class(frames.iter().copied(), kind);
    if !kernel || by_chain.0 == CostClass::Nic {
        return by_chain;
    }
    match syscall_class(frames) {
        Some((c, i)) => (c, Some(i)),
        None => by_chain,
    }
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
            ("splitnet_netfront::Netfront::poll", "splitnet", d, Netfront),
            (
                "<splitnet_netfront::Netfront as core::ops::Drop>::drop",
                "splitnet",
                d,
                Netfront,
            ),
            (
                "splitnet_driver_domain::netback::Netback::tx_batch",
                "splitnet",
                d,
                Netback,
            ),
            (
                "splitnet_driver_domain::switch::bridge::Bridge::forward",
                "splitnet",
                d,
                Network,
            ),
            ("splitnet_frame::offload::segment", "splitnet", d, Network),
            (
                "splitnet_driver_domain::port::Port::send",
                "splitnet",
                d,
                Driver,
            ),
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
            ("net_rx_action", "kernel", d, Softirq),
            ("__napi_poll", "kernel", d, Softirq),
            ("handle_softirqs", "kernel", d, Softirq),
            ("napi_gro_receive", "kernel", d, Network),
            ("br_handle_frame", "bridge", d, Network),
            ("dev_hard_start_xmit", "kernel", d, Network),
            ("skb_release_data", "kernel", d, Network),
            ("skb_copy_datagram_iter", "kernel", d, Usercopy),
            ("copy_user_enhanced_fast_string", "kernel", d, Usercopy),
            ("_copy_to_user", "kernel", d, Usercopy),
            ("_copy_from_user", "kernel", d, Usercopy),
            ("rep_movs_alternative", "kernel", d, Usercopy),
            ("_copy_to_iter", "kernel", d, Usercopy),
            ("__check_object_size", "kernel", d, Usercopy),
            ("memcpy", "libc.so.6", d, Other),
            ("schedule", "kernel", d, Scheduling),
            ("finish_task_switch.isra.0", "kernel", d, Scheduling),
            ("try_to_wake_up", "kernel", d, Scheduling),
            ("futex_wait", "kernel", d, Scheduling),
            (
                "splitnet_domain_common::idle::Waiter::wait",
                "splitnet",
                d,
                Scheduling,
            ),
            ("_raw_spin_unlock_irqrestore", "kernel", d, Other),
            ("do_syscall_64", "kernel", DomainKind::Host, Syscall),
            ("entry_SYSCALL_64_after_hwframe", "kernel", d, Syscall),
            ("syscall_exit_to_user_mode", "kernel", d, Syscall),
            ("clear_page_erms", "kernel", d, Memory),
            ("__alloc_pages_noprof", "kernel", d, Memory),
            ("asm_exc_page_fault", "kernel", d, Memory),
            ("kmem_cache_alloc_node_noprof", "kernel", d, Memory),
            ("std::io::stdio::_print", "splitnet", d, Other),
            ("[unknown]", "[anon]", d, Other),
            ("pv_native_safe_halt", "kernel", DomainKind::Idle, Idle),
            ("default_idle", "kernel", DomainKind::Idle, Idle),
            ("core::fmt::write", "splitnet", DomainKind::Idle, Idle),
        ];
        for (f, m, k, want) in cases {
            assert_eq!(cost_class(f, m, *k), *want, "{f} in {m} ({k:?})");
        }
    }

    /// (function, module) frames, leaf first.
    fn chain<'a>(frames: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a str)> {
        frames.iter().copied()
    }

    #[test]
    fn a_chain_is_classed_by_its_first_frame_with_a_class() {
        let d = DomainKind::Domain;
        // libc's memcpy inside netback is netback's.
        let memcpy_in_netback = [
            ("__memmove_avx_unaligned_erms", "libc.so.6"),
            ("core::ptr::copy_nonoverlapping", "splitnet"),
            (
                "splitnet_driver_domain::netback::Netback::copy_tx",
                "splitnet",
            ),
            ("splitnet_runtime::domain::run", "splitnet"),
        ];
        assert_eq!(
            chain_class(chain(&memcpy_in_netback), d),
            (Netback, Some(2))
        );
        // The lock release under try_to_wake_up is scheduling, under a
        // socket's wake-up too; under tun's write path it is the driver's.
        let wakeup = [
            ("_raw_spin_unlock_irqrestore", "kernel"),
            ("try_to_wake_up", "kernel"),
            ("sock_def_readable", "kernel"),
            ("tcp_rcv_established", "kernel"),
        ];
        assert_eq!(chain_class(chain(&wakeup), d), (Scheduling, Some(1)));
        let tun = [
            ("_raw_spin_unlock_irqrestore", "kernel"),
            ("tun_get_user", "tun"),
            ("entry_SYSCALL_64_after_hwframe", "kernel"),
        ];
        assert_eq!(chain_class(chain(&tun), d), (Driver, Some(1)));
        // A system call whose own code has no class is the system call's.
        let syscall = [
            ("_raw_spin_lock", "kernel"),
            ("__fget_light", "kernel"),
            ("do_syscall_64", "kernel"),
            ("splitnet_netfront::Netfront::poll", "splitnet"),
        ];
        assert_eq!(chain_class(chain(&syscall), d), (Syscall, Some(1)));
        // Softirq work interrupting the idle task is work, not idle.
        let softirq_in_idle = [
            ("handle_softirqs", "kernel"),
            ("irq_exit_rcu", "kernel"),
            ("pv_native_safe_halt", "kernel"),
        ];
        let idle = DomainKind::Idle;
        assert_eq!(
            chain_class(chain(&softirq_in_idle), idle),
            (Softirq, Some(0))
        );
        assert_eq!(
            chain_class(chain(&softirq_in_idle[2..]), idle),
            (Idle, Some(0))
        );
        // No frame with a class: the domain's fallback.
        let unknown = [("[unknown]", "[anon]"), ("std::rt::lang_start", "splitnet")];
        assert_eq!(chain_class(chain(&unknown), d), (Other, None));
        assert_eq!(
            chain_class(chain(&unknown), DomainKind::Hv),
            (Hypervisor, None)
        );
        assert_eq!(chain_class(chain(&[]), d), (Other, None));
    }

    #[test]
    fn a_chain_through_the_nic_is_the_nics_whatever_its_leaf() {
        let d = DomainKind::Domain;
        // The packet socket's copy into a posted buffer: a NIC's DMA.
        let recv = [
            ("_copy_to_iter", "[kernel]"),
            ("__skb_datagram_iter", "[kernel]"),
            ("skb_copy_datagram_iter", "[kernel]"),
            ("packet_recvmsg", "[kernel]"),
            ("sock_recvmsg", "[kernel]"),
            ("do_syscall_64", "[kernel]"),
        ];
        assert_eq!(chain_class(chain(&recv), d), (Nic, Some(3)));
        // A send runs the link and the peer's receive beneath it.
        let send = [
            ("tcp_v4_rcv", "[kernel]"),
            ("__netif_receive_skb", "[kernel]"),
            ("veth_xmit", "veth"),
            ("__dev_queue_xmit", "[kernel]"),
            ("packet_sendmsg", "[kernel]"),
        ];
        assert_eq!(chain_class(chain(&send), d), (Nic, Some(4)));
        let sort = [("macvlan_handle_frame", "macvlan"), ("netif_receive", "")];
        assert_eq!(chain_class(chain(&sort), d), (Nic, Some(0)));
        let shape = [("_raw_spin_lock", "[kernel]"), ("tbf_enqueue", "sch_tbf")];
        assert_eq!(chain_class(chain(&shape), d), (Nic, Some(1)));
        // The same copy for a TCP socket stays the guest's own.
        let tcp = [("_copy_to_iter", "[kernel]"), ("tcp_recvmsg", "[kernel]")];
        assert_eq!(chain_class(chain(&tcp), d), (Usercopy, Some(0)));
    }

    #[test]
    fn a_fault_under_the_nics_copy_is_the_domains_memory() {
        let d = DomainKind::Domain;
        // The copy into a freshly allocated receive page faults it in: the
        // allocation and zeroing are the driver domain's, not the DMA's.
        let fault = [
            ("clear_page_erms", "[kernel]"),
            ("do_anonymous_page", "[kernel]"),
            ("asm_exc_page_fault", "[kernel]"),
            ("_copy_to_iter", "[kernel]"),
            ("__skb_datagram_iter", "[kernel]"),
            ("skb_copy_datagram_iter", "[kernel]"),
            ("packet_recvmsg", "[kernel]"),
            ("do_recvmmsg", "[kernel]"),
            (
                "splitnet_sys::packet::PacketSocket::recv_batch",
                "splitnet-domain",
            ),
        ];
        assert_eq!(chain_class(chain(&fault), d), (Memory, Some(0)));
        assert_eq!(sample_class(&fault, d, true), (Memory, Some(0)));
        // The copy itself, past the fault, stays the NIC's.
        assert_eq!(sample_class(&fault[3..], d, true), (Nic, Some(3)));
        // An interrupt taken inside the fault runs the peer's receive: the
        // NIC's wire, as before, not the domain's memory.
        let mut irq = vec![
            ("tcp_v4_rcv", "[kernel]"),
            ("__netif_receive_skb", "[kernel]"),
            ("handle_softirqs", "[kernel]"),
            ("__irq_exit_rcu", "[kernel]"),
            ("asm_sysvec_call_function_single", "[kernel]"),
        ];
        irq.extend_from_slice(&fault);
        assert_eq!(chain_class(chain(&irq), d).0, Nic);
        assert_eq!(sample_class(&irq, d, true).0, Nic);
        // A fault under a hypercall's system call stays the hypervisor's.
        let call = [
            ("clear_page_erms", "[kernel]"),
            ("asm_exc_page_fault", "[kernel]"),
            ("unix_dgram_sendmsg", "[kernel]"),
            ("__send", "libc.so.6"),
            (
                "splitnet_hypercall::client::HvClient::submit_raw_batch",
                "splitnet-domain",
            ),
        ];
        assert_eq!(sample_class(&call, d, true), (Hypervisor, Some(4)));
    }

    #[test]
    fn a_system_call_is_what_its_wrapper_stands_for() {
        let d = DomainKind::Domain;
        // recvmmsg's own overhead on a packet socket: the NIC's ring.
        let recv = [
            ("__import_iovec", "[kernel]"),
            ("do_recvmmsg", "[kernel]"),
            ("do_syscall_64", "[kernel]"),
            ("__recvmmsg", "libc.so.6"),
            (
                "splitnet_sys::packet::PacketSocket::recv_batch",
                "splitnet-domain",
            ),
            (
                "splitnet_driver_domain::port::Rx::receive",
                "splitnet-domain",
            ),
        ];
        assert_eq!(sample_class(&recv, d, true), (Nic, Some(4)));
        // The wrapper's own user-space work stays the driver's.
        assert_eq!(sample_class(&recv[4..], d, false), (Driver, Some(0)));
        // A hypercall's send and hv's wake-up are the hypervisor's, not
        // the network stack's.
        let call = [
            ("_raw_spin_unlock_irqrestore", "[kernel]"),
            ("sock_def_readable", "[kernel]"),
            ("unix_dgram_sendmsg", "[kernel]"),
            ("__send", "libc.so.6"),
            (
                "splitnet_hypercall::client::HvClient::submit_raw_batch",
                "splitnet-domain",
            ),
            (
                "splitnet_driver_domain::netback::Netback::flush_rx",
                "splitnet-domain",
            ),
        ];
        assert_eq!(chain_class(call.iter().copied(), d), (Network, Some(1)));
        assert_eq!(sample_class(&call, d, true), (Hypervisor, Some(4)));
        // A TCP socket's system call keeps its kernel class.
        let tcp = [("tcp_recvmsg", "[kernel]"), ("__recv", "libc.so.6")];
        assert_eq!(sample_class(&tcp, d, true), (Network, Some(0)));
    }

    #[test]
    fn every_class_has_a_doc_line_and_colour() {
        for c in CostClass::ALL {
            assert!(!c.doc().is_empty() && !c.doc().contains('\n'), "{c}");
            assert!(c.color().starts_with('#') && c.short().len() <= 8, "{c}");
        }
        assert_eq!(
            CostClass::Idle.doc(),
            "The idle task and cpuidle: the CPU had nothing to run."
        );
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = CostClass::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CostClass::ALL.len());
    }
}
