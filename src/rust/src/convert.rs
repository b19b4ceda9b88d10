//! Native frames as an R data frame, built directly with the R API.
//!
//! Captures repeat the same few strings many times (module paths, function
//! names, return addresses of recursive calls), so each distinct string is
//! turned into a CHARSXP once per table.
//!
//! All R allocations happen in `build`, run under `R_ToplevelExec`: if R
//! raises an error there (out of memory), it ends at that boundary instead of
//! jumping over Rust frames. `build` and the helpers it calls hold only
//! references and plain values while they allocate, so nothing with a
//! destructor is ever skipped.

use crate::rapi::{self, Sexp};
use extendr_api::prelude::*;
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::interleave::Placement;
use winch_core::modules::ModuleMap;
use winch_core::trace::NativeTrace;

/// One output row: a physical frame, or an inlined call inside it.
struct Row {
    ip: usize,
    module: Option<usize>,
    offset: usize,
    resolved: Arc<[Resolved]>,
    k: usize,
    is_libr: bool,
    r_frame: Option<usize>,
    approximate: bool,
    host: bool,
}

#[derive(Default)]
pub struct Rows {
    rows: Vec<Row>,
}

impl Rows {
    /// Adds the rows of physical frame `i` (one per inlined call, innermost
    /// first). `placement` is (placement, is a host frame) for joint tables.
    pub fn push(
        &mut self,
        trace: &NativeTrace,
        i: usize,
        resolved: &Arc<[Resolved]>,
        is_libr: bool,
        placement: Option<(&Placement, bool)>,
    ) {
        let f = &trace.frames[i];
        let offset = f.module.map_or(0, |m| f.ip.wrapping_sub(trace.map.module(m).bias));
        for k in 0..resolved.len() {
            self.rows.push(Row {
                ip: f.ip,
                module: f.module,
                offset,
                resolved: resolved.clone(),
                k,
                is_libr,
                r_frame: placement.and_then(|(p, _)| p.parent[i]),
                approximate: placement.is_some_and(|(p, _)| p.approximate[i]),
                host: placement.is_some_and(|(_, h)| h),
            });
        }
    }

    /// A data frame with the columns of `winch_trace_back()` (plus `r_frame`,
    /// `approximate` and `host` when `joint`), and `attrs` as attributes.
    /// NULL if R could not allocate it.
    pub fn into_data_frame(self, map: &ModuleMap, joint: bool, attrs: Vec<(&CStr, Attr)>) -> Robj {
        let mut strings = StringCache::default();
        let mut job = Job { rows: &self.rows, map, joint, attrs: &attrs, strings: &mut strings, out: None };
        // SAFETY: on R's main thread (checked by the callers); `run` only
        // touches `job`, which outlives the call.
        let ok = unsafe { rapi::R_ToplevelExec(run, &mut job as *mut Job as *mut std::ffi::c_void) };
        match job.out {
            Some(df) if ok != 0 => {
                // SAFETY: `df` was preserved by `run`; it is wrapped (and
                // protected by extendr) before it is released.
                unsafe {
                    let out = Robj::from_sexp(df as extendr_api::SEXP);
                    rapi::R_ReleaseObject(df);
                    out
                }
            }
            _ => ().into(),
        }
    }
}

struct Job<'a> {
    rows: &'a [Row],
    map: &'a ModuleMap,
    joint: bool,
    attrs: &'a [(&'a CStr, Attr)],
    strings: &'a mut StringCache,
    out: Option<Sexp>,
}

extern "C" fn run(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the `Job` passed by `into_data_frame`.
    let job = unsafe { &mut *(data as *mut Job) };
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
        let df = build(job.rows, job.map, job.joint, job.attrs, job.strings);
        rapi::R_PreserveObject(df);
        df
    }));
    job.out = built.ok();
}

/// Builds the data frame. R may raise an error at any allocation here.
///
/// # Safety
/// R's main thread, under `R_ToplevelExec`. The list is protected; every
/// column is stored into it right after it is allocated and every CHARSXP
/// right after it is made, so nothing is unprotected while R allocates.
unsafe fn build(
    rows: &[Row],
    map: &ModuleMap,
    joint: bool,
    attrs: &[(&CStr, Attr)],
    strings: &mut StringCache,
) -> Sexp {
    let n = rows.len() as isize;
    let names: &[&str] = if joint { &JOINT_COLUMNS } else { &COLUMNS[..] };
    let df = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, names.len() as isize));

    let func = column(df, 0, rapi::STRSXP, n);
    let ip = column(df, 1, rapi::STRSXP, n);
    let pathname = column(df, 2, rapi::STRSXP, n);
    let is_libr = column(df, 3, rapi::LGLSXP, n);
    let file = column(df, 4, rapi::STRSXP, n);
    let line = column(df, 5, rapi::INTSXP, n);
    let inlined = column(df, 6, rapi::LGLSXP, n);
    let offset = column(df, 7, rapi::STRSXP, n);
    let col = column(df, 8, rapi::INTSXP, n);
    let (is_libr_p, line_p, inlined_p, col_p) =
        (rapi::LOGICAL(is_libr), rapi::INTEGER(line), rapi::LOGICAL(inlined), rapi::INTEGER(col));
    let joint_cols = if joint {
        let r_frame = column(df, 9, rapi::INTSXP, n);
        let approx = column(df, 10, rapi::LGLSXP, n);
        let host = column(df, 11, rapi::LGLSXP, n);
        Some((rapi::INTEGER(r_frame), rapi::LOGICAL(approx), rapi::LOGICAL(host)))
    } else {
        None
    };

    for (i, row) in rows.iter().enumerate() {
        let r = &row.resolved[row.k];
        let ii = i as isize;
        rapi::SET_STRING_ELT(func, ii, strings.arc(func, ii, r.func.as_ref()));
        rapi::SET_STRING_ELT(ip, ii, strings.hex(ip, ii, row.ip, false));
        rapi::SET_STRING_ELT(pathname, ii, strings.module(pathname, ii, map, row.module));
        *is_libr_p.offset(ii) = row.is_libr as i32;
        rapi::SET_STRING_ELT(file, ii, strings.arc(file, ii, r.file.as_ref()));
        *line_p.offset(ii) = opt_int(r.line);
        *inlined_p.offset(ii) = r.inlined as i32;
        rapi::SET_STRING_ELT(offset, ii, strings.hex(offset, ii, row.offset, true));
        *col_p.offset(ii) = opt_int(r.column);
        if let Some((rf, ap, ho)) = joint_cols {
            *rf.offset(ii) = row.r_frame.map_or(rapi::R_NaInt, |k| k as i32);
            *ap.offset(ii) = row.approximate as i32;
            *ho.offset(ii) = row.host as i32;
        }
    }

    let (names_sym, class_sym, rn_sym) = (rapi::sym(c"names"), rapi::sym(c"class"), rapi::sym(c"row.names"));
    let names_sexp = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, names.len() as isize));
    for (j, name) in names.iter().enumerate() {
        rapi::SET_STRING_ELT(names_sexp, j as isize, rapi::mkchar(name));
    }
    rapi::Rf_setAttrib(df, names_sym, names_sexp);
    rapi::Rf_unprotect(1);
    let class = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
    rapi::SET_STRING_ELT(class, 0, rapi::mkchar("data.frame"));
    rapi::Rf_setAttrib(df, class_sym, class);
    rapi::Rf_unprotect(1);
    let row_names = rapi::Rf_protect(rapi::Rf_allocVector(rapi::INTSXP, 2));
    *rapi::INTEGER(row_names) = rapi::R_NaInt;
    *rapi::INTEGER(row_names).offset(1) = -(n as i32);
    rapi::Rf_setAttrib(df, rn_sym, row_names);
    rapi::Rf_unprotect(1);
    for (name, value) in attrs {
        let name = rapi::sym(name);
        let v = rapi::Rf_protect(value.to_sexp());
        rapi::Rf_setAttrib(df, name, v);
        rapi::Rf_unprotect(1);
    }
    rapi::Rf_unprotect(1);
    df
}

const COLUMNS: [&str; 9] =
    ["func", "ip", "pathname", "is_libr", "file", "line", "inlined", "offset", "column"];
const JOINT_COLUMNS: [&str; 12] = [
    "func",
    "ip",
    "pathname",
    "is_libr",
    "file",
    "line",
    "inlined",
    "offset",
    "column",
    "r_frame",
    "approximate",
    "host",
];

/// An attribute value of the result.
pub enum Attr {
    Str(Option<String>),
    Lgl(bool),
    Int(i32),
}

impl Attr {
    unsafe fn to_sexp(&self) -> Sexp {
        match self {
            Attr::Str(s) => {
                let v = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
                rapi::SET_STRING_ELT(v, 0, s.as_deref().map_or(rapi::R_NaString, |s| rapi::mkchar(s)));
                rapi::Rf_unprotect(1);
                v
            }
            Attr::Lgl(b) => {
                let v = rapi::Rf_allocVector(rapi::LGLSXP, 1);
                *rapi::LOGICAL(v) = *b as i32;
                v
            }
            Attr::Int(i) => {
                let v = rapi::Rf_allocVector(rapi::INTSXP, 1);
                *rapi::INTEGER(v) = *i;
                v
            }
        }
    }
}

unsafe fn column(df: Sexp, j: isize, kind: i32, n: isize) -> Sexp {
    let v = rapi::Rf_allocVector(kind, n);
    rapi::SET_VECTOR_ELT(df, j, v);
    v
}

fn opt_int(x: Option<u32>) -> i32 {
    // SAFETY: reading R's NA_integer_ constant.
    x.and_then(|v| i32::try_from(v).ok()).unwrap_or(unsafe { rapi::R_NaInt })
}

/// CHARSXPs made so far in this table, by what they were made from. Each
/// is cached only after it has been stored in a protected vector.
#[derive(Default)]
struct StringCache {
    arcs: HashMap<usize, Sexp>,
    ips: HashMap<usize, Sexp>,
    offsets: HashMap<usize, Sexp>,
    modules: HashMap<usize, Sexp>,
}

impl StringCache {
    /// Stores and returns the CHARSXP for an optional shared string.
    unsafe fn arc(&mut self, vec: Sexp, i: isize, s: Option<&Arc<str>>) -> Sexp {
        let Some(s) = s else { return rapi::R_NaString };
        let key = Arc::as_ptr(s) as *const u8 as usize;
        if let Some(&c) = self.arcs.get(&key) {
            return c;
        }
        let c = rapi::mkchar(s);
        rapi::SET_STRING_ELT(vec, i, c);
        self.arcs.insert(key, c);
        c
    }

    /// 16 lowercase hex digits (`ip`), or "0x..." (`offset`).
    unsafe fn hex(&mut self, vec: Sexp, i: isize, value: usize, prefixed: bool) -> Sexp {
        let cache = if prefixed { &mut self.offsets } else { &mut self.ips };
        if let Some(&c) = cache.get(&value) {
            return c;
        }
        // Formatted on the stack: nothing to free if R fails to allocate.
        let mut buf = [0u8; 18];
        let text: &[u8] = if prefixed {
            let digits = ((usize::BITS - value.leading_zeros() + 3) / 4).max(1) as usize;
            buf[0] = b'0';
            buf[1] = b'x';
            for k in 0..digits {
                buf[2 + k] = b"0123456789abcdef"[(value >> (4 * (digits - 1 - k))) & 0xf];
            }
            &buf[..2 + digits]
        } else {
            for k in 0..16 {
                buf[k] = b"0123456789abcdef"[(value >> (60 - 4 * k)) & 0xf];
            }
            &buf[..16]
        };
        let c = rapi::mkchar(std::str::from_utf8_unchecked(text));
        rapi::SET_STRING_ELT(vec, i, c);
        cache.insert(value, c);
        c
    }

    unsafe fn module(&mut self, vec: Sexp, i: isize, map: &ModuleMap, m: Option<usize>) -> Sexp {
        let Some(m) = m else { return rapi::R_NaString };
        if let Some(&c) = self.modules.get(&m) {
            return c;
        }
        let c = rapi::mkchar(&map.module(m).path);
        rapi::SET_STRING_ELT(vec, i, c);
        self.modules.insert(m, c);
        c
    }
}
