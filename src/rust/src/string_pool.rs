//! CHARSXPs kept from one result to the next: warm captures repeat the
//! same return addresses, offsets and names, and making their CHARSXPs
//! again (R hashes and compares each one into its global cache) was a
//! third of a warm `winch_trace_back()`'s `.Call`. They are held in one
//! preserved character vector, so R keeps them alive; when it is full the
//! pool starts over.

use crate::rapi::{self, Sexp};
use std::sync::{Arc, Mutex, MutexGuard};
use winch_core::FastMap;

/// Slots of the pool's vector.
const SLOTS: usize = 1 << 14;

/// What a pooled CHARSXP was made from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// An address as 16 hex digits, or as "0x..." (`prefixed`).
    Hex { value: usize, prefixed: bool },
    /// A shared string, by its address (the pool holds a clone, so the
    /// address is not reused while the entry lives).
    Arc(usize),
    /// A static string, by its address.
    Static(usize),
    /// The label of an unnamed frame: its function's start (`usize::MAX`
    /// when unknown) and offset.
    Label { start: usize, offset: usize },
}

/// R objects kept by key in one preserved vector (a character vector of
/// CHARSXPs, or a list), so that R keeps them alive; when the vector is
/// full it starts over.
struct Kept<K> {
    /// `STRSXP` or `VECSXP`.
    kind: std::ffi::c_int,
    slots: usize,
    /// The preserved vector (as an address: 0 before the first use).
    vector: usize,
    by_key: FastMap<K, usize>,
}

impl<K: std::hash::Hash + Eq> Kept<K> {
    fn new(kind: std::ffi::c_int, slots: usize) -> Kept<K> {
        Kept { kind, slots, vector: 0, by_key: FastMap::default() }
    }

    /// The object kept for `key`, if any.
    ///
    /// # Safety
    /// R's main thread.
    unsafe fn get<Q>(&self, key: &Q) -> Option<Sexp>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        let &slot = self.by_key.get(key)?;
        // SAFETY: `vector` is the preserved vector and `slot` < its length.
        Some(unsafe {
            if self.kind == rapi::STRSXP {
                rapi::STRING_ELT(self.vector as Sexp, slot as isize)
            } else {
                rapi::VECTOR_ELT(self.vector as Sexp, slot as isize)
            }
        })
    }

    /// Keeps `x` for `key`; returns whether the vector started over (what
    /// was kept before is gone).
    ///
    /// # Safety
    /// R's main thread, inside `R_ToplevelExec` (starting over allocates);
    /// `x` is protected here across that allocation.
    unsafe fn put(&mut self, key: K, x: Sexp) -> bool {
        let fresh_start = self.vector == 0 || self.by_key.len() == self.slots;
        // SAFETY: the caller's contract.
        unsafe {
            if fresh_start {
                rapi::Rf_protect(x);
                let fresh = rapi::Rf_allocVector(self.kind, self.slots as isize);
                rapi::R_PreserveObject(fresh);
                rapi::Rf_unprotect(1);
                if self.vector != 0 {
                    rapi::R_ReleaseObject(self.vector as Sexp);
                }
                self.vector = fresh as usize;
                self.by_key.clear();
            }
            let slot = self.by_key.len();
            if self.kind == rapi::STRSXP {
                rapi::SET_STRING_ELT(self.vector as Sexp, slot as isize, x);
            } else {
                rapi::SET_VECTOR_ELT(self.vector as Sexp, slot as isize, x);
            }
            self.by_key.insert(key, slot);
        }
        fresh_start
    }
}

impl Kept<String> {
    /// The object kept for `key`, or the one `make` makes, kept.
    ///
    /// # Safety
    /// As for [`Kept::put`]; the result is unprotected.
    unsafe fn get_or_make(&mut self, key: &str, make: impl FnOnce() -> Sexp) -> Sexp {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(x) = self.get(key) {
                return x;
            }
            let x = make();
            self.put(key.to_string(), x);
            x
        }
    }
}

pub struct Pool {
    kept: Kept<Key>,
    /// The shared strings whose addresses are keys.
    held: Vec<Arc<str>>,
    /// Modules' paths, by their text.
    paths: Kept<String>,
}

/// Slots for modules' paths.
const PATH_SLOTS: usize = 1024;

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            kept: Kept::new(rapi::STRSXP, SLOTS),
            held: Vec::new(),
            paths: Kept::new(rapi::STRSXP, PATH_SLOTS),
        }
    }
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// The pool, unless another result holds it (a nested build).
pub fn take() -> Option<MutexGuard<'static, Option<Pool>>> {
    POOL.try_lock().ok()
}

impl Pool {
    /// The CHARSXP kept for `key`, if any.
    ///
    /// # Safety
    /// R's main thread.
    pub unsafe fn get(&self, key: Key) -> Option<Sexp> {
        // SAFETY: the caller's contract.
        unsafe { self.kept.get(&key) }
    }

    /// The CHARSXP of module path `path`, or the one `make` makes, kept.
    ///
    /// # Safety
    /// As for [`Kept::put`]; the result is unprotected.
    pub unsafe fn path(&mut self, path: &str, make: impl FnOnce() -> Sexp) -> Sexp {
        // SAFETY: the caller's contract.
        unsafe { self.paths.get_or_make(path, make) }
    }

    /// Keeps `c` (a CHARSXP) for `key`; `arc` is the shared string of an
    /// `Arc` key.
    ///
    /// # Safety
    /// As for [`Kept::put`].
    pub unsafe fn put(&mut self, key: Key, c: Sexp, arc: Option<&Arc<str>>) {
        // SAFETY: the caller's contract.
        if unsafe { self.kept.put(key, c) } {
            self.held.clear();
        }
        if let Some(a) = arc {
            self.held.push(a.clone());
        }
    }
}

/// `srcfile` environments of native source files, kept between results
/// like the strings above (each took an environment, its hash table and
/// four vectors to make): every native frame of one file shares one, as
/// R's srcrefs of one parsed file do.
const SRCFILE_SLOTS: usize = 1024;

static SRCFILES: Mutex<Option<Kept<String>>> = Mutex::new(None);

/// The calls standing for native frames in rlang traces (`fn()` with its
/// srcref: five objects each), kept by label and place; a trace's list
/// holds them as R's own lists share elements (a change to one, in R,
/// copies it first).
const CALL_SLOTS: usize = 4096;

static CALLS: Mutex<Option<Kept<String>>> = Mutex::new(None);

/// The kept srcfile of `path`, or the one `make` makes, kept; `make`'s
/// own result when the pool is held by a nested result.
///
/// # Safety
/// R's main thread, inside `R_ToplevelExec`; the result is unprotected
/// (kept alive by the pool only when it came from it).
pub unsafe fn srcfile(path: &str, make: impl FnOnce() -> Sexp) -> Sexp {
    // SAFETY: the caller's contract.
    unsafe { kept(&SRCFILES, SRCFILE_SLOTS, path, make) }
}

/// The kept native call of `key` (see [`CALLS`]), or the one `make`
/// makes, kept.
///
/// # Safety
/// As for [`srcfile`].
pub unsafe fn native_call(key: &str, make: impl FnOnce() -> Sexp) -> Sexp {
    // SAFETY: the caller's contract.
    unsafe { kept(&CALLS, CALL_SLOTS, key, make) }
}

/// The object `pool` keeps for `key`, or the one `make` makes, kept;
/// `make`'s own result when the pool is held by a nested result.
///
/// # Safety
/// As for [`srcfile`].
unsafe fn kept(
    pool: &Mutex<Option<Kept<String>>>,
    slots: usize,
    key: &str,
    make: impl FnOnce() -> Sexp,
) -> Sexp {
    let Ok(mut guard) = pool.try_lock() else {
        return make();
    };
    let kept = guard.get_or_insert_with(|| Kept::new(rapi::VECSXP, slots));
    // SAFETY: the caller's contract.
    unsafe { kept.get_or_make(key, make) }
}

/// Character scalars of a few fixed values (`RValue::Shared`), by text.
const SHARED_STRING_SLOTS: usize = 64;

static SHARED_STRINGS: Mutex<Option<Kept<String>>> = Mutex::new(None);

/// The shared character scalar `text` (NA for None), made once and marked
/// not mutable.
///
/// # Safety
/// As for [`srcfile`].
pub unsafe fn shared_string(text: Option<&'static str>) -> Sexp {
    // R's strings hold no NUL: the key of NA is no text's.
    let key = text.unwrap_or("\0NA");
    // SAFETY: the caller's contract; `x` is protected while its element
    // is made, and marking does not allocate.
    unsafe {
        kept(&SHARED_STRINGS, SHARED_STRING_SLOTS, key, || {
            let x = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
            rapi::SET_STRING_ELT(x, 0, text.map_or(rapi::R_NaString, |t| rapi::mkchar(t)));
            rapi::Rf_unprotect(1);
            rapi::MARK_NOT_MUTABLE(x);
            x
        })
    }
}
