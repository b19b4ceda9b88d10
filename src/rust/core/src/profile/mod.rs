//! The joint sampling profiler. Three parts, in the order data flows:
//! * capture: [`capture`] runs in this process (timers, the signal
//!   handler, the sampling of other threads and of allocations, the ring
//!   and the collector thread); `outside::recorder` samples another
//!   process. Both make one sample's record with `compose` and write it
//!   in the one format of `record`;
//! * collection: `collect` turns records into distinct stacks with their
//!   counts, and holds what a finished capture hands over;
//! * reports: [`build`] names the stacks' frames into a [`model::Profile`],
//!   which [`rprof`] and [`pprof`] write; `labels` are the R frames'
//!   names, shared by both sides.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod build;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod capture;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod collect;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod compose;
pub(crate) mod labels;
pub mod model;
pub(crate) mod poisson;
pub mod pprof;
pub(crate) mod record;
pub mod rprof;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use collect::Finished;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use compose::{LineFacts, LoopSymbols, Options, RFacts, Region};
