//! Made-up code for tests: functions at made-up addresses with made-up
//! rules, standing in for a module's unwind tables; tables that count what
//! they are asked (a cache's hits from its misses); the rule at an address
//! and a whole walk computed without any cache (what a cached walk must
//! give); and a made-up program with stacks of calls among its functions.

use super::{End, Frame, Modules};
use crate::memory::Image;
use crate::modules::{Module, ModuleMap};
use crate::unwind::rules::{self, Base, Context, Regs, Rule, SavedBp, Source, Step};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One made-up function: `[start, end)` and its rows `(start, end, rule)`.
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub start: usize,
    pub end: usize,
    pub rows: Vec<(usize, usize, Rule)>,
}

/// A module's made-up functions, sorted by address.
#[derive(Clone, Debug, Default)]
pub(crate) struct Made {
    pub functions: Vec<Function>,
}

impl Made {
    /// Functions of `size` bytes from `lo` to `hi`, each with one row:
    /// `rule` (its start set to the function's).
    pub(crate) fn uniform(lo: usize, hi: usize, size: usize, rule: Rule) -> Made {
        let functions = (lo..hi)
            .step_by(size)
            .map(|start| Function { start, end: start + size, rows: vec![(start, start + size, rule)] })
            .collect();
        Made { functions }
    }

    fn function(&self, addr: usize) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.start <= addr);
        self.functions.get(i.checked_sub(1)?).filter(|f| addr < f.end)
    }
}

fn with_start(rule: Rule, start: usize) -> Rule {
    match rule {
        Rule::Step { cfa, cfa_offset, ra_offset, bp, .. } => {
            Rule::Step { cfa, cfa_offset, ra_offset, bp, start }
        }
        Rule::Outermost { .. } => Rule::Outermost { start },
        other => other,
    }
}

impl Source for Made {
    fn rule(&self, _ctx: &mut Context, probe: usize) -> Rule {
        let Some(f) = self.function(probe) else { return Rule::Unsupported };
        f.rows
            .iter()
            .find(|&&(lo, hi, _)| lo <= probe && probe < hi)
            .map_or(Rule::Unsupported, |&(_, _, r)| with_start(r, f.start))
    }

    fn fde_key(&self, probe: usize) -> Option<usize> {
        self.function(probe).map(|f| f.start)
    }

    fn rows(
        &self,
        _ctx: &mut Context,
        fde: usize,
        mut each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)> {
        let f = self.functions.iter().find(|f| f.start == fde)?;
        for &(lo, hi, r) in &f.rows {
            each(lo, hi, with_start(r, f.start));
        }
        Some((f.start, f.end))
    }
}

impl<T> Modules<T> {
    /// Made-up modules, each with its made-up tables (if any); module
    /// `interpreter` (if any) is R's.
    pub(crate) fn synthetic(modules: Vec<(Module, Option<T>)>, interpreter: Option<usize>) -> Modules<T> {
        let (list, tables): (Vec<Module>, Vec<Option<T>>) = modules.into_iter().unzip();
        let map = Arc::new(ModuleMap::new(list));
        let addr = interpreter.map_or(0, |m| map.module(m).segments[0].start);
        let tables = std::cell::RefCell::new(tables.into_iter());
        let loaded =
            crate::modules::Loaded { generation: crate::modules::Generation::default(), exact: true, map };
        Modules::build(loaded, addr, |_| tables.borrow_mut().next().flatten())
    }
}

/// Made-up tables that count the questions asked of them: a cache hit asks
/// nothing.
#[derive(Debug, Default)]
pub(crate) struct Counted {
    pub made: Made,
    /// Calls of [`Source::rule`] and [`Source::rows`].
    pub rules: AtomicUsize,
    pub rows: AtomicUsize,
}

impl Counted {
    pub(crate) fn new(made: Made) -> Counted {
        Counted { made, ..Counted::default() }
    }

    /// (rule, rows) calls so far.
    pub(crate) fn asked(&self) -> (usize, usize) {
        (self.rules.load(Ordering::Relaxed), self.rows.load(Ordering::Relaxed))
    }
}

impl Source for Counted {
    fn rule(&self, ctx: &mut Context, probe: usize) -> Rule {
        self.rules.fetch_add(1, Ordering::Relaxed);
        self.made.rule(ctx, probe)
    }

    fn fde_key(&self, probe: usize) -> Option<usize> {
        self.made.fde_key(probe)
    }

    fn rows(
        &self,
        ctx: &mut Context,
        fde: usize,
        each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)> {
        self.rows.fetch_add(1, Ordering::Relaxed);
        self.made.rows(ctx, fde, each)
    }
}

/// The rule at `probe` and the module of that address, asked of the
/// tables of `m` directly: what every cache must answer.
pub(crate) fn fresh_rule<T: Source>(m: &Modules<T>, probe: usize) -> (Rule, Option<usize>) {
    let mut ctx = Box::new(Context::new_in());
    let hit = m.map.lookup(probe);
    let rule = match hit.filter(|h| h.exec) {
        Some(h) => match m.tables.get(h.module) {
            Some(Some(t)) => t.rule(&mut ctx, probe),
            _ => Rule::Unsupported,
        },
        None => Rule::NotCode,
    };
    (rule, hit.map(|h| h.module))
}

/// A walk over `m` from `start` with every rule asked of the tables (no
/// cache), into at most `room` frames: what a cached walk must give.
pub(crate) fn walk_uncached<T: Source>(
    m: &Modules<T>,
    start: Regs,
    read: impl Fn(usize) -> Option<usize>,
    room: usize,
) -> (Vec<Frame>, End) {
    let mut frames = Vec::new();
    let mut regs = start;
    loop {
        let probe = if frames.is_empty() { regs.ip } else { regs.ip.wrapping_sub(1) };
        let (rule, module) = fresh_rule(m, probe);
        if frames.len() == room {
            return (frames, End::Full);
        }
        frames.push(Frame { ip: regs.ip, sp: regs.sp, start: rule.start(), module });
        match rules::step(rule, regs, &read) {
            Step::Caller(next) => regs = next,
            Step::Outermost => return (frames, End::Outermost),
            Step::Stop(why) => return (frames, End::Stopped(why)),
        }
    }
}

/// A made-up program: module 0 holds [`Program::FUNCTIONS`] functions of
/// 0x40 bytes from [`Program::CODE`], each with the rows a compiler writes
/// (at entry CFA = rsp + 8; after `push rbp` rsp + 16 with RBP saved at
/// CFA - 16; in the body either CFA = rbp + 16, a frame pointer, or
/// CFA = rsp + 16..48, locals without one); module 1 (R's) holds outermost
/// functions of 0x100 bytes from [`Program::OUTER`].
pub(crate) struct Program {
    pub modules: Modules<Made>,
}

/// One made-up stack: its frames (outermost first) with their registers
/// (ip, sp, bp), and the words each frame's callee saved (return address,
/// caller's RBP).
#[derive(Clone, Debug, Default)]
pub(crate) struct Calls {
    regs: Vec<Regs>,
    /// Each frame's function start and module.
    funcs: Vec<(usize, usize)>,
    saved: Vec<Vec<(usize, usize)>>,
}

/// A small deterministic generator (xorshift64).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

impl Program {
    pub const CODE: usize = 0x10000;
    pub const FUNCTIONS: usize = 256;
    pub const OUTER: usize = 0x20000;
    /// The stack's top (its outermost frame's stack pointer).
    pub const TOP: usize = 0x8_0000;

    /// The program, its frameless functions' frames `extra` bytes larger
    /// than usual (another build of the same code).
    pub(crate) fn new(extra: i64) -> Program {
        Program { modules: Modules::synthetic(Program::tables(extra), Some(1)) }
    }

    pub(crate) fn tables(extra: i64) -> Vec<(Module, Option<Made>)> {
        let step = |cfa, cfa_offset, bp| Rule::Step { cfa, cfa_offset, ra_offset: -8, bp, start: 0 };
        let functions = (0..Program::FUNCTIONS)
            .map(|i| {
                let s = Program::CODE + 0x40 * i;
                let body = if i % 2 == 0 {
                    step(Base::Bp, 16, SavedBp::At(-16))
                } else {
                    step(Base::Sp, 16 + 8 * (i as i64 / 2 % 5) + extra, SavedBp::At(-16))
                };
                let rows = vec![
                    (s, s + 1, step(Base::Sp, 8, SavedBp::Same)),
                    (s + 1, s + 4, step(Base::Sp, 16, SavedBp::At(-16))),
                    (s + 4, s + 0x40, body),
                ];
                Function { start: s, end: s + 0x40, rows }
            })
            .collect();
        let end = Program::CODE + 0x40 * Program::FUNCTIONS;
        let outer =
            Made::uniform(Program::OUTER, Program::OUTER + 0x1000, 0x100, Rule::Outermost { start: 0 });
        vec![
            (Module::synthetic("/made/prog.so", Program::CODE, end, false), Some(Made { functions })),
            (Module::synthetic("/made/libR.so", Program::OUTER, Program::OUTER + 0x1000, false), Some(outer)),
        ]
    }

    /// A stack of `depth` frames (at least 1) whose outer `keep` frames are
    /// those of `from` (which has more than `keep`), the rest made up from
    /// `rng`.
    pub(crate) fn calls(&self, rng: &mut Rng, from: &Calls, keep: usize, depth: usize) -> Calls {
        let mut c = from.clone();
        c.regs.truncate(keep);
        c.funcs.truncate(keep);
        c.saved.truncate(keep);
        if c.regs.is_empty() {
            let start = Program::OUTER + 0x100 * rng.below(16);
            c.regs.push(Regs { ip: start + 5 + rng.below(0xf0), sp: Program::TOP, bp: Some(0x1234) });
            c.funcs.push((start, 1));
            c.saved.push(Vec::new());
        }
        while c.regs.len() < depth.max(1) {
            let caller = *c.regs.last().unwrap();
            let innermost = c.regs.len() + 1 == depth.max(1);
            let f = rng.below(Program::FUNCTIONS);
            let start = Program::CODE + 0x40 * f;
            // A return address lies after its call, in the body; the
            // interrupted instruction anywhere.
            let ip = if innermost { start + rng.below(0x40) } else { start + 5 + rng.below(0x3b) };
            let probe = if innermost { ip } else { ip - 1 };
            let cfa = caller.sp;
            let bp = caller.bp.unwrap();
            let mut saved = vec![(cfa - 8, caller.ip)];
            let regs = match fresh_rule(&self.modules, probe).0 {
                Rule::Step { cfa: Base::Sp, cfa_offset, bp: SavedBp::Same, .. } => {
                    Regs { ip, sp: cfa - cfa_offset as usize, bp: Some(bp) }
                }
                Rule::Step { cfa: Base::Sp, cfa_offset: 16, bp: SavedBp::At(-16), .. } if ip < start + 4 => {
                    saved.push((cfa - 16, bp));
                    Regs { ip, sp: cfa - 16, bp: Some(bp) }
                }
                Rule::Step { cfa: Base::Sp, cfa_offset, bp: SavedBp::At(-16), .. } => {
                    saved.push((cfa - 16, bp));
                    Regs { ip, sp: cfa - cfa_offset as usize, bp: Some(0xdead_0000 + c.regs.len()) }
                }
                Rule::Step { cfa: Base::Bp, cfa_offset: 16, bp: SavedBp::At(-16), .. } => {
                    saved.push((cfa - 16, bp));
                    Regs { ip, sp: cfa - 16 - 8 * rng.below(6), bp: Some(cfa - 16) }
                }
                other => unreachable!("no such rule in the program: {other:?}"),
            };
            c.regs.push(regs);
            c.funcs.push((start, 0));
            c.saved.push(saved);
        }
        c
    }
}

impl Calls {
    /// The registers a walk starts from (the innermost frame's).
    pub(crate) fn start(&self) -> Regs {
        *self.regs.last().unwrap()
    }

    pub(crate) fn depth(&self) -> usize {
        self.regs.len()
    }

    /// The frames a walk finds, innermost first.
    pub(crate) fn frames(&self) -> Vec<Frame> {
        let frames = self.regs.iter().zip(&self.funcs);
        frames
            .rev()
            .map(|(r, &(start, module))| Frame { ip: r.ip, sp: r.sp, start, module: Some(module) })
            .collect()
    }

    /// The stack's memory.
    pub(crate) fn image(&self) -> Image {
        let low = self.start().sp - 0x100;
        let mut img = Image::new();
        img.put(low, vec![0; Program::TOP + 0x100 - low]);
        for &(addr, word) in self.saved.iter().flatten() {
            img.put_word(addr, word);
        }
        img
    }
}
