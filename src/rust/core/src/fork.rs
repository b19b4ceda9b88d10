//! Handlers that run around `fork()` (`parallel::mclapply` forks R), each
//! registered once per process: the one declaration of `pthread_atfork`.

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> libc::c_int;
}

/// A handler run around `fork()`: async-signal-safe in what it does (the
/// child handler runs in a process whose other threads are gone).
pub(crate) type Handler = Option<extern "C" fn()>;

/// Registers the handlers, once for each `once` (glibc removes them if
/// winch's library is unloaded).
pub(crate) fn register_once(
    once: &'static std::sync::Once,
    prepare: Handler,
    parent: Handler,
    child: Handler,
) {
    once.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions of this library
        // that live as long as it is loaded; glibc removes them with it.
        unsafe { pthread_atfork(prepare, parent, child) };
    });
}

thread_local! {
    /// Set while this thread starts a process of winch's own (see
    /// [`quietly`]).
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, which starts a process of winch's own (its tracer process):
/// were it started with `fork()`, the handlers leave it alone (it is no
/// child of the profiled work, and runs another program at once). The
/// flag is this thread's, so the child's handler sees it too.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> T {
    QUIET.with(|q| q.set(true));
    let out = f();
    QUIET.with(|q| q.set(false));
    out
}

/// Whether this `fork()` is one [`quietly`] makes.
pub(crate) fn is_quiet() -> bool {
    QUIET.with(|q| q.get())
}

/// A number drawn once per process (see [`mark`]): a `fork()` child has
/// it at the same address, a process that ran another program has not.
static MARK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This process's mark, drawn at the first call: to be called before the
/// children it tells apart are forked.
pub(crate) fn mark() -> u64 {
    use std::sync::atomic::Ordering;
    let m = MARK.load(Ordering::Acquire);
    if m != 0 {
        return m;
    }
    let mut b = [0u8; 8];
    // SAFETY: getrandom fills the 8 bytes of `b`, or fails (then the
    // clock and the pid below stand in).
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, libc::GRND_NONBLOCK) };
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let drawn = (u64::from_ne_bytes(b) ^ nanos as u64 ^ ((std::process::id() as u64) << 32)) | 1;
    match MARK.compare_exchange(0, drawn, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => drawn,
        Err(other) => other,
    }
}

/// Whether process `pid` is a `fork()` of this one (or of a fork of it)
/// made after [`mark`] was first called, that has not run another program
/// since: its memory holds this process's mark where this one's does.
/// None when it is ending or gone (its memory is let go before it is a
/// zombie): not known.
pub(crate) fn is_fork_of_this(pid: i32) -> Option<bool> {
    use crate::memory::Memory;
    let m = mark();
    let word = crate::memory::Process { pid }.word(&MARK as *const _ as usize);
    match word {
        Some(w) => Some(w as u64 == m),
        // (Nothing there in a program's memory, most often.)
        None => {
            let st = crate::procfs::stat(crate::procfs::Proc::Pid(pid), None)?;
            (!st.exiting()).then_some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_has_the_mark_a_program_has_not() {
        let m = mark();
        assert_ne!(m, 0);
        assert_eq!(mark(), m, "drawn once");
        assert_eq!(is_fork_of_this(std::process::id() as i32), Some(true));
        // SAFETY: the child only sleeps (a system call) and exits.
        let forked = unsafe { libc::fork() };
        if forked == 0 {
            // SAFETY: as above.
            unsafe {
                libc::sleep(5);
                libc::_exit(0)
            };
        }
        let mut program = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert_eq!(is_fork_of_this(forked), Some(true), "a fork");
        // (Once it has run the program: it is started by posix_spawn.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while is_fork_of_this(program.id() as i32) != Some(false) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(is_fork_of_this(program.id() as i32), Some(false), "another program");
        assert_eq!(is_fork_of_this(i32::MAX), None, "no process: not known");
        // SAFETY: kill and wait of our own child.
        unsafe {
            libc::kill(forked, libc::SIGKILL);
            libc::waitpid(forked, std::ptr::null_mut(), 0);
        }
        let _ = program.kill();
        let _ = program.wait();
    }
}
