//! The crash report: when R's main thread dies of `SIGSEGV`, `SIGBUS`,
//! `SIGILL`, `SIGFPE` or `SIGABRT`, a joint trace (native frames with the R
//! calls that led to them) is written to standard error before the process
//! dies as it would have (Python's faulthandler is the model).
//!
//! Everything the signal handler uses is prepared beforehand, outside it
//! ([`handler`]): a snapshot of the loaded modules with their unwind tables
//! and symbol tables, refreshed when libraries load. The handler itself
//! only reads memory, formats into fixed buffers and calls `write(2)`,
//! `sigaction(2)` and `tgkill(2)`.
//!
//! This module holds the parts that do not touch signals, tested on
//! synthetic data: the rule R uses to tell a C stack overflow from other
//! faults, which native frame each R context belongs to, and the report's
//! layout ([`report`]).

pub mod report;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod handler;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use handler::{disable, enable, handlers, rearm, refresh, status};

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod unsupported {
    use super::{Facts, Status};
    use crate::error::{Error, Result};

    pub fn enable(_facts: Facts) -> Result<Status> {
        Err(Error::Unavailable("the crash report needs x86_64 Linux".into()))
    }
    pub fn disable() -> Result<Status> {
        Ok(Status::default())
    }
    pub fn refresh() {}
    pub fn rearm() {}
    pub fn status() -> Status {
        Status::default()
    }
    pub fn handlers() -> Vec<(i32, usize, u64, usize, u64)> {
        Vec::new()
    }
}
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use unsupported::{disable, enable, handlers, rearm, refresh, status};

#[cfg(unix)]
use libc::SIGBUS;
/// Windows has no SIGBUS (and no crash report): a value no signal has.
#[cfg(not(unix))]
const SIGBUS: i32 = -1;

/// The signals reported, in this order everywhere.
pub const SIGNALS: [i32; 5] = [libc::SIGSEGV, SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// What enabling needs to know (from R, on its main thread).
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    /// R's main thread (`pthread_self()` there).
    pub main_thread: usize,
    /// An address inside R's interpreter (libR, or the R executable).
    pub interpreter_addr: usize,
    /// The address of the variable `R_GlobalContext`.
    pub global_context: usize,
    /// Offsets in R's context record: `nextcontext`, `callflag`, `call`.
    pub context_next: usize,
    pub context_callflag: usize,
    pub context_call: usize,
    pub cstack: CStack,
    /// Where R keeps them (`R_CStackStart`, `R_CStackLimit`, `R_CStackDir`;
    /// 0: unknown): read when a signal comes, as R's handler does, since
    /// code that embeds R or starts threads may change them later.
    pub cstack_vars: [usize; 3],
    pub symbols: crate::profile::rheap::Symbols,
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
pub fn is_c_stack_overflow(addr: usize, stack: CStack) -> bool {
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

/// For each R context (addresses `contexts`, innermost first, as R's chain
/// lists them), the native frame it belongs to: a context is a local
/// variable of the C function that made it, so it belongs to the frame `i`
/// with `sps[i] <= addr < sps[i + 1]` (the outermost walked frame owns
/// everything above it, up to `stack_hi`). Contexts that are not on the C
/// stack (R's byte-code calls keep theirs on R's node stack) go with the
/// next context further out that is, and when none is, after the last
/// frame. `sps` are the frames' stack pointers, innermost first. Writes
/// into `out` (as long as `contexts`).
pub fn owners(sps: &[usize], contexts: &[usize], stack_hi: usize, out: &mut [usize]) {
    let n = sps.len();
    let lo = sps.first().copied().unwrap_or(usize::MAX);
    let last = n.saturating_sub(1);
    let mut pending = 0;
    let mut frame = 0;
    for (k, &addr) in contexts.iter().enumerate() {
        if n == 0 || addr < lo || addr >= stack_hi {
            continue; // placed with the next one on the stack
        }
        while frame + 1 < n && sps[frame + 1] <= addr {
            frame += 1;
        }
        for o in out.iter_mut().take(k + 1).skip(pending) {
            *o = frame;
        }
        pending = k + 1;
    }
    for o in out.iter_mut().take(contexts.len()).skip(pending) {
        *o = last;
    }
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
    fn contexts_go_to_the_frames_that_own_them() {
        // Frames at 100, 200, 300, 400 (innermost first); the stack ends at
        // 1000.
        let sps = [100, 200, 300, 400];
        let ctx = [150, 250, 260, 450, 999];
        let mut out = [9; 5];
        owners(&sps, &ctx, 1000, &mut out);
        assert_eq!(out, [0, 1, 1, 3, 3]);
        // Contexts off the C stack (node stack, at 5000) go with the next
        // one on the stack; trailing ones after the last frame.
        let ctx = [5000, 5008, 250, 6000];
        let mut out = [9; 4];
        owners(&sps, &ctx, 1000, &mut out);
        assert_eq!(out, [1, 1, 1, 3]);
        // Below the innermost frame (cannot happen for a live context):
        // treated as off the stack.
        let mut out = [9; 2];
        owners(&sps, &[50, 350], 1000, &mut out);
        assert_eq!(out, [2, 2]);
        // No frames at all.
        let mut out = [9; 2];
        owners(&[], &[10, 20], 1000, &mut out);
        assert_eq!(out, [0, 0]);
    }

    #[test]
    fn signals_have_names() {
        assert_eq!(signal_name(libc::SIGSEGV).0, "SIGSEGV");
        assert_eq!(signal_name(libc::SIGABRT).1, "abort");
        assert_eq!(signal_name(0).0, "signal");
    }
}
