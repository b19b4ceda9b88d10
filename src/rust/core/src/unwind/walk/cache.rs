//! The walk's caches: the rule at each address walked, the rows of
//! functions interrupted at arbitrary instructions, and the last two walks'
//! frames. Allocated (and prefaulted) beforehand, in sizes the user chooses
//! ([`Sizes`]); a walk only reads and overwrites them.

use super::Modules;
use crate::unwind::rules::{Base, Context, Rule, SavedBp, Source};
use gimli::UnwindContext;

/// Slots probed before a rule is computed again and overwrites one.
const PROBES: usize = 8;

/// How many entries each cache holds (each a power of two, at least 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Rules by address (addresses of code that ran, not samples).
    pub rules: usize,
    /// Rows of unwind tables kept whole, for functions interrupted at
    /// arbitrary instructions: evaluating a large function's table up to
    /// one address costs as much as reading all of it, so it is read once
    /// and searched afterwards.
    pub rows: usize,
    /// Functions whose rows are kept.
    pub funcs: usize,
    /// Frames of each of the last two walks remembered.
    pub walk: usize,
    /// Interrupted instructions, and 64-byte blocks of interrupted code.
    pub interrupted: usize,
    pub blocks: usize,
}

impl Sizes {
    /// For the profiler and the crash report: small slots, so that the
    /// cache stays in the CPU's caches between samples, and many of them
    /// (about 3.4 MiB in all).
    pub const SAMPLES: Sizes = Sizes {
        rules: 1 << 14,
        rows: 1 << 16,
        funcs: 1 << 12,
        walk: 4096,
        interrupted: 1 << 12,
        blocks: 1 << 12,
    };
    /// For the profiler's samples of other threads than R's main thread:
    /// one set per sampling slot, about 1 MiB each.
    pub const THREADS: Sizes = Sizes {
        rules: 1 << 12,
        rows: 1 << 14,
        funcs: 1 << 10,
        walk: 1024,
        interrupted: 1 << 10,
        blocks: 1 << 10,
    };
    /// For the throw hook, on in every session: about 190 KiB. Its walks
    /// always start at the same instruction (inside the hook) and return
    /// addresses repeat from throw to throw.
    pub const THROWS: Sizes =
        Sizes { rules: 1 << 12, rows: 1 << 10, funcs: 1 << 8, walk: 256, interrupted: 16, blocks: 16 };
}

/// A function whose rows are cached, with the addresses they cover.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FuncRange {
    lo: usize,
    hi: usize,
    func: Func,
    module: Option<usize>,
}

/// A function whose rows are cached.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Func {
    fde: usize,
    start: usize,
    first: u32,
    count: u32,
}

/// A cached rule, packed: the rule's fields, the function's start and the
/// module of the address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) key: usize,
    pub(super) start: usize,
    cfa_offset: i32,
    ra_offset: i32,
    bp_offset: i32,
    /// Bits 0-2: kind (1 step, 2 outermost, 3 unsupported, 4 not code);
    /// bit 3: CFA from RBP; bits 4-5: RBP (0 same, 1 saved, 2 lost); bit 6:
    /// a PLT entry's CFA (its threshold in `bp_offset`).
    flags: u16,
    /// The module's index, or u16::MAX.
    module: u16,
}

impl Slot {
    pub(super) fn pack(key: usize, rule: Rule, module: Option<usize>) -> Slot {
        let module =
            module.and_then(|m| u16::try_from(m).ok()).filter(|&m| m != u16::MAX).unwrap_or(u16::MAX);
        let small = |x: i64| i32::try_from(x).ok();
        let packed = match rule {
            Rule::Step { cfa: Base::Plt { threshold }, cfa_offset, ra_offset, bp: SavedBp::Same, start } => {
                match (small(cfa_offset), small(ra_offset)) {
                    (Some(c), Some(r)) => Some(Slot {
                        key,
                        start,
                        cfa_offset: c,
                        ra_offset: r,
                        bp_offset: threshold as i32,
                        flags: 1 | 1 << 6,
                        module,
                    }),
                    _ => None,
                }
            }
            Rule::Step { cfa: Base::Plt { .. }, .. } => None,
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

    #[inline]
    pub(super) fn rule(&self) -> Rule {
        match self.flags & 7 {
            1 if self.flags & (1 << 6) != 0 => Rule::Step {
                cfa: Base::Plt { threshold: self.bp_offset as u8 },
                cfa_offset: self.cfa_offset as i64,
                ra_offset: self.ra_offset as i64,
                bp: SavedBp::Same,
                start: self.start,
            },
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

    #[inline]
    pub(super) fn module(&self) -> Option<usize> {
        (self.module != u16::MAX).then_some(self.module as usize)
    }
}

/// A cache of `len` entries (a power of two) indexed by hash.
#[derive(Clone, Copy, Debug)]
struct Hash {
    shift: u32,
    mask: usize,
}

impl Hash {
    fn new(len: usize) -> Hash {
        assert!(len >= 2 && len.is_power_of_two(), "cache sizes are powers of two, at least 2");
        Hash { shift: 64 - len.trailing_zeros(), mask: len - 1 }
    }

    /// The home slot of `key` (the top bits of its Fibonacci hash).
    #[inline(always)]
    fn home(self, key: usize) -> usize {
        ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize & self.mask
    }
}

/// What a walk changes: used by one thread at a time (a signal handler, the
/// throw hook on R's main thread).
pub struct Caches {
    /// The [`Modules`] the entries were computed from.
    serial: u64,
    slots: Box<[Slot]>,
    slots_hash: Hash,
    pub(super) ctx: Box<Context>,
    /// Functions whose rows are in `rows`, open addressing by FDE address.
    funcs: Box<[Func]>,
    funcs_hash: Hash,
    /// Rows: `key` the row's first address, `start` one past its last.
    rows: Box<[Slot]>,
    rows_used: usize,
    /// The last two walks' frames (ip, sp, rule): the outer part of the
    /// stack rarely changes between walks, and reading a frame's rule
    /// from here (in order) is far cheaper than from the cache (at random)
    /// when the workload has pushed both out of the CPU's caches.
    pub(super) walks: [Box<[(usize, usize, Slot)]>; 2],
    pub(super) walked: [usize; 2],
    pub(super) last: usize,
    /// Interrupted instructions: a sample interrupts code at any
    /// instruction, so its first frame would crowd the rule cache of return
    /// addresses out; these have caches of their own, direct-mapped: the
    /// rule of an instruction interrupted before, and the function of a
    /// 64-byte block of code interrupted before.
    interrupted: Box<[Slot]>,
    interrupted_hash: Hash,
    blocks: Box<[FuncRange]>,
    blocks_hash: Hash,
}

fn prefaulted<T: Copy>(value: T, n: usize) -> Box<[T]> {
    let mut b = vec![value; n].into_boxed_slice();
    crate::memory::prefault(&mut b);
    b
}

/// The rule at `probe` in a function's cached rows.
#[inline]
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

impl Caches {
    /// Empty caches of the given sizes, allocated and prefaulted (on an
    /// ordinary thread).
    pub fn new(sizes: Sizes) -> Caches {
        let walk = prefaulted((0, 0, Slot::default()), sizes.walk);
        Caches {
            serial: 0,
            slots: prefaulted(Slot::default(), sizes.rules),
            slots_hash: Hash::new(sizes.rules),
            ctx: Box::new(UnwindContext::new_in()),
            funcs: prefaulted(Func::default(), sizes.funcs),
            funcs_hash: Hash::new(sizes.funcs),
            rows: prefaulted(Slot::default(), sizes.rows),
            rows_used: 0,
            walks: [walk.clone(), walk],
            walked: [0, 0],
            last: 0,
            interrupted: prefaulted(Slot::default(), sizes.interrupted),
            interrupted_hash: Hash::new(sizes.interrupted),
            blocks: prefaulted(FuncRange::default(), sizes.blocks),
            blocks_hash: Hash::new(sizes.blocks),
        }
    }

    /// Forgets everything if the entries came from other modules than
    /// those of `serial` (no allocation: overwrites in place).
    #[inline]
    pub(super) fn sync(&mut self, serial: u64) {
        if self.serial == serial {
            return;
        }
        self.slots.fill(Slot::default());
        self.funcs.fill(Func::default());
        self.rows_used = 0;
        self.walked = [0, 0];
        self.interrupted.fill(Slot::default());
        self.blocks.fill(FuncRange::default());
        self.serial = serial;
    }

    /// The rule at `probe` and the module of that address, cached.
    pub(super) fn rule<T: Source>(&mut self, m: &Modules<T>, probe: usize) -> Slot {
        let home = self.slots_hash.home(probe);
        for k in 0..PROBES {
            let slot = (home + k) & self.slots_hash.mask;
            let cached = self.slots[slot];
            // (Key 0 marks an empty slot: address 0, never code, is
            // computed each time.)
            if cached.key == probe && probe != 0 {
                return cached;
            }
            if cached.key == 0 {
                return self.fill(m, slot, probe);
            }
        }
        self.fill(m, home, probe)
    }

    /// The rule at an interrupted instruction `ip`: cached for the
    /// instruction, else from the rows of the function cached for its block
    /// of code, else from its function's rows (then cached), else as any
    /// address.
    pub(super) fn interrupted_rule<T: Source>(&mut self, m: &Modules<T>, ip: usize) -> Slot {
        let at = self.interrupted_hash.home(ip);
        if self.interrupted[at].key == ip && ip != 0 {
            return self.interrupted[at];
        }
        let block = self.blocks_hash.home(ip >> 6);
        let cached = self.blocks[block];
        let slot = if cached.lo <= ip && ip < cached.hi {
            Slot::pack(ip, rule_in(&self.rows, &cached.func, ip), cached.module)
        } else {
            let hit = m.map.lookup(ip).filter(|h| h.exec);
            let found = hit.and_then(|h| {
                let t = m.tables.get(h.module)?.as_ref()?;
                Some((h.module, self.func_of(t, ip)?))
            });
            let Some((module, func)) = found else { return self.rule(m, ip) };
            let (first, last) = (func.first as usize, (func.first + func.count) as usize - 1);
            let r =
                FuncRange { lo: self.rows[first].key, hi: self.rows[last].start, func, module: Some(module) };
            self.blocks[block] = r;
            Slot::pack(ip, rule_in(&self.rows, &func, ip), Some(module))
        };
        self.interrupted[at] = slot;
        slot
    }

    fn fill<T: Source>(&mut self, m: &Modules<T>, slot: usize, probe: usize) -> Slot {
        let hit = m.map.lookup(probe);
        let rule = match hit.filter(|h| h.exec) {
            Some(h) => match m.tables.get(h.module) {
                Some(Some(t)) => match self.func_of(t, probe) {
                    Some(f) => rule_in(&self.rows, &f, probe),
                    None => t.rule(&mut self.ctx, probe),
                },
                _ => Rule::Unsupported,
            },
            None => Rule::NotCode,
        };
        let packed = Slot::pack(probe, rule, hit.map(|h| h.module));
        self.slots[slot] = packed;
        packed
    }

    /// The function around `probe` with its rows cached; None when they do
    /// not fit.
    fn func_of<T: Source>(&mut self, t: &T, probe: usize) -> Option<Func> {
        let fde = t.fde_key(probe)?;
        let home = self.funcs_hash.home(fde);
        let mut free = None;
        for k in 0..PROBES {
            let i = (home + k) & self.funcs_hash.mask;
            let f = self.funcs[i];
            if f.fde == fde {
                return Some(f);
            }
            if f.fde == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let slot = free?;
        let first = self.rows_used;
        let mut n = 0;
        let mut fits = true;
        let Caches { ctx, rows, .. } = self;
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
        self.rows_used = first + n;
        let f = Func { fde, start, first: first as u32, count: n as u32 };
        self.funcs[slot] = f;
        Some(f)
    }

    /// Approximate bytes held.
    #[cfg(test)]
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of_val;
        size_of_val(&*self.slots)
            + size_of_val(&*self.ctx)
            + size_of_val(&*self.funcs)
            + size_of_val(&*self.rows)
            + 2 * size_of_val(&*self.walks[0])
            + size_of_val(&*self.interrupted)
            + size_of_val(&*self.blocks)
    }
}

#[cfg(test)]
mod tests {
    //! The caches' contract: whatever they hold, an answer is the one the
    //! tables give (the rule at an address, its function's start, its
    //! module); a hit asks the tables nothing; a full cache overwrites
    //! entries but never answers with another address's; entries never
    //! outlive the modules they came from; the sizes chosen are the sizes
    //! kept.

    use super::super::synthetic::{fresh_rule, Counted, Function, Made};
    use super::super::Modules;
    use super::*;
    use crate::modules::{Module, Segment};
    use crate::unwind::rules::{Base, Rule, SavedBp};

    fn step(cfa: Base, cfa_offset: i64, bp: SavedBp) -> Rule {
        Rule::Step { cfa, cfa_offset, ra_offset: -8, bp, start: 0 }
    }

    /// Functions of 0x1c bytes every 0x20 bytes from `lo` to `hi`, each with
    /// three rows (entry; after `push rbp`; the body, with a frame pointer
    /// or locals of 0-24 bytes) covering its first 0x18 bytes: the last
    /// four bytes of each function have no row, the four after it no
    /// function.
    fn three_rows(lo: usize, hi: usize) -> Made {
        let functions = (lo..hi)
            .step_by(0x20)
            .enumerate()
            .map(|(i, s)| {
                let body = match i % 5 {
                    0 => step(Base::Bp, 16, SavedBp::At(-16)),
                    k => step(Base::Sp, 8 + 8 * k as i64, SavedBp::At(-16)),
                };
                let rows = vec![
                    (s, s + 1, step(Base::Sp, 8, SavedBp::Same)),
                    (s + 1, s + 4, step(Base::Sp, 16, SavedBp::At(-16))),
                    (s + 4, s + 0x18, body),
                ];
                Function { start: s, end: s + 0x1c, rows }
            })
            .collect();
        Made { functions }
    }

    /// Module 0 (0x1000-0x3000): functions of three rows up to 0x2c00, then
    /// one whose rows are a PLT entry's, one outermost, one with no usable
    /// rule, then no function; module 1 (0x4000-0x5000): code without
    /// tables; module 2 (0x6000-0x7000): data (not executable) with tables.
    fn modules<T>(wrap: impl Fn(Made) -> T, extra: i64) -> Modules<T> {
        let mut a = three_rows(0x1000, 0x2c00);
        for f in &mut a.functions {
            for row in &mut f.rows {
                if let Rule::Step { cfa: Base::Sp, cfa_offset, .. } = &mut row.2 {
                    *cfa_offset += extra;
                }
            }
        }
        let plt = Rule::Step {
            cfa: Base::Plt { threshold: 11 },
            cfa_offset: 8,
            ra_offset: -8,
            bp: SavedBp::Same,
            start: 0,
        };
        a.functions.push(Function { start: 0x2c00, end: 0x2c10, rows: vec![(0x2c00, 0x2c10, plt)] });
        let outermost = Rule::Outermost { start: 0 };
        a.functions.push(Function { start: 0x2c10, end: 0x2c20, rows: vec![(0x2c10, 0x2c20, outermost)] });
        a.functions.push(Function {
            start: 0x2c20,
            end: 0x2c30,
            rows: vec![(0x2c20, 0x2c30, Rule::Unsupported)],
        });
        let mut data = Module::synthetic("/made/data", 0x6000, 0x7000, false);
        data.segments = vec![Segment { start: 0x6000, end: 0x7000, exec: false, read: true, write: true }];
        Modules::synthetic(
            vec![
                (Module::synthetic("/made/a.so", 0x1000, 0x3000, false), Some(wrap(a))),
                (Module::synthetic("/made/bare.so", 0x4000, 0x5000, false), None),
                (data, Some(wrap(three_rows(0x6000, 0x7000)))),
            ],
            None,
        )
    }

    fn made() -> Modules<Made> {
        modules(|m| m, 0)
    }

    fn counted() -> Modules<Counted> {
        modules(Counted::new, 0)
    }

    /// Addresses of every kind: in functions (in and past their rows), in
    /// PLT, outermost and unusable code, between functions, in code without
    /// tables, in data, in no module.
    fn addresses() -> Vec<usize> {
        let mut all: Vec<usize> = (0x0ff0..0x1100).chain(0x2be0..0x3010).collect();
        all.extend((0x3ff0..0x4010).chain(0x5ff0..0x6030).chain(0x9000..0x9008));
        all.extend((0x1100..0x2c00).step_by(7));
        all
    }

    /// A deterministic shuffle, each address asked `times` times.
    fn shuffled(times: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..times).flat_map(|_| addresses()).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in (1..all.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            all.swap(i, (x % (i as u64 + 1)) as usize);
        }
        all
    }

    fn tiny() -> Sizes {
        Sizes { rules: 2, rows: 2, funcs: 2, walk: 2, interrupted: 2, blocks: 2 }
    }

    fn small() -> Sizes {
        Sizes { rules: 16, rows: 64, funcs: 8, walk: 8, interrupted: 4, blocks: 4 }
    }

    /// What `slot` says about `probe`, as the tables of `m` (uncounted)
    /// say it.
    fn assert_answers(m: &Modules<Made>, slot: Slot, probe: usize, what: &str) {
        let (rule, module) = fresh_rule(m, probe);
        assert_eq!(slot.key, probe, "{what} at {probe:#x}: the entry of another address");
        assert_eq!(slot.rule(), rule, "{what} at {probe:#x}");
        assert_eq!(slot.start, rule.start(), "{what} at {probe:#x}: the function's start");
        assert_eq!(slot.module(), module, "{what} at {probe:#x}");
    }

    #[test]
    fn every_answer_is_the_tables_own_hit_or_miss() {
        let m = made();
        for sizes in [tiny(), small(), Sizes::THROWS, Sizes::THREADS] {
            let mut c = Caches::new(sizes);
            c.sync(m.serial);
            // Each address asked three times, in shuffled order: misses,
            // hits, and (small caches) entries overwritten in between.
            for p in shuffled(3) {
                assert_answers(&m, c.rule(&m, p), p, "a return address");
                assert_answers(&m, c.interrupted_rule(&m, p), p, "an interrupted instruction");
            }
        }
    }

    #[test]
    fn a_hit_asks_the_tables_nothing() {
        // Rows of two: no function's three rows fit, so each miss asks the
        // tables for its rule (and tries the rows).
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes { rows: 2, ..Sizes::THROWS });
        c.sync(m.serial);
        let first = c.rule(&m, 0x1010);
        assert_eq!(t.asked(), (1, 1), "a miss computes");
        for _ in 0..3 {
            assert_eq!(c.rule(&m, 0x1010), first);
        }
        assert_eq!(t.asked(), (1, 1), "hits ask nothing");
        assert_answers(&want, first, 0x1010, "a hit");
        c.rule(&m, 0x1011);
        assert_eq!(t.asked(), (2, 2), "another address of the same function is a miss");
    }

    #[test]
    fn a_full_probe_window_overwrites_the_home_slot_only() {
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let sizes = Sizes { rules: 16, rows: 2, ..Sizes::THROWS };
        let hash = Hash::new(sizes.rules);
        // Nine addresses with one home slot: one more than are probed.
        let home = hash.home(0x1010);
        let same: Vec<usize> = (0x1011..0x2c00).filter(|&p| hash.home(p) == home).take(PROBES).collect();
        let keys: Vec<usize> = std::iter::once(0x1010).chain(same).collect();
        assert_eq!(keys.len(), PROBES + 1);
        let mut c = Caches::new(sizes);
        c.sync(m.serial);
        for (k, &p) in keys[..PROBES].iter().enumerate() {
            c.rule(&m, p);
            assert_eq!(c.slots[(home + k) & hash.mask].key, p, "the next free slot of the window");
        }
        assert_eq!(t.asked().0, PROBES);
        // The ninth replaces the first, at home; the others stay.
        let ninth = keys[PROBES];
        assert_answers(&want, c.rule(&m, ninth), ninth, "the ninth");
        assert_eq!(c.slots[home].key, ninth);
        for &p in &keys[1..PROBES] {
            assert_answers(&want, c.rule(&m, p), p, "a key the ninth did not replace");
        }
        assert_eq!(t.asked().0, PROBES + 1, "only the ninth was computed");
        // The first is computed again, replacing the ninth.
        assert_answers(&want, c.rule(&m, keys[0]), keys[0], "the replaced key");
        assert_eq!(t.asked().0, PROBES + 2);
        assert_eq!(c.slots[home].key, keys[0]);
        // No address is held twice.
        let mut held: Vec<usize> = c.slots.iter().map(|s| s.key).filter(|&k| k != 0).collect();
        let n = held.len();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), n);
    }

    #[test]
    fn a_functions_rows_are_read_once_then_searched() {
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes::THROWS);
        c.sync(m.serial);
        // Every address of one function (and the four past its rows), as
        // return addresses and as interrupted instructions.
        for p in 0x1020..0x103c {
            assert_answers(&want, c.rule(&m, p), p, "from the rows");
            assert_answers(&want, c.interrupted_rule(&m, p), p, "from the rows");
        }
        assert_eq!(t.asked(), (0, 1), "its rows read once, no rule computed alone");
        assert_eq!(c.rows_used, 3);
        // Between functions: no rows to read, computed alone.
        assert_answers(&want, c.rule(&m, 0x103e), 0x103e, "between functions");
        assert_eq!(t.asked(), (1, 1));
    }

    #[test]
    fn rows_or_functions_that_do_not_fit_are_asked_of_the_tables() {
        // Room for one function's three rows: the second's do not fit.
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes { rows: 4, ..Sizes::THROWS });
        c.sync(m.serial);
        assert_answers(&want, c.rule(&m, 0x1005), 0x1005, "the first function");
        assert_eq!((t.asked(), c.rows_used), ((0, 1), 3));
        for p in 0x1020..0x1030 {
            assert_answers(&want, c.rule(&m, p), p, "a function whose rows do not fit");
            assert_answers(&want, c.interrupted_rule(&m, p), p, "a function whose rows do not fit");
        }
        assert_eq!(c.rows_used, 3, "a function that does not fit takes no rows");
        // Computed alone, once: the interrupted instruction (no rows to
        // search) goes through the rule cache, which has it.
        assert_eq!(t.asked().0, 16, "each address computed once");
        // Room for two functions: the third is computed alone without
        // reading its rows.
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes { funcs: 2, ..Sizes::THROWS });
        c.sync(m.serial);
        c.rule(&m, 0x1005);
        c.rule(&m, 0x1025);
        assert_eq!(t.asked(), (0, 2));
        for p in 0x1040..0x105c {
            assert_answers(&want, c.rule(&m, p), p, "a function beyond the table's room");
        }
        assert_eq!(t.asked(), (0x1c, 2));
    }

    #[test]
    fn interrupted_instructions_keep_out_of_the_rule_cache() {
        // A sample's first frame can be any instruction: with their own
        // caches, they leave the return addresses' entries alone.
        let (m, want) = (counted(), made());
        let t = m.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes::THROWS);
        c.sync(m.serial);
        for p in 0x1000..0x1400 {
            assert_answers(&want, c.interrupted_rule(&m, p), p, "interrupted");
        }
        let in_functions = (0x1000..0x1400).filter(|p| p & 0x1f < 0x1c).count();
        assert_eq!(
            c.slots.iter().filter(|s| s.key != 0).count(),
            0x400 - in_functions,
            "only addresses between functions go through the rule cache"
        );
        // Asked again: from their own cache.
        let asked = t.asked();
        for p in (0x1000..0x1400).rev().step_by(3) {
            assert_answers(&want, c.interrupted_rule(&m, p), p, "interrupted again");
        }
        assert_eq!(t.asked(), asked);
    }

    #[test]
    fn two_functions_in_one_block_of_code_each_get_their_own_rows() {
        // 64-byte blocks hold two functions of three rows; with one-entry
        // caches (2 slots, direct-mapped) the block's function and the
        // instruction alternate.
        let m = made();
        for sizes in [tiny(), Sizes { interrupted: 2, blocks: 2, ..Sizes::THROWS }] {
            let mut c = Caches::new(sizes);
            c.sync(m.serial);
            for _ in 0..3 {
                for p in [0x1005, 0x1025, 0x1006, 0x1026, 0x1005, 0x101a, 0x103a, 0x101e, 0x1000, 0x1020] {
                    assert_answers(&m, c.interrupted_rule(&m, p), p, "in a shared block");
                }
            }
        }
    }

    #[test]
    fn other_modules_forget_everything_the_same_modules_keep_it() {
        let a = counted();
        let ta = a.tables[0].as_ref().unwrap();
        let mut c = Caches::new(Sizes::THROWS);
        c.sync(a.serial);
        for p in [0x1030, 0x1050, 0x1070] {
            c.rule(&a, p);
            c.interrupted_rule(&a, p + 1);
        }
        c.walked = [3, 2];
        let asked = ta.asked();
        // The same modules: everything kept.
        c.sync(a.serial);
        for p in [0x1030, 0x1050, 0x1070] {
            assert_answers(&made(), c.rule(&a, p), p, "kept");
            assert_answers(&made(), c.interrupted_rule(&a, p + 1), p + 1, "kept");
        }
        assert_eq!(ta.asked(), asked);
        assert_eq!(c.walked, [3, 2], "the last walks kept");
        // Modules with other rules at the same addresses (another snapshot
        // after a library was replaced): their own answers.
        let (b, want_b) = (modules(Counted::new, 8), modules(|m| m, 8));
        let tb = b.tables[0].as_ref().unwrap();
        c.sync(b.serial);
        assert_eq!(c.walked, [0, 0], "the last walks forgotten");
        assert_eq!(c.rows_used, 0);
        for p in [0x1030, 0x1050, 0x1070] {
            let slot = c.rule(&b, p);
            assert_answers(&want_b, slot, p, "new modules");
            assert_ne!(slot.rule(), fresh_rule(&made(), p).0, "the test's modules differ there");
            assert_answers(&want_b, c.interrupted_rule(&b, p + 1), p + 1, "new modules");
        }
        assert!(tb.asked().1 > 0, "computed from the new tables");
        // The same modules listed again (a new snapshot of an unchanged
        // process) are new modules too: nothing is trusted across them.
        let again = counted();
        c.sync(again.serial);
        c.rule(&again, 0x1010);
        assert_eq!(again.tables[0].as_ref().unwrap().asked(), (0, 1));
    }

    #[test]
    fn sizes_are_powers_of_two_at_least_two() {
        for bad in [Sizes { rules: 3, ..tiny() }, Sizes { blocks: 1, ..tiny() }, Sizes { funcs: 0, ..tiny() }]
        {
            let made = std::panic::catch_unwind(|| Caches::new(bad));
            assert!(made.is_err(), "{bad:?} refused");
        }
        let c = Caches::new(tiny());
        assert_eq!(c.slots.len() + c.rows.len() + c.funcs.len(), 6);
        assert_eq!((c.walks[0].len(), c.walks[1].len(), c.interrupted.len(), c.blocks.len()), (2, 2, 2, 2));
    }

    #[test]
    fn the_presets_weigh_what_their_comments_say() {
        let mib = |s: Sizes| Caches::new(s).heap_bytes() as f64 / (1 << 20) as f64;
        // ("About": within a fifth.)
        let near = |got: f64, want: f64| (got - want).abs() <= want * 0.2;
        assert!(near(mib(Sizes::SAMPLES), 3.4), "SAMPLES: {} MiB", mib(Sizes::SAMPLES));
        assert!(near(mib(Sizes::THREADS), 1.0), "THREADS: {} MiB", mib(Sizes::THREADS));
        assert!(near(mib(Sizes::THROWS) * 1024.0, 190.0), "THROWS: {} KiB", mib(Sizes::THROWS) * 1024.0);
    }

    /// Where each buffer is and how long: what must not change once made.
    fn buffers(c: &Caches) -> Vec<(usize, usize)> {
        vec![
            (c.slots.as_ptr() as usize, c.slots.len()),
            (c.funcs.as_ptr() as usize, c.funcs.len()),
            (c.rows.as_ptr() as usize, c.rows.len()),
            (c.walks[0].as_ptr() as usize, c.walks[0].len()),
            (c.walks[1].as_ptr() as usize, c.walks[1].len()),
            (c.interrupted.as_ptr() as usize, c.interrupted.len()),
            (c.blocks.as_ptr() as usize, c.blocks.len()),
            (&*c.ctx as *const Context as usize, 1),
        ]
    }

    #[test]
    fn caches_keep_their_buffers_and_leave_nothing_allocated() {
        // Used in signal handlers: everything is made beforehand, and
        // filling, overwriting and forgetting only write into it.
        let (a, b) = (made(), modules(|m| m, 8));
        for sizes in [tiny(), small(), Sizes::THROWS] {
            let mut c = Caches::new(sizes);
            let (before, bytes) = (buffers(&c), c.heap_bytes());
            let ((), net) = crate::symbolizer::heap::measure(|| {
                for (i, p) in shuffled(2).into_iter().enumerate() {
                    let m = if i % 500 < 250 { &a } else { &b };
                    c.sync(m.serial);
                    c.rule(m, p);
                    c.interrupted_rule(m, p);
                }
            });
            assert_eq!(net, 0, "{sizes:?}: nothing allocated and kept");
            assert_eq!(buffers(&c), before, "{sizes:?}: the same buffers");
            assert_eq!(c.heap_bytes(), bytes);
            assert!(c.rows_used <= c.rows.len());
        }
    }

    #[test]
    fn every_rule_kind_survives_packing_or_becomes_unsupported() {
        let kept = [
            Rule::Step { cfa: Base::Sp, cfa_offset: 8, ra_offset: -8, bp: SavedBp::Same, start: 0x10 },
            Rule::Step { cfa: Base::Bp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::At(-16), start: 0x20 },
            Rule::Step { cfa: Base::Sp, cfa_offset: 24, ra_offset: -8, bp: SavedBp::Lost, start: 0x30 },
            Rule::Step {
                cfa: Base::Plt { threshold: 11 },
                cfa_offset: 8,
                ra_offset: -8,
                bp: SavedBp::Same,
                start: 0x40,
            },
            Rule::Step {
                cfa: Base::Plt { threshold: 10 },
                cfa_offset: 8,
                ra_offset: -8,
                bp: SavedBp::Same,
                start: 0,
            },
            Rule::Step {
                cfa: Base::Sp,
                cfa_offset: i32::MAX as i64,
                ra_offset: i32::MIN as i64,
                bp: SavedBp::At(i32::MIN as i64),
                start: usize::MAX,
            },
            Rule::Outermost { start: 0x50 },
            Rule::NotCode,
            Rule::Unsupported,
        ];
        for rule in kept {
            for module in [None, Some(0), Some(7), Some(u16::MAX as usize - 1)] {
                let slot = Slot::pack(0x1234, rule, module);
                assert_eq!((slot.key, slot.rule(), slot.module()), (0x1234, rule, module));
                assert_eq!(slot.start, rule.start());
            }
        }
        // Not modelled: offsets beyond 32 bits, a PLT entry's CFA with RBP
        // saved or lost (the linker's entries never save it).
        let big = 1i64 << 31;
        let lost = [
            Rule::Step { cfa: Base::Sp, cfa_offset: big, ra_offset: -8, bp: SavedBp::Same, start: 0x10 },
            Rule::Step { cfa: Base::Sp, cfa_offset: 8, ra_offset: -big - 1, bp: SavedBp::Same, start: 0x10 },
            Rule::Step { cfa: Base::Bp, cfa_offset: 16, ra_offset: -8, bp: SavedBp::At(big), start: 0x10 },
            Rule::Step {
                cfa: Base::Plt { threshold: 11 },
                cfa_offset: 8,
                ra_offset: -8,
                bp: SavedBp::Lost,
                start: 0,
            },
            Rule::Step {
                cfa: Base::Plt { threshold: 11 },
                cfa_offset: big,
                ra_offset: -8,
                bp: SavedBp::Same,
                start: 0,
            },
        ];
        for rule in lost {
            let slot = Slot::pack(0x1234, rule, Some(2));
            assert_eq!(
                (slot.key, slot.rule(), slot.module(), slot.start),
                (0x1234, Rule::Unsupported, Some(2), 0)
            );
        }
        // Module indices past 16 bits are not kept (a process with more
        // than 65534 modules): the frame shows no module.
        assert_eq!(Slot::pack(1, Rule::NotCode, Some(u16::MAX as usize)).module(), None);
        assert_eq!(Slot::pack(1, Rule::NotCode, Some(70_000)).module(), None);
    }

    #[test]
    fn address_zero_gets_the_answer_of_any_address_that_is_not_code() {
        // An instruction pointer of 0 (a call through a null function
        // pointer, in a crash report) is not code; the tables say so, but
        // the rule cache takes an empty slot (key 0) for its entry and
        // answers Unsupported, which makes the walk stop with
        // rules::UNSUPPORTED ("not supported by the cfi backend") instead
        // of "not code of any loaded module".
        let m = made();
        assert_eq!(fresh_rule(&m, 0), (Rule::NotCode, None));
        let mut c = Caches::new(Sizes::THROWS);
        c.sync(m.serial);
        assert_answers(&m, c.rule(&m, 0), 0, "a return address");
        assert_answers(&m, c.interrupted_rule(&m, 0), 0, "an interrupted instruction");
    }
}
