//! `splitnet-domain`: the process of every domain, started by hv inside the
//! domain's namespace, never by hand. It links the domains' code only
//! (netfront, the driver domain, the device models), none of hv's, the
//! toolstack's or the tools' (`tests/tcb.rs`).
//!
//! ```text
//! splitnet-domain                      a guest or a driver domain (hv says which)
//! splitnet-domain vmapp --guest G --tap T --mac M --ports-in-vmm 0|1 --irq-bitvector 0|1
//! splitnet-domain hvm-dm --guest G --guest-id N --tap T --mac M --poll-us N --wake direct|upcall
//! ```
//!
//! Its arguments are parsed by hand, as `splitnet-hv`'s are: a domain takes
//! no command line from a user.
#![forbid(unsafe_code)]

use anyhow::{anyhow, bail, Context, Result};
use splitnet_runtime::{domain, hosted, hvm};
use std::collections::BTreeMap;

const USAGE: &str = "usage: splitnet-domain [vmapp --guest G --tap T --mac M --ports-in-vmm 0|1 \
                     --irq-bitvector 0|1 | hvm-dm --guest G --guest-id N --tap T --mac M --poll-us N --wake direct|upcall] \
                     (started by hv, not by hand)";

/// `--name value` pairs, each name once, every one of `want` present.
fn options(args: &[String], want: &[&str]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let key = name
            .strip_prefix("--")
            .filter(|k| want.contains(k))
            .ok_or_else(|| anyhow!("unknown option {name:?}\n{USAGE}"))?;
        let value = it
            .next()
            .ok_or_else(|| anyhow!("{name} needs a value\n{USAGE}"))?;
        if out.insert(key.to_string(), value.clone()).is_some() {
            bail!("{name} given twice");
        }
    }
    if let Some(missing) = want.iter().find(|k| !out.contains_key(**k)) {
        bail!("--{missing} is required\n{USAGE}");
    }
    Ok(out)
}

/// A `0`/`1` switch.
fn flag(o: &BTreeMap<String, String>, key: &str) -> Result<bool> {
    match o[key].as_str() {
        "0" => Ok(false),
        "1" => Ok(true),
        v => bail!("--{key} {v:?}: expected 0 or 1"),
    }
}

fn vmapp(args: &[String]) -> Result<()> {
    let o = options(
        args,
        &["guest", "tap", "mac", "ports-in-vmm", "irq-bitvector"],
    )?;
    let ports_in_vmm = flag(&o, "ports-in-vmm")?;
    let irq_bitvector = flag(&o, "irq-bitvector")?;
    hosted::vmapp(
        &o["guest"],
        &o["tap"],
        &o["mac"],
        ports_in_vmm,
        irq_bitvector,
    )
}

fn device_model(args: &[String]) -> Result<()> {
    let o = options(
        args,
        &["guest", "guest-id", "tap", "mac", "poll-us", "wake"],
    )?;
    let guest_id = o["guest-id"]
        .parse()
        .with_context(|| format!("--guest-id {:?}", o["guest-id"]))?;
    let poll_us = o["poll-us"]
        .parse()
        .with_context(|| format!("--poll-us {:?}", o["poll-us"]))?;
    let wake: ::hvm::DmWake = o["wake"]
        .parse()
        .map_err(|e| anyhow::anyhow!("--wake {e}"))?;
    hvm::device_model(&o["guest"], guest_id, &o["tap"], &o["mac"], poll_us, wake)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // Long-lived: drop every descriptor leaked to us but those hv handed on.
    let r = match argv.split_first() {
        None => {
            domain::close_stray_fds();
            domain::main()
        }
        Some((cmd, rest)) if cmd == "vmapp" => {
            hosted::close_stray_fds();
            vmapp(rest)
        }
        Some((cmd, rest)) if cmd == "hvm-dm" => {
            hvm::close_stray_fds();
            device_model(rest)
        }
        Some((cmd, _)) if cmd == "--help" || cmd == "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        Some((cmd, _)) => Err(anyhow!("unknown command {cmd:?}\n{USAGE}")),
    };
    if let Err(e) = r {
        eprintln!("splitnet-domain: error: {e:#}");
        std::process::exit(1);
    }
}
