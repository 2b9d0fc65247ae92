//! What a `ping` run's output says about its requests.
//!
//! With a deadline (`-w`), ping keeps sending until `-c` replies have come
//! back, so a slow first answer (a neighbour resolved across a tunnel, say)
//! makes it send more requests than the count and print a "loss" for
//! requests it stopped waiting for. The rule that tells late from lost is
//! the one a user reads off the replies: each of the first `n` requests
//! was answered, once.

/// Whether `out`, the output of `ping -c n`, shows a reply to each of the
/// requests `icmp_seq=1..=n`, none twice. `Err` says which did not.
pub fn answered_in_full(out: &str, n: u32) -> Result<(), String> {
    let mut seen = vec![0u32; n as usize];
    for seq in out.lines().filter_map(reply_seq) {
        if (1..=n).contains(&seq) {
            seen[(seq - 1) as usize] += 1;
        }
    }
    let missing: Vec<u32> = (1..=n).filter(|s| seen[(s - 1) as usize] == 0).collect();
    let twice: Vec<u32> = (1..=n).filter(|s| seen[(s - 1) as usize] > 1).collect();
    match (
        missing.is_empty(),
        twice.is_empty() && !out.contains("DUP!"),
    ) {
        (true, true) => Ok(()),
        (false, _) => Err(format!("no reply to icmp_seq {missing:?}")),
        (true, false) => Err(format!("duplicate replies (icmp_seq {twice:?})")),
    }
}

/// The `icmp_seq` of a reply line ("64 bytes from …: icmp_seq=3 ttl=…").
fn reply_seq(line: &str) -> Option<u32> {
    if !line.contains(" bytes from ") {
        return None;
    }
    let rest = line.split("icmp_seq=").nth(1)?;
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
        assert_eq!(
            answered_in_full(&out, 2),
            Err("no reply to icmp_seq [1]".into())
        );
        assert!(answered_in_full("", 1).is_err());
    }

    #[test]
    fn duplicates_are_named() {
        let out = format!("{LATE}\n64 bytes from 10.77.0.21: icmp_seq=2 ttl=64 time=1 ms (DUP!)");
        assert!(answered_in_full(&out, 2).unwrap_err().contains("duplicate"));
    }

    #[test]
    fn ipv6_replies_count() {
        let out = "64 bytes from fd00::2: icmp_seq=1 ttl=64 time=0.1 ms";
        assert_eq!(answered_in_full(out, 1), Ok(()));
    }
}
