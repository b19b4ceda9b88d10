//! The joint sampling profiler: sampling R's main thread from a timer
//! signal (async-signal-safe), collecting samples into distinct stacks, and
//! writing them in Rprof's format and as pprof's `profile.proto`.

pub mod bcode;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod build;
pub mod collect;

/// Asks the CPU to start loading the cache line at `addr` (any address:
/// a prefetch never faults). The handler's reads depend on one another (a
/// frame's return address gives the next frame), so each would wait for
/// memory in turn; prefetching the addresses the last sample read lets
/// those loads overlap.
#[inline(always)]
pub fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch hint reads nothing architecturally and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch(addr as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Touches every page of `v`, so that the kernel maps them now and not in
/// the signal handler (fresh zeroed allocations are mapped on first use).
pub fn prefault<T: Copy>(v: &mut [T]) {
    let step = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for i in (0..v.len()).step_by(step) {
        let p = &mut v[i] as *mut T;
        // SAFETY: `p` points into `v`; rewrites the element's own value.
        unsafe { std::ptr::write_volatile(p, std::ptr::read_volatile(p)) };
    }
}
pub mod labels;
pub mod model;
pub mod pprof;
pub mod rheap;
pub mod ring;
pub mod rprof;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod sampler;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod session;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod walk;
