//! The layout of R's objects (`SEXPREC`, Rinternals.h and Defn.h) on 64-bit
//! platforms, and the readers of their fields: every type code, header bit
//! and field offset winch relies on is written here, and nowhere else.
//!
//! An object starts with a header of four words: `sxpinfo` (the type code
//! in its low 5 bits, then flags), the attributes and the two links of the
//! garbage collector. Then come three words whose meaning depends on the
//! type (a node's `CAR`, `CDR` and `TAG`; a closure's formals, body and
//! environment; ...), or, for vectors, the length, the true length and the
//! data. This has been so since R 3.5; it is checked against R's API
//! before sampling (labels read here must match those R computes).
//!
//! Every read goes through a [`Memory`] and may fail (None): in a signal
//! handler [`crate::memory::Objects`] refuses implausible addresses, and
//! another process's memory may be gone.

use crate::memory::Memory;

/// R's type codes (`SEXPTYPE`, Rinternals.h).
pub const NILSXP: u8 = 0;
pub const SYMSXP: u8 = 1;
pub const LISTSXP: u8 = 2;
pub const CLOSXP: u8 = 3;
pub const ENVSXP: u8 = 4;
pub const PROMSXP: u8 = 5;
pub const LANGSXP: u8 = 6;
pub const SPECIALSXP: u8 = 7;
pub const BUILTINSXP: u8 = 8;
pub const CHARSXP: u8 = 9;
pub const LGLSXP: u8 = 10;
pub const INTSXP: u8 = 13;
pub const REALSXP: u8 = 14;
pub const CPLXSXP: u8 = 15;
pub const STRSXP: u8 = 16;
pub const VECSXP: u8 = 19;
pub const BCODESXP: u8 = 21;

/// Bits of `sxpinfo`: the type code, and the ALTREP flag (the object's
/// data is not in place).
const TYPE_MASK: usize = 0x1f;
const ALTREP_BIT: usize = 1 << 7;

/// Offsets of an object's fields: the header's, then, after it, those of
/// each kind of object. The layout is written whole: some offsets are
/// only used by the tests' synthetic objects.
#[cfg_attr(not(test), allow(dead_code))]
pub mod offset {
    /// The header: `sxpinfo` and the attributes (then the collector's two
    /// links, never read).
    pub const SXPINFO: usize = 0;
    pub const ATTRIB: usize = 8;
    /// Nodes (pairlists, calls, byte code: `CAR` is a body's code, `CDR`
    /// its constants).
    pub const CAR: usize = 32;
    pub const CDR: usize = 40;
    pub const TAG: usize = 48;
    /// Symbols: the name (a CHARSXP).
    pub const PRINTNAME: usize = 32;
    /// Closures.
    pub const FORMALS: usize = 32;
    pub const BODY: usize = 40;
    pub const CLOENV: usize = 48;
    /// Promises: the value once forced, the expression, the environment.
    pub const PRVALUE: usize = 32;
    pub const PRCODE: usize = 40;
    pub const PRENV: usize = 48;
    /// Environments: the frame (a pairlist of bindings), the enclosure,
    /// the hash table (a list of such pairlists, or NULL).
    pub const FRAME: usize = 32;
    pub const ENCLOS: usize = 40;
    pub const HASHTAB: usize = 48;
    /// Vectors (CHARSXPs too): the length, the true length, the data.
    pub const LENGTH: usize = 32;
    pub const TRUELENGTH: usize = 40;
    pub const DATA: usize = 48;
}
use offset::*;

/// Sizes of a vector's elements: a pointer (lists, character vectors), an
/// integer or logical, a double (written for the whole layout; nothing
/// reads doubles by index yet).
pub const POINTER_SIZE: usize = 8;
pub const INT_SIZE: usize = 4;
#[allow(dead_code)]
pub const DOUBLE_SIZE: usize = 8;

/// R's missing values: `NA_integer_` and `NA` (logical) are the smallest
/// int; `NA_real_` is a NaN whose low word is 1954.
pub const NA_INTEGER: i32 = i32::MIN;
pub const NA_LOGICAL: i32 = i32::MIN;
const NA_REAL_LOW_WORD: u64 = 1954;

/// Whether `x` is R's `NA_real_` (not any other NaN).
pub fn is_na_real(x: f64) -> bool {
    x.is_nan() && x.to_bits() & 0xffff_ffff == NA_REAL_LOW_WORD
}

/// An object's type code.
pub fn type_of(h: &impl Memory, x: usize) -> Option<u8> {
    Some((h.word(x + SXPINFO)? & TYPE_MASK) as u8)
}

/// Whether the object is an ALTREP object (its data is not in place).
pub fn is_altrep(h: &impl Memory, x: usize) -> Option<bool> {
    Some(h.word(x + SXPINFO)? & ALTREP_BIT != 0)
}

/// The attributes (a pairlist, or R's NULL).
pub fn attrib(h: &impl Memory, x: usize) -> Option<usize> {
    h.word(x + ATTRIB)
}

pub fn car(h: &impl Memory, x: usize) -> Option<usize> {
    h.word(x + CAR)
}

pub fn cdr(h: &impl Memory, x: usize) -> Option<usize> {
    h.word(x + CDR)
}

pub fn tag(h: &impl Memory, x: usize) -> Option<usize> {
    h.word(x + TAG)
}

/// A symbol's name (a CHARSXP).
pub fn printname(h: &impl Memory, sym: usize) -> Option<usize> {
    h.word(sym + PRINTNAME)
}

/// A closure's body (its type unchecked).
pub fn closure_body(h: &impl Memory, closure: usize) -> Option<usize> {
    h.word(closure + BODY)
}

/// A promise's expression.
pub fn promise_code(h: &impl Memory, promise: usize) -> Option<usize> {
    h.word(promise + PRCODE)
}

/// An environment's frame (the pairlist of its bindings when it is not
/// hashed).
pub fn env_frame(h: &impl Memory, env: usize) -> Option<usize> {
    h.word(env + FRAME)
}

/// An environment's hash table (R's NULL when it is not hashed).
pub fn env_hashtab(h: &impl Memory, env: usize) -> Option<usize> {
    h.word(env + HASHTAB)
}

/// The length of a vector (not ALTREP).
pub fn length(h: &impl Memory, x: usize) -> Option<usize> {
    if is_altrep(h, x)? {
        return None;
    }
    h.word(x + LENGTH)
}

/// The address of a vector's data (not ALTREP).
pub fn data(h: &impl Memory, x: usize) -> Option<usize> {
    if is_altrep(h, x)? {
        return None;
    }
    Some(x + DATA)
}

/// Element `i` of a list (VECSXP).
pub fn list_elt(h: &impl Memory, list: usize, i: usize) -> Option<usize> {
    if type_of(h, list)? != VECSXP || i >= length(h, list)? {
        return None;
    }
    h.word(data(h, list)? + i * POINTER_SIZE)
}

/// Whether `c` is a CHARSXP holding exactly `name` (names of at most 32
/// bytes; longer ones never match).
pub fn chars_equal(h: &impl Memory, c: usize, name: &[u8]) -> Option<bool> {
    if type_of(h, c)? != CHARSXP || length(h, c)? != name.len() {
        return Some(false);
    }
    let mut buf = [0u8; 32];
    let got = buf.get_mut(..name.len())?;
    h.bytes(data(h, c)?, got)?;
    Some(got == name)
}

/// Whether `x` is the symbol `known`, or, where that symbol's address is
/// not known (0: R read from outside, where only exported symbols are
/// found), a symbol whose name is `name`.
pub fn is_symbol(h: &impl Memory, x: usize, known: usize, name: &[u8]) -> bool {
    if known != 0 {
        return x == known;
    }
    let named = || -> Option<bool> {
        if type_of(h, x)? != SYMSXP {
            return Some(false);
        }
        chars_equal(h, printname(h, x)?, name)
    };
    named().unwrap_or(false)
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::memory::Image;

    /// A fake heap: objects laid out as R lays them out, at made-up
    /// addresses in an [`Image`].
    pub struct FakeHeap {
        pub mem: Image,
        next: usize,
    }

    /// What stands for R's NULL in a fake heap (not an object).
    pub const NIL: usize = 0x42;

    impl Default for FakeHeap {
        fn default() -> FakeHeap {
            FakeHeap { mem: Image::new(), next: 0x10_0000 }
        }
    }

    impl Memory for FakeHeap {
        fn read(&self, addr: usize, out: &mut [u8]) -> bool {
            self.mem.read(addr, out)
        }
    }

    impl FakeHeap {
        /// A new object of type `kind` with `extra` bytes after its header
        /// and three fields (zeroed: no attributes).
        pub fn alloc(&mut self, kind: u8, extra: usize) -> usize {
            let x = self.next;
            let size = DATA + extra;
            self.next += (size + 0x10f) & !0xff;
            self.mem.put(x, vec![0; size]);
            self.mem.put_word(x + SXPINFO, kind as usize);
            x
        }
        /// Sets word `offset` of object `x`.
        pub fn set(&mut self, x: usize, offset: usize, value: usize) {
            self.mem.put_word(x + offset, value);
        }
        /// A vector of `kind` with `len` elements and the bytes `data`.
        fn vector_of(&mut self, kind: u8, len: usize, data: &[u8]) -> usize {
            let x = self.alloc(kind, data.len());
            self.set(x, LENGTH, len);
            self.set(x, TRUELENGTH, len);
            self.mem.put_bytes(x + DATA, data);
            x
        }
        pub fn chars(&mut self, s: &str) -> usize {
            self.vector_of(CHARSXP, s.len(), s.as_bytes())
        }
        pub fn symbol(&mut self, name: &str) -> usize {
            let c = self.chars(name);
            let s = self.alloc(SYMSXP, 0);
            self.set(s, PRINTNAME, c);
            s
        }
        pub fn cons(&mut self, kind: u8, car: usize, cdr: usize) -> usize {
            let x = self.alloc(kind, 0);
            self.set(x, CAR, car);
            self.set(x, CDR, cdr);
            x
        }
        /// A call `f(args...)`.
        pub fn call(&mut self, f: usize, args: &[usize]) -> usize {
            let mut rest = NIL;
            for &a in args.iter().rev() {
                rest = self.cons(LISTSXP, a, rest);
            }
            self.cons(LANGSXP, f, rest)
        }
        /// An integer vector.
        pub fn ints(&mut self, v: &[i32]) -> usize {
            let bytes: Vec<u8> = v.iter().flat_map(|i| i.to_ne_bytes()).collect();
            self.vector_of(INTSXP, v.len(), &bytes)
        }
        /// A list of objects.
        pub fn list(&mut self, items: &[usize]) -> usize {
            let bytes: Vec<u8> = items.iter().flat_map(|i| i.to_ne_bytes()).collect();
            self.vector_of(VECSXP, items.len(), &bytes)
        }
        /// Sets `x`'s attributes to one tagged value.
        pub fn attr(&mut self, x: usize, tag: usize, value: usize) {
            let cell = self.cons(LISTSXP, value, NIL);
            self.set(cell, TAG, tag);
            self.set(x, ATTRIB, cell);
        }
        /// A character vector of one string.
        pub fn string(&mut self, s: &str) -> usize {
            let c = self.chars(s);
            self.vector(STRSXP, c)
        }
        /// A vector of one element, whose word is `word`.
        pub fn vector(&mut self, kind: u8, word: usize) -> usize {
            self.vector_of(kind, 1, &word.to_ne_bytes())
        }
        /// A closure with body `body` (no formals, no environment).
        pub fn closure(&mut self, body: usize) -> usize {
            let c = self.alloc(CLOSXP, 0);
            self.set(c, FORMALS, NIL);
            self.set(c, BODY, body);
            self.set(c, CLOENV, NIL);
            c
        }
        /// A promise of `code` not forced yet, to be evaluated in `env`.
        pub fn promise(&mut self, code: usize, env: usize) -> usize {
            let p = self.alloc(PROMSXP, 0);
            self.set(p, PRVALUE, NIL);
            self.set(p, PRCODE, code);
            self.set(p, PRENV, env);
            p
        }
        /// A pairlist node: `value` tagged `tag`, then `next`.
        pub fn tagged(&mut self, tag: usize, value: usize, next: usize) -> usize {
            let cell = self.cons(LISTSXP, value, next);
            self.set(cell, TAG, tag);
            cell
        }
        /// An environment: its frame and hash table.
        pub fn env(&mut self, frame: usize, hashtab: usize) -> usize {
            let e = self.alloc(ENVSXP, 0);
            self.set(e, FRAME, frame);
            self.set(e, ENCLOS, NIL);
            self.set(e, HASHTAB, hashtab);
            e
        }
    }

    #[test]
    fn na_real_is_one_nan_among_many() {
        assert!(is_na_real(f64::from_bits(0x7ff0_0000_0000_07a2)));
        assert!(!is_na_real(f64::NAN));
        assert!(!is_na_real(1954.0));
    }

    #[test]
    fn the_type_is_the_low_five_bits_of_the_header() {
        let mut h = FakeHeap::default();
        let x = h.alloc(CLOSXP, 0);
        // OBJECT, NAMED and gp bits set around the type.
        h.set(x, SXPINFO, CLOSXP as usize | 1 << 6 | 0xffff << 16);
        assert_eq!(type_of(&h, x), Some(CLOSXP));
        assert_eq!(is_altrep(&h, x), Some(false));
        assert_eq!(type_of(&h, 0xdead_0000), None, "unreadable");
    }

    #[test]
    fn vectors_have_length_and_data_unless_altrep() {
        let mut h = FakeHeap::default();
        let v = h.ints(&[7, 8, 9]);
        assert_eq!(type_of(&h, v), Some(INTSXP));
        assert_eq!(length(&h, v), Some(3));
        assert_eq!(data(&h, v), Some(v + 48));
        assert_eq!(h.int(data(&h, v).unwrap() + 2 * INT_SIZE), Some(9));
        h.set(v, SXPINFO, INTSXP as usize | 1 << 7);
        assert_eq!(is_altrep(&h, v), Some(true));
        assert_eq!((length(&h, v), data(&h, v)), (None, None), "an ALTREP's data is not in place");
        let (a, b) = (h.symbol("a"), h.symbol("b"));
        let l = h.list(&[a, b]);
        assert_eq!(list_elt(&h, l, 1), Some(b));
        assert_eq!(list_elt(&h, l, 2), None, "past the end");
        assert_eq!(list_elt(&h, v, 0), None, "not a list");
    }

    #[test]
    fn nodes_symbols_and_strings() {
        let mut h = FakeHeap::default();
        let f = h.symbol("f");
        let x = h.symbol("x");
        let call = h.call(f, &[x]);
        assert_eq!(type_of(&h, call), Some(LANGSXP));
        assert_eq!(car(&h, call), Some(f));
        let args = cdr(&h, call).unwrap();
        assert_eq!((type_of(&h, args), car(&h, args), cdr(&h, args)), (Some(LISTSXP), Some(x), Some(NIL)));
        h.attr(call, x, f);
        let a = attrib(&h, call).unwrap();
        assert_eq!((tag(&h, a), car(&h, a)), (Some(x), Some(f)));
        let name = printname(&h, f).unwrap();
        assert_eq!(chars_equal(&h, name, b"f"), Some(true));
        assert_eq!(chars_equal(&h, name, b"g"), Some(false));
        assert_eq!(chars_equal(&h, f, b"f"), Some(false), "a symbol is not a CHARSXP");
        assert!(is_symbol(&h, f, 0, b"f"), "told by name");
        assert!(is_symbol(&h, f, f, b"other"), "told by address");
        assert!(!is_symbol(&h, x, f, b"x"), "a known address decides");
        assert!(!is_symbol(&h, name, 0, b"f"), "a CHARSXP is not a symbol");
    }

    #[test]
    fn closures_promises_and_environments() {
        let mut h = FakeHeap::default();
        let f = h.symbol("f");
        let body = h.call(f, &[]);
        let clo = h.closure(body);
        assert_eq!(closure_body(&h, clo), Some(body));
        let env = h.env(NIL, NIL);
        let p = h.promise(body, env);
        assert_eq!(type_of(&h, p), Some(PROMSXP));
        assert_eq!(promise_code(&h, p), Some(body), "the expression, not the environment");
        let cell = h.cons(LISTSXP, clo, NIL);
        let table = h.list(&[cell]);
        let hashed = h.env(NIL, table);
        assert_eq!((env_frame(&h, hashed), env_hashtab(&h, hashed)), (Some(NIL), Some(table)));
        assert_eq!(env_hashtab(&h, env), Some(NIL));
    }
}
