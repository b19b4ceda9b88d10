//! Everything winch knows about R's process, in one place: the layout of
//! R's context records per R version (`layout`), the context chain read
//! through any `crate::memory::Memory` (`context`), the layout of R's
//! objects and their readers (`sexp`), the labels of R frames (`heap`)
//! and byte code (`bcode`), and the [`Facts`] about the running
//! R that joint traces, the profiler, throw capture and the crash report
//! share (`facts`), where R's garbage collector starts (`gc`), and what
//! winch learns by watching R run (`learn`: loop functions, the
//! interpreter loop's counter, instructions).
//!
//! Nothing here calls R: what needs R's API (the addresses of its variables)
//! is filled in once by the glue when winch loads.

pub(crate) mod bcode;
pub(crate) mod context;
pub(crate) mod facts;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) mod gc;
pub(crate) mod heap;
pub(crate) mod layout;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod learn;
pub(crate) mod sexp;

pub(crate) use context::Chain;
pub(crate) use facts::ChainAt;
pub use facts::Facts;
pub use heap::Symbols;
pub use layout::{Layout, RVersion};
