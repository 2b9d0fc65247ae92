//! Driver-domain kills during an iperf3 stream each way, in the two ways
//! hv brings a driver domain back: taken over in place by a new process
//! (`takeover = true`, the default: no handshake, the rings kept) and
//! restarted as a new domain whose guests reconnect (`takeover = false`,
//! the `kills-restart` experiment), so one run compares them.

use super::{
    domain_pid, if_bytes, kill_driver, say, start_bidir, stream_cell, vif_connected_in, wait_for,
    with_iperf3_server_on, FaultsOptions, Up,
};
use anyhow::Result;
use hv::Toolstack;
use serde::Serialize;
use std::time::{Duration, Instant};

/// One driver-domain kill during a stream each way.
#[derive(Debug, Serialize)]
pub struct Kill {
    /// From SIGKILL until the wire host received bytes again.
    pub outage_ms: f64,
    /// From SIGKILL until guest1 received bytes again.
    pub outage_in_ms: f64,
    /// Retransmission timeouts the two ends' TCP took across it.
    pub rto: u64,
    /// From SIGKILL until both ends of guest1's vif were Connected again
    /// under the driver domain's new process.
    pub reconnect_ms: f64,
    /// The driver domain kept its id: a new process took it over in place.
    pub taken_over: bool,
    /// The iperf3 client exited 0.
    pub stream_ok: bool,
}

/// The topology the restart experiment brings up: the default one with
/// takeover off in its driver domain.
fn restart_topology(opts: &FaultsOptions) -> Result<String> {
    let text = toolstack::topology::DEFAULT_TOML.replacen(
        "kind = \"driver\"\n",
        "kind = \"driver\"\ntakeover = false\n",
        1,
    );
    std::fs::create_dir_all(&opts.run_dir)?;
    let path = opts.run_dir.join("faults-restart.toml");
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

/// The kills taken over in place and those restarted, as `--workloads`
/// asks for them (`kills`, `kills-restart`).
pub(super) fn both(opts: &FaultsOptions) -> Result<(Vec<Kill>, Vec<Kill>)> {
    let mut out = [Vec::new(), Vec::new()];
    let modes = [
        ("kills", "during iperf3 streams"),
        ("kills-restart", "with takeover off"),
    ];
    for (i, (name, what)) in modes.into_iter().enumerate() {
        if opts.wants(name) {
            say(opts, &format!("{} driver-domain kills {what}", opts.kills));
            out[i] = run(opts, i == 0)?;
        }
    }
    let [taken, restarted] = out;
    Ok((taken, restarted))
}

/// `opts.kills` driver-domain kills during iperf3 streams, taken over in
/// place (`takeover`) or restarted.
pub(super) fn run(opts: &FaultsOptions, takeover: bool) -> Result<Vec<Kill>> {
    let config = match takeover {
        true => None,
        false => Some(restart_topology(opts)?),
    };
    let args: Vec<&str> = config
        .iter()
        .flat_map(|c| ["--config", c.as_str()])
        .collect();
    let (mut up, srv, mut ts) = with_iperf3_server_on(opts, &args)?;
    let mut out = Vec::new();
    for k in 0..opts.kills {
        let kill = one_kill(&mut up, &mut ts, srv)?;
        say(
            opts,
            &format!(
                "kill {}/{}: {}; outage {:.0} ms out, {:.0} ms in, served again after {:.0} ms, {} retransmission timeouts, stream {}",
                k + 1,
                opts.kills,
                if kill.taken_over { "taken over in place" } else { "restarted as a new domain" },
                kill.outage_ms,
                kill.outage_in_ms,
                kill.reconnect_ms,
                kill.rto,
                if kill.stream_ok { "ended cleanly" } else { "FAILED" }
            ),
        );
        out.push(kill);
    }
    Ok(out)
}

/// Whether guest1's vif is Connected at both ends, with `drv`'s process
/// not `old`'s (`(domain, pid)`): taken over in place (the same domain)
/// or restarted (a new one).
pub(super) fn vif_connected(ts: &mut Toolstack, old: (u16, i32)) -> bool {
    let Ok(s) = ts.status() else { return false };
    let renewed = domain_pid(&s, "drv").is_some_and(|(_, p)| p != old.1);
    renewed && vif_connected_in(ts, &s, "guest1", "drv")
}

/// One driver-domain kill in the middle of an iperf3 stream each way
/// (`--bidir`) between guest1 and the wire host (iperf3 server `srv`):
/// when bytes flow again each way, read from the interface counters every
/// millisecond; when guest1's vif is Connected again; and how many
/// retransmission timeouts the two ends' TCP took (a frame lost at the
/// tail of a flight costs one, 200 ms at least).
fn one_kill(up: &mut Up<'_>, ts: &mut Toolstack, srv: u32) -> Result<Kill> {
    let (g1, client) = start_bidir(up, ts, srv, "4")?;
    let rto_before = tcp_timeouts(srv) + tcp_timeouts(g1);
    let (t0, old) = kill_driver(ts)?;
    // Traffic is the stream's data, not the few small frames (neighbour
    // discovery, multicast reports) a link that comes back sends.
    let dead_out = if_bytes(srv, "eth0", false).unwrap_or(0) + (64 << 10);
    let dead_in = if_bytes(g1, "eth0", false).unwrap_or(0) + (64 << 10);
    let (mut reconnected, mut back_in) = (None, None);
    let back_out = wait_for("traffic to resume", Duration::from_secs(10), || {
        if reconnected.is_none() && vif_connected(ts, old) {
            reconnected = Some(Instant::now());
        }
        if back_in.is_none() && if_bytes(g1, "eth0", false).unwrap_or(0) > dead_in {
            back_in = Some(Instant::now());
        }
        if_bytes(srv, "eth0", false).unwrap_or(0) > dead_out
    })?;
    let back_in = match back_in {
        Some(t) => t,
        None => wait_for(
            "traffic into guest1 to resume",
            Duration::from_secs(10),
            || if_bytes(g1, "eth0", false).unwrap_or(0) > dead_in,
        )?,
    };
    let reconnected = match reconnected {
        Some(t) => t,
        None => wait_for("the vif to reconnect", Duration::from_secs(10), || {
            vif_connected(ts, old)
        })?,
    };
    let now = ts.status().ok();
    let taken_over = (now.as_ref())
        .and_then(|s| domain_pid(s, "drv"))
        .is_some_and(|(id, _)| id == old.0);
    let stream_ok = up.wait_child(client, Duration::from_secs(60))?;
    let ms = |t: Instant| (t - t0).as_secs_f64() * 1e3;
    Ok(Kill {
        outage_ms: ms(back_out),
        outage_in_ms: ms(back_in),
        reconnect_ms: ms(reconnected),
        rto: (tcp_timeouts(srv) + tcp_timeouts(g1)).saturating_sub(rto_before),
        taken_over,
        stream_ok,
    })
}

/// TCP's retransmission timeouts so far in the namespace process `pid`
/// lives in (`TcpExt: TCPTimeouts` of `/proc/<pid>/net/netstat`).
fn tcp_timeouts(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/netstat")).unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "TCPTimeouts")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The table of `kills`, under `title`, with their medians.
pub(super) fn table(title: &str, kills: &[Kill]) -> String {
    if kills.is_empty() {
        return String::new();
    }
    let mut s = format!("### {title}\n\n");
    s += "| kill | brought back | outage guest1 → wire (ms) | outage wire → guest1 (ms) | vif served again (ms) | retransmission timeouts | stream |\n|---|---|---|---|---|---|---|\n";
    for (i, k) in kills.iter().enumerate() {
        s += &format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
            i + 1,
            if k.taken_over {
                "taken over"
            } else {
                "new domain"
            },
            k.outage_ms,
            k.outage_in_ms,
            k.reconnect_ms,
            k.rto,
            stream_cell(k.stream_ok)
        );
    }
    let rto: u64 = kills.iter().map(|k| k.rto).sum();
    let med = |f: fn(&Kill) -> f64| crate::stats::median(&kills.iter().map(f).collect::<Vec<_>>());
    s += &format!(
        "\nMedian outage {:.0} ms out, {:.0} ms in (target < 1000 ms); median until served again {:.0} ms; {rto} retransmission timeouts in all (frames lost at a flight's tail).\n\n",
        med(|k| k.outage_ms),
        med(|k| k.outage_in_ms),
        med(|k| k.reconnect_ms)
    );
    s
}
