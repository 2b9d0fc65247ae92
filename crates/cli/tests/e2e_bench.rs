//! `splitnet bench baseline --quick` end to end: every configuration and
//! direction is measured and reported with the fields the issue names, and
//! nothing is left behind. Needs root and iperf3.

mod common;

use common::*;
use serde_json::Value;

#[test]
fn bench_baseline_quick_reports_every_config_and_direction() {
    let env = Env::new("bench");
    let out = env.run_dir.join("out");
    let json = env.run_dir.join("b.json");
    env.ok(&[
        "bench",
        "baseline",
        "--quick",
        "--seconds",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let records = v["records"].as_array().unwrap();
    // scripts/setup.sh installs both peers, so neither may be skipped.
    assert_eq!(v["skipped"], serde_json::json!([]), "peers skipped");
    for config in [
        "native",
        "linux-bridge",
        "pasta",
        "slirp4netns",
        "splitnet-baseline",
        "splitnet-default",
    ] {
        for direction in ["tx", "rx", "guest-to-guest"] {
            let r = records
                .iter()
                .find(|r| r["config"] == config && r["direction"] == direction)
                .unwrap_or_else(|| panic!("no record for {config} {direction}"));
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
            let ratio = r["ratio_to_native"].as_f64().unwrap();
            assert!(ratio > 0.0, "{r}");
            if config == "native" {
                assert_eq!(ratio, 1.0);
            }
            let cpu = r["cpu_seconds"].as_object().unwrap();
            assert!(!cpu.is_empty(), "{r}");
            let cpp = r["cycles_per_packet"].as_object().unwrap();
            let total = cpp["total"].as_f64().unwrap();
            let sum: f64 = cpp
                .iter()
                .filter(|(k, _)| *k != "total")
                .map(|(_, v)| v.as_f64().unwrap())
                .sum();
            assert!(
                total > 0.0 && (total - sum).abs() <= 1e-6 * total.max(1.0),
                "{r}"
            );
            let charged: &[&str] = match config {
                "native" => &["client", "server"],
                "linux-bridge" => &["guest1", "wire"],
                "pasta" | "slirp4netns" => &["guest1", "wire", config],
                _ => &["hv", "drv", "guest1"],
            };
            for d in charged {
                assert!(cpp.contains_key(*d), "{config}: no cycles for {d}: {r}");
            }
        }
    }
    for f in ["results.json", "results.md", "chart.svg"] {
        assert!(out.join(f).exists(), "--out lacks {f}");
    }
    assert!(std::fs::read_to_string(out.join("results.md"))
        .unwrap()
        .contains("| splitnet-default | tx |"));
    assert_nothing_left();
}

#[test]
fn profile_attributes_samples_to_domains_while_iperf3_runs() {
    let env = Env::new("profile");
    env.ok(&["up"]);
    let _stream = env.stream_to_wire("guest1", 8);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let json = env.run_dir.join("prof.json");
    let svg = env.run_dir.join("prof.svg");
    let text = env.ok(&[
        "profile",
        "--duration",
        "5",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let attributed = v["attributed_fraction"].as_f64().unwrap();
    assert!(attributed >= 0.95, "only {attributed} attributed:\n{text}");
    let class_sum: f64 = v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["share_pct"].as_f64().unwrap())
        .sum();
    assert!(
        (class_sum - 100.0).abs() < 0.01,
        "classes add up to {class_sum}%"
    );
    let domains: Vec<&str> = v["domains"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    for d in ["hv", "drv", "guest1"] {
        assert!(domains.contains(&d), "no samples for {d}: {domains:?}");
    }
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    env.ok(&["down"]);
    assert_nothing_left();
}
