//! Waiting for a new interface to carry frames.

use crate::wait_until;
use std::process::Command;
use std::time::Duration;

/// Waits until each of `names` (in this network namespace) can carry
/// frames. Setting a veth's second end up turns the first's carrier on, but
/// the kernel gives the first end its transmit queue only later, from its
/// link-watch work; until then a frame sent there is dropped without an
/// error. That work sets the operational state to `up` and then attaches
/// the queue, both under the rtnl lock; so once the state reads `up`, one
/// more rtnl request (setting the link up again, which changes nothing)
/// returns only after the queue is in place.
pub fn wait_links_up(names: &[&str]) {
    for n in names {
        let path = format!("/sys/class/net/{n}/operstate");
        wait_until(
            &format!("{n} up"),
            Duration::from_secs(10),
            || match std::fs::read_to_string(&path) {
                Ok(s) if s.trim() == "up" => Ok(()),
                Ok(s) => Err(format!("operstate {}", s.trim())),
                Err(e) => Err(format!("{path}: {e}")),
            },
        );
        let st = Command::new("ip")
            .args(["link", "set", n, "up"])
            .status()
            .expect("run ip");
        assert!(st.success(), "ip link set {n} up: {st}");
    }
}
