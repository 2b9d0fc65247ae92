//! A network namespace's kernel counters, as `nstat` reads them
//! (/proc/net/snmp and netstat): checksum errors, reordering, and the
//! receive queue's pruning and collapsing (Menon 2005 §5's anomaly).

use anyhow::{bail, Context, Result};

/// The sum of `names` in `ns`'s kernel counters (`nstat -asz`: absolute,
/// zeros included, the history file left alone).
pub fn sum(ns: &str, names: &[&str]) -> Result<u64> {
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
    Ok(parse(&String::from_utf8_lossy(&out.stdout), names))
}

/// Sums the counters `names` of `nstat`'s text output.
pub fn parse(text: &str, names: &[&str]) -> u64 {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (k, v) = (it.next()?, it.next()?);
            names.contains(&k).then(|| v.parse::<u64>().ok()).flatten()
        })
        .sum()
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
}
