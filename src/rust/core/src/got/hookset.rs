//! The one GOT hook set. Every family of GOT hooks (R's `dlopen` and
//! `dlclose` in `loadhook`, the unwinder's entries in `throws`, the
//! profiler's `pthread_create` and allocation functions) is a [`Family`]:
//! one static list of [`Hook`]s, installed, rescanned and uninstalled here.
//!
//! **The list.** Each hooked function is one line: its name, the version a
//! slot may require of it, the replacement modules call instead, and the
//! cell where the real function's address goes (the replacement calls on
//! through it). Several lines may share a cell: one function wanted in
//! several versions.
//!
//! **Real functions** ([`Find`]). A cell is filled once, before any slot
//! points to a replacement, and never cleared (a thread may still be inside
//! a replacement after the slots are restored): with the first of its
//! lines' functions found in the version wanted, in list order, else (for
//! [`Find::Global`]) the default version. A cell already filled (a test
//! gave its own) is kept. A slot is rewritten only if it is bound to its
//! line's target: the cell's address for the cell's first line, for the
//! others their own version if found, else the cell's. A line with no
//! target is left out until one is found (the unwinder's library may be
//! loaded later).
//!
//! **Which modules** (one rule for every family, [`skips`]): every loaded
//! module except one without a file (the vDSO); the dynamic loader (its
//! own calls to the allocator must stay its own); winch's own library,
//! unless installed with [`Options::hook_own`] (tests, where the code
//! hooked and winch share a test binary); a module that defines one of the
//! family's functions (its calls through its own PLT stay its own: libgcc's
//! rethrow calls `_Unwind_RaiseException`, so a rethrow is seen once, by
//! its own hook); and with [`Options::only`] every module but the one
//! holding that address (R's `dlopen` is hooked in R's library alone). In a
//! module, only slots bound to the target, or not bound yet (a lazy
//! `JUMP_SLOT`), are rewritten (`got::patch_module`): a slot bound to
//! another provider or to someone else's hook stays. Slots of a module no
//! longer loaded are forgotten at the next scan ([`prune`]).
//!
//! **Modules loaded and unloaded: one way.** Whoever notices that the
//! loader's modules changed calls [`modules_changed`]: `loadhook`'s
//! `dlopen`/`dlclose` hooks (R's own loads, at once), the profiler's
//! collector (each poll that sees the loader's generation move), the
//! top-level checks of throw capture and of the crash report. It rescans
//! every installed family: new modules hooked, unloaded ones forgotten. It
//! never waits for a family's lock: the thread holding it (installing,
//! scanning) scans again once it lets go, so `modules_changed` is safe on
//! any thread, inside a hook, and in a `fork()` child that inherited a
//! lock held by a thread of its parent. (Tables built from the module list, such as the profiler's
//! snapshots, throw capture's walk tables and the crash report's tables,
//! are not GOT hooks: their owners key them by generation, see
//! `published`, and `loadhook` tells those of R's main thread.)
//!
//! Installing and uninstalling take the family's lock; the profiler's
//! families install with [`Family::try_install`], which gives up rather
//! than wait (in a `fork()` child the lock may be held by a thread that
//! does not exist there).
//!
//! **`fork()`.** A scan heard from another thread (the profiler's collector,
//! a `dlopen` on a worker thread) must not hold a family's lock when the
//! process forks: the child would inherit it locked, and block at its first
//! `install` or `uninstall`. A `pthread_atfork` handler waits, before the
//! fork, for scans under way to end and keeps new ones from starting until
//! it is done (they are owed, not lost: `again` stays set). The forking
//! thread itself (R's main thread: `mclapply`) never forks from inside a
//! family's lock.

use super::{patch_module, restore, versioned_symbol, versioned_symbol_in, Patched, Protections, Wanted};
use crate::modules::{self, ModuleMap};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// One hooked function of a family.
pub struct Hook {
    pub name: &'static str,
    /// The version a slot may require of it (slots requiring no version
    /// are hooked too).
    pub version: &'static str,
    /// What modules call instead (an `extern` function with the hooked
    /// function's signature).
    pub replacement: *const (),
    /// Where the real function's address goes (see the module comment).
    pub real: &'static AtomicUsize,
}

// SAFETY: `replacement` is the address of code, never read or written
// through; the rest is shared immutable data and an atomic.
unsafe impl Sync for Hook {}

impl Hook {
    pub const fn new(
        name: &'static str,
        version: &'static str,
        replacement: *const (),
        real: &'static AtomicUsize,
    ) -> Hook {
        Hook { name, version, replacement, real }
    }

    fn wanted(&self) -> Wanted<'static> {
        Wanted { name: self.name, version: self.version }
    }
}

/// Where a family's real functions are looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Find {
    /// In the global scope: the version wanted, else the default version.
    Global,
    /// In the library of this soname if it is loaded (also when loaded
    /// locally, by a package), else in the global scope; only the version
    /// wanted.
    LibraryFirst(&'static str),
}

/// How a family is installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Hook only the module holding this address.
    pub only: Option<usize>,
    /// Hook winch's own module too.
    pub hook_own: bool,
}

/// What a family covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Slots pointing to the family's replacements.
    pub slots: usize,
    /// Modules with at least one such slot.
    pub modules: usize,
}

/// Why a module is not hooked (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Not the module [`Options::only`] names.
    NotTheOne,
    /// No file (the vDSO).
    NoFile,
    /// The dynamic loader.
    Loader,
    /// winch's own library.
    Own,
    /// It defines one of the family's functions.
    Defines,
}

/// Whether `m` is the dynamic loader.
fn is_loader(m: &modules::Module) -> bool {
    m.basename().starts_with("ld-linux")
}

/// For each module of `map`, why it is not hooked (None: it is), for a
/// family installed with `options` whose real functions are at `targets`;
/// `own` is an address in winch's own library.
pub fn skips(map: &ModuleMap, options: Options, own: usize, targets: &[usize]) -> Vec<Option<Skip>> {
    let only = options.only.map(|a| map.module_of(a));
    let own = map.module_of(own);
    let defining: Vec<usize> = targets.iter().filter_map(|&t| map.module_of(t)).collect();
    (0..map.modules().len())
        .map(|i| {
            let m = map.module(i);
            if only.is_some_and(|one| one != Some(i)) {
                Some(Skip::NotTheOne)
            } else if !m.has_file {
                Some(Skip::NoFile)
            } else if is_loader(m) {
                Some(Skip::Loader)
            } else if own == Some(i) && !options.hook_own {
                Some(Skip::Own)
            } else if defining.contains(&i) {
                Some(Skip::Defines)
            } else {
                None
            }
        })
        .collect()
}

/// Forgets the modules scanned and the slots patched of modules no longer
/// loaded (a module loaded again at the same place is scanned again).
pub fn prune(patched: &mut Vec<Patched>, scanned: &mut Vec<(String, usize)>, map: &ModuleMap) {
    let loaded = |path: &str, bias: usize| map.modules().iter().any(|m| m.path == path && m.bias == bias);
    scanned.retain(|(path, bias)| loaded(path, *bias));
    patched.retain(|p| loaded(&p.module.0, p.module.1));
}

/// Fills the empty real cells of `hooks` and returns each line's target
/// (None: left out), as the module comment says: `exact` finds a line's
/// function in the version wanted, `default` in its default version.
pub fn resolve_with(
    hooks: &[Hook],
    exact: impl Fn(&Hook) -> Option<usize>,
    default: impl Fn(&Hook) -> Option<usize>,
) -> Vec<Option<usize>> {
    let first_of_cell = |i: usize| hooks[..i].iter().all(|e| !std::ptr::eq(e.real, hooks[i].real));
    for (i, h) in hooks.iter().enumerate() {
        if !first_of_cell(i) || h.real.load(Ordering::Acquire) != 0 {
            continue;
        }
        let mut sharing = hooks.iter().filter(|e| std::ptr::eq(e.real, h.real));
        if let Some(found) = sharing.find_map(&exact).or_else(|| default(h)) {
            h.real.store(found, Ordering::Release);
        }
    }
    hooks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let cell = Some(h.real.load(Ordering::Acquire)).filter(|&a| a != 0);
            if first_of_cell(i) {
                cell
            } else {
                exact(h).or(cell)
            }
        })
        .collect()
}

/// What an installed family did, kept to undo it.
#[derive(Debug, Default)]
struct State {
    options: Options,
    patched: Vec<Patched>,
    /// Modules scanned: (path, bias).
    scanned: Vec<(String, usize)>,
    /// Which lines had a target at the last scan (when that changes, every
    /// module is scanned again).
    hookable: Vec<bool>,
    /// The map scanned last (`ModuleMap::serial`).
    serial: u64,
}

/// A family of GOT hooks: its list, and what installing it did.
pub struct Family {
    /// What the family hooks, in words: it names the family where it is
    /// defined (nothing reads it at run time).
    #[allow(dead_code)]
    name: &'static str,
    hooks: &'static [Hook],
    find: Find,
    state: Mutex<Option<State>>,
    /// Installed (read without the lock by `modules_changed`).
    installed: AtomicBool,
    /// Modules changed while another thread held the lock: it scans again.
    again: AtomicBool,
}

/// The families installed at least once (`modules_changed` rescans those
/// installed now). Lower layers cannot name the families: each registers
/// itself when first installed.
static FAMILIES: [AtomicPtr<Family>; 16] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 16];

/// An address in winch's own library.
fn own_address() -> usize {
    modules_changed as fn(&ModuleMap) as usize
}

impl Family {
    pub const fn new(name: &'static str, hooks: &'static [Hook], find: Find) -> Family {
        Family {
            name,
            hooks,
            find,
            state: Mutex::new(None),
            installed: AtomicBool::new(false),
            again: AtomicBool::new(false),
        }
    }

    /// Fills the empty real cells (see the module comment) and returns
    /// each line's target.
    pub fn resolve(&self) -> Vec<Option<usize>> {
        match self.find {
            Find::Global => resolve_with(
                self.hooks,
                |h| versioned_symbol(h.name, h.version),
                |h| versioned_symbol(h.name, ""),
            ),
            Find::LibraryFirst(soname) => resolve_with(
                self.hooks,
                |h| {
                    versioned_symbol_in(soname, h.name, h.version)
                        .or_else(|| versioned_symbol(h.name, h.version))
                },
                |_| None,
            ),
        }
    }

    fn register(&'static self) {
        let me = self as *const Family as *mut Family;
        for slot in &FAMILIES {
            match slot.compare_exchange(std::ptr::null_mut(), me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(p) if p == me => return,
                Err(_) => {}
            }
        }
        debug_assert!(false, "more GOT hook families than FAMILIES holds");
    }

    fn lock(&self) -> MutexGuard<'_, Option<State>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, Option<State>>> {
        match self.state.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Installs the family with `options` (an installed one takes the new
    /// options and scans the modules it has not scanned): fills the real
    /// cells and hooks every module the rule allows. Returns the slots
    /// pointing to the replacements.
    pub fn install(&'static self, options: Options) -> usize {
        let guard = self.lock();
        self.install_locked(guard, options, || {})
    }

    /// [`install`](Family::install), unless another thread holds the lock
    /// (None then, and nothing is done). `ready` runs once the lock is
    /// taken, before any slot is rewritten.
    pub fn try_install(&'static self, options: Options, ready: impl FnOnce()) -> Option<usize> {
        let guard = self.try_lock()?;
        Some(self.install_locked(guard, options, ready))
    }

    fn install_locked(
        &'static self,
        mut guard: MutexGuard<'_, Option<State>>,
        options: Options,
        ready: impl FnOnce(),
    ) -> usize {
        self.register();
        ready();
        let st = guard.get_or_insert_with(State::default);
        st.options = options;
        // Installed before the scan: a change heard meanwhile is scanned
        // again (see `catch_up`).
        self.installed.store(true, Ordering::Release);
        let n = self.scan(st, &modules::current());
        drop(guard);
        self.catch_up(None);
        n
    }

    /// Gives every slot still holding a replacement back what it held
    /// (where its module is still loaded). Returns how many were restored.
    pub fn uninstall(&self) -> usize {
        let mut guard = self.lock();
        self.installed.store(false, Ordering::Release);
        let Some(st) = guard.take() else { return 0 };
        drop(guard);
        if st.patched.is_empty() {
            return 0;
        }
        restore(&st.patched, &modules::current(), &Protections::read())
    }

    /// Whether the family is installed.
    pub fn installed(&self) -> bool {
        self.installed.load(Ordering::Acquire)
    }

    /// What the family covers now.
    pub fn coverage(&self) -> Coverage {
        let guard = self.lock();
        let c = guard.as_ref().map_or(Coverage::default(), |st| {
            let mut modules: Vec<&(String, usize)> = st.patched.iter().map(|p| &p.module).collect();
            modules.sort();
            modules.dedup();
            Coverage { slots: st.patched.len(), modules: modules.len() }
        });
        drop(guard);
        self.catch_up(None);
        c
    }

    /// In a `fork()` child: `modules_changed` leaves the family alone (its
    /// lock may be held by a thread of the parent). Its slots stay as they
    /// are; installing it again in the child takes them over.
    pub fn forget_in_child(&self) {
        self.installed.store(false, Ordering::Release);
    }

    /// Modules changed (the loader's modules are now `map`): scans, or has
    /// the thread holding the lock scan again.
    fn changed(&self, map: &ModuleMap) {
        fork_guard::register();
        self.again.store(true, Ordering::SeqCst);
        self.catch_up(Some(map));
    }

    /// While a scan is owed, takes the lock if it is free and scans (with
    /// `map`, then with the loader's modules now). Never waits: the thread
    /// holding the lock calls this after letting go of it.
    fn catch_up(&self, mut map: Option<&ModuleMap>) {
        while self.again.load(Ordering::SeqCst) {
            let Some(_scanning) = fork_guard::Scanning::enter() else { return };
            let Some(mut guard) = self.try_lock() else { return };
            self.again.store(false, Ordering::SeqCst);
            if let Some(st) = guard.as_mut() {
                let now;
                let map = match map.take() {
                    Some(m) => m,
                    None => {
                        now = modules::current();
                        &*now
                    }
                };
                // Maps are numbered as they are built: one older than the
                // last scanned (a slow thread's) would forget modules
                // loaded since, and their slots would never be restored.
                if map.serial() > st.serial {
                    self.scan(st, map);
                }
            }
        }
    }

    /// Hooks the modules of `map` not scanned yet. Returns the slots
    /// patched in all.
    fn scan(&self, st: &mut State, map: &ModuleMap) -> usize {
        let targets = self.resolve();
        let hookable: Vec<bool> = targets.iter().map(Option::is_some).collect();
        if hookable != st.hookable {
            st.scanned.clear();
            st.hookable = hookable;
        }
        prune(&mut st.patched, &mut st.scanned, map);
        st.serial = map.serial();
        let lines: Vec<(&Hook, usize)> =
            self.hooks.iter().zip(&targets).filter_map(|(h, t)| t.map(|t| (h, t))).collect();
        if lines.is_empty() {
            return st.patched.len(); // nothing to hook yet: nothing scanned
        }
        let wanted: Vec<Wanted> = lines.iter().map(|(h, _)| h.wanted()).collect();
        let to: Vec<usize> = lines.iter().map(|&(_, t)| t).collect();
        let values: Vec<usize> = lines.iter().map(|(h, _)| h.replacement as usize).collect();
        let skipped = skips(map, st.options, own_address(), &to);
        let mut maps = None;
        for (m, skip) in map.modules().iter().zip(skipped) {
            let key = (m.path.clone(), m.bias);
            if st.scanned.contains(&key) {
                continue;
            }
            st.scanned.push(key);
            if skip.is_none() {
                let maps = maps.get_or_insert_with(Protections::read);
                st.patched.extend(patch_module(m, &wanted, &to, &values, maps));
            }
        }
        st.patched.len()
    }
}

/// Scans that hold a family's lock, kept out of `fork()` (see the module's
/// comment).
mod fork_guard {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Scans under way, and forks being prepared (several threads may fork
    /// at once: a count, so that one fork's end does not let scans start
    /// while another's child is being made).
    static SCANNING: AtomicUsize = AtomicUsize::new(0);
    static FORKING: AtomicUsize = AtomicUsize::new(0);

    /// A scan under way (none while a fork is prepared).
    pub(super) struct Scanning(());

    impl Scanning {
        /// Counts a scan in; None while a fork is being prepared (the
        /// scan is owed and made later).
        pub(super) fn enter() -> Option<Scanning> {
            // Counted before FORKING is read, and `prepare` sets FORKING
            // before it reads the count (both SeqCst): a scan either sees
            // the fork coming or is waited for.
            SCANNING.fetch_add(1, Ordering::SeqCst);
            if FORKING.load(Ordering::SeqCst) != 0 {
                SCANNING.fetch_sub(1, Ordering::SeqCst);
                return None;
            }
            Some(Scanning(()))
        }
    }

    impl Drop for Scanning {
        fn drop(&mut self) {
            SCANNING.fetch_sub(1, Ordering::SeqCst);
        }
    }

    extern "C" fn prepare() {
        FORKING.fetch_add(1, Ordering::SeqCst);
        // A scan waits for no lock the forking thread holds: it ends.
        while SCANNING.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    extern "C" fn parent() {
        FORKING.fetch_sub(1, Ordering::SeqCst);
    }

    extern "C" fn child() {
        // The child's one thread: no scan, no other fork under way.
        SCANNING.store(0, Ordering::SeqCst);
        FORKING.store(0, Ordering::SeqCst);
    }

    /// Registers the handlers, once per process.
    pub(super) fn register() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        crate::fork::register_once(&ONCE, Some(prepare), Some(parent), Some(child));
    }

    #[cfg(test)]
    pub(super) fn prepared(on: bool) {
        if on {
            FORKING.fetch_add(1, Ordering::SeqCst);
        } else {
            FORKING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The loader's modules changed; they are now `map`: every installed
/// family hooks the new modules and forgets the unloaded ones (see the
/// module comment). Any thread; never waits for a lock.
pub fn modules_changed(map: &ModuleMap) {
    for slot in &FAMILIES {
        // SAFETY: only `register` stores here, and it stores a `&'static
        // Family`.
        let Some(f) = (unsafe { slot.load(Ordering::Acquire).as_ref() }) else { continue };
        if f.installed() {
            f.changed(map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::Module;
    use std::sync::Arc;

    const OWN: usize = 0x5100;
    const IN_LIBC: usize = 0x7100;
    const IN_LIBR: usize = 0x9100;

    /// The vDSO, the loader, winch, the C library, R and a package.
    fn map() -> ModuleMap {
        let mut vdso = Module::synthetic("linux-vdso.so.1", 0x1000, 0x2000, false);
        vdso.has_file = false;
        ModuleMap::new(vec![
            vdso,
            Module::synthetic("/lib64/ld-linux-x86-64.so.2", 0x3000, 0x4000, false),
            Module::synthetic("/site/winch/libs/winch.so", 0x5000, 0x6000, false),
            Module::synthetic("/lib/x86_64-linux-gnu/libc.so.6", 0x7000, 0x8000, false),
            Module::synthetic("/usr/lib/R/lib/libR.so", 0x9000, 0xa000, false),
            Module::synthetic("/site/pkg/libs/pkg.so", 0xb000, 0xc000, false),
        ])
    }

    #[test]
    fn one_rule_says_which_modules_are_hooked() {
        use Skip::*;
        let m = map();
        let every = skips(&m, Options::default(), OWN, &[IN_LIBC]);
        assert_eq!(every, vec![Some(NoFile), Some(Loader), Some(Own), Some(Defines), None, None]);
        // Tests hook winch's own module (the test binary) too.
        let own = skips(&m, Options { hook_own: true, ..Options::default() }, OWN, &[IN_LIBC]);
        assert_eq!(own[2], None);
        // R's dlopen: R's library alone.
        let one = skips(&m, Options { only: Some(IN_LIBR), hook_own: false }, OWN, &[IN_LIBC]);
        let hooked: Vec<usize> = (0..one.len()).filter(|&i| one[i].is_none()).collect();
        assert_eq!(hooked, vec![4]);
        assert_eq!(one[5], Some(NotTheOne));
        // An address in no module names none.
        let none = skips(&m, Options { only: Some(0x10), hook_own: false }, OWN, &[IN_LIBC]);
        assert!(none.iter().all(|s| *s == Some(NotTheOne)));
        // Every module defining one of the functions keeps its own calls;
        // a target outside every module (not found there) names none.
        let two = skips(&m, Options::default(), OWN, &[IN_LIBC, 0xb100, 0xdead_0000]);
        assert_eq!((two[3], two[4], two[5]), (Some(Defines), None, Some(Defines)));
    }

    #[test]
    fn slots_and_scans_of_unloaded_modules_are_forgotten() {
        let m = map();
        let p = |path: &str, bias: usize, addr: usize| Patched {
            addr,
            original: 1,
            value: 2,
            module: (path.to_string(), bias),
        };
        let mut patched = vec![
            p("/usr/lib/R/lib/libR.so", 0x9000, 0x9008),
            p("/gone.so", 0xd000, 0xd008),
            // The same path, loaded at another place before.
            p("/site/pkg/libs/pkg.so", 0xe000, 0xe008),
        ];
        let mut scanned: Vec<(String, usize)> = patched
            .iter()
            .map(|p| p.module.clone())
            .chain([("/site/pkg/libs/pkg.so".into(), 0xb000)])
            .collect();
        prune(&mut patched, &mut scanned, &m);
        assert_eq!(patched.iter().map(|p| p.addr).collect::<Vec<_>>(), vec![0x9008]);
        let kept: Vec<(&str, usize)> = scanned.iter().map(|(p, b)| (p.as_str(), *b)).collect();
        assert_eq!(kept, vec![("/usr/lib/R/lib/libR.so", 0x9000), ("/site/pkg/libs/pkg.so", 0xb000)]);
    }

    fn cell() -> &'static AtomicUsize {
        Box::leak(Box::new(AtomicUsize::new(0)))
    }

    fn line(name: &'static str, version: &'static str, real: &'static AtomicUsize) -> Hook {
        Hook::new(name, version, std::ptr::null(), real)
    }

    #[test]
    fn real_functions_are_found_once_in_list_order() {
        // One function in two versions sharing a cell (as `pthread_create`).
        let real = cell();
        let hooks = [line("f", "NEW_2", real), line("f", "OLD_1", real)];
        let both = |h: &Hook| Some(if h.version == "NEW_2" { 0x200 } else { 0x100 });
        assert_eq!(resolve_with(&hooks, both, |_| Some(0x300)), vec![Some(0x200), Some(0x100)]);
        assert_eq!(real.load(Ordering::Relaxed), 0x200, "the first line's version");
        // Filled once: the cell stays, and is the first line's target.
        let t = resolve_with(&hooks, |_| Some(0x900), |_| None);
        assert_eq!(t, vec![Some(0x200), Some(0x900)]);

        // An older C library: only OLD_1 exists; it fills the cell, and the
        // NEW_2 line's slots (unversioned ones) are bound to it.
        let real = cell();
        let hooks = [line("f", "NEW_2", real), line("f", "OLD_1", real)];
        let old = |h: &Hook| (h.version == "OLD_1").then_some(0x100);
        assert_eq!(resolve_with(&hooks, old, |_| Some(0x300)), vec![Some(0x100), Some(0x100)]);
        // No version found: the default one.
        let real = cell();
        let hooks = [line("f", "NEW_2", real), line("f", "OLD_1", real)];
        assert_eq!(resolve_with(&hooks, |_| None, |_| Some(0x300)), vec![Some(0x300), Some(0x300)]);

        // Nothing found and no default (the unwinder's library not loaded
        // yet): left out, the cell empty; found at a later scan.
        let real = cell();
        let hooks = [line("g", "V_1", real)];
        assert_eq!(resolve_with(&hooks, |_| None, |_| None), vec![None]);
        assert_eq!(real.load(Ordering::Relaxed), 0);
        assert_eq!(resolve_with(&hooks, |_| Some(0x400), |_| None), vec![Some(0x400)]);
        // A cell filled beforehand (a test's own unwinder) is kept.
        let given = cell();
        given.store(0x777, Ordering::Relaxed);
        let hooks = [line("g", "V_1", given)];
        assert_eq!(resolve_with(&hooks, |_| Some(0x400), |_| None), vec![Some(0x777)]);
    }

    static FAKE_REAL: AtomicUsize = AtomicUsize::new(0);
    extern "C" fn fake_getppid() -> libc::pid_t {
        424_242
    }
    static FAKE_HOOKS: [Hook; 1] =
        [Hook::new("getppid", "GLIBC_2.2.5", fake_getppid as *const (), &FAKE_REAL)];
    static FAKE: Family = Family::new("test: getppid", &FAKE_HOOKS, Find::Global);

    /// The test binary's own GOT slot of `getppid` (no other test calls
    /// it): hooked only with `hook_own`, kept through a rescan, restored.
    #[test]
    fn a_family_is_installed_rescanned_and_restored() {
        // SAFETY: getppid has no preconditions (here and below).
        let parent = unsafe { libc::getppid() };
        assert_ne!(parent, 424_242);
        // The test binary is winch's own module: left alone by default.
        assert_eq!(FAKE.install(Options::default()), 0);
        assert!(FAKE.installed());
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getppid() }, parent);
        assert_eq!(FAKE_REAL.load(Ordering::Relaxed), versioned_symbol("getppid", "GLIBC_2.2.5").unwrap());
        assert_eq!(FAKE.uninstall(), 0);
        assert!(!FAKE.installed());

        let n = FAKE.install(Options { only: None, hook_own: true });
        assert!(n >= 1, "no slot of getppid in the test binary");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getppid() }, 424_242);
        // Nothing new: a rescan adds nothing.
        modules_changed(&modules::current());
        let c = FAKE.coverage();
        assert_eq!(c.slots, n);
        assert!(c.modules >= 1);
        assert_eq!(FAKE.uninstall(), n);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getppid() }, parent);
    }

    static QUIET_REAL: AtomicUsize = AtomicUsize::new(0);
    static QUIET_HOOKS: [Hook; 1] =
        [Hook::new("winch_test_no_such_function", "NONE_1", std::ptr::null(), &QUIET_REAL)];
    static QUIET: Family = Family::new("test: nothing", &QUIET_HOOKS, Find::Global);

    #[test]
    fn a_change_heard_while_the_lock_is_held_is_scanned_by_the_holder() {
        assert_eq!(QUIET.install(Options::default()), 0);
        let older = ModuleMap::new(Vec::new());
        let other = Arc::new(ModuleMap::new(vec![Module::synthetic("/x.so", 0x1000, 0x2000, false)]));
        let held = QUIET.lock();
        // Another thread hears of a change: it does not wait for the lock.
        let m = other.clone();
        std::thread::spawn(move || QUIET.changed(&m)).join().unwrap();
        assert!(QUIET.again.load(Ordering::SeqCst));
        assert_ne!(held.as_ref().unwrap().serial, other.serial());
        drop(held);
        // The holder scans once it lets go (every user of the lock does).
        QUIET.catch_up(None);
        assert!(!QUIET.again.load(Ordering::SeqCst));
        assert_eq!(QUIET.lock().as_ref().unwrap().serial, modules::current().serial());
        // Without a lock held, a change is scanned at once.
        QUIET.changed(&other);
        assert_eq!(QUIET.lock().as_ref().unwrap().serial, other.serial());
        // A map older than the last scanned (a slow thread's) is not.
        QUIET.changed(&older);
        assert_eq!(QUIET.lock().as_ref().unwrap().serial, other.serial());
        QUIET.uninstall();
    }

    static FORKED_REAL: AtomicUsize = AtomicUsize::new(0);
    static FORKED_HOOKS: [Hook; 1] =
        [Hook::new("winch_test_no_such_function_either", "NONE_1", std::ptr::null(), &FORKED_REAL)];
    static FORKED: Family = Family::new("test: forked", &FORKED_HOOKS, Find::Global);

    /// Another thread rescanning as fast as it can while this one forks:
    /// no child inherits the family's lock held (a child that did would
    /// block for ever in `uninstall`).
    #[test]
    fn a_fork_never_inherits_a_scans_lock() {
        use std::sync::atomic::AtomicBool;
        FORKED.install(Options::default());
        let stop = Arc::new(AtomicBool::new(false));
        let scanner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut serial = 0;
                while !stop.load(Ordering::Relaxed) {
                    // A new map each time (newer than the last scanned), so
                    // each change is scanned under the lock.
                    let m = ModuleMap::new(vec![Module::synthetic("/y.so", 0x1000, 0x2000, false)]);
                    serial = serial.max(m.serial());
                    FORKED.changed(&m);
                }
                serial
            })
        };
        let mut blocked = 0;
        for _ in 0..40 {
            // SAFETY: the child only takes the family's lock (uninstall)
            // and leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                FORKED.uninstall();
                // SAFETY: ends the child without running the parent's
                // exit handlers.
                unsafe { libc::_exit(0) };
            }
            assert!(pid > 0, "fork failed");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let mut status = 0;
            loop {
                // SAFETY: our child; WNOHANG polls.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    blocked += 1;
                    // SAFETY: our own child, blocked; killed and reaped.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, &mut status, 0);
                    }
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        stop.store(true, Ordering::Relaxed);
        scanner.join().unwrap();
        FORKED.uninstall();
        assert_eq!(blocked, 0, "children blocked on a lock held by the parent's scanning thread");
        // A scan held off while a fork was prepared is owed, not lost.
        fork_guard::prepared(true);
        let m = ModuleMap::new(Vec::new());
        FORKED.install(Options::default());
        FORKED.changed(&m);
        assert!(FORKED.again.load(Ordering::SeqCst), "owed");
        fork_guard::prepared(false);
        FORKED.catch_up(None);
        assert!(!FORKED.again.load(Ordering::SeqCst), "made once the fork is done");
        FORKED.uninstall();
    }
}
