//! Every part of R's C API that winch's Rust code uses, declared once, with
//! plain C types (an enum-typed `TYPEOF`, as some bindings declare it, must
//! never see a value outside its variants).
//!
//! Calling any of these is only sound on R's main thread, and an allocating
//! one may leave by `longjmp` (out of memory): winch allocates only inside
//! `R_ToplevelExec` (see `value.rs`).

use std::ffi::{c_char, c_int, c_void, CStr};

pub type Sexp = *mut c_void;

pub const NILSXP: c_int = 0;
pub const SYMSXP: c_int = 1;
pub const LISTSXP: c_int = 2;
pub const LANGSXP: c_int = 6;
pub const LGLSXP: c_int = 10;
pub const INTSXP: c_int = 13;
pub const REALSXP: c_int = 14;
pub const STRSXP: c_int = 16;
pub const VECSXP: c_int = 19;
pub const EXTPTRSXP: c_int = 22;
pub const CE_UTF8: c_int = 1;

extern "C" {
    // Data. `mut`: R changes these while winch only reads them.
    pub static R_NilValue: Sexp;
    pub static R_NaString: Sexp;
    pub static R_EmptyEnv: Sexp;
    pub static R_NaReal: f64;
    pub static R_NaInt: c_int;
    /// Exported by libR and declared in Rinterface.h: the innermost context.
    pub static mut R_GlobalContext: *mut c_void;
    /// Exported by libR (`LibExtern` in Defn.h): one past the end of R's
    /// node stack, where R >= 4.4 keeps the contexts of byte-code calls.
    pub static mut R_BCNodeStackEnd: *mut c_void;
    /// Symbols R's profiler labels calls with (Rinternals.h).
    pub static R_DoubleColonSymbol: Sexp;
    pub static R_TripleColonSymbol: Sexp;
    pub static R_DollarSymbol: Sexp;
    pub static R_Bracket2Symbol: Sexp;
    pub static R_ClassSymbol: Sexp;
    pub static R_NamesSymbol: Sexp;
    pub static R_RowNamesSymbol: Sexp;
    /// The marker R_Srcref holds while byte code runs.
    pub static R_InBCInterpreter: Sexp;
    /// R's C stack as R measured it at start-up (Rinterface.h; -1 where
    /// unknown): where it starts, how far it may grow, and in which
    /// direction (1: down).
    pub static R_CStackStart: usize;
    pub static R_CStackLimit: usize;
    pub static R_CStackDir: c_int;
    /// The AST interpreter's current srcref (`mut`: R changes it).
    pub static mut R_Srcref: Sexp;

    // Reading objects.
    pub fn TYPEOF(x: Sexp) -> c_int;
    pub fn Rf_getAttrib(x: Sexp, name: Sexp) -> Sexp;
    pub fn Rf_xlength(x: Sexp) -> isize;
    pub fn R_ExternalPtrAddr(x: Sexp) -> *mut c_void;
    pub fn R_ExternalPtrTag(x: Sexp) -> Sexp;
    pub fn STRING_ELT(x: Sexp, i: isize) -> Sexp;
    pub fn VECTOR_ELT(x: Sexp, i: isize) -> Sexp;
    pub fn CAR(x: Sexp) -> Sexp;
    pub fn CDR(x: Sexp) -> Sexp;
    pub fn R_CHAR(x: Sexp) -> *const c_char;
    pub fn INTEGER(x: Sexp) -> *mut c_int;
    pub fn LOGICAL(x: Sexp) -> *mut c_int;
    pub fn REAL(x: Sexp) -> *mut f64;

    // Making objects (may allocate).
    pub fn Rf_allocVector(kind: c_int, n: isize) -> Sexp;
    pub fn Rf_mkCharLenCE(s: *const c_char, len: c_int, enc: c_int) -> Sexp;
    pub fn SET_STRING_ELT(x: Sexp, i: isize, v: Sexp);
    pub fn SET_VECTOR_ELT(x: Sexp, i: isize, v: Sexp) -> Sexp;
    pub fn Rf_setAttrib(x: Sexp, name: Sexp, value: Sexp) -> Sexp;
    pub fn Rf_install(name: *const c_char) -> Sexp;
    pub fn Rf_GetOption1(tag: Sexp) -> Sexp;
    pub fn Rf_installTrChar(x: Sexp) -> Sexp;
    pub fn Rf_lang1(f: Sexp) -> Sexp;
    pub fn Rf_isObject(x: Sexp) -> c_int;
    pub fn Rf_mkString(s: *const c_char) -> Sexp;
    pub fn R_NewEnv(enclos: Sexp, hash: c_int, size: c_int) -> Sexp;
    pub fn Rf_defineVar(symbol: Sexp, value: Sexp, env: Sexp);
    pub fn MARK_NOT_MUTABLE(x: Sexp);
    /// R's shared TRUE, FALSE or NA (no allocation).
    pub fn Rf_ScalarLogical(x: c_int) -> Sexp;
    pub fn Rf_ScalarInteger(x: c_int) -> Sexp;
    pub fn Rf_protect(x: Sexp) -> Sexp;
    pub fn Rf_unprotect(n: c_int);
    pub fn R_ProtectWithIndex(x: Sexp, index: *mut c_int);
    pub fn R_Reprotect(x: Sexp, index: c_int);
    pub fn R_PreserveObject(x: Sexp);
    pub fn R_ReleaseObject(x: Sexp);

    // External pointers.
    pub fn R_MakeExternalPtr(p: *mut c_void, tag: Sexp, prot: Sexp) -> Sexp;
    pub fn R_ClearExternalPtr(x: Sexp);
    pub fn R_RegisterCFinalizerEx(x: Sexp, fun: extern "C" fn(Sexp), onexit: c_int);

    // ALTREP (R_ext/Altrep.h): classes of vectors whose methods R calls.
    pub fn R_make_altstring_class(cname: *const c_char, pname: *const c_char, dll: *mut c_void) -> AltClass;
    pub fn R_new_altrep(class: AltClass, data1: Sexp, data2: Sexp) -> Sexp;
    pub fn R_altrep_inherits(x: Sexp, class: AltClass) -> c_int;
    pub fn R_altrep_data1(x: Sexp) -> Sexp;
    pub fn R_altrep_data2(x: Sexp) -> Sexp;
    pub fn R_set_altrep_data2(x: Sexp, v: Sexp);
    pub fn R_set_altrep_Length_method(class: AltClass, f: extern "C" fn(Sexp) -> isize);
    pub fn R_set_altvec_Dataptr_method(class: AltClass, f: extern "C" fn(Sexp, c_int) -> *mut c_void);
    pub fn R_set_altvec_Dataptr_or_null_method(class: AltClass, f: extern "C" fn(Sexp) -> *const c_void);
    pub fn R_set_altstring_Elt_method(class: AltClass, f: extern "C" fn(Sexp, isize) -> Sexp);
    pub fn R_set_altstring_Set_elt_method(class: AltClass, f: extern "C" fn(Sexp, isize, Sexp));
    pub fn R_make_altinteger_class(cname: *const c_char, pname: *const c_char, dll: *mut c_void) -> AltClass;
    pub fn R_make_altlogical_class(cname: *const c_char, pname: *const c_char, dll: *mut c_void) -> AltClass;
    pub fn R_set_altinteger_Elt_method(class: AltClass, f: extern "C" fn(Sexp, isize) -> c_int);
    pub fn R_set_altlogical_Elt_method(class: AltClass, f: extern "C" fn(Sexp, isize) -> c_int);
    pub fn STRING_PTR_RO(x: Sexp) -> *const Sexp;

    /// Raises an R error: leaves by `longjmp`, so only from a frame that
    /// owns nothing with a destructor.
    pub fn Rf_error(format: *const c_char, ...) -> !;

    /// Only its address is used: it lies in R's interpreter.
    pub fn Rf_eval(expr: Sexp, env: Sexp) -> Sexp;

    /// Runs `fun(data)` in a new top-level context: an R error inside it
    /// (e.g. out of memory) ends there and makes it return 0.
    pub fn R_ToplevelExec(fun: extern "C" fn(*mut c_void), data: *mut c_void) -> c_int;
}

/// An ALTREP class (`R_altrep_class_t`, a struct of one SEXP, passed by
/// value).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AltClass {
    pub ptr: Sexp,
}

/// A CHARSXP for `s` (UTF-8); strings longer than R allows are cut.
///
/// # Safety
/// R's main thread, inside `R_ToplevelExec`; the result must be stored into
/// a protected object before R allocates again.
pub unsafe fn mkchar(s: &str) -> Sexp {
    let len = s.len().min(i32::MAX as usize) as c_int;
    // SAFETY: `s` is valid for `len` bytes; the caller holds the rest.
    unsafe { Rf_mkCharLenCE(s.as_ptr() as *const c_char, len, CE_UTF8) }
}

/// The symbol `name`.
///
/// # Safety
/// As for [`mkchar`].
/// The address of symbol `name` (symbols are interned and never freed).
pub fn sym_addr(name: &CStr) -> usize {
    // SAFETY: on R's main thread (the entry points' callers); installing a
    // symbol does not run R code.
    unsafe { sym(name) as usize }
}

pub unsafe fn sym(name: &CStr) -> Sexp {
    // SAFETY: `name` is NUL-terminated; the caller holds the rest.
    unsafe { Rf_install(name.as_ptr()) }
}
