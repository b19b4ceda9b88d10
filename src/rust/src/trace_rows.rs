//! The columns of an rlang trace with native frames spliced in
//! (`spliced.rs`): R rows copied from the trace, native rows and the
//! unplaced marker made up, one allocation per column. Where rows go comes
//! from `winch_core::splice`.

use crate::columns::Column;
use crate::native_calls::NativeCalls;
use crate::rapi::{self, Sexp};
use crate::value::{Build, StringCache};

/// What one row of the result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    /// Row `.0` (0-based) of the trace.
    R(usize),
    /// The native frame whose call is `.0` in `calls`.
    Native(usize),
    /// The marker of native frames that could not be placed.
    Marker,
}

/// An R object passed to `.Call`, kept for the build of its result (which
/// runs on the same thread, within the same `.Call`, while R keeps the
/// argument alive).
pub struct Held(pub Sexp);
// SAFETY: a `Held` is made and read on R's main thread within one `.Call`
// (the result is built right after the entry point returns); it is never
// sent to another thread, the bound only satisfies `RValue::Built`.
unsafe impl Send for Held {}

/// The columns of the new trace.
pub struct TraceRows {
    /// The trace's columns (a list) and their names.
    pub trace: Held,
    pub names: Vec<Option<String>>,
    pub rows: Vec<Row>,
    pub parents: Vec<Option<i32>>,
    /// Per native row (in `calls`' order): its namespace ("/module", with
    /// " (approx.)" and " [at throw]") and whether it is at a throw.
    pub calls: NativeCalls,
    pub namespaces: Vec<String>,
    pub thrown: Vec<bool>,
}

impl Build for TraceRows {
    unsafe fn build(&self, strings: &mut StringCache) -> Sexp {
        // SAFETY: the trait's contract; `out` is protected throughout and
        // each column is stored into it right after it is made; `calls` is
        // protected until every call is stored.
        unsafe {
            // The frame tables' `at_throw` column, for rows at a throw.
            let at_throw = Column::AtThrow.name();
            let with_throw = self.thrown.iter().any(|&t| t);
            let has_column = self.names.iter().any(|n| n.as_deref() == Some(at_throw));
            let append = with_throw && !has_column;
            let ncol = self.names.len() + append as usize;
            let out = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, ncol as isize));
            let calls = rapi::Rf_protect(self.calls.build(strings));
            for (j, name) in self.names.iter().enumerate() {
                let col = rapi::VECTOR_ELT(self.trace.0, j as isize);
                let name = name.as_deref().unwrap_or("");
                let made = if name == at_throw && with_throw {
                    self.at_throw()
                } else {
                    self.column(name, col, calls, strings)
                };
                rapi::SET_VECTOR_ELT(out, j as isize, made);
            }
            let mut names: Vec<&str> = self.names.iter().map(|n| n.as_deref().unwrap_or("")).collect();
            if append {
                rapi::SET_VECTOR_ELT(out, self.names.len() as isize, self.at_throw());
                names.push(at_throw);
            }
            crate::value::set_names(out, names.len(), |j| names[j]);
            rapi::Rf_unprotect(2);
            out
        }
    }
}

impl TraceRows {
    /// Whether each row is a native frame at a throw (rows of a C++ throw
    /// or Rust panic, as the stack was at the throw).
    ///
    /// # Safety
    /// As for [`Build::build`]; the result is unprotected.
    unsafe fn at_throw(&self) -> Sexp {
        // SAFETY: the caller's contract; the vector is filled before R
        // allocates again.
        unsafe {
            let v = rapi::Rf_allocVector(rapi::LGLSXP, self.rows.len() as isize);
            let p = rapi::LOGICAL(v);
            for (i, r) in self.rows.iter().enumerate() {
                *p.add(i) = matches!(r, Row::Native(k) if self.thrown[*k]) as i32;
            }
            v
        }
    }

    /// Column `name` of the new trace from the trace's column `col`; NULL
    /// for a column R must subset itself (one with a class, or of a type
    /// not handled here).
    ///
    /// # Safety
    /// As for [`Build::build`]; `calls` is protected; the result is
    /// unprotected.
    unsafe fn column(&self, name: &str, col: Sexp, calls: Sexp, strings: &mut StringCache) -> Sexp {
        let n = self.rows.len();
        // SAFETY: the caller's contract; `col` is an element of the trace
        // (an argument of `.Call`), read by index within its length; the
        // new vector `v` is filled before R allocates again, except where
        // it is protected (strings and lists).
        unsafe {
            if name == "parent" {
                let v = rapi::Rf_allocVector(rapi::INTSXP, n as isize);
                let p = rapi::INTEGER(v);
                for (i, x) in self.parents.iter().enumerate() {
                    *p.add(i) = x.unwrap_or(rapi::R_NaInt);
                }
                return v;
            }
            let kind = rapi::TYPEOF(col);
            let len = rapi::Rf_xlength(col).max(0) as usize;
            if rapi::Rf_isObject(col) != 0 || self.rows.iter().any(|r| matches!(r, Row::R(s) if *s >= len)) {
                return rapi::R_NilValue;
            }
            match kind {
                rapi::LGLSXP => {
                    let new = (name == "visible") as i32;
                    // The source's data first: for an ALTREP column that
                    // may allocate (and collect), which `v` would not survive.
                    let src = rapi::LOGICAL(col);
                    let v = rapi::Rf_allocVector(rapi::LGLSXP, n as isize);
                    let p = rapi::LOGICAL(v);
                    for (i, r) in self.rows.iter().enumerate() {
                        *p.add(i) = if let Row::R(s) = r { *src.add(*s) } else { new };
                    }
                    v
                }
                rapi::INTSXP => {
                    // The source's data first: for an ALTREP column that
                    // may allocate (and collect), which `v` would not survive.
                    let src = rapi::INTEGER(col);
                    let v = rapi::Rf_allocVector(rapi::INTSXP, n as isize);
                    let p = rapi::INTEGER(v);
                    for (i, r) in self.rows.iter().enumerate() {
                        *p.add(i) = if let Row::R(s) = r { *src.add(*s) } else { rapi::R_NaInt };
                    }
                    v
                }
                rapi::REALSXP => {
                    // The source's data first: for an ALTREP column that
                    // may allocate (and collect), which `v` would not survive.
                    let src = rapi::REAL(col);
                    let v = rapi::Rf_allocVector(rapi::REALSXP, n as isize);
                    let p = rapi::REAL(v);
                    for (i, r) in self.rows.iter().enumerate() {
                        *p.add(i) = if let Row::R(s) = r { *src.add(*s) } else { rapi::R_NaReal };
                    }
                    v
                }
                rapi::STRSXP => {
                    let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, n as isize));
                    for (i, r) in self.rows.iter().enumerate() {
                        let c = match r {
                            Row::R(s) => rapi::STRING_ELT(col, *s as isize),
                            Row::Native(k) if name == "namespace" => rapi::mkchar(&self.namespaces[*k]),
                            Row::Native(_) if name == "scope" => strings.text("::"),
                            _ => rapi::R_NaString,
                        };
                        rapi::SET_STRING_ELT(v, i as isize, c);
                    }
                    rapi::Rf_unprotect(1);
                    v
                }
                rapi::VECSXP => {
                    let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, n as isize));
                    let is_call = name == "call";
                    for (i, r) in self.rows.iter().enumerate() {
                        match r {
                            Row::R(s) => {
                                rapi::SET_VECTOR_ELT(v, i as isize, rapi::VECTOR_ELT(col, *s as isize));
                            }
                            Row::Native(k) if is_call => {
                                rapi::SET_VECTOR_ELT(v, i as isize, rapi::VECTOR_ELT(calls, *k as isize));
                            }
                            Row::Marker if is_call => {
                                let f = rapi::sym(c"<unplaced native frames>");
                                rapi::SET_VECTOR_ELT(v, i as isize, rapi::Rf_lang1(f));
                            }
                            _ => {} // NULL, as `[` gives for a new row
                        }
                    }
                    rapi::Rf_unprotect(1);
                    v
                }
                _ => rapi::R_NilValue,
            }
        }
    }
}
