//! Every result figure and table of the five seeds, one file per seed: 12 (Menon 2006) + 13
//! (Ram thesis) + 5 (Sugerman 2001) + 16 (Menon 2005) + 12 (Zhang & Dong)
//! = 58. Architecture diagrams, step-by-step drawings and the thesis's API
//! table (3.1) present no results and are not listed.
//!
//! The paper's numbers are ratios to native where the text gives both
//! (Mb/s over native Mb/s, cycles over native cycles); otherwise the value
//! as printed, its unit in the label.

use super::{Entry, Scope, Seed};
use std::sync::LazyLock;

mod menon2005;
mod menon2006;
mod ram;
mod sugerman;
mod zhang_dong;

pub(super) const fn e(
    seed: Seed,
    id: &'static str,
    title: &'static str,
    suite: &'static str,
    scope: Scope,
    paper: &'static [(&'static str, f64)],
) -> Entry {
    Entry {
        seed,
        id,
        title,
        suite,
        scope,
        paper,
    }
}

/// The 58 entries, by seed and in the papers' order.
pub static CATALOG: LazyLock<Vec<Entry>> = LazyLock::new(|| {
    [
        &menon2006::ENTRIES[..],
        &ram::ENTRIES,
        &sugerman::ENTRIES,
        &menon2005::ENTRIES,
        &zhang_dong::ENTRIES,
    ]
    .concat()
});
