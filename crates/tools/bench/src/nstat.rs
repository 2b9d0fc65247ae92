//! A network namespace's kernel counters, as `nstat` reads them
//! (/proc/net/snmp and netstat): checksum errors, reordering, and the
//! receive queue's pruning and collapsing (Menon 2005 §5's anomaly).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;

/// `ns`'s kernel counters as `nstat -asz` prints them: absolute, zeros
/// included, the history file left alone.
fn read(ns: &str) -> Result<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nstat", "-asz"])
        .output()
        .context("running nstat (iproute2)")?;
    if !out.status.success() {
        bail!(
            "nstat in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The sum of `names` in `ns`'s kernel counters.
pub fn sum(ns: &str, names: &[&str]) -> Result<u64> {
    Ok(parse(&read(ns)?, names))
}

/// Every counter of `ns` whose name contains one of `parts`.
pub fn matching(ns: &str, parts: &[&str]) -> Result<BTreeMap<String, u64>> {
    Ok(parse_matching(&read(ns)?, parts))
}

/// Each counter of `nstat`'s text output, by name.
fn counters(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|l| {
        let mut it = l.split_whitespace();
        let (k, v) = (it.next()?, it.next()?);
        Some((k, v.parse::<u64>().ok()?))
    })
}

/// Sums the counters `names` of `nstat`'s text output.
pub fn parse(text: &str, names: &[&str]) -> u64 {
    counters(text)
        .filter(|(k, _)| names.contains(k))
        .map(|(_, v)| v)
        .sum()
}

/// The counters of `nstat`'s text output whose names contain one of
/// `parts`.
pub fn parse_matching(text: &str, parts: &[&str]) -> BTreeMap<String, u64> {
    counters(text)
        .filter(|(k, _)| parts.iter().any(|p| k.contains(p)))
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_by_name() {
        let text = "#kernel\nTcpInCsumErrors                 3                  0.0\n\
                    UdpInCsumErrors                 2                  0.0\nTcpExtTCPSACKReorder 7 0.0\n";
        assert_eq!(parse(text, &["TcpInCsumErrors", "UdpInCsumErrors"]), 5);
        assert_eq!(parse(text, &["TcpExtTCPSACKReorder"]), 7);
        assert_eq!(parse("", &["TcpInCsumErrors"]), 0);
    }

    #[test]
    fn counters_match_by_part_of_their_name() {
        let text = "#kernel\nTcpActiveOpens 10 0.0\nTcpEstabResets 1 0.0\nTcpOutRsts 4 0.0\n\
                    TcpExtTCPAbortOnData 0 0.0\n";
        let m = parse_matching(text, &["Rst", "Abort", "EstabResets"]);
        let want = [
            ("TcpEstabResets", 1),
            ("TcpExtTCPAbortOnData", 0),
            ("TcpOutRsts", 4),
        ];
        assert_eq!(m, want.map(|(k, v)| (k.to_string(), v)).into());
    }
}
