//! CHARSXPs kept from one result to the next: warm captures repeat the
//! same return addresses, offsets and names, and making their CHARSXPs
//! again (R hashes and compares each one into its global cache) was a
//! third of a warm `winch_trace_back()`'s `.Call`. They are held in one
//! preserved character vector, so R keeps them alive; when it is full the
//! pool starts over.

use crate::rapi::{self, Sexp};
use std::sync::{Arc, Mutex, MutexGuard};
use winch_core::fasthash::FastMap;

/// Slots of the pool's vector.
const SLOTS: usize = 1 << 14;

/// What a pooled CHARSXP was made from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// An address as 16 hex digits, or as "0x..." (`true`).
    Hex(usize, bool),
    /// A shared string, by its address (the pool holds a clone, so the
    /// address is not reused while the entry lives).
    Arc(usize),
    /// A static string, by its address.
    Static(usize),
    /// The label of an unnamed frame: its function's start (`usize::MAX`
    /// when unknown) and offset.
    Label(usize, usize),
}

#[derive(Default)]
pub struct Pool {
    /// The preserved STRSXP (as an address: 0 before the first use).
    vector: usize,
    used: usize,
    slots: FastMap<Key, usize>,
    /// The shared strings whose addresses are keys.
    held: Vec<Arc<str>>,
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
        let &slot = self.slots.get(&key)?;
        // SAFETY: `vector` is the preserved STRSXP and `slot` < its length.
        Some(unsafe { rapi::STRING_ELT(self.vector as Sexp, slot as isize) })
    }

    /// Keeps `c` (a CHARSXP) for `key`; `arc` is the shared string of an
    /// `Arc` key.
    ///
    /// # Safety
    /// R's main thread, inside `R_ToplevelExec` (starting over allocates);
    /// `c` is stored by the caller or here before R allocates again, so it
    /// is protected by `c` being kept alive by the caller's contract.
    pub unsafe fn put(&mut self, key: Key, c: Sexp, arc: Option<&Arc<str>>) {
        // SAFETY: the caller's contract.
        unsafe {
            if self.vector == 0 || self.used == SLOTS {
                // `c` must survive the allocation: protected across it.
                rapi::Rf_protect(c);
                let fresh = rapi::Rf_allocVector(rapi::STRSXP, SLOTS as isize);
                rapi::R_PreserveObject(fresh);
                rapi::Rf_unprotect(1);
                if self.vector != 0 {
                    rapi::R_ReleaseObject(self.vector as Sexp);
                }
                *self = Pool { vector: fresh as usize, ..Pool::default() };
            }
            rapi::SET_STRING_ELT(self.vector as Sexp, self.used as isize, c);
        }
        self.slots.insert(key, self.used);
        self.used += 1;
        if let Some(a) = arc {
            self.held.push(a.clone());
        }
    }
}

/// `srcfile` environments of native source files, kept between results
/// like the strings above (each took an environment, its hash table and
/// four vectors to make): every native frame of one file shares one, as
/// R's srcrefs of one parsed file do.
#[derive(Default)]
pub struct Srcfiles {
    /// The preserved list holding them (as an address: 0 before the first).
    vector: usize,
    by_path: FastMap<String, usize>,
}

const SRCFILE_SLOTS: usize = 1024;

static SRCFILES: Mutex<Option<Srcfiles>> = Mutex::new(None);

/// The kept srcfile of `path`, or the one `make` makes, kept; `make`'s
/// own result when the pool is held by a nested result.
///
/// # Safety
/// R's main thread, inside `R_ToplevelExec`; the result is unprotected
/// (kept alive by the pool only when it came from it).
pub unsafe fn srcfile(path: &str, make: impl FnOnce() -> Sexp) -> Sexp {
    let Ok(mut guard) = SRCFILES.try_lock() else {
        return make();
    };
    let pool = guard.get_or_insert_with(Srcfiles::default);
    // SAFETY: the caller's contract; the pool's list is preserved.
    unsafe {
        if let Some(&slot) = pool.by_path.get(path) {
            return rapi::VECTOR_ELT(pool.vector as Sexp, slot as isize);
        }
        let env = rapi::Rf_protect(make());
        if pool.vector == 0 || pool.by_path.len() == SRCFILE_SLOTS {
            let fresh = rapi::Rf_allocVector(rapi::VECSXP, SRCFILE_SLOTS as isize);
            rapi::R_PreserveObject(fresh);
            if pool.vector != 0 {
                rapi::R_ReleaseObject(pool.vector as Sexp);
            }
            *pool = Srcfiles { vector: fresh as usize, ..Srcfiles::default() };
        }
        let slot = pool.by_path.len();
        rapi::SET_VECTOR_ELT(pool.vector as Sexp, slot as isize, env);
        pool.by_path.insert(path.to_string(), slot);
        rapi::Rf_unprotect(1);
        env
    }
}
