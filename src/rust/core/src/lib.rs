//! The core of winch: native stack capture, module lookup, symbolization,
//! reading R's context chain and interleaving R and native frames.
//!
//! Nothing here calls R; the R glue lives in the `winch` crate.

pub mod debuginfo;
pub mod interleave;
pub mod modules;
pub mod rcontext;
pub mod splice;
pub mod stack;
pub mod symbolizer;
pub mod symbols;
pub mod trace;
pub mod unwind;
