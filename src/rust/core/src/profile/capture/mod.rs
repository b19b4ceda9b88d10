//! The in-process side of the profiler: what runs in the signal handler
//! and around it. A [`session`] arms the timers ([`clock`]) and installs
//! the handler; each tick takes one sample of R's main thread
//! ([`sample`]) or of another thread ([`worker`]) into a [`ring`]; threads
//! are found as they start ([`spawn`]) or by listing them ([`threads`]);
//! a memory profile samples allocations instead ([`alloc`]). The collector
//! thread empties the rings into [`collect`](super::collect). Nothing here
//! names a frame: that is the reporting side's work, after the session.

pub mod alloc;
pub mod clock;
pub mod cost;
pub mod ring;
pub mod sample;
pub mod session;
pub mod spawn;
pub mod threads;
pub mod worker;

pub use clock::Clock;
pub use cost::sample_cost;
pub use session::{active, recycle, start, start_alloc, Running};
