//! The process that is a domain: it connects to hv through the descriptor it
//! inherited, maps its memory, announces itself in the store, and runs its
//! drivers: netfront in a guest, bridge + netback + port in a driver domain.

use anyhow::{anyhow, Context, Result};
use hv::daemon::ENV_HV_FD;
use hv::HvClient;
use net::idle::Idle;
use net::netfront::{Netfront, TapNetfront};
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
    // Confined before reading a byte from a peer (hv::jail).
    hv::jail::Role::of_kind(&hv.welcome().kind)
        .and_then(hv::jail::enter)
        .map_err(|e| anyhow!("domain {id}: {e}"))?;
    let home = format!("/local/domain/{id}");
    hv.store_write(&format!("{home}/pid"), &std::process::id().to_string())
        .map_err(|e| anyhow!("{e}"))?;
    let w = hv.welcome().clone();
    eprintln!(
        "domain {id} ({}, {}) up: {} frames of grantable memory, {} grant references",
        w.name,
        w.kind,
        w.pool_frames,
        hv.grants().entries()
    );
    let r = match w.kind.as_str() {
        "driver" => net::driver::run(&mut hv).map_err(|e| anyhow!("driver domain: {e}")),
        _ => guest(&mut hv, &home),
    };
    match r {
        Ok(()) => Ok(()),
        // hv closing our channels is how a domain is shut down.
        Err(e) if hv.nop().is_err() => {
            eprintln!("domain {id}: hv went away ({e}); exiting");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Publishes netfront's counters (and, under the new grant mechanism, its
/// grant-track statistics) to `<frontend>/stats` at most once a second and
/// only when they changed, for `splitnet status`.
#[derive(Default)]
struct FrontStats {
    written: String,
    at: Option<std::time::Instant>,
}

impl FrontStats {
    fn publish(&mut self, hv: &mut HvClient, dev: &str, nic: &TapNetfront) {
        if self
            .at
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.at = Some(std::time::Instant::now());
        let doc = serde_json::json!({
            "counters": &nic.nf.counters,
            "grant_track": nic.nf.grant_stats(),
        })
        .to_string();
        if doc != self.written && hv.store_write(&format!("{dev}/stats"), &doc).is_ok() {
            self.written = doc;
        }
    }
}

/// A guest: netfront for its vif (if it has one), until hv goes away.
fn guest(hv: &mut HvClient, home: &str) -> Result<()> {
    let devs = hv
        .store_directory(&format!("{home}/device/vif"))
        .unwrap_or_default();
    let Some(dev) = devs.first() else {
        // No NIC: just live until destroyed.
        loop {
            hv.next_watch(Duration::from_secs(3600))
                .map_err(|e| anyhow!("{e}"))?;
        }
    };
    let dev = format!("{home}/device/vif/{dev}");
    let nf = Netfront::connect(hv, &dev, Duration::from_secs(30))
        .map_err(|e| anyhow!("netfront: {e}"))?;
    let mut nic = TapNetfront::attach(hv, nf, "eth0").map_err(|e| anyhow!("netfront: {e}"))?;
    let info = nic.nf.info.clone();
    eprintln!(
        "netfront {dev}: connected to {} (rx {}, offload {}, split event channels {})",
        info.backend,
        if info.copy_rx { "copy" } else { "flip" },
        info.offload,
        info.split_evtchn
    );
    hv.watch(&format!("{}/state", info.backend), "backend")
        .map_err(|e| anyhow!("{e}"))?;
    let mut idle = Idle::for_domain(hv, "netfront", Duration::from_millis(200));
    let mut stats = FrontStats::default();
    loop {
        stats.publish(hv, &dev, &nic);
        let ready = {
            let mut fds = vec![hv.watch_fd()];
            fds.extend(nic.fds());
            sys::poll_readable(&fds, Some(idle.timeout(false)))?
        };
        if ready.iter().any(|&r| r) {
            idle.worked();
        }
        if ready[0] {
            while let Some(_ev) = hv.next_watch(Duration::ZERO).map_err(|e| anyhow!("{e}"))? {
                let gone = match hv.read_state(&info.backend) {
                    Ok(s) => matches!(
                        s,
                        abi::xenbus::XenbusState::Closing | abi::xenbus::XenbusState::Closed
                    ),
                    Err(_) => true,
                };
                if gone {
                    nic.disconnect("the backend is closing");
                }
            }
        }
        if nic.nf.is_connected() {
            nic.poll_once(hv).map_err(|e| anyhow!("netfront: {e}"))?;
        }
    }
}
