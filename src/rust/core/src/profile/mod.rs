//! The joint sampling profiler: sampling R's main thread from a timer
//! signal (async-signal-safe), collecting samples into distinct stacks, and
//! writing them in Rprof's format and as pprof's `profile.proto`. It reads
//! R through [`crate::r`] and walks stacks with [`crate::unwind::walk`].

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod alloc;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod build;
pub mod collect;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod cost;
pub mod labels;
pub mod model;
pub mod pprof;
pub mod ring;
pub mod rprof;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod sampler;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod session;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod spawn;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod threads;
