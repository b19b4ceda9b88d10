//! The in-process side of the profiler: what runs in the signal handler
//! and around it. A `session` arms the timers (`clock`) and installs
//! the handler (`signal`); at each tick the `handler` takes one sample
//! of R's main thread (`sample`) or of another thread (`worker`, into
//! one of the `slots`) into a `ring`, with the modules of the current
//! `snapshots`; threads are found as they start (`spawn`) or by
//! listing them (`threads`); each thread's `account` of its CPU time
//! weighs its CPU samples, and its watch (`watches`) takes them where it
//! runs on a busy machine; a memory profile samples allocations
//! instead (`alloc`). The `collector` thread empties the rings into
//! `collect`, and reads the profiled process's workers from outside
//! (`traced`). `active` is the protocol that lets a
//! session end while handlers run; `fork` keeps a child of a profiled
//! process unsampled. Nothing here names a frame: that is the reporting
//! side's work, after the session.

pub(crate) mod account;
pub(crate) mod active;
pub(crate) mod alloc;
pub(crate) mod children;
pub(crate) mod clock;
pub(crate) mod collector;
pub(crate) mod cost;
pub(crate) mod fork;
pub(crate) mod handler;
pub(crate) mod main_ref;
pub(crate) mod ring;
pub(crate) mod sample;
pub(crate) mod session;
pub(crate) mod shared;
pub(crate) mod signal;
pub(crate) mod slots;
pub(crate) mod snapshots;
pub(crate) mod spawn;
pub(crate) mod threads;
pub(crate) mod traced;
pub(crate) mod watches;
pub(crate) mod worker;

pub use clock::Clock;
pub use cost::{sample_cost, Cost};
pub use session::{active, recycle, start, Running, Scope, Trigger};
