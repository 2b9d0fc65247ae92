//! Menon 2006 §4 and §5.3 end to end: TX gather under hv-copy (the
//! I/O-channel optimization without the new grant mechanism), and
//! superpages (pools on 2 MiB transparent huge pages, or hugetlb pages
//! where the host allows none, and the driver domain's own packet buffers
//! on huge pages). Real ping,
//! iperf3 and a checksummed HTTP transfer. Needs root, iperf3, curl,
//! python3 and ping.

mod common;

use common::*;
use std::time::Duration;

/// Writes the default topology with `edit` applied into the run dir and
/// brings it up.
fn up_with(env: &Env, file: &str, edit: impl Fn(String) -> String) {
    let topo = edit(toolstack::topology::DEFAULT_TOML.to_string());
    std::fs::create_dir_all(&env.run_dir).unwrap();
    let path = env.run_dir.join(file);
    std::fs::write(&path, topo).unwrap();
    env.ok(&["up", "--config", path.to_str().unwrap()]);
}

#[test]
fn tx_gather_under_hv_copy_carries_real_applications() {
    let Some(env) = Env::new("ioc-hvcopy") else {
        return;
    };
    up_with(&env, "ioc.toml", |t| {
        t.replace(
            "address = \"10.77.0.1/24\"",
            "address = \"10.77.0.1/24\"\ngrants = \"hv-copy\"\ntx_mode = \"gather\"",
        )
    });
    env.ping("guest1", "10.77.0.254", 2);
    env.ping("guest1", "10.77.0.2", 2);
    let tx = iperf(&env, "wire", "10.77.0.254", "guest1", false, 2);
    eprintln!("iperf3 guest1->wire under hv-copy TX gather: {tx:.2} Gbit/s");
    // A checksummed transfer each way; guest1's 16 MiB go out by gather.
    http_fetch_mib(&env, 4);
    serve_from_guest1_to_wire(&env, 16);
    let v = wait_until(
        "guest1's holds counted and released",
        Duration::from_secs(5),
        || {
            let st = env.status();
            let v = vif(&st, "guest1").clone();
            assert_eq!(
                (v["grants"].as_str(), v["tx_mode"].as_str()),
                (Some("hv-copy"), Some("gather")),
                "{v}"
            );
            let g = &v["counters"]["grant_ops"];
            let (hold, release) = (g["hold"].as_u64().unwrap_or(0), g["release"].as_u64());
            assert_eq!(v["counters"]["rejected"], serde_json::json!({}), "{v}");
            assert!(g["release_failed"].is_null(), "hv refused a release: {v}");
            if hold > 1000 && Some(hold) == release {
                Ok(v)
            } else {
                Err(v)
            }
        },
    );
    assert!(v["grant_track"].is_null(), "no track table under hv-copy");
    env.ok(&["down"]);
    assert_nothing_left();
}

/// A file of `mib` MiB of random bytes served by guest1 (python3's
/// http.server) arrives intact on the wire host (curl, sha256).
fn serve_from_guest1_to_wire(env: &Env, mib: u32) {
    let dir = env.run_dir.join("up");
    std::fs::create_dir_all(&dir).unwrap();
    let file = random_blob(&dir, mib);
    let _server = env.spawn(&[
        "exec",
        "guest1",
        "--",
        "python3",
        "-m",
        "http.server",
        "8081",
        "--bind",
        "10.77.0.1",
        "--directory",
        dir.to_str().unwrap(),
    ]);
    wait_until(
        "guest1's HTTP server to listen",
        Duration::from_secs(10),
        || listening("guest1", 8081),
    );
    let got = env.run_dir.join("got-up");
    let mut args = vec!["exec", "wire", "--"];
    args.extend(curl(got.to_str().unwrap(), "http://10.77.0.1:8081/blob"));
    env.ok(&args);
    assert_eq!(
        sha256(&got),
        sha256(&file),
        "guest1's file arrived corrupted"
    );
}

fn nr_hugepages() -> u64 {
    sys::huge::nr_hugepages().unwrap()
}

/// Bytes of shared memory process `pid` maps with 2 MiB entries.
fn pmd_mapped_shmem(pid: u64) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    smaps
        .lines()
        .find_map(|l| l.strip_prefix("ShmemPmdMapped:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// On transparent huge pages, hv maps both huge pools whole with 2 MiB
/// entries, and the guest maps what it touches of its own so (its
/// superpages).
fn superpages_are_mapped_whole(env: &Env, st: &serde_json::Value) {
    let pool = |d: &str| domain(st, d)["memory_frames"].as_u64().unwrap() * 4096;
    let hv: u64 = std::fs::read_to_string(env.run_dir.join("hv.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let huge = pool("drv") + pool("guest1");
    assert!(
        pmd_mapped_shmem(hv) >= huge,
        "hv maps {} of the pools' {huge} bytes with 2 MiB entries",
        pmd_mapped_shmem(hv)
    );
    let guest1 = domain(st, "guest1")["pid"].as_u64().expect("guest1's pid");
    assert!(
        pmd_mapped_shmem(guest1) >= 2 << 20,
        "guest1 maps no shared memory with 2 MiB entries: {} bytes",
        pmd_mapped_shmem(guest1)
    );
}

#[test]
fn superpages_back_the_pools_and_the_driver_buffers() {
    let Some(env) = Env::new("ioc-huge") else {
        return;
    };
    let before = nr_hugepages();
    let shmem_before = shmem_enabled();
    let hv_allows = sys::huge::advise_thp_shmem_word().is_some();
    up_with(&env, "huge.toml", |t| {
        t.replace(
            "memory_frames = 4096",
            "memory_frames = 4096\nhugepages = true",
        )
        .replace(
            "address = \"10.77.0.1/24\"",
            "address = \"10.77.0.1/24\"\nhugepages = true",
        )
    });
    // hv holds the kernel's default `never` at `advise` while it runs; a
    // host that chose otherwise gets what it chose: transparent huge pages
    // where shared memory may take them, else hugetlb.
    let want = if sys::huge::thp_shmem().0.advised_ranges_get_them() {
        "thp"
    } else {
        "hugetlb"
    };
    if hv_allows {
        assert_eq!(
            want, "thp",
            "hv allows them where the host left the default"
        );
    }
    let st = env.status();
    for (d, want) in [("drv", want), ("guest1", want), ("guest2", "none")] {
        assert_eq!(domain(&st, d)["huge_backing"], want, "{d}");
    }
    if want == "thp" {
        superpages_are_mapped_whole(&env, &st);
    }
    let hv_log = std::fs::read_to_string(env.run_dir.join("hv.log")).unwrap_or_default();
    assert!(
        hv_log.contains("huge pages:"),
        "hv says what it reserved: {hv_log}"
    );
    let drv_log = std::fs::read_to_string(env.run_dir.join("drv.log")).unwrap_or_default();
    assert!(
        drv_log.contains("packet buffers on transparent huge pages")
            || drv_log.contains("packet buffers stay on 4 KiB pages"),
        "the driver says where its buffers are: {drv_log}"
    );
    let text = env.ok(&["status"]);
    assert!(text.contains("HUGE") && text.contains(want), "{text}");
    env.ping("guest1", "10.77.0.254", 2);
    env.ping("guest2", "10.77.0.1", 2);
    http_fetch_mib(&env, 16);
    serve_from_guest1_to_wire(&env, 16);
    let tx = iperf(&env, "wire", "10.77.0.254", "guest1", false, 2);
    eprintln!("iperf3 guest1->wire with superpages: {tx:.2} Gbit/s");
    env.ok(&["down"]);
    assert_nothing_left();
    // hv gave back the pages it added and put the setting back.
    assert_eq!(nr_hugepages(), before);
    assert_eq!(shmem_enabled(), shmem_before);
}
