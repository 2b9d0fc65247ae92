//! What a `ping` run's output says about its requests.
//!
//! With a deadline (`-w`), ping keeps sending until `-c` replies have come
//! back, so a slow first answer (a neighbour resolved across a tunnel, say)
//! makes it send more requests than the count and print a "loss" for
//! requests it stopped waiting for. The rule that tells late from lost is
//! the one a user reads off the replies: each of the first `n` requests
//! was answered, once.

/// Whether `out`, the output of `ping -c n`, shows a reply to each of its
/// first `n` requests, none twice: `icmp_seq=1..=n` from iputils' ping,
/// `seq=0..n` from busybox's. `Err` says which did not.
pub fn answered_in_full(out: &str, n: u32) -> Result<(), String> {
    let first = u32::from(!out.contains(" seq=") || out.contains("icmp_seq="));
    let seqs = first..first + n;
    let mut seen = vec![0u32; n as usize];
    for seq in out.lines().filter_map(reply_seq) {
        if seqs.contains(&seq) {
            seen[(seq - first) as usize] += 1;
        }
    }
    let missing: Vec<u32> = seqs
        .clone()
        .filter(|s| seen[(s - first) as usize] == 0)
        .collect();
    let twice: Vec<u32> = seqs.filter(|s| seen[(s - first) as usize] > 1).collect();
    match (
        missing.is_empty(),
        twice.is_empty() && !out.contains("DUP!"),
    ) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("no reply to seq {missing:?}")),
        (true, false) => Err(format!("duplicate replies (seq {twice:?})")),
    }
}

/// The sequence number of a reply line ("64 bytes from …: icmp_seq=3
/// ttl=…", or busybox's "seq=3").
fn reply_seq(line: &str) -> Option<u32> {
    if !line.contains(" bytes from ") {
        return None;
    }
    let rest = line.split("seq=").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LATE: &str = "PING 10.77.0.21 (10.77.0.21) 1472(1500) bytes of data.
1480 bytes from 10.77.0.21: icmp_seq=1 ttl=64 time=1028 ms
1480 bytes from 10.77.0.21: icmp_seq=2 ttl=64 time=827 ms

--- 10.77.0.21 ping statistics ---
4 packets transmitted, 2 received, 50% packet loss, time 1013ms";

    #[test]
    fn late_answers_are_not_losses() {
        assert_eq!(answered_in_full(LATE, 2), Ok(()));
    }

    #[test]
    fn a_request_never_answered_is_named() {
        let out = LATE.replace("icmp_seq=1 ", "icmp_seq=3 ");
        assert_eq!(answered_in_full(&out, 2), Err("no reply to seq [1]".into()));
        assert!(answered_in_full("", 1).is_err());
    }

    #[test]
    fn duplicates_are_named() {
        let out = format!("{LATE}\n64 bytes from 10.77.0.21: icmp_seq=2 ttl=64 time=1 ms (DUP!)");
        assert!(answered_in_full(&out, 2).unwrap_err().contains("duplicate"));
    }

    #[test]
    fn busybox_counts_from_zero() {
        let out = "PING 10.77.0.254 (10.77.0.254): 56 data bytes
64 bytes from 10.77.0.254: seq=0 ttl=64 time=22.688 ms
64 bytes from 10.77.0.254: seq=1 ttl=64 time=2.017 ms
64 bytes from 10.77.0.254: seq=2 ttl=64 time=3.785 ms";
        assert_eq!(answered_in_full(out, 3), Ok(()));
        let lost = out.replace("seq=1 ", "seq=7 ");
        assert_eq!(
            answered_in_full(&lost, 3),
            Err("no reply to seq [1]".into())
        );
    }

    #[test]
    fn ipv6_replies_count() {
        let out = "64 bytes from fd00::2: icmp_seq=1 ttl=64 time=0.1 ms";
        assert_eq!(answered_in_full(out, 1), Ok(()));
    }
}
