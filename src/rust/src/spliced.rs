//! An rlang trace with the native frames of the current stack spliced in,
//! made in one `.Call` (`rs_splice_native`; used by the rlang hook and
//! `winch_add_trace_back()`): the joint capture, where the rows go
//! (`winch_core::splice`) and the new trace's columns and attributes, with
//! no joint data frame, plan or R code between them. A hooked trace runs
//! inside rlang's own `trace_back()`, on every error when the hook is on.

use crate::columns::Column;
use crate::frame_rows::{FrameRows, Row as FrameRow};
use crate::frames::{truncation_value, FrameTable, PlacementInfo};
use crate::native_calls::{CallSite, NativeCalls};
use crate::rapi::{self, Sexp};
use crate::trace_rows::{Held, Row, TraceRows};
use crate::value::{set_attr, Build, RValue, StringCache};
use std::ffi::CString;
use winch_core::splice::{splice_trace, Row as Spliced};

/// A native frame of a joint view, as a trace row needs it.
struct NativeRow {
    /// What its call shows.
    call: CallSite,
    /// The module's file name (its path's last part).
    module: Option<String>,
    r_frame: Option<usize>,
    approximate: bool,
    at_throw: bool,
}

impl NativeRow {
    /// Row `i` of `rows`.
    fn of(rows: &FrameRows, i: usize) -> NativeRow {
        let (r, res): (&FrameRow, _) = (&rows.rows[i], rows.resolution(i));
        let label = match &res.func {
            Some(f) => f.to_string(),
            None => {
                let mut s = String::new();
                winch_core::view::write_unnamed_label(res.start.map(|a| a as usize), r.offset, |b| {
                    s.push_str(std::str::from_utf8(b).unwrap_or(""))
                });
                s
            }
        };
        let module = r.module.map(|m| {
            let p = &rows.map_of(i).module(m).path;
            p.rsplit('/').next().unwrap_or(p).to_string()
        });
        NativeRow {
            call: CallSite {
                label,
                file: res.file.as_deref().map(str::to_string),
                line: Column::Line.int(r, res),
                column: Column::SourceCol.int(r, res),
            },
            module,
            r_frame: r.r_frame,
            approximate: r.approximate,
            at_throw: r.at_throw,
        }
    }

    /// The row's namespace in the trace: "/module", with " (approx.)"
    /// and " [at throw]".
    fn namespace(&self) -> String {
        let mut ns = format!("/{}", self.module.as_deref().unwrap_or("NA"));
        if self.approximate {
            ns.push_str(" (approx.)");
        }
        if self.at_throw {
            ns.push_str(" [at throw]");
        }
        ns
    }
}

/// An rlang trace as the splice needs it.
pub struct Trace {
    /// The data frame (an argument of `.Call`).
    pub sexp: Sexp,
    /// Its columns' names and its attributes' names.
    pub names: Vec<Option<String>>,
    pub attr_names: Vec<CString>,
    /// The R frame of each row, and each row's parent (1-based, 0: root).
    pub row_frames: Vec<usize>,
    pub parents: Vec<usize>,
}

/// `trace` with the native frames of the joint table `table` (outermost
/// first), placed as `placement` says, spliced in under rows `first`
/// (1-based) and later. None when no native row would be added.
pub fn splice(
    trace: Trace,
    table: &FrameTable,
    placement: PlacementInfo,
    first: usize,
) -> Option<SplicedTrace> {
    let natives: Vec<NativeRow> = (0..table.rows.len()).map(|i| NativeRow::of(&table.rows, i)).collect();
    let r_frame: Vec<Option<usize>> = natives.iter().map(|n| n.r_frame).collect();
    let branch: Vec<bool> = natives.iter().map(|n| n.at_throw).collect();
    let s = splice_trace(&trace.row_frames, &trace.parents, &r_frame, &branch, first);
    let mut picked = Vec::new();
    let rows: Vec<Row> = s
        .rows
        .iter()
        .map(|r| match *r {
            Spliced::R(j) => Row::R(j),
            Spliced::Native(i) => {
                picked.push(i);
                Row::Native(picked.len() - 1)
            }
            Spliced::UnplacedMarker => Row::Marker,
        })
        .collect();
    if picked.is_empty() {
        return None;
    }
    let mut natives: Vec<Option<NativeRow>> = natives.into_iter().map(Some).collect();
    let picked: Vec<NativeRow> = picked.iter().filter_map(|&i| natives.get_mut(i)?.take()).collect();
    let namespaces = picked.iter().map(NativeRow::namespace).collect();
    let thrown = picked.iter().map(|n| n.at_throw).collect();
    let added = picked.len() as i32;
    let calls = NativeCalls::new(picked.into_iter().map(|n| n.call).collect());
    // How the native frames were placed (as the joint table's attributes
    // say), and how many were added.
    let winch = RValue::List(vec![
        ("placement", RValue::from(placement.mode.name().to_string())),
        ("fallback_reason", RValue::from(placement.fallback_reason)),
        ("truncated", RValue::from(table.truncation.is_some())),
        ("truncation", RValue::from(truncation_value(&table.truncation))),
        ("added", RValue::from(added)),
        ("throw", placement.throw.map_or(RValue::Null, |t| t.to_r())),
    ]);
    let plan = RValue::List(vec![
        ("kind", RValue::Int(rows.iter().map(|r| Some(row_kind(r))).collect())),
        (
            "src",
            RValue::Int(
                rows.iter()
                    .map(|r| if let Row::R(j) = r { i32::try_from(j + 1).ok() } else { None })
                    .collect(),
            ),
        ),
    ]);
    Some(SplicedTrace {
        rows: TraceRows {
            trace: Held(trace.sexp),
            names: trace.names,
            rows,
            parents: s.parents.iter().map(|&p| i32::try_from(p).ok()).collect(),
            calls,
            namespaces,
            thrown,
        },
        attr_names: trace.attr_names,
        winch,
        debug_files_would_help: table.debug_files_would_help,
        plan,
    })
}

/// The new trace: its columns (`rows`), the old trace's attributes but its
/// names and row names, and `winch` (how the native frames were placed).
pub struct SplicedTrace {
    pub rows: TraceRows,
    pub attr_names: Vec<CString>,
    pub winch: RValue,
    pub debug_files_would_help: bool,
    /// Where each row comes from (`kind`: 1 R, 2 native, 3 the unplaced
    /// marker; `src`: the trace's row), for R to finish columns it must
    /// subset itself (with a class). Made here, not while R allocates.
    pub plan: RValue,
}

impl Build for SplicedTrace {
    unsafe fn build(&self, strings: &mut StringCache) -> Sexp {
        // SAFETY: the trait's contract; `out` is protected throughout, and
        // every attribute value is set right after it is made or read from
        // the trace (an argument of `.Call`, which R keeps alive).
        unsafe {
            let out = rapi::Rf_protect(self.rows.build(strings));
            let trace = self.rows.trace.0;
            // Compact row names: c(NA, -n).
            let n = self.rows.rows.len();
            let row_names = rapi::Rf_protect(rapi::Rf_allocVector(rapi::INTSXP, 2));
            *rapi::INTEGER(row_names) = rapi::R_NaInt;
            *rapi::INTEGER(row_names).add(1) = -(n as i32);
            // In the trace's order (names are set already).
            let mut rows_named = false;
            for name in &self.attr_names {
                match name.to_bytes() {
                    b"names" | b"winch" => {}
                    b"row.names" => {
                        rapi::Rf_setAttrib(out, rapi::R_RowNamesSymbol, row_names);
                        rows_named = true;
                    }
                    _ => {
                        let sym = rapi::Rf_install(name.as_ptr());
                        rapi::Rf_setAttrib(out, sym, rapi::Rf_getAttrib(trace, sym));
                    }
                }
            }
            if !rows_named {
                rapi::Rf_setAttrib(out, rapi::R_RowNamesSymbol, row_names);
            }
            rapi::Rf_unprotect(1);
            set_attr(out, c"winch", &self.winch, strings);
            if self.debug_files_would_help {
                set_attr(out, c"debug_files_would_help", &RValue::from(true), strings);
            }
            // Columns R must subset itself (with a class): where each row
            // comes from, for R to finish them.
            let ncol = rapi::Rf_xlength(out);
            if (0..ncol).any(|j| rapi::VECTOR_ELT(out, j) == rapi::R_NilValue) {
                set_attr(out, c"winch_plan", &self.plan, strings);
            }
            rapi::Rf_unprotect(1);
            out
        }
    }
}

/// 1: an R row, 2: a native row, 3: the unplaced marker.
fn row_kind(r: &Row) -> i32 {
    match r {
        Row::R(_) => 1,
        Row::Native(_) => 2,
        Row::Marker => 3,
    }
}
