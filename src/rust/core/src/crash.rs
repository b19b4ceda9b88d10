//! The crash report: when R's main thread dies of `SIGSEGV`, `SIGBUS`,
//! `SIGILL`, `SIGFPE` or `SIGABRT`, a joint trace (native frames with the R
//! calls that led to them) is written to standard error before the process
//! dies as it would have (Python's faulthandler is the model).
//!
//! Everything the signal handler uses is prepared beforehand, outside it
//! (`handler`): a snapshot of the loaded modules with their unwind tables
//! and symbol tables, refreshed when libraries load. The handler itself
//! only reads memory, formats into fixed buffers and calls `write(2)`,
//! `sigaction(2)` and `tgkill(2)`.
//!
//! This module holds the parts that do not touch signals, tested on
//! synthetic data: the rule R uses to tell a C stack overflow from other
//! faults, and the report's layout (`report`). Which native frame each R
//! context belongs to is placement's (`crate::interleave::owners`).

pub(crate) mod report;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod handler;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod signals;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use handler::{disable, enable, handlers, rearm, status};

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod unsupported {
    use super::{HandlerSetup, Status};
    use crate::error::{Error, Result};

    pub fn enable(_setup: HandlerSetup) -> Result<Status> {
        Err(Error::Unavailable("the crash report needs x86_64 Linux".into()))
    }
    pub fn disable() -> Result<Status> {
        Ok(Status::default())
    }
    pub fn rearm() {}
    pub fn status() -> Status {
        Status::default()
    }
    pub fn handlers() -> Vec<(i32, usize, u64, usize, u64)> {
        Vec::new()
    }
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use unsupported::{disable, enable, handlers, rearm, status};

#[cfg(unix)]
use libc::SIGBUS;
/// Windows has no SIGBUS (and no crash report): a value no signal has.
#[cfg(not(unix))]
const SIGBUS: i32 = -1;

/// The signals reported, in this order everywhere.
pub(crate) const SIGNALS: [i32; 5] = [libc::SIGSEGV, SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// What enabling needs to know (from R, on its main thread).
#[derive(Clone, Copy, Debug, Default)]
pub struct HandlerSetup {
    /// R's main thread (`pthread_self()` there).
    pub(crate) main_thread: usize,
    /// An address inside R's interpreter (libR, or the R executable).
    pub(crate) interpreter_addr: usize,
    /// Where R's context chain is (None: the report shows no R calls).
    pub(crate) chain: Option<crate::r::ChainAt>,
    pub(crate) cstack: CStack,
    /// Where R keeps them (`R_CStackStart`, `R_CStackLimit`, `R_CStackDir`;
    /// 0: unknown): read when a signal comes, as R's handler does, since
    /// code that embeds R or starts threads may change them later.
    pub(crate) cstack_vars: [usize; 3],
    pub(crate) symbols: crate::r::heap::Symbols,
}

impl HandlerSetup {
    /// What enabling needs, from the facts about the running R and its C
    /// stack as R describes it now.
    pub fn from_r(r: &crate::r::Facts, cstack: CStack) -> HandlerSetup {
        HandlerSetup {
            main_thread: r.main_thread,
            interpreter_addr: r.interpreter_addr,
            chain: Some(r.chain()),
            cstack,
            cstack_vars: r.cstack_vars,
            symbols: r.symbols,
        }
    }
}

/// What the report covers.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub enabled: bool,
    /// The signals whose handler is the report's.
    pub signals: Vec<i32>,
    /// Signals left alone, and why.
    pub skipped: Vec<(i32, String)>,
}

/// Whether this platform has the crash report.
pub fn supported() -> bool {
    cfg!(all(target_arch = "x86_64", target_os = "linux"))
}

/// The name and a description of signal `sig`.
pub fn signal_name(sig: i32) -> (&'static str, &'static str) {
    match sig {
        libc::SIGSEGV => ("SIGSEGV", "segmentation fault"),
        SIGBUS => ("SIGBUS", "bus error"),
        libc::SIGILL => ("SIGILL", "illegal instruction"),
        libc::SIGFPE => ("SIGFPE", "arithmetic exception"),
        libc::SIGABRT => ("SIGABRT", "abort"),
        _ => ("signal", "unexpected signal"),
    }
}

/// R's C stack as R describes it (`R_CStackStart`, `R_CStackLimit`,
/// `R_CStackDir`; `usize::MAX` for "unknown", as R's -1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CStack {
    pub start: usize,
    pub limit: usize,
    pub dir: i32,
}

/// Whether a `SIGSEGV` at `addr` is what R's own handler treats as a C
/// stack overflow (and recovers from by jumping to top level): an address
/// beyond the stack's start, within its limit plus 16 MB. The report stays
/// silent then, so that R's recovery goes on as without winch.
pub(crate) fn is_c_stack_overflow(addr: usize, stack: CStack) -> bool {
    if stack.start == usize::MAX {
        return false;
    }
    let diff = if stack.dir > 0 {
        (stack.start as isize).wrapping_sub(addr as isize)
    } else {
        (addr as isize).wrapping_sub(stack.start as isize)
    };
    let mut upper: usize = 0x100_0000;
    if stack.limit != usize::MAX {
        upper = upper.wrapping_add(stack.limit);
    }
    diff > 0 && (diff as usize) < upper
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_overflow_is_recognised_as_r_does() {
        // A stack growing down from 0x7fff_0000 with an 8 MB limit.
        let s = CStack { start: 0x7fff_0000, limit: 8 << 20, dir: 1 };
        assert!(is_c_stack_overflow(0x7fff_0000 - (8 << 20) - 100, s));
        assert!(is_c_stack_overflow(0x7fff_0000 - 1, s));
        // Beyond the limit plus 16 MB, above the start, or a null pointer.
        assert!(!is_c_stack_overflow(0x7fff_0000 - (25 << 20), s));
        assert!(!is_c_stack_overflow(0x7fff_0010, s));
        assert!(!is_c_stack_overflow(0, s));
        // Unknown start: never an overflow. Unknown limit: 16 MB.
        assert!(!is_c_stack_overflow(0x7ffe_0000, CStack { start: usize::MAX, ..s }));
        let unknown_limit = CStack { limit: usize::MAX, ..s };
        assert!(is_c_stack_overflow(0x7fff_0000 - (15 << 20), unknown_limit));
        assert!(!is_c_stack_overflow(0x7fff_0000 - (17 << 20), unknown_limit));
        // A stack growing up.
        let up = CStack { start: 0x1000_0000, limit: 1 << 20, dir: -1 };
        assert!(is_c_stack_overflow(0x1000_0000 + 100, up));
        assert!(!is_c_stack_overflow(0x1000_0000 - 100, up));
    }

    #[test]
    fn signals_have_names() {
        assert_eq!(signal_name(libc::SIGSEGV).0, "SIGSEGV");
        assert_eq!(signal_name(libc::SIGABRT).1, "abort");
        assert_eq!(signal_name(0).0, "signal");
    }
}
