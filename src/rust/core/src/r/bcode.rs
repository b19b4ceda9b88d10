//! Where byte code is: from a compiled body and a position in its code to
//! the expression being evaluated there (R's "expressionsIndex", which the
//! compiler always records), and from that expression to the loops around
//! it in the body. Read in place from the signal handler, through `Memory`.
//!
//! The compiler keeps the body it compiled as the first constant and puts
//! its location tables at the end of the constants, each an integer vector
//! with one entry per code unit (the index of a constant) and a class
//! attribute naming it.

use super::sexp::{self, BCODESXP, CLOSXP, ENVSXP, INTSXP, LANGSXP, LISTSXP, STRSXP};
use crate::memory::Memory;

/// Size of a code unit (R's `BCODE`, a union of an int and a pointer).
const UNIT: usize = 8;

/// Symbols the loops and tables are recognised by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BcSymbols {
    pub for_: usize,
    pub while_: usize,
    pub repeat: usize,
    pub class: usize,
}

/// The kinds of loop, as stored in a [`LoopPath`].
pub const FOR: u32 = 1;
pub const WHILE: u32 = 2;
pub const REPEAT: u32 = 3;

/// Up to [`LoopPath::MAX`] loops, outermost first, packed: the count in the
/// low 4 bits, then 2 bits per loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopPath(pub u32);

impl LoopPath {
    pub const MAX: usize = 12;

    pub fn len(self) -> usize {
        (self.0 & 0xf) as usize
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Loop `i` (0 = outermost).
    pub fn get(self, i: usize) -> u32 {
        (self.0 >> (4 + 2 * i)) & 3
    }

    fn push(self, kind: u32) -> LoopPath {
        let n = self.len();
        if n >= Self::MAX {
            return self;
        }
        LoopPath((self.0 & !0xf) | (kind << (4 + 2 * n)) | (n as u32 + 1))
    }
}

/// The body of a closure, if it is byte code.
pub fn closure_code(h: &impl Memory, closure: usize) -> Option<usize> {
    if sexp::type_of(h, closure)? != CLOSXP {
        return None;
    }
    let body = sexp::closure_body(h, closure)?;
    (sexp::type_of(h, body)? == BCODESXP).then_some(body)
}

/// Where a compiled body's code starts, and how many units it has.
pub fn code_range(h: &impl Memory, body: usize) -> Option<(usize, usize)> {
    if sexp::type_of(h, body)? != BCODESXP {
        return None;
    }
    let code = sexp::car(h, body)?;
    if sexp::type_of(h, code)? != INTSXP {
        return None;
    }
    // An integer vector holding the units: two ints each.
    let ints = sexp::length(h, code)?;
    Some((sexp::data(h, code)?, ints * sexp::INT_SIZE / UNIT))
}

/// The code unit `pc` (an address in the body's code) is at, if it lies in
/// it.
pub fn relative_pc(h: &impl Memory, body: usize, pc: usize) -> Option<usize> {
    let (base, units) = code_range(h, body)?;
    let off = pc.checked_sub(base)?;
    (off.is_multiple_of(UNIT) && off / UNIT < units).then_some(off / UNIT)
}

/// Whether `x` has the class attribute `name` (its first class).
fn has_class(h: &impl Memory, syms: &BcSymbols, x: usize, name: &[u8]) -> Option<bool> {
    let mut a = sexp::attrib(h, x)?;
    for _ in 0..8 {
        if sexp::type_of(h, a)? != LISTSXP {
            return Some(false);
        }
        if sexp::tag(h, a)? == syms.class {
            let v = sexp::car(h, a)?;
            if sexp::type_of(h, v)? != STRSXP || sexp::length(h, v)? == 0 {
                return Some(false);
            }
            return sexp::chars_equal(h, h.word(sexp::data(h, v)?)?, name);
        }
        a = sexp::cdr(h, a)?;
    }
    Some(false)
}

/// The constant that a location table (`name`: "expressionsIndex" or
/// "srcrefsIndex") of `body` gives for code unit `relpc`.
pub fn located(h: &impl Memory, syms: &BcSymbols, body: usize, name: &[u8], relpc: usize) -> Option<usize> {
    let consts = sexp::cdr(h, body)?;
    let n = sexp::length(h, consts)?;
    // The tables are the last constants (R's findLocTable looks there).
    let table = (n.saturating_sub(4)..n).rev().find_map(|i| {
        let t = sexp::list_elt(h, consts, i)?;
        (sexp::type_of(h, t)? == INTSXP && has_class(h, syms, t, name)?).then_some(t)
    })?;
    if relpc >= sexp::length(h, table)? {
        return None;
    }
    let idx = h.int(sexp::data(h, table)? + relpc * sexp::INT_SIZE)?;
    sexp::list_elt(h, consts, usize::try_from(idx).ok()?)
}

/// The value bound to symbol `sym` (0: the symbol named `name`, see
/// [`sexp::is_symbol`]) in environment `env` (hashed or not), if it is an
/// ordinary binding. `nil`: R's NULL.
pub fn env_value(h: &impl Memory, env: usize, (sym, name): (usize, &[u8]), nil: usize) -> Option<usize> {
    if sexp::type_of(h, env)? != ENVSXP {
        return None;
    }
    let in_chain = |mut cell: usize| -> Option<usize> {
        for _ in 0..10_000 {
            if cell == nil || sexp::type_of(h, cell)? != LISTSXP {
                return None;
            }
            if sexp::is_symbol(h, sexp::tag(h, cell)?, sym, name) {
                return sexp::car(h, cell);
            }
            cell = sexp::cdr(h, cell)?;
        }
        None
    };
    let table = sexp::env_hashtab(h, env)?;
    if table == nil {
        return in_chain(sexp::env_frame(h, env)?);
    }
    let buckets = sexp::length(h, table)?.min(100_000);
    (0..buckets).find_map(|i| in_chain(sexp::list_elt(h, table, i)?))
}

/// The line and srcfile of a srcref (an integer vector with a `srcfile`
/// attribute).
pub fn srcref_parts(h: &impl Memory, srcref: usize, srcfile_sym: usize) -> Option<(i32, usize)> {
    if sexp::type_of(h, srcref)? != INTSXP || sexp::length(h, srcref)? < 6 {
        return None;
    }
    let line = h.int(sexp::data(h, srcref)?)?;
    let mut a = sexp::attrib(h, srcref)?;
    for _ in 0..8 {
        if sexp::type_of(h, a)? != LISTSXP {
            return None;
        }
        if sexp::tag(h, a)? == srcfile_sym {
            return Some((line, sexp::car(h, a)?));
        }
        a = sexp::cdr(h, a)?;
    }
    None
}

/// R's byte-code instructions as this R encodes them: R replaces each
/// opcode by the address of its code in the interpreter loop ("threaded
/// code"), so the words are learnt by encoding every opcode once (the glue
/// has R's compiler make such a body) and reading the result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpTable {
    /// Encoded word and opcode, sorted by word.
    words: Box<[(usize, u8)]>,
    /// Operands of each opcode.
    argc: Box<[u8]>,
    goto: u8,
    stepfor: u8,
}

/// The word of a code unit (8 bytes: R's `BCODE` union).
fn unit(h: &impl Memory, addr: usize) -> Option<usize> {
    let mut b = [0u8; UNIT];
    h.bytes(addr, &mut b)?;
    Some(usize::from_ne_bytes(b))
}

impl OpTable {
    /// Learns the table from `encoded`, a body whose code is every opcode
    /// in order (`argc[op]` operands each, after the version word), and
    /// the opcodes of `GOTO` and `STEPFOR`. None if the code is not laid
    /// out that way (R built without threaded code: 4-byte units) or two
    /// opcodes share a word.
    pub fn learn(h: &impl Memory, encoded: usize, argc: &[i32], goto: i32, stepfor: i32) -> Option<OpTable> {
        let (base, units) = code_range(h, encoded)?;
        let argc: Vec<u8> = argc.iter().map(|&a| u8::try_from(a).ok()).collect::<Option<_>>()?;
        if argc.is_empty() || argc.len() > 256 {
            return None;
        }
        let mut words = Vec::with_capacity(argc.len());
        let mut pc = 1;
        for (op, &n) in argc.iter().enumerate() {
            words.push((unit(h, base + pc * UNIT)?, op as u8));
            pc += 1 + n as usize;
        }
        if pc != units {
            return None;
        }
        words.sort_unstable();
        if words.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let op = |x: i32| u8::try_from(x).ok().filter(|&o| (o as usize) < argc.len());
        let (goto, stepfor) = (op(goto)?, op(stepfor)?);
        Some(OpTable { words: words.into(), argc: argc.into(), goto, stepfor })
    }

    /// The table of the same build of R loaded `delta` bytes further on
    /// (wrapping): the encoded words are addresses in R's interpreter.
    pub fn moved(&self, delta: usize) -> OpTable {
        let mut words: Vec<(usize, u8)> =
            self.words.iter().map(|&(w, op)| (w.wrapping_add(delta), op)).collect();
        words.sort_unstable();
        OpTable { words: words.into(), argc: self.argc.clone(), goto: self.goto, stepfor: self.stepfor }
    }

    fn decode(&self, word: usize) -> Option<u8> {
        let i = self.words.binary_search_by_key(&word, |&(w, _)| w).ok()?;
        Some(self.words[i].1)
    }
}

/// Loops per code unit of compiled bodies, computed once per body from the
/// instructions: a loop is the code between a backward jump and its target
/// (`STEPFOR` for `for`; the `GOTO` the compiler puts at the end of `while`
/// and `repeat`, whose expression tells which). Identical calls in
/// different loops share one constant, so the loops are never taken from
/// the expressions themselves. After that a position's loops cost a
/// lookup. Fixed storage (usable in the signal handler); when the units
/// are used up, everything is forgotten and filled again.
pub struct BodyTables {
    entries: Box<[BodyEntry]>,
    units: Box<[LoopPath]>,
    used: usize,
    /// Loops of the body being filled: first and last unit, kind.
    loops: Box<[(u32, u32, u32)]>,
    /// The loops around the unit being filled: last unit, path.
    stack: Box<[(u32, LoopPath)]>,
}

/// One body: its address, and its code and constants vectors (a later
/// body at the same address has other ones), and its units' loops.
#[derive(Clone, Copy, Debug, Default)]
struct BodyEntry {
    body: usize,
    code: usize,
    consts: usize,
    first: u32,
    count: u32,
}

const BODIES: usize = 1 << 12;
const UNITS: usize = 1 << 20;
const LOOPS: usize = 1 << 14;

impl Default for BodyTables {
    fn default() -> BodyTables {
        let mut t = BodyTables {
            entries: vec![BodyEntry::default(); BODIES].into_boxed_slice(),
            units: vec![LoopPath::default(); UNITS].into_boxed_slice(),
            used: 0,
            loops: vec![(0, 0, 0); LOOPS].into_boxed_slice(),
            stack: vec![(0, LoopPath::default()); LoopPath::MAX + 1].into_boxed_slice(),
        };
        crate::memory::prefault(&mut t.entries);
        crate::memory::prefault(&mut t.units);
        crate::memory::prefault(&mut t.loops);
        t
    }
}

impl BodyTables {
    /// The loops around code unit `relpc` of compiled `body`.
    pub fn loops_at(
        &mut self,
        h: &impl Memory,
        syms: &BcSymbols,
        ops: &OpTable,
        body: usize,
        relpc: usize,
    ) -> Option<LoopPath> {
        let (code, consts) = (sexp::car(h, body)?, sexp::cdr(h, body)?);
        let home = (body.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) & (BODIES - 1);
        let mut free = None;
        for k in 0..8 {
            let i = (home + k) & (BODIES - 1);
            let e = self.entries[i];
            if e.body == body && e.code == code && e.consts == consts {
                return (relpc < e.count as usize).then(|| self.units[e.first as usize + relpc]);
            }
            if e.body == 0 && free.is_none() {
                free = Some(i);
            }
        }
        let slot = match free {
            Some(i) => i,
            None => {
                self.forget();
                home
            }
        };
        let e = self.fill(h, syms, ops, body, code, consts)?;
        self.entries[slot] = e;
        (relpc < e.count as usize).then(|| self.units[e.first as usize + relpc])
    }

    /// Forgets every body (their tables are computed again when next
    /// asked).
    pub fn forget(&mut self) {
        self.entries.fill(BodyEntry::default());
        self.used = 0;
    }

    /// Computes the loops of every code unit of `body`. None if its code
    /// cannot be decoded or its loops do not nest.
    fn fill(
        &mut self,
        h: &impl Memory,
        syms: &BcSymbols,
        ops: &OpTable,
        body: usize,
        code: usize,
        consts: usize,
    ) -> Option<BodyEntry> {
        let (base, units) = code_range(h, body)?;
        if units > self.units.len() || units >= u32::MAX as usize {
            return None;
        }
        // The loops, from their backward jumps.
        let mut n = 0;
        let mut pc = 1;
        while pc < units {
            let op = ops.decode(unit(h, base + pc * UNIT)?)?;
            let argc = *ops.argc.get(op as usize)? as usize;
            let last = pc + argc;
            if last >= units {
                return None;
            }
            let kind = if op == ops.stepfor {
                FOR
            } else if op == ops.goto {
                let e = located(h, syms, body, b"expressionsIndex", pc)?;
                match (sexp::type_of(h, e)?, sexp::car(h, e)?) {
                    (LANGSXP, s) if sexp::is_symbol(h, s, syms.while_, b"while") => WHILE,
                    (LANGSXP, s) if sexp::is_symbol(h, s, syms.repeat, b"repeat") => REPEAT,
                    _ => 0, // `break`, `next`, `if`, `switch`
                }
            } else {
                0
            };
            if kind != 0 {
                let target = usize::try_from(h.int(base + (pc + 1) * UNIT)?).ok()?;
                if target >= 1 && target < pc {
                    *self.loops.get_mut(n)? = (target as u32, last as u32, kind);
                    n += 1;
                }
            }
            pc = last + 1;
        }
        if pc != units {
            return None;
        }
        // Outer loops first among those starting at one unit.
        let loops = &mut self.loops[..n];
        loops.sort_unstable_by_key(|&(first, last, _)| (first, std::cmp::Reverse(last)));
        if self.used + units > self.units.len() {
            self.forget();
        }
        let first = self.used;
        let mut depth = 0;
        let mut next = 0;
        for u in 0..units as u32 {
            while depth > 0 && self.stack[depth - 1].0 < u {
                depth -= 1;
            }
            while next < n && self.loops[next].0 == u {
                let (_, last, kind) = self.loops[next];
                let outer = match depth {
                    0 => LoopPath::default(),
                    d if self.stack[d - 1].0 >= last => self.stack[d - 1].1,
                    _ => return None, // overlapping loops: not the compiler's
                };
                // Deeper than a path holds: the outermost ones are kept.
                if depth < self.stack.len() {
                    self.stack[depth] = (last, outer.push(kind));
                    depth += 1;
                }
                next += 1;
            }
            self.units[first + u as usize] =
                if depth > 0 { self.stack[depth - 1].1 } else { LoopPath::default() };
        }
        self.used += units;
        Some(BodyEntry { body, code, consts, first: first as u32, count: units as u32 })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::r::sexp::tests::FakeHeap;

    /// A fake heap with the symbols byte code's loops are told by (also
    /// used by the tests of describing R frames).
    pub(crate) struct Fixture {
        pub(crate) h: FakeHeap,
        pub(crate) syms: BcSymbols,
    }

    pub(crate) fn fixture() -> Fixture {
        let mut h = FakeHeap::default();
        let syms = BcSymbols {
            for_: h.symbol("for"),
            while_: h.symbol("while"),
            repeat: h.symbol("repeat"),
            class: h.symbol("class"),
        };
        Fixture { h, syms }
    }

    #[test]
    fn expressions_by_position() {
        let Fixture { mut h, syms } = fixture();
        let (g, f) = (h.symbol("g"), h.symbol("f"));
        let (g_call, f_call) = (h.call(g, &[]), h.call(f, &[]));
        let brace = h.symbol("{");
        let body_expr = h.call(brace, &[g_call, f_call]);
        // 6 code units: the version, then instructions for g() and f().
        let code = h.ints(&[12, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0]);
        let exprs = h.ints(&[0, 1, 1, 1, 2, 2]);
        let class = h.string("expressionsIndex");
        h.attr(exprs, syms.class, class);
        let srcrefs = h.ints(&[0, 0, 0, 0, 0, 0]);
        let other = h.string("srcrefsIndex");
        h.attr(srcrefs, syms.class, other);
        let consts = h.list(&[body_expr, g_call, f_call, exprs, srcrefs]);
        let body = h.cons(BCODESXP, code, consts);
        let (base, units) = code_range(&h, body).unwrap();
        assert_eq!(units, 6);
        assert_eq!(relative_pc(&h, body, base + 3 * 8), Some(3));
        assert_eq!(relative_pc(&h, body, base + 6 * 8), None);
        assert_eq!(relative_pc(&h, body, base + 3), None);
        assert_eq!(located(&h, &syms, body, b"expressionsIndex", 2), Some(g_call));
        assert_eq!(located(&h, &syms, body, b"expressionsIndex", 5), Some(f_call));
        assert_eq!(located(&h, &syms, body, b"expressionsIndex", 6), None);
        assert_eq!(located(&h, &syms, body, b"srcrefsIndex", 1), Some(body_expr));
        assert_eq!(located(&h, &syms, body, b"nothing", 1), None);
        let clo = h.closure(body);
        assert_eq!(closure_code(&h, clo), Some(body));
    }

    /// Opcodes of the fake instruction set: operands of each, and the
    /// word each is encoded as.
    pub(crate) const ARGC: [i32; 5] = [0, 1, 1, 1, 3];
    pub(crate) const RETURN: i32 = 0;
    pub(crate) const GOTO: i32 = 1;
    pub(crate) const STEPFOR: i32 = 2;
    pub(crate) const CALL: i32 = 3;
    pub(crate) const STARTFOR: i32 = 4;
    fn op_word(op: i32) -> [i32; 2] {
        [0x5000 + op * 16, 0x7f]
    }

    /// A body of `units` (an opcode or an operand each) and the
    /// expression of each unit, the expressions being `consts[1..]`.
    pub(crate) fn body_of(f: &mut Fixture, units: &[(bool, i32)], exprs: &[i32], consts: &[usize]) -> usize {
        let mut ints = vec![12, 0];
        for &(is_op, x) in units {
            ints.extend(if is_op { op_word(x) } else { [x, 0] });
        }
        let code = f.h.ints(&ints);
        let index = f.h.ints(exprs);
        let class = f.h.string("expressionsIndex");
        f.h.attr(index, f.syms.class, class);
        let mut all = consts.to_vec();
        all.push(index);
        let consts = f.h.list(&all);
        f.h.cons(BCODESXP, code, consts)
    }

    pub(crate) fn op_table(f: &mut Fixture) -> OpTable {
        let mut units = Vec::new();
        for (op, &n) in ARGC.iter().enumerate() {
            units.push((true, op as i32));
            units.extend(std::iter::repeat_n((false, 0), n as usize));
        }
        let exprs = vec![0; units.len() + 1];
        let nil = f.h.symbol("NULL");
        let encoded = body_of(f, &units, &exprs, &[nil]);
        OpTable::learn(&f.h, encoded, &ARGC, GOTO, STEPFOR).expect("the table is learnt")
    }

    #[test]
    fn opcodes_are_learnt_from_an_encoded_body() {
        let mut f = fixture();
        let t = op_table(&mut f);
        for op in 0..ARGC.len() as i32 {
            let [lo, hi] = op_word(op);
            assert_eq!(t.decode((lo as u32 as usize) | (hi as usize) << 32), Some(op as u8));
        }
        assert_eq!(t.decode(0x5000), None, "only whole words");
        // Too few units for the operands: 4-byte units, or another table.
        let nil = f.h.symbol("NULL");
        let short = body_of(&mut f, &[(true, 0), (true, 1)], &[0, 0, 0], &[nil]);
        assert_eq!(OpTable::learn(&f.h, short, &ARGC, GOTO, STEPFOR), None);
        assert_eq!(OpTable::learn(&f.h, short, &[0, 0], GOTO, STEPFOR), None, "GOTO is not an opcode");
    }

    #[test]
    fn identical_calls_in_different_loops_get_their_own_loops() {
        // { for (i in y) g(i); repeat { g(i); break }; while (c()) g(i) }:
        // one constant for the three g(i).
        let mut f = fixture();
        let ops = op_table(&mut f);
        let (g, i, y, c) = (f.h.symbol("g"), f.h.symbol("i"), f.h.symbol("y"), f.h.symbol("c"));
        let (brk, brace) = (f.h.symbol("break"), f.h.symbol("{"));
        let g_call = f.h.call(g, &[i]);
        let c_call = f.h.call(c, &[]);
        let break_call = f.h.call(brk, &[]);
        let for_call = f.h.call(f.syms.for_, &[i, y, g_call]);
        let repeat_call = f.h.call(f.syms.repeat, &[g_call]);
        let while_call = f.h.call(f.syms.while_, &[c_call, g_call]);
        let root = f.h.call(brace, &[for_call, repeat_call, while_call]);
        let consts = [root, for_call, g_call, repeat_call, break_call, c_call, while_call];
        let (o, a) = (true, false);
        #[rustfmt::skip]
        let units = [
            (o, STARTFOR), (a, 0), (a, 0), (a, 7), //  1: for (i in y)
            (o, CALL), (a, 2),                     //  5: g(i)
            (o, STEPFOR), (a, 5),                  //  7: back to 5
            (o, CALL), (a, 2),                     //  9: g(i), repeat's first
            (o, GOTO), (a, 15),                    // 11: break
            (o, GOTO), (a, 9),                     // 13: back to 9
            (o, CALL), (a, 5),                     // 15: c(), while's first
            (o, CALL), (a, 2),                     // 17: g(i)
            (o, GOTO), (a, 15),                    // 19: back to 15
            (o, RETURN),                           // 21
        ];
        #[rustfmt::skip]
        let exprs = [0, 1, 1, 1, 1, 2, 2, 1, 1, 2, 2, 4, 4, 3, 3, 5, 5, 2, 2, 6, 6, 0];
        let body = body_of(&mut f, &units, &exprs, &consts);
        let mut t = BodyTables::default();
        let mut at = |pc| {
            t.loops_at(&f.h, &f.syms, &ops, body, pc)
                .map(|p| (0..p.len()).map(|j| p.get(j)).collect::<Vec<_>>())
        };
        assert_eq!(at(0), Some(vec![]), "the version word");
        assert_eq!(at(2), Some(vec![]), "for's set-up is outside the loop");
        assert_eq!(at(6), Some(vec![FOR]));
        assert_eq!(at(8), Some(vec![FOR]), "the loop's own step");
        assert_eq!(at(10), Some(vec![REPEAT]));
        assert_eq!(at(12), Some(vec![REPEAT]), "break is inside");
        assert_eq!(at(16), Some(vec![WHILE]), "the condition is inside");
        assert_eq!(at(18), Some(vec![WHILE]));
        assert_eq!(at(21), Some(vec![]));
        assert_eq!(at(22), None, "past the code");
        assert_eq!(t.used, 22, "computed once");
    }

    #[test]
    fn nested_loops_outermost_first() {
        // repeat { while (c()) { for (i in y) g(i) }; next }
        let mut f = fixture();
        let ops = op_table(&mut f);
        let (g, i, y, c, nxt) =
            (f.h.symbol("g"), f.h.symbol("i"), f.h.symbol("y"), f.h.symbol("c"), f.h.symbol("next"));
        let g_call = f.h.call(g, &[i]);
        let c_call = f.h.call(c, &[]);
        let next_call = f.h.call(nxt, &[]);
        let for_call = f.h.call(f.syms.for_, &[i, y, g_call]);
        let while_call = f.h.call(f.syms.while_, &[c_call, for_call]);
        let repeat_call = f.h.call(f.syms.repeat, &[while_call]);
        let consts = [repeat_call, while_call, c_call, for_call, g_call, next_call];
        let (o, a) = (true, false);
        #[rustfmt::skip]
        let units = [
            (o, CALL), (a, 2),                     //  1: c(): repeat's and while's first
            (o, STARTFOR), (a, 0), (a, 0), (a, 9), //  3
            (o, CALL), (a, 4),                     //  7: g(i)
            (o, STEPFOR), (a, 7),                  //  9
            (o, GOTO), (a, 1),                     // 11: end of while
            (o, GOTO), (a, 1),                     // 13: next (backward, not a loop)
            (o, GOTO), (a, 1),                     // 15: end of repeat
            (o, RETURN),                           // 17
        ];
        #[rustfmt::skip]
        let exprs = [0, 2, 2, 3, 3, 3, 3, 4, 4, 3, 3, 1, 1, 5, 5, 0, 0, 0];
        let body = body_of(&mut f, &units, &exprs, &consts);
        let mut t = BodyTables::default();
        let mut at = |pc| {
            t.loops_at(&f.h, &f.syms, &ops, body, pc)
                .map(|p| (0..p.len()).map(|j| p.get(j)).collect::<Vec<_>>())
        };
        assert_eq!(at(2), Some(vec![REPEAT, WHILE]));
        assert_eq!(at(8), Some(vec![REPEAT, WHILE, FOR]));
        assert_eq!(at(14), Some(vec![REPEAT]), "`next` does not make a loop");
        assert_eq!(at(17), Some(vec![]));
    }

    #[test]
    fn undecodable_code_has_no_loops() {
        let mut f = fixture();
        let ops = op_table(&mut f);
        let nil = f.h.symbol("NULL");
        // An unknown word, then a truncated instruction.
        let bad = body_of(&mut f, &[(true, 9)], &[0, 0], &[nil]);
        let cut = body_of(&mut f, &[(true, CALL)], &[0, 0], &[nil]);
        let mut t = BodyTables::default();
        assert_eq!(t.loops_at(&f.h, &f.syms, &ops, bad, 1), None);
        assert_eq!(t.loops_at(&f.h, &f.syms, &ops, cut, 1), None);
    }

    #[test]
    fn loop_paths_pack_in_order() {
        let p = LoopPath::default().push(FOR).push(WHILE).push(REPEAT);
        assert_eq!(p.len(), 3);
        assert_eq!((p.get(0), p.get(1), p.get(2)), (FOR, WHILE, REPEAT));
        let mut q = LoopPath::default();
        for _ in 0..20 {
            q = q.push(FOR);
        }
        assert_eq!(q.len(), LoopPath::MAX);
    }
}
