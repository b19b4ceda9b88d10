//! Throw capture as R sees it: turning it on and off, the last throw as a
//! table, and the branch a recorded throw adds to a joint view.

use crate::args::Arg;
use crate::frames::FrameTable;
use crate::rstate;
use crate::value::RValue;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::error::{Error, Result};
use winch_core::joint::{self, Joint};
use winch_core::modules::ModuleMap;
use winch_core::throws::{self, Record, ThrowKind};
use winch_core::trace::{NativeFrame, NativeTrace};
use winch_core::unwind::{self, Backend};
use winch_core::view;

fn require_main_thread() -> Result<()> {
    if rstate::on_main_thread() {
        Ok(())
    } else {
        Err(Error::WrongThread)
    }
}

fn status_value(installed: bool, slots: usize, modules: usize) -> RValue {
    RValue::List(vec![
        ("supported", throws::supported().into()),
        ("installed", installed.into()),
        ("slots", RValue::from(slots as i32)),
        ("modules", RValue::from(modules as i32)),
    ])
}

/// Turns capture on or off; returns what it covers now.
pub fn rs_throws_set(enable: Arg) -> Result<RValue> {
    require_main_thread()?;
    if !enable.flag()? {
        throws::uninstall()?;
        return Ok(status_value(false, 0, 0));
    }
    if !throws::supported() {
        return Err(Error::Unavailable("capturing throws needs x86_64 Linux".into()));
    }
    let facts = throws::Facts::from_r(rstate::facts()?);
    let s = throws::install(facts)?;
    Ok(status_value(true, s.slots, s.modules))
}

/// Whether capture is on, and what it covers.
pub fn rs_throws_status() -> Result<RValue> {
    let installed = throws::installed();
    let s = if installed { throws::status() } else { throws::Status::default() };
    Ok(status_value(installed, s.slots, s.modules))
}

/// After each top-level expression: a new epoch (earlier throws are never
/// matched again), and a scan for modules loaded meanwhile by other means
/// than R's own `dlopen`.
pub fn rs_throws_tick() -> Result<RValue> {
    require_main_thread()?;
    throws::next_epoch();
    if throws::installed() {
        throws::rescan_if_changed();
    }
    Ok(throws::installed().into())
}

/// A record's frames as a native trace over the current module map.
fn record_trace(r: &Record, map: Arc<ModuleMap>) -> NativeTrace {
    let frames = r
        .frames()
        .iter()
        .map(|&(ip, sp)| NativeFrame { ip, lo: sp, module: map.module_of(ip), probe: ip.wrapping_sub(1) })
        .collect();
    let truncated = if r.truncated {
        Some(format!("the throw's stack was recorded up to {} frames", throws::MAX_FRAMES))
    } else {
        None
    };
    NativeTrace { backend: Backend::Cfi, map, frames, truncated }
}

/// The index of the first frame that is not the throw machinery.
fn first_thrower(resolved: &[Arc<[Resolved]>]) -> usize {
    resolved
        .iter()
        .position(|r| {
            let name = r.last().and_then(|f| f.func.as_deref());
            !name.is_some_and(throws::is_throw_machinery)
        })
        .unwrap_or(resolved.len())
}

/// Reads the bytes of a NUL-terminated string at `addr` (at most 512),
/// without risking a fault.
fn read_c_string(addr: usize) -> Option<String> {
    if addr < 4096 || !winch_core::memory::available() {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < 512 {
        let to_page_end = 4096 - at % 4096;
        let mut buf = vec![0u8; to_page_end.min(64)];
        if !winch_core::memory::read(at, &mut buf) {
            return None;
        }
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return String::from_utf8(out).ok();
        }
        out.extend_from_slice(&buf);
        at += buf.len();
    }
    None
}

/// The C++ type of a recorded exception (from its `std::type_info`: a
/// vtable pointer, then the mangled name).
fn type_name(r: &Record) -> Option<String> {
    match r.id.kind {
        ThrowKind::Rust => return None,
        ThrowKind::Foreign => return None,
        ThrowKind::Cpp => {}
    }
    let mut word = [0u8; 8];
    if r.id.type_info == 0 || !winch_core::memory::read(r.id.type_info + 8, &mut word) {
        return None;
    }
    let mangled = read_c_string(usize::from_ne_bytes(word))?;
    let plausible = !mangled.is_empty() && mangled.bytes().all(|b| b.is_ascii_graphic());
    plausible.then(|| throws::demangle_type(&mangled))
}

/// The record's frames to show, innermost first: from the thrower to
/// `last` (an index into the record), the machinery left out.
fn shown(resolved: &[Arc<[Resolved]>], last: usize) -> Vec<usize> {
    let first = first_thrower(resolved).min(last);
    (first..=last).collect()
}

/// The location of the innermost shown frame with a source line.
fn location(resolved: &[Arc<[Resolved]>], shown: &[usize]) -> Option<String> {
    shown.iter().flat_map(|&i| resolved[i].iter()).find_map(|f| match (&f.file, f.line) {
        (Some(file), Some(line)) => Some(format!("{file}:{line}")),
        _ => None,
    })
}

/// The last recorded throw, innermost frame first, as `winch_trace_back()`
/// shows frames (R's own included).
pub fn rs_last_throw() -> Result<RValue> {
    require_main_thread()?;
    let map = winch_core::modules::current();
    let Some(r) = throws::records().into_iter().next() else {
        let t = NativeTrace { backend: Backend::Cfi, map, frames: Vec::new(), truncated: None };
        let mut table = FrameTable::new(&t, &[], &[], &[], None);
        push_throw_attrs(&mut table, None, None, None, 0);
        return Ok(RValue::Built(Box::new(table)));
    };
    let t = record_trace(&r, map);
    let modules: Vec<Option<usize>> = t.frames.iter().map(|f| f.module).collect();
    let classes = view::classify(&t.map, &modules, rstate::known_modules(&t.map), false);
    let resolved = t.symbolize();
    let shown = if t.frames.is_empty() { Vec::new() } else { shown(&resolved, t.frames.len() - 1) };
    let picked: Vec<Arc<[Resolved]>> = shown.iter().map(|&i| resolved[i].clone()).collect();
    let mut table = FrameTable::new(&t, &shown, &picked, &classes, None);
    let loc = location(&resolved, &shown);
    push_throw_attrs(&mut table, Some(r.id.kind), type_name(&r), loc, r.rethrows);
    Ok(RValue::Built(Box::new(table)))
}

fn push_throw_attrs(
    table: &mut FrameTable,
    kind: Option<ThrowKind>,
    type_name: Option<String>,
    location: Option<String>,
    rethrows: u32,
) {
    let kind_name = kind.map(|k| k.name().to_string());
    let type_name = match kind {
        Some(ThrowKind::Rust) => Some("Rust panic".to_string()),
        _ => type_name,
    };
    table.attrs.push((c"kind", RValue::from(kind_name)));
    table.attrs.push((c"type", RValue::from(type_name)));
    table.attrs.push((c"location", RValue::from(location)));
    table.attrs.push((c"rethrown", RValue::from(rethrows as i32)));
}

/// Whether two instruction pointers (return addresses) lie in the same
/// function: the same function start in the unwind tables, or (a function
/// whose rarely run code the compiler moved to a part of its own, as GCC
/// does with `catch` blocks, `foo.cold`) the same name.
fn same_function(t: &NativeTrace, a: usize, b: usize) -> bool {
    if let (Some(x), Some(y)) =
        (unwind::function_start(a.wrapping_sub(1)), unwind::function_start(b.wrapping_sub(1)))
    {
        if x == y {
            return true;
        }
    }
    let name = |ip: usize| -> Option<Arc<str>> {
        let m = t.map.module_of(ip)?;
        let probe = ip.wrapping_sub(1).wrapping_sub(t.map.module(m).bias) as u64;
        winch_core::symbolizer::with_global(|s| s.resolve_in(&t.map, m, probe))?.last()?.func.clone()
    };
    match (name(a), name(b)) {
        (Some(x), Some(y)) => {
            t.map.module_of(a) == t.map.module_of(b)
                && throws::base_function_name(&x) == throws::base_function_name(&y)
        }
        _ => false,
    }
}

/// The rows a recorded throw adds to a joint view, and where.
pub struct Branch {
    /// The native frame (index into the joint capture's trace) that caught
    /// the exception.
    pub catcher: usize,
    /// Rows, outermost first: the catching frame as it was at the throw, then
    /// the frames it had called, down to the thrower.
    pub table: FrameTable,
    /// What was thrown: `list(kind, type, location)`.
    pub info: RValue,
}

/// The throw whose catching frame is still running in `j`'s stack, if any
/// (the newest such record of this top-level epoch, made while R ran the
/// context that still runs). Throws that carry an R condition through C++
/// (Rcpp's and cpp11's) give no branch: the R error's own path is the
/// story.
pub fn branch(j: &Joint) -> Option<Branch> {
    if !throws::installed() {
        return None;
    }
    let t = &j.native.trace;
    let current: Vec<(usize, usize)> = t.frames.iter().map(|f| (f.ip, f.lo)).collect();
    let epoch = throws::epoch();
    for r in throws::records() {
        if r.epoch != epoch || r.n == 0 {
            continue;
        }
        let Some(catch) = throws::find_catch(r.frames(), &current, |a, b| same_function(t, a, b)) else {
            continue;
        };
        if !rstate::facts().is_ok_and(|f| joint::chain_holds(f, &r.r_contexts)) {
            continue;
        }
        if type_name(&r).is_some_and(|n| throws::is_r_unwind_carrier(&n)) {
            return None;
        }
        let rt = record_trace(&r, t.map.clone());
        let modules: Vec<Option<usize>> = rt.frames.iter().map(|f| f.module).collect();
        let classes = view::classify(&rt.map, &modules, rstate::known_modules(&rt.map), false);
        let resolved = rt.symbolize();
        let mut idx = shown(&resolved, catch.in_record);
        idx.reverse(); // outermost first, as joint views list frames
        let picked: Vec<Arc<[Resolved]>> = idx.iter().map(|&i| resolved[i].clone()).collect();
        // Each frame's inlined calls outermost first too.
        let mut table = FrameTable::in_order(&rt, &idx, &picked, &classes, None, true);
        let parent = j.placement.parent.get(catch.in_current).copied().flatten();
        let approximate = j.placement.approximate.get(catch.in_current).copied().unwrap_or(false);
        for row in &mut table.rows {
            row.at_throw = true;
            row.r_frame = parent;
            row.approximate = approximate;
        }
        table.joint = true;
        let tn = match r.id.kind {
            ThrowKind::Rust => Some("Rust panic".to_string()),
            _ => type_name(&r),
        };
        let info = RValue::List(vec![
            ("kind", RValue::from(r.id.kind.name().to_string())),
            ("type", RValue::from(tn)),
            ("location", RValue::from(location(&resolved, &shown(&resolved, catch.in_record)))),
        ]);
        return Some(Branch { catcher: catch.in_current, table, info });
    }
    None
}
