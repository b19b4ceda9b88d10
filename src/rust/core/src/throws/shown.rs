//! What a recorded throw looks like where users see it: the last throw on
//! its own, and the branch a throw still being handled adds to a joint view
//! (the frames from the catching frame down to the thrower, as they were at
//! the throw). The glue only turns these into R values.

use super::{Throw, ThrowKind};
use crate::debuginfo::Resolved;
use crate::joint::Joint;
use crate::memory::{Memory, Own};
use crate::modules::ModuleMap;
use crate::r::Facts;
use crate::trace::{NativeFrame, NativeTrace};
use crate::unwind::{self, Backend};
use crate::view::{self, Class, Known};
use std::sync::Arc;

/// What was thrown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Thrown {
    /// None: no throw recorded.
    pub kind: Option<ThrowKind>,
    /// The C++ type, or "Rust panic".
    pub type_name: Option<String>,
    /// `file:line` of the innermost shown frame with a source line.
    pub location: Option<String>,
    pub rethrows: u32,
}

/// A recorded throw's frames, ready to show.
pub struct Shown {
    pub trace: NativeTrace,
    pub classes: Vec<Class>,
    /// Indices into `trace.frames` of the frames to show, with their names.
    pub rows: Vec<usize>,
    pub resolved: Vec<Arc<[Resolved]>>,
    pub thrown: Thrown,
}

/// The rows a recorded throw adds to a joint view, and where.
pub struct Branch {
    /// The native frame (index into the joint capture's trace) that caught
    /// the exception.
    pub catcher: usize,
    /// The R frame the catching frame sits under, and whether that is
    /// approximate.
    pub parent: Option<usize>,
    pub approximate: bool,
    /// Rows outermost first: the catching frame as it was at the throw,
    /// then the frames it had called, down to the thrower.
    pub shown: Shown,
}

/// A record's frames as a native trace for naming them: over `now` (the
/// modules loaded now), each frame placed in the module it was in when the
/// throw was recorded (`then`: the modules of the record's generation;
/// None: unknown, and so is every frame's module).
///
/// A frame whose module is still loaded (the same load: see
/// [`ModuleMap::same_load`]) gets that module of `now`. A frame whose module
/// is no longer loaded gets a copy of it without segments, appended after
/// `now`'s modules ([`Module::unloaded`]): its path and offset are shown,
/// but nothing of whatever is loaded at its address now names it. Returns
/// the trace and how many of its map's modules are loaded (`now`'s).
///
/// [`Module::unloaded`]: crate::modules::Module::unloaded
fn record_trace(r: &Throw, then: Option<&ModuleMap>, now: Arc<ModuleMap>) -> (NativeTrace, usize) {
    let live = now.modules().len();
    let mut gone: Vec<(usize, crate::modules::Module)> = Vec::new();
    let mut modules = Vec::with_capacity(r.frames().len());
    for &(ip, _) in r.frames() {
        let placed = then.and_then(|then| {
            let m = then.module_of(ip)?;
            if let Some(j) = then.same_load(m, &now) {
                return Some(j);
            }
            let k = match gone.iter().position(|(i, _)| *i == m) {
                Some(k) => k,
                None => {
                    gone.push((m, then.module(m).unloaded()));
                    gone.len() - 1
                }
            };
            Some(live + k)
        });
        modules.push(placed);
    }
    let map = if gone.is_empty() {
        now
    } else {
        let mut all = now.modules().to_vec();
        all.extend(gone.into_iter().map(|(_, m)| m));
        Arc::new(ModuleMap::new(all))
    };
    let frames = r
        .frames()
        .iter()
        .zip(modules)
        .map(|(&(ip, sp), module)| NativeFrame { ip, lo: sp, module, probe: ip.wrapping_sub(1) })
        .collect();
    let truncated =
        r.truncated.then(|| format!("the throw's stack was recorded up to {} frames", super::MAX_FRAMES));
    (NativeTrace { backend: Backend::Cfi, map, frames, truncated }, live)
}

/// Names of a record's frames: those in modules loaded now from their
/// files; the others (in a module no longer loaded, or in none known)
/// unnamed.
fn symbolize_live(trace: &NativeTrace, live: usize) -> Vec<Arc<[Resolved]>> {
    let named: Vec<usize> =
        (0..trace.frames.len()).filter(|&i| trace.frames[i].module.is_some_and(|m| m < live)).collect();
    let mut names = trace.symbolize_some(&named).into_iter();
    (0..trace.frames.len())
        .map(|i| match trace.frames[i].module {
            Some(m) if m < live => names.next().unwrap_or_else(|| Arc::from(vec![Resolved::unnamed()])),
            _ => Arc::from(vec![Resolved::unnamed()]),
        })
        .collect()
}

/// The index of the first frame that is not the throw machinery.
fn first_thrower(resolved: &[Arc<[Resolved]>]) -> usize {
    resolved
        .iter()
        .position(|r| {
            let name = r.last().and_then(|f| f.func.as_deref());
            !name.is_some_and(super::is_throw_machinery)
        })
        .unwrap_or(resolved.len())
}

/// The bytes of a NUL-terminated string at `addr` (at most 512), without
/// risking a fault.
fn read_c_string(mem: &impl Memory, addr: usize) -> Option<String> {
    if addr < 4096 || !crate::memory::available() {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < 512 {
        let to_page_end = 4096 - at % 4096;
        let mut buf = vec![0u8; to_page_end.min(64)];
        if !mem.read(at, &mut buf) {
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
pub(crate) fn type_name(r: &Throw) -> Option<String> {
    if r.id.kind != ThrowKind::Cpp || r.id.type_info == 0 || !crate::memory::available() {
        return None;
    }
    let mangled = read_c_string(&Own, Own.word(r.id.type_info + 8)?)?;
    let plausible = !mangled.is_empty() && mangled.bytes().all(|b| b.is_ascii_graphic());
    plausible.then(|| super::demangle_type(&mangled))
}

/// What the record says was thrown ("Rust panic" for panics).
fn thrown(r: &Throw, location: Option<String>) -> Thrown {
    let type_name = match r.id.kind {
        ThrowKind::Rust => Some("Rust panic".to_string()),
        _ => type_name(r),
    };
    Thrown { kind: Some(r.id.kind), type_name, location, rethrows: r.rethrows }
}

/// The record's frames to show, innermost first: from the thrower to
/// `last` (an index into the record), the machinery left out.
fn rows(resolved: &[Arc<[Resolved]>], last: usize) -> Vec<usize> {
    let first = first_thrower(resolved).min(last);
    (first..=last).collect()
}

/// The location of the innermost shown frame with a source line.
fn location(resolved: &[Arc<[Resolved]>], rows: &[usize]) -> Option<String> {
    rows.iter().flat_map(|&i| resolved[i].iter()).find_map(|f| match (&f.file, f.line) {
        (Some(file), Some(line)) => Some(format!("{file}:{line}")),
        _ => None,
    })
}

/// A record's trace, classified and named, with the rows up to `last`
/// (None: the whole record).
fn shown(r: &Throw, map: Arc<ModuleMap>, known: &impl Fn(&ModuleMap) -> Known, last: Option<usize>) -> Shown {
    let then = super::map_of(r.generation);
    let (trace, live) = record_trace(r, then.as_deref(), map);
    let modules: Vec<Option<usize>> = trace.frames.iter().map(|f| f.module).collect();
    let classes = view::classify(&trace.map, &modules, known(&trace.map), false);
    let all = symbolize_live(&trace, live);
    let last = last.or_else(|| trace.frames.len().checked_sub(1));
    let rows = last.map_or_else(Vec::new, |l| rows(&all, l));
    let location = location(&all, &rows);
    let resolved = rows.iter().map(|&i| all[i].clone()).collect();
    Shown { thrown: thrown(r, location), trace, classes, rows, resolved }
}

/// The last recorded throw, innermost frame first, named; an empty trace
/// when none was recorded.
pub fn last_throw(known: impl Fn(&ModuleMap) -> Known) -> Shown {
    let map = crate::modules::current();
    match super::recorded().into_iter().next() {
        Some(r) => shown(&r, map, &known, None),
        None => Shown {
            trace: NativeTrace { backend: Backend::Cfi, map, frames: Vec::new(), truncated: None },
            classes: Vec::new(),
            rows: Vec::new(),
            resolved: Vec::new(),
            thrown: Thrown::default(),
        },
    }
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
        crate::symbolizer::with_global(|s| s.resolve_in(&t.map, m, probe))?.last()?.func.clone()
    };
    match (name(a), name(b)) {
        (Some(x), Some(y)) => {
            t.map.module_of(a) == t.map.module_of(b)
                && super::base_function_name(&x) == super::base_function_name(&y)
        }
        _ => false,
    }
}

/// The throw whose catching frame is still running in `j`'s stack, if any
/// (the newest such record of this top-level epoch, made while R ran the
/// context that still runs). Throws that carry an R condition through C++
/// (Rcpp's and cpp11's) give no branch: the R error's own path is the
/// story.
pub fn branch(facts: &Facts, j: &Joint) -> Option<Branch> {
    if !super::installed() {
        return None;
    }
    let t = &j.native.trace;
    let current: Vec<(usize, usize)> = t.frames.iter().map(|f| (f.ip, f.lo)).collect();
    let epoch = super::epoch();
    for r in super::recorded() {
        if r.epoch != epoch || r.n == 0 {
            continue;
        }
        let Some(catch) = super::find_catch(r.frames(), &current, |a, b| same_function(t, a, b)) else {
            continue;
        };
        if !crate::joint::chain_holds(facts, &r.r_contexts) {
            continue;
        }
        if type_name(&r).is_some_and(|n| super::is_r_unwind_carrier(&n)) {
            return None;
        }
        let mut shown = shown(&r, t.map.clone(), &crate::joint::known(facts), Some(catch.in_record));
        // Outermost first, as joint views list frames.
        shown.rows.reverse();
        shown.resolved.reverse();
        return Some(Branch {
            catcher: catch.in_current,
            parent: j.placement.parent.get(catch.in_current).copied().flatten(),
            approximate: j.placement.approximate.get(catch.in_current).copied().unwrap_or(false),
            shown,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::Module;

    fn record(ips: &[usize]) -> Throw {
        let mut r = Throw::default();
        for (k, &ip) in ips.iter().enumerate() {
            r.frames[k] = (ip, 0x7000 + 16 * k);
        }
        r.n = ips.len();
        r
    }

    #[test]
    fn a_record_is_placed_in_the_modules_of_its_generation() {
        let libr = Module::synthetic("/usr/lib/R/lib/libR.so", 0x100000, 0x200000, false);
        let a = Module::synthetic("/tmp/x/rela.so", 0x10000, 0x11000, false);
        let b = Module::synthetic("/tmp/y/relb.so", 0x10000, 0x11000, false);
        // Recorded while rela.so was loaded; relb.so is loaded there now.
        let then = ModuleMap::new(vec![a.clone(), libr.clone()]);
        let now = Arc::new(ModuleMap::new(vec![libr.clone(), b]));
        let r = record(&[0x10100, 0x10200, 0x100100, 0x5]);
        let (t, live) = record_trace(&r, Some(&then), now.clone());
        assert_eq!(live, 2);
        let modules: Vec<Option<usize>> = t.frames.iter().map(|f| f.module).collect();
        // rela.so's frames: its unloaded copy, appended; libR: loaded now;
        // an address in no module: none.
        assert_eq!(modules, vec![Some(2), Some(2), Some(0), None]);
        assert_eq!(t.map.module(2).path, "/tmp/x/rela.so");
        assert_eq!(t.map.module(2).bias, 0x10000);
        assert_eq!(t.map.module_of(0x10100), Some(1), "relb.so is what is loaded there now");
        // Nothing is named in the unloaded module (no symbolizer asked).
        let names = symbolize_live(&t, live);
        assert!(names[0].iter().all(|f| f.func.is_none()) && names[1].iter().all(|f| f.func.is_none()));
        assert!(names[3].iter().all(|f| f.func.is_none()));
        // Recorded with the modules of now: placed as they are.
        let (t, _) = record_trace(&r, Some(&now), now.clone());
        assert!(Arc::ptr_eq(&t.map, &now));
        let modules: Vec<Option<usize>> = t.frames.iter().map(|f| f.module).collect();
        assert_eq!(modules, vec![Some(1), Some(1), Some(0), None]);
        // Rela.so loaded again at the same place (the same load): its own.
        let again = Arc::new(ModuleMap::new(vec![libr, a]));
        let (t, _) = record_trace(&r, Some(&then), again.clone());
        assert!(Arc::ptr_eq(&t.map, &again));
        assert_eq!(t.frames[0].module, Some(1));
        // The modules of the record's generation unknown: nothing placed.
        let (t, _) = record_trace(&r, None, now);
        assert!(t.frames.iter().all(|f| f.module.is_none()));
    }
}
