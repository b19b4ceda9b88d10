//! The one stack walker for signal handlers and hooks (the profiler, the
//! crash report, throw capture): no allocation, no lock, no call into the
//! dynamic loader. Everything it reads is prepared beforehand on an
//! ordinary thread: [`Modules`], the loaded modules with their unwind
//! tables (copies, or the loaded images' own bytes read in place), and
//! [`Caches`] of the rule at each address plus the gimli unwind context
//! with in-line storage, in sizes the user chooses.
//!
//! [`walk`] visits each frame in turn and lets a [`Visitor`] keep it, drop
//! it or end the walk. [`Snapshot`] bundles copied tables with the
//! profiler's caches and writes every frame out (the profiler's signal
//! handler and the crash report's); the throw hook reads its tables in
//! place and classifies frames (see `throws`). A snapshot's caches are used
//! by one walk at a time (the handler never runs twice at once: see
//! `sampler`).

mod cache;
#[cfg(test)]
pub(crate) mod synthetic;

pub use cache::{Caches, Sizes};

use crate::modules::Generation;
use crate::modules::{self, Module, ModuleMap};
use crate::unwind::rules::{self, Regs, Source, Step, Tables};
use std::cell::UnsafeCell;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The loaded modules at one moment, with their unwind tables (`T`: copied
/// [`Tables`], the default, or `Tables<InPlace>` read in place).
pub struct Modules<T = Tables> {
    pub map: Arc<ModuleMap>,
    /// The loader's counters when the modules were listed.
    pub generation: Generation,
    /// Whether `map` is exactly the modules of `generation` (see
    /// [`modules::Loaded`]).
    pub exact: bool,
    /// Per module: R's interpreter (R's library or executable).
    pub interpreter: Vec<bool>,
    /// The module of R's library (the executable if R is linked statically).
    pub libr: Option<usize>,
    tables: Vec<Option<T>>,
    /// Tells [`Caches`] filled from other modules apart.
    serial: u64,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

impl<T> Modules<T> {
    /// The modules of `map` with the tables `tables` makes for each.
    fn build(
        loaded: modules::Loaded,
        interpreter_addr: usize,
        tables: impl Fn(&Module) -> Option<T>,
    ) -> Modules<T> {
        let modules::Loaded { generation, exact, map } = loaded;
        let tables = map.modules().iter().map(tables).collect();
        let libr = map.module_of(interpreter_addr);
        let interpreter = (0..map.modules().len())
            .map(|i| Some(i) == libr || crate::view::is_r_executable(map.module(i)))
            .collect();
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        Modules { map, generation, exact, interpreter, libr, tables, serial }
    }
}

impl<R: gimli::Reader<Offset = usize>> Modules<Tables<R>> {
    /// The start of the function containing `addr` according to its
    /// module's unwind information (not signal-safe use is fine too).
    pub fn function_start(&self, addr: usize) -> Option<usize> {
        let hit = self.map.lookup(addr).filter(|h| h.exec)?;
        self.tables.get(hit.module)?.as_ref()?.function_start(addr)
    }
}

impl Modules<Tables> {
    /// The loaded modules now, with copies of their unwind tables (on an
    /// ordinary thread: this allocates and reads). `interpreter_addr` is an
    /// address inside R's interpreter.
    pub fn copied(interpreter_addr: usize) -> Modules {
        Modules::build(modules::current_at(), interpreter_addr, Tables::of_loaded)
    }

    /// The modules of another process (`map`, read through `mem`, which
    /// must stay as it is while they are used: the process stopped), with
    /// copies of their unwind tables.
    pub fn of_process(
        map: Arc<ModuleMap>,
        interpreter_addr: usize,
        mem: &impl crate::memory::Memory,
    ) -> Modules {
        let loaded = modules::Loaded { generation: Generation::default(), exact: true, map };
        Modules::build(loaded, interpreter_addr, |m| Tables::of_memory(m, mem))
    }
}

impl Modules<Tables<rules::InPlace>> {
    /// The loaded modules now, with their unwind tables read in place:
    /// nothing copied, nothing parsed beyond the headers.
    ///
    /// # Safety
    /// The tables are used only while the loader reports `generation` (no
    /// module loaded or unloaded since: every table's module is loaded).
    pub unsafe fn in_place(interpreter_addr: usize) -> Modules<Tables<rules::InPlace>> {
        // SAFETY: the caller's contract keeps each module loaded while its
        // tables are used.
        Modules::build(modules::current_at(), interpreter_addr, |m| unsafe { Tables::of_loaded_in_place(m) })
    }
}

/// One walked frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub ip: usize,
    pub sp: usize,
    /// The start of its function (0 where unknown).
    pub start: usize,
    /// The module of its code.
    pub module: Option<usize>,
}

/// Decides, frame by frame, what a walk keeps and where it ends.
pub trait Visitor {
    /// Why the visitor ended a walk.
    type Stop;
    /// Called for each frame in turn, innermost first, with `probe` the
    /// address its rule is looked up at (the ip of the first frame, the
    /// return address minus one of the others). Async-signal-safe.
    fn frame(&mut self, frame: &Frame, probe: usize) -> ControlFlow<Self::Stop>;
}

/// How a [`walk`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended<S> {
    /// The visitor ended it.
    By(S),
    /// At the outermost frame.
    Outermost,
    /// A frame could not be unwound (why; [`rules::UNSUPPORTED`] for a rule
    /// the walk does not model, where libgcc's unwinder may do better).
    Stopped(&'static str),
}

/// Walks the stack from registers `start` through `modules`' rules, cached
/// in `caches`, showing each frame to `visitor`; `read` reads a word of the
/// stack (it must check bounds).
///
/// Async-signal-safe: no allocation, no lock, no system call. `caches` is
/// used by one walk at a time.
pub(crate) fn walk<T: Source, V: Visitor>(
    modules: &Modules<T>,
    caches: &mut Caches,
    start: Regs,
    read: impl Fn(usize) -> Option<usize>,
    visitor: &mut V,
) -> Ended<V::Stop> {
    caches.sync(modules.serial);
    let mut regs = start;
    let mut k = 0; // frames visited
    let this = 1 - caches.last;
    // The last walk's frames: their return addresses (just below the
    // next frame's stack pointer) and saved RBPs are what this walk
    // will read if the outer stack did not change.
    for w in caches.walks[caches.last][..caches.walked[caches.last]].windows(2) {
        crate::memory::prefetch(w[1].1.wrapping_sub(16));
    }
    let mut c = 0; // cursor into the last walk (stack pointers ascend)
    let end = loop {
        // A frame with the same return address at the same stack
        // address as in the last walk has the same rule. (The
        // interrupted frame's ip is exact, the others' are return
        // addresses, whose call lies just before them.)
        let previous = &caches.walks[caches.last][..caches.walked[caches.last]];
        while c < previous.len() && previous[c].1 < regs.sp {
            c += 1;
        }
        let probe = if k == 0 { regs.ip } else { regs.ip.wrapping_sub(1) };
        let slot = match previous.get(c) {
            Some(&(ip, sp, slot)) if k > 0 && c > 0 && sp == regs.sp && ip == regs.ip => slot,
            _ if k == 0 => caches.interrupted_rule(modules, regs.ip),
            _ => caches.rule(modules, probe),
        };
        if let Some(w) = caches.walks[this].get_mut(k) {
            *w = (regs.ip, regs.sp, slot);
        }
        k += 1;
        let frame = Frame { ip: regs.ip, sp: regs.sp, start: slot.start, module: slot.module() };
        if let ControlFlow::Break(stop) = visitor.frame(&frame, probe) {
            break Ended::By(stop);
        }
        match rules::step(slot.rule(), regs, &read) {
            Step::Caller(next) => regs = next,
            Step::Outermost => break Ended::Outermost,
            Step::Stop(why) => break Ended::Stopped(why),
        }
    };
    caches.walked[this] = k.min(caches.walks[this].len());
    caches.last = this;
    end
}

/// Writes every frame into a buffer; stops when it is full.
struct Fill<'a> {
    out: &'a mut [Frame],
    n: usize,
}

impl Visitor for Fill<'_> {
    type Stop = ();

    #[inline(always)]
    fn frame(&mut self, frame: &Frame, _probe: usize) -> ControlFlow<()> {
        match self.out.get_mut(self.n) {
            Some(o) => {
                *o = *frame;
                self.n += 1;
                ControlFlow::Continue(())
            }
            None => ControlFlow::Break(()),
        }
    }
}

/// The loaded modules at one moment with copies of their unwind tables, and
/// caches for the profiler's and the crash report's signal handlers.
pub struct Snapshot {
    /// (Shared: a recording of another process takes the modules it read
    /// before again while they are unchanged, see `outside::recorder`.)
    modules: Arc<Modules>,
    scratch: UnsafeCell<Caches>,
}

impl std::ops::Deref for Snapshot {
    type Target = Modules;
    fn deref(&self) -> &Modules {
        &self.modules
    }
}

// SAFETY: `scratch` is only used by the thread running the signal handler,
// one sample at a time (see `Snapshot::walk`); everything else is immutable.
unsafe impl Sync for Snapshot {}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// At the outermost frame.
    Outermost,
    /// The output was full.
    Full,
    /// Stopped early (why).
    Stopped(&'static str),
}

impl Snapshot {
    /// Takes a snapshot of the loaded modules and copies every module's
    /// unwind tables (on an ordinary thread: this allocates and reads).
    /// `interpreter_addr` is an address inside R's interpreter.
    pub fn take(interpreter_addr: usize) -> Snapshot {
        Snapshot::of(Modules::copied(interpreter_addr))
    }

    /// A snapshot of `modules` (see [`Modules::of_process`]).
    pub fn of(modules: Modules) -> Snapshot {
        Snapshot::of_shared(Arc::new(modules))
    }

    /// A snapshot of `modules` another snapshot has too (caches of its
    /// own).
    pub fn of_shared(modules: Arc<Modules>) -> Snapshot {
        Snapshot { modules, scratch: UnsafeCell::new(Caches::new(Sizes::SAMPLES)) }
    }

    /// Its modules, to share with another snapshot.
    pub fn shared(&self) -> Arc<Modules> {
        self.modules.clone()
    }

    /// Walks the stack from the registers of an interrupted frame, writing
    /// each frame's instruction pointer and stack pointer; `read` reads a
    /// word of the stack (it must check bounds). Returns the number of frames
    /// written to `out` and how the walk ended.
    ///
    /// Async-signal-safe. Must not run on two threads at once for one
    /// snapshot.
    pub fn walk(
        &self,
        start: (usize, usize, usize),
        read: impl Fn(usize) -> Option<usize>,
        out: &mut [Frame],
    ) -> (usize, End) {
        // SAFETY: the only user of `scratch` at this moment (see above).
        let scratch = unsafe { &mut *self.scratch.get() };
        self.walk_with(scratch, start, read, out)
    }

    /// [`Snapshot::walk`] with caches of the caller's (for walks that may
    /// run on several threads at once: each with its own caches).
    /// Async-signal-safe.
    pub fn walk_with(
        &self,
        caches: &mut Caches,
        start: (usize, usize, usize),
        read: impl Fn(usize) -> Option<usize>,
        out: &mut [Frame],
    ) -> (usize, End) {
        let (ip, sp, bp) = start;
        let mut fill = Fill { out, n: 0 };
        let end = walk(&self.modules, caches, Regs { ip, sp, bp: Some(bp) }, read, &mut fill);
        let end = match end {
            Ended::By(()) => End::Full,
            Ended::Outermost => End::Outermost,
            Ended::Stopped(why) => End::Stopped(why),
        };
        (fill.n, end)
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::cache::Slot;
    use super::*;
    use crate::unwind::rules::{Base, Rule, SavedBp};

    #[inline(never)]
    fn here() -> (usize, usize, usize) {
        let (ip, sp, bp): (usize, usize, usize);
        // SAFETY: reads three registers; touches no memory.
        unsafe {
            std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp",
                ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp,
                options(nomem, nostack, preserves_flags));
        }
        (ip, sp, bp)
    }

    #[inline(never)]
    fn nested(depth: usize, snap: &Snapshot, out: &mut (Vec<usize>, usize, End)) {
        if depth > 0 {
            nested(depth - 1, snap, out);
            std::hint::black_box(depth);
            return;
        }
        let start = here();
        let (lo, hi) = crate::stack::thread_stack_bounds().unwrap();
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let mut frames = vec![Frame::default(); 512];
        let (n, end) = snap.walk(start, read, &mut frames);
        assert!(frames[..n].iter().all(|f| f.start == 0 || f.start <= f.ip));
        assert!(frames[..n].iter().all(|f| f.module.is_some()));
        *out = (frames[..n].iter().map(|f| f.ip).collect(), n, end);
    }

    #[test]
    fn walks_as_far_as_the_cfi_backend_and_agrees() {
        let snap = Snapshot::take(0);
        let mut got = (Vec::new(), 0, End::Full);
        // Twice: the second walk runs on cached rules.
        for _ in 0..2 {
            nested(20, &snap, &mut got);
            assert_eq!(got.2, End::Outermost);
        }
        let ours = &got.0;
        let theirs = crate::unwind::capture(crate::unwind::Backend::Cfi).unwrap();
        let theirs: Vec<usize> = theirs.frames.iter().map(|f| f.ip).collect();
        // Both end in the same outermost frames (the thread's start); ours
        // has the 20 recursive frames and the test's own.
        let k = 4;
        assert_eq!(ours[ours.len() - k..], theirs[theirs.len() - k..]);
        let f = snap.function_start(ours[1]).unwrap();
        assert!(f <= ours[1] && ours[1] - f < 4096);
        assert!(snap.function_start(8).is_none());
    }

    #[test]
    fn interrupted_instructions_get_their_rule_from_every_cache() {
        let snap = Snapshot::take(0);
        // SAFETY: this test is the snapshot's only user.
        let scratch = unsafe { &mut *snap.scratch.get() };
        let modules = &snap.modules;
        let base = nested as *const () as usize;
        let module = snap.map.lookup(base).unwrap().module;
        for ip in base..base + 160 {
            let first = scratch.interrupted_rule(modules, ip); // its block's function, or computed
            let again = scratch.interrupted_rule(modules, ip); // the instruction's own entry
            let t = modules.tables[module].as_ref().unwrap();
            let direct = t.rule(&mut scratch.ctx, ip); // evaluated from the table itself
            assert_eq!(first.rule(), direct, "at +{:#x}", ip - base);
            assert_eq!(again, first);
            assert_eq!(first.module(), Some(module));
        }
    }

    #[test]
    fn rules_survive_packing() {
        let step =
            Rule::Step { cfa: Base::Bp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::At(-16), start: 0x1000 };
        for rule in [step, Rule::Outermost { start: 0x2000 }, Rule::NotCode, Rule::Unsupported] {
            let slot = Slot::pack(0x1234, rule, Some(3));
            assert_eq!(slot.rule(), rule);
            assert_eq!(slot.module(), Some(3));
        }
        let huge =
            Rule::Step { cfa: Base::Sp, cfa_offset: 1 << 40, ra_offset: -8, bp: SavedBp::Same, start: 0 };
        assert_eq!(Slot::pack(1, huge, None).rule(), Rule::Unsupported);
        assert_eq!(Slot::pack(1, huge, None).module(), None);
    }

    #[test]
    fn a_full_buffer_and_a_bad_start_end_the_walk() {
        let snap = Snapshot::take(0);
        let start = here();
        let (lo, hi) = crate::stack::thread_stack_bounds().unwrap();
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let mut frames = vec![Frame::default(); 1];
        let (n, end) = snap.walk(start, read, &mut frames);
        assert_eq!((n, end), (1, End::Full));
        let mut frames = vec![Frame::default(); 8];
        let (n, end) = snap.walk((16, start.1, start.2), |_| None, &mut frames);
        assert_eq!(n, 1);
        assert!(matches!(end, End::Stopped(_)));
    }

    #[inline(never)]
    fn bench_nested(depth: usize, snap: &Snapshot, iters: usize) -> std::time::Duration {
        if depth > 0 {
            let d = bench_nested(depth - 1, snap, iters);
            std::hint::black_box(depth);
            return d;
        }
        let (lo, hi) = crate::stack::thread_stack_bounds().unwrap();
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let mut frames = vec![Frame::default(); 512];
        let start = here();
        let t = std::time::Instant::now();
        let mut total = 0;
        for _ in 0..iters {
            total += snap.walk(start, read, &mut frames).0;
        }
        std::hint::black_box(total);
        t.elapsed()
    }

    #[test]
    #[ignore = "a measurement, not a test: run by hand"]
    fn bench_profiler_walk() {
        let snap = Snapshot::take(0);
        bench_nested(30, &snap, 1000);
        let iters = 200_000;
        let mut best = std::time::Duration::MAX;
        for _ in 0..5 {
            best = best.min(bench_nested(30, &snap, iters));
        }
        eprintln!("WALK: {:?} per walk (best of 5)", best / iters as u32);
    }

    #[inline(never)]
    fn nested_with(depth: usize, snap: &Snapshot, caches: &mut Caches) -> (Vec<Frame>, End) {
        if depth > 0 {
            let got = nested_with(depth - 1, snap, caches);
            std::hint::black_box(depth);
            return got;
        }
        let start = here();
        let (lo, hi) = crate::stack::thread_stack_bounds().unwrap();
        // SAFETY: this thread's stack, mapped while it runs.
        let read = |a: usize| unsafe { crate::memory::stack_word((lo, hi), a) };
        let mut frames = vec![Frame::default(); 512];
        let (n, end) = snap.walk_with(caches, start, read, &mut frames);
        frames.truncate(n);
        (frames, end)
    }

    #[test]
    fn one_snapshot_walks_several_threads_at_once_each_with_its_own_caches() {
        // The profiler's samples of other threads: one snapshot, caches
        // per sampling slot (`walk_with`), walks running at once.
        let snap = Snapshot::take(0);
        std::thread::scope(|s| {
            for depth in [3, 10, 25, 40] {
                let snap = &snap;
                s.spawn(move || {
                    // (One call site: the same frames every time.)
                    let mut warm = Caches::new(Sizes::THREADS);
                    let mut first = None;
                    for i in 0..51 {
                        let mut cold = None;
                        let caches =
                            if i == 0 { cold.insert(Caches::new(Sizes::THREADS)) } else { &mut warm };
                        let got = nested_with(depth, snap, caches);
                        assert_eq!(got.1, End::Outermost);
                        assert!(got.0.len() > depth);
                        let first = first.get_or_insert(got.clone());
                        assert_eq!(&got, first, "cached as with caches new and empty");
                    }
                });
            }
        });
    }

    mod made_up {
        use super::super::synthetic::{walk_uncached, Calls, Counted, Function, Made, Program, Rng};
        use super::super::*;
        use crate::memory::{Image, Memory};
        use crate::modules::Module;
        use crate::unwind::rules::{Base, Rule, SavedBp, UNSUPPORTED};

        fn step(cfa: Base, cfa_offset: i64, bp: SavedBp) -> Rule {
            Rule::Step { cfa, cfa_offset, ra_offset: -8, bp, start: 0 }
        }

        /// Module 0 (0x1000-0x3000): `a` at 0x1000 (entry: CFA = sp + 8;
        /// after `push rbp`: sp + 16, RBP saved at CFA - 16; after `mov rbp,
        /// rsp`: rbp + 16) and `b` at 0x2000 (CFA = sp + 32); module 1 (R,
        /// 0x3000-0x4000): `c`, the outermost frame; module 2 (0x5000-0x6000)
        /// has no tables.
        fn modules(b_rule: Rule) -> Modules<Made> {
            let a = Function {
                start: 0x1000,
                end: 0x1100,
                rows: vec![
                    (0x1000, 0x1001, step(Base::Sp, 8, SavedBp::Same)),
                    (0x1001, 0x1004, step(Base::Sp, 16, SavedBp::At(-16))),
                    (0x1004, 0x1100, step(Base::Bp, 16, SavedBp::At(-16))),
                ],
            };
            let b = Function { start: 0x2000, end: 0x2200, rows: vec![(0x2000, 0x2200, b_rule)] };
            let c = Made::uniform(0x3000, 0x4000, 0x1000, Rule::Outermost { start: 0 });
            Modules::synthetic(
                vec![
                    (
                        Module::synthetic("/made/a.so", 0x1000, 0x3000, false),
                        Some(Made { functions: vec![a, b] }),
                    ),
                    (Module::synthetic("/made/libR.so", 0x3000, 0x4000, false), Some(c)),
                    (Module::synthetic("/made/bare.so", 0x5000, 0x6000, false), None),
                ],
                Some(1),
            )
        }

        /// The stack of a walk interrupted in `a` at 0x1010 (rbp 0x8010):
        /// `a` returns to `b` at `ra` (0x2105), which returns to `c` at 0x3005.
        fn stack(ra: usize) -> Image {
            let mut img = Image::new();
            img.put(0x8000, vec![0; 0x80]);
            img.put_word(0x8010, 0x8040); // a's saved RBP
            img.put_word(0x8018, ra); // a's return address
            img.put_word(0x8038, 0x3005); // b's return address (CFA 0x8040)
            img
        }

        fn walk_all(
            m: &Modules<Made>,
            c: &mut Caches,
            img: &Image,
            ip: usize,
            out: &mut [Frame],
        ) -> (usize, End) {
            let regs = Regs { ip, sp: 0x8000, bp: Some(0x8010) };
            let mut fill = Fill { out, n: 0 };
            let end = match walk(m, c, regs, |a| img.word(a), &mut fill) {
                Ended::By(()) => End::Full,
                Ended::Outermost => End::Outermost,
                Ended::Stopped(why) => End::Stopped(why),
            };
            (fill.n, end)
        }

        #[test]
        fn a_walk_over_made_up_tables_finds_every_frame() {
            let m = modules(step(Base::Sp, 32, SavedBp::Same));
            assert_eq!(m.interpreter, vec![false, true, false]);
            assert_eq!(m.libr, Some(1));
            let img = stack(0x2105);
            let want = [
                Frame { ip: 0x1010, sp: 0x8000, start: 0x1000, module: Some(0) },
                Frame { ip: 0x2105, sp: 0x8020, start: 0x2000, module: Some(0) },
                Frame { ip: 0x3005, sp: 0x8040, start: 0x3000, module: Some(1) },
            ];
            for sizes in [Sizes::SAMPLES, Sizes::THROWS, tiny()] {
                let mut c = Caches::new(sizes);
                // Three times: then from the caches and the last walk.
                for _ in 0..3 {
                    let mut out = [Frame::default(); 8];
                    let (n, end) = walk_all(&m, &mut c, &img, 0x1010, &mut out);
                    assert_eq!((&out[..n], end), (&want[..], End::Outermost), "{sizes:?}");
                }
                // A full buffer.
                let mut out = [Frame::default(); 2];
                assert_eq!(walk_all(&m, &mut c, &img, 0x1010, &mut out), (2, End::Full));
                assert_eq!(out, want[..2]);
                assert_eq!(walk_all(&m, &mut c, &img, 0x1010, &mut []), (0, End::Full));
            }
        }

        fn tiny() -> Sizes {
            Sizes { rules: 2, rows: 2, funcs: 2, walk: 2, interrupted: 2, blocks: 2 }
        }

        #[test]
        fn interrupted_instructions_get_their_row() {
            // Interrupted at the entry of `a` (return address at sp), after
            // its push (at sp + 8, RBP at sp): the same caller either way.
            let m = modules(step(Base::Sp, 32, SavedBp::Same));
            for sizes in [Sizes::SAMPLES, tiny()] {
                let mut c = Caches::new(sizes);
                for (ip, sp_of_b) in [(0x1000, 0x8008), (0x1002, 0x8010), (0x1000, 0x8008), (0x1010, 0x8020)]
                {
                    let mut img = Image::new();
                    img.put(0x8000, vec![0; 0x80]);
                    let ra_at = sp_of_b - 8;
                    img.put_word(ra_at, 0x2105);
                    img.put_word(sp_of_b + 24, 0x3005);
                    if ip == 0x1010 {
                        img.put_word(0x8010, 0x8040);
                    }
                    let mut out = [Frame::default(); 8];
                    let (n, end) = walk_all(&m, &mut c, &img, ip, &mut out);
                    assert_eq!((n, end), (3, End::Outermost), "at {ip:#x}");
                    assert_eq!((out[1].ip, out[1].sp), (0x2105, sp_of_b), "at {ip:#x}");
                }
            }
        }

        #[test]
        fn rules_it_cannot_follow_stop_the_walk() {
            let img = stack(0x2105);
            let mut c = Caches::new(Sizes::THROWS);
            let mut out = [Frame::default(); 8];
            // An unsupported rule: the caller falls back to libgcc.
            let m = modules(Rule::Unsupported);
            assert_eq!(walk_all(&m, &mut c, &img, 0x1010, &mut out), (2, End::Stopped(UNSUPPORTED)));
            // A module without tables: the same.
            let m = modules(step(Base::Sp, 32, SavedBp::Same));
            let img = stack(0x5010);
            assert_eq!(walk_all(&m, &mut c, &img, 0x1010, &mut out), (2, End::Stopped(UNSUPPORTED)));
            assert_eq!(out[1], Frame { ip: 0x5010, sp: 0x8020, start: 0, module: Some(2) });
            // A return address outside every module.
            let img = stack(0x9010);
            let (n, end) = walk_all(&m, &mut c, &img, 0x1010, &mut out);
            assert_eq!((n, out[1].module), (2, None));
            assert!(matches!(end, End::Stopped(why) if why != UNSUPPORTED));
            // A CFA from RBP when RBP is lost.
            let m = modules(step(Base::Sp, 32, SavedBp::Lost));
            let mut img = stack(0x2105);
            img.put_word(0x8038, 0x1010); // b returns into a's body
            let (n, end) = walk_all(&m, &mut c, &img, 0x1010, &mut out);
            assert_eq!((n, end), (3, End::Stopped(UNSUPPORTED)));
        }

        /// A walk of the stack `calls` over `m` with caches `c`, into at
        /// most `room` frames.
        fn walk_calls<T: Source>(
            m: &Modules<T>,
            c: &mut Caches,
            calls: &Calls,
            room: usize,
        ) -> (Vec<Frame>, End) {
            let img = calls.image();
            let mut out = vec![Frame::default(); room];
            let mut fill = Fill { out: &mut out, n: 0 };
            let end = match walk(m, c, calls.start(), |a| img.word(a), &mut fill) {
                Ended::By(()) => End::Full,
                Ended::Outermost => End::Outermost,
                Ended::Stopped(why) => End::Stopped(why),
            };
            let n = fill.n;
            out.truncate(n);
            (out, end)
        }

        /// The next stack after `last`: often the same outer frames with
        /// another inner part (as between samples), sometimes new.
        fn next_calls(p: &Program, rng: &mut Rng, last: &Calls) -> Calls {
            let depth = 1 + rng.below(40);
            let keep = if rng.below(4) > 0 { rng.below(last.depth().min(depth).max(1)) } else { 0 };
            p.calls(rng, last, keep, depth)
        }

        #[test]
        fn cached_walks_find_the_frames_of_uncached_ones() {
            let p = Program::new(0);
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            let small = Sizes { rules: 16, rows: 64, funcs: 8, walk: 8, interrupted: 4, blocks: 4 };
            let mut caches = [tiny(), small, Sizes::THROWS, Sizes::SAMPLES].map(Caches::new);
            let mut calls = Calls::default();
            for _ in 0..400 {
                calls = next_calls(&p, &mut rng, &calls);
                let img = calls.image();
                let read = |a: usize| img.word(a);
                // The made-up stack is what an uncached walk finds.
                let uncached = walk_uncached(&p.modules, calls.start(), read, usize::MAX);
                assert_eq!(uncached, (calls.frames(), End::Outermost));
                for c in &mut caches {
                    // Now and then a buffer too small for the stack.
                    let room = if rng.below(4) == 0 { rng.below(calls.depth() + 1) } else { 64 };
                    let want = walk_uncached(&p.modules, calls.start(), read, room);
                    assert_eq!(walk_calls(&p.modules, c, &calls, room), want, "{calls:?}");
                }
            }
        }

        #[test]
        fn a_walk_takes_the_rules_of_frames_it_walked_last_time_from_that_walk() {
            // Caches too small for a stack of 30 (rules of two entries, no
            // function's rows fit): only the last walk spares computing.
            let p = Program::new(0);
            let counted: Vec<_> =
                Program::tables(0).into_iter().map(|(m, t)| (m, t.map(Counted::new))).collect();
            let counted = Modules::synthetic(counted, Some(1));
            let t = counted.tables[0].as_ref().unwrap();
            let mut c = Caches::new(Sizes { walk: 64, ..tiny() });
            let mut rng = Rng(7);
            let calls = p.calls(&mut rng, &Calls::default(), 0, 30);
            assert_eq!(walk_calls(&counted, &mut c, &calls, 64), (calls.frames(), End::Outermost));
            assert!(t.asked().0 >= 20, "computed: {:?}", t.asked());
            // The same stack again: nothing computed but the interrupted
            // frame (whose function's rows do not fit, so it went through
            // the two-entry rule cache, since overwritten).
            let before = t.asked().0;
            assert_eq!(walk_calls(&counted, &mut c, &calls, 64), (calls.frames(), End::Outermost));
            assert_eq!(t.asked().0, before + 1);
            // Other inner frames under the same 20 outer ones: only the new
            // ones computed.
            let inner = p.calls(&mut rng, &calls, 20, 30);
            let before = t.asked().0;
            assert_eq!(walk_calls(&counted, &mut c, &inner, 64), (inner.frames(), End::Outermost));
            let computed = t.asked().0 - before;
            assert!((1..=10).contains(&computed), "{computed} computed for 10 new frames");
            // Remembering fewer frames than the stack has: still right.
            let mut short = Caches::new(Sizes { walk: 4, ..tiny() });
            for calls in [&calls, &inner, &calls] {
                assert_eq!(walk_calls(&counted, &mut short, calls, 64), (calls.frames(), End::Outermost));
            }
        }

        #[test]
        fn the_last_walk_gives_rules_never_frames() {
            // Frame 1 (b at 0x2105, sp 0x8020) is where it was last time;
            // what it returns to is read again.
            let m = modules(step(Base::Sp, 32, SavedBp::Same));
            let mut c = Caches::new(Sizes::THROWS);
            let mut out = [Frame::default(); 8];
            assert_eq!(walk_all(&m, &mut c, &stack(0x2105), 0x1010, &mut out), (3, End::Outermost));
            let mut img = stack(0x2105);
            img.put_word(0x8038, 0x3009);
            assert_eq!(walk_all(&m, &mut c, &img, 0x1010, &mut out), (3, End::Outermost));
            assert_eq!(out[2], Frame { ip: 0x3009, sp: 0x8040, start: 0x3000, module: Some(1) });
        }

        #[test]
        fn an_instruction_interrupted_last_time_is_looked_up_again_as_a_return_address() {
            // Last time `a` was interrupted at 0x1004 (in its body: CFA =
            // rbp + 16); now it has called `b` and 0x1004 is its return
            // address at the same stack address: the rule is the call's
            // (at 0x1003, after `push rbp`: CFA = rsp + 16), not the one
            // the last walk used there.
            let m = modules(step(Base::Sp, 32, SavedBp::Same));
            let mut img = Image::new();
            img.put(0x8000, vec![0; 0x80]);
            img.put_word(0x8018, 0x1004); // b's return address
            img.put_word(0x8020, 0x8030); // a's saved RBP (after its push)
            img.put_word(0x8028, 0x3009); // a's return address by the call's rule
            img.put_word(0x8030, 0x8060); // the caller's RBP by the body's rule
            img.put_word(0x8038, 0x3005); // a's return address by the body's rule
            let mut c = Caches::new(Sizes::THROWS);
            let mut fill = |ip, sp| {
                let mut out = [Frame::default(); 8];
                let mut f = Fill { out: &mut out, n: 0 };
                let end = walk(&m, &mut c, Regs { ip, sp, bp: Some(0x8030) }, |a| img.word(a), &mut f);
                let n = f.n;
                (out[..n].iter().map(|f| (f.ip, f.sp)).collect::<Vec<_>>(), end)
            };
            let interrupted = fill(0x1004, 0x8020);
            assert_eq!(interrupted, (vec![(0x1004, 0x8020), (0x3005, 0x8040)], Ended::Outermost));
            let called = fill(0x2010, 0x8000);
            assert_eq!(
                called,
                (vec![(0x2010, 0x8000), (0x1004, 0x8020), (0x3009, 0x8030)], Ended::Outermost)
            );
        }

        #[test]
        fn a_new_snapshot_is_not_walked_with_the_last_ones_rules() {
            // The same code at the same addresses with another rule for `b`
            // (a library replaced, listed again): frame 1 is the same
            // (ip, sp) in both walks, but its caller is found by the new
            // rule.
            let old = modules(step(Base::Sp, 32, SavedBp::Same));
            let new = modules(step(Base::Sp, 48, SavedBp::Same));
            let mut img = stack(0x2105);
            img.put_word(0x8048, 0x3105); // b's return address by the new rule
            let mut c = Caches::new(Sizes::THROWS);
            let mut out = [Frame::default(); 8];
            for (m, ip, sp) in [(&old, 0x3005, 0x8040), (&new, 0x3105, 0x8050), (&old, 0x3005, 0x8040)] {
                assert_eq!(walk_all(m, &mut c, &img, 0x1010, &mut out), (3, End::Outermost));
                assert_eq!((out[1].ip, out[1].sp), (0x2105, 0x8020));
                assert_eq!((out[2].ip, out[2].sp), (ip, sp));
            }
        }

        #[test]
        fn walks_on_several_threads_each_with_its_own_caches_agree() {
            // One set of modules shared, caches per thread (as the
            // profiler's sampling slots have).
            let p = Program::new(0);
            std::thread::scope(|s| {
                for seed in 1..=4u64 {
                    let p = &p;
                    s.spawn(move || {
                        let mut c = Caches::new(Sizes::THREADS);
                        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                        let mut calls = Calls::default();
                        for _ in 0..200 {
                            calls = next_calls(p, &mut rng, &calls);
                            let got = walk_calls(&p.modules, &mut c, &calls, 64);
                            assert_eq!(got, (calls.frames(), End::Outermost));
                        }
                    });
                }
            });
        }
    }
}
