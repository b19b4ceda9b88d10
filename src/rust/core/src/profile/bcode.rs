//! Where byte code is: from a compiled body and a position in its code to
//! the expression being evaluated there (R's "expressionsIndex", which the
//! compiler always records), and from that expression to the loops around
//! it in the body. Read in place from the signal handler, through `Heap`.
//!
//! The compiler keeps the body it compiled as the first constant and puts
//! its location tables at the end of the constants, each an integer vector
//! with one entry per code unit (the index of a constant) and a class
//! attribute naming it.

use super::rheap::{self, Heap, INTSXP, LANGSXP, STRSXP};

pub const CLOSXP: u8 = 3;
pub const LISTSXP: u8 = 2;
pub const VECSXP: u8 = 19;
pub const BCODESXP: u8 = 21;

/// Size of a code unit (R's `BCODE`, a union of an int and a pointer).
const UNIT: usize = 8;
/// Offsets in a closure (formals, body, environment).
const BODY: usize = 40;
/// Offset of an object's attributes.
const ATTRIB: usize = 8;
/// Offset of a node's tag.
const TAG: usize = 48;

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
pub fn closure_code(h: &impl Heap, closure: usize) -> Option<usize> {
    if rheap::type_of(h, closure)? != CLOSXP {
        return None;
    }
    let body = h.word(closure + BODY)?;
    (rheap::type_of(h, body)? == BCODESXP).then_some(body)
}

/// Where a compiled body's code starts, and how many units it has.
pub fn code_range(h: &impl Heap, body: usize) -> Option<(usize, usize)> {
    if rheap::type_of(h, body)? != BCODESXP {
        return None;
    }
    let code = rheap::car(h, body)?;
    if rheap::type_of(h, code)? != INTSXP {
        return None;
    }
    // An integer vector holding the units: two ints each.
    let ints = rheap::length(h, code)?;
    Some((rheap::data(h, code)?, ints * 4 / UNIT))
}

/// The code unit `pc` (an address in the body's code) is at, if it lies in
/// it.
pub fn relative_pc(h: &impl Heap, body: usize, pc: usize) -> Option<usize> {
    let (base, units) = code_range(h, body)?;
    let off = pc.checked_sub(base)?;
    (off.is_multiple_of(UNIT) && off / UNIT < units).then_some(off / UNIT)
}

/// Element `i` of a list.
fn element(h: &impl Heap, list: usize, i: usize) -> Option<usize> {
    if rheap::type_of(h, list)? != VECSXP || i >= rheap::length(h, list)? {
        return None;
    }
    h.word(rheap::data(h, list)? + i * 8)
}

/// Whether `x` has the class attribute `name` (its first class).
fn has_class(h: &impl Heap, syms: &BcSymbols, x: usize, name: &[u8]) -> Option<bool> {
    let mut a = h.word(x + ATTRIB)?;
    for _ in 0..8 {
        if rheap::type_of(h, a)? != LISTSXP {
            return Some(false);
        }
        if h.word(a + TAG)? == syms.class {
            let v = rheap::car(h, a)?;
            if rheap::type_of(h, v)? != STRSXP || rheap::length(h, v)? == 0 {
                return Some(false);
            }
            let c = h.word(rheap::data(h, v)?)?;
            let n = rheap::length(h, c)?;
            if n != name.len() {
                return Some(false);
            }
            let mut buf = [0u8; 32];
            let buf = buf.get_mut(..n)?;
            h.bytes(rheap::data(h, c)?, buf)?;
            return Some(buf == name);
        }
        a = rheap::cdr(h, a)?;
    }
    Some(false)
}

/// The constant that a location table (`name`: "expressionsIndex" or
/// "srcrefsIndex") of `body` gives for code unit `relpc`.
pub fn located(h: &impl Heap, syms: &BcSymbols, body: usize, name: &[u8], relpc: usize) -> Option<usize> {
    let consts = rheap::cdr(h, body)?;
    let n = rheap::length(h, consts)?;
    // The tables are the last constants (R's findLocTable looks there).
    let table = (n.saturating_sub(4)..n).rev().find_map(|i| {
        let t = element(h, consts, i)?;
        (rheap::type_of(h, t)? == INTSXP && has_class(h, syms, t, name)?).then_some(t)
    })?;
    if relpc >= rheap::length(h, table)? {
        return None;
    }
    let idx = h.int(rheap::data(h, table)? + relpc * 4)?;
    element(h, consts, usize::try_from(idx).ok()?)
}

/// The value bound to `sym` in environment `env` (hashed or not), if it is
/// an ordinary binding. `nil`: R's NULL.
pub fn env_value(h: &impl Heap, env: usize, sym: usize, nil: usize) -> Option<usize> {
    const ENVSXP: u8 = 4;
    const FRAME: usize = 32;
    const HASHTAB: usize = 48;
    if rheap::type_of(h, env)? != ENVSXP {
        return None;
    }
    let in_chain = |mut cell: usize| -> Option<usize> {
        for _ in 0..10_000 {
            if cell == nil || rheap::type_of(h, cell)? != LISTSXP {
                return None;
            }
            if h.word(cell + TAG)? == sym {
                return rheap::car(h, cell);
            }
            cell = rheap::cdr(h, cell)?;
        }
        None
    };
    let table = h.word(env + HASHTAB)?;
    if table == nil {
        return in_chain(h.word(env + FRAME)?);
    }
    let buckets = rheap::length(h, table)?.min(100_000);
    (0..buckets).find_map(|i| in_chain(element(h, table, i)?))
}

/// The line and srcfile of a srcref (an integer vector with a `srcfile`
/// attribute).
pub fn srcref_parts(h: &impl Heap, srcref: usize, srcfile_sym: usize) -> Option<(i32, usize)> {
    if rheap::type_of(h, srcref)? != INTSXP || rheap::length(h, srcref)? < 6 {
        return None;
    }
    let line = h.int(rheap::data(h, srcref)?)?;
    let mut a = h.word(srcref + ATTRIB)?;
    for _ in 0..8 {
        if rheap::type_of(h, a)? != LISTSXP {
            return None;
        }
        if h.word(a + TAG)? == srcfile_sym {
            return Some((line, rheap::car(h, a)?));
        }
        a = rheap::cdr(h, a)?;
    }
    None
}

/// Loops per code unit of compiled bodies, computed once per body: one
/// pass over the body gives every expression its loops, then every code
/// unit gets those of its expression. After that a position's loops cost a
/// lookup. Fixed storage (usable in the signal handler); when the units
/// are used up, everything is forgotten and filled again.
pub struct BodyTables {
    entries: Box<[BodyEntry]>,
    units: Box<[LoopPath]>,
    used: usize,
    nodes: Box<[(usize, LoopPath)]>,
    stack: Box<[(usize, LoopPath)]>,
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
const NODES: usize = 1 << 16;

impl Default for BodyTables {
    fn default() -> BodyTables {
        let mut t = BodyTables {
            entries: vec![BodyEntry::default(); BODIES].into_boxed_slice(),
            units: vec![LoopPath::default(); UNITS].into_boxed_slice(),
            used: 0,
            nodes: vec![(0, LoopPath::default()); NODES].into_boxed_slice(),
            stack: vec![(0, LoopPath::default()); 4096].into_boxed_slice(),
        };
        super::prefault(&mut t.entries);
        super::prefault(&mut t.units);
        super::prefault(&mut t.nodes);
        super::prefault(&mut t.stack);
        t
    }
}

impl BodyTables {
    /// The loops around code unit `relpc` of compiled `body`.
    pub fn loops_at(
        &mut self,
        h: &impl Heap,
        syms: &BcSymbols,
        body: usize,
        relpc: usize,
    ) -> Option<LoopPath> {
        let (code, consts) = (rheap::car(h, body)?, rheap::cdr(h, body)?);
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
        let e = self.fill(h, syms, body, code, consts)?;
        self.entries[slot] = e;
        (relpc < e.count as usize).then(|| self.units[e.first as usize + relpc])
    }

    fn forget(&mut self) {
        self.entries.fill(BodyEntry::default());
        self.used = 0;
    }

    /// Computes the loops of every code unit of `body`.
    fn fill(
        &mut self,
        h: &impl Heap,
        syms: &BcSymbols,
        body: usize,
        code: usize,
        consts: usize,
    ) -> Option<BodyEntry> {
        let units = code_range(h, body)?.1;
        if units > self.units.len() {
            return None;
        }
        if self.used + units > self.units.len() {
            self.forget();
        }
        let root = element(h, consts, 0)?;
        let n = paths_of_calls(h, syms, root, &mut self.stack, &mut self.nodes)?;
        let nodes = &mut self.nodes[..n];
        nodes.sort_unstable_by_key(|&(p, _)| p);
        // The expressions table (the last constants), then each unit's.
        let count = rheap::length(h, consts)?;
        let table = (count.saturating_sub(4)..count).rev().find_map(|i| {
            let t = element(h, consts, i)?;
            (rheap::type_of(h, t)? == INTSXP && has_class(h, syms, t, b"expressionsIndex")?).then_some(t)
        })?;
        let data = rheap::data(h, table)?;
        let first = self.used;
        for u in 0..units.min(rheap::length(h, table)?) {
            let expr = usize::try_from(h.int(data + u * 4)?).ok().and_then(|i| element(h, consts, i));
            let path = expr
                .and_then(|e| nodes.binary_search_by_key(&e, |&(p, _)| p).ok().map(|i| nodes[i].1))
                .unwrap_or_default();
            self.units[first + u] = path;
        }
        self.used += units;
        Some(BodyEntry { body, code, consts, first: first as u32, count: units as u32 })
    }
}

/// Every call inside `root` with the loops around it (outermost first; a
/// loop counts for itself), into `out`; returns how many. None if they do
/// not fit.
fn paths_of_calls(
    h: &impl Heap,
    syms: &BcSymbols,
    root: usize,
    stack: &mut [(usize, LoopPath)],
    out: &mut [(usize, LoopPath)],
) -> Option<usize> {
    let mut top = 0;
    let mut n = 0;
    let push =
        |stack: &mut [(usize, LoopPath)], top: &mut usize, node: usize, path: LoopPath| -> Option<()> {
            *stack.get_mut(*top)? = (node, path);
            *top += 1;
            Some(())
        };
    push(stack, &mut top, root, LoopPath::default())?;
    while top > 0 {
        top -= 1;
        let (node, path) = stack[top];
        let kind = rheap::type_of(h, node).unwrap_or(0);
        if kind != LANGSXP && kind != LISTSXP {
            continue;
        }
        let head = rheap::car(h, node)?;
        let args = rheap::cdr(h, node)?;
        if kind == LISTSXP {
            push(stack, &mut top, head, path)?;
            push(stack, &mut top, args, path)?;
            continue;
        }
        let loop_kind = match head {
            s if s == syms.for_ => FOR,
            s if s == syms.while_ => WHILE,
            s if s == syms.repeat => REPEAT,
            _ => 0,
        };
        let own = if loop_kind != 0 { path.push(loop_kind) } else { path };
        *out.get_mut(n)? = (node, own);
        n += 1;
        match loop_kind {
            FOR => {
                let seq_cell = rheap::cdr(h, args)?;
                let body_cell = rheap::cdr(h, seq_cell)?;
                push(stack, &mut top, rheap::car(h, seq_cell)?, path)?;
                push(stack, &mut top, rheap::car(h, body_cell)?, own)?;
            }
            0 => {
                push(stack, &mut top, head, path)?;
                push(stack, &mut top, args, path)?;
            }
            _ => push(stack, &mut top, args, own)?,
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::rheap::tests::FakeHeap;

    struct Fixture {
        h: FakeHeap,
        syms: BcSymbols,
    }

    fn fixture() -> Fixture {
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
        let clo = h.cons(CLOSXP, 0x42, 0x42);
        h.words.insert(clo + BODY, body);
        assert_eq!(closure_code(&h, clo), Some(body));
    }

    #[test]
    fn body_tables_give_each_unit_its_loops() {
        let Fixture { mut h, syms } = fixture();
        let (g, i, y, brace) = (h.symbol("g"), h.symbol("i"), h.symbol("y"), h.symbol("{"));
        let g_call = h.call(g, &[i]);
        let for_call = h.call(syms.for_, &[i, y, g_call]);
        let body_expr = h.call(brace, &[for_call]);
        // Units: version, for setup (for), g(i) (g_call) x2, step (for).
        let code = h.ints(&[12, 0, 1, 0, 2, 0, 3, 0, 4, 0]);
        let exprs = h.ints(&[0, 1, 2, 2, 1]);
        let class = h.string("expressionsIndex");
        h.attr(exprs, syms.class, class);
        let consts = h.list(&[body_expr, for_call, g_call, exprs]);
        let body = h.cons(BCODESXP, code, consts);
        let mut t = BodyTables::default();
        let at = |t: &mut BodyTables, pc| t.loops_at(&h, &syms, body, pc).map(|p| p.len());
        assert_eq!(at(&mut t, 0), Some(0), "the version word: no expression inside a loop");
        assert_eq!(at(&mut t, 2), Some(1));
        assert_eq!(at(&mut t, 4), Some(1), "the loop's own step");
        assert_eq!(at(&mut t, 5), None, "past the code");
        assert_eq!(t.used, 5, "computed once");
        // Another body at the same address (other vectors): computed anew.
        let code2 = h.ints(&[12, 0, 1, 0]);
        let exprs2 = h.ints(&[0, 0]);
        h.attr(exprs2, syms.class, class);
        let consts2 = h.list(&[g_call, exprs2]);
        h.words.insert(body + 32, code2);
        h.words.insert(body + 40, consts2);
        assert_eq!(t.loops_at(&h, &syms, body, 1).map(|p| p.len()), Some(0));
        assert_eq!(t.used, 7);
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
