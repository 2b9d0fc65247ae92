//! Benchmark suites. Each returns a report that prints as a table and
//! serializes to JSON; timings are medians of many runs, in TSC cycles and
//! microseconds (the machine has no hardware counters; DESIGN.md "Measuring").
#![deny(unsafe_code)]

pub mod baseline;
pub mod chart;
pub mod faults;
pub mod forwarder;
pub mod hv;
pub mod hvm;
pub mod netenv;
pub mod stats;
pub mod usernet;
