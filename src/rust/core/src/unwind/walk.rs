//! Unwinding inside a signal handler: no allocation, no lock, no call into
//! the dynamic loader. Everything it reads is prepared beforehand on an
//! ordinary thread: a [`Snapshot`] of the loaded modules with copies of
//! their unwind tables, a cache of the rule at each address, and the gimli
//! unwind context with in-line storage. The handler is the only user of a
//! snapshot's cache and context while sampling runs (it never runs twice at
//! once: see `sampler`).

use crate::modules::{self, ModuleMap};
use crate::unwind::rules::{self, Base, InLine, Regs, Rule, SavedBp, Step, Tables};
use gimli::UnwindContext;
use std::cell::UnsafeCell;
use std::sync::Arc;

/// Rules cached per snapshot (addresses of code that ran, not samples);
/// small slots, so that the cache stays in the CPU's caches between samples.
const CACHE_SLOTS: usize = 1 << 14;
/// Slots probed before a rule is computed again and overwrites one.
const PROBES: usize = 8;
/// Rows of unwind tables kept whole, for functions sampled at arbitrary
/// instructions (the interrupted frame): evaluating a large function's
/// table up to one address costs as much as reading all of it, so it is
/// read once and searched afterwards.
const ROWS: usize = 1 << 16;
const FUNCS: usize = 1 << 12;

/// The loaded modules at one moment, with their unwind tables.
pub struct Snapshot {
    pub map: Arc<ModuleMap>,
    /// The loader's counters when the snapshot was taken.
    pub generation: (u64, u64),
    /// Per module: R's interpreter (R's library or executable).
    pub interpreter: Vec<bool>,
    /// The module of R's library (the executable if R is linked statically).
    pub libr: Option<usize>,
    tables: Vec<Option<Tables>>,
    scratch: UnsafeCell<Scratch>,
}

/// What the handler changes: touched by one thread at a time (see the
/// module docs).
struct Scratch {
    slots: Box<[Slot]>,
    ctx: Box<UnwindContext<usize, InLine>>,
    /// Functions whose rows are in `rows`, open addressing by FDE address.
    funcs: Box<[Func]>,
    /// Rows: `key` the row's first address, `start` one past its last.
    rows: Box<[Slot]>,
    rows_used: usize,
    /// The last two walks' frames (ip, sp, rule): the outer part of the
    /// stack rarely changes between samples, and reading a frame's rule
    /// from here (in order) is far cheaper than from the cache (at random)
    /// when the workload has pushed both out of the CPU's caches.
    walks: [Box<[(usize, usize, Slot)]>; 2],
    walked: [usize; 2],
    last: usize,
    /// Interrupted instructions: a sample interrupts code at any
    /// instruction, so its first frame would crowd the rule cache of return
    /// addresses out; these have caches of their own, direct-mapped: the
    /// rule of an instruction interrupted before, and the function of a
    /// 64-byte block of code interrupted before.
    interrupted: Box<[Slot]>,
    blocks: Box<[FuncRange]>,
}

/// A function whose rows are cached, with the addresses they cover.
#[derive(Clone, Copy, Debug, Default)]
struct FuncRange {
    lo: usize,
    hi: usize,
    func: Func,
    module: Option<usize>,
}

const INTERRUPTED: usize = 1 << 12;
const BLOCKS: usize = 1 << 12;

/// A function whose rows are cached.
#[derive(Clone, Copy, Debug, Default)]
struct Func {
    fde: usize,
    start: usize,
    first: u32,
    count: u32,
}

/// A cached rule, packed: the rule's fields, the function's start and the
/// module of the address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    key: usize,
    start: usize,
    cfa_offset: i32,
    ra_offset: i32,
    bp_offset: i32,
    /// Bits 0-2: kind (1 step, 2 outermost, 3 unsupported, 4 not code);
    /// bit 3: CFA from RBP; bits 4-5: RBP (0 same, 1 saved, 2 lost).
    flags: u16,
    /// The module's index, or u16::MAX.
    module: u16,
}

impl Slot {
    fn pack(key: usize, rule: Rule, module: Option<usize>) -> Slot {
        let module =
            module.and_then(|m| u16::try_from(m).ok()).filter(|&m| m != u16::MAX).unwrap_or(u16::MAX);
        let small = |x: i64| i32::try_from(x).ok();
        let packed = match rule {
            Rule::Step { cfa, cfa_offset, ra_offset, bp, start } => {
                let (bp_kind, bp_offset) = match bp {
                    SavedBp::Same => (0, Some(0)),
                    SavedBp::At(o) => (1, small(o)),
                    SavedBp::Lost => (2, Some(0)),
                };
                match (small(cfa_offset), small(ra_offset), bp_offset) {
                    (Some(c), Some(r), Some(b)) => Some(Slot {
                        key,
                        start,
                        cfa_offset: c,
                        ra_offset: r,
                        bp_offset: b,
                        flags: 1 | ((cfa == Base::Bp) as u16) << 3 | bp_kind << 4,
                        module,
                    }),
                    _ => None,
                }
            }
            Rule::Outermost { start } => Some(Slot { key, start, flags: 2, module, ..Slot::default() }),
            Rule::Unsupported => None,
            Rule::NotCode => Some(Slot { key, flags: 4, module, ..Slot::default() }),
        };
        // Offsets beyond 2 GiB: not modelled.
        packed.unwrap_or(Slot { key, flags: 3, module, ..Slot::default() })
    }

    fn rule(&self) -> Rule {
        match self.flags & 7 {
            1 => Rule::Step {
                cfa: if self.flags & 8 != 0 { Base::Bp } else { Base::Sp },
                cfa_offset: self.cfa_offset as i64,
                ra_offset: self.ra_offset as i64,
                bp: match (self.flags >> 4) & 3 {
                    0 => SavedBp::Same,
                    1 => SavedBp::At(self.bp_offset as i64),
                    _ => SavedBp::Lost,
                },
                start: self.start,
            },
            2 => Rule::Outermost { start: self.start },
            4 => Rule::NotCode,
            _ => Rule::Unsupported,
        }
    }

    fn module(&self) -> Option<usize> {
        (self.module != u16::MAX).then_some(self.module as usize)
    }
}

fn walk_buffer() -> Box<[(usize, usize, Slot)]> {
    let mut b = vec![(0, 0, Slot::default()); 4096].into_boxed_slice();
    crate::memory::prefault(&mut b);
    b
}

/// The rule at `probe` in a function's cached rows.
fn rule_in(rows: &[Slot], f: &Func, probe: usize) -> Rule {
    let rows = &rows[f.first as usize..(f.first + f.count) as usize];
    let i = rows.partition_point(|r| r.key <= probe);
    match i.checked_sub(1).map(|i| rows[i]) {
        Some(r) if probe < r.start => match r.rule() {
            Rule::Step { cfa, cfa_offset, ra_offset, bp, .. } => {
                Rule::Step { cfa, cfa_offset, ra_offset, bp, start: f.start }
            }
            Rule::Outermost { .. } => Rule::Outermost { start: f.start },
            other => other,
        },
        _ => Rule::Unsupported,
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

/// The rule at `probe` from its function's rows, read whole the first time;
/// None when they do not fit (then one row is computed).
fn rule_from_rows(scratch: &mut Scratch, t: &Tables, probe: usize) -> Option<Rule> {
    let f = func_of(scratch, t, probe)?;
    Some(rule_in(&scratch.rows, &f, probe))
}

/// The function around `probe` with its rows cached; None when they do not
/// fit.
fn func_of(scratch: &mut Scratch, t: &Tables, probe: usize) -> Option<Func> {
    let fde = t.fde_key(probe)?;
    let home = (fde.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) & (FUNCS - 1);
    let mut free = None;
    for k in 0..PROBES {
        let i = (home + k) & (FUNCS - 1);
        let f = scratch.funcs[i];
        if f.fde == fde {
            return Some(f);
        }
        if f.fde == 0 && free.is_none() {
            free = Some(i);
        }
    }
    let slot = free?;
    let first = scratch.rows_used;
    let mut n = 0;
    let mut fits = true;
    let Scratch { ctx, rows, .. } = scratch;
    let (start, _end) = t.rows(ctx, fde, |row_start, row_end, rule| match rows.get_mut(first + n) {
        Some(r) => {
            let mut packed = Slot::pack(row_start, rule, None);
            packed.start = row_end;
            *r = packed;
            n += 1;
        }
        None => fits = false,
    })?;
    if !fits || n == 0 {
        return None;
    }
    scratch.rows_used = first + n;
    let f = Func { fde, start, first: first as u32, count: n as u32 };
    scratch.funcs[slot] = f;
    Some(f)
}

impl Snapshot {
    /// Takes a snapshot of the loaded modules and copies every module's
    /// unwind tables (on an ordinary thread: this allocates and reads).
    /// `interpreter_addr` is an address inside R's interpreter.
    pub fn take(interpreter_addr: usize) -> Snapshot {
        let generation = modules::loader_generation();
        let map = modules::current();
        let tables = (0..map.modules().len()).map(|i| rules::tables_for(&map, i)).collect();
        let libr = map.module_of(interpreter_addr);
        let mut slots = vec![Slot::default(); CACHE_SLOTS].into_boxed_slice();
        let mut rows = vec![Slot::default(); ROWS].into_boxed_slice();
        let mut funcs = vec![Func::default(); FUNCS].into_boxed_slice();
        let mut interrupted = vec![Slot::default(); INTERRUPTED].into_boxed_slice();
        let mut blocks = vec![FuncRange::default(); BLOCKS].into_boxed_slice();
        crate::memory::prefault(&mut interrupted);
        crate::memory::prefault(&mut blocks);
        crate::memory::prefault(&mut slots);
        crate::memory::prefault(&mut rows);
        crate::memory::prefault(&mut funcs);
        let interpreter = (0..map.modules().len())
            .map(|i| Some(i) == libr || crate::view::is_r_executable(map.module(i)))
            .collect();
        Snapshot {
            map,
            generation,
            interpreter,
            libr,
            tables,
            scratch: UnsafeCell::new(Scratch {
                slots,
                ctx: Box::new(UnwindContext::new_in()),
                funcs,
                rows,
                rows_used: 0,
                walks: [walk_buffer(), walk_buffer()],
                walked: [0, 0],
                last: 0,
                interrupted,
                blocks,
            }),
        }
    }

    /// The rule at `probe` and the module of that address, cached.
    fn rule(&self, scratch: &mut Scratch, probe: usize) -> Slot {
        let home = (probe.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) & (CACHE_SLOTS - 1);
        for k in 0..PROBES {
            let slot = (home + k) & (CACHE_SLOTS - 1);
            let cached = scratch.slots[slot];
            if cached.key == probe {
                return cached;
            }
            if cached.key == 0 {
                return self.fill(scratch, slot, probe);
            }
        }
        self.fill(scratch, home, probe)
    }

    /// The rule at an interrupted instruction `ip`: cached for the
    /// instruction, else from the rows of the function cached for its block
    /// of code, else from its function's rows (then cached), else as any
    /// address.
    fn interrupted_rule(&self, scratch: &mut Scratch, ip: usize) -> Slot {
        let at = (ip.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) & (INTERRUPTED - 1);
        if scratch.interrupted[at].key == ip && ip != 0 {
            return scratch.interrupted[at];
        }
        let block = ((ip >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) & (BLOCKS - 1);
        let cached = scratch.blocks[block];
        let slot = if cached.lo <= ip && ip < cached.hi {
            Slot::pack(ip, rule_in(&scratch.rows, &cached.func, ip), cached.module)
        } else {
            let hit = self.map.lookup(ip).filter(|h| h.exec);
            let found = hit.and_then(|h| {
                let t = self.tables.get(h.module)?.as_ref()?;
                Some((h.module, func_of(scratch, t, ip)?))
            });
            let Some((module, func)) = found else { return self.rule(scratch, ip) };
            let (first, last) = (func.first as usize, (func.first + func.count) as usize - 1);
            let r = FuncRange {
                lo: scratch.rows[first].key,
                hi: scratch.rows[last].start,
                func,
                module: Some(module),
            };
            scratch.blocks[block] = r;
            Slot::pack(ip, rule_in(&scratch.rows, &func, ip), Some(module))
        };
        scratch.interrupted[at] = slot;
        slot
    }

    fn fill(&self, scratch: &mut Scratch, slot: usize, probe: usize) -> Slot {
        let hit = self.map.lookup(probe);
        let rule = match hit.filter(|h| h.exec) {
            Some(h) => match self.tables.get(h.module) {
                Some(Some(t)) => match rule_from_rows(scratch, t, probe) {
                    Some(rule) => rule,
                    None => t.rule(&mut scratch.ctx, probe),
                },
                _ => Rule::Unsupported,
            },
            None => Rule::NotCode,
        };
        let packed = Slot::pack(probe, rule, hit.map(|h| h.module));
        scratch.slots[slot] = packed;
        packed
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
        let (ip, sp, bp) = start;
        let mut regs = Regs { ip, sp, bp: Some(bp) };
        let mut n = 0;
        let this = 1 - scratch.last;
        // The last walk's frames: their return addresses (just below the
        // next frame's stack pointer) and saved RBPs are what this walk
        // will read if the outer stack did not change.
        for w in scratch.walks[scratch.last][..scratch.walked[scratch.last]].windows(2) {
            crate::memory::prefetch(w[1].1.wrapping_sub(16));
        }
        let mut c = 0; // cursor into the last walk (stack pointers ascend)
        let end = loop {
            if n >= out.len() {
                break End::Full;
            }
            // A frame with the same return address at the same stack
            // address as in the last walk has the same rule. (The
            // interrupted frame's ip is exact, the others' are return
            // addresses, whose call lies just before them.)
            let previous = &scratch.walks[scratch.last][..scratch.walked[scratch.last]];
            while c < previous.len() && previous[c].1 < regs.sp {
                c += 1;
            }
            let slot = match previous.get(c) {
                Some(&(ip, sp, slot)) if n > 0 && c > 0 && sp == regs.sp && ip == regs.ip => slot,
                _ if n == 0 => self.interrupted_rule(scratch, regs.ip),
                _ => self.rule(scratch, regs.ip.wrapping_sub(1)),
            };
            if let Some(w) = scratch.walks[this].get_mut(n) {
                *w = (regs.ip, regs.sp, slot);
            }
            out[n] = Frame { ip: regs.ip, sp: regs.sp, start: slot.start, module: slot.module() };
            n += 1;
            match rules::step(slot.rule(), regs, &read) {
                Step::Caller(next) => regs = next,
                Step::Outermost => break End::Outermost,
                Step::Stop(why) => break End::Stopped(why),
            }
        };
        scratch.walked[this] = n.min(scratch.walks[this].len());
        scratch.last = this;
        (n, end)
    }

    /// The start of the function containing `addr` according to its
    /// module's unwind information (not signal-safe use is fine too).
    pub fn function_start(&self, addr: usize) -> Option<usize> {
        let hit = self.map.lookup(addr).filter(|h| h.exec)?;
        self.tables.get(hit.module)?.as_ref()?.function_start(addr)
    }
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;

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
        let read = |a: usize| {
            (a >= lo && a.is_multiple_of(8) && a.checked_add(8).is_some_and(|e| e <= hi))
                // SAFETY: an aligned word of this thread's stack.
                .then(|| unsafe { std::ptr::read_volatile(a as *const usize) })
        };
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
        let base = nested as *const () as usize;
        let module = snap.map.lookup(base).unwrap().module;
        for ip in base..base + 160 {
            let first = snap.interrupted_rule(scratch, ip); // its block's function, or computed
            let again = snap.interrupted_rule(scratch, ip); // the instruction's own entry
            let t = snap.tables[module].as_ref().unwrap();
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
        let read = |a: usize| {
            (a >= lo && a.is_multiple_of(8) && a.checked_add(8).is_some_and(|e| e <= hi))
                // SAFETY: an aligned word of this thread's stack.
                .then(|| unsafe { std::ptr::read_volatile(a as *const usize) })
        };
        let mut frames = vec![Frame::default(); 1];
        let (n, end) = snap.walk(start, read, &mut frames);
        assert_eq!((n, end), (1, End::Full));
        let mut frames = vec![Frame::default(); 8];
        let (n, end) = snap.walk((16, start.1, start.2), |_| None, &mut frames);
        assert_eq!(n, 1);
        assert!(matches!(end, End::Stopped(_)));
    }
}
