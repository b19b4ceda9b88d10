//! The core of winch: native stack capture, module lookup, symbolization,
//! reading R's context chain and interleaving R and native frames.
//!
//! Nothing here calls R. The R glue (the `winch` crate) stays thin: it
//! reads an entry point's arguments, calls one function of the surface
//! below, and converts the result for R.
//!
//! # The surface: what the glue may use, by job
//! * joint traces: [`joint`] (the capture, the chain's checks, the chain's
//!   summary, [`joint::Placement`]) with [`unwind::Backend`], what [`view`]s
//!   show, [`trace`] and [`unwind::capture`] (captures off R's thread, stage
//!   timings), [`splice`] (rlang traces and joint `sys.calls()`);
//! * names: [`symbolizer::with_global`] (names and the symbolizer's
//!   settings), [`modules`] (the module map, the loader's generation),
//!   [`debuginfo::Resolved`], [`debuginfod`] (fetching debug files), and R's
//!   registered routines of this process
//!   ([`outside::registration::routines_of_this_process`]);
//! * profiler: [`profile::capture`] (start, stop, recycle, the cost of a
//!   sample) with [`profile::RFacts::of_this_process`] and
//!   [`profile::Options`], the checks and probes before it
//!   ([`joint::validate_labels`], [`joint::learn_loop`], [`joint::learn_bc`],
//!   [`r::learn`]), and the reporting side: [`profile::build`],
//!   [`profile::model`], [`profile::rprof`], [`profile::pprof`];
//! * throws: [`throws`] (install, status, epochs) and [`throws::shown`] (the
//!   last throw, a caught throw's branch of a joint trace);
//! * crash report: [`crash`] (enable, disable, status, re-arm, handlers);
//! * outside: [`outside`] (a dump of another process or of a core file,
//!   recording another process, what it used);
//! * R facts: [`r::Facts`], filled in once by the glue from R's API (with
//!   [`r::Facts::node_stack_ending_at`] and [`r::Facts::writable_data_of`]),
//!   [`r::Layout`] and [`r::Symbols`];
//! * and [`error`], [`files`] (what a path names; files opened so that
//!   nothing blocks: only regular files are read or written), [`FastMap`]
//!   (the glue's caches), [`pin_self`] (keeping this library loaded while
//!   R holds its code).
//!
//! # Inside
//! The parts the surface is built on, from the ground up, private to the
//! crate: `memory` (the one interface every read of a process goes
//! through), `procfs` (everything read from `/proc`, for this process and
//! others), `r`'s readers (context records per R version, the chain, R
//! objects, byte code, what is learnt by watching R), `unwind`'s walker (the
//! one signal-safe walker, `unwind::walk`), the module map and the naming
//! modules (`elfread`, `dwarf`, `symbols`, `scopes`, `plt`, `debugfile`),
//! `interleave` (placement of native frames among R frames, allocating for
//! joint views and in place for signal handlers), `got` (GOT slots read and
//! rewritten, and the one hook set every family of GOT hooks uses: R's
//! `dlopen` in `loadhook`, throw capture, the profiler's thread and
//! allocation hooks), `published` (values published to signal handlers,
//! retired at safe points), `reentry`, `stack` and `fasthash`. The profiler,
//! throw capture and the crash report are built on them (`loadhook` tells
//! the last two when R loads libraries, through callbacks they register);
//! `outside` reads the same joint stacks of another process.
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
pub mod files;
#[cfg(target_os = "linux")]
mod fork;
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
mod relatives;
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
pub use procfs::own_children_time;
