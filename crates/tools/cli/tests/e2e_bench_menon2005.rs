//! `splitnet bench menon2005 --quick` end to end with two buffer sizes and
//! 1 s streams: Linux and the guests measured (receive with 1-3 NICs where
//! the build has `[[wire]]`, transmit, nginx under httperf), ratios to
//! Linux in a plausible range, every figure and table of the paper in the
//! report, the files `--out` asks for written, nothing left behind. A
//! configuration this build cannot bring up (the driver domain's own
//! address, several wires, page buffers) must be listed as not available.
//! Needs root, nginx (nginx-light) and httperf: scripts/setup.sh installs them.

mod common;

use common::*;
use serde_json::Value;

fn points<'a>(v: &'a Value, setup: &str, experiment: &str) -> Vec<&'a Value> {
    v["summary"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["setup"] == setup && p["experiment"] == experiment)
        .collect()
}

fn unavailable(v: &Value, what: &str) -> bool {
    v["unavailable"].as_array().unwrap().iter().any(|u| {
        u[0] == what
            && u[1]
                .as_str()
                .unwrap()
                .starts_with("not available in this build")
    })
}

/// Each NIC's rate in Gbit/s, from a machine line's "NIC(s) at 3085mbit
/// each", read as a topology reads a rate.
fn nic_gbit(machine: &str) -> f64 {
    let at = machine.split("NIC(s) at ").nth(1).expect("a NIC rate");
    let rate = at.split(' ').next().unwrap().trim_end_matches(',');
    let rate: toolstack::topology::LinkRate = rate.parse().expect("a rate");
    rate.0 as f64 / 1e9
}

#[test]
fn bench_menon2005_quick_reproduces_what_the_build_has() {
    let Some(env) = Env::new("bench-menon2005") else {
        return;
    };
    let out = env.run_dir.join("out");
    let table = env.ok(&[
        "bench",
        "menon2005",
        "--quick",
        "--seconds",
        "1",
        "--sizes",
        "4096,65536",
        "--out",
        out.to_str().unwrap(),
    ]);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    // Linux always runs: the sweep, three NICs, transmit, the web server.
    assert_eq!(points(&v, "Linux", "buffer").len(), 2, "{v}");
    let nics = points(&v, "Linux", "nics");
    assert_eq!(nics.len(), 3, "{v}");
    // On the paper's machine (the default) each NIC is a link at a gigabit
    // scaled to this host, which the machine line gives: one NIC bounds
    // native receive.
    let machine = v["machine"].as_str().unwrap();
    assert!(machine.starts_with("paper:"), "{v}");
    assert!(
        machine.contains("scaled by this host's native receive"),
        "{machine}"
    );
    let gbit = nic_gbit(machine);
    let one = nics.iter().find(|p| p["x"] == 1.0).expect("one NIC")["value"]["median"]
        .as_f64()
        .unwrap();
    assert!(
        one > 0.3 * gbit && one < 1.05 * gbit,
        "Linux over one {gbit} Gbit/s NIC: {one}"
    );
    for e in ["buffer", "nics", "tx", "web"] {
        for p in points(&v, "Linux", e) {
            assert!(p["value"]["median"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    // The guests run on this build; the driver domain may lack its address.
    for (setup, needs) in [
        ("Xen-guest0", &["nics", "tx", "web"][..]),
        ("Xen-guest1", &["buffer", "nics", "web"][..]),
        ("Xen-domain0", &["buffer", "nics", "tx", "web"][..]),
        ("Xen-domain0-page", &["buffer"][..]),
    ] {
        if setup.starts_with("Xen-domain0") && unavailable(&v, setup) {
            continue;
        }
        for e in needs {
            let ps = points(&v, setup, e);
            assert!(!ps.is_empty(), "{setup} has no {e} point: {v}");
            for p in ps {
                let r = p["ratio_to_native"]["median"].as_f64().unwrap();
                assert!(p["value"]["median"].as_f64().unwrap() > 0.0, "{p}");
                assert!(r > 0.0 && r < 3.0, "{setup} {e}: ratio {r}");
            }
        }
        let nics = points(&v, setup, "nics").len();
        if setup != "Xen-domain0-page" {
            let many = format!("{setup} with 2 and 3 NICs");
            assert!(
                nics == 3 || unavailable(&v, &many),
                "{setup}: {nics} NIC points"
            );
        }
    }
    // Profiles for the tables, with hardware events counted or said to be
    // not measurable here.
    let profiles = v["profiles"].as_array().unwrap();
    let rx = profiles
        .iter()
        .find(|p| p["setup"] == "Xen-guest0" && p["what"] == "rx, 1 NIC")
        .expect("Xen-guest0's receive profile");
    let roles: Vec<&str> = rx["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["role"].as_str().unwrap())
        .collect();
    for role in ["guest", "driver", "hv"] {
        assert!(roles.contains(&role), "{role} missing from {roles:?}");
    }
    assert!(v["anomaly"]["verdict"].as_str().unwrap().len() > 20);
    for id in 1..=8 {
        assert!(table.contains(&format!("### Figure {id}:")), "{table}");
        assert!(table.contains(&format!("### Table {id}:")), "{table}");
    }
    for f in [
        "results.md",
        "chart.svg",
        "figure-1.svg",
        "figure-3.svg",
        "figure-7.svg",
    ] {
        assert!(out.join(f).exists(), "--out lacks {f}");
    }
    assert_nothing_left();
}
