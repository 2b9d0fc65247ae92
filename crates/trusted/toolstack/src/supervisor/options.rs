//! A connected vif's live options (`ip`, `rate`, `mtu`, `vlan`, `bridge`)
//! changed in place by `splitnet apply`: the backend nodes rewritten, the
//! driver domain told, its answer awaited; the guest keeps its device, its
//! process and its connections.

use super::{fail, home_of, read_node, state_of, wait_until, Supervisor, HANDSHAKE};
use crate::store::{change_vif_options, Store};
use crate::topology::{VifConfig, VifOptions};
use abi::xenbus::{keys, XenbusState};
use hv::core::Hypervisor;
use hv::error::{ErrorKind, HvResult};
use std::sync::Arc;

impl Supervisor {
    /// Vif `to.handle` of `to.guest` takes `to`'s live options. On failure
    /// it keeps (or gets back) the options it had.
    pub(super) fn change_vif(&self, hv: &Arc<Hypervisor>, to: &VifConfig) -> HvResult<()> {
        let running = self
            .lock()
            .vifs
            .iter()
            .find(|x| x.guest == to.guest && x.handle == to.handle)
            .cloned()
            .ok_or_else(|| {
                let why = format!("{} has no vif {}", to.guest, to.handle);
                fail(ErrorKind::BadDomain, why)
            })?;
        let next = VifConfig {
            opts: live(&running.opts, &to.opts),
            ..running.clone()
        };
        if let Err(e) = self.retarget(hv, &running, &next) {
            if let Err(u) = self.retarget(hv, &next, &running) {
                hv::log!(
                    Error,
                    dom = &to.guest,
                    "vif {}: restoring its options: {u}",
                    to.handle
                );
            }
            return Err(e);
        }
        let mut st = self.lock();
        if let Some(v) = st
            .vifs
            .iter_mut()
            .find(|x| x.guest == to.guest && x.handle == to.handle)
        {
            v.opts = next.opts;
        }
        Ok(())
    }

    /// Moves vif `from` to `to`'s options: its uplink members and
    /// published MAC follow a new bridge or VLAN; the driver domain takes
    /// the nodes and answers.
    fn retarget(&self, hv: &Arc<Hypervisor>, from: &VifConfig, to: &VifConfig) -> HvResult<()> {
        let internal = |e: String| fail(ErrorKind::Internal, e);
        let (_, be) = Self::paths(hv, from)?;
        let moved = (&from.opts.bridge, from.opts.vlan) != (&to.opts.bridge, to.opts.vlan);
        let mut ts = Store::new(hv);
        if moved {
            self.leave_uplinks(hv, from);
            let home = home_of(Self::domid(hv, &to.backend)?);
            self.uplinks.join(&mut ts, &home, to).map_err(internal)?;
            self.show_uplinks(hv);
        }
        let count = change_vif_options(&mut ts, &be, &to.opts).map_err(internal)?;
        self.await_taken(hv, &be, count)
    }

    /// Waits for the driver domain to take option count `count` of
    /// backend `be`: done when it echoes the count, refused with its
    /// reason, and done too when the vif is no longer connected (it reads
    /// its options again when it connects).
    fn await_taken(&self, hv: &Arc<Hypervisor>, be: &str, count: u64) -> HvResult<()> {
        let want = count.to_string();
        let mut answer = None;
        let done = wait_until(HANDSHAKE, || {
            answer = read_node(hv, &format!("{be}/{}", keys::OPTIONS_TAKEN))
                .filter(|t| t.split(' ').next() == Some(want.as_str()));
            answer.is_some() || state_of(hv, be) != Some(XenbusState::Connected)
        });
        match answer {
            Some(t) => match t.split_once(" refused: ") {
                Some((_, why)) => Err(fail(ErrorKind::Invalid, format!("{be}: {why}"))),
                None => Ok(()),
            },
            None if done => Ok(()),
            None => Err(fail(
                ErrorKind::Internal,
                format!("{be}: the driver domain did not take the options within {HANDSHAKE:?}"),
            )),
        }
    }
}

/// `running`'s options with `wanted`'s live ones.
fn live(running: &VifOptions, wanted: &VifOptions) -> VifOptions {
    VifOptions {
        ip: wanted.ip.clone(),
        rate: wanted.rate,
        mtu: wanted.mtu,
        vlan: wanted.vlan,
        bridge: wanted.bridge.clone(),
        ..running.clone()
    }
}
