//! `splitnet restart`, `network-attach` and `network-detach`: the toolstack
//! asks hv's supervisor, which does the work and the waiting.

use crate::daemon::socket_path;
use anyhow::{anyhow, Context, Result};
use hv::Toolstack;
use std::path::Path;

fn toolstack(rd: &Path) -> Result<Toolstack> {
    Toolstack::connect(&socket_path(rd))
        .map_err(|e| anyhow!("{e}"))
        .context("is splitnet up? (no hv answers)")
}

/// Restarts a domain and returns once it runs again.
pub fn restart(rd: &Path, domain: &str) -> Result<()> {
    let t0 = std::time::Instant::now();
    toolstack(rd)?
        .restart(domain)
        .map_err(|e| anyhow!("restarting {domain}: {e}"))?;
    println!(
        "{domain} restarted in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

/// Adds a vif to a running guest and prints its handle and interface.
pub fn attach(rd: &Path, guest: &str, mac: Option<&str>, backend: Option<&str>) -> Result<()> {
    let h = toolstack(rd)?
        .network_attach(guest, mac, backend)
        .map_err(|e| anyhow!("attaching a vif to {guest}: {e}"))?;
    println!("{guest}: vif {h} connected as eth{h}");
    Ok(())
}

/// Removes vif `vif` (its handle, `ethN` or `vifD.N`) from a running guest.
pub fn detach(rd: &Path, guest: &str, vif: &str) -> Result<()> {
    let h = parse_vif(vif)?;
    toolstack(rd)?
        .network_detach(guest, h)
        .map_err(|e| anyhow!("detaching vif {h} from {guest}: {e}"))?;
    println!("{guest}: vif {h} detached");
    Ok(())
}

/// A vif's handle from `N`, `ethN` or `vifD.N`.
pub(crate) fn parse_vif(s: &str) -> Result<u32> {
    let n = s
        .strip_prefix("eth")
        .or_else(|| {
            s.strip_prefix("vif")
                .and_then(|r| r.split_once('.').map(|p| p.1))
        })
        .unwrap_or(s);
    n.parse()
        .map_err(|_| anyhow!("{s:?} names no vif: give its handle (0, 1), ethN or vifD.N"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_vif_is_named_by_handle_interface_or_xen_name() {
        for (s, h) in [("1", 1), ("eth1", 1), ("vif7.1", 1), ("0", 0)] {
            assert_eq!(super::parse_vif(s).unwrap(), h, "{s}");
        }
        for bad in ["", "eth", "vif7", "x1", "-1"] {
            assert!(super::parse_vif(bad).is_err(), "{bad}");
        }
    }
}
