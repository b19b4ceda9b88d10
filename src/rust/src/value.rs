//! Results of entry points as plain Rust values, and the one place where
//! they become R objects.
//!
//! Every R allocation winch makes happens in [`to_r`], inside
//! `R_ToplevelExec`: if R raises an error there (out of memory), it ends at
//! that boundary, and the entry point returns `NULL`. That error still
//! `longjmp`s over the Rust frames below `R_ToplevelExec`, which is sound
//! only for frames that own nothing with a destructor: the frames here hold
//! references and plain values only (strings are formatted on the stack, the
//! string cache is owned by `to_r`, outside the jump).

use crate::rapi::{self, Sexp};
use crate::string_pool::{self, Key, Pool};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::MutexGuard;
use winch_core::modules::ModuleMap;
use winch_core::FastMap;

/// An R value to be made.
pub enum RValue {
    Lgl(Vec<bool>),
    Int(Vec<Option<i32>>),
    Dbl(Vec<f64>),
    Str(Vec<Option<String>>),
    /// A named list.
    List(Vec<(&'static str, RValue)>),
    /// A list without names.
    Unnamed(Vec<RValue>),
    /// A value that makes itself (a data frame of native frames).
    Built(Box<dyn Build + Send>),
    /// `NULL`.
    Null,
    /// A character scalar (NA for None) of a few fixed values, made once
    /// and shared by every result (R copies it before any change).
    Shared(Option<&'static str>),
}

/// A value that knows how to make itself in R.
pub trait Build {
    /// Makes the value; R may raise an error at any allocation.
    ///
    /// # Safety
    /// As for [`build`]: R's main thread, inside `R_ToplevelExec`; the
    /// result is unprotected.
    unsafe fn build(&self, strings: &mut StringCache) -> Sexp;
}

impl From<bool> for RValue {
    fn from(x: bool) -> RValue {
        RValue::Lgl(vec![x])
    }
}

impl From<i32> for RValue {
    fn from(x: i32) -> RValue {
        RValue::Int(vec![Some(x)])
    }
}

impl From<f64> for RValue {
    fn from(x: f64) -> RValue {
        RValue::Dbl(vec![x])
    }
}

impl From<String> for RValue {
    fn from(x: String) -> RValue {
        RValue::Str(vec![Some(x)])
    }
}

impl From<Option<String>> for RValue {
    fn from(x: Option<String>) -> RValue {
        RValue::Str(vec![x])
    }
}

impl From<Vec<String>> for RValue {
    fn from(x: Vec<String>) -> RValue {
        RValue::Str(x.into_iter().map(Some).collect())
    }
}

impl From<Scalar<'_>> for RValue {
    fn from(x: Scalar<'_>) -> RValue {
        match x {
            Scalar::Lgl(x) => RValue::Lgl(vec![x]),
            Scalar::Int(x) => RValue::Int(vec![Some(x)]),
            Scalar::Str(s) => RValue::Str(vec![s.map(str::to_string)]),
            Scalar::Shared(s) => RValue::Shared(s),
        }
    }
}

/// Makes `value` in R, or None if R could not allocate it.
pub fn to_r(value: &RValue) -> Option<Sexp> {
    // SAFETY: `build`'s contract is `make`'s.
    make(&mut |strings| unsafe { build(value, strings) })
}

/// What `make_r` makes with a string cache: runs inside `R_ToplevelExec` on
/// R's main thread, may allocate, and returns its object unprotected.
pub type Maker<'a> = dyn FnMut(&mut StringCache) -> Sexp + 'a;

/// Runs `maker` inside `R_ToplevelExec` with a string cache of its own;
/// its object, or None if R could not allocate it (the error ends at that
/// boundary). On R's main thread.
pub fn make(maker: &mut Maker) -> Option<Sexp> {
    let mut strings = StringCache::default();
    let mut job = Job { maker, strings: &mut strings, out: None, slot: 0 };
    // SAFETY: callers run on R's main thread. The result is kept in a slot
    // of R's protection stack pushed here (an error inside R_ToplevelExec
    // leaves the stack as it was at its start, slot included); `run`
    // touches only `job`, which outlives the call.
    unsafe {
        rapi::R_ProtectWithIndex(rapi::R_NilValue, &mut job.slot);
        let ok = rapi::R_ToplevelExec(run, &mut job as *mut Job as *mut c_void);
        // Unprotected right before it is returned, with no allocation in
        // between.
        rapi::Rf_unprotect(1);
        job.out.filter(|_| ok != 0)
    }
}

struct Job<'a, 'b> {
    maker: &'a mut Maker<'b>,
    strings: &'a mut StringCache,
    out: Option<Sexp>,
    /// The protection slot the result goes to.
    slot: c_int,
}

extern "C" fn run(data: *mut c_void) {
    // SAFETY: `data` is the `Job` passed by `make`, alive for this call.
    let job = unsafe { &mut *(data as *mut Job) };
    let (maker, strings, slot) = (&mut *job.maker, &mut *job.strings, job.slot);
    // A panic must not unwind into R's C frames.
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let x = maker(strings);
        // SAFETY: inside R_ToplevelExec on R's main thread (see `make`);
        // `slot` was pushed by `make` below this context.
        unsafe { rapi::R_Reprotect(x, slot) };
        x
    }));
    job.out = built.ok();
}

/// Builds one value; R may raise an error at any allocation.
///
/// # Safety
/// R's main thread, inside `R_ToplevelExec`. The result is unprotected: the
/// caller protects or stores it before R allocates again.
unsafe fn build(value: &RValue, strings: &mut StringCache) -> Sexp {
    // SAFETY: the caller's contract; each vector is filled
    // within its length, and every object made while another is pending is
    // protected first (see the helpers).
    unsafe {
        match value {
            RValue::Lgl(v) if v.len() == 1 => rapi::Rf_ScalarLogical(v[0] as c_int),
            RValue::Lgl(v) => fill(rapi::LGLSXP, v.len(), |p| {
                let p = p as *mut i32;
                v.iter().enumerate().for_each(|(i, &x)| *p.add(i) = x as i32)
            }),
            RValue::Int(v) => fill(rapi::INTSXP, v.len(), |p| {
                let p = p as *mut i32;
                v.iter().enumerate().for_each(|(i, &x)| *p.add(i) = x.unwrap_or(rapi::R_NaInt))
            }),
            RValue::Dbl(v) => fill(rapi::REALSXP, v.len(), |p| {
                let p = p as *mut f64;
                v.iter().enumerate().for_each(|(i, &x)| *p.add(i) = x)
            }),
            RValue::Str(v) => {
                let x = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, v.len() as isize));
                for (i, s) in v.iter().enumerate() {
                    let c = match s {
                        Some(s) => rapi::mkchar(s),
                        None => rapi::R_NaString,
                    };
                    rapi::SET_STRING_ELT(x, i as isize, c);
                }
                rapi::Rf_unprotect(1);
                x
            }
            RValue::List(items) => {
                let x = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, items.len() as isize));
                for (i, (_, item)) in items.iter().enumerate() {
                    rapi::SET_VECTOR_ELT(x, i as isize, build(item, strings));
                }
                set_static_names(x, items.len(), strings, |i| items[i].0);
                rapi::Rf_unprotect(1);
                x
            }
            RValue::Unnamed(items) => {
                let x = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, items.len() as isize));
                for (i, item) in items.iter().enumerate() {
                    rapi::SET_VECTOR_ELT(x, i as isize, build(item, strings));
                }
                rapi::Rf_unprotect(1);
                x
            }
            RValue::Built(b) => b.build(strings),
            RValue::Null => rapi::R_NilValue,
            RValue::Shared(v) => string_pool::shared_string(*v),
        }
    }
}

/// A vector of `kind` and length `n`, its data written by `write`.
///
/// # Safety
/// As for [`build`]; `write` must stay within `n` elements of `kind`.
pub unsafe fn fill(kind: i32, n: usize, write: impl FnOnce(*mut c_void)) -> Sexp {
    // SAFETY: the caller's contract; `write` allocates nothing.
    unsafe {
        let x = rapi::Rf_allocVector(kind, n as isize);
        let data: *mut c_void = match kind {
            rapi::LGLSXP => rapi::LOGICAL(x) as *mut c_void,
            rapi::INTSXP => rapi::INTEGER(x) as *mut c_void,
            _ => rapi::REAL(x) as *mut c_void,
        };
        write(data);
        x
    }
}

/// Sets the `names` of the protected object `x` to `name(0..n)`.
///
/// # Safety
/// As for [`build`]; `x` protected.
pub unsafe fn set_names<'a>(x: Sexp, n: usize, name: impl Fn(usize) -> &'a str) {
    // SAFETY: the caller's contract.
    unsafe { set_names_from(x, n, |i| rapi::mkchar(name(i))) }
}

/// [`set_names`] for static names, whose CHARSXPs are pooled.
///
/// # Safety
/// As for [`set_names`].
pub unsafe fn set_static_names(
    x: Sexp,
    n: usize,
    strings: &mut StringCache,
    name: impl Fn(usize) -> &'static str,
) {
    // SAFETY: the caller's contract.
    unsafe { set_names_from(x, n, |i| strings.text(name(i))) }
}

/// Sets the `names` of the protected object `x` to the CHARSXPs
/// `charsxp(0..n)`.
///
/// # Safety
/// As for [`set_names`]; each CHARSXP is stored before the next is made.
unsafe fn set_names_from(x: Sexp, n: usize, mut charsxp: impl FnMut(usize) -> Sexp) {
    // SAFETY: the caller's contract; `v` is protected while CHARSXPs are
    // made and stored one at a time.
    unsafe {
        let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, n as isize));
        for i in 0..n {
            rapi::SET_STRING_ELT(v, i as isize, charsxp(i));
        }
        rapi::Rf_setAttrib(x, rapi::sym(c"names"), v);
        rapi::Rf_unprotect(1);
    }
}

/// Sets attribute `name` of the protected object `x` to `value`.
///
/// # Safety
/// As for [`build`]; `x` protected.
pub unsafe fn set_attr(x: Sexp, name: &std::ffi::CStr, value: &RValue, strings: &mut StringCache) {
    // SAFETY: the caller's contract; the value is protected while the
    // symbol is looked up (which may allocate).
    unsafe {
        let v = rapi::Rf_protect(build(value, strings));
        rapi::Rf_setAttrib(x, rapi::sym(name), v);
        rapi::Rf_unprotect(1);
    }
}

/// A scalar value borrowed from typed facts, made in R without owning
/// anything (an R error may jump over the frame that makes it): what
/// [`RValue`]'s scalars make, for attributes set while a result is built.
#[derive(Clone, Copy)]
pub enum Scalar<'a> {
    Lgl(bool),
    Int(i32),
    /// A string (NA for None).
    Str(Option<&'a str>),
    /// As [`RValue::Shared`].
    Shared(Option<&'static str>),
}

/// Makes `value` in R.
///
/// # Safety
/// As for [`build`]; the result is unprotected.
unsafe fn scalar(value: Scalar) -> Sexp {
    // SAFETY: the caller's contract; each vector is filled before R
    // allocates again, a string's CHARSXP is made before its vector.
    unsafe {
        match value {
            Scalar::Lgl(x) => rapi::Rf_ScalarLogical(x as c_int),
            Scalar::Int(x) => rapi::Rf_ScalarInteger(x),
            Scalar::Str(s) => {
                let c = rapi::Rf_protect(s.map_or(rapi::R_NaString, |s| rapi::mkchar(s)));
                let x = rapi::Rf_allocVector(rapi::STRSXP, 1);
                rapi::SET_STRING_ELT(x, 0, c);
                rapi::Rf_unprotect(1);
                x
            }
            Scalar::Shared(v) => string_pool::shared_string(v),
        }
    }
}

/// Sets attribute `name` of the protected object `x` to `value`.
///
/// # Safety
/// As for [`build`]; `x` protected.
pub unsafe fn set_scalar_attr(x: Sexp, name: &std::ffi::CStr, value: Scalar) {
    // SAFETY: the caller's contract; the value is protected while the
    // symbol is looked up (which may allocate).
    unsafe {
        let v = rapi::Rf_protect(scalar(value));
        rapi::Rf_setAttrib(x, rapi::sym(name), v);
        rapi::Rf_unprotect(1);
    }
}

/// Sets attribute `name` of the protected object `x` to the named list
/// `items`.
///
/// # Safety
/// As for [`build`]; `x` protected.
pub unsafe fn set_list_attr(
    x: Sexp,
    name: &std::ffi::CStr,
    items: &[(&'static str, Scalar)],
    strings: &mut StringCache,
) {
    // SAFETY: the caller's contract; the list is protected while its
    // elements, names and the symbol are made.
    unsafe {
        let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, items.len() as isize));
        for (i, (_, item)) in items.iter().enumerate() {
            rapi::SET_VECTOR_ELT(v, i as isize, scalar(*item));
        }
        set_static_names(v, items.len(), strings, |i| items[i].0);
        rapi::Rf_setAttrib(x, rapi::sym(name), v);
        rapi::Rf_unprotect(1);
    }
}

/// CHARSXPs made so far in one result, by what they were made from:
/// captures repeat the same few strings (module paths, function names,
/// return addresses of recursive calls) many times. A CHARSXP is cached
/// right after it is made and is stored by the caller before R allocates
/// again; R keeps every CHARSXP of a live vector alive. Addresses and
/// names are kept between results too (see `string_pool`), unless a
/// nested result is being made.
pub struct StringCache {
    pool: Option<MutexGuard<'static, Option<Pool>>>,
    arcs: FastMap<usize, Sexp>,
    ips: FastMap<usize, Sexp>,
    offsets: FastMap<usize, Sexp>,
    modules: FastMap<(usize, usize), Sexp>,
}

impl Default for StringCache {
    fn default() -> StringCache {
        StringCache {
            pool: string_pool::take(),
            // Empty until used: most results now make few strings here
            // (frame tables' columns are made when read).
            arcs: FastMap::default(),
            ips: FastMap::default(),
            offsets: FastMap::default(),
            modules: FastMap::default(),
        }
    }
}

impl StringCache {
    /// The pooled CHARSXP for `key`, or the one `make` makes, pooled.
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    unsafe fn pooled(
        &mut self,
        key: Key,
        arc: Option<&Arc<str>>,
        make: impl FnOnce() -> Sexp,
    ) -> Option<Sexp> {
        let pool = self.pool.as_mut()?.get_or_insert_with(Pool::default);
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(c) = pool.get(key) {
                return Some(c);
            }
            let c = make();
            pool.put(key, c, arc);
            Some(c)
        }
    }

    /// The CHARSXP for an optional shared string.
    ///
    /// # Safety
    /// As for [`build`]; the result is stored before R allocates again.
    pub unsafe fn arc(&mut self, s: Option<&Arc<str>>) -> Sexp {
        // SAFETY: the caller's contract.
        unsafe {
            let Some(s) = s else { return rapi::R_NaString };
            let key = Arc::as_ptr(s) as *const u8 as usize;
            // This result's own few strings first (a small, hot table),
            // then the pool's.
            if let Some(&c) = self.arcs.get(&key) {
                return c;
            }
            let c =
                self.pooled(Key::Arc(key), Some(s), || rapi::mkchar(s)).unwrap_or_else(|| rapi::mkchar(s));
            self.arcs.insert(key, c);
            c
        }
    }

    /// 16 lowercase hex digits (`ip`), or "0x..." (`offset`).
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    pub unsafe fn hex(&mut self, value: usize, prefixed: bool) -> Sexp {
        let make = || {
            // Formatted on the stack: nothing to drop if R's allocation jumps.
            let mut buf = [0u8; 18];
            let text = hex(value, prefixed, &mut buf);
            // SAFETY: the caller's contract.
            unsafe { rapi::mkchar(text) }
        };
        let cache = if prefixed { &self.offsets } else { &self.ips };
        if let Some(&c) = cache.get(&value) {
            return c;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { self.pooled(Key::Hex { value, prefixed }, None, make) }.unwrap_or_else(make);
        let cache = if prefixed { &mut self.offsets } else { &mut self.ips };
        cache.insert(value, c);
        c
    }

    /// The CHARSXP of the label of an unnamed native frame (see
    /// `winch_core::view::unnamed_label`).
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    pub unsafe fn unnamed(&mut self, start: Option<usize>, offset: usize) -> Sexp {
        // Formatted on the stack: nothing to drop if R's allocation jumps.
        let mut buf = [0u8; 24];
        let mut len = 0;
        winch_core::view::write_unnamed_label(start, offset, |b| {
            let n = b.len().min(buf.len() - len);
            buf[len..len + n].copy_from_slice(&b[..n]);
            len += n;
        });
        let make = || {
            // SAFETY: the caller's contract; the label is ASCII.
            unsafe { rapi::mkchar(std::str::from_utf8(&buf[..len]).unwrap_or("")) }
        };
        let key = Key::Label { start: start.unwrap_or(usize::MAX), offset };
        // SAFETY: the caller's contract.
        unsafe { self.pooled(key, None, make) }.unwrap_or_else(make)
    }

    /// The CHARSXP of a static string.
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    pub unsafe fn text(&mut self, s: &'static str) -> Sexp {
        let key = s.as_ptr() as usize;
        // SAFETY: the caller's contract.
        if let Some(c) = unsafe { self.pooled(Key::Static(key), None, || rapi::mkchar(s)) } {
            return c;
        }
        if let Some(&c) = self.arcs.get(&key) {
            return c;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { rapi::mkchar(s) };
        self.arcs.insert(key, c);
        c
    }

    /// The CHARSXP of the path of module `m` of `map`, cached by map and
    /// index for this result (a throw's frames may come from another map
    /// than the stack's), and kept by its text between results.
    ///
    /// # Safety
    /// As for [`StringCache::arc`]; `map` lives until the result is made.
    pub unsafe fn module(&mut self, map: &ModuleMap, m: usize) -> Sexp {
        let key = (map as *const ModuleMap as usize, m);
        if let Some(&c) = self.modules.get(&key) {
            return c;
        }
        let path = map.module(m).path.as_str();
        // SAFETY: the caller's contract.
        let c = unsafe {
            match self.pool.as_mut() {
                Some(pool) => pool.get_or_insert_with(Pool::default).path(path, || rapi::mkchar(path)),
                None => rapi::mkchar(path),
            }
        };
        self.modules.insert(key, c);
        c
    }
}

/// `value` as 16 lowercase hex digits, or as "0x..." without leading zeros
/// (`prefixed`), written into `buf`.
pub fn hex(value: usize, prefixed: bool, buf: &mut [u8; 18]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let len = if prefixed {
        let digits = ((usize::BITS - value.leading_zeros()).div_ceil(4)).max(1) as usize;
        buf[0] = b'0';
        buf[1] = b'x';
        for k in 0..digits {
            buf[2 + k] = DIGITS[(value >> (4 * (digits - 1 - k))) & 0xf];
        }
        2 + digits
    } else {
        for (k, b) in buf.iter_mut().take(16).enumerate() {
            *b = DIGITS[(value >> (60 - 4 * k)) & 0xf];
        }
        16
    };
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[..len]).unwrap_or("")
}
