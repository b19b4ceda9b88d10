//! The current thread: its stack's bounds, and a helper thread's signal mask.

use std::cell::Cell;

thread_local! {
    static BOUNDS: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// [low, high) of the calling thread's stack as the C library reports it
/// (computed once per thread: for the main thread glibc reads
/// /proc/self/maps). Code running on another stack (a signal handler's
/// alternate stack, a coroutine) has its stack pointer outside these bounds;
/// callers check that before trusting them.
#[cfg(target_os = "linux")]
pub fn thread_stack_bounds() -> Option<(usize, usize)> {
    let cached = BOUNDS.with(|b| b.get());
    if cached.1 != 0 {
        return Some(cached);
    }
    // SAFETY: plain pthread attribute queries on the calling thread.
    let bounds = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if !ok || size == 0 {
            return None;
        }
        (addr as usize, addr as usize + size)
    };
    BOUNDS.with(|b| b.set(bounds));
    Some(bounds)
}

#[cfg(not(target_os = "linux"))]
pub fn thread_stack_bounds() -> Option<(usize, usize)> {
    let _ = BOUNDS.with(|b| b.get());
    None
}

/// The live part of the calling thread's stack: [sp, high), where `sp` is an
/// address in the caller's frame, or None when `sp` is not inside the
/// thread's stack (then nothing on it may be read directly).
pub fn live_range(sp: usize) -> Option<(usize, usize)> {
    let (lo, hi) = thread_stack_bounds()?;
    (lo <= sp && sp < hi).then_some((sp, hi))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn locals_lie_in_the_live_range() {
        let x = 1u64;
        let addr = std::hint::black_box(&x) as *const u64 as usize;
        let (lo, hi) = live_range(addr).unwrap();
        assert_eq!(lo, addr);
        assert!(hi > addr);
        let heap = Box::new(1u64);
        assert!(live_range(&*heap as *const u64 as usize).is_none());
        // Another thread has its own stack.
        let other = std::thread::spawn(thread_stack_bounds).join().unwrap().unwrap();
        assert_ne!(other, thread_stack_bounds().unwrap());
    }
}

/// Blocks every signal on the calling thread (a helper thread of winch's):
/// signals sent to the process (SIGINT, SIGCHLD, the profiler's) are then
/// handled by R's main thread, never by it.
#[cfg(unix)]
pub fn block_signals() {
    // SAFETY: `set` is a local sigset_t, filled before use; changing this
    // thread's own mask has no other effect.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
