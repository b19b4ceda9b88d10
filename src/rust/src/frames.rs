//! Native frames as rows of a table, in plain Rust: one row per physical
//! frame, plus one per inlined call inside it. `value.rs` makes the R data
//! frame from it.

use crate::lazy_columns;
use crate::rapi::{self, Sexp};
use crate::value::{fill, set_attr, set_static_names, Build, RValue, StringCache};
use std::ffi::c_void;
use std::ffi::CStr;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::interleave::Placement;
use winch_core::modules::ModuleMap;
use winch_core::splice::expand_inlined;
use winch_core::trace::NativeTrace;
use winch_core::view::Class;

/// One output row: a physical frame, or an inlined call inside it. Its
/// name, file and line are the table's `resolved[frame][level]` (shared,
/// not copied per row).
#[derive(Clone)]
pub struct Row {
    pub ip: usize,
    pub module: Option<usize>,
    pub offset: usize,
    pub frame: usize,
    pub level: usize,
    pub is_libr: bool,
    /// Joint tables: the R frame the row sits under (None: unplaced), and
    /// whether that is one of several possibilities.
    pub r_frame: Option<usize>,
    pub approximate: bool,
    /// Joint tables: the row is a frame of a C++ throw or Rust panic as it
    /// was at the throw (since unwound), not of the stack captured.
    pub at_throw: bool,
}

/// Symbolized frames, by frame: each frame's calls, innermost first.
pub type Resolutions = Arc<Vec<Arc<[Resolved]>>>;

/// What row `r` resolved to.
pub fn resolution<'a>(resolved: &'a [Arc<[Resolved]>], r: &Row) -> &'a Resolved {
    &resolved[r.frame][r.level]
}

pub struct FrameTable {
    pub map: Arc<ModuleMap>,
    /// Shared with the table's columns, which R makes when it
    /// first reads them (`lazy_columns.rs`).
    pub rows: Arc<Vec<Row>>,
    /// What the rows' frames resolved to (see [`Row`]).
    pub resolved: Resolutions,
    /// With the placement columns (`r_frame`, `approximate`).
    pub joint: bool,
    pub attrs: Vec<(&'static CStr, RValue)>,
    /// Rows of a throw's branch, whose modules are another map's (the
    /// throw's, which may predate a library's loading).
    pub branch: Option<(std::ops::Range<usize>, Arc<ModuleMap>)>,
}

const COLUMNS: [&str; 11] =
    ["func", "ip", "pathname", "is_libr", "file", "line", "inlined", "offset", "column", "start", "source"];
const JOINT_COLUMNS: [&str; 15] = [
    "func",
    "ip",
    "pathname",
    "is_libr",
    "file",
    "line",
    "inlined",
    "offset",
    "column",
    "start",
    "source",
    "r_frame",
    "approximate",
    "at_throw",
    "label",
];

impl FrameTable {
    /// The frames `shown` of `t` (in that order), symbolized as `resolved`,
    /// classified as `classes`; with `placement` for joint tables.
    pub fn new(
        t: &NativeTrace,
        shown: &[usize],
        resolved: Vec<Arc<[Resolved]>>,
        classes: &[Class],
        placement: Option<&Placement>,
    ) -> FrameTable {
        // Joint tables read outermost first, inlined calls included.
        Self::in_order(t, shown, resolved, classes, placement, placement.is_some())
    }

    /// As `new`, with the order of each frame's inlined calls given:
    /// `outermost_first` for rows a joint view shows (a throw's branch).
    pub fn in_order(
        t: &NativeTrace,
        shown: &[usize],
        resolved: Vec<Arc<[Resolved]>>,
        classes: &[Class],
        placement: Option<&Placement>,
        outermost_first: bool,
    ) -> FrameTable {
        let mut rows = Vec::with_capacity(resolved.iter().map(|r| r.len()).sum());
        for (k, level) in expand_inlined(resolved.iter().map(|r| r.len()), outermost_first) {
            let i = shown[k];
            let f = &t.frames[i];
            let offset = f.module.map_or(0, |m| f.ip.wrapping_sub(t.map.module(m).bias));
            rows.push(Row {
                ip: f.ip,
                module: f.module,
                offset,
                frame: k,
                level,
                is_libr: classes[i].interpreter,
                r_frame: placement.and_then(|p| p.parent[i]),
                approximate: placement.is_some_and(|p| p.approximate[i]),
                at_throw: false,
            });
        }
        FrameTable {
            map: t.map.clone(),
            rows: Arc::new(rows),
            resolved: Arc::new(resolved),
            joint: placement.is_some(),
            attrs: trace_attrs(t),
            branch: None,
        }
    }

    /// What row `i` resolved to.
    pub fn resolution(&self, i: usize) -> &Resolved {
        resolution(&self.resolved, &self.rows[i])
    }

    /// The module map of row `i`'s `module`.
    pub fn map_of(&self, i: usize) -> &ModuleMap {
        map_of(&self.map, &self.branch, i)
    }

    /// The rows, to change them (a copy if a column shares them).
    pub fn rows_mut(&mut self) -> &mut Vec<Row> {
        Arc::make_mut(&mut self.rows)
    }

    pub fn column_names(&self) -> &'static [&'static str] {
        if self.joint {
            &JOINT_COLUMNS
        } else {
            &COLUMNS
        }
    }
}

/// The module map of row `i`: `branch`'s for its rows, else `map`.
pub fn map_of<'a>(
    map: &'a ModuleMap,
    branch: &'a Option<(std::ops::Range<usize>, Arc<ModuleMap>)>,
    i: usize,
) -> &'a ModuleMap {
    match branch {
        Some((rows, m)) if rows.contains(&i) => m,
        _ => map,
    }
}

/// The attributes every frame table carries: the unwinder that walked the
/// stack and whether (and why) the walk stopped early.
fn trace_attrs(t: &NativeTrace) -> Vec<(&'static CStr, RValue)> {
    vec![
        (c"backend", RValue::Shared(Some(t.backend.name()))),
        (c"truncated", RValue::from(t.truncated.is_some())),
        (
            c"truncation",
            match &t.truncated {
                Some(why) => RValue::from(why.clone()),
                None => RValue::Shared(None),
            },
        ),
    ]
}

impl Build for FrameTable {
    unsafe fn build(&self, strings: &mut StringCache) -> Sexp {
        // SAFETY: the trait's contract.
        unsafe { build_frames(self, strings) }
    }
}

/// The data frame of a frame table.
///
/// # Safety
/// As for [`Build::build`].
unsafe fn build_frames(t: &FrameTable, strings: &mut StringCache) -> Sexp {
    let n = t.rows.len();
    let names = t.column_names();
    // SAFETY: the caller's contract; `df` is protected throughout and every
    // column is stored into it right after it is allocated.
    unsafe {
        let df = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, names.len() as isize));
        // The columns' shared rows (protected; None: made now).
        let lazy = lazy_columns::shared(t);
        if let Some(p) = lazy {
            rapi::Rf_protect(p);
        }
        for (j, name) in names.iter().enumerate() {
            build_column(t, name, strings, df, j, lazy);
        }
        if lazy.is_some() {
            rapi::Rf_unprotect(1);
        }
        // Names and class of the table's own (C code such as
        // data.table::setnames() changes them in place), of pooled strings.
        set_static_names(df, names.len(), strings, |j| names[j]);
        let class = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, 1));
        rapi::SET_STRING_ELT(class, 0, strings.text("data.frame"));
        rapi::Rf_setAttrib(df, rapi::R_ClassSymbol, class);
        rapi::Rf_unprotect(1);
        // Compact row names: c(NA, -n).
        let row_names = rapi::Rf_protect(rapi::Rf_allocVector(rapi::INTSXP, 2));
        *rapi::INTEGER(row_names) = rapi::R_NaInt;
        *rapi::INTEGER(row_names).add(1) = -(n as i32);
        rapi::Rf_setAttrib(df, rapi::sym(c"row.names"), row_names);
        rapi::Rf_unprotect(1);
        for (name, value) in &t.attrs {
            set_attr(df, name, value, strings);
        }
        rapi::Rf_unprotect(1);
        df
    }
}

/// Column `name` of `t`, stored as element `j` of the protected `df`:
/// made when R first reads it where `lazy` (protected) holds the rows.
///
/// # Safety
/// As for [`Build::build`]; `df` protected, a list with more than `j` elements.
unsafe fn build_column(
    t: &FrameTable,
    name: &str,
    strings: &mut StringCache,
    df: Sexp,
    j: usize,
    lazy: Option<Sexp>,
) {
    let kind = Column::of(name);
    // SAFETY: the caller's contract; the column is stored into `df` before
    // R allocates again.
    unsafe {
        let col = match lazy.and_then(|p| lazy_columns::column(p, kind)) {
            Some(col) => col,
            None => make_column(kind, &t.rows, &t.resolved, &t.map, &t.branch, strings),
        };
        rapi::SET_VECTOR_ELT(df, j as isize, col);
    }
}

/// The columns of frame tables.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Column {
    Func,
    Ip,
    Pathname,
    IsLibr,
    File,
    Line,
    Inlined,
    Offset,
    /// The source column (`column`).
    SourceCol,
    Start,
    Source,
    RFrame,
    Approximate,
    AtThrow,
    Label,
}

impl Column {
    pub const ALL: [Column; 15] = [
        Column::Func,
        Column::Ip,
        Column::Pathname,
        Column::IsLibr,
        Column::File,
        Column::Line,
        Column::Inlined,
        Column::Offset,
        Column::SourceCol,
        Column::Start,
        Column::Source,
        Column::RFrame,
        Column::Approximate,
        Column::AtThrow,
        Column::Label,
    ];

    /// The column called `name` (`label` for any other name).
    fn of(name: &str) -> Column {
        match name {
            "func" => Column::Func,
            "ip" => Column::Ip,
            "pathname" => Column::Pathname,
            "is_libr" => Column::IsLibr,
            "file" => Column::File,
            "line" => Column::Line,
            "inlined" => Column::Inlined,
            "offset" => Column::Offset,
            "column" => Column::SourceCol,
            "start" => Column::Start,
            "source" => Column::Source,
            "r_frame" => Column::RFrame,
            "approximate" => Column::Approximate,
            "at_throw" => Column::AtThrow,
            _ => Column::Label,
        }
    }

    /// The R type of the column's vector.
    pub fn r_type(self) -> std::ffi::c_int {
        match self {
            Column::IsLibr | Column::Inlined | Column::Approximate | Column::AtThrow => rapi::LGLSXP,
            Column::Line | Column::SourceCol | Column::RFrame => rapi::INTSXP,
            _ => rapi::STRSXP,
        }
    }
}

/// Element `r` (a row resolved as `res`) of the logical or integer column
/// `kind` (NA_integer_ for a string column).
pub fn number(kind: Column, r: &Row, res: &Resolved) -> i32 {
    // SAFETY: reading R's NA_integer_ constant.
    let na = unsafe { rapi::R_NaInt };
    let opt = |x: Option<u32>| x.and_then(|v| i32::try_from(v).ok()).unwrap_or(na);
    match kind {
        Column::IsLibr => r.is_libr as i32,
        Column::Inlined => res.inlined as i32,
        Column::Approximate => r.approximate as i32,
        Column::AtThrow => r.at_throw as i32,
        Column::Line => opt(res.line),
        Column::SourceCol => opt(res.column),
        Column::RFrame => r.r_frame.and_then(|k| i32::try_from(k).ok()).unwrap_or(na),
        _ => na,
    }
}

/// Column `kind` of `rows` as an R vector, its modules `map`'s
/// (`branch`'s for its rows).
///
/// # Safety
/// As for [`Build::build`]; the result is unprotected.
pub unsafe fn make_column(
    kind: Column,
    rows: &[Row],
    resolved: &[Arc<[Resolved]>],
    map: &ModuleMap,
    branch: &Option<(std::ops::Range<usize>, Arc<ModuleMap>)>,
    strings: &mut StringCache,
) -> Sexp {
    let n = rows.len();
    // SAFETY: the caller's contract. Numbers are written within the
    // vector's length; a string column is protected while its CHARSXPs
    // are made, each stored right after it is made.
    unsafe {
        if kind.r_type() != rapi::STRSXP {
            return fill(kind.r_type(), n, |p| {
                ints(p, rows.iter().map(|r| number(kind, r, resolution(resolved, r))))
            });
        }
        let col = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, n as isize));
        for (i, r) in rows.iter().enumerate() {
            let res = resolution(resolved, r);
            let c = match kind {
                Column::Func => strings.arc(res.func.as_ref()),
                Column::Ip => strings.hex(r.ip, false),
                Column::Pathname => {
                    r.module.map_or(rapi::R_NaString, |m| strings.module(map_of(map, branch, i), m))
                }
                Column::File => strings.arc(res.file.as_ref()),
                Column::Source => res.source.map_or(rapi::R_NaString, |src| strings.text(src.name())),
                Column::Start => res.start.map_or(rapi::R_NaString, |a| strings.hex(a as usize, true)),
                Column::Label => match &res.func {
                    Some(f) => strings.arc(Some(f)),
                    None => strings.unnamed(res.start.map(|a| a as usize), r.offset),
                },
                _ => strings.hex(r.offset, true),
            };
            rapi::SET_STRING_ELT(col, i as isize, c);
        }
        rapi::Rf_unprotect(1);
        col
    }
}

/// Writes `values` to the int data at `p`.
///
/// # Safety
/// `p` points to at least as many ints as `values` yields.
unsafe fn ints(p: *mut c_void, values: impl Iterator<Item = i32>) {
    let p = p as *mut i32;
    // SAFETY: the caller's contract.
    values.enumerate().for_each(|(i, x)| unsafe { *p.add(i) = x });
}
