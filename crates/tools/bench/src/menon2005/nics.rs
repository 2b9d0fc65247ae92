//! Menon 2005's NICs on this host (§5.1): the paper's receiver had one
//! 2.4 GHz CPU and three gigabit NICs, and native Linux received 2,462
//! Mb/s over the three, bound by its CPU, where one NIC carried 941. A
//! gigabit NIC on a host several times faster never binds the CPU, so
//! the regime Figure 3 is about (one NIC: the NIC limits; three: the CPU)
//! never appears. Scaled NICs ([`crate::machine::NicRate::Scaled`]) keep
//! the paper's ratio of CPU to line rate: native Linux receives over the
//! three links unshaped on the server's core, and each NIC's rate becomes
//! a gigabit times that over the paper's 2,462 Mb/s.

use super::{bring_up, tear_down, Ctx, Reading, Setup};
use anyhow::Result;

/// Native Linux's receive over the paper's three NICs, Mb/s (Figure 3):
/// CPU-bound, 2.62 times one NIC's 941.
pub const LINUX_RX_MBPS: f64 = 2462.0;

/// Measures native Linux's receive over the three links unshaped on the
/// server's core, and rates the paper's NICs by it from here on.
pub(super) fn calibrate(ctx: &mut Ctx<'_>) -> Result<()> {
    let Some(pm) = ctx.base.paper else {
        return Ok(());
    };
    ctx.base.paper = Some(pm.unshaped());
    let bed = match bring_up(ctx, Setup::Linux)? {
        Ok(b) => b,
        Err(why) => anyhow::bail!("native Linux: {why}"),
    };
    let nics = bed.paths.len();
    let m = bed.measure(ctx, nics, Reading::STREAM, false, false);
    tear_down(ctx, bed);
    let (scaled, line) = pm.calibrated(m?.flow.gbps * 1000.0, LINUX_RX_MBPS, nics);
    ctx.say(&line);
    ctx.base.paper = Some(scaled);
    Ok(())
}
