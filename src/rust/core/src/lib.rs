//! The core of winch: native stack capture, module lookup, symbolization,
//! reading R's context chain and interleaving R and native frames.
//!
//! Nothing here calls R; the R glue lives in the `winch` crate. The parts,
//! from the ground up:
//! * [`memory`]: the one interface every read of a process goes through;
//! * [`procfs`]: everything read from `/proc` (maps, threads, `stat`, ...),
//!   for this process and others;
//! * [`r`]: everything known about R's process (context records per R
//!   version, the chain reader, R objects, byte code, the facts gathered
//!   at load, what is learnt by watching R);
//! * [`unwind`], [`modules`], [`symbolizer`] and the naming modules: native
//!   stacks (with the one signal-safe walker, [`unwind::walk`]) and names;
//! * [`interleave`]: placement of native frames among R frames, allocating
//!   for joint views and in place for signal handlers;
//! * [`joint`], [`view`], [`splice`]: the joint capture and what views show;
//! * [`got`]: GOT slots read and rewritten, and the one hook set every
//!   family of GOT hooks uses ([`got::hookset`]: R's `dlopen` in
//!   [`loadhook`], throw capture, the profiler's thread and allocation
//!   hooks); [`published`]: values published to signal handlers, retired
//!   at safe points;
//! * [`profile`], [`throws`], [`crash`]: the profiler, throw capture and the
//!   crash report, each built on the parts above ([`loadhook`] tells the
//!   last two when R loads libraries, through callbacks they register);
//! * [`outside`]: the same joint stacks of another process, read from
//!   outside.
//!
//! Only Linux is supported. Elsewhere the crate compiles, but the module map
//! is empty, no backend is available and nothing is captured.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod crash;
mod debugfile;
pub mod debuginfo;
pub mod debuginfod;
mod dwarf;
mod elfread;
pub mod error;
mod fasthash;
mod got;
mod interleave;
pub mod joint;
mod loadhook;
mod memory;
pub mod modules;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod outside;
mod plt;
mod procfs;
pub mod profile;
mod published;
pub mod r;
mod reentry;
mod scopes;
pub mod splice;
mod stack;
pub mod symbolizer;
mod symbols;
pub mod throws;
pub mod trace;
pub mod unwind;
pub mod view;

pub use fasthash::{FastHasher, FastMap};
pub use loadhook::pin_self;
