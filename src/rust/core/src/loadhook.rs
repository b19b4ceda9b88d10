//! Noticing libraries R loads and unloads: R's `dlopen` and `dlclose`
//! (`dyn.load()`, `library()`, `dyn.unload()`) go through libR's GOT; while
//! a user of this module is active, those slots point here (a family of
//! the GOT hook set, `got::hookset`, hooked in R's library alone), and
//! after the real call, before the caller sees the library:
//!
//! * every family of GOT hooks hooks the new modules
//!   (`got::hookset::modules_changed`, the one way GOT hooks hear of it);
//! * the users' listeners rebuild what they built from the module list on
//!   R's main thread (throw capture's walk table, the crash report's
//!   tables, which hold that thread's stack bounds), as they would at
//!   their next top-level check of the loader's generation.
//!
//! Libraries that a loaded library opens itself are found by the same scan
//! (they are loaded when its `dlopen` returns), or when the loader's
//! counters are next checked.

#[cfg(target_os = "linux")]
use crate::got::hookset::{Family, Find, Hook, Options};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Users.
pub const THROWS: u32 = 1;
pub const CRASH: u32 = 2;

static USERS: AtomicU32 = AtomicU32::new(0);
/// Held while users are added or removed (the first installs the hooks,
/// the last removes them).
static USERS_LOCK: Mutex<()> = Mutex::new(());

#[cfg(target_os = "linux")]
static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);
#[cfg(target_os = "linux")]
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// The hooked functions: the versions libR may require (glibc 2.34 moved
/// both into libc).
#[cfg(target_os = "linux")]
static HOOKS: [Hook; 4] = [
    Hook::new("dlopen", "GLIBC_2.34", dlopen_hook as *const (), &REAL_DLOPEN),
    Hook::new("dlopen", "GLIBC_2.2.5", dlopen_hook as *const (), &REAL_DLOPEN),
    Hook::new("dlclose", "GLIBC_2.34", dlclose_hook as *const (), &REAL_DLCLOSE),
    Hook::new("dlclose", "GLIBC_2.2.5", dlclose_hook as *const (), &REAL_DLCLOSE),
];
#[cfg(target_os = "linux")]
static FAMILY: Family = Family::new("R's dlopen and dlclose", &HOOKS, Find::Global);

/// What each user wants done when modules change (a `fn()` as an address,
/// 0 for nothing), by user bit: throw capture and the crash report register
/// theirs with [`listen`], so this module calls them without knowing them.
static LISTENERS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

fn slot(user: u32) -> Option<&'static AtomicUsize> {
    match user {
        THROWS => Some(&LISTENERS[0]),
        CRASH => Some(&LISTENERS[1]),
        _ => None,
    }
}

/// Registers what `user` wants done after a library is loaded or unloaded
/// (called while it is a user: see [`acquire`]).
pub fn listen(user: u32, on_change: fn()) {
    if let Some(s) = slot(user) {
        s.store(on_change as usize, Ordering::Release);
    }
}

/// Tells the GOT hook set and the users that modules changed. Never
/// unwinds.
#[cfg(target_os = "linux")]
fn notify() {
    let users = USERS.load(Ordering::Acquire);
    // SAFETY: errno is thread-local; saved and restored around the work.
    let saved = unsafe { *libc::__errno_location() };
    let _ = std::panic::catch_unwind(|| {
        crate::got::hookset::modules_changed(&crate::modules::current());
        for user in [THROWS, CRASH] {
            let f = slot(user).map_or(0, |s| s.load(Ordering::Acquire));
            if users & user != 0 && f != 0 {
                // SAFETY: only `listen` stores here, and it stores a `fn()`.
                let f = unsafe { std::mem::transmute::<usize, fn()>(f) };
                f();
            }
        }
    });
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

#[cfg(target_os = "linux")]
type DlOpen = unsafe extern "C-unwind" fn(*const libc::c_char, libc::c_int) -> *mut libc::c_void;
#[cfg(target_os = "linux")]
type DlClose = unsafe extern "C-unwind" fn(*mut libc::c_void) -> libc::c_int;

/// R's `dlopen`, then the users are told.
#[cfg(target_os = "linux")]
unsafe extern "C-unwind" fn dlopen_hook(file: *const libc::c_char, mode: libc::c_int) -> *mut libc::c_void {
    let real = REAL_DLOPEN.load(Ordering::Acquire);
    // SAFETY: `real` is the loader's dlopen (set before the slot pointed
    // here); the arguments are the caller's.
    let handle = unsafe { std::mem::transmute::<usize, DlOpen>(real)(file, mode) };
    if !handle.is_null() {
        notify();
    }
    handle
}

/// R's `dlclose`, then the users are told.
#[cfg(target_os = "linux")]
unsafe extern "C-unwind" fn dlclose_hook(handle: *mut libc::c_void) -> libc::c_int {
    let real = REAL_DLCLOSE.load(Ordering::Acquire);
    // SAFETY: as for `dlopen_hook`.
    let status = unsafe { std::mem::transmute::<usize, DlClose>(real)(handle) };
    notify();
    status
}

/// Keeps this library loaded for the rest of the process, once anything
/// outside it points into it (GOT slots of other modules, signal handlers,
/// a trampoline another thread may be running): R's
/// `library.dynam.unload()` of winch then leaves the code in place, so a
/// slot that could not be restored, or a handler someone chained to, never
/// jumps into unmapped memory. (A later `dyn.load()` of the same path gets
/// this copy back.)
#[cfg(target_os = "linux")]
pub fn pin_self() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed Dl_info is a valid value for dladdr to fill.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let here = pin_self as fn() as *const libc::c_void;
        // SAFETY: `here` is an address in this library; dladdr only fills `info`.
        if unsafe { libc::dladdr(here, &mut info) } != 0 && !info.dli_fname.is_null() {
            // SAFETY: dli_fname names this loaded library; RTLD_NOLOAD only
            // takes a reference to the loaded copy, RTLD_NODELETE keeps it.
            unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
        }
    });
}

#[cfg(not(target_os = "linux"))]
pub fn pin_self() {}

fn users_lock() -> std::sync::MutexGuard<'static, ()> {
    USERS_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds a user; the first one points libR's `dlopen`/`dlclose` slots here
/// (tried again by the next user while no slot could be). `interpreter_addr`
/// is an address in libR.
#[cfg(target_os = "linux")]
pub fn acquire(user: u32, interpreter_addr: usize) {
    pin_self();
    let _users = users_lock();
    USERS.fetch_or(user, Ordering::AcqRel);
    if active() || interpreter_addr == 0 {
        return;
    }
    FAMILY.uninstall(); // (nothing to restore: from scratch)
    FAMILY.install(Options { only: Some(interpreter_addr), hook_own: false });
}

/// Removes a user; the last one restores libR's slots.
#[cfg(target_os = "linux")]
pub fn release(user: u32) {
    let _users = users_lock();
    let left = USERS.fetch_and(!user, Ordering::AcqRel) & !user;
    if left == 0 {
        FAMILY.uninstall();
    }
}

#[cfg(not(target_os = "linux"))]
pub fn acquire(user: u32, _interpreter_addr: usize) {
    let _users = users_lock();
    USERS.fetch_or(user, Ordering::AcqRel);
}

#[cfg(not(target_os = "linux"))]
pub fn release(user: u32) {
    let _users = users_lock();
    USERS.fetch_and(!user, Ordering::AcqRel);
}

/// Whether libR's slots point here now.
#[cfg(target_os = "linux")]
pub fn active() -> bool {
    FAMILY.coverage().slots > 0
}

#[cfg(not(target_os = "linux"))]
pub fn active() -> bool {
    false
}
