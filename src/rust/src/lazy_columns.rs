//! The columns of native frame tables, made when R first reads them
//! (ALTREP vectors): a capture kept for later, as every error's trace is
//! and most are never looked at, does not pay for its names, paths and
//! addresses as R strings, nor for vectors R allocates one by one. The rows
//! are symbolized at capture (names must be those of the modules loaded
//! then); only the R vectors wait.
//!
//! Each column holds the table's rows through one external pointer (data1)
//! and, once made, an ordinary vector (data2), which every method then
//! serves. A number is read from the rows without making anything (R may
//! ask for one where it cannot allocate); a string, or the vector's data,
//! makes the whole vector. R copies, serializes and compares the columns
//! through these methods, so they behave as plain vectors.
//!
//! The pointer's finalizer frees the rows at the second collection that
//! finds it unreachable with no read in between, not at the first: R runs
//! the finalizers of everything one collection found unreachable together,
//! in an order of its own, and another object's finalizer
//! (`reg.finalizer()`) may read a trace that dies with it. The first run
//! keeps the pointer from the collector (`R_PreserveObject`) and gives it
//! its finalizer again later, at the next capture or top-level call
//! ([`settle`]): a finalizer registered while R runs finalizers can be
//! lost (R unlinks each finished one from the head of its list). (Only a
//! finalizer that hands such a trace, unread, to another object with a
//! finalizer, which dies with it at the next collection and then reads
//! it, finds the rows gone: an R error says so.)
//!
//! One class per column (`columns.rs` lists them), each with the methods of
//! its own column.

use crate::columns::{self, Column, EachColumn, Read, COUNT};
use crate::frame_rows::FrameRows;
use crate::rapi::{self, AltClass, Sexp};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Tables whose rows a lazy column holds (for tests: none may leak).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Pointers whose finalizer spared their rows, kept from R's collector
/// until [`settle`] gives them their finalizer again.
static SPARED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The classes, one per column (by `Column::ALL`'s order), as the
/// addresses of their class objects (R's registry keeps them). Replaced
/// when winch is loaded again into the same copy of its library (R reset
/// the old ones to its default methods at the unload).
static CLASSES: Mutex<Option<[usize; COUNT]>> = Mutex::new(None);

/// The current classes.
fn classes() -> Option<[usize; COUNT]> {
    *CLASSES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers the classes (from `R_init_winch`, with winch's `DllInfo`).
///
/// # Safety
/// R's main thread, while the package loads.
pub unsafe fn register(dll: *mut c_void) {
    /// Makes each column's class; only made here, under `register`'s
    /// contract.
    struct Registrar {
        dll: *mut c_void,
        classes: [usize; COUNT],
    }
    impl EachColumn for Registrar {
        fn column<const K: usize>(&mut self) {
            // SAFETY: a `Registrar` exists only inside `register`, whose
            // caller is R's main thread while the package loads.
            self.classes[K] = unsafe { class::<K>(self.dll) }.ptr as usize;
        }
    }
    let mut r = Registrar { dll, classes: [0; COUNT] };
    columns::for_each(&mut r);
    *CLASSES.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.classes);
}

/// The class of column `K` with its methods.
///
/// # Safety
/// As for [`register`].
unsafe fn class<const K: usize>(dll: *mut c_void) -> AltClass {
    let column = Column::ALL[K];
    let (name, package) = (column.class_name().as_ptr(), c"winch".as_ptr());
    // SAFETY: the caller's contract; the names are NUL-terminated and
    // static, the methods have the signatures R_ext/Altrep.h gives.
    unsafe {
        let c = match column.read() {
            Read::Text(_) => {
                let c = rapi::R_make_altstring_class(name, package, dll);
                rapi::R_set_altstring_Elt_method(c, string_elt::<K>);
                rapi::R_set_altstring_Set_elt_method(c, set_string_elt::<K>);
                c
            }
            Read::Int(_) => {
                let c = rapi::R_make_altinteger_class(name, package, dll);
                rapi::R_set_altinteger_Elt_method(c, number_elt::<K>);
                c
            }
            Read::Flag(_) => {
                let c = rapi::R_make_altlogical_class(name, package, dll);
                rapi::R_set_altlogical_Elt_method(c, number_elt::<K>);
                c
            }
        };
        rapi::R_set_altrep_Length_method(c, length);
        rapi::R_set_altvec_Dataptr_method(c, dataptr::<K>);
        rapi::R_set_altvec_Dataptr_or_null_method(c, dataptr_or_null);
        c
    }
}

/// The rows a table's columns hold, with what their finalizer needs to
/// know (see the module's comment). Used on R's main thread only.
struct Held {
    rows: FrameRows,
    fate: Fate,
}

/// What the finalizer of a table's rows knows (see [`Fate::spare`]).
#[derive(Default)]
struct Fate {
    /// Read since the finalizer last ran.
    read: Cell<bool>,
    /// The finalizer ran once.
    spared: Cell<bool>,
}

impl Fate {
    /// Whether rows whose finalizer runs now are kept to the next
    /// collection: the first time, or when they were read since the last
    /// time (a finalizer of that collection read them, and may have kept
    /// them).
    fn spare(&self) -> bool {
        let spare = !self.spared.get() || self.read.get();
        self.spared.set(true);
        self.read.set(false);
        spare
    }
}

/// `rows` for a table's columns, as an external pointer that frees them
/// when R collects it (see the module's comment); None without the classes
/// (the columns are then made at once).
///
/// # Safety
/// As for `Build::build`: R's main thread, inside `R_ToplevelExec`. The
/// result is unprotected.
pub unsafe fn shared(rows: &FrameRows) -> Option<Sexp> {
    classes()?;
    settle();
    // The columns' methods and the pointer's finalizer are code of this
    // library: it stays mapped even if something unloads it while they
    // live (`dyn.unload()`; winch's own unload keeps it loaded then).
    winch_core::pin_self();
    let n = rows.len();
    let shared = Box::new(Held { rows: rows.clone(), fate: Fate::default() });
    let p = Box::into_raw(shared) as *mut c_void;
    // SAFETY: the caller's contract. If R cannot allocate the pointer or
    // its finalizer, it leaves by longjmp and the rows leak (the frames
    // here own nothing that would need dropping). The tag keeps the
    // length for after the rows are freed (see `length`).
    unsafe {
        let tag = rapi::Rf_protect(rapi::Rf_ScalarInteger(i32::try_from(n).unwrap_or(i32::MAX)));
        let x = rapi::Rf_protect(rapi::R_MakeExternalPtr(p, tag, rapi::R_NilValue));
        rapi::R_RegisterCFinalizerEx(x, finalize, 0);
        LIVE.fetch_add(1, Ordering::Relaxed);
        rapi::Rf_unprotect(2);
        Some(x)
    }
}

/// Column `kind` over the rows `shared` (from [`shared`], protected).
///
/// # Safety
/// As for [`shared`]; the result is unprotected.
pub unsafe fn column(shared: Sexp, kind: Column) -> Option<Sexp> {
    let class = AltClass { ptr: classes()?[kind as usize] as Sexp };
    // SAFETY: the caller's contract; `class` is a registered class.
    Some(unsafe { rapi::R_new_altrep(class, shared, rapi::R_NilValue) })
}

extern "C" fn finalize(x: Sexp) {
    // SAFETY: `x` is one of the pointers made by `shared`, whose address is
    // a leaked `Box<Held>` until it is cleared here, once; R runs
    // finalizers on its main thread, where it may allocate.
    unsafe {
        let p = rapi::R_ExternalPtrAddr(x) as *mut Held;
        let Some(held) = p.as_ref() else { return };
        if held.fate.spare() {
            // Kept to the next collection that finds it unreachable after
            // `settle` (if R cannot allocate this, it leaves by longjmp to
            // the finalizer's own context and the rows leak).
            rapi::R_PreserveObject(x);
            spared().push(x as usize);
            return;
        }
        rapi::R_ClearExternalPtr(x);
        // Dropping frees Rust memory only (no R API, cannot fail).
        drop(Box::from_raw(p));
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

fn spared() -> std::sync::MutexGuard<'static, Vec<usize>> {
    SPARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Gives the pointers whose finalizer spared their rows their finalizer
/// again, and lets R collect them. At the next capture and after each
/// top-level call (R's main thread; not from a finalizer, where R can
/// lose the registration: the rows would then stay). If R cannot
/// allocate, the pointer in hand stays kept (its rows leak).
pub fn settle() {
    // (The lock is not held while R allocates: a collection may run
    // finalizers, `finalize` among them.)
    while let Some(x) = spared().pop() {
        crate::value::make(&mut |_| {
            // SAFETY: inside R_ToplevelExec on R's main thread; `x` is a
            // pointer made by `shared`, preserved by `finalize`, released
            // once here.
            unsafe {
                rapi::R_RegisterCFinalizerEx(x as Sexp, finalize, 0);
                rapi::R_ReleaseObject(x as Sexp);
                rapi::R_NilValue
            }
        });
    }
}

/// The rows behind column `x`.
///
/// # Safety
/// `x` is a column of these classes: its data1 is a pointer from [`shared`],
/// alive while `x` is.
unsafe fn rows_of<'a>(x: Sexp) -> Option<&'a FrameRows> {
    // SAFETY: the caller's contract.
    let held = unsafe { (rapi::R_ExternalPtrAddr(rapi::R_altrep_data1(x)) as *const Held).as_ref() }?;
    held.fate.read.set(true);
    Some(&held.rows)
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

/// The column's vector, made now if not yet; raises an R error if R
/// cannot allocate it.
///
/// # Safety
/// As for [`rows_of`]; called from R's methods (main thread) where R may
/// allocate, in a frame that owns nothing with a destructor (an R error
/// leaves by longjmp).
unsafe fn vector<const K: usize>(x: Sexp) -> Sexp {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(d) = made(x) {
            return d;
        }
        let out = rows_of(x).and_then(|s| crate::value::make(&mut |cache| Column::ALL[K].make(s, cache)));
        match out {
            Some(col) => {
                rapi::R_set_altrep_data2(x, col);
                col
            }
            // A finalizer that kept a trace past its rows' second
            // finalizer without reading it, then read it from a
            // finalizer (see the module's comment): the rows are gone.
            None if rows_of(x).is_none() => rapi::Rf_error(
                c"%s".as_ptr(),
                c"winch: this column's native frames were freed (read from a finalizer after its trace was collected)".as_ptr(),
            ),
            None => rapi::Rf_error(
                c"%s".as_ptr(),
                c"winch could not make a column of native frames (out of memory?)".as_ptr(),
            ),
        }
    }
}

/// The data of a made vector `d`.
///
/// # Safety
/// `d` a live string, integer or logical vector.
unsafe fn data_of(d: Sexp) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe {
        match rapi::TYPEOF(d) {
            rapi::STRSXP => rapi::STRING_PTR_RO(d) as *mut c_void,
            rapi::INTSXP => rapi::INTEGER(d) as *mut c_void,
            _ => rapi::LOGICAL(d) as *mut c_void,
        }
    }
}

extern "C" fn length(x: Sexp) -> isize {
    // SAFETY: R calls this for columns of these classes; the pointer's tag
    // is the integer scalar `shared` gave it.
    unsafe {
        match made(x) {
            Some(d) => rapi::Rf_xlength(d),
            None => *rapi::INTEGER(rapi::R_ExternalPtrTag(rapi::R_altrep_data1(x))) as isize,
        }
    }
}

extern "C" fn string_elt<const K: usize>(x: Sexp, i: isize) -> Sexp {
    // SAFETY: R calls this for columns of these classes with `i` within
    // their length (with its collector paused).
    unsafe { rapi::STRING_ELT(vector::<K>(x), i) }
}

extern "C" fn set_string_elt<const K: usize>(x: Sexp, i: isize, v: Sexp) {
    // SAFETY: as for `string_elt`; R calls this only for a column it may
    // change.
    unsafe { rapi::SET_STRING_ELT(vector::<K>(x), i, v) }
}

extern "C" fn number_elt<const K: usize>(x: Sexp, i: isize) -> c_int {
    // SAFETY: R calls this for columns of these classes with `i` within
    // their length; nothing is allocated (R may not expect it here).
    unsafe {
        if let Some(d) = made(x) {
            return *(data_of(d) as *const c_int).offset(i);
        }
        match rows_of(x).and_then(|s| s.rows.get(i as usize).map(|r| (s, r))) {
            Some((s, r)) => Column::ALL[K].number(r, s.resolution_of(r)),
            // See `vector`.
            None => rapi::Rf_error(
                c"%s".as_ptr(),
                c"winch: this column's native frames were freed (read from a finalizer after its trace was collected)".as_ptr(),
            ),
        }
    }
}

extern "C" fn dataptr<const K: usize>(x: Sexp, _writable: c_int) -> *mut c_void {
    // SAFETY: as for `string_elt` (R pauses its collector here too).
    unsafe { data_of(vector::<K>(x)) }
}

extern "C" fn dataptr_or_null(x: Sexp) -> *const c_void {
    // SAFETY: as for `string_elt`.
    unsafe { made(x).map_or(std::ptr::null(), |d| data_of(d) as *const c_void) }
}

/// How column `x` is held: "lazy" (strings not made yet), "made", or
/// "plain" (an ordinary vector, or not a column of winch's).
///
/// # Safety
/// R's main thread; `x` a live R object.
pub unsafe fn state(x: Sexp) -> &'static str {
    let Some(classes) = classes() else { return "plain" };
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

#[cfg(test)]
mod tests {
    use super::Fate;

    #[test]
    fn rows_are_freed_at_the_second_finalizer_with_no_read_in_between() {
        let f = Fate::default();
        assert!(f.spare(), "a finalizer of the same collection may read them");
        assert!(!f.spare());
        // Read by another finalizer of that collection: kept once more.
        let f = Fate::default();
        f.read.set(true);
        assert!(f.spare());
        f.read.set(true);
        assert!(f.spare());
        assert!(!f.spare());
    }
}
