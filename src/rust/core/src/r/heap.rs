//! The labels `Rprof()` gives R frames, read from R's objects (see
//! [`super::sexp`] for their layout) in a fixed buffer: usable in a signal
//! handler.
//!
//! The handler reads only objects that are alive while it runs: the calls,
//! symbols and strings reachable from the context records of R's current
//! evaluation (R's own profiler reads the same objects from its handler).
//! R never moves objects, so such a read sees a whole object. Before
//! sampling starts, labels read here are checked against those R
//! computes for the same calls.
//!
//! Every read goes through a [`Memory`]: in a signal handler
//! [`crate::memory::Objects`], which refuses null, misaligned or implausible
//! addresses, so a damaged pointer ends a label, not the process, in the
//! cases that can be detected.

use super::sexp::{
    car, cdr, data, is_na_real, length, printname, type_of, CHARSXP, INTSXP, LANGSXP, REALSXP, STRSXP, SYMSXP,
};
use crate::memory::Memory;

/// Appends the bytes of a CHARSXP to `out` (as many as fit).
pub fn push_chars(h: &impl Memory, c: usize, out: &mut Buf) -> Option<()> {
    if type_of(h, c)? != CHARSXP {
        return None;
    }
    let n = length(h, c)?.min(out.room());
    let at = out.len;
    h.bytes(data(h, c)?, &mut out.bytes[at..at + n])?;
    out.len += n;
    Some(())
}

/// Appends a symbol's name.
fn push_symbol(h: &impl Memory, s: usize, out: &mut Buf) -> Option<()> {
    if type_of(h, s)? != SYMSXP {
        return None;
    }
    push_chars(h, printname(h, s)?, out)
}

/// A fixed buffer for one label.
pub struct Buf {
    pub bytes: [u8; LABEL_MAX],
    pub len: usize,
}

/// Labels longer than this are cut.
pub const LABEL_MAX: usize = 256;

impl Default for Buf {
    fn default() -> Buf {
        Buf { bytes: [0; LABEL_MAX], len: 0 }
    }
}

impl Buf {
    fn room(&self) -> usize {
        LABEL_MAX - self.len
    }

    fn push(&mut self, s: &[u8]) {
        let n = s.len().min(self.room());
        self.bytes[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn push_int(&mut self, v: i64) {
        let mut digits = [0u8; 20];
        let mut k = digits.len();
        let mut m = v.unsigned_abs();
        loop {
            k -= 1;
            digits[k] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if v < 0 {
            self.push(b"-");
        }
        self.push(&digits[k..]);
    }
}

/// The symbols the labels depend on (their addresses in this session).
#[derive(Clone, Copy, Debug, Default)]
pub struct Symbols {
    pub double_colon: usize,
    pub triple_colon: usize,
    pub dollar: usize,
    pub bracket2: usize,
}

/// What a call's function part is, for labelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// A symbol (its address): the label is its name, and can be cached
    /// by the symbol (symbols live as long as the session).
    Symbol(usize),
    /// Anything else: the label must be built.
    Other(usize),
}

/// The function part of a call, or None if `call` is not a call (R's
/// profiler leaves such frames out).
pub fn call_head(h: &impl Memory, call: usize) -> Option<Head> {
    if type_of(h, call)? != LANGSXP {
        return None;
    }
    let fun = car(h, call)?;
    Some(if type_of(h, fun)? == SYMSXP { Head::Symbol(fun) } else { Head::Other(fun) })
}

/// Writes the label `Rprof()` gives a call whose function part is `fun`
/// (R's `doprof()`): a symbol's name; `pkg::f`, `pkg:::f` and `obj$f` as
/// written when both sides are symbols; `x[[i]]` when `x` is a symbol and
/// `i` a symbol, string, integer or double; `<Anonymous>` otherwise.
pub fn label(h: &impl Memory, syms: &Symbols, fun: usize, out: &mut Buf) {
    out.len = 0;
    if build_label(h, syms, fun, out).is_none() {
        out.len = 0;
        out.push(b"<Anonymous>");
    }
}

fn build_label(h: &impl Memory, syms: &Symbols, fun: usize, out: &mut Buf) -> Option<()> {
    match type_of(h, fun)? {
        SYMSXP => return push_symbol(h, fun, out),
        LANGSXP => {}
        _ => return None,
    }
    let op = car(h, fun)?;
    let args = cdr(h, fun)?;
    let a1 = car(h, args)?;
    let a2 = car(h, cdr(h, args)?)?;
    if (op == syms.double_colon || op == syms.triple_colon || op == syms.dollar)
        && type_of(h, a1)? == SYMSXP
        && type_of(h, a2)? == SYMSXP
    {
        push_symbol(h, a1, out)?;
        push_symbol(h, op, out)?;
        return push_symbol(h, a2, out);
    }
    if op == syms.bracket2 && type_of(h, a1)? == SYMSXP {
        let kind = type_of(h, a2)?;
        if kind != SYMSXP && length(h, a2)? == 0 {
            return None;
        }
        push_symbol(h, a1, out)?;
        out.push(b"[[");
        match kind {
            SYMSXP => push_symbol(h, a2, out)?,
            STRSXP => {
                out.push(b"\"");
                push_chars(h, h.word(data(h, a2)?)?, out)?;
                out.push(b"\"");
            }
            INTSXP => out.push_int(h.word(data(h, a2)?)? as u32 as i32 as i64),
            REALSXP => push_double(out, f64::from_bits(h.word(data(h, a2)?)? as u64)),
            _ => return None,
        }
        out.push(b"]]");
        return Some(());
    }
    None
}

/// A double as R's profiler writes it (`pb_dbl`: NA, NaN, Inf, -Inf, or
/// the integer part).
fn push_double(out: &mut Buf, x: f64) {
    if x.is_nan() {
        out.push(if is_na_real(x) { b"NA" } else { b"NaN" });
    } else if x.is_infinite() {
        out.push(if x > 0.0 { b"Inf" } else { b"-Inf" });
    } else if x.abs() < 1e18 {
        out.push_int(x.trunc() as i64);
    } else {
        // Beyond i64: R prints every digit; keep the magnitude honest.
        out.push(if x < 0.0 { b"-" } else { b"" });
        out.push(b"1e");
        out.push_int(x.abs().log10().floor() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::r::sexp::{tests::FakeHeap, CLOSXP};

    fn label_of(h: &FakeHeap, syms: &Symbols, fun: usize) -> String {
        let mut b = Buf::default();
        label(h, syms, fun, &mut b);
        String::from_utf8(b.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn labels_as_rprof_writes_them() {
        let mut h = FakeHeap::default();
        let syms = Symbols {
            double_colon: h.symbol("::"),
            triple_colon: h.symbol(":::"),
            dollar: h.symbol("$"),
            bracket2: h.symbol("[["),
        };
        let f = h.symbol("f");
        assert_eq!(label_of(&h, &syms, f), "f");
        let (pkg, fun) = (h.symbol("stats"), h.symbol("median"));
        let e = h.call(syms.double_colon, &[pkg, fun]);
        assert_eq!(label_of(&h, &syms, e), "stats::median");
        let e = h.call(syms.triple_colon, &[pkg, fun]);
        assert_eq!(label_of(&h, &syms, e), "stats:::median");
        let obj = h.symbol("obj");
        let e = h.call(syms.dollar, &[obj, fun]);
        assert_eq!(label_of(&h, &syms, e), "obj$median");
        let idx = h.chars("a");
        let s = h.vector(STRSXP, idx);
        let e = h.call(syms.bracket2, &[obj, s]);
        assert_eq!(label_of(&h, &syms, e), "obj[[\"a\"]]");
        let i = h.vector(INTSXP, (-3i32) as u32 as usize);
        let e = h.call(syms.bracket2, &[obj, i]);
        assert_eq!(label_of(&h, &syms, e), "obj[[-3]]");
        let d = h.vector(REALSXP, 2.9f64.to_bits() as usize);
        let e = h.call(syms.bracket2, &[obj, d]);
        assert_eq!(label_of(&h, &syms, e), "obj[[2]]");
        let e = h.call(syms.bracket2, &[obj, obj]);
        assert_eq!(label_of(&h, &syms, e), "obj[[obj]]");
        // A string on the left, a call, a closure: anonymous.
        let e = h.call(syms.double_colon, &[s, fun]);
        assert_eq!(label_of(&h, &syms, e), "<Anonymous>");
        let g = h.symbol("g");
        let inner = h.call(g, &[]);
        assert_eq!(label_of(&h, &syms, inner), "<Anonymous>");
        let clo = h.alloc(CLOSXP, 0);
        assert_eq!(label_of(&h, &syms, clo), "<Anonymous>");
        // Unreadable memory: anonymous, not a crash.
        assert_eq!(label_of(&h, &syms, 0xdead_0000), "<Anonymous>");
    }

    #[test]
    fn call_heads_and_long_names() {
        let mut h = FakeHeap::default();
        let syms = Symbols::default();
        let f = h.symbol(&"x".repeat(1000));
        let call = h.call(f, &[]);
        assert_eq!(call_head(&h, call), Some(Head::Symbol(f)));
        assert_eq!(label_of(&h, &syms, f).len(), LABEL_MAX);
        let not_a_call = h.symbol("y");
        assert_eq!(call_head(&h, not_a_call), None);
    }

    #[test]
    fn doubles_as_r_writes_them() {
        let text = |x: f64| {
            let mut b = Buf::default();
            push_double(&mut b, x);
            String::from_utf8(b.as_bytes().to_vec()).unwrap()
        };
        assert_eq!(text(3.7), "3");
        assert_eq!(text(-2.5), "-2");
        assert_eq!(text(f64::INFINITY), "Inf");
        assert_eq!(text(f64::NEG_INFINITY), "-Inf");
        assert_eq!(text(f64::from_bits(0x7ff0_0000_0000_07a2)), "NA");
        assert_eq!(text(f64::NAN), "NaN");
    }
}
