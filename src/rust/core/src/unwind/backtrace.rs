//! The `backtrace` crate backend (libgcc's `_Unwind_Backtrace` on Linux).

use super::{RawFrame, StackEnd};

pub(super) fn walk(out: &mut Vec<RawFrame>, max: usize, want_start: bool) -> StackEnd {
    let mut full = false;
    // `trace` serializes walks behind the crate's lock; libgcc itself does not
    // say why a walk stopped, so an early stop is detected by the caller from
    // the outermost frame.
    ::backtrace::trace(|frame| {
        // libgcc reports the (nonexistent) caller of the outermost frame with
        // a zero address: that is the end of the stack.
        if frame.ip().is_null() {
            return false;
        }
        if out.len() >= max {
            full = true;
            return false;
        }
        out.push(RawFrame {
            ip: frame.ip() as usize,
            stack: frame.sp() as usize,
            start: if want_start { frame.symbol_address() as usize } else { 0 },
            signal: false,
        });
        true
    });
    if full {
        StackEnd::Limit
    } else {
        StackEnd::Outermost
    }
}
