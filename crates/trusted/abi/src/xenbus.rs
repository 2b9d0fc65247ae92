//! The frontend/backend handshake over the store (`io/xenbus.h`,
//! `io/netif.h` key names, `io/xs_wire.h` limits).
//!
//! Each end publishes its `state` key; the other watches it. A netfront
//! writes its ring references and event channels, then goes Connected once
//! the backend is Connected (Menon 2006 §2; Xen's netif.h comments). Feature
//! keys are advertised by one side ("feature-*") and requested by the other
//! ("request-*").

use std::fmt;
use std::str::FromStr;

use crate::grant::DomId;
use crate::Error;

/// Largest message payload on the store wire.
pub const XENSTORE_PAYLOAD_MAX: usize = 4096;
/// Longest absolute path (starting with `/`).
pub const XENSTORE_ABS_PATH_MAX: usize = 3072;
/// Longest relative path (relative to the domain's home).
pub const XENSTORE_REL_PATH_MAX: usize = 2048;
/// Size of each direction of the xenstore ring.
pub const XENSTORE_RING_SIZE: usize = 1024;
/// Most addresses a vif's `ip` node may list: netback refuses a vif with
/// more, and the toolstack refuses such a vifspec before writing it.
pub const MAX_VIF_ADDRS: usize = 64;

/// A device end's progress through setup and teardown (`enum xenbus_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum XenbusState {
    Unknown = 0,
    /// Setting up; not yet ready for the peer.
    Initialising = 1,
    /// Early setup done; waiting for the peer or hotplug scripts.
    InitWait = 2,
    /// Resources published; waiting for the peer to connect.
    Initialised = 3,
    /// Running.
    Connected = 4,
    /// Being closed, after an error or unplug.
    Closing = 5,
    Closed = 6,
    /// Being reconfigured.
    Reconfiguring = 7,
    Reconfigured = 8,
}

impl XenbusState {
    /// Every state, in numeric order.
    pub const ALL: [XenbusState; 9] = [
        XenbusState::Unknown,
        XenbusState::Initialising,
        XenbusState::InitWait,
        XenbusState::Initialised,
        XenbusState::Connected,
        XenbusState::Closing,
        XenbusState::Closed,
        XenbusState::Reconfiguring,
        XenbusState::Reconfigured,
    ];

    /// The state with this number, if any.
    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    /// The number stored in the `state` key.
    pub fn as_u32(self) -> u32 {
        self as u32
    }

    /// Xen's name without the `XenbusState` prefix.
    pub fn name(self) -> &'static str {
        match self {
            XenbusState::Unknown => "Unknown",
            XenbusState::Initialising => "Initialising",
            XenbusState::InitWait => "InitWait",
            XenbusState::Initialised => "Initialised",
            XenbusState::Connected => "Connected",
            XenbusState::Closing => "Closing",
            XenbusState::Closed => "Closed",
            XenbusState::Reconfiguring => "Reconfiguring",
            XenbusState::Reconfigured => "Reconfigured",
        }
    }
}

impl FromStr for XenbusState {
    type Err = Error;
    /// Parses the decimal number a peer wrote; anything else is rejected.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadState {
            value: s.chars().take(32).collect(),
        };
        if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<u32>()
            .ok()
            .and_then(Self::from_u32)
            .ok_or_else(bad)
    }
}

impl fmt::Display for XenbusState {
    /// The decimal number, as written to the store.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_u32())
    }
}

/// Where the toolstack asks driver domain `domid` to hand its vifs over to
/// a successor process (`splitnet upgrade`), as Xen's toolstack asks a
/// domain to shut down at `control/shutdown`: the value is
/// [`UPGRADE_HANDOVER`].
pub fn upgrade_node(domid: u16) -> String {
    format!("/local/domain/{domid}/control/upgrade")
}

/// What [`upgrade_node`] holds when the toolstack asks for a hand-over.
pub const UPGRADE_HANDOVER: &str = "handover";

/// Where the old program, having handed every vif over, leaves for its
/// successor `STOPPED DROPPED HANDED`: the monotonic clock (µs) when it
/// stopped serving, the frames it dropped, and the clock when it was done.
pub fn upgrade_handed_node(domid: u16) -> String {
    format!("/local/domain/{domid}/control/handed")
}

/// Where the successor answers [`upgrade_node`]: `ok <µs the vifs were
/// unserved> <frames dropped>`, `partial …`, or `failed: <why>`.
pub fn upgrade_result_node(domid: u16) -> String {
    format!("/local/domain/{domid}/control/upgrade-result")
}

/// Store key names for a vif, under the frontend or backend directory.
pub mod keys {
    /// Both ends: the end's [`super::XenbusState`].
    pub const STATE: &str = "state";
    /// Frontend: path of its backend directory.
    pub const BACKEND: &str = "backend";
    /// Frontend: domain id of the backend.
    pub const BACKEND_ID: &str = "backend-id";
    /// Backend: path of its frontend directory.
    pub const FRONTEND: &str = "frontend";
    /// Backend: domain id of the frontend.
    pub const FRONTEND_ID: &str = "frontend-id";
    /// Backend: device handle (the vif number).
    pub const HANDLE: &str = "handle";
    /// Both: the vif's MAC address, `aa:bb:cc:dd:ee:ff`.
    pub const MAC: &str = "mac";
    /// Backend: "1" while the toolstack wants the device.
    pub const ONLINE: &str = "online";
    /// Backend: hotplug script result ("connected").
    pub const HOTPLUG_STATUS: &str = "hotplug-status";
    /// Frontend: grant reference of the tx ring page.
    pub const TX_RING_REF: &str = "tx-ring-ref";
    /// Frontend: grant reference of the rx ring page.
    pub const RX_RING_REF: &str = "rx-ring-ref";
    /// Frontend: one event channel for both directions.
    pub const EVENT_CHANNEL: &str = "event-channel";
    /// Frontend: tx event channel (with split event channels).
    pub const EVENT_CHANNEL_TX: &str = "event-channel-tx";
    /// Frontend: rx event channel (with split event channels).
    pub const EVENT_CHANNEL_RX: &str = "event-channel-rx";
    /// Frontend: grant reference of the control ring page.
    pub const CTRL_RING_REF: &str = "ctrl-ring-ref";
    /// Frontend: control ring event channel.
    pub const EVENT_CHANNEL_CTRL: &str = "event-channel-ctrl";
    /// Frontend: wants the backend to copy received packets (not flip pages).
    pub const REQUEST_RX_COPY: &str = "request-rx-copy";
    /// Backend: can copy received packets into frontend buffers.
    pub const FEATURE_RX_COPY: &str = "feature-rx-copy";
    /// Backend: takes half-page (2 KiB) receive buffers, the offset in an RX
    /// request's `pad` (a splitnet extension; Ram thesis 5.3).
    pub const FEATURE_RX_HALF_PAGE: &str = "feature-rx-half-page";
    /// Frontend: posts two half-page buffers per RX page.
    pub const REQUEST_RX_HALF_PAGE: &str = "request-rx-half-page";
    /// Backend: can flip (transfer) pages on receive, the Xen 2.0 path.
    pub const FEATURE_RX_FLIP: &str = "feature-rx-flip";
    /// Frontend: notifies the backend after posting rx requests.
    pub const FEATURE_RX_NOTIFY: &str = "feature-rx-notify";
    /// Both: packets may span several slots (scatter-gather).
    pub const FEATURE_SG: &str = "feature-sg";
    /// Both: can handle large TCPv4 segments (GSO extra info).
    pub const FEATURE_GSO_TCPV4: &str = "feature-gso-tcpv4";
    /// Both: can handle large TCPv6 segments.
    pub const FEATURE_GSO_TCPV6: &str = "feature-gso-tcpv6";
    /// Both: can handle large UDP datagrams cut into whole datagrams
    /// (`SPLITNET_NETIF_GSO_TYPE_UDP_L4`); splitnet's extension, absent
    /// (off) on a Xen peer.
    pub const FEATURE_GSO_UDP_L4: &str = "feature-splitnet-gso-udp-l4";
    /// Turns IPv4 TCP/UDP checksum offload off ("1"); absent means on.
    pub const FEATURE_NO_CSUM_OFFLOAD: &str = "feature-no-csum-offload";
    /// Turns IPv6 TCP/UDP checksum offload on ("1"); absent means off.
    pub const FEATURE_IPV6_CSUM_OFFLOAD: &str = "feature-ipv6-csum-offload";
    /// Backend: can filter multicast (sampled when the frontend connects).
    pub const FEATURE_MULTICAST_CONTROL: &str = "feature-multicast-control";
    /// Backend: re-samples `request-multicast-control` at any time.
    pub const FEATURE_DYNAMIC_MULTICAST_CONTROL: &str = "feature-dynamic-multicast-control";
    /// Frontend: wants multicast filtering.
    pub const REQUEST_MULTICAST_CONTROL: &str = "request-multicast-control";
    /// Backend: supports separate tx and rx event channels.
    pub const FEATURE_SPLIT_EVENT_CHANNELS: &str = "feature-split-event-channels";
    /// Backend: supports a control ring.
    pub const FEATURE_CTRL_RING: &str = "feature-ctrl-ring";
    /// Backend: most queues it supports.
    pub const MULTI_QUEUE_MAX_QUEUES: &str = "multi-queue-max-queues";
    /// Frontend: queues it uses (1..=max); with 2 or more, per-queue keys go
    /// under `queue-N/`.
    pub const MULTI_QUEUE_NUM_QUEUES: &str = "multi-queue-num-queues";
    /// Backend: link state, "0" down or "1" up; absent means up.
    pub const CARRIER: &str = "carrier";
    /// Toolstack: MTU hint for the frontend; absent means 1500.
    pub const MTU: &str = "mtu";
    /// Frontend: "0" means do not trust the backend.
    pub const TRUSTED: &str = "trusted";
    /// Backend (toolstack): the bridge the vif joins in its driver domain
    /// (xl's `bridge=`); absent means [`DEFAULT_BRIDGE`](super::DEFAULT_BRIDGE).
    pub const BRIDGE: &str = "bridge";
    /// Backend (toolstack): the addresses the guest may send from, separated
    /// by spaces (xl's `ip=`); absent means no check by address.
    pub const IP: &str = "ip";
    /// Backend (toolstack): the transmit credit, `<bytes>,<usec>` (bytes per
    /// interval, as libxl writes xl's `rate=`); absent means unlimited.
    pub const RATE: &str = "rate";
    /// Backend (toolstack): the vif's access VLAN, 1..=4094 (xl's `vlan=`,
    /// done by splitnet's own bridge); absent means untagged.
    pub const VLAN: &str = "splitnet-vlan";
    /// Backend (toolstack): the hotplug script (xl's `script=`).
    pub const SCRIPT: &str = "script";
    /// Backend (toolstack): the vif's name in the driver domain (xl's `vifname=`).
    pub const VIFNAME: &str = "vifname";
    /// Backend (toolstack): the uplink the vif takes a dedicated receive
    /// queue on (the Ram thesis's `pdev=`); absent: the shared queue.
    pub const PDEV: &str = "splitnet-pdev";
    /// Backend (toolstack): how received frames reach the guest, `copy` or
    /// `flip` (Menon 2006 §4.2: copy instead of page flipping).
    pub const RX_MODE: &str = "splitnet-rx-mode";
    /// Backend (toolstack): how netback reaches a transmitted payload,
    /// `copy`, `gather` or `map` (Menon 2006 §4.1).
    pub const TX_MODE: &str = "splitnet-tx-mode";
    /// Backend (toolstack): the grant mechanism, `hv-copy` or `ngm`.
    pub const GRANTS: &str = "splitnet-grants";
    /// Backend: the backend offers the new grant mechanism (Ram thesis
    /// ch. 4). Xen has no such key; splitnet's own keys carry its prefix.
    pub const FEATURE_NGM: &str = "feature-splitnet-ngm";
    /// Frontend: the handle of the translation table hv made for this vif
    /// (Ram thesis 4.5.1: the guest passes it to the driver domain).
    pub const NGM_TABLE: &str = "splitnet-ngm-table";
    /// Backend (toolstack): the vif's index in its driver domain.
    pub const INDEX: &str = "splitnet-index";
    /// Backend (toolstack): the offloads the topology allows the vif
    /// (`abi::offloads::Caps`, Menon 2006 §3).
    pub const OFFLOAD: &str = "splitnet-offload";
    /// Frontend (`guest`) or backend (`driver`) directory: that end runs
    /// large receive offload (Ram thesis 5.1).
    pub const LRO: &str = "splitnet-lro";
    /// Frontend and backend: `1` prefetches the next packet's header
    /// (Ram thesis 5.2).
    pub const PREFETCH: &str = "splitnet-prefetch";
    /// Frontend: `half` posts two 2 KiB receive buffers per page (Ram
    /// thesis 5.3).
    pub const RX_BUFFER: &str = "splitnet-rx-buffer";
    /// Backend (toolstack): a count raised after the toolstack changed a
    /// connected vif's `ip`, `rate`, `mtu`, `bridge` or `splitnet-vlan` in
    /// place; netback takes the options together when it moves. Xen reads
    /// them at connection only.
    pub const OPTIONS: &str = "splitnet-options";
    /// Backend (driver domain): the `splitnet-options` count netback took,
    /// followed by ` refused: <why>` when it kept the options it had.
    pub const OPTIONS_TAKEN: &str = "splitnet-options-taken";
    /// Backend: why netback gave the vif up, for the toolstack's status.
    pub const DISCONNECT_REASON: &str = "disconnect-reason";
    /// Frontend and backend (toolstack): which attachment of the handle the
    /// directory belongs to, new at each attach and kept while the vif
    /// lives (a driver domain's restart re-points it, same value). An end
    /// whose store watches were drained together may see a directory that
    /// was removed and written again as unchanged; this tells it that the
    /// device is a new one. Xen's xenstored queues every watch event, so
    /// Xen has no such key.
    pub const ATTACH: &str = "splitnet-attach";
}

/// Smallest MTU a vif accepts (IPv4's minimum datagram).
pub const MIN_MTU: u16 = 68;
/// Largest MTU a vif accepts (jumbo frames).
pub const MAX_MTU: u16 = 9000;
/// MTU of a vif whose backend directory has no `mtu` node.
pub const DEFAULT_MTU: u16 = 1500;

/// Parses a vif's `mtu` node: a decimal in [`MIN_MTU`]..=[`MAX_MTU`].
/// Both ends read it: netback bounds what the guest may send, netfront
/// sets its TAP's MTU.
pub fn parse_mtu(v: &str) -> Result<u16, String> {
    v.trim()
        .parse::<u16>()
        .ok()
        .filter(|m| (MIN_MTU..=MAX_MTU).contains(m))
        .ok_or_else(|| format!("not an MTU in {MIN_MTU}..={MAX_MTU}"))
}

/// The bridge a vif or an uplink joins when it names none (xl's default).
pub const DEFAULT_BRIDGE: &str = "xenbr0";

/// A vif frontend's directory: `/local/domain/{domid}/device/vif/{devid}`.
pub fn frontend_path(domid: DomId, devid: u32) -> String {
    format!("/local/domain/{domid}/device/vif/{devid}")
}

/// A vif backend's directory:
/// `/local/domain/{backend}/backend/vif/{frontend}/{devid}`.
pub fn backend_path(backend_domid: DomId, frontend_domid: DomId, devid: u32) -> String {
    format!("/local/domain/{backend_domid}/backend/vif/{frontend_domid}/{devid}")
}

/// Xen's name for a vif, `vif<guest>.<handle>`, from its backend directory
/// `.../backend/vif/<guest>/<handle>`.
pub fn vif_name(be: &str) -> String {
    let mut parts = be.rsplit('/');
    let handle = parts.next().unwrap_or("?");
    let guest = parts.next().unwrap_or("?");
    format!("vif{guest}.{handle}")
}

/// Store key (under `/local/domain/<id>/splitnet/`) holding a domain's spin
/// budget in microseconds; absent or 0 means no spin.
pub const SPIN_KEY: &str = "spin-us";

/// Where domain `domid`'s spin budget is in the store.
pub fn spin_path(domid: DomId) -> String {
    format!("/local/domain/{domid}/splitnet/{SPIN_KEY}")
}

/// A domain's home directory: `/local/domain/{domid}`.
pub fn domain_path(domid: DomId) -> String {
    format!("/local/domain/{domid}")
}

/// The sub-directory for queue `n` of a multi-queue vif: `{dir}/queue-{n}`.
pub fn queue_path(dir: &str, n: u32) -> String {
    format!("{dir}/queue-{n}")
}

/// Checks a store path against xenstore's rules: characters `A-Za-z0-9-/_@`,
/// no empty element (`//`), no trailing `/` except the root, and at most
/// [`XENSTORE_ABS_PATH_MAX`] bytes if absolute or [`XENSTORE_REL_PATH_MAX`]
/// if relative. Special watch paths such as `@releaseDomain` pass.
pub fn validate_path(path: &str) -> Result<(), Error> {
    let bad = |reason: String| Error::BadPath {
        path: path.chars().take(80).collect(),
        reason,
    };
    if path.is_empty() {
        return Err(bad("empty path".into()));
    }
    let (max, kind) = if path.starts_with('/') {
        (XENSTORE_ABS_PATH_MAX, "absolute")
    } else {
        (XENSTORE_REL_PATH_MAX, "relative")
    };
    if path.len() > max {
        return Err(bad(format!(
            "{kind} path of {} bytes exceeds {max}",
            path.len()
        )));
    }
    if let Some((i, c)) = path
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '/' | '_' | '@')))
    {
        return Err(bad(format!("character {c:?} at byte {i} is not allowed")));
    }
    if path.contains("//") {
        return Err(bad("empty path element (\"//\")".into()));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(bad("trailing '/'".into()));
    }
    Ok(())
}

/// Prefix of a multi-queue port's queue interfaces in a driver domain
/// (`snq<port ifindex>v<vif index>`, Ram thesis ch. 3): whoever cleans up
/// after a driver domain (itself restarted, or hv) finds them by it.
pub const QUEUE_PREFIX: &str = "snq";

/// The name of the queue of vif index `vif` on the port of interface
/// index `port`. An interface name holds at most 15 bytes: a longer one
/// is refused where the link is made.
pub fn queue_name(port: u32, vif: u32) -> String {
    format!("{QUEUE_PREFIX}{port}v{vif}")
}

/// Whether interface `name` is a queue's (see [`QUEUE_PREFIX`]).
pub fn is_queue_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(QUEUE_PREFIX) else {
        return false;
    };
    let Some((p, v)) = rest.split_once('v') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(p) && digits(v)
}

/// A MAC as a vif's `mac` key writes it (`aa:bb:cc:dd:ee:ff`): what
/// [`parse_mac`] reads.
pub fn mac_text(m: &[u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// Parses a vif's `mac` key (`aa:bb:cc:dd:ee:ff`, unicast) into bytes.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("{s:?} is not a MAC address like 00:16:3e:00:00:01"));
    }
    for (b, p) in mac.iter_mut().zip(&parts) {
        *b = u8::from_str_radix(p, 16)
            .map_err(|_| format!("{s:?} is not a MAC address like 00:16:3e:00:00:01"))?;
    }
    if mac[0] & 1 != 0 {
        return Err(format!("{s:?} is a multicast address"));
    }
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_and_display() {
        for s in XenbusState::ALL {
            assert_eq!(s.to_string().parse::<XenbusState>().unwrap(), s);
        }
        assert_eq!("4".parse::<XenbusState>().unwrap(), XenbusState::Connected);
        for bad in [
            "",
            "9",
            "-1",
            "+4",
            " 4",
            "4\n",
            "Connected",
            "0x4",
            "99999999999",
        ] {
            assert!(
                matches!(bad.parse::<XenbusState>(), Err(Error::BadState { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(XenbusState::InitWait.name(), "InitWait");
    }

    #[test]
    fn paths() {
        assert_eq!(frontend_path(3, 0), "/local/domain/3/device/vif/0");
        assert_eq!(backend_path(1, 3, 0), "/local/domain/1/backend/vif/3/0");
        assert_eq!(
            queue_path(&frontend_path(1, 0), 1),
            "/local/domain/1/device/vif/0/queue-1"
        );
        for ok in [
            "/",
            "/local/domain/1/device/vif/0/feature-gso-tcpv4",
            "device/vif/0/state",
            "@releaseDomain",
            "a_b",
        ] {
            validate_path(ok).unwrap();
        }
        for bad in ["", "/a//b", "/a/", "a/", "/a b", "/a.b", "/ä", "//"] {
            assert!(
                matches!(validate_path(bad), Err(Error::BadPath { .. })),
                "{bad:?}"
            );
        }
        let long_abs = format!("/{}", "a".repeat(XENSTORE_ABS_PATH_MAX - 1));
        validate_path(&long_abs).unwrap();
        assert!(validate_path(&format!("{long_abs}a")).is_err());
        let long_rel = "a".repeat(XENSTORE_REL_PATH_MAX);
        validate_path(&long_rel).unwrap();
        assert!(validate_path(&format!("{long_rel}a")).is_err());
    }
}
