//! The rows of a native frame table, in plain Rust: one row per physical
//! frame, plus one per inlined call inside it, with what each resolved to
//! and the module maps their modules are in. `frames.rs` fills them,
//! `columns.rs` reads them (now, or later for a lazy column).

use std::ops::Range;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::modules::ModuleMap;

/// One row: a physical frame, or an inlined call inside it. Its name,
/// file and line are the table's `resolved[frame][level]` (shared, not
/// copied per row).
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

/// Rows whose modules are another map's than the table's: a throw's
/// branch, whose map is the throw's (which may predate a library's
/// loading).
#[derive(Clone)]
pub struct OtherMap {
    pub rows: Range<usize>,
    pub map: Arc<ModuleMap>,
}

/// A table's rows and what they need to be read: shared (cheap to clone)
/// by the table and its lazy columns.
#[derive(Clone)]
pub struct FrameRows {
    pub rows: Arc<Vec<Row>>,
    /// What the rows' frames resolved to (see [`Row`]).
    pub resolved: Resolutions,
    pub map: Arc<ModuleMap>,
    pub other_map: Option<OtherMap>,
}

impl FrameRows {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// What row `r` (one of these rows) resolved to.
    pub fn resolution_of(&self, r: &Row) -> &Resolved {
        &self.resolved[r.frame][r.level]
    }

    /// What row `i` resolved to.
    pub fn resolution(&self, i: usize) -> &Resolved {
        self.resolution_of(&self.rows[i])
    }

    /// The module map of row `i`'s `module`.
    pub fn map_of(&self, i: usize) -> &ModuleMap {
        match &self.other_map {
            Some(o) if o.rows.contains(&i) => &o.map,
            _ => &self.map,
        }
    }

    /// The rows, to change them (a copy if a column shares them).
    pub fn rows_mut(&mut self) -> &mut Vec<Row> {
        Arc::make_mut(&mut self.rows)
    }
}
