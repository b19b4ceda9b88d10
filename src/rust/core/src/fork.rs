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
