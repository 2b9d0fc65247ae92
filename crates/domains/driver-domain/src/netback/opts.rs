//! The per-vif options the toolstack writes to the backend directory
//! (xl-network-configuration(5)), read when the vif is probed and again
//! when the toolstack changes them in place (`splitnet-options`). A bad
//! node refuses the vif (or the change) with a clear reason; it never
//! reaches the data path.

use super::{frame_limit, Netback, NetbackError, Result};
use crate::antispoof::IpFilter;
use crate::credit::Credit;
use abi::xenbus::keys;
use hypercall::HvClient;
use std::time::Instant;

pub use abi::xenbus::{parse_mtu, DEFAULT_MTU, MAX_MTU, MIN_MTU};

/// A vif's data-path options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VifOpts {
    /// `ip`: the addresses the guest may send from; None: no check.
    pub ip: Option<IpFilter>,
    /// `rate`: bytes per interval of µs; None: unlimited.
    pub rate: Option<(u64, u64)>,
    /// `mtu`: the largest frame the guest may send is this plus its
    /// Ethernet header.
    pub mtu: u16,
}

impl Default for VifOpts {
    fn default() -> VifOpts {
        VifOpts {
            ip: None,
            rate: None,
            mtu: DEFAULT_MTU,
        }
    }
}

/// Why a vif option was refused: names the node and its value.
fn bad(be: &str, key: &str, v: &str, why: impl std::fmt::Display) -> NetbackError {
    NetbackError::Config(format!("{be}/{key} = {v:?}: {why}"))
}

/// Reads and checks the options under backend directory `be`; an absent
/// node takes its default.
pub fn read(hv: &mut HvClient, be: &str) -> Result<VifOpts> {
    let mut o = VifOpts::default();
    let mut node = |key: &str| hv.store_read_str(&format!("{be}/{key}")).ok();
    if let Some(v) = node(keys::IP) {
        o.ip = Some(IpFilter::parse(&v).map_err(|e| bad(be, keys::IP, &v, e))?);
    }
    if let Some(v) = node(keys::RATE) {
        o.rate = Some(crate::credit::parse_store_rate(&v).map_err(|e| bad(be, keys::RATE, &v, e))?);
    }
    if let Some(v) = node(keys::MTU) {
        o.mtu = parse_mtu(&v).map_err(|e| bad(be, keys::MTU, &v, e))?;
    }
    Ok(o)
}

impl Netback {
    /// Takes the options the toolstack changed in place: the address
    /// filter, the credit (a new window at the new rate) and the MTU, all
    /// at once. A node that does not parse leaves every option as it was.
    pub fn take_options(&mut self, hv: &mut HvClient) -> Result<()> {
        let o = read(hv, &self.be)?;
        self.ip = o.ip.map(|f| f.with_mac(self.mac));
        self.credit = o
            .rate
            .map(|(bytes, usec)| Credit::new(bytes, usec, Instant::now()));
        self.max_frame = frame_limit(&self.be, o.mtu, self.negotiated.sg);
        self.mtu = o.mtu;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_mtu;

    #[test]
    fn mtus_are_bounded() {
        assert_eq!(parse_mtu("1500"), Ok(1500));
        assert_eq!(parse_mtu("9000"), Ok(9000));
        assert_eq!(parse_mtu("68"), Ok(68));
        for bad in ["67", "9001", "", "-1", "1500.0", "65536"] {
            assert!(parse_mtu(bad).is_err(), "{bad:?}");
        }
    }
}
