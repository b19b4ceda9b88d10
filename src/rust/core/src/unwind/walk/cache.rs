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
            if cached.key == probe {
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
