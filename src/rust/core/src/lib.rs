//! The core of winch: native stack capture, module lookup, symbolization,
//! reading R's context chain and interleaving R and native frames.
//!
//! Nothing here calls R; the R glue lives in the `winch` crate.
//!
//! Only Linux is supported. Elsewhere the crate compiles, but the module map
//! is empty, no backend is available and nothing is captured.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod crash;
pub mod debugfile;
pub mod debuginfo;
pub mod debuginfod;
pub mod error;
pub mod got;
pub mod interleave;
pub mod joint;
pub mod loadhook;
pub mod memory;
pub mod modules;
pub mod profile;
pub mod r;
pub mod reentry;
pub mod scopes;
pub mod splice;
pub mod stack;
pub mod symbolizer;
pub mod symbols;
pub mod throws;
pub mod trace;
pub mod unwind;
pub mod view;
