//! The processes of a hosted NIC (Sugerman 2001): the guest domain's VM
//! world (`hosted::vm` and `hosted::guest`) and the VMApp hv starts in the
//! driver domain's namespace (`hosted::vmapp`).

use anyhow::{anyhow, bail, Context, Result};
use hosted::channel::{Channel, CHANNEL_SIZE};
use hosted::vm::{VmConfig, Vmm};
use hosted::vmapp::{VmApp, VmAppConfig};
use hypercall::HvClient;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;
use sys::{Mapping, SeqPacket, Tap};

/// Empty world switches timed at start-up.
const CALIBRATION_SWITCHES: u32 = 1000;

/// The descriptor numbers listed in environment variable `var`.
pub fn env_fds(var: &str) -> Vec<i32> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// Takes the `n` descriptors hv listed in `var`.
pub fn take_fds(var: &str, n: usize) -> Result<Vec<OwnedFd>> {
    let fds = env_fds(var);
    if fds.len() != n {
        bail!("{var} must list {n} descriptors (this process is started by hv, not by hand)");
    }
    fds.into_iter()
        .map(|fd| sys::take_inherited_fd(fd).with_context(|| format!("inherited descriptor {fd}")))
        .collect()
}

/// Closes everything the VMApp did not inherit on purpose.
pub fn close_stray_fds() {
    sys::close_inherited_fds(&env_fds(hypercall::launch::ENV_VMAPP_FDS));
}

pub fn run_ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn channel(memfd: OwnedFd, sock: OwnedFd) -> Result<Channel> {
    let map = Mapping::new(memfd.as_fd(), 0, CHANNEL_SIZE, true).context("mapping the channel")?;
    Ok(Channel::new(map, SeqPacket::from_fd(sock))?)
}

/// This guest's kind of NIC (`vif`, `hosted`, `hvm`), from the store.
pub fn nic_kind(hv: &mut HvClient) -> String {
    let home = format!("/local/domain/{}/splitnet", hv.domid());
    hv.store_read_str(&format!("{home}/nic"))
        .unwrap_or_else(|_| "vif".into())
}

/// The guest's TAP `eth0` for its emulated NIC: the NIC's MAC (from the
/// store, also returned), MTU 1500, the guest's addresses.
pub fn guest_eth0(hv: &mut HvClient, home: &str) -> Result<(Tap, [u8; 6])> {
    guest_tap(hv, home, false)
}

/// As [`guest_eth0`], the TAP with a vnet header in front of every frame
/// when `vnet_hdr` (a NIC that passes offloads through: virtio).
pub fn guest_tap(hv: &mut HvClient, home: &str, vnet_hdr: bool) -> Result<(Tap, [u8; 6])> {
    let cfg_home = format!("{home}/splitnet");
    let mut key = |k: &str| hv.store_read_str(&format!("{cfg_home}/{k}")).ok();
    let mac_text = key("nic-mac").ok_or_else(|| anyhow!("no nic-mac in the store"))?;
    let mac = abi::xenbus::parse_mac(&mac_text).map_err(|e| anyhow!("nic-mac: {e}"))?;
    let (ipv4, ipv6) = (key("ipv4"), key("ipv6"));
    let tap = Tap::create("eth0", vnet_hdr)?;
    run_ip(&["link", "set", "eth0", "address", &mac_text, "mtu", "1500"])?;
    run_ip(&["link", "set", "eth0", "up"])?;
    if let Some(a) = &ipv4 {
        run_ip(&["addr", "add", a, "dev", "eth0"])?;
    }
    if let Some(a) = &ipv6 {
        run_ip(&["addr", "add", a, "dev", "eth0", "nodad"])?;
    }
    Ok((tap, mac))
}

/// Runs the guest's side of an emulated NIC over `world` until hv or the
/// device side goes away, publishing its counters to `<home>/nic/stats`.
pub fn run_guest<W: hosted::guest::VmWorld>(
    hv: &mut HvClient,
    home: &str,
    world: &mut W,
    mem: &emul::GuestMemory<std::sync::Arc<Mapping>>,
    tap: &Tap,
) -> Result<(), hosted::guest::GuestError> {
    let watch = hv.watch_fd().try_clone_to_owned()?;
    let stats = format!("{home}/nic/stats");
    let mut written = String::new();
    hosted::guest::run(world, mem, tap, watch.as_fd(), &mut |doc| {
        // hv closing our connection is how a domain is shut down.
        while hv
            .next_watch(Duration::ZERO)
            .map_err(|e| e.to_string())?
            .is_some()
        {}
        let text = doc.to_string();
        if text != written {
            hv.store_write(&stats, &text).map_err(|e| e.to_string())?;
            written = text;
        }
        Ok(())
    })
}

/// A guest with a hosted NIC: the pcnet32-like driver behind the VMM,
/// serving TAP `eth0`, until hv or the VMApp goes away.
pub fn guest(hv: &mut HvClient, home: &str) -> Result<()> {
    let cfg_home = format!("{home}/splitnet");
    let mut key = |k: &str| hv.store_read_str(&format!("{cfg_home}/{k}")).ok();
    let on = |v: Option<String>| v.is_some_and(|v| v == "1");
    let (ports_in_vmm, send_combining) = (
        on(key("hosted-ports-in-vmm")),
        on(key("hosted-send-combining")),
    );
    let mut fds = take_fds(hypercall::launch::ENV_HOSTED_FDS, 2)?.into_iter();
    let (memfd, sock) = (fds.next().expect("two"), fds.next().expect("two"));
    let chan = channel(memfd, sock)?;
    let (tap, mac) = guest_eth0(hv, home)?;
    let cfg = VmConfig {
        ports_in_vmm,
        send_combining,
        mac,
    };
    let mem = emul::GuestMemory::new(hv.pool_shared());
    let mut vmm = Vmm::new(chan, mem.clone(), cfg);
    vmm.calibrate(CALIBRATION_SWITCHES);
    vmm.set_tracer(hv.tracer());
    eprintln!(
        "hosted: VM up (ports in VMM {}, send combining {})",
        cfg.ports_in_vmm, cfg.send_combining
    );
    run_guest(hv, home, &mut vmm, &mem, &tap).map_err(|e| anyhow!("hosted NIC: {e}"))
}

/// The VMApp: maps the guest's memory and the channel, creates VMNet's TAP
/// here (the driver domain's namespace), drops its privileges, and serves
/// the VM until it goes away.
pub fn vmapp(
    guest: &str,
    tap: &str,
    mac: &str,
    ports_in_vmm: bool,
    irq_bitvector: bool,
) -> Result<()> {
    let mut fds = take_fds(hypercall::launch::ENV_VMAPP_FDS, 3)?.into_iter();
    let (pool, memfd, sock) = (
        fds.next().expect("three"),
        fds.next().expect("three"),
        fds.next().expect("three"),
    );
    let len = std::fs::File::from(pool.try_clone()?)
        .metadata()
        .context("the guest's pool")?
        .len() as usize;
    let mem = Mapping::new(pool.as_fd(), 0, len, true).context("mapping the guest's pool")?;
    drop(pool);
    let chan = channel(memfd, sock)?;
    let mac = abi::xenbus::parse_mac(mac).map_err(|e| anyhow!("--mac: {e}"))?;
    let vmnet = Tap::create(tap, false)?;
    run_ip(&["link", "set", tap, "mtu", "1500", "up"])?;
    let cfg = VmAppConfig {
        ports_in_vmm,
        irq_bitvector,
        mac,
    };
    let mut app = VmApp::new(chan, mem, vmnet, cfg)?;
    // Confined before reading a byte from the guest.
    jail::enter(jail::Role::VmApp).map_err(|e| anyhow!("VMApp of {guest}: {e}"))?;
    app.start_vmnet()?;
    eprintln!(
        "vmapp {guest}: serving on {tap} (NIC model {}, {} on every switch)",
        if ports_in_vmm { "in the VMM" } else { "here" },
        if irq_bitvector {
            "bit vector"
        } else {
            "select()"
        }
    );
    let r = app.run();
    eprintln!(
        "vmapp {guest}: the VM went away; counters {:?}",
        app.counters()
    );
    Ok(r?)
}
