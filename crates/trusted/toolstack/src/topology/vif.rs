//! A guest's virtual NIC as the topology resolves it ([`VifConfig`]) and
//! the options a vifspec gives it ([`VifOptions`]).

use super::domain::{Grants, LroAt, Offloads, RxBuffer, RxMode, TxMode};
use std::net::IpAddr;

/// A guest's virtual NIC, resolved from the topology.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct VifConfig {
    pub guest: String,
    /// The device's number within its guest (`device/vif/<handle>`).
    pub handle: u32,
    pub backend: String,
    pub mac: String,
    pub rx_mode: RxMode,
    pub tx_mode: TxMode,
    pub grants: Grants,
    /// The offloads the vif may negotiate (`offload`).
    #[serde(with = "super::domain::offloads_by_name")]
    pub offload: Offloads,
    /// Where large receive offload runs (`lro`).
    pub lro: LroAt,
    /// Prefetch the next received packet's header (`prefetch`).
    pub prefetch: bool,
    /// Half-page receive buffers (`rx_buffer = "half"`).
    pub rx_buffer: RxBuffer,
    /// Index of this vif among its driver domain's vifs.
    pub index: usize,
    /// Xen's per-vif options (xl's vifspec keys).
    pub opts: VifOptions,
}

/// A vif's options as xl's vifspec gives them (xl-network-configuration(5));
/// the toolstack writes them to the backend directory (`setup_vif`), where
/// the driver domain reads them.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct VifOptions {
    /// The bridge the vif joins; None: [`abi::xenbus::DEFAULT_BRIDGE`].
    pub bridge: Option<String>,
    /// Addresses the guest may send from (anti-spoofing); empty: no check.
    pub ip: Vec<IpAddr>,
    /// Transmit credit; None: unlimited.
    pub rate: Option<CreditRate>,
    /// Access VLAN (1..=4094); None: untagged.
    pub vlan: Option<u16>,
    /// MTU; None: 1500.
    pub mtu: Option<u16>,
    /// Hotplug script run in the driver domain on attach and detach.
    pub script: Option<String>,
    /// The vif's name in the driver domain; None: `vif<domid>.<handle>`.
    pub vifname: Option<String>,
    /// The uplink the vif takes a dedicated receive queue on (the Ram
    /// thesis's `pdev=`, ch. 3); None: the shared queue, through the bridge.
    pub pdev: Option<String>,
}

/// Xen netback's credit: `bytes` may be sent per `usec` microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreditRate {
    pub bytes: u64,
    pub usec: u64,
}

impl VifConfig {
    /// A vif on the default fast path (the new grant mechanism, TX gather,
    /// RX copy, offloads on): `guest`'s first, the `index`th of driver
    /// domain `backend`, with a locally administered MAC numbered from it.
    pub fn fast_path(guest: &str, backend: &str, index: usize) -> VifConfig {
        let n = index + 1;
        VifConfig {
            guest: guest.into(),
            handle: 0,
            backend: backend.into(),
            mac: format!("00:16:3e:00:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff),
            rx_mode: RxMode::Copy,
            tx_mode: TxMode::Gather,
            grants: Grants::Ngm,
            offload: Offloads::ALL,
            lro: LroAt::Off,
            prefetch: false,
            rx_buffer: RxBuffer::Page,
            index,
            opts: VifOptions::default(),
        }
    }
}
