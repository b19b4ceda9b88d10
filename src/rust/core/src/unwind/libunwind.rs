//! The libunwind backend: the stepping loop is in `csrc/libunwind_shim.c`.

use super::{RawFrame, StackEnd};

extern "C" {
    fn winch_unw_capture(
        ip: *mut usize,
        sp: *mut usize,
        start: *mut usize,
        signal: *mut u8,
        max: i32,
        status: *mut i32,
    ) -> i32;
}

pub(super) fn walk(out: &mut Vec<RawFrame>, max: usize, want_start: bool) -> StackEnd {
    let max = max.min(i32::MAX as usize);
    let mut ip = vec![0usize; max];
    let mut sp = vec![0usize; max];
    let mut start = if want_start { vec![0usize; max] } else { Vec::new() };
    let mut signal = vec![0u8; max];
    let mut status = 0i32;
    // SAFETY: every buffer holds `max` elements (start only when requested, and
    // it is passed as NULL otherwise); the shim writes at most `max` entries.
    let n = unsafe {
        winch_unw_capture(
            ip.as_mut_ptr(),
            sp.as_mut_ptr(),
            if want_start { start.as_mut_ptr() } else { std::ptr::null_mut() },
            signal.as_mut_ptr(),
            max as i32,
            &mut status,
        )
    };
    let mut n = (n.max(0) as usize).min(max);
    // A zero return address marks the end of the stack, like in libgcc.
    if n > 0 && ip[n - 1] == 0 && status == 0 {
        n -= 1;
    }
    out.extend((0..n).map(|i| RawFrame {
        ip: ip[i],
        stack: sp[i],
        start: if want_start { start[i] } else { 0 },
        signal: signal[i] != 0,
    }));
    match status {
        0 => StackEnd::Outermost,
        1 => StackEnd::Limit,
        code => StackEnd::Failed(format!("libunwind error {code}")),
    }
}
