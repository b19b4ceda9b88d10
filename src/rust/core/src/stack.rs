//! Bounds of the current thread's stack.

use std::cell::Cell;

thread_local! {
    static TOP: Cell<usize> = const { Cell::new(0) };
}

/// One past the highest address of the calling thread's stack, from the C
/// library (computed once per thread: for the main thread glibc reads
/// /proc/self/maps).
#[cfg(target_os = "linux")]
pub fn thread_stack_top() -> Option<usize> {
    let cached = TOP.with(|t| t.get());
    if cached != 0 {
        return Some(cached);
    }
    // SAFETY: plain pthread attribute queries on the calling thread.
    let top = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if !ok {
            return None;
        }
        addr as usize + size
    };
    TOP.with(|t| t.set(top));
    Some(top)
}

#[cfg(not(target_os = "linux"))]
pub fn thread_stack_top() -> Option<usize> {
    let _ = TOP.with(|t| t.get());
    None
}
