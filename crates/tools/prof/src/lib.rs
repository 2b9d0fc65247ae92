//! A Xenoprof-style system-wide statistical profiler for splitnet.
//!
//! Samples every CPU with perf (hardware cycles, or the software cpu-clock
//! where there is no PMU), charges each sample to a domain through its pid
//! and cgroup ([`attribution`]), resolves it to a function and module
//! ([`symbols`]), puts the function in a cost class ([`classes`]) and
//! aggregates the paper's tables ([`report`]). [`session`] ties them up,
//! with one initiator and active or passive domains ([`roles`]).

#![forbid(unsafe_code)]

pub mod attribution;
pub mod classes;
pub mod report;
pub mod roles;
pub mod session;
pub mod symbols;

pub use attribution::{Attributor, Domain, DomainKind};
pub use classes::{chain_class, cost_class, frame_class, sample_class, CostClass};
pub use report::{
    ClassShare, ClassifiedSample, DomainReport, EventReport, FunctionShare, Profile, ProfileMeta,
    ProfileSummary, WatchedShare,
};
pub use roles::{Mode, Roles};
pub use session::{
    profile, profile_while, profile_with, HwEvent, ProfError, ProfileOptions, Result, Session,
    Watch,
};
pub use symbols::{Symbol, Symbolizer};

/// Whether this build keeps frame pointers (`cargo build-profiling`). Without
/// them the kernel cannot walk a user-space call chain, so a sample in a
/// system call is classed by its kernel functions alone: a hypercall's
/// `mmap` lands in "memory" instead of "hypervisor".
pub fn frame_pointers() -> bool {
    env!("SPLITNET_FRAME_POINTERS") == "1"
}

/// The warning a profile carries when [`frame_pointers`] is false.
pub const NO_FRAME_POINTERS: &str = "this build keeps no frame pointers: user-space call chains \
     stop at the kernel, so a system call's samples are classed by its kernel functions alone \
     (a hypercall's work as \"memory\" or \"network\"); build with `cargo build-profiling`";
