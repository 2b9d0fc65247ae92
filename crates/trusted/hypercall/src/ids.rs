//! The identifiers the control protocol, hv's status and its trace share:
//! domain ids, event-channel ports, and each kind of request's name. A leaf,
//! so that the trace can name hypercalls without depending on the protocol
//! that carries the trace.

/// A domain identifier. 0 is the toolstack (hv itself and the `splitnet` CLI).
pub type DomId = u16;
/// The toolstack's domain id.
pub const DOMID_TOOLSTACK: DomId = 0;
/// An event-channel port, local to a domain.
pub type Port = u32;

/// How many kinds of request there are.
pub const REQUEST_KINDS: usize = 53;

/// Every kind of request's name, in `Request::index` order: its counter in
/// `status` and its `hypercall:<name>` row in the trace.
pub const REQUEST_NAMES: [&str; REQUEST_KINDS] = [
    "hello",
    "nop",
    "store_read",
    "store_write",
    "store_mkdir",
    "store_rm",
    "store_directory",
    "store_set_perms",
    "store_get_perms",
    "watch",
    "unwatch",
    "evtchn_alloc_unbound",
    "evtchn_bind_interdomain",
    "evtchn_send",
    "evtchn_close",
    "grant_copy_call",
    "grant_map",
    "grant_unmap",
    "grant_transfer",
    "status",
    "shutdown",
    "destroy_domain",
    "trace",
    "ngm_setup",
    "ngm_grant",
    "ngm_revoke",
    "ngm_attach",
    "restart_domain",
    "network_attach",
    "network_detach",
    "capture_open",
    "capture_attach",
    "hvm_vcpu",
    "hvm_device_model",
    "vhost_listener",
    "vhost_connect",
    "pool_window",
    "container_add",
    "container_del",
    "container_list",
    "apply",
    "port_socket",
    "ngm_grant_many",
    "vhost_dial",
    "queue_open",
    "queue_close",
    "grant_table_view",
    "resume",
    "evtchn_rebind",
    "upgrade_domain",
    "upgrade_hv",
    "store_gather",
    "evtchn_close_unclaimed",
];
