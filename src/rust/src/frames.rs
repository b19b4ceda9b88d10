//! Native frame tables: the rows of a capture (`frame_rows.rs`) with what
//! the capture says about itself (typed, made into attributes only when
//! the R data frame is made), and that data frame, whose columns
//! (`columns.rs`) R makes when it first reads them (`lazy_columns.rs`).

use crate::columns::Column;
use crate::frame_rows::{FrameRows, Row};
use crate::lazy_columns;
use crate::rapi::{self, Sexp};
use crate::value::{
    set_attr, set_list_attr, set_scalar_attr, set_static_names, Build, RValue, Scalar, StringCache,
};
use std::ffi::CStr;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::joint::Placement;
use winch_core::splice::expand_inlined;
use winch_core::trace::NativeTrace;
use winch_core::view::Class;

/// How a joint view's native frames were placed among R's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementMode {
    /// Each frame under the one R frame it runs under.
    Exact,
    /// Some frame could sit under more than one R frame.
    Approximate,
    /// R's context chain could not be used (see the fallback reason).
    Fallback,
}

impl PlacementMode {
    /// The mode of a placement that fell back (`fell_back`) or is
    /// approximate.
    pub fn of(fell_back: bool, approximate: bool) -> PlacementMode {
        match (fell_back, approximate) {
            (true, _) => PlacementMode::Fallback,
            (false, true) => PlacementMode::Approximate,
            (false, false) => PlacementMode::Exact,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PlacementMode::Exact => "exact",
            PlacementMode::Approximate => "approximate",
            PlacementMode::Fallback => "fallback",
        }
    }
}

/// What was thrown, for a throw still being handled.
#[derive(Clone, Debug, Default)]
pub struct ThrowInfo {
    pub kind: Option<String>,
    pub type_name: Option<String>,
    pub location: Option<String>,
}

impl ThrowInfo {
    /// `list(kind, type, location)`, as made in R.
    pub fn items(&self) -> [(&'static str, Scalar<'_>); 3] {
        [
            ("kind", Scalar::Str(self.kind.as_deref())),
            ("type", Scalar::Str(self.type_name.as_deref())),
            ("location", Scalar::Str(self.location.as_deref())),
        ]
    }

    /// The same list as a value to make.
    pub fn to_r(&self) -> RValue {
        RValue::List(self.items().into_iter().map(|(name, x)| (name, RValue::from(x))).collect())
    }
}

/// How a joint table's native frames were placed, known once at its
/// capture: the table's attributes, and the `winch` attribute of a trace
/// they are spliced into (`spliced.rs`), are made from it.
#[derive(Clone, Debug)]
pub struct PlacementInfo {
    pub mode: PlacementMode,
    pub fallback_reason: Option<String>,
    /// How many R frames lie beyond the last native frame's (None: not
    /// counted, as in dumps).
    pub beyond_end: Option<usize>,
    /// A C++ throw or Rust panic still being handled, whose frames the
    /// table shows.
    pub throw: Option<ThrowInfo>,
}

pub struct FrameTable {
    /// Shared with the table's columns, which R makes when it first reads
    /// them (`lazy_columns.rs`).
    pub rows: FrameRows,
    /// With the placement columns (`r_frame`, `approximate`, ...).
    pub joint: bool,
    /// The unwinder that walked the stack.
    pub backend: &'static str,
    /// Why the walk stopped early (None: it did not).
    pub truncation: Option<String>,
    /// A debug file could name more of the frames (see R/debuginfod.R).
    pub debug_files_would_help: bool,
    /// Joint tables: how the frames were placed.
    pub placement: Option<PlacementInfo>,
    /// Attributes of one kind of table only (what a throw threw, ...),
    /// after the others.
    pub attrs: Vec<(&'static CStr, RValue)>,
}

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
            rows: FrameRows {
                rows: Arc::new(rows),
                resolved: Arc::new(resolved),
                map: t.map.clone(),
                other_map: None,
            },
            joint: placement.is_some(),
            backend: t.backend.name(),
            truncation: t.truncated.clone(),
            debug_files_would_help: false,
            placement: None,
            attrs: Vec::new(),
        }
    }
}

/// A walk's `truncation` attribute: why it stopped early, or NA.
pub fn truncation_value(truncation: &Option<String>) -> Scalar<'_> {
    match truncation {
        Some(why) => Scalar::Str(Some(why)),
        None => Scalar::Shared(None),
    }
}

/// Sets the attributes of `t`'s data frame `df` (protected) besides its
/// names, class and row names, in their order: from the typed facts, then
/// `attrs`.
///
/// # Safety
/// As for [`Build::build`].
unsafe fn set_attributes(df: Sexp, t: &FrameTable, strings: &mut StringCache) {
    // SAFETY: the caller's contract; the values are borrowed from `t`
    // (this frame owns nothing an R error could jump over).
    unsafe {
        set_scalar_attr(df, c"backend", Scalar::Shared(Some(t.backend)));
        set_scalar_attr(df, c"truncated", Scalar::Lgl(t.truncation.is_some()));
        set_scalar_attr(df, c"truncation", truncation_value(&t.truncation));
        if t.debug_files_would_help {
            set_scalar_attr(df, c"debug_files_would_help", Scalar::Lgl(true));
        }
        if let Some(p) = &t.placement {
            if let Some(throw) = &p.throw {
                set_list_attr(df, c"throw", &throw.items(), strings);
            }
            set_scalar_attr(df, c"placement", Scalar::Str(Some(p.mode.name())));
            set_scalar_attr(df, c"fallback_reason", Scalar::Str(p.fallback_reason.as_deref()));
            if let Some(n) = p.beyond_end {
                set_scalar_attr(df, c"beyond_end", Scalar::Int(n as i32));
            }
        }
        for (name, value) in &t.attrs {
            set_attr(df, name, value, strings);
        }
    }
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
    let columns = Column::of_table(t.joint);
    // SAFETY: the caller's contract; `df` is protected throughout and every
    // column is stored into it right after it is made.
    unsafe {
        let df = rapi::Rf_protect(rapi::Rf_allocVector(rapi::VECSXP, columns.len() as isize));
        // The columns' shared rows (protected; None: made now).
        let lazy = lazy_columns::shared(&t.rows);
        if let Some(p) = lazy {
            rapi::Rf_protect(p);
        }
        for (j, &column) in columns.iter().enumerate() {
            let col = match lazy.and_then(|p| lazy_columns::column(p, column)) {
                Some(col) => col,
                None => column.make(&t.rows, strings),
            };
            rapi::SET_VECTOR_ELT(df, j as isize, col);
        }
        if lazy.is_some() {
            rapi::Rf_unprotect(1);
        }
        // Names and class of the table's own (C code such as
        // data.table::setnames() changes them in place), of pooled strings.
        set_static_names(df, columns.len(), strings, |j| columns[j].name());
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
        set_attributes(df, t, strings);
        rapi::Rf_unprotect(1);
        df
    }
}
