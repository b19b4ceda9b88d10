//! The columns of native frame tables (`winch_trace_back()`, and the joint
//! table behind `winch_sys_calls()`), written once: the table below gives
//! each column's name, how its values are read from a row (which decides
//! its R type) and whether only joint tables have it. The names, the
//! counts, the ALTREP classes (`lazy_columns.rs`) and the vectors made
//! from rows all come from it.
//!
//! Layers: `frame_rows.rs` (the rows) <- this file <- `lazy_columns.rs`
//! <- `frames.rs` (the data frame).

use crate::frame_rows::{FrameRows, Row};
use crate::rapi::{self, Sexp};
use crate::value::{fill, StringCache};
use std::ffi::{c_void, CStr};
use winch_core::debuginfo::Resolved;
use winch_core::modules::ModuleMap;

/// What a character column reads of one row.
pub struct Cell<'a> {
    pub row: &'a Row,
    pub res: &'a Resolved,
    /// The map the row's `module` is in.
    pub map: &'a ModuleMap,
}

/// How a column's values are read from rows, which also decides its R
/// type. Numbers are read without R (an ALTREP element method may not
/// allocate); a string is a CHARSXP made, or found, in a string cache.
#[derive(Clone, Copy)]
pub enum Read {
    /// A logical column.
    Flag(fn(&Row, &Resolved) -> bool),
    /// An integer column (None: NA).
    Int(fn(&Row, &Resolved) -> Option<i32>),
    /// A character column.
    ///
    /// # Safety (of calling it)
    /// As for [`crate::value::Build::build`]; the CHARSXP is stored before
    /// R allocates again.
    Text(unsafe fn(&mut StringCache, &Cell) -> Sexp),
}

/// Which tables have a column.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tables {
    /// Every frame table.
    All,
    /// Joint tables only (they follow the others' columns).
    Joint,
}

/// One row of the table of columns.
struct Spec {
    name: &'static str,
    /// The ALTREP class's name: "winch_" and the column's name.
    class: &'static CStr,
    read: Read,
    tables: Tables,
}

/// A NUL-terminated string as a `CStr`, at compile time.
const fn c_str(s: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(s.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("not a NUL-terminated name"),
    }
}

/// Something done once per column with the column's index as a constant:
/// R tells an ALTREP method nothing but the vector, so each column's
/// class has methods of its own (see `lazy_columns.rs`).
pub trait EachColumn {
    fn column<const K: usize>(&mut self);
}

/// Defines [`Column`] and everything that follows from the table.
macro_rules! frame_columns {
    ($( $(#[doc = $doc:literal])* $variant:ident: $name:literal, $tables:ident, $read:expr; )*) => {
        /// The columns of frame tables, in the tables' order.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub enum Column {
            $( $(#[doc = $doc])* $variant, )*
        }

        /// How many columns there are (joint tables have them all).
        pub const COUNT: usize = [$($name),*].len();

        const SPECS: [Spec; COUNT] = [$(
            Spec {
                name: $name,
                class: c_str(concat!("winch_", $name, "\0")),
                read: $read,
                tables: Tables::$tables,
            },
        )*];

        impl Column {
            /// Every column, in the tables' order.
            pub const ALL: [Column; COUNT] = [$(Column::$variant),*];
        }

        /// Runs `v` once per column, in the tables' order.
        pub fn for_each<V: EachColumn>(v: &mut V) {
            $( v.column::<{ Column::$variant as usize }>(); )*
        }
    };
}

frame_columns! {
    /// The function's name (NA when unknown).
    Func: "func", All, Read::Text(func);
    /// The return address, as 16 hex digits.
    Ip: "ip", All, Read::Text(ip);
    /// The module's path.
    Pathname: "pathname", All, Read::Text(pathname);
    /// Whether the frame is R's own (its interpreter's).
    IsLibr: "is_libr", All, Read::Flag(|r, _| r.is_libr);
    /// The source file, from debug information.
    File: "file", All, Read::Text(file);
    /// The source line, from debug information.
    Line: "line", All, Read::Int(|_, res| int(res.line));
    /// Whether the row is a call the compiler inlined.
    Inlined: "inlined", All, Read::Flag(|_, res| res.inlined);
    /// The address's offset in its module, as "0x...".
    Offset: "offset", All, Read::Text(offset);
    /// The source column (the column called `column`).
    SourceCol: "column", All, Read::Int(|_, res| int(res.column));
    /// The function's start in its module, as "0x...".
    Start: "start", All, Read::Text(start);
    /// Where the name came from.
    Source: "source", All, Read::Text(source);
    /// The R frame the row sits under (NA: unplaced).
    RFrame: "r_frame", Joint, Read::Int(|r, _| r.r_frame.and_then(|k| i32::try_from(k).ok()));
    /// Whether that placement is one of several possible.
    Approximate: "approximate", Joint, Read::Flag(|r, _| r.approximate);
    /// Whether the row is a frame of a throw, as it was at the throw.
    AtThrow: "at_throw", Joint, Read::Flag(|r, _| r.at_throw);
    /// The name, or a label made from the function's start and offset.
    Label: "label", Joint, Read::Text(label);
}

/// How many columns every frame table has (the rest are joint tables').
const ALL_TABLES: usize = {
    let mut n = 0;
    while n < COUNT && matches!(SPECS[n].tables, Tables::All) {
        n += 1;
    }
    // Joint tables' columns follow the others', so that each table's
    // columns are a prefix of `Column::ALL`.
    let mut k = n;
    while k < COUNT {
        assert!(matches!(SPECS[k].tables, Tables::Joint), "joint-only columns must come last");
        k += 1;
    }
    n
};

impl Column {
    fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    /// The column's name.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// The name of the column's ALTREP class.
    pub fn class_name(self) -> &'static CStr {
        self.spec().class
    }

    /// How the column's values are read.
    pub fn read(self) -> Read {
        self.spec().read
    }

    /// The columns of a frame table, in order: joint tables' (`joint`) or
    /// the others'.
    pub fn of_table(joint: bool) -> &'static [Column] {
        if joint {
            &Column::ALL
        } else {
            &Column::ALL[..ALL_TABLES]
        }
    }

    /// Element `r` (a row resolved as `res`) of this logical or integer
    /// column (NA_integer_ for a character column). Allocates nothing.
    pub fn number(self, r: &Row, res: &Resolved) -> i32 {
        // SAFETY: reading R's NA_integer_ constant.
        let na = unsafe { rapi::R_NaInt };
        match self.read() {
            Read::Flag(f) => f(r, res) as i32,
            Read::Int(f) => f(r, res).unwrap_or(na),
            Read::Text(_) => na,
        }
    }

    /// Element `r` of this integer column (None: NA, or not an integer
    /// column).
    pub fn int(self, r: &Row, res: &Resolved) -> Option<i32> {
        match self.read() {
            Read::Int(f) => f(r, res),
            _ => None,
        }
    }

    /// This column of `rows` as an R vector.
    ///
    /// # Safety
    /// As for [`crate::value::Build::build`]; the result is unprotected.
    pub unsafe fn make(self, rows: &FrameRows, strings: &mut StringCache) -> Sexp {
        let n = rows.len();
        let resolved = |r: &Row| rows.resolution_of(r);
        // SAFETY: the caller's contract. Numbers are written within the
        // vector's length; a character vector is protected while its
        // CHARSXPs are made, each stored right after it is made.
        unsafe {
            let text = match self.read() {
                Read::Flag(f) => {
                    return fill(rapi::LGLSXP, n, |p| {
                        ints(p, rows.rows.iter().map(|r| f(r, resolved(r)) as i32))
                    })
                }
                Read::Int(f) => {
                    let na = rapi::R_NaInt;
                    return fill(rapi::INTSXP, n, |p| {
                        ints(p, rows.rows.iter().map(|r| f(r, resolved(r)).unwrap_or(na)))
                    });
                }
                Read::Text(f) => f,
            };
            let col = rapi::Rf_protect(rapi::Rf_allocVector(rapi::STRSXP, n as isize));
            for (i, r) in rows.rows.iter().enumerate() {
                let cell = Cell { row: r, res: resolved(r), map: rows.map_of(i) };
                rapi::SET_STRING_ELT(col, i as isize, text(strings, &cell));
            }
            rapi::Rf_unprotect(1);
            col
        }
    }
}

/// A debug-information number as an R integer (None: NA).
fn int(x: Option<u32>) -> Option<i32> {
    x.and_then(|v| i32::try_from(v).ok())
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

// How each character column reads a row (`Read::Text`; the safety
// contract is that of calling one).

unsafe fn func(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { s.arc(c.res.func.as_ref()) }
}

unsafe fn ip(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { s.hex(c.row.ip, false) }
}

unsafe fn pathname(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract; the map outlives the result's
    // making (it is the table's).
    unsafe { c.row.module.map_or(rapi::R_NaString, |m| s.module(c.map, m)) }
}

unsafe fn file(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { s.arc(c.res.file.as_ref()) }
}

unsafe fn offset(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { s.hex(c.row.offset, true) }
}

unsafe fn start(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { c.res.start.map_or(rapi::R_NaString, |a| s.hex(a as usize, true)) }
}

unsafe fn source(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe { c.res.source.map_or(rapi::R_NaString, |src| s.text(src.name())) }
}

unsafe fn label(s: &mut StringCache, c: &Cell) -> Sexp {
    // SAFETY: `Read::Text`'s contract.
    unsafe {
        match &c.res.func {
            Some(f) => s.arc(Some(f)),
            None => s.unnamed(c.res.start.map(|a| a as usize), c.row.offset),
        }
    }
}
