//! Every suite `splitnet bench` runs, by name: the one list the command
//! line and the seeds report look suites up in.

use crate::harness::Suite;
use crate::{baseline, cni, faults, hosted, hv, hvm, menon2005, menon2006, multihost, ram, scale};
use crate::{seeds, soak, vifopts, virtio};

/// The suites; those with seed figures first, in the order `bench seeds`
/// runs them.
pub static ALL: [&dyn Suite; 14] = [
    &menon2006::Menon2006Suite,
    &menon2005::Menon2005Suite,
    &ram::RamSuite,
    &hosted::HostedSuite,
    &hvm::HvmSuite,
    &baseline::BaselineSuite,
    &hv::HvSuite,
    &faults::FaultsSuite,
    &scale::ScaleSuite,
    &vifopts::VifOptionsSuite,
    &multihost::MultihostSuite,
    &virtio::VirtioSuite,
    &cni::CniSuite,
    &soak::SoakSuite,
];

/// The suite named `name`.
pub fn by_name(name: &str) -> anyhow::Result<&'static dyn Suite> {
    let names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
    ALL.iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| anyhow::anyhow!("no suite {name:?}; there are {}", names.join(", ")))
}

/// The suites that measure seed figures, each with the reader of its
/// saved report, in the order `bench seeds` runs them.
pub fn seed_suites() -> Vec<(&'static str, seeds::Reader)> {
    ALL.iter()
        .filter_map(|s| Some((s.name(), s.seeds()?)))
        .collect()
}

/// The seed figures of `suite`'s report, from the JSON the suite wrote.
pub fn figures_from_json(suite: &str, json: &str) -> anyhow::Result<Vec<seeds::Figure>> {
    let all = seed_suites();
    match all.iter().find(|(name, _)| *name == suite) {
        Some((_, read)) => read(json),
        None => {
            let names: Vec<&str> = all.iter().map(|s| s.0).collect();
            anyhow::bail!("no seed suite {suite:?}; there are {}", names.join(", "))
        }
    }
}

/// The figures of the reports saved in `dir` ([`seeds::load`]) for every
/// seed suite.
pub fn load_seeds(dir: &std::path::Path) -> anyhow::Result<seeds::Saved> {
    seeds::load(dir, &seed_suites())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_has_its_own_name_and_the_seed_suites_keep_their_order() {
        let names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(n), "{n} twice");
        }
        let seeds: Vec<&str> = seed_suites().iter().map(|s| s.0).collect();
        assert_eq!(seeds, ["menon2006", "menon2005", "ram", "hosted", "hvm"]);
        assert!(by_name("vif-options").is_ok());
        assert!(figures_from_json("hv", "{}").is_err());
    }
}
