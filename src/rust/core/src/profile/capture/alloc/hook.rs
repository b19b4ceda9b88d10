//! The allocation functions of every loaded module, seen while a memory
//! profile runs: their GOT slots of `malloc`, `calloc`, `realloc`,
//! `reallocarray`, `free`, `posix_memalign`, `aligned_alloc` and `memalign`
//! point to the functions here (a family of the GOT hook set,
//! `got::hookset`, as `spawn`'s `pthread_create` is), which
//! call the C library's own and count the bytes (see `poisson`): about one
//! allocation per `mean` bytes is handed to the profile's sampler, and the
//! blocks sampled are kept in a table until freed (see `live`).
//!
//! Only slots bound to the C library's functions are rewritten: a library
//! with an allocator of its own keeps it. The C library's own calls, the
//! dynamic loader's and winch's go straight to the C library (the hook
//! set's rule for every family). Nothing is
//! added to a block, so a block allocated while hooked may be freed after
//! (and the other way round). The fast path of an allocation is a
//! subtraction in the thread's state (R's main thread: a static found by
//! its thread pointer; others: a thread-local) ending in a jump to the C
//! library; of a free, an atomic load while no sampled block is held, else
//! a bit of the table's filter, and a probe of the table only for blocks
//! the filter cannot rule out (about 2.4 ns added to a `new`/`delete`
//! pair, `bench/alloc.R`).
//!
//! The sampler runs on the allocating thread, inside the allocation,
//! with a thread-local guard against re-entry (what it allocates is not
//! sampled).

use super::super::super::poisson::after_gap;
use super::live::Live;
use crate::got::hookset::{Family, Find, Hook, Options};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

type Malloc = unsafe extern "C" fn(usize) -> *mut libc::c_void;
type Calloc = unsafe extern "C" fn(usize, usize) -> *mut libc::c_void;
type Realloc = unsafe extern "C" fn(*mut libc::c_void, usize) -> *mut libc::c_void;
type ReallocArray = unsafe extern "C" fn(*mut libc::c_void, usize, usize) -> *mut libc::c_void;
type Free = unsafe extern "C" fn(*mut libc::c_void);
type PosixMemalign = unsafe extern "C" fn(*mut *mut libc::c_void, usize, usize) -> libc::c_int;
type AlignedAlloc = unsafe extern "C" fn(usize, usize) -> *mut libc::c_void;

/// The C library's functions, in `HOOKS`' order (0: not found).
static REAL: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// The functions hooked, as the C library versions them on x86_64 (the
/// fast path of each reads its `REAL` cell by index).
static HOOKS: [Hook; 8] = [
    Hook::new("malloc", "GLIBC_2.2.5", hooked_malloc as *const (), &REAL[0]),
    Hook::new("calloc", "GLIBC_2.2.5", hooked_calloc as *const (), &REAL[1]),
    Hook::new("realloc", "GLIBC_2.2.5", hooked_realloc as *const (), &REAL[2]),
    Hook::new("reallocarray", "GLIBC_2.26", hooked_reallocarray as *const (), &REAL[3]),
    Hook::new("free", "GLIBC_2.2.5", hooked_free as *const (), &REAL[4]),
    Hook::new("posix_memalign", "GLIBC_2.2.5", hooked_posix_memalign as *const (), &REAL[5]),
    Hook::new("aligned_alloc", "GLIBC_2.16", hooked_aligned_alloc as *const (), &REAL[6]),
    Hook::new("memalign", "GLIBC_2.2.5", hooked_memalign as *const (), &REAL[7]),
];
static FAMILY: Family = Family::new("allocations", &HOOKS, Find::Global);
/// Whether allocations are counted (a memory profile runs).
static ON: AtomicBool = AtomicBool::new(false);
/// The mean gap between sampled bytes, and the number of the memory
/// profile running (each thread draws its gaps anew for a new one).
static MEAN: AtomicU64 = AtomicU64::new(512 * 1024);
static PROFILE: AtomicU64 = AtomicU64::new(1);
/// What takes a sample: called with the size and the block, on the
/// allocating thread; returns the sample's number (0: not taken).
pub type OnSample = fn(usize, usize) -> u64;
static ON_SAMPLE: AtomicUsize = AtomicUsize::new(0);
/// Allocations seen (each thread adds its count when it takes a sample:
/// those since a thread's last sample are not in it) and sampled (all
/// threads).
pub static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
pub static SAMPLED: AtomicU64 = AtomicU64::new(0);

/// Slots of a sampled table live for the process (a hooked `free` may run
/// on another thread while a profile stops): one table, made by the first
/// memory profile, emptied by each next one.
const TABLE_SLOTS: usize = 1 << 16;
static LIVE: OnceLock<Live> = OnceLock::new();

/// A thread's state, read and written in place (the fast path touches
/// `left`, `seen` and `profile` only): the bytes left to its next sample
/// (see `poisson`), its random state (0 until its first allocation),
/// allocations since its last sample, and whether it is inside the
/// sampler (allocations then pass through).
struct ThreadState {
    left: Cell<i64>,
    rng: Cell<u64>,
    seen: Cell<u64>,
    busy: Cell<bool>,
    /// The profile its countdown was drawn for (a gap drawn with another
    /// profile's mean would bias this one's first samples).
    profile: Cell<u64>,
}

impl ThreadState {
    const fn new() -> ThreadState {
        ThreadState {
            left: Cell::new(0),
            rng: Cell::new(0),
            seen: Cell::new(0),
            busy: Cell::new(false),
            profile: Cell::new(0),
        }
    }
}

thread_local! {
    static STATE: ThreadState = const { ThreadState::new() };
}

/// R's main thread (the one that installs the hooks first) keeps its state
/// in a plain static found by its thread pointer: winch is `dlopen`ed, so
/// a thread-local costs a call to `__tls_get_addr` on every allocation,
/// and most allocations of an R session are the main thread's.
struct MainState(ThreadState);
// SAFETY: the state is only touched by the thread whose thread pointer is
// `MAIN_TP` (`state()`), and one live thread has that pointer at a time.
unsafe impl Sync for MainState {}
static MAIN_STATE: MainState = MainState(ThreadState::new());
static MAIN_TP: AtomicUsize = AtomicUsize::new(0);

/// This thread's thread pointer (never 0 for a live thread).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux `%fs:0` holds the thread control block's
    // address (the ABI's self pointer); reading it has no side effect.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline(always)]
fn thread_pointer() -> usize {
    0
}

/// Runs `f` on this thread's state (`None` on a thread being torn down:
/// its thread-locals are gone).
#[inline(always)]
fn state<R>(f: impl FnOnce(&ThreadState) -> R) -> Option<R> {
    let tp = thread_pointer();
    if tp != 0 && tp == MAIN_TP.load(Ordering::Relaxed) {
        return Some(f(&MAIN_STATE.0));
    }
    STATE.try_with(f).ok()
}

fn real(i: usize) -> usize {
    REAL[i].load(Ordering::Acquire)
}

/// The table of sampled blocks still allocated.
pub fn live() -> &'static Live {
    LIVE.get_or_init(|| Live::new(TABLE_SLOTS))
}

/// Which way an allocation goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Straight to the C library (not counted, or counted and not due).
    Plain,
    /// The slow path decides (a sample may be due, or the countdown
    /// belongs to another profile).
    Slow,
    /// Not R's main thread: its thread-local state decides (out of line,
    /// so that the main thread's path saves no registers).
    Elsewhere,
}

/// The fast path: counts an allocation of `size` bytes if it is the main
/// thread's.
#[inline(always)]
fn way(size: usize) -> Way {
    if !ON.load(Ordering::Relaxed) {
        return Way::Plain;
    }
    let tp = thread_pointer();
    if tp != 0 && tp == MAIN_TP.load(Ordering::Relaxed) {
        return if count_in(&MAIN_STATE.0, size) { Way::Slow } else { Way::Plain };
    }
    Way::Elsewhere
}

/// `way()` to the end, on any thread: true when the slow path must decide.
#[inline(always)]
fn due(size: usize) -> bool {
    match way(size) {
        Way::Plain => false,
        Way::Slow => true,
        Way::Elsewhere => count_elsewhere(size),
    }
}

/// `count_in()` on this thread's thread-local state (a thread being torn
/// down has none left: not counted).
#[inline(always)]
fn count_elsewhere(size: usize) -> bool {
    STATE.try_with(|st| count_in(st, size)).unwrap_or(false)
}

/// An allocation of `size` bytes made by `alloc` on a thread other than
/// the main one.
#[inline(never)]
fn elsewhere(size: usize, alloc: impl FnOnce() -> *mut libc::c_void) -> *mut libc::c_void {
    if count_elsewhere(size) {
        return slow(size, alloc);
    }
    alloc()
}

/// An allocation of `size` bytes made by `alloc`, counted (the three ways
/// end in calls the compiler makes jumps).
#[inline(always)]
fn allocate(size: usize, alloc: impl FnOnce() -> *mut libc::c_void) -> *mut libc::c_void {
    match way(size) {
        Way::Plain => alloc(),
        Way::Slow => slow(size, alloc),
        Way::Elsewhere => elsewhere(size, alloc),
    }
}

/// Counts an allocation of `size` bytes in `st`: true when the slow path
/// must decide.
#[inline(always)]
fn count_in(st: &ThreadState, size: usize) -> bool {
    let left = st.left.get() - size as i64;
    st.left.set(left);
    st.seen.set(st.seen.get() + 1);
    left <= 0 || st.profile.get() != PROFILE.load(Ordering::Relaxed)
}

/// The slow path, after `due()`: whether this allocation is sampled (then
/// the thread is marked busy until `sampled()`).
#[cold]
#[inline(never)]
fn decide(size: usize) -> bool {
    state(|st| {
        let profile = PROFILE.load(Ordering::Relaxed);
        if st.profile.get() != profile {
            // A first allocation again, counted afresh.
            st.profile.set(profile);
            st.seen.set(1);
            st.left.set(-(size as i64));
            st.rng.set(0);
        }
        let (mut left, mut rng) = (st.left.get(), st.rng.get());
        if left > 0 {
            return false;
        }
        let due = after_gap(&mut left, &mut rng, size, MEAN.load(Ordering::Relaxed), seed);
        st.left.set(left);
        st.rng.set(rng);
        if !due || st.busy.get() {
            return false;
        }
        ALLOCATIONS.fetch_add(st.seen.replace(0), Ordering::Relaxed);
        st.busy.set(true);
        true
    })
    .unwrap_or(false)
}

/// Hands a sampled allocation of `size` bytes at `block` to the sampler
/// (nothing if the allocation failed), and ends the thread's busy mark.
#[cold]
#[inline(never)]
fn sampled(size: usize, block: *mut libc::c_void) {
    let f = ON_SAMPLE.load(Ordering::Acquire);
    if f != 0 && !block.is_null() {
        // SAFETY: ON_SAMPLE only ever holds an `OnSample` (set in `install`).
        let f: OnSample = unsafe { std::mem::transmute::<usize, OnSample>(f) };
        let sample = f(size, block as usize);
        if sample != 0 {
            SAMPLED.fetch_add(1, Ordering::Relaxed);
            live().insert(block as usize, sample);
        }
    }
    state(|st| st.busy.set(false));
}

/// The slow path of an allocation of `size` bytes made by `alloc`.
#[cold]
#[inline(never)]
fn slow(size: usize, alloc: impl FnOnce() -> *mut libc::c_void) -> *mut libc::c_void {
    let take = decide(size);
    let p = alloc();
    if take {
        sampled(size, p);
    }
    p
}

/// A seed for this thread's countdown.
fn seed() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (crate::profile::capture::clock::gettid() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ts.tv_nsec as u64
}

/// A block freed: forgotten by the table first (before the C library may
/// hand its address out again).
#[inline(always)]
fn forget(block: *mut libc::c_void) -> Option<u64> {
    if block.is_null() {
        return None;
    }
    LIVE.get()?.remove(block as usize)
}

// The functions modules call instead. Each has the contract of the C
// library's function it stands for, which it calls with the same
// arguments; the fast path ends in that call.

unsafe extern "C" fn hooked_malloc(size: usize) -> *mut libc::c_void {
    // SAFETY: REAL[0] holds the C library's malloc before any slot points
    // here (filled by the hook set before it rewrites a slot, never
    // cleared).
    let f = unsafe { std::mem::transmute::<usize, Malloc>(real(0)) };
    // SAFETY: as above.
    allocate(size, move || unsafe { f(size) })
}

unsafe extern "C" fn hooked_calloc(n: usize, size: usize) -> *mut libc::c_void {
    // SAFETY: as for malloc (REAL[1]: calloc).
    let f = unsafe { std::mem::transmute::<usize, Calloc>(real(1)) };
    // SAFETY: as above.
    allocate(n.saturating_mul(size), move || unsafe { f(n, size) })
}

unsafe extern "C" fn hooked_realloc(block: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    // SAFETY: as for malloc (REAL[2]: realloc).
    let f = unsafe { std::mem::transmute::<usize, Realloc>(real(2)) };
    let was = forget(block);
    if was.is_some() || due(size) {
        // SAFETY: as above.
        return slow_realloc(block, was, size, move || unsafe { f(block, size) });
    }
    // SAFETY: as above.
    unsafe { f(block, size) }
}

unsafe extern "C" fn hooked_reallocarray(
    block: *mut libc::c_void,
    n: usize,
    size: usize,
) -> *mut libc::c_void {
    // SAFETY: as for malloc (REAL[3]: reallocarray).
    let f = unsafe { std::mem::transmute::<usize, ReallocArray>(real(3)) };
    let was = forget(block);
    let bytes = n.saturating_mul(size);
    if was.is_some() || due(bytes) {
        // SAFETY: as above.
        return slow_realloc(block, was, bytes, move || unsafe { f(block, n, size) });
    }
    // SAFETY: as above.
    unsafe { f(block, n, size) }
}

/// A reallocation of `old` (sample `was`, if sampled) to `size` bytes by
/// `realloc`, when it is sampled or its block was (the fast path counted
/// it already unless `was`): a failed one leaves the old block as it was.
#[cold]
#[inline(never)]
fn slow_realloc(
    old: *mut libc::c_void,
    was: Option<u64>,
    size: usize,
    realloc: impl FnOnce() -> *mut libc::c_void,
) -> *mut libc::c_void {
    let counted = was.is_none() || due(size);
    let take = counted && decide(size);
    let new = realloc();
    if new.is_null() && size != 0 {
        if let Some(sample) = was {
            live().insert(old as usize, sample);
        }
    }
    if take {
        sampled(size, new);
    }
    new
}

unsafe extern "C" fn hooked_free(block: *mut libc::c_void) {
    forget(block);
    // SAFETY: as for malloc (REAL[4]: free).
    unsafe { std::mem::transmute::<usize, Free>(real(4))(block) }
}

unsafe extern "C" fn hooked_posix_memalign(
    out: *mut *mut libc::c_void,
    align: usize,
    size: usize,
) -> libc::c_int {
    // SAFETY: as for malloc (REAL[5]: posix_memalign).
    let f = unsafe { std::mem::transmute::<usize, PosixMemalign>(real(5)) };
    if !due(size) {
        // SAFETY: as above.
        return unsafe { f(out, align, size) };
    }
    let mut rc = 0;
    slow(size, || {
        // SAFETY: as above.
        rc = unsafe { f(out, align, size) };
        if rc == 0 && !out.is_null() {
            // SAFETY: on success the C library wrote the block to `*out`.
            unsafe { *out }
        } else {
            std::ptr::null_mut()
        }
    });
    rc
}

unsafe extern "C" fn hooked_aligned_alloc(align: usize, size: usize) -> *mut libc::c_void {
    // SAFETY: as for malloc (REAL[6]: aligned_alloc).
    let f = unsafe { std::mem::transmute::<usize, AlignedAlloc>(real(6)) };
    // SAFETY: as above.
    allocate(size, move || unsafe { f(align, size) })
}

unsafe extern "C" fn hooked_memalign(align: usize, size: usize) -> *mut libc::c_void {
    // SAFETY: as for malloc (REAL[7]: memalign).
    let f = unsafe { std::mem::transmute::<usize, AlignedAlloc>(real(7)) };
    // SAFETY: as above.
    allocate(size, move || unsafe { f(align, size) })
}

/// Finds the C library's functions (the version wanted, else the default
/// one); false if one of the essential ones (`malloc`, `calloc`,
/// `realloc`, `free`) is missing. (Functions the C library lacks are left
/// alone: no slot is bound to them.)
fn find_real() -> bool {
    FAMILY.resolve();
    [0, 1, 2, 4].iter().all(|&i| real(i) != 0)
}

/// Starts counting allocations, one sample per `mean` bytes on average,
/// each handed to `on_sample`, and hooks every loaded module (the hook
/// set's rule: not winch's own, the C library or the dynamic loader).
/// Returns the slots patched (0 where the C library's functions are not
/// found: nothing is counted). Modules loaded later are hooked when the
/// collector (or anyone) tells the hook set (`hookset::modules_changed`).
pub fn install(mean: u64, on_sample: OnSample) -> usize {
    if !find_real() {
        return 0;
    }
    let table = live();
    // Empty the table of the last profile.
    for (addr, _) in table.kept() {
        table.remove(addr);
    }
    table.clear_filter();
    // The first thread to install (R's main thread) owns the static state.
    let _ = MAIN_TP.compare_exchange(0, thread_pointer(), Ordering::AcqRel, Ordering::Acquire);
    MEAN.store(mean.max(1), Ordering::Release);
    PROFILE.fetch_add(1, Ordering::AcqRel);
    ON_SAMPLE.store(on_sample as usize, Ordering::Release);
    ALLOCATIONS.store(0, Ordering::Release);
    SAMPLED.store(0, Ordering::Release);
    table.lost.store(0, Ordering::Release);
    // (In a fork() child the lock may be held by a thread of the parent:
    // then nothing is hooked.)
    FAMILY.try_install(Options::default(), || ON.store(true, Ordering::Release)).unwrap_or(0)
}

/// Stops counting and gives every slot back its value. Returns the slots
/// restored. The table keeps the blocks sampled and not freed (see
/// [`live`]).
pub fn uninstall() -> usize {
    ON.store(false, Ordering::Release);
    FAMILY.uninstall()
}

/// In a `fork()` child: nothing is counted (its slots still point to the
/// hooks, which then only call the C library's functions).
pub fn forget_in_child() {
    ON.store(false, Ordering::Release);
    FAMILY.forget_in_child();
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    static SEEN: AtomicU64 = AtomicU64::new(0);
    fn sample(size: usize, _block: usize) -> u64 {
        SEEN.fetch_add(size as u64, Ordering::Relaxed) + 1
    }

    /// The hooks called as a module's slots would call them: the C
    /// library's blocks come back, sampled ones are kept until freed.
    #[test]
    fn hooked_functions_allocate_count_and_keep_sampled_blocks_until_freed() {
        assert!(find_real());
        MEAN.store(1, Ordering::Release); // every allocation sampled
        ON_SAMPLE.store(sample as OnSample as usize, Ordering::Release);
        ON.store(true, Ordering::Release);
        // SAFETY: the C library's contracts, kept below: every block is
        // freed once, through the hook or directly.
        unsafe {
            let a = hooked_malloc(1000);
            let b = hooked_calloc(10, 100);
            assert!(!a.is_null() && !b.is_null());
            assert_eq!(*(b as *const u8).add(999), 0, "calloc's block is zeroed");
            assert!(live().kept().iter().any(|k| k.0 == a as usize), "a sampled block is kept");
            let c = hooked_realloc(a, 5000);
            assert!(!c.is_null());
            let mut d: *mut libc::c_void = std::ptr::null_mut();
            assert_eq!(hooked_posix_memalign(&mut d, 64, 256), 0);
            assert_eq!(d as usize % 64, 0);
            let e = hooked_aligned_alloc(128, 256);
            assert_eq!(e as usize % 128, 0);
            ON.store(false, Ordering::Release);
            // The reallocated block replaced the old one in the table
            // (realloc may return the same address, and a block moved away
            // from may be handed out again by the next allocations).
            let kept: Vec<usize> = live().kept().iter().map(|k| k.0).collect();
            assert!(kept.contains(&(c as usize)) && kept.contains(&(b as usize)));
            let reused = [c, d, e].iter().filter(|&&p| p == a).count();
            assert_eq!(kept.iter().filter(|&&k| k == a as usize).count(), reused);
            for p in [b, c, d, e] {
                hooked_free(p);
            }
            for p in [b, c, d, e] {
                assert_eq!(live().remove(p as usize), None, "freed: forgotten");
            }
        }
        assert!(SEEN.load(Ordering::Relaxed) >= 1000 + 1000 + 5000 + 256 + 256);
        MEAN.store(512 * 1024, Ordering::Release);
    }

    #[test]
    fn the_c_librarys_functions_are_found_and_hooks_differ_from_them() {
        assert!(find_real());
        for (i, h) in HOOKS.iter().enumerate() {
            assert!(std::ptr::eq(h.real, &REAL[i]), "{}: its own cell", h.name);
            assert_ne!(real(i), h.replacement as usize, "{}", h.name);
        }
        assert_eq!(real(0), crate::got::versioned_symbol("malloc", "").unwrap());
    }
}
