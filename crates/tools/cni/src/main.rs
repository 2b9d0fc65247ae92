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

/// The command line a person uses (a runtime passes no arguments).
fn cli() -> clap::Command {
    clap::Command::new("splitnet-cni")
        .version(env!("CARGO_PKG_VERSION"))
        .about("The CNI plugin that gives a container a splitnet vif")
        .long_about(ABOUT)
        .after_long_help(CONFIG)
        .arg(
            clap::Arg::new("man")
                .long("man")
                .action(clap::ArgAction::SetTrue)
                .help("Print this page as a man page (roff) and exit"),
        )
}

const ABOUT: &str = "The CNI plugin that gives a container a splitnet vif.\n\n\
A container runtime (podman, containerd, CRI-O, Kubernetes with Multus) runs it as it \
runs every CNI plugin: CNI_COMMAND (ADD, DEL, CHECK, STATUS, GC or VERSION), \
CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_PATH in the environment, the network \
configuration on standard input. It speaks CNI 1.1.0, 1.0.0 and 0.4.0. splitnet must be \
up (splitnet up). ADD makes a guest domain whose vif is CNI_IFNAME in the container's \
namespace, served by a driver domain, and gives it the IPAM plugin's addresses and \
routes; DEL removes them (and succeeds when they are gone already); CHECK verifies \
them; STATUS fails with code 50 when hv or the driver domain is not running; GC removes \
the network's attachments the runtime no longer lists. Errors are CNI error results with \
the spec's codes; a refusal from splitnet is code 100.";

const CONFIG: &str = "Network configuration (every key but cniVersion, name and type \
optional; any other key is refused by name):\n\n  \
{\"cniVersion\": \"1.1.0\", \"name\": \"sn\", \"type\": \"splitnet\",\n   \
\"driver\": \"drv\",            the driver domain (default: the only one)\n   \
\"bridge\": \"xenbr0\",         its bridge (default xenbr0)\n   \
\"vif\": \"rate=100Mb/s\",      xl vifspec keys: mtu=, rate=, vlan=, mac=, ...\n   \
\"antispoof\": true,          ip= from the IPAM lease (default true)\n   \
\"runDir\": \"/run/splitnet\",  where hv listens\n   \
\"ipam\": {\"type\": \"host-local\", \"ranges\": [[{\"subnet\": \"10.88.0.0/16\"}]],\n            \
\"routes\": [{\"dst\": \"0.0.0.0/0\"}]}}\n\n\
Example, with the CNI project's cnitool:\n  \
ip netns add c1\n  \
NETCONFPATH=/etc/cni/net.d CNI_PATH=/usr/lib/cni cnitool add sn /run/netns/c1";

fn main() {
    if std::env::args().len() > 1 {
        let m = cli().get_matches();
        if m.get_flag("man") {
            let page = clap_mangen::Man::new(cli())
                .source(concat!("splitnet ", env!("CARGO_PKG_VERSION")));
            let mut out = Vec::new();
            if page.render(&mut out).is_ok() {
                print!("{}", String::from_utf8_lossy(&out));
            }
        }
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
