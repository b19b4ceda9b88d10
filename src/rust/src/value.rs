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

use crate::frames::FrameTable;
use crate::rapi::{self, Sexp};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

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
    /// A data frame of native frames.
    Frames(Box<FrameTable>),
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

/// Makes `value` in R, or None if R could not allocate it.
pub fn to_r(value: &RValue) -> Option<Sexp> {
    let mut strings = StringCache::default();
    let mut job = Job { value, strings: &mut strings, out: None };
    // SAFETY: `.Call` runs on R's main thread; `run` touches only `job`,
    // which outlives the call.
    let ok = unsafe { rapi::R_ToplevelExec(run, &mut job as *mut Job as *mut c_void) };
    let out = job.out.filter(|_| ok != 0)?;
    // SAFETY: `out` was preserved by `run`; released right before it is
    // returned to R, with no allocation in between.
    unsafe { rapi::R_ReleaseObject(out) };
    Some(out)
}

struct Job<'a> {
    value: &'a RValue,
    strings: &'a mut StringCache,
    out: Option<Sexp>,
}

extern "C" fn run(data: *mut c_void) {
    // SAFETY: `data` is the `Job` passed by `to_r`, alive for this call.
    let job = unsafe { &mut *(data as *mut Job) };
    let (value, strings) = (job.value, &mut *job.strings);
    // A panic must not unwind into R's C frames.
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: inside R_ToplevelExec on R's main thread (see `to_r`).
        unsafe {
            let x = build(value, strings);
            rapi::R_PreserveObject(x);
            x
        }
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
                set_names(x, items.len(), |i| items[i].0);
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
            RValue::Frames(t) => build_frames(t, strings),
        }
    }
}

/// A vector of `kind` and length `n`, its data written by `write`.
///
/// # Safety
/// As for [`build`]; `write` must stay within `n` elements of `kind`.
unsafe fn fill(kind: i32, n: usize, write: impl FnOnce(*mut c_void)) -> Sexp {
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
unsafe fn set_names<'a>(x: Sexp, n: usize, name: impl Fn(usize) -> &'a str) {
    // SAFETY: the caller's contract; `v` is protected while CHARSXPs are
    // made and stored one at a time.
    unsafe {
        let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, n as isize));
        for i in 0..n {
            rapi::SET_STRING_ELT(v, i as isize, rapi::mkchar(name(i)));
        }
        rapi::Rf_setAttrib(x, rapi::sym(c"names"), v);
        rapi::Rf_unprotect(1);
    }
}

/// Sets attribute `name` of the protected object `x` to `value`.
///
/// # Safety
/// As for [`build`]; `x` protected.
unsafe fn set_attr(x: Sexp, name: &std::ffi::CStr, value: &RValue, strings: &mut StringCache) {
    // SAFETY: the caller's contract; the value is protected while the
    // symbol is looked up (which may allocate).
    unsafe {
        let v = rapi::Rf_protect(build(value, strings));
        rapi::Rf_setAttrib(x, rapi::sym(name), v);
        rapi::Rf_unprotect(1);
    }
}

/// The data frame of a frame table.
///
/// # Safety
/// As for [`build`].
unsafe fn build_frames(t: &FrameTable, strings: &mut StringCache) -> Sexp {
    let n = t.rows.len();
    let names = t.column_names();
    // SAFETY: the caller's contract; `df` is protected throughout and every
    // column is stored into it right after it is allocated.
    unsafe {
        let df = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, names.len() as isize));
        for (j, name) in names.iter().enumerate() {
            build_column(t, name, strings, df, j);
        }
        set_names(df, names.len(), |j| names[j]);
        let class = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
        rapi::SET_STRING_ELT(class, 0, rapi::mkchar("data.frame"));
        rapi::Rf_setAttrib(df, rapi::sym(c"class"), class);
        rapi::Rf_unprotect(1);
        // Compact row names: c(NA, -n).
        let row_names = rapi::Rf_protect(rapi::Rf_allocVector(rapi::INTSXP, 2));
        *rapi::INTEGER(row_names) = rapi::R_NaInt;
        *rapi::INTEGER(row_names).add(1) = -(n as i32);
        rapi::Rf_setAttrib(df, rapi::sym(c"row.names"), row_names);
        rapi::Rf_unprotect(1);
        for (name, value) in &t.attrs {
            set_attr(df, name, value, strings);
        }
        rapi::Rf_unprotect(1);
        df
    }
}

/// Column `name` of `t`, stored as element `j` of the protected `df`.
///
/// # Safety
/// As for [`build`]; `df` protected, a list with more than `j` elements.
unsafe fn build_column(t: &FrameTable, name: &str, strings: &mut StringCache, df: Sexp, j: usize) {
    let rows = &t.rows;
    let n = rows.len();
    // SAFETY: the caller's contract. Numeric columns are filled within
    // their length; string columns are stored into `df` before their
    // CHARSXPs are made, so they are protected while R allocates.
    unsafe {
        let col = match name {
            "is_libr" => fill(rapi::LGLSXP, n, |p| ints(p, rows.iter().map(|r| r.is_libr as i32))),
            "inlined" => fill(rapi::LGLSXP, n, |p| ints(p, rows.iter().map(|r| r.inlined as i32))),
            "approximate" => fill(rapi::LGLSXP, n, |p| ints(p, rows.iter().map(|r| r.approximate as i32))),
            "at_throw" => fill(rapi::LGLSXP, n, |p| ints(p, rows.iter().map(|r| r.at_throw as i32))),
            "line" => fill(rapi::INTSXP, n, |p| ints(p, rows.iter().map(|r| opt_int(r.line)))),
            "column" => fill(rapi::INTSXP, n, |p| ints(p, rows.iter().map(|r| opt_int(r.column)))),
            "r_frame" => fill(rapi::INTSXP, n, |p| {
                ints(
                    p,
                    rows.iter()
                        .map(|r| r.r_frame.and_then(|k| i32::try_from(k).ok()).unwrap_or(rapi::R_NaInt)),
                )
            }),
            _ => {
                let col = rapi::Rf_allocVector(rapi::STRSXP, n as isize);
                rapi::SET_VECTOR_ELT(df, j as isize, col);
                for (i, r) in rows.iter().enumerate() {
                    let c = match name {
                        "func" => strings.arc(r.func.as_ref()),
                        "ip" => strings.hex(r.ip, false),
                        "pathname" => strings.module(t, r.module),
                        "file" => strings.arc(r.file.as_ref()),
                        "source" => r.source.map_or(rapi::R_NaString, |src| strings.text(src.name())),
                        "start" => r.start.map_or(rapi::R_NaString, |a| strings.hex(a as usize, true)),
                        _ => strings.hex(r.offset, true),
                    };
                    rapi::SET_STRING_ELT(col, i as isize, c);
                }
                return;
            }
        };
        rapi::SET_VECTOR_ELT(df, j as isize, col);
    }
}

/// Writes `values` to the int data at `p`.
///
/// # Safety
/// `p` points to at least as many ints as `values` yields.
unsafe fn ints(p: *mut c_void, values: impl Iterator<Item = i32>) {
    let p = p as *mut i32;
    // SAFETY: the caller's contract.
    values.enumerate().for_each(|(i, x)| unsafe { *p.add(i) = x });
}

fn opt_int(x: Option<u32>) -> i32 {
    // SAFETY: reading R's NA_integer_ constant.
    x.and_then(|v| i32::try_from(v).ok()).unwrap_or(unsafe { rapi::R_NaInt })
}

/// CHARSXPs made so far in one result, by what they were made from:
/// captures repeat the same few strings (module paths, function names,
/// return addresses of recursive calls) many times. A CHARSXP is cached
/// right after it is made and is stored by the caller before R allocates
/// again; R keeps every CHARSXP of a live vector alive.
#[derive(Default)]
pub struct StringCache {
    arcs: HashMap<usize, Sexp>,
    ips: HashMap<usize, Sexp>,
    offsets: HashMap<usize, Sexp>,
    modules: HashMap<usize, Sexp>,
}

impl StringCache {
    /// The CHARSXP for an optional shared string.
    ///
    /// # Safety
    /// As for [`build`]; the result is stored before R allocates again.
    unsafe fn arc(&mut self, s: Option<&Arc<str>>) -> Sexp {
        // SAFETY: the caller's contract.
        unsafe {
            let Some(s) = s else { return rapi::R_NaString };
            let key = Arc::as_ptr(s) as *const u8 as usize;
            if let Some(&c) = self.arcs.get(&key) {
                return c;
            }
            let c = rapi::mkchar(s);
            self.arcs.insert(key, c);
            c
        }
    }

    /// 16 lowercase hex digits (`ip`), or "0x..." (`offset`).
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    unsafe fn hex(&mut self, value: usize, prefixed: bool) -> Sexp {
        let cache = if prefixed { &mut self.offsets } else { &mut self.ips };
        if let Some(&c) = cache.get(&value) {
            return c;
        }
        // Formatted on the stack: nothing to drop if R's allocation jumps.
        let mut buf = [0u8; 18];
        let text = crate::frames::hex(value, prefixed, &mut buf);
        // SAFETY: the caller's contract.
        let c = unsafe { rapi::mkchar(text) };
        cache.insert(value, c);
        c
    }

    /// The CHARSXP of a static string.
    ///
    /// # Safety
    /// As for [`StringCache::arc`].
    unsafe fn text(&mut self, s: &'static str) -> Sexp {
        let key = s.as_ptr() as usize;
        if let Some(&c) = self.arcs.get(&key) {
            return c;
        }
        // SAFETY: the caller's contract.
        let c = unsafe { rapi::mkchar(s) };
        self.arcs.insert(key, c);
        c
    }

    /// # Safety
    /// As for [`StringCache::arc`].
    unsafe fn module(&mut self, t: &FrameTable, m: Option<usize>) -> Sexp {
        // SAFETY: the caller's contract.
        unsafe {
            let Some(m) = m else { return rapi::R_NaString };
            if let Some(&c) = self.modules.get(&m) {
                return c;
            }
            let c = rapi::mkchar(&t.map.module(m).path);
            self.modules.insert(m, c);
            c
        }
    }
}
