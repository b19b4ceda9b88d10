//! The joint sampling profiler: sampling R's main thread from a timer
//! signal (async-signal-safe), collecting samples into distinct stacks, and
//! writing them in Rprof's format and as pprof's `profile.proto`.

pub mod bcode;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub mod build;
pub mod collect;

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
