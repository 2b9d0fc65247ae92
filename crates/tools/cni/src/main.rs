//! `splitnet-cni`: the Container Network Interface plugin that gives a
//! container a splitnet vif (CNI spec 1.1.0, 1.0.0 and 0.4.0). A runtime
//! runs it with `CNI_COMMAND` and the other `CNI_*` variables set and the
//! network configuration on standard input; it asks the running hv for a
//! guest domain in the container's namespace and sets the IPAM plugin's
//! addresses on its interface.

#![forbid(unsafe_code)]

mod commands;
mod config;
mod error;
mod ipam;
mod result;
mod sandbox;

use config::{Command, Env, NetConf};
use error::{CniError, INVALID_ENV, IO_FAILURE};
use std::io::Read;

const HELP: &str = "\
splitnet-cni: the CNI plugin that gives a container a splitnet vif

A container runtime (podman, containerd, CRI-O, Kubernetes with Multus)
runs it, as it runs every CNI plugin: CNI_COMMAND (ADD, DEL, CHECK, STATUS,
GC or VERSION), CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_PATH in the
environment, the network configuration on standard input. It speaks CNI
1.1.0, 1.0.0 and 0.4.0. splitnet must be up (`splitnet up`).

Network configuration (every key but cniVersion, name and type optional;
any other key is refused by name):
  {\"cniVersion\": \"1.1.0\", \"name\": \"sn\", \"type\": \"splitnet\",
   \"driver\": \"drv\",          the driver domain (default: the only one)
   \"bridge\": \"xenbr0\",       its bridge (default xenbr0)
   \"vif\": \"rate=100Mb/s\",    xl vifspec keys for the vif (mtu=, rate=, vlan=, mac=, ...)
   \"antispoof\": true,        ip= from the IPAM result (default true)
   \"runDir\": \"/run/splitnet\", where hv listens
   \"ipam\": {\"type\": \"host-local\", \"ranges\": [[{\"subnet\": \"10.88.0.0/16\"}]],
            \"routes\": [{\"dst\": \"0.0.0.0/0\"}]}}

Try it with cnitool:
  ip netns add c1
  NETCONFPATH=/etc/cni/net.d CNI_PATH=/usr/lib/cni cnitool add sn /run/netns/c1
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return;
    }
    if args.iter().any(|a| a == "--version" || a == "-V") {
        println!(
            "splitnet-cni {} (CNI {})",
            env!("CARGO_PKG_VERSION"),
            config::SUPPORTED.join(", ")
        );
        return;
    }
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let (version, outcome) = run(&vars);
    match outcome {
        Ok(Some(v)) => println!("{v}"),
        Ok(None) => {}
        Err(e) => {
            eprintln!("splitnet-cni: {e}");
            println!("{}", e.to_json(&version));
            std::process::exit(1);
        }
    }
}

/// One call: the version to answer in, and the result or the error.
fn run(vars: &[(String, String)]) -> (String, Result<Option<serde_json::Value>, CniError>) {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        let e = CniError::new(
            IO_FAILURE,
            "reading the network configuration",
            e.to_string(),
        );
        return ("1.1.0".into(), Err(e));
    }
    let asked = serde_json::from_slice::<serde_json::Value>(&input)
        .ok()
        .and_then(|v| v["cniVersion"].as_str().map(str::to_string))
        .unwrap_or_else(|| "1.1.0".into());
    let command = vars
        .iter()
        .find(|(k, _)| k == "CNI_COMMAND")
        .map(|(_, v)| v.as_str());
    let Some(command) = command else {
        let e = CniError::new(
            INVALID_ENV,
            "missing environment variable",
            "CNI_COMMAND is not set (see splitnet-cni --help)",
        );
        return (asked, Err(e));
    };
    let outcome = Command::parse(command).and_then(|cmd| dispatch(cmd, vars, &input));
    (asked, outcome)
}

fn dispatch(
    cmd: Command,
    vars: &[(String, String)],
    input: &[u8],
) -> Result<Option<serde_json::Value>, CniError> {
    if cmd == Command::Version {
        let v = serde_json::from_slice::<serde_json::Value>(input).unwrap_or_default();
        let asked = v["cniVersion"].as_str().unwrap_or("1.1.0");
        return Ok(Some(commands::version(asked)));
    }
    let conf = NetConf::parse(input)?;
    let env = Env::read(cmd, vars)?;
    match cmd {
        Command::Add => commands::add(&env, &conf).map(Some),
        Command::Del => commands::del(&env, &conf).map(|()| None),
        Command::Check => commands::check(&env, &conf).map(|()| None),
        Command::Status => commands::status(&env, &conf).map(|()| None),
        Command::Gc => commands::gc(&env, &conf).map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}
