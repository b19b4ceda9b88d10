//! Whether winch's options and the loaded libraries are as R last passed
//! them to the core (`sync_options()` in R/utils.R): asked on every capture,
//! so that the usual case costs one `.Call` that allocates nothing.

use crate::args::Arg;
use crate::rapi::{self, Sexp};
use std::sync::{Mutex, OnceLock};
use winch_core::modules::{loader_generation, Generation};

/// An option's value as far as the comparison needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Unset,
    Strings(Vec<Option<String>>),
    Flag(i32),
    /// Anything else: never in step (R checks it every time, and says
    /// what is wrong with it).
    Other,
}

struct Synced {
    debug_dirs: Value,
    debuginfod: Value,
    generation: Generation,
}

static SYNCED: Mutex<Option<Synced>> = Mutex::new(None);

fn value_of(x: Sexp) -> Value {
    let arg = Arg::new(x, "option");
    if arg.is_null() {
        return Value::Unset;
    }
    if let Ok(s) = arg.strings() {
        return Value::Strings(s);
    }
    match arg.flag() {
        Ok(b) => Value::Flag(i32::from(b)),
        Err(_) => Value::Other,
    }
}

/// The current value of option `name` (a NUL-terminated name).
fn option(name: &std::ffi::CStr) -> Value {
    // SAFETY: on R's main thread (the callers are entry points that
    // checked); reading the options list does not run R code, and the
    // value is read before R allocates again.
    unsafe { value_of(rapi::Rf_GetOption1(symbol(name))) }
}

/// The value of option `name` (R_NilValue when unset), to be read before
/// R allocates again.
///
/// # Safety
/// R's main thread.
pub unsafe fn raw_option(name: &std::ffi::CStr) -> Sexp {
    // SAFETY: the caller's contract; reading the options list does not
    // run R code.
    unsafe { rapi::Rf_GetOption1(symbol(name)) }
}

/// The symbol `name` of the options read on every capture, installed once
/// (symbols are never freed): this runs on every capture.
fn symbol(name: &std::ffi::CStr) -> Sexp {
    static DIRS: OnceLock<usize> = OnceLock::new();
    static DEBUGINFOD: OnceLock<usize> = OnceLock::new();
    static BACKEND: OnceLock<usize> = OnceLock::new();
    let cell = match name.to_bytes() {
        b"winch.debug_dirs" => &DIRS,
        b"winch.debuginfod" => &DEBUGINFOD,
        b"winch.backend" => &BACKEND,
        _ => return rapi::sym_addr(name) as Sexp,
    };
    *cell.get_or_init(|| rapi::sym_addr(name)) as Sexp
}

/// Remembers the options' raw values (`getOption()` without defaults) and
/// the loader generation R synced the core with.
pub fn set(debug_dirs: &Arg, debuginfod: &Arg, generation: Generation) {
    let s = Synced {
        debug_dirs: value_of(debug_dirs.sexp()),
        debuginfod: value_of(debuginfod.sexp()),
        generation,
    };
    if let Ok(mut g) = SYNCED.lock() {
        *g = Some(s);
    }
}

/// Whether nothing changed since [`set`].
pub fn check() -> bool {
    let Ok(g) = SYNCED.lock() else { return false };
    let Some(s) = g.as_ref() else { return false };
    s.generation == loader_generation()
        && !matches!(s.debug_dirs, Value::Other)
        && !matches!(s.debuginfod, Value::Other)
        && option(c"winch.debug_dirs") == s.debug_dirs
        && option(c"winch.debuginfod") == s.debuginfod
}

/// Whether the `winch.debuginfod` option is unset (the debuginfod hint is
/// for sessions that have not chosen).
pub fn debuginfod_unset() -> bool {
    option(c"winch.debuginfod") == Value::Unset
}
