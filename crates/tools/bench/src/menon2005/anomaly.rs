//! The anomaly of Menon 2005's Figure 1: a Xen setup's
//! throughput falling and recovering with the receive buffer size, where
//! Linux's does not, confirmed or not by the profiled reruns.

use super::{Anomaly, Experiment, Point, Profiled, Setup};
use std::collections::BTreeMap;

/// A point well below both neighbours of a sweep: the shape of the
/// paper's Figure 1, where throughput falls and recovers as the buffer grows.
pub fn dips(v: &[f64]) -> usize {
    v.windows(3)
        .filter(|w| w[1] < 0.75 * w[0].min(w[2]))
        .count()
}

/// Each setup's buffer sweep: its spread and dips, and whether a Xen
/// setup is erratic where Linux is not, confirmed by the profiled reruns
/// of its best (A) and worst (B) points.
pub(super) fn anomaly(summary: &[Point], profiles: &[Profiled]) -> Option<Anomaly> {
    let mut spread = BTreeMap::new();
    let mut erratic = Vec::new();
    for s in Setup::ALL {
        let v: Vec<f64> = summary
            .iter()
            .filter(|p| p.setup == s && p.experiment == Experiment::Buffer)
            .map(|p| p.value.median)
            .collect();
        if v.len() < 2 {
            continue;
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        let (min, max) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        spread.insert(
            s.name().to_string(),
            (var.sqrt() / mean.max(1e-9), min, max),
        );
        if s != Setup::Linux && (dips(&v) > 0 || min < 0.5 * max) {
            erratic.push(s);
        }
    }
    if spread.is_empty() {
        return None;
    }
    let rerun = |what| {
        profiles
            .iter()
            .find(|p| p.setup == Setup::Guest1 && p.what == what)
    };
    let verdict = match erratic.as_slice() {
        [] => NO_ANOMALY.to_string(),
        e => {
            let names: Vec<&str> = e.iter().map(|s| s.name()).collect();
            match (rerun("buffer A"), rerun("buffer B")) {
                (Some(a), Some(b)) if b.gbps >= 0.75 * a.gbps => format!(
                    "not reproducible: {} varied with the buffer in the sweep, but rerun under the \
                     profiler the worst point ({} B) gave {:.2} Gbit/s against the best's ({} B) \
                     {:.2}: noise between runs, not the buffer size. {NO_ANOMALY}",
                    names.join(", "), b.x, b.gbps, a.x, a.gbps
                ),
                (Some(a), Some(b)) => format!(
                    "erratic where Linux is not: {}; rerun, {} B gave {:.2} Gbit/s and {} B {:.2}; \
                     Tables 1 and 2 show where the time went",
                    names.join(", "), a.x, a.gbps, b.x, b.gbps
                ),
                _ => format!(
                    "erratic where Linux is not: {} (not confirmed: no profiled rerun)",
                    names.join(", ")
                ),
            }
        }
    };
    Some(Anomaly { spread, verdict })
}

/// Why the anomaly does not occur here.
pub(super) const NO_ANOMALY: &str =
    "the anomaly needs each 1448-byte segment charged a whole page, as XenoLinux's \
    page-per-packet receive buffers were, so that a fixed receive buffer fills at a third of its \
    bytes and TCP compacts its queue (tcp_collapse, Table 2); here the sweep's socket has its \
    buffer fixed at 87,380 bytes and TcpExtTCPRcvCollapsed counts the compactions, but with \
    page buffers the driver domain's kernel takes each frame from a TAP (the bridge writes it \
    there from the page it landed on), which builds a frame shorter than a page \
    in a buffer of its own size (about 2.3 KB charged per 1448-byte segment, `ss -tm` during a \
    receive), so `port_buffer = \"page\"` changes the driver domain's own buffers but not \
    what the socket is charged; and since Linux 6.6 TCP no longer advertises a window from the \
    fixed tcp_adv_win_scale but from each socket's measured ratio of payload to charged memory \
    (its scaling ratio), so a page per segment would shrink the window instead of overfilling \
    the buffer: the kernel removed the anomaly's cause";
