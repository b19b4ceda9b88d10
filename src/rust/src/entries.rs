//! What each `.Call` entry point does (registered in `lib.rs` and
//! `src/init.c`). Each takes its arguments unread and returns a plain
//! value or an error; `entry::run` does the rest.

use crate::args::Arg;
use crate::frame_rows::OtherMap;
use crate::frames::{FrameTable, PlacementInfo, PlacementMode};
use crate::rstate;
use crate::spliced;
use crate::value::RValue;
use crate::SpliceNativeArgs;
use std::path::PathBuf;
use std::sync::Arc;
use winch_core::debuginfo::Resolved;
use winch_core::error::{Error, Result};
use winch_core::joint;
use winch_core::modules::{loader_generation, Generation};
use winch_core::symbolizer;
use winch_core::trace::{self, NativeTrace};
use winch_core::unwind::Backend;
use winch_core::view::{self, View};

pub use crate::crash::{rs_crash_handlers, rs_crash_rearm, rs_crash_set, rs_crash_status};
pub use crate::throws::{rs_last_throw, rs_throws_set, rs_throws_status, rs_throws_tick};

pub use crate::profile_form::rs_profile_form;

pub use crate::profile::{
    rs_profile_active, rs_profile_check, rs_profile_discard, rs_profile_learn_bc, rs_profile_learn_loop,
    rs_profile_loops_known, rs_profile_sample_cost, rs_profile_start, rs_profile_stop, rs_profile_write,
};

fn backend(x: Arg) -> Result<Backend> {
    backend_named(&x.string()?)
}

/// The backend called `name` ("auto": the best that works here).
fn backend_named(name: &str) -> Result<Backend> {
    if name == "auto" {
        return Backend::best()
            .ok_or_else(|| Error::Unavailable("no unwinding backend works on this platform".into()));
    }
    match Backend::from_name(name) {
        Some(b) if b.is_available() => Ok(b),
        Some(b) => {
            Err(Error::Unavailable(format!("the {} backend is not available in this build", b.name())))
        }
        None => Err(Error::BadArgument(format!("unknown backend \"{name}\""))),
    }
}

/// As [`backend`], where NULL (R left the argument at its default) stands
/// for the `winch.backend` option, "auto" when unset: read here, it costs
/// R no call of `getOption()` per capture.
fn backend_or_option(x: Arg) -> Result<Backend> {
    if !x.is_null() {
        return backend(x);
    }
    // SAFETY: entry points run on R's main thread; the option's value is
    // read before R allocates again.
    let opt = unsafe { crate::in_step::raw_option(c"winch.backend") };
    let opt = Arg::new(opt, "backend");
    if opt.is_null() {
        backend_named("auto")
    } else {
        backend(opt)
    }
}

fn caches_busy() -> Error {
    Error::Busy("winch's caches are in use by this thread (re-entered)".into())
}

fn require_main_thread() -> Result<()> {
    if rstate::on_main_thread() {
        Ok(())
    } else {
        Err(Error::WrongThread)
    }
}

/// Tells the Rust side which R is running (`getRversion()` as integers).
pub fn rs_init(version: Arg) -> Result<RValue> {
    match version.ints()?.as_slice() {
        [Some(major), Some(minor), ..] if *major >= 0 && *minor >= 0 => {
            rstate::set_r_version((*major as u32, *minor as u32));
            Ok(true.into()) // NULL would read as "out of memory"
        }
        _ => Err(Error::BadArgument("`version` must be R's version as c(major, minor, patch)".into())),
    }
}

/// The entry points of this table, with their numbers of arguments (checked
/// against the registration in src/init.c by the tests).
pub fn rs_entry_points() -> Result<RValue> {
    let (names, arities): (Vec<String>, Vec<Option<i32>>) =
        crate::ENTRY_POINTS.iter().map(|&(n, a)| (n.to_string(), Some(a as i32))).unzip();
    Ok(RValue::List(vec![("name", names.into()), ("arity", RValue::Int(arities))]))
}

/// An error of the kind named (or a panic, for "panic"): lets the tests see
/// every kind reach R as its condition class.
pub fn rs_error_of_kind(kind: Arg) -> Result<RValue> {
    let kind = kind.string()?;
    Err(match kind.as_str() {
        "bad_argument" => Error::BadArgument("a bad argument".into()),
        "unavailable" => Error::Unavailable("not here".into()),
        "wrong_thread" => Error::WrongThread,
        "busy" => Error::Busy("in use".into()),
        "unreadable" => Error::Unreadable("unreadable memory".into()),
        "inconsistent" => Error::Inconsistent("does not hold together".into()),
        "io" => Error::Io("cannot write: no space left on device".into()),
        "internal" => Error::Internal("a bug".into()),
        "panic" => panic!("a panic in an entry point"),
        _ => Error::BadArgument(format!("unknown kind \"{kind}\"")),
    })
}

/// This process's resource use so far (getrusage): times in seconds, the
/// largest resident set in bytes, and counts.
#[cfg(not(unix))]
pub fn rs_resource_usage() -> Result<RValue> {
    Err(Error::Unavailable("getrusage() is not available on this system".into()))
}

/// This process's resource use so far (getrusage): times in seconds (its
/// children's: those waited for and those not yet, see
/// `winch_core::own_children_time`), the largest resident set in bytes, and counts.
#[cfg(unix)]
pub fn rs_resource_usage() -> Result<RValue> {
    // SAFETY: getrusage fills `u`.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Err(Error::Unavailable("getrusage() failed".into()));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    // Its children, waited for (the kernel's account) or not yet.
    let (children_user, children_system) = winch_core::own_children_time().unwrap_or((f64::NAN, f64::NAN));
    Ok(RValue::List(vec![
        ("user", secs(u.ru_utime).into()),
        ("system", secs(u.ru_stime).into()),
        ("children_user", children_user.into()),
        ("children_system", children_system.into()),
        ("max_rss", (u.ru_maxrss as f64 * 1024.0).into()),
        ("minor_faults", (u.ru_minflt as f64).into()),
        ("major_faults", (u.ru_majflt as f64).into()),
        ("block_input", (u.ru_inblock as f64).into()),
        ("block_output", (u.ru_oublock as f64).into()),
        ("voluntary_switches", (u.ru_nvcsw as f64).into()),
        ("involuntary_switches", (u.ru_nivcsw as f64).into()),
    ]))
}

/// Whether some unwinding backend works here.
pub fn rs_available() -> Result<RValue> {
    Ok(Backend::best().is_some().into())
}

/// Names of the working backends, preferred first.
pub fn rs_backends() -> Result<RValue> {
    Ok(Backend::ALL
        .into_iter()
        .filter(|b| b.is_available())
        .map(|b| b.name().to_string())
        .collect::<Vec<_>>()
        .into())
}

/// "sync" when R must sync the core's options before a capture: the
/// options or loaded libraries changed since it last did, and it has not
/// just done so (`synced`). Asked by the capture itself, so that the usual
/// case costs R one `.Call`.
fn sync_first(synced: &Arg) -> Result<Option<RValue>> {
    Ok((!synced.flag()? && !crate::in_step::check()).then(|| RValue::from("sync".to_string())))
}

/// Whether R's debuginfod hint (R/debuginfod.R) may have something to
/// say about frames `shown` of `t`: a debug file could name more of them,
/// `DEBUGINFOD_URLS` names a server and `winch.debuginfod` is unset. The
/// cheap tests first: this runs on every capture, and the result's
/// `debug_files_would_help` attribute is set only when it holds.
fn hint_may_help(t: &NativeTrace, shown: &[usize], resolved: &[Arc<[Resolved]>]) -> bool {
    let named = std::env::var_os("DEBUGINFOD_URLS")
        .is_some_and(|v| v.as_encoded_bytes().iter().any(|b| !b.is_ascii_whitespace()));
    named && crate::in_step::debuginfod_unset() && t.debug_files_would_help(shown, resolved)
}

/// The native stack of the caller, innermost first; unless R has just
/// synced the core (`synced`), "sync" when the options or loaded libraries
/// changed since it last did (R syncs and asks again: one `.Call` in the
/// usual case).
pub fn rs_trace_back(backend_arg: Arg, libr: Arg, synced: Arg) -> Result<RValue> {
    require_main_thread()?;
    if let Some(ask) = sync_first(&synced)? {
        return Ok(ask);
    }
    let (backend, libr) = (backend_or_option(backend_arg)?, libr.flag()?);
    let local = 0u8;
    let native =
        joint::native(backend, std::hint::black_box(&local) as *const u8 as usize, rstate::known_modules)?;
    let shown = view::select(&native.classes, View::TraceBack { libr });
    let resolved = native.trace.symbolize_some(&shown);
    let hint = hint_may_help(&native.trace, &shown, &resolved);
    let mut table = FrameTable::new(&native.trace, &shown, resolved, &native.classes, None);
    table.debug_files_would_help = hint;
    Ok(RValue::Built(Box::new(table)))
}

/// The native stack placed among the caller's R frames `frames` (its
/// `sys.frames()`) with calls `calls` (its `sys.calls()`): the frames of
/// the joint view, outermost first.
pub fn rs_joint(backend_arg: Arg, frames: Arg, calls: Arg, libr: Arg, use_contexts: Arg) -> Result<RValue> {
    require_main_thread()?;
    let backend = backend(backend_arg)?;
    let (frames, calls) = (frames.element_addrs()?, calls.element_addrs()?);
    let (libr, use_contexts) = (libr.flag()?, use_contexts.flag()?);
    let j = joint::capture(rstate::facts()?, backend, &frames, &calls, use_contexts)?;
    let (mut table, placement) = joint_table(&j, libr);
    table.placement = Some(placement);
    Ok(RValue::Built(Box::new(table)))
}

/// The frames joint views show of `j` (R's own with `libr`), with where
/// each is placed and, after the frame that caught it, the branch of a
/// throw still being handled; and how they were placed.
fn joint_table(j: &joint::Joint, libr: bool) -> (FrameTable, PlacementInfo) {
    let n = &j.native;
    let shown = view::select(&n.classes, View::Joint { libr });
    let resolved = n.trace.symbolize_some(&shown);
    let hint = hint_may_help(&n.trace, &shown, &resolved);
    let mut table = FrameTable::new(&n.trace, &shown, resolved, &n.classes, Some(&j.placement));
    table.debug_files_would_help = hint;
    // A C++ throw or Rust panic caught by a frame still running: its frames
    // as they were at the throw, right after the catching frame's rows.
    let mut throw = None;
    if let Some(mut b) = crate::throws::branch(j) {
        if let Some(k) = shown.iter().position(|&i| i == b.catcher) {
            let at: usize = table.rows.resolved[..=k].iter().map(|r| r.len()).sum();
            let rows = b.table.rows.len();
            // The branch's resolutions follow the stack's.
            let base = table.rows.resolved.len();
            let mut branch_rows = std::mem::take(b.table.rows.rows_mut());
            for r in &mut branch_rows {
                r.frame += base;
            }
            Arc::make_mut(&mut table.rows.resolved).append(Arc::make_mut(&mut b.table.rows.resolved));
            table.rows.rows_mut().splice(at..at, branch_rows);
            table.rows.other_map = Some(OtherMap { rows: at..at + rows, map: b.table.rows.map });
            throw = Some(b.info);
        }
    }
    let placement = PlacementInfo {
        mode: PlacementMode::of(j.fallback_reason.is_some(), j.placement.is_approximate()),
        fallback_reason: j.fallback_reason.as_ref().map(|e| e.to_string()),
        beyond_end: Some(j.placement.beyond_end),
        throw,
    };
    (table, placement)
}

/// Which frames of `calls` (the stack's, outermost first: `sys.calls()`
/// or a list) the rows of an rlang trace with calls `trace_calls` are: the
/// 1-based frames, or NULL where that is not certain (see
/// `winch_core::splice::match_rows`).
pub fn rs_match_rows(trace_calls: Arg, calls: Arg) -> Result<RValue> {
    require_main_thread()?;
    let rows = trace_calls.call_heads()?;
    let frames = calls.call_heads()?;
    Ok(match winch_core::splice::match_rows(&rows, &frames) {
        Some(start) => RValue::Int((start + 1..=start + rows.len()).map(|k| i32::try_from(k).ok()).collect()),
        None => RValue::Unnamed(Vec::new()),
    })
}

/// The rlang trace `trace` (whose attributes are named `attr_names`; its
/// row j is R frame `row_frames[j]`, or frame j when `row_frames` is NULL)
/// with the native frames of the current stack spliced in under rows
/// `first` and later: the new trace, with its attribute `winch`; FALSE
/// when there is nothing to add; unless R has just synced the core
/// (`synced`), "sync" when the options or loaded libraries changed since
/// it last did (`rs_in_step()`: R syncs and asks again). `frames`,
/// `calls`, `backend` and `use_contexts` are as for `rs_joint()`.
pub fn rs_splice_native(args: SpliceNativeArgs) -> Result<RValue> {
    let SpliceNativeArgs {
        trace,
        attr_names,
        row_frames,
        frames,
        calls,
        first,
        backend: backend_arg,
        use_contexts,
        synced,
    } = args;
    require_main_thread()?;
    if let Some(ask) = sync_first(&synced)? {
        return Ok(ask);
    }
    let backend = backend(backend_arg)?;
    let names = trace.field_names()?;
    let parents = trace.field("parent")?.counts()?;
    let row_frames =
        if row_frames.is_null() { (1..=parents.len()).collect() } else { row_frames.counts()? };
    if row_frames.len() != parents.len() {
        return Err(Error::BadArgument("`row_frames` must have one frame per row of `trace`".into()));
    }
    let attr_names: Vec<std::ffi::CString> =
        attr_names.strings()?.into_iter().flatten().filter_map(|n| std::ffi::CString::new(n).ok()).collect();
    let first = first.int()?.max(1) as usize;
    let (frames, calls) = (frames.element_addrs()?, calls.element_addrs()?);
    let j = joint::capture(rstate::facts()?, backend, &frames, &calls, use_contexts.flag()?)?;
    let (table, placement) = joint_table(&j, false);
    let trace = spliced::Trace { sexp: trace.sexp(), names, attr_names, row_frames, parents };
    let spliced = spliced::splice(trace, &table, placement, first);
    Ok(match spliced {
        Some(s) => RValue::Built(Box::new(s)),
        None => RValue::from(false),
    })
}

/// The entry order of a joint sys.calls() for R frames 1..=n: positive k is
/// R call k, negative -i native frame i (1-based).
pub fn rs_splice_calls(n: Arg, r_frame: Arg) -> Result<RValue> {
    let n = n.int()?.max(0) as usize;
    let order = winch_core::splice::splice_calls(n, &r_frame.indices()?)
        .into_iter()
        .map(|e| {
            Some(match e {
                Ok(k) => k as i32,
                Err(i) => -(i as i32 + 1),
            })
        })
        .collect();
    Ok(RValue::Int(order))
}

/// R's context chain, innermost first: callflag, where each context is,
/// and the native frames that own it and its runner (a diagnostic).
pub fn rs_context_chain(backend_arg: Arg) -> Result<RValue> {
    require_main_thread()?;
    let chain = joint::chain_summary(rstate::facts()?, backend(backend_arg)?)?;
    let frame = |f: Option<usize>| f.map(|i| i as i32 + 1);
    Ok(RValue::List(vec![
        ("callflag", RValue::Int(chain.iter().map(|c| Some(c.callflag)).collect())),
        ("on_stack", RValue::Lgl(chain.iter().map(|c| c.on_stack).collect())),
        ("on_node_stack", RValue::Lgl(chain.iter().map(|c| c.on_node_stack).collect())),
        ("native_frame", RValue::Int(chain.iter().map(|c| frame(c.frame)).collect())),
        ("runner_frame", RValue::Int(chain.iter().map(|c| frame(c.runner_frame)).collect())),
    ]))
}

/// Captures and symbolizes on a new thread (no R API there); a test of
/// capture away from R's main thread.
pub fn rs_thread_capture(backend_arg: Arg) -> Result<RValue> {
    let backend = backend(backend_arg)?;
    let handle = std::thread::spawn(move || {
        let on_main = rstate::on_main_thread();
        let t = trace::capture(backend)?;
        let modules: Vec<Option<usize>> = t.frames.iter().map(|f| f.module).collect();
        let classes = view::classify(&t.map, &modules, rstate::known_modules(&t.map), t.truncated.is_none());
        let shown = view::select(&classes, View::TraceBack { libr: true });
        let resolved = t.symbolize_some(&shown);
        Ok::<_, Error>((on_main, FrameTable::new(&t, &shown, resolved, &classes, None)))
    });
    let (on_main, mut table) =
        handle.join().map_err(|_| Error::Internal("the capture thread panicked".into()))??;
    table.attrs.push((c"main_thread", RValue::from(on_main)));
    Ok(RValue::Built(Box::new(table)))
}

/// Nanoseconds per iteration of each stage of a capture at the caller's
/// depth, over `n` iterations: unwinding alone, unwinding plus module lookup
/// and checks, plus symbolization (warm caches). For profiling notes.
pub fn rs_stage_times(backend_arg: Arg, n: Arg) -> Result<RValue> {
    let backend = backend(backend_arg)?;
    let n = n.int()?.max(1) as u32;
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        for _ in 0..n {
            f();
        }
        start.elapsed().as_nanos() as f64 / n as f64
    };
    let mut frames = 0usize;
    let unwind = time(&mut || {
        frames = winch_core::unwind::capture(backend).map(|s| s.frames.len()).unwrap_or(0);
    });
    let assemble = time(&mut || {
        let _ = trace::capture(backend);
    });
    let symbolize = time(&mut || {
        if let Ok(t) = trace::capture(backend) {
            let _ = t.symbolize();
        }
    });
    Ok(RValue::List(vec![
        ("frames", RValue::from(frames as i32)),
        ("unwind", unwind.into()),
        ("assemble", assemble.into()),
        ("symbolize", symbolize.into()),
    ]))
}

/// How the columns of `x` (a list, or NULL) are held, and how many tables
/// lazy columns hold (see `lazy_columns.rs`; for tests).
pub fn rs_lazy_columns(x: Arg) -> Result<RValue> {
    require_main_thread()?;
    let columns = x.element_addrs()?;
    // SAFETY: on R's main thread; the addresses are elements of `x`, alive
    // for this call.
    let states =
        columns.iter().map(|&c| unsafe { crate::lazy_columns::state(c as crate::rapi::Sexp) }.to_string());
    Ok(RValue::List(vec![
        ("state", states.collect::<Vec<_>>().into()),
        ("live", RValue::from(crate::lazy_columns::live() as f64)),
    ]))
}

/// Gives the rows of dead traces spared by a collection their finalizer
/// back (as the end of each top-level call does; `lazy_columns::settle`).
pub fn rs_lazy_columns_settle() -> Result<RValue> {
    require_main_thread()?;
    crate::lazy_columns::settle();
    Ok(RValue::Null)
}

/// Figures about the symbol caches.
pub fn rs_cache_info() -> Result<RValue> {
    let (s, per_module) =
        symbolizer::with_global(|s| (s.stats(), s.module_stats())).ok_or_else(caches_busy)?;
    let status = |st: &winch_core::debuginfo::Status| -> String {
        use winch_core::debuginfo::Status::*;
        match st {
            Ok => "ok".into(),
            NoFile => "no file".into(),
            Unreadable(why) => format!("unreadable: {why}"),
            Mismatch(why) => format!("mismatch: {why}"),
        }
    };
    let modules = RValue::List(vec![
        ("path", per_module.iter().map(|m| m.path.clone()).collect::<Vec<_>>().into()),
        ("symbols", RValue::Int(per_module.iter().map(|m| Some(m.symbols as i32)).collect())),
        ("dwarf", RValue::Lgl(per_module.iter().map(|m| m.has_dwarf).collect())),
        ("bytes", RValue::Dbl(per_module.iter().map(|m| m.heap_bytes as f64).collect())),
        (
            "debug_file",
            RValue::Str(
                per_module.iter().map(|m| m.debug_file.as_ref().map(|p| p.display().to_string())).collect(),
            ),
        ),
        ("status", per_module.iter().map(|m| status(&m.status)).collect::<Vec<_>>().into()),
        ("units_parsed", RValue::Int(per_module.iter().map(|m| m.units_parsed.map(|n| n as i32)).collect())),
        ("units_listed", RValue::Int(per_module.iter().map(|m| m.units_listed.map(|n| n as i32)).collect())),
    ]);
    Ok(RValue::List(vec![
        ("modules", RValue::from(s.modules as i32)),
        ("modules_with_dwarf", RValue::from(s.modules_with_dwarf as i32)),
        ("addresses", RValue::from(s.addresses as i32)),
        ("bytes", RValue::from(s.heap_bytes as f64)),
        ("files_read", RValue::from(s.files_loaded as f64)),
        ("budget", RValue::from(symbolizer::CACHE_BUDGET as f64)),
        ("evicted", RValue::from(s.evicted as f64)),
        ("per_module", modules),
    ]))
}

/// Sets the directories searched for separate debug files; returns the old
/// ones.
pub fn rs_set_debug_dirs(dirs: Arg) -> Result<RValue> {
    let dirs: Vec<PathBuf> = dirs
        .strings()?
        .into_iter()
        .map(|d| d.map(PathBuf::from).ok_or_else(|| Error::BadArgument("`dirs` must not contain NA".into())))
        .collect::<Result<_>>()?;
    let old = symbolizer::with_global(|s| {
        let old: Vec<String> = s.debug_roots().iter().map(|p| p.display().to_string()).collect();
        s.set_debug_roots(dirs);
        old
    });
    Ok(old.ok_or_else(caches_busy)?.into())
}

/// Sets R's registered native routines from the `DllInfo` structs of the
/// loaded DLLs (`infos`: the external pointers `getLoadedDLLs()` holds in
/// each DLL's `info`), read from this process's memory with the struct
/// layout R's internals have in `outside::registration` (a struct that
/// does not check out is left out). Returns the number of routines per
/// DLL (`NA` for a struct left out).
pub fn rs_set_registered_dlls(infos: Arg) -> Result<RValue> {
    let mut ptrs = Vec::new();
    for info in infos.elements()? {
        ptrs.push(info.external_addr()?);
    }
    let mut all = Vec::new();
    let mut counts = Vec::with_capacity(ptrs.len());
    for routines in winch_core::outside::registration::routines_of_this_process(&ptrs) {
        match routines {
            Some(routines) => {
                counts.push(Some(routines.len() as i32));
                all.extend(routines);
            }
            None => counts.push(None),
        }
    }
    symbolizer::with_global(|s| s.set_registered(all)).ok_or_else(caches_busy)?;
    Ok(RValue::Int(counts))
}

/// The dynamic loader's state: `generation`, its (adds, subs) counters
/// (they change whenever a module is loaded or unloaded), and per path in
/// `paths` the identity of that module's load (`NA` when none is loaded
/// from it): R's registration table is read again only when they change.
pub fn rs_loader_state(paths: Arg) -> Result<RValue> {
    let paths = paths.strings()?;
    let Generation { adds, subs } = loader_generation();
    let identity: Vec<Option<String>> = if paths.is_empty() {
        Vec::new()
    } else {
        let map = winch_core::modules::current();
        paths.iter().map(|p| p.as_deref().and_then(|p| map.load_identity(p))).collect()
    };
    Ok(RValue::List(vec![
        ("generation", RValue::Dbl(vec![adds as f64, subs as f64])),
        ("identity", RValue::Str(identity)),
    ]))
}

/// Remembers that R synced the core with options `debug_dirs` and
/// `debuginfod` (their raw values) at loader generation `generation`.
pub fn rs_set_in_step(debug_dirs: Arg, debuginfod: Arg, generation: Arg) -> Result<RValue> {
    require_main_thread()?;
    let g = generation.doubles()?;
    let [adds, subs] = g[..] else {
        return Err(Error::BadArgument("`generation` must be two numbers".into()));
    };
    crate::in_step::set(&debug_dirs, &debuginfod, Generation { adds: adds as u64, subs: subs as u64 });
    Ok(RValue::from(true))
}

/// Whether the options and loaded libraries are as when R last synced the
/// core (`rs_set_in_step`).
pub fn rs_in_step() -> Result<RValue> {
    Ok(RValue::from(rstate::on_main_thread() && crate::in_step::check()))
}

/// Turns fetching debug files from debuginfod servers on or off. Returns
/// whether libdebuginfod could be loaded, and why not (when turning it on;
/// turning it off loads nothing).
pub fn rs_set_debuginfod(enabled: Arg) -> Result<RValue> {
    let on = enabled.flag()?;
    // (Loading libdebuginfod, and the HTTP libraries it needs, took 6-12 ms
    // of the first capture: only done when fetching is turned on.)
    #[cfg(target_os = "linux")]
    let (fetcher, available) = (
        || -> Box<dyn winch_core::debuginfod::Fetcher> {
            Box::new(winch_core::debuginfod::client::Libdebuginfod)
        },
        if on {
            winch_core::debuginfod::client::available()
        } else {
            Err("not checked: fetching is off".to_string())
        },
    );
    #[cfg(not(target_os = "linux"))]
    let (fetcher, available) = (
        || -> Box<dyn winch_core::debuginfod::Fetcher> { Box::new(NoFetcher) },
        Err::<(), String>("debuginfod is supported on Linux only".to_string()),
    );
    symbolizer::with_global(|s| s.set_debuginfod(on && available.is_ok(), fetcher))
        .ok_or_else(caches_busy)?;
    Ok(RValue::List(vec![("available", available.is_ok().into()), ("why", RValue::from(available.err()))]))
}

/// The session's debuginfod figures: fetches started, and per build-id
/// what came of it.
pub fn rs_debuginfod_info() -> Result<RValue> {
    use winch_core::debuginfod::Outcome;
    let (fetches, mut tried) = symbolizer::with_global(|s| match s.debuginfod() {
        Some(d) => {
            (d.fetches, d.tried().map(|(id, o)| (winch_core::debuginfod::hex(id), o.clone())).collect())
        }
        None => (0, Vec::new()),
    })
    .ok_or_else(caches_busy)?;
    tried.sort_by(|a, b| a.0.cmp(&b.0));
    let outcome = |o: &Outcome| match o {
        Outcome::Found(p) => format!("found: {}", p.display()),
        Outcome::Missed(why) => format!("missed: {why}"),
        Outcome::Rejected(why) => format!("rejected: {why}"),
    };
    Ok(RValue::List(vec![
        ("fetches", RValue::from(fetches as f64)),
        ("build_id", tried.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>().into()),
        ("outcome", tried.iter().map(|(_, o)| outcome(o)).collect::<Vec<_>>().into()),
    ]))
}

#[cfg(not(target_os = "linux"))]
struct NoFetcher;

#[cfg(not(target_os = "linux"))]
impl winch_core::debuginfod::Fetcher for NoFetcher {
    fn fetch(&mut self, _: &[u8], _: std::time::Duration) -> winch_core::debuginfod::Fetched {
        winch_core::debuginfod::Fetched::Missing("not supported here".into())
    }
}

/// Whether R's `Rprof()` is running; called from the `Ops` method `method`
/// (see `winch_core::joint::r_profiling`).
pub fn rs_rprof_running(method: Arg) -> Result<RValue> {
    let addrs = method.element_addrs()?;
    let [fun] = addrs.as_slice() else {
        return Err(Error::BadArgument("`method` must be a list of one function".into()));
    };
    Ok(joint::r_profiling(rstate::facts()?, *fun)?.into())
}

/// What `path` names, for R's checks of file arguments (R/utils.R):
/// `kind` ("file", "directory", "fifo", "character device", "block
/// device", "socket", "other"; "missing"; "unknown" when it cannot be
/// looked at, `why` says why), `size` in bytes (NA unless known).
/// Symbolic links are followed; nothing is opened.
pub fn rs_file_kind(path: Arg) -> Result<RValue> {
    let path = path.string()?;
    let (kind, size, why) = match winch_core::files::kind(std::path::Path::new(&path)) {
        Ok((k, size)) => (k.name(), size as f64, None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ("missing", f64::NAN, None),
        Err(e) => ("unknown", f64::NAN, Some(e.to_string())),
    };
    Ok(RValue::List(vec![("kind", kind.to_string().into()), ("size", size.into()), ("why", why.into())]))
}

pub use crate::outside::{
    rs_descendants, rs_dump, rs_dump_core, rs_record_discard, rs_record_start, rs_record_stop,
    rs_record_tick, rs_target_usage,
};
