//! Facts about the running R process, gathered once from R's API when
//! winch loads into one [`Facts`] value (see `winch_core::r`), and which
//! modules are R and winch.

use crate::rapi;
use std::sync::OnceLock;
use winch_core::error::{Error, Result};
use winch_core::modules::ModuleMap;
use winch_core::r::{Facts, Layout, RVersion, Symbols};
use winch_core::view::Known;

static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();
static R_VERSION: OnceLock<RVersion> = OnceLock::new();
static FACTS: OnceLock<Facts> = OnceLock::new();

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Called once from `R_init_winch`, on R's main thread, with winch's
/// `DllInfo`.
#[no_mangle]
pub extern "C" fn winch_rust_init(dll: *mut std::ffi::c_void) {
    let _ = MAIN_THREAD.set(std::thread::current().id());
    // SAFETY: R's main thread, while the package loads.
    unsafe { crate::lazy_columns::register(dll) };
    // Panics are caught and turned into R errors; keep their text for the
    // message instead of printing to the console. This hook belongs to
    // winch's copy of the Rust runtime only.
    std::panic::set_hook(Box::new(|info| {
        let msg = match (info.payload().downcast_ref::<&str>(), info.payload().downcast_ref::<String>()) {
            (Some(s), _) => s.to_string(),
            (_, Some(s)) => s.clone(),
            _ => "unknown panic".to_string(),
        };
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
    }));
}

/// The message of the last panic on this thread, if any.
pub fn take_panic_message() -> Option<String> {
    LAST_PANIC.with(|p| p.borrow_mut().take())
}

pub fn on_main_thread() -> bool {
    MAIN_THREAD.get() == Some(&std::thread::current().id())
}

/// Remembers the running R's version and gathers the facts about it (from
/// `.onLoad`, on R's main thread).
pub fn set_r_version(v: RVersion) {
    let _ = R_VERSION.set(v);
    if let Some(layout) = Layout::for_r(v) {
        let _ = FACTS.set(gather(v, layout));
    }
}

/// The facts about the running R, gathered once.
fn gather(version: RVersion, layout: Layout) -> Facts {
    // SAFETY: reading exported variables and symbol pointers of libR, set at
    // start-up, on R's main thread; addresses of variables are only taken.
    unsafe {
        Facts {
            version,
            layout,
            main_thread: pthread_id(),
            interpreter_addr: libr_addr(),
            own_addr: self_addr(),
            global_context: std::ptr::addr_of!(rapi::R_GlobalContext) as usize,
            cstack_vars: [
                std::ptr::addr_of!(rapi::R_CStackStart) as usize,
                std::ptr::addr_of!(rapi::R_CStackLimit) as usize,
                std::ptr::addr_of!(rapi::R_CStackDir) as usize,
            ],
            node_stack: node_stack_range(),
            data: Facts::writable_data_of(libr_addr()),
            symbols: Symbols {
                double_colon: rapi::R_DoubleColonSymbol as usize,
                triple_colon: rapi::R_TripleColonSymbol as usize,
                dollar: rapi::R_DollarSymbol as usize,
                bracket2: rapi::R_Bracket2Symbol as usize,
            },
            nil: rapi::R_NilValue as usize,
            srcref_var: std::ptr::addr_of!(rapi::R_Srcref) as usize,
            in_bc: rapi::R_InBCInterpreter as usize,
            class_symbol: rapi::R_ClassSymbol as usize,
        }
    }
}

/// The facts about the running R, or why they are not known.
pub fn facts() -> Result<&'static Facts> {
    match FACTS.get() {
        Some(f) => Ok(f),
        None => context_layout().and_then(|_| {
            Err(Error::Unavailable("the facts about R were not gathered (winch was not loaded by R)".into()))
        }),
    }
}

/// The running R's version, once `.onLoad` has said it.
pub fn r_version() -> Option<RVersion> {
    R_VERSION.get().copied()
}

/// The calling thread's `pthread_t` (what the throw hook and the crash
/// handler compare with R's main thread); 0 where there is none.
pub fn pthread_id() -> usize {
    #[cfg(unix)]
    // SAFETY: pthread_self reads the thread pointer.
    return unsafe { libc::pthread_self() } as usize;
    #[cfg(not(unix))]
    return 0;
}

/// The layout of R's contexts for the running R.
fn context_layout() -> Result<Layout> {
    let version = r_version()
        .ok_or_else(|| Error::Unavailable("R's version is not known (winch was not loaded by R)".into()))?;
    Layout::for_r(version).ok_or_else(|| {
        Error::Unavailable(format!("R's context layout is unknown for R {}.{}", version.0, version.1))
    })
}

/// An address inside winch's own shared library.
pub fn self_addr() -> usize {
    winch_rust_init as extern "C" fn(*mut std::ffi::c_void) as usize
}

/// An address inside R's shared library (or executable, if R is static).
pub fn libr_addr() -> usize {
    rapi::Rf_eval as unsafe extern "C" fn(rapi::Sexp, rapi::Sexp) -> rapi::Sexp as usize
}

/// The modules that decide what views show.
pub fn known_modules(map: &ModuleMap) -> Known {
    Known::at(map, self_addr(), libr_addr())
}

/// The memory that holds R's node stack, `[start, end)` (see
/// `Facts::node_stack_ending_at`).
fn node_stack_range() -> Option<(usize, usize)> {
    // SAFETY: reading an exported pointer variable of libR, set at start-up.
    let end = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(rapi::R_BCNodeStackEnd)) } as usize;
    Facts::node_stack_ending_at(end)
}
