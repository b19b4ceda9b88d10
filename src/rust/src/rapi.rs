//! The few R API entry points used to build result tables directly, declared
//! with plain C types.

use std::ffi::{c_char, c_int, c_void, CStr};

pub type Sexp = *mut c_void;

pub const LGLSXP: c_int = 10;
pub const INTSXP: c_int = 13;
pub const STRSXP: c_int = 16;
pub const VECSXP: c_int = 19;
pub const CE_UTF8: c_int = 1;

extern "C" {
    pub static R_NaString: Sexp;
    pub static R_NaInt: c_int;
    pub fn Rf_allocVector(kind: c_int, n: isize) -> Sexp;
    pub fn Rf_mkCharLenCE(s: *const c_char, len: c_int, enc: c_int) -> Sexp;
    pub fn SET_STRING_ELT(x: Sexp, i: isize, v: Sexp);
    pub fn SET_VECTOR_ELT(x: Sexp, i: isize, v: Sexp) -> Sexp;
    pub fn INTEGER(x: Sexp) -> *mut c_int;
    pub fn LOGICAL(x: Sexp) -> *mut c_int;
    pub fn Rf_setAttrib(x: Sexp, name: Sexp, value: Sexp) -> Sexp;
    pub fn Rf_install(name: *const c_char) -> Sexp;
    pub fn Rf_protect(x: Sexp) -> Sexp;
    pub fn Rf_unprotect(n: c_int);
    pub fn R_PreserveObject(x: Sexp);
    pub fn R_ReleaseObject(x: Sexp);
    /// Runs `fun(data)` in a new top-level context: an R error inside it
    /// (e.g. out of memory) ends there and makes it return 0.
    pub fn R_ToplevelExec(fun: extern "C" fn(*mut c_void), data: *mut c_void) -> c_int;
}

/// A CHARSXP for `s` (UTF-8).
///
/// # Safety
/// Must be called on R's main thread; the result must be stored into a
/// protected object before R allocates again.
pub unsafe fn mkchar(s: &str) -> Sexp {
    Rf_mkCharLenCE(s.as_ptr() as *const c_char, s.len().min(i32::MAX as usize) as c_int, CE_UTF8)
}

/// The symbol `name`.
pub unsafe fn sym(name: &CStr) -> Sexp {
    Rf_install(name.as_ptr())
}
