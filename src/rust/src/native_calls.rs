//! The calls standing for native frames in rlang traces: `fn()` with the
//! frame's label as the function's name and, where the debug information
//! gives a file and line, a `srcref` pointing there (one `srcfile` per
//! file). Made here rather than in R, where it was a few R calls per row
//! on every hooked trace.

use crate::rapi::{self, Sexp};
use crate::value::{Build, StringCache};

/// A native frame as its call shows it: its label, and its source file,
/// line and column where the debug information gives them.
pub struct CallSite {
    pub label: String,
    pub file: Option<String>,
    pub line: Option<i32>,
    pub column: Option<i32>,
}

/// Where a frame's source is: its file (an index into the files), its
/// line and column (1-based; 0 when unknown).
#[derive(Clone, Copy)]
struct Place {
    file: usize,
    line: i32,
    column: i32,
}

/// One native frame's call per row: its label, and its place if known.
pub struct NativeCalls {
    rows: Vec<(String, Option<Place>)>,
    files: Vec<String>,
    /// Per row, what its call is kept by between results: the label, then
    /// the file, line and column after NULs (which neither holds). Made
    /// here, not while R allocates (an R error there would leak them).
    keys: Vec<String>,
}

impl NativeCalls {
    /// One call per frame of `sites`.
    pub fn new(sites: Vec<CallSite>) -> Self {
        let mut out =
            NativeCalls { rows: Vec::with_capacity(sites.len()), files: Vec::new(), keys: Vec::new() };
        for site in sites {
            let place = match (site.file, site.line) {
                (Some(f), Some(line)) => {
                    let file = match out.files.iter().position(|x| *x == f) {
                        Some(k) => k,
                        None => {
                            out.files.push(f);
                            out.files.len() - 1
                        }
                    };
                    Some(Place { file, line, column: site.column.filter(|&c| c > 0).unwrap_or(0) })
                }
                _ => None,
            };
            let mut key = site.label.clone();
            if let Some(p) = place {
                use std::fmt::Write;
                let _ = write!(key, "\0{}\0{}\0{}", out.files[p.file], p.line, p.column);
            }
            out.keys.push(key);
            out.rows.push((site.label, place));
        }
        out
    }
}

impl Build for NativeCalls {
    unsafe fn build(&self, strings: &mut StringCache) -> Sexp {
        // SAFETY: the trait's contract (R's main thread, inside
        // `R_ToplevelExec`); `out` and `srcfiles` are protected throughout
        // and every value is stored into one of them right after it is
        // made (a call's srcref before the next allocation).
        unsafe {
            let _ = strings;
            let out = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, self.rows.len() as isize));
            let srcfiles = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, self.files.len() as isize));
            for (k, path) in self.files.iter().enumerate() {
                rapi::SET_VECTOR_ELT(
                    srcfiles,
                    k as isize,
                    crate::string_pool::srcfile(path, || srcfile(path)),
                );
            }
            for (i, ((label, place), key)) in self.rows.iter().zip(&self.keys).enumerate() {
                let call = crate::string_pool::native_call(key, || {
                    make_call(label, place.map(|p| (rapi::VECTOR_ELT(srcfiles, p.file as isize), p)))
                });
                rapi::SET_VECTOR_ELT(out, i as isize, call);
            }
            rapi::Rf_unprotect(2);
            out
        }
    }
}

/// The call `label()`, with a srcref at the place's line and column in
/// `srcfile` (the place's file) when the place is known.
///
/// # Safety
/// As for [`Build::build`]; `srcfile` is protected; the result is
/// unprotected.
unsafe fn make_call(label: &str, place: Option<(Sexp, Place)>) -> Sexp {
    // SAFETY: the caller's contract; the call is protected while its
    // srcref is made, the srcref while its attributes are set.
    unsafe {
        let name = rapi::Rf_protect(rapi::mkchar(label));
        let call = rapi::Rf_protect(rapi::Rf_lang1(rapi::Rf_installTrChar(name)));
        if let Some((srcfile, Place { line, column: col, .. })) = place {
            // The srcref's first column is the byte after the one rlang
            // prints (it prints `srcref[5] - 1`): so that rlang shows the
            // debug information's column (1-based, as compilers print
            // it), that column plus one; an unknown column prints as 0.
            let c = col + 1;
            let r = rapi::Rf_protect(rapi::Rf_allocVector(rapi::INTSXP, 8));
            let v = rapi::INTEGER(r);
            for (j, x) in [line, c, line, c, c, c, line, line].into_iter().enumerate() {
                *v.add(j) = x;
            }
            rapi::Rf_setAttrib(r, rapi::sym(c"srcfile"), srcfile);
            rapi::Rf_setAttrib(r, rapi::R_ClassSymbol, rapi::Rf_mkString(c"srcref".as_ptr()));
            rapi::Rf_setAttrib(call, rapi::sym(c"srcref"), r);
            rapi::Rf_unprotect(1);
        }
        rapi::Rf_unprotect(2);
        call
    }
}

/// A `srcfile` naming a native source file (what rlang and print.srcref
/// read): an environment with `filename`, `wd`, `Enc` and `encoding`.
///
/// # Safety
/// As for [`Build::build`]; the result is unprotected.
unsafe fn srcfile(path: &str) -> Sexp {
    // SAFETY: the caller's contract; `env` is protected while its
    // variables and class are set.
    unsafe {
        let env = rapi::Rf_protect(rapi::R_NewEnv(rapi::R_EmptyEnv, 1, 29));
        let text = |s: &str| {
            let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
            rapi::SET_STRING_ELT(v, 0, rapi::mkchar(s));
            v
        };
        for (name, value) in
            [(c"filename", path), (c"wd", ""), (c"Enc", "unknown"), (c"encoding", "native.enc")]
        {
            let v = text(value);
            rapi::Rf_defineVar(rapi::sym(name), v, env);
            rapi::Rf_unprotect(1);
        }
        rapi::Rf_setAttrib(env, rapi::R_ClassSymbol, rapi::Rf_mkString(c"srcfile".as_ptr()));
        rapi::Rf_unprotect(1);
        env
    }
}
