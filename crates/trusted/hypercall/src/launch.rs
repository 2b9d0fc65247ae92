//! What a domain process finds in its environment when hv starts it: the
//! variables naming the descriptors it inherits.

/// Environment variable through which a domain process finds its hv socket.
pub const ENV_HV_FD: &str = "SPLITNET_HV_FD";
/// Environment variable naming the descriptors a guest with a hosted NIC
/// inherits: `CHANNEL_MEMFD,DOORBELL` (the world-switch channel to its VMApp).
pub const ENV_HOSTED_FDS: &str = "SPLITNET_HOSTED_FDS";
/// Environment variable naming the descriptors a VMApp inherits:
/// `GUEST_POOL,CHANNEL_MEMFD,DOORBELL`.
pub const ENV_VMAPP_FDS: &str = "SPLITNET_VMAPP_FDS";
/// Environment variable naming the descriptor an HVM guest's device model
/// inherits: `CONTROL_SOCKET`, its connection to hv as its driver domain
/// (`Hypervisor::device_model_connection`).
pub const ENV_HVM_DM_FD: &str = "SPLITNET_HVM_DM_FD";
/// Environment variable naming the descriptor of the user namespace a
/// container's guest joins: it runs in the container runtime's network
/// namespace, which the host's user namespace owns, so that namespace's
/// owner cannot be its jail's (`jail::enter`).
pub const ENV_USERNS_FD: &str = "SPLITNET_USERNS_FD";
/// Set by hv for a driver domain's process that does not start afresh: the
/// successor of a dead one (`STOPPED 0 crash`, the monotonic clock in µs
/// when the domain's vifs were last served), or a standby that waits for
/// the domain ([`RESUME_STANDBY`]).
pub const ENV_RESUME: &str = "SPLITNET_RESUME";
/// [`ENV_RESUME`] of a driver domain's next program, started before the
/// old one hands its vifs over: it enters its jail, says it is ready on
/// the socket it inherited (from the toolstack, not hv), and waits there
/// for the domain's control socket and what the old program left
/// (`STOPPED DROPPED HANDED`).
pub const RESUME_STANDBY: &str = "standby";
/// What a standby ([`RESUME_STANDBY`]) says once it is ready.
pub const STANDBY_READY: &[u8] = b"ready";

/// A domain's uid and gid on the host are this plus its domain id (its
/// first one, which its restarts keep): far above login accounts and the
/// usual subordinate-uid ranges.
pub const DOMAIN_UID_BASE: u32 = 1_000_000_000;
