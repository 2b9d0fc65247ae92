//! A connected vif's options changed in place (`splitnet apply`): the
//! toolstack rewrites `ip`, `rate`, `mtu`, `bridge` and `splitnet-vlan`,
//! then raises `splitnet-options`; the vif takes them all at once, or none,
//! and says which count it took in `splitnet-options-taken`. Xen's netback
//! reads them only when the vif connects, so changing one there means a
//! detach and an attach; here the guest keeps its device and connections.

use super::state::Driver;
use super::vifs::vif_attach;
use abi::xenbus::keys::{OPTIONS, OPTIONS_TAKEN};
use hypercall::HvClient;

impl Driver {
    /// Takes the options under backend directory `be`, if a connected vif
    /// has it, and answers with the count taken (or why it was refused).
    pub(super) fn take_options(&mut self, hv: &mut HvClient, be: &str) {
        let Some(i) = self
            .vifs
            .iter()
            .position(|v| !v.gone && v.nb.is_connected() && v.nb.be == be)
        else {
            // A vif still connecting reads its options when it does.
            return;
        };
        let Ok(count) = hv.store_read_str(&format!("{be}/{OPTIONS}")) else {
            return;
        };
        let taken = match self.reconfigure(hv, i) {
            Ok(()) => count,
            Err(e) => {
                eprintln!("driver: {}: options not changed: {e}", crate::vif_name(be));
                self.stats.config_errors += 1;
                format!("{count} refused: {e}")
            }
        };
        let _ = hv.store_write(&format!("{be}/{OPTIONS_TAKEN}"), &taken);
    }

    /// Vif `i` takes its backend directory's options: its bridge and VLAN,
    /// then netback's filter, credit and MTU. Its MACs leave the bridge
    /// when it moves (they were learned on the old segment), and it is
    /// serviced at once (a vif that waited for credit may not have to).
    fn reconfigure(&mut self, hv: &mut HvClient, i: usize) -> Result<(), String> {
        let be = self.vifs[i].nb.be.clone();
        let attach = vif_attach(hv, &be, &mut self.bridge)?;
        let v = &mut self.vifs[i];
        v.nb.take_options(hv).map_err(|e| e.to_string())?;
        if v.attach != attach {
            v.attach = attach;
            self.bridge.forget_port(i + 1);
        }
        self.events.ready.insert(i);
        eprintln!(
            "driver: {}: options changed in place (on {} {:?}, frames up to {} bytes)",
            crate::vif_name(&be),
            self.bridge.name(attach.bridge),
            attach.mode,
            self.vifs[i].nb.max_frame()
        );
        Ok(())
    }
}
