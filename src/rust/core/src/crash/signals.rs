//! The system side of the crash report's signals: the kernel's signal
//! actions read and set exactly as the kernel holds them, an alternate
//! signal stack for R's main thread, and errno and standard error as a
//! signal handler may use them. Every function a handler calls here is
//! async-signal-safe.

/// Bytes of the alternate signal stack made when the thread has none (or
/// one too small for a walk).
const ALT_STACK: usize = 256 << 10;
const ALT_STACK_MIN: usize = 64 << 10;

/// The kernel's `struct sigaction` on x86_64 (what `rt_sigaction` reads
/// and writes): saved and restored as the kernel holds it, so that turning
/// the report off restores every bit (the C library's `sigaction()` adds
/// its own restorer flag to whatever it installs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct KernelAction {
    pub handler: usize,
    pub flags: u64,
    pub restorer: usize,
    pub mask: u64,
}

pub(super) fn kernel_get(sig: i32) -> Option<KernelAction> {
    let mut k = KernelAction::default();
    // SAFETY: rt_sigaction with a null new action only fills `k`, whose
    // layout is the kernel's (8-byte signal set).
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            std::ptr::null::<KernelAction>(),
            &mut k as *mut KernelAction,
            8,
        )
    };
    (r == 0).then_some(k)
}

/// Async-signal-safe (one system call).
pub(super) fn kernel_set(sig: i32, k: &KernelAction) -> bool {
    // SAFETY: installs an action saved from the kernel before.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            k as *const KernelAction,
            std::ptr::null_mut::<KernelAction>(),
            8,
        )
    };
    r == 0
}

/// Makes sure this thread (R's main thread) has an alternate signal stack
/// of a useful size; returns the one made, with the previous setting.
pub(super) fn ensure_alt_stack() -> Option<(usize, usize, libc::stack_t)> {
    // SAFETY: a zeroed stack_t is a valid buffer; the query changes nothing.
    let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) } != 0 {
        return None;
    }
    if cur.ss_flags & libc::SS_DISABLE == 0 && cur.ss_size >= ALT_STACK_MIN {
        return None; // R's own (or another) is there and large enough
    }
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            ALT_STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let new = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: ALT_STACK };
    // SAFETY: installs the mapping just made as this thread's alternate stack.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        // SAFETY: unmaps what was just mapped.
        unsafe { libc::munmap(p, ALT_STACK) };
        return None;
    }
    Some((p as usize, ALT_STACK, cur))
}

pub(super) fn restore_alt_stack(alt: (usize, usize, libc::stack_t)) {
    let (p, size, prev) = alt;
    // SAFETY: a zeroed stack_t is a valid buffer.
    let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a query.
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) } != 0 || cur.ss_sp as usize != p {
        return; // replaced since by someone else: theirs stays, ours leaks
    }
    if cur.ss_flags & libc::SS_ONSTACK != 0 {
        return;
    }
    let back = if prev.ss_flags & libc::SS_DISABLE != 0 {
        libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 }
    } else {
        prev
    };
    // SAFETY: restores the previous setting, then unmaps ours (no longer
    // the alternate stack, and not in use: this thread is not on it).
    unsafe {
        if libc::sigaltstack(&back, std::ptr::null_mut()) == 0 {
            libc::munmap(p as *mut libc::c_void, size);
        }
    }
}

pub(super) fn errno() -> i32 {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

pub(super) fn set_errno(v: i32) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = v };
}

pub(super) fn write_all(bytes: &[u8]) {
    let mut rest = bytes;
    let mut tries = 0;
    while !rest.is_empty() && tries < 64 {
        tries += 1;
        // SAFETY: write(2) of a valid buffer to standard error.
        let n = unsafe { libc::write(2, rest.as_ptr() as *const libc::c_void, rest.len()) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && errno() == libc::EINTR {
            continue;
        } else {
            break;
        }
    }
}
