//! winch from outside: the joint stack of another process, which never
//! loaded winch, read through `ptrace` and `process_vm_readv` while it is
//! stopped for a moment.
//!
//! * `ptrace`: stopping every thread and letting it go on, on every way
//!   out (`tracees`: what the kernel reported of each thread; [`helper`]:
//!   a process of winch's that does it for this process's descendants);
//! * `target`: what the process has loaded (from `/proc/PID/maps` and the
//!   loaded images' headers in its memory) and where its R keeps its state;
//! * `core_file`: a core file read as the process it was made of;
//! * `deparse`: R calls read from its memory as R source;
//! * [`dump`]: every thread's native frames and R's frames placed among
//!   them;
//! * [`recorder`]: sampling it, into the profiler's sample records (`running`:
//!   which threads each tick samples);
//! * [`registration`]: R's table of registered native routines there;
//! * [`tree`]: recording a process and its descendants (found by
//!   `crate::relatives`).

pub(crate) mod core_file;
pub(crate) mod deparse;
pub mod dump;
pub mod helper;
pub(crate) mod ptrace;
pub mod recorder;
pub mod registration;
mod running;
pub(crate) mod target;
mod tracees;
pub mod tree;

pub use crate::procfs::Usage;

/// What process `pid` has used so far (CPU times, memory, faults,
/// switches), from `/proc`.
pub fn usage(pid: i32) -> Usage {
    crate::procfs::usage(crate::procfs::Proc::Pid(pid))
}

pub use crate::relatives::family::{descendants, relatives, workers, Relation, Relative, MAX_DESCENDANTS};
pub use crate::relatives::watch::Seen;
