//! The string columns of native frame tables, made when R first reads them
//! (ALTREP vectors): a capture kept for later, as every error's trace is
//! and most are never looked at, does not pay for its names, paths and
//! addresses as R strings. The rows are symbolized at capture (names must
//! be those of the modules loaded then); only the R strings wait.
//!
//! Each column holds the table's rows through one external pointer (data1)
//! and, once read, its strings as an ordinary character vector (data2),
//! which every method then serves. R copies, serializes and compares the
//! columns through these methods, so they behave as plain vectors.

use crate::frames::{fill_strings, FrameTable, Resolutions, Row, StringColumn};
use crate::rapi::{self, AltClass, Sexp};
use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use winch_core::modules::ModuleMap;

/// Tables whose rows a lazy column holds (for tests: none may leak).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// What a table's string columns share: its rows and their modules.
struct Shared {
    rows: Arc<Vec<Row>>,
    resolved: Resolutions,
    map: Arc<ModuleMap>,
    branch: Option<(Range<usize>, Arc<ModuleMap>)>,
}

/// The classes, one per column (by `StringColumn::ALL`'s order), as the
/// addresses of their class objects (R keeps them for the session).
static CLASSES: OnceLock<[usize; 8]> = OnceLock::new();

/// Registers the classes (from `R_init_winch`, with winch's `DllInfo`).
///
/// # Safety
/// R's main thread, while the package loads.
pub unsafe fn register(dll: *mut c_void) {
    // SAFETY: the caller's contract.
    let classes = unsafe {
        [
            class::<0>(dll),
            class::<1>(dll),
            class::<2>(dll),
            class::<3>(dll),
            class::<4>(dll),
            class::<5>(dll),
            class::<6>(dll),
            class::<7>(dll),
        ]
    };
    let _ = CLASSES.set(classes.map(|c| c.ptr as usize));
}

/// The class of column `K` with its methods.
///
/// # Safety
/// As for [`register`].
unsafe fn class<const K: usize>(dll: *mut c_void) -> AltClass {
    const NAMES: [&std::ffi::CStr; 8] = [
        c"winch_func",
        c"winch_ip",
        c"winch_pathname",
        c"winch_file",
        c"winch_source",
        c"winch_start",
        c"winch_offset",
        c"winch_label",
    ];
    // SAFETY: the caller's contract; the names are NUL-terminated and
    // static, the methods have the signatures R_ext/Altrep.h gives.
    unsafe {
        let c = rapi::R_make_altstring_class(NAMES[K].as_ptr(), c"winch".as_ptr(), dll);
        rapi::R_set_altrep_Length_method(c, length);
        rapi::R_set_altvec_Dataptr_method(c, dataptr::<K>);
        rapi::R_set_altvec_Dataptr_or_null_method(c, dataptr_or_null);
        rapi::R_set_altstring_Elt_method(c, elt::<K>);
        rapi::R_set_altstring_Set_elt_method(c, set_elt::<K>);
        c
    }
}

/// The rows of `t` for its string columns, as a protected-by-the-caller
/// external pointer that frees them when R collects it; None without the
/// classes (the columns are then made at once).
///
/// # Safety
/// As for `Build::build`: R's main thread, inside `R_ToplevelExec`. The
/// result is unprotected.
pub unsafe fn shared(t: &FrameTable) -> Option<Sexp> {
    CLASSES.get()?;
    let shared = Box::new(Shared {
        rows: t.rows.clone(),
        resolved: t.resolved.clone(),
        map: t.map.clone(),
        branch: t.branch.clone(),
    });
    let p = Box::into_raw(shared) as *mut c_void;
    LIVE.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller's contract. If R cannot allocate the pointer or
    // its finalizer, it leaves by longjmp and the rows leak (the frames
    // here own nothing that would need dropping).
    unsafe {
        let x = rapi::Rf_protect(rapi::R_MakeExternalPtr(p, rapi::R_NilValue, rapi::R_NilValue));
        rapi::R_RegisterCFinalizerEx(x, finalize, 0);
        rapi::Rf_unprotect(1);
        Some(x)
    }
}

/// Column `kind` over the rows `shared` (from [`shared`], protected).
///
/// # Safety
/// As for [`shared`]; the result is unprotected.
pub unsafe fn column(shared: Sexp, kind: StringColumn) -> Option<Sexp> {
    let k = StringColumn::ALL.iter().position(|&c| c == kind)?;
    let class = AltClass { ptr: CLASSES.get()?[k] as Sexp };
    // SAFETY: the caller's contract; `class` is a registered class.
    Some(unsafe { rapi::R_new_altrep(class, shared, rapi::R_NilValue) })
}

extern "C" fn finalize(x: Sexp) {
    // SAFETY: `x` is one of the pointers made by `shared`, whose address is
    // a leaked `Box<Shared>` until it is cleared here, once.
    unsafe {
        let p = rapi::R_ExternalPtrAddr(x) as *mut Shared;
        if !p.is_null() {
            rapi::R_ClearExternalPtr(x);
            // Dropping frees Rust memory only (no R API, cannot fail).
            drop(Box::from_raw(p));
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The rows behind column `x`.
///
/// # Safety
/// `x` is a column of these classes: its data1 is a pointer from [`shared`],
/// alive while `x` is.
unsafe fn rows_of<'a>(x: Sexp) -> Option<&'a Shared> {
    // SAFETY: the caller's contract.
    unsafe { (rapi::R_ExternalPtrAddr(rapi::R_altrep_data1(x)) as *const Shared).as_ref() }
}

/// The column's strings once made (None before).
///
/// # Safety
/// As for [`rows_of`].
unsafe fn made(x: Sexp) -> Option<Sexp> {
    // SAFETY: the caller's contract.
    unsafe {
        let d = rapi::R_altrep_data2(x);
        (d != rapi::R_NilValue).then_some(d)
    }
}

/// The column's strings, made now if not yet; raises an R error if R
/// cannot allocate them.
///
/// # Safety
/// As for [`rows_of`]; called from R's methods (main thread), in a frame
/// that owns nothing with a destructor (an R error leaves by longjmp).
unsafe fn strings<const K: usize>(x: Sexp) -> Sexp {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(d) = made(x) {
            return d;
        }
        let out = rows_of(x).and_then(|s| {
            crate::value::make(&mut |cache| {
                let col = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, s.rows.len() as isize));
                fill_strings(col, &s.rows, &s.resolved, &s.map, &s.branch, StringColumn::ALL[K], cache);
                rapi::Rf_unprotect(1);
                col
            })
        });
        match out {
            Some(col) => {
                rapi::R_set_altrep_data2(x, col);
                col
            }
            None => rapi::Rf_error(
                c"%s".as_ptr(),
                c"winch could not make a column of native frames (out of memory?)".as_ptr(),
            ),
        }
    }
}

extern "C" fn length(x: Sexp) -> isize {
    // SAFETY: R calls this for columns of these classes.
    unsafe {
        match made(x) {
            Some(d) => rapi::Rf_xlength(d),
            None => rows_of(x).map_or(0, |s| s.rows.len() as isize),
        }
    }
}

extern "C" fn elt<const K: usize>(x: Sexp, i: isize) -> Sexp {
    // SAFETY: R calls this for columns of these classes with `i` within
    // their length.
    unsafe { rapi::STRING_ELT(strings::<K>(x), i) }
}

extern "C" fn set_elt<const K: usize>(x: Sexp, i: isize, v: Sexp) {
    // SAFETY: as for `elt`; R calls this only for a column it may change.
    unsafe { rapi::SET_STRING_ELT(strings::<K>(x), i, v) }
}

extern "C" fn dataptr<const K: usize>(x: Sexp, _writable: c_int) -> *mut c_void {
    // SAFETY: as for `elt`.
    unsafe { rapi::STRING_PTR_RO(strings::<K>(x)) as *mut c_void }
}

extern "C" fn dataptr_or_null(x: Sexp) -> *const c_void {
    // SAFETY: as for `elt`.
    unsafe { made(x).map_or(std::ptr::null(), |d| rapi::STRING_PTR_RO(d) as *const c_void) }
}

/// How column `x` is held: "lazy" (strings not made yet), "made", or
/// "plain" (an ordinary vector, or not a string column of winch's).
///
/// # Safety
/// R's main thread; `x` a live R object.
pub unsafe fn state(x: Sexp) -> &'static str {
    let Some(classes) = CLASSES.get() else { return "plain" };
    // SAFETY: the caller's contract; `x` is one of the classes' columns
    // when R says it inherits from one.
    unsafe {
        if !classes.iter().any(|&c| rapi::R_altrep_inherits(x, AltClass { ptr: c as Sexp }) != 0) {
            return "plain";
        }
        if made(x).is_some() {
            "made"
        } else {
            "lazy"
        }
    }
}

/// The number of tables whose rows lazy columns hold.
pub fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}
