//! The real domains of `splitnet up` run confined (jail): their own
//! uid, only their role's capabilities, no_new_privs, the seccomp filter;
//! and traffic still flows. The escape attempts themselves are in
//! crates/trusted/toolstack/tests/escape.rs.

mod common;
use common::Env;

#[test]
fn every_domain_of_a_topology_runs_jailed() {
    let Some(env) = Env::new("jail") else {
        return;
    };
    env.ok(&["up"]);
    let st = env.status();
    let domains = st["domains"].as_array().expect("domains");
    assert_eq!(domains.len(), 3, "{st}");
    for d in domains {
        let (id, pid, kind) = (
            d["id"].as_u64().expect("id"),
            d["pid"].as_i64().expect("pid"),
            d["kind"].as_str().expect("kind"),
        );
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}:")))
                .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let uid = (1_000_000_000 + id).to_string();
        assert_eq!(field("Uid"), [uid.as_str(); 4].join(" "), "{d}");
        assert_eq!(field("Gid"), [uid.as_str(); 4].join(" "), "{d}");
        assert_eq!(field("Groups"), "", "{d}");
        let cap = match kind {
            // CAP_NET_RAW alone: hv makes its multi-queue macvlans
            "driver" => 1u64 << 13,
            _ => 1u64 << 12, // CAP_NET_ADMIN
        };
        for k in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
            assert_eq!(field(k), format!("{cap:016x}"), "{k} of {d}");
        }
        assert_eq!(field("NoNewPrivs"), "1", "{d}");
        assert_eq!(field("Seccomp"), "2", "{d}");
    }
    env.ping("guest1", "10.77.0.254", 1);
    env.ok(&["down"]);
}
