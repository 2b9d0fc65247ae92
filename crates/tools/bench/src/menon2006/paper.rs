//! Menon 2006 on the paper's machine ([`crate::machine`]): the server had
//! one CPU and four Intel gigabit NICs, and every experiment ran one TCP
//! flow through each NIC at once, summed (§6.1; native Linux transmitted
//! at 3,760 Mb/s, NIC-bound, and received at 2,508 Mb/s, CPU-bound). Here:
//! hv, every domain and the endpoint's application on one core, the four
//! peers on another, four wire hosts each on its own port shaped to the
//! NICs' rate, and native Linux with four shaped veth NICs likewise. The
//! rate is a gigabit (`--nic paper`) or, by default, a gigabit scaled to
//! this host's speed that day (`--nic scaled`, [`crate::machine::NicRate`]).

use super::{bring_up, measure, mtu_frames, Case, Ctx, M6Config};
use crate::harness::RunOptions;
use crate::machine::{wire_tables, wires, MultiNative, PaperMachine};
use crate::netenv::DEFAULT_PORT;
use crate::testbed::{self, bench_domains, Env, FlowSpec};
use anyhow::Result;
use toolstack::cgroup::CgroupLayout;
use toolstack::host;
use toolstack::topology::LinkRate;

/// The paper's NICs.
pub const NICS: usize = 4;
/// Each NIC's line rate: gigabit Ethernet.
pub const RATE: LinkRate = crate::machine::GIGABIT;

/// Each direction's flows, one per NIC; the first of each is the modern
/// machine's one flow.
const TX_FLOWS: [&str; NICS] = ["tx", "tx2", "tx3", "tx4"];
const RX_FLOWS: [&str; NICS] = ["rx", "rx2", "rx3", "rx4"];

/// The flows a case runs at once over `nics` NICs.
pub fn flows(case: Case, nics: usize) -> &'static [&'static str] {
    let all = match case {
        Case::Tx | Case::TxWrites | Case::TxOneNic => &TX_FLOWS,
        Case::Rx => &RX_FLOWS,
    };
    &all[..nics.clamp(1, NICS)]
}

/// The paper's machine for this suite, on this host's first two cores.
pub fn machine() -> Result<PaperMachine> {
    PaperMachine::new(NICS, RATE)
}

/// Native Linux's receive on the paper's server, Mb/s (Table 1): CPU-bound,
/// where its transmit filled the four NICs. A scaled NIC rate
/// ([`crate::machine::NicRate::Scaled`]) keeps that ratio here.
pub const LINUX_RX_MBPS: f64 = 2508.0;

/// A topology whose wire table (at its end) becomes the paper's four
/// wires on driver domain `drv`, each shaped to `pm`'s NIC rate.
pub fn topology(t: &str, pm: &PaperMachine) -> String {
    let cut = t.find("\n[wire]").unwrap_or(t.len());
    t[..cut].to_string() + &wire_tables(NICS, "drv", pm.rate())
}

/// Native Linux with the paper's NICs: the application's namespace (the
/// server, charged to domain 0 and pinned to the server's core) joined to
/// four peers (domain 1, the clients' core) by shaped veth pairs.
pub fn native(layout: &CgroupLayout, pm: &PaperMachine) -> Result<Env> {
    let nics = MultiNative::new(NICS, Some(pm))?;
    let mut env = Env::new(bench_domains(layout, &["server", "client"])?);
    for (i, p) in nics.paths.iter().enumerate() {
        for (names, reverse) in [(&TX_FLOWS, false), (&RX_FLOWS, true)] {
            let f = FlowSpec::new(&p.sender_ns, &p.sender_ip, &nics.receiver, reverse)
                .charged(1, 0)
                .on_port(DEFAULT_PORT + i as u16)
                .pinned(pm.client_cpu, pm.server_cpu);
            env.flows.insert(names[i], f);
        }
    }
    env.keep_nics(nics);
    Ok(env)
}

/// The flows of a splitnet configuration over the four wires: each wire
/// host's peer (charged to the suite's `wire` cgroup, index 4, on the
/// clients' core) against the endpoint in `endpoint_ns` at domain index
/// `endpoint_dom` (guest1, or the driver domain itself), on the server's
/// core.
pub fn splitnet_flows(env: &mut Env, pm: &PaperMachine, endpoint_ns: &str, endpoint_dom: usize) {
    for (i, (name, ip)) in wires(NICS).iter().enumerate() {
        let wire = host::netns_name(name);
        for (names, reverse) in [(&TX_FLOWS, false), (&RX_FLOWS, true)] {
            let f = FlowSpec::new(&wire, ip, endpoint_ns, reverse)
                .charged(4, endpoint_dom)
                .on_port(DEFAULT_PORT + i as u16)
                .pinned(pm.client_cpu, pm.server_cpu);
            env.flows.insert(names[i], f);
        }
    }
}

/// Scales the paper's NICs to this host ([`crate::machine::NicRate::Scaled`]): native
/// Linux receives over the four links unshaped, on the server's core, and
/// each NIC's rate becomes a gigabit times that over the paper's native
/// receive ([`LINUX_RX_MBPS`]).
pub(super) fn calibrate(ctx: &mut Ctx<'_>) -> Result<()> {
    let Some(pm) = ctx.base.paper else {
        return Ok(());
    };
    ctx.base.paper = Some(pm.unshaped());
    let env = bring_up(ctx, M6Config::Linux)?.map_err(anyhow::Error::msg)?;
    let m = mtu_frames(ctx, &env).and_then(|()| measure(ctx, &env, M6Config::Linux, Case::Rx));
    testbed::tear_down(env, &ctx.base, &ctx.layout);
    let (scaled, line) = pm.calibrated(m?.flow.gbps * 1000.0, LINUX_RX_MBPS, NICS);
    ctx.say(&line);
    ctx.base.paper = Some(scaled);
    Ok(())
}

/// Runs `opts` on the paper's machine.
pub fn on_paper(opts: &RunOptions) -> Result<RunOptions> {
    Ok(RunOptions {
        paper: Some(machine()?),
        ..opts.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_topology_gets_four_shaped_wires() {
        let t = topology(toolstack::topology::DEFAULT_TOML, &machine().unwrap());
        let topo = toolstack::topology::Topology::parse(&t, "m").expect("parses");
        assert_eq!(topo.wires.len(), NICS);
        assert!(topo.wires.iter().all(|w| w.rate == Some(RATE)));
        assert!(topo.domain("guest2").is_some(), "the guests stay");
    }

    #[test]
    fn each_case_runs_one_flow_per_nic() {
        assert_eq!(flows(Case::Tx, 1), ["tx"]);
        assert_eq!(flows(Case::TxOneNic, 1), ["tx"]);
        assert_eq!(flows(Case::TxWrites, 4), TX_FLOWS);
        assert_eq!(flows(Case::Rx, 4), RX_FLOWS);
    }
}
