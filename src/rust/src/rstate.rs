//! Facts about the running R process: its main thread, its context chain
//! head, the bounds of its C stack, and which module is R itself.

use std::sync::OnceLock;
use winch_core::modules::{Module, ModuleMap};

extern "C" {
    // Exported by libR and declared in Rinterface.h.
    // `mut`: R changes it all the time; it is only ever read, volatile.
    static mut R_GlobalContext: *mut std::ffi::c_void;
    // Exported by libR (LibExtern in Defn.h): one past the end of R's node
    // stack, where R >= 4.4 keeps the records of byte-code calls.
    static mut R_BCNodeStackEnd: *mut std::ffi::c_void;
    // Declared here with plain C types: extendr-ffi's TYPEOF returns a Rust
    // enum, which must never hold a value outside its variants.
    fn Rf_eval(expr: *mut std::ffi::c_void, env: *mut std::ffi::c_void) -> *mut std::ffi::c_void;
    fn TYPEOF(x: *mut std::ffi::c_void) -> std::ffi::c_int;
    fn CAR(x: *mut std::ffi::c_void) -> *mut std::ffi::c_void;
}

const LANGSXP: std::ffi::c_int = 6;

/// The function part of a call object, if `call` is a call.
///
/// # Safety
/// `call` must be a valid R object.
pub unsafe fn call_head(call: usize) -> Option<usize> {
    let call = call as *mut std::ffi::c_void;
    (TYPEOF(call) == LANGSXP).then(|| CAR(call) as usize)
}

static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();
static R_VERSION: OnceLock<winch_core::rcontext::RVersion> = OnceLock::new();
static NODE_STACK: OnceLock<Option<(usize, usize)>> = OnceLock::new();

/// Records the running R's version (from `.onLoad`).
pub fn set_r_version(v: winch_core::rcontext::RVersion) {
    let _ = R_VERSION.set(v);
}

/// The running R's version, once `.onLoad` has said it.
pub fn r_version() -> Option<winch_core::rcontext::RVersion> {
    R_VERSION.get().copied()
}

/// The memory that holds R's node stack, `[start, end)`: the mapping that
/// holds its last element, up to its end. R allocates the node stack once at
/// start-up and never frees it, so this stays readable.
pub fn node_stack_range() -> Option<(usize, usize)> {
    *NODE_STACK.get_or_init(|| {
        // SAFETY: reading an exported pointer variable of libR, set at start-up.
        let end = unsafe { std::ptr::read_volatile(std::ptr::addr_of!(R_BCNodeStackEnd)) } as usize;
        if end == 0 {
            return None;
        }
        let (start, map_end) = winch_core::memory::mapping_containing(end - 1)?;
        (end <= map_end).then_some((start, end))
    })
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Called once from `R_init_winch`, on R's main thread.
#[no_mangle]
pub extern "C" fn winch_rust_init() {
    let _ = MAIN_THREAD.set(std::thread::current().id());
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

/// An address inside winch's own shared library.
pub fn self_addr() -> usize {
    winch_rust_init as extern "C" fn() as usize
}

/// An address inside R's shared library (or executable, if R is static).
pub fn libr_addr() -> usize {
    Rf_eval as unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void) -> *mut std::ffi::c_void
        as usize
}

/// The current innermost R context.
pub fn global_context() -> usize {
    // SAFETY: reading an exported pointer variable of libR on its own thread.
    unsafe { std::ptr::read_volatile(std::ptr::addr_of!(R_GlobalContext)) as usize }
}

/// Writable data of R's library (where R keeps its top-level context).
pub fn libr_data_ranges() -> Vec<(usize, usize)> {
    let map = winch_core::modules::current();
    match libr_module(&map) {
        Some(m) => {
            map.module(m).segments.iter().filter(|s| s.read && s.write).map(|s| (s.start, s.end)).collect()
        }
        None => Vec::new(),
    }
}

/// R's own code: the module holding libR's functions, and R's executable.
pub fn libr_predicate(map: &ModuleMap) -> impl Fn(usize) -> bool + '_ {
    let libr = map.module_of(libr_addr());
    move |m: usize| Some(m) == libr || is_r_executable(map.module(m))
}

/// The module of R's interpreter (libR.so; the executable if R is static).
pub fn libr_module(map: &ModuleMap) -> Option<usize> {
    map.module_of(libr_addr())
}

fn is_r_executable(m: &Module) -> bool {
    m.is_main && (m.path.ends_with("/bin/exec/R") || m.path.ends_with("/bin/exec/Rterm"))
}
