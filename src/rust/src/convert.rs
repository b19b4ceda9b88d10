//! Native frames as R columns.

use extendr_api::prelude::*;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::interleave::Placement;
use winch_core::trace::NativeTrace;

/// Columns of the native-frame table, one row per (possibly inlined) frame.
#[derive(Default)]
pub struct Rows {
    func: Vec<Option<String>>,
    ip: Vec<String>,
    pathname: Vec<Option<String>>,
    is_libr: Vec<bool>,
    file: Vec<Option<String>>,
    line: Vec<Option<i32>>,
    column: Vec<Option<i32>>,
    inlined: Vec<bool>,
    offset: Vec<Option<String>>,
    r_frame: Vec<Option<i32>>,
    approximate: Vec<bool>,
    host: Vec<bool>,
}

impl Rows {
    /// Adds the rows of physical frame `i`.
    pub fn push(
        &mut self,
        trace: &NativeTrace,
        i: usize,
        resolved: &Arc<[Resolved]>,
        is_libr: bool,
        placement: Option<(&Placement, bool)>,
    ) {
        let f = &trace.frames[i];
        let module = f.module.map(|m| trace.map.module(m));
        let ip = format!("{:016x}", f.ip);
        let offset = module.map(|m| format!("0x{:x}", f.ip.wrapping_sub(m.bias)));
        for r in resolved.iter() {
            self.func.push(r.func.as_deref().map(String::from));
            self.ip.push(ip.clone());
            self.pathname.push(module.map(|m| m.path.clone()));
            self.is_libr.push(is_libr);
            self.file.push(r.file.as_deref().map(String::from));
            self.line.push(r.line.and_then(|l| i32::try_from(l).ok()));
            self.column.push(r.column.and_then(|c| i32::try_from(c).ok()));
            self.inlined.push(r.inlined);
            self.offset.push(offset.clone());
            if let Some((p, host)) = placement {
                self.r_frame.push(p.parent[i].and_then(|k| i32::try_from(k).ok()));
                self.approximate.push(p.approximate[i]);
                self.host.push(host);
            }
        }
    }

    /// A named list of columns (plus `extra` elements), ready for
    /// `new_frames_df()` on the R side.
    pub fn into_list(self, joint: bool, extra: Vec<(&str, Robj)>) -> Robj {
        let mut pairs: Vec<(&str, Robj)> = vec![
            ("func", self.func.into()),
            ("ip", self.ip.into()),
            ("pathname", self.pathname.into()),
            ("is_libr", self.is_libr.into()),
            ("file", self.file.into()),
            ("line", self.line.into()),
            ("inlined", self.inlined.into()),
            ("offset", self.offset.into()),
            ("column", self.column.into()),
        ];
        if joint {
            pairs.push(("r_frame", self.r_frame.into()));
            pairs.push(("approximate", self.approximate.into()));
            pairs.push(("host", self.host.into()));
        }
        pairs.extend(extra);
        List::from_pairs(pairs).into()
    }
}

/// `NA_character_` or the string.
pub fn opt_str(x: Option<&str>) -> Robj {
    let v: Vec<Option<String>> = vec![x.map(String::from)];
    v.into()
}
