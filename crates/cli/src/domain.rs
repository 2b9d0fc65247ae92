//! The process that is a domain: it connects to hv through the descriptor it
//! inherited, maps its memory, announces itself in the store and stays alive
//! until hv goes away. Drivers (netfront, netback) run here.

use anyhow::{anyhow, Context, Result};
use hv::daemon::ENV_HV_FD;
use hv::HvClient;
use std::time::Duration;

/// Closes everything but the inherited hv socket.
pub fn close_stray_fds() {
    let keep: Vec<i32> = std::env::var(ENV_HV_FD)
        .ok()
        .and_then(|v| v.parse().ok())
        .into_iter()
        .collect();
    sys::close_inherited_fds(&keep);
}

pub fn main() -> Result<()> {
    let fd: i32 = std::env::var(ENV_HV_FD)
        .context("`splitnet domain` is started by hv, not by hand")?
        .parse()
        .context("bad descriptor number")?;
    let fd = sys::take_inherited_fd(fd).context("inherited hv socket")?;
    let mut hv =
        HvClient::connect(sys::SeqPacket::from_fd(fd)).map_err(|e| anyhow!("hello: {e}"))?;
    let id = hv.domid();
    let home = format!("/local/domain/{id}");
    hv.store_write(&format!("{home}/pid"), &std::process::id().to_string())
        .map_err(|e| anyhow!("{e}"))?;
    eprintln!(
        "domain {id} ({}, {}) up: {} frames of grantable memory, {} grant references",
        hv.welcome().name,
        hv.welcome().kind,
        hv.welcome().pool_frames,
        hv.grants().entries()
    );
    // Stay until hv closes our channels (domain destroyed or hv gone).
    hv.watch(&format!("{home}/control"), "control")
        .map_err(|e| anyhow!("{e}"))?;
    loop {
        match hv.next_watch(Duration::from_secs(3600)) {
            Ok(_) => {}
            Err(e) => {
                eprintln!("domain {id}: hv went away ({e}); exiting");
                return Ok(());
            }
        }
    }
}
