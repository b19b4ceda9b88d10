//! The throw hooks of x86_64 Linux: trampolines, the recording done inside
//! them, and their family of the GOT hook set (`got::hookset`), which
//! points the loaded modules' GOT slots to them.
//!
//! Inside a hook (on R's main thread only) nothing allocates, locks or
//! calls R: the ring and the walker's caches (`unwind::walk`) are allocated
//! when capture is installed, the modules with their unwind tables (read in
//! place) when modules are scanned; the hook reads them through atomics. Other threads pass straight
//! through, touching nothing but two atomics.

use super::{enter, identify, walk, FrameClass, HookSetup, Ring, Status, Throw, WalkEnd, MAX_FRAMES};
use crate::error::{Error, Result};
use crate::got::hookset::{self, Family, Find, Hook, Options};
use crate::modules::Generation;
use crate::modules::{self, ModuleMap};
use crate::published::Published;
use crate::unwind::rules::{InPlace, Regs, Tables};
use crate::unwind::walk::{Caches, Modules, Sizes};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

// The trampolines. Each saves the exception pointer, asks `throw_entered`
// (which records the throw) for the real function, and jumps to it with
// every register the real function reads as the thrower left it: the
// unwinder starts from its caller's registers, so no frame of winch's may
// stay between them.
std::arch::global_asm!(
    ".pushsection .text.winch_core_throw_hooks,\"ax\",@progbits",
    ".p2align 4",
    ".globl winch_core_throw_raise_hook",
    ".hidden winch_core_throw_raise_hook",
    ".type winch_core_throw_raise_hook,@function",
    "winch_core_throw_raise_hook:",
    ".cfi_startproc",
    "push rdi",
    ".cfi_adjust_cfa_offset 8",
    "xor esi, esi",
    "call {entered}",
    "pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "jmp rax",
    ".cfi_endproc",
    ".size winch_core_throw_raise_hook, .-winch_core_throw_raise_hook",
    ".p2align 4",
    ".globl winch_core_throw_rethrow_hook",
    ".hidden winch_core_throw_rethrow_hook",
    ".type winch_core_throw_rethrow_hook,@function",
    "winch_core_throw_rethrow_hook:",
    ".cfi_startproc",
    "push rdi",
    ".cfi_adjust_cfa_offset 8",
    "mov esi, 1",
    "call {entered}",
    "pop rdi",
    ".cfi_adjust_cfa_offset -8",
    "jmp rax",
    ".cfi_endproc",
    ".size winch_core_throw_rethrow_hook, .-winch_core_throw_rethrow_hook",
    ".popsection",
    entered = sym throw_entered,
);

extern "C" {
    fn winch_core_throw_raise_hook();
    fn winch_core_throw_rethrow_hook();
}

/// The real functions (set before any slot points to a trampoline, never
/// cleared: a thread may be inside a trampoline when capture is removed).
static REAL: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// The hooked functions, libgcc's (found in libgcc_s if it is loaded, also
/// when only loaded locally by a package, else in the global scope; until
/// libgcc_s is loaded nothing needs them: no module can call them). The
/// trampoline passes its line's index to `throw_entered`.
static HOOKS: [Hook; 2] = [
    Hook::new("_Unwind_RaiseException", "GCC_3.0", winch_core_throw_raise_hook as *const (), &REAL[0]),
    Hook::new("_Unwind_Resume_or_Rethrow", "GCC_3.3", winch_core_throw_rethrow_hook as *const (), &REAL[1]),
];
static FAMILY: Family = Family::new("throw capture", &HOOKS, Find::LibraryFirst("libgcc_s.so.1"));

fn trampolines() -> [usize; 2] {
    [HOOKS[0].replacement as usize, HOOKS[1].replacement as usize]
}

/// R's main thread (`pthread_t`), 0 while capture is off.
static MAIN: AtomicUsize = AtomicUsize::new(0);
static IN_HOOK: AtomicBool = AtomicBool::new(false);

/// Clears the hook's re-entry guard. For R's main thread at top level,
/// where no throw is being recorded: a fault inside the hook that R
/// recovers from by a long jump (a C stack overflow) leaves it set, which
/// would turn capture off for the rest of the session.
pub fn reset_guard() {
    IN_HOOK.store(false, Ordering::Release);
}
/// The modules of the walk, their tables read in place (replaced when
/// modules change). Tables replaced while capture is on may still be in
/// use by the hook: freed at top level (`free_retired`) or when capture is
/// removed.
type WalkTable = Modules<Tables<InPlace>>;
static TABLES: Published<WalkTable> = Published::new();

/// What the hook uses on R's main thread; allocated once, never freed.
struct Shared {
    inputs: UnsafeCell<HookInputs>,
    ring: UnsafeCell<Ring>,
    scratch: UnsafeCell<Caches>,
}

// SAFETY: only R's main thread touches the cells: inside the hook (which
// other threads leave at once) and in `install`/`recorded` (called on the
// main thread, never while it is inside the hook).
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

/// What the hook reads besides the walk table, set at install.
#[derive(Clone, Copy, Debug, Default)]
struct HookInputs {
    chain: Option<crate::r::ChainAt>,
    /// The main thread's stack.
    stack: (usize, usize),
    /// The trampolines (frames inside them and they are not recorded) and
    /// the code of R's interpreter (up to four executable segments).
    trampolines: [usize; 2],
    interpreter: [(usize, usize); 4],
    /// How libgcc's stack values read (CFA or SP) for the fallback walk.
    backtrace_cfa: bool,
}

impl HookInputs {
    /// The class of the frame at `probe` (its ip, minus one for return
    /// addresses).
    fn class(&self, probe: usize) -> FrameClass {
        // Each trampoline is under 16 bytes.
        if self.trampolines.iter().any(|&t| t <= probe && probe < t + 16) {
            FrameClass::Marker
        } else if self.interpreter.iter().any(|&(lo, hi)| lo <= probe && probe < hi) {
            FrameClass::Interpreter
        } else {
            FrameClass::Other
        }
    }
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        inputs: UnsafeCell::new(HookInputs::default()),
        ring: UnsafeCell::new(Ring::default()),
        scratch: UnsafeCell::new(Caches::new(Sizes::THROWS)),
    })
}

/// Called by the trampolines with the exception and which hook ran (0:
/// `_Unwind_RaiseException`, 1: `_Unwind_Resume_or_Rethrow`); returns the
/// real function to jump to. Never unwinds.
extern "C" fn throw_entered(exc: *mut libc::c_void, which: usize) -> usize {
    let real = REAL[which & 1].load(Ordering::Relaxed);
    let main = MAIN.load(Ordering::Acquire);
    // SAFETY: pthread_self reads the thread pointer.
    if main != 0 && unsafe { libc::pthread_self() } as usize == main && !IN_HOOK.swap(true, Ordering::Acquire)
    {
        // SAFETY: errno is thread-local; saved and restored around the record.
        let saved = unsafe { *libc::__errno_location() };
        let _ = std::panic::catch_unwind(|| record_throw(exc as usize, which == 1));
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved };
        IN_HOOK.store(false, Ordering::Release);
    }
    real
}

/// A word of a live object: the exception being thrown, `R_GlobalContext`,
/// or a record of R's context chain.
fn object_word(addr: usize) -> Option<usize> {
    if addr < 4096 || !addr.is_multiple_of(8) {
        return None;
    }
    // SAFETY: callers pass addresses in live objects only: the exception
    // object and its header (allocated by the runtime that throws it, whose
    // class said which runtime), R's variable `R_GlobalContext`, and fields
    // of R's context records, which are live (on the C stack, R's node
    // stack or R's data) while R runs on this thread, the main thread.
    Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
}

fn record_throw(exc: usize, rethrow: bool) {
    let s = shared();
    // SAFETY: the main thread, inside the hook (see `Shared`).
    let (inputs, ring, scratch) = unsafe { (&*s.inputs.get(), &mut *s.ring.get(), &mut *s.scratch.get()) };
    let id = identify(exc, object_word);
    // R's context records are live (on the C stack, R's node stack or R's
    // data) while R runs on this thread.
    let contexts = match &inputs.chain {
        Some(chain) => super::r_activation(&crate::memory::Objects, chain),
        None => [(0, 0); 2],
    };
    let epoch = super::epoch();
    enter(ring, id, rethrow, |r| {
        r.epoch = epoch;
        r.r_contexts = contexts;
        fill_frames(inputs, scratch, r);
    });
}

#[inline(never)]
fn fill_frames(inputs: &HookInputs, scratch: &mut Caches, r: &mut Throw) {
    let (ip, sp, bp) = crate::unwind::registers();
    let (lo, hi) = inputs.stack;
    // (A table is freed only on this thread, never while it is in the
    // hook: see `TABLES`.)
    let table = TABLES.current();
    // The frames are in modules loaded now (their code is running): named
    // later with the modules of this generation.
    let generation = modules::loader_generation();
    r.generation = Some(generation).filter(|g| g.is_known());
    let current = table.filter(|t| t.generation == generation);
    if let (Some(table), true) = (current.map(|t| &t.value), lo <= sp && sp < hi) {
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let regs = Regs { ip, sp, bp: Some(bp) };
        let (n, end) = walk(table, scratch, regs, read, |probe| inputs.class(probe), &mut r.frames);
        if end != WalkEnd::Failed {
            r.n = n;
            r.reached_r = end == WalkEnd::ReachedR;
            r.truncated = end == WalkEnd::Full;
            return;
        }
    }
    libgcc_walk(inputs, r);
}

/// The walk by libgcc's unwinder: for frames the rules do not model,
/// or when modules changed since the table was built.
fn libgcc_walk(inputs: &HookInputs, r: &mut Throw) {
    let mut n = 0;
    let mut end = WalkEnd::Outermost;
    let mut prev_stack = 0usize;
    // SAFETY: libgcc's walk of this thread; the closure only writes into
    // `r.frames` (no allocation). The throw that called the hook walks the
    // same frames next, with the same unwinder.
    unsafe {
        ::backtrace::trace_unsynchronized(|f| {
            let ip = f.ip() as usize;
            let stack = f.sp() as usize;
            // libgcc reports stack values as CFAs on some platforms: a
            // frame's low end is then the value of the frame inside it.
            let sp = if inputs.backtrace_cfa { prev_stack } else { stack };
            prev_stack = stack;
            if ip == 0 {
                return false;
            }
            match inputs.class(ip.wrapping_sub(1)) {
                FrameClass::Marker => {
                    n = 0;
                    true
                }
                c => {
                    if n >= MAX_FRAMES {
                        end = WalkEnd::Full;
                        return false;
                    }
                    r.frames[n] = (ip, sp);
                    n += 1;
                    if c == FrameClass::Interpreter {
                        end = WalkEnd::ReachedR;
                        return false;
                    }
                    true
                }
            }
        });
    }
    r.n = n;
    r.reached_r = end == WalkEnd::ReachedR;
    r.truncated = end == WalkEnd::Full;
}

/// What capture was installed with (None: off).
static INSTALLED: Mutex<Option<HookSetup>> = Mutex::new(None);

fn lock() -> std::sync::MutexGuard<'static, Option<HookSetup>> {
    INSTALLED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Executable ranges of the module holding `addr` (up to four).
fn exec_ranges(map: &ModuleMap, m: Option<usize>) -> [(usize, usize); 4] {
    let mut out = [(0, 0); 4];
    if let Some(m) = m {
        for (slot, s) in out.iter_mut().zip(map.module(m).segments.iter().filter(|s| s.exec)) {
            *slot = (s.start, s.end);
        }
    }
    out
}

/// Turns capture on: hooks every loaded module and (through the GOT hook
/// set, told by `loadhook` and by whoever notices) those loaded later.
/// Call on R's main thread.
pub fn install(setup: HookSetup) -> Result<Status> {
    let mut guard = lock();
    if guard.is_some() {
        drop(guard);
        rescan();
        return Ok(status());
    }
    // SAFETY: pthread_self reads the thread pointer.
    if unsafe { libc::pthread_self() } as usize != setup.main_thread {
        return Err(Error::WrongThread);
    }
    if let (Some([raise, rethrow]), 0) = (setup.targets, REAL[0].load(Ordering::Acquire)) {
        // Given (tests): kept by the hook set, which fills only empty cells.
        REAL[1].store(rethrow, Ordering::Relaxed);
        REAL[0].store(raise, Ordering::Release);
    }
    let stack = crate::stack::thread_stack_bounds()
        .ok_or_else(|| Error::Unavailable("the bounds of R's stack are unknown".into()))?;
    let map = modules::current();
    let backtrace_cfa =
        crate::unwind::calibration(crate::unwind::Backend::Backtrace) == Some(crate::unwind::StackValue::Cfa);
    let interpreter = map.module_of(setup.interpreter_addr).filter(|_| setup.interpreter_addr != 0);
    let mut interp = exec_ranges(&map, interpreter);
    // R linked statically: R's executable is the interpreter too.
    if interpreter.is_none() && setup.interpreter_addr != 0 {
        if let Some(m) = map.modules().iter().position(crate::view::is_r_executable) {
            interp = exec_ranges(&map, Some(m));
        }
    }
    let s = shared();
    // SAFETY: capture is off (MAIN is 0), so no hook reads its inputs; this
    // is R's main thread.
    unsafe {
        *s.inputs.get() = HookInputs {
            chain: setup.chain,
            stack,
            trampolines: trampolines(),
            interpreter: interp,
            backtrace_cfa,
        };
    }
    publish_table(&setup);
    MAIN.store(setup.main_thread, Ordering::Release);
    crate::loadhook::pin_self();
    FAMILY.install(Options { only: None, hook_own: setup.patch_own });
    *guard = Some(setup);
    drop(guard);
    crate::loadhook::acquire(crate::loadhook::THROWS, setup.interpreter_addr);
    Ok(status())
}

fn publish_table(setup: &HookSetup) {
    // SAFETY: the hook uses a table only while the loader reports the
    // generation it was built at (see `fill_frames`).
    let table = unsafe { WalkTable::in_place(setup.interpreter_addr) };
    if table.exact {
        keep_map(table.generation, &table.map, setup.main_thread);
    }
    let (generation, exact) = (table.generation, table.exact);
    TABLES.publish(table, generation, exact);
}

/// The module maps of the generations records were (or may be) made at,
/// for naming their frames: one per table published, while a record of its
/// generation is in the ring (and the newest one).
static MAPS: Mutex<Vec<GenerationMap>> = Mutex::new(Vec::new());

/// The loader's generation and its modules.
type GenerationMap = (Generation, Arc<ModuleMap>);

/// Maps kept at most when the ring cannot be read (not on R's main thread).
const MAX_MAPS: usize = 64;

fn maps() -> std::sync::MutexGuard<'static, Vec<GenerationMap>> {
    MAPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `map`, the modules of `generation` exactly; forgets those no
/// record refers to any more (on R's main thread, which alone reads the
/// ring outside the hook).
fn keep_map(generation: Generation, map: &Arc<ModuleMap>, main_thread: usize) {
    let mut kept = maps();
    if !kept.iter().any(|(g, _)| *g == generation) {
        kept.push((generation, map.clone()));
    }
    // SAFETY: pthread_self reads the thread pointer.
    if unsafe { libc::pthread_self() } as usize == main_thread {
        let used: Vec<Option<Generation>> = recorded().iter().map(|r| r.generation).collect();
        kept.retain(|(g, _)| *g == generation || used.contains(&Some(*g)));
    } else if kept.len() > MAX_MAPS {
        let extra = kept.len() - MAX_MAPS;
        kept.drain(..extra);
    }
}

/// The modules of the loader's `generation` exactly (a record's), if they
/// are known: kept from when they were loaded, or loaded now.
pub fn map_of(generation: Option<Generation>) -> Option<Arc<ModuleMap>> {
    let generation = generation?;
    if let Some((_, m)) = maps().iter().find(|(g, _)| *g == generation) {
        return Some(m.clone());
    }
    let now = modules::current_at();
    (now.exact_generation() == Some(generation)).then_some(now.map)
}

/// Frees the walk tables replaced since the last call. R's main thread at
/// top level only: the hook walks on that thread alone, so none of them is
/// in use there.
pub fn free_retired() {
    let guard = lock();
    if let Some(setup) = guard.as_ref() {
        // SAFETY: pthread_self reads the thread pointer.
        if unsafe { libc::pthread_self() } as usize == setup.main_thread {
            // SAFETY: R's main thread, not inside the hook, which reads
            // tables on this thread only.
            unsafe { TABLES.free_retired() };
        }
    }
}

/// Refreshes the walk's module table and has every GOT hook family (this
/// one among them) hook the modules loaded since the last scan (called
/// when the loader's modules changed).
pub fn rescan() {
    if refresh_table() {
        hookset::modules_changed(&modules::current());
    }
}

/// Refreshes the walk's module table, if capture is on (`loadhook` calls
/// this after R loads or unloads a library, once the GOT hooks have been
/// told). Returns whether capture is on.
pub fn refresh_table() -> bool {
    let guard = lock();
    let Some(setup) = guard.as_ref() else { return false };
    publish_table(setup);
    true
}

/// `rescan`, if modules were loaded or unloaded since the last scan (by
/// other means than R's `dlopen`, which `loadhook` watches).
pub fn rescan_if_changed() {
    let stale = TABLES.current().is_none_or(|t| t.generation != modules::loader_generation());
    if stale {
        rescan();
    }
}

/// Whether capture is on.
pub fn installed() -> bool {
    lock().is_some()
}

/// What capture covers now.
pub fn status() -> Status {
    if !installed() {
        return Status::default();
    }
    let c = FAMILY.coverage();
    Status { slots: c.slots, modules: c.modules }
}

/// Turns capture off: every slot still holding a hook gets back what it
/// held. Returns how many were restored. Call on R's main thread.
pub fn uninstall() -> Result<usize> {
    let mut guard = lock();
    let Some(setup) = guard.take() else { return Ok(0) };
    // SAFETY: pthread_self reads the thread pointer.
    if unsafe { libc::pthread_self() } as usize != setup.main_thread {
        *guard = Some(setup);
        return Err(Error::WrongThread);
    }
    crate::loadhook::release(crate::loadhook::THROWS);
    let restored = FAMILY.uninstall();
    MAIN.store(0, Ordering::Release);
    // SAFETY: this is the main thread and it is not inside the hook:
    // nothing reads the tables any more (other threads never do).
    unsafe { TABLES.clear() };
    Ok(restored)
}

/// The throws recorded, newest first. Call on R's main thread.
pub fn recorded() -> Vec<Throw> {
    let s = shared();
    // SAFETY: the main thread, outside the hook (see `Shared`).
    unsafe { &*s.ring.get() }.newest_first()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn panic_three_deep(depth: u32) -> u32 {
        if depth == 0 {
            panic!("deep");
        }
        std::hint::black_box(panic_three_deep(depth - 1)) + 1
    }

    /// The test binary's own GOT slot of `_Unwind_RaiseException` (std's
    /// panic runtime calls it): patched, a panic recorded with its frames,
    /// restored.
    #[test]
    fn a_panic_in_this_process_is_recorded() {
        // The test's own thread stands for R's main thread; no R here.
        let setup = HookSetup {
            // SAFETY: pthread_self reads the thread pointer.
            main_thread: unsafe { libc::pthread_self() } as usize,
            interpreter_addr: 0,
            chain: None,
            patch_own: true,
            // The test binary's panics go through whichever unwinder its
            // unversioned reference bound to (the system libunwind, linked
            // for winch's libunwind backend, comes before libgcc_s).
            targets: Some([
                crate::got::versioned_symbol("_Unwind_RaiseException", "").unwrap(),
                crate::got::versioned_symbol("_Unwind_Resume_or_Rethrow", "").unwrap_or(0),
            ]),
        };
        // Other tests may panic on their threads meanwhile: they pass
        // through the hook unrecorded.
        let status = install(setup).unwrap();
        assert!(status.slots >= 1, "no slot patched: {status:?}");
        let before = recorded().first().map_or(0, |r| r.seq);
        let caught = std::panic::catch_unwind(|| panic_three_deep(3));
        assert!(caught.is_err());
        let restored = uninstall().unwrap();
        assert_eq!(restored, status.slots);
        let r = recorded().into_iter().find(|r| r.seq > before).expect("the panic was not recorded");
        assert_eq!(r.id.kind, super::super::ThrowKind::Rust);
        assert!(!r.reached_r);
        let here = modules::current();
        let me = here.module_of(panic_three_deep as fn(u32) -> u32 as usize);
        let mine = r.frames().iter().filter(|f| here.module_of(f.0) == me).count();
        // The frames of the panic, then of the test harness: at least the
        // four calls of panic_three_deep.
        assert!(mine >= 4, "{mine} frames of the test binary in {:?}", r.frames());
        assert!(r.frames().windows(2).all(|w| w[0].1 <= w[1].1), "stack pointers out of order");
        // Removed: a new panic is not recorded.
        let last = recorded().first().map_or(0, |r| r.seq);
        let _ = std::panic::catch_unwind(|| panic_three_deep(1));
        assert_eq!(recorded().first().map_or(0, |r| r.seq), last);
    }

    fn resident_kib() -> usize {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        s.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4
    }

    /// What the hook's walk state costs to build and hold, and a walk with
    /// it (figures printed; run alone, in release:
    /// `cargo test --release -- --ignored --nocapture --test-threads=1 walk_state`).
    #[test]
    #[ignore = "a measurement, not a test: run by hand"]
    fn walk_state_costs() {
        let map = modules::current();
        let r0 = resident_kib();
        let t = std::time::Instant::now();
        // SAFETY: used below, while no module is loaded or unloaded (the
        // generation is checked).
        let table = unsafe { WalkTable::in_place(0) };
        let mut caches = Caches::new(Sizes::THROWS);
        let dt = t.elapsed();
        let r1 = resident_kib();
        eprintln!(
            "walk state: {} modules, built in {dt:?}, resident +{} KiB (caches {} KiB)",
            map.modules().len(),
            r1 - r0,
            caches.heap_bytes() / 1024
        );
        let t = std::time::Instant::now();
        for _ in 0..100 {
            // SAFETY: as above (never walked).
            std::hint::black_box(unsafe { WalkTable::in_place(0) });
        }
        eprintln!("walk state: tables alone {:?} per build", t.elapsed() / 100);
        let (lo, hi) = crate::stack::thread_stack_bounds().unwrap();
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let mut out = [(0usize, 0usize); MAX_FRAMES];
        let (ip, sp, bp) = crate::unwind::registers();
        let regs = Regs { ip, sp, bp: Some(bp) };
        assert_eq!(table.generation, modules::loader_generation());
        let (mut n, mut end) = (0, WalkEnd::Failed);
        let t = std::time::Instant::now();
        for _ in 0..100_000 {
            (n, end) = walk(&table, &mut caches, regs, read, |_| FrameClass::Other, &mut out);
        }
        eprintln!("walk state: a walk of {n} frames ({end:?}) in {:?}", t.elapsed() / 100_000);
        assert_eq!(end, WalkEnd::Outermost);
    }
}
