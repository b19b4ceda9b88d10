//! The processes working for a process: its descendants and its workers
//! (`family`: as they are now), its workers looked for in the background
//! (`finder`: the kernel's connection tables take milliseconds to read),
//! and what each used while a profile ran (`watch`). Used from outside
//! (recording a process tree) and by the profiler (the processes that
//! worked for the profiled one unsampled).

pub mod family;
pub mod finder;
pub mod watch;
