//! Native frames as rows of a table, in plain Rust: one row per physical
//! frame, plus one per inlined call inside it. `value.rs` makes the R data
//! frame from it.

use crate::value::RValue;
use std::ffi::CStr;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::interleave::Placement;
use winch_core::modules::ModuleMap;
use winch_core::splice::expand_inlined;
use winch_core::symbols::Source;
use winch_core::trace::NativeTrace;
use winch_core::view::Class;

/// One output row: a physical frame, or an inlined call inside it.
pub struct Row {
    pub ip: usize,
    pub module: Option<usize>,
    pub offset: usize,
    pub func: Option<Arc<str>>,
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inlined: bool,
    /// Where `func` came from, and the start of the frame's function
    /// relative to the module (from the unwind information).
    pub source: Option<Source>,
    pub start: Option<u64>,
    pub is_libr: bool,
    /// Joint tables: the R frame the row sits under (None: unplaced), and
    /// whether that is one of several possibilities.
    pub r_frame: Option<usize>,
    pub approximate: bool,
    /// Joint tables: the row is a frame of a C++ throw or Rust panic as it
    /// was at the throw (since unwound), not of the stack captured.
    pub at_throw: bool,
}

pub struct FrameTable {
    pub map: Arc<ModuleMap>,
    pub rows: Vec<Row>,
    /// With the placement columns (`r_frame`, `approximate`).
    pub joint: bool,
    pub attrs: Vec<(&'static CStr, RValue)>,
}

const COLUMNS: [&str; 11] =
    ["func", "ip", "pathname", "is_libr", "file", "line", "inlined", "offset", "column", "start", "source"];
const JOINT_COLUMNS: [&str; 14] = [
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
];

impl FrameTable {
    /// The frames `shown` of `t` (in that order), symbolized as `resolved`,
    /// classified as `classes`; with `placement` for joint tables.
    pub fn new(
        t: &NativeTrace,
        shown: &[usize],
        resolved: &[Arc<[Resolved]>],
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
        resolved: &[Arc<[Resolved]>],
        classes: &[Class],
        placement: Option<&Placement>,
        outermost_first: bool,
    ) -> FrameTable {
        let levels: Vec<usize> = resolved.iter().map(|r| r.len()).collect();
        let order = expand_inlined(&levels, outermost_first);
        let mut rows = Vec::with_capacity(order.len());
        for (k, level) in order {
            let (i, res) = (shown[k], &resolved[k][level]);
            let f = &t.frames[i];
            let offset = f.module.map_or(0, |m| f.ip.wrapping_sub(t.map.module(m).bias));
            rows.push(Row {
                ip: f.ip,
                module: f.module,
                offset,
                func: res.func.clone(),
                file: res.file.clone(),
                line: res.line,
                column: res.column,
                inlined: res.inlined,
                source: res.source,
                start: res.start,
                is_libr: classes[i].interpreter,
                r_frame: placement.and_then(|p| p.parent[i]),
                approximate: placement.is_some_and(|p| p.approximate[i]),
                at_throw: false,
            });
        }
        FrameTable { map: t.map.clone(), rows, joint: placement.is_some(), attrs: trace_attrs(t) }
    }

    pub fn column_names(&self) -> &'static [&'static str] {
        if self.joint {
            &JOINT_COLUMNS
        } else {
            &COLUMNS
        }
    }
}

/// The attributes every frame table carries: the unwinder that walked the
/// stack and whether (and why) the walk stopped early.
fn trace_attrs(t: &NativeTrace) -> Vec<(&'static CStr, RValue)> {
    vec![
        (c"backend", RValue::from(t.backend.name().to_string())),
        (c"truncated", RValue::from(t.truncated.is_some())),
        (c"truncation", RValue::from(t.truncated.clone())),
    ]
}

/// `value` as 16 lowercase hex digits, or as "0x..." without leading zeros
/// (`prefixed`), written into `buf`.
pub fn hex(value: usize, prefixed: bool, buf: &mut [u8; 18]) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let len = if prefixed {
        let digits = ((usize::BITS - value.leading_zeros()).div_ceil(4)).max(1) as usize;
        buf[0] = b'0';
        buf[1] = b'x';
        for k in 0..digits {
            buf[2 + k] = DIGITS[(value >> (4 * (digits - 1 - k))) & 0xf];
        }
        2 + digits
    } else {
        for (k, b) in buf.iter_mut().take(16).enumerate() {
            *b = DIGITS[(value >> (60 - 4 * k)) & 0xf];
        }
        16
    };
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[..len]).unwrap_or("")
}
