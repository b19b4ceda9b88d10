//! extendr glue: the functions R reaches through `.Call` (registered in
//! `src/init.c`). Each returns its result or `list(error = "...")`, which the
//! R wrappers turn into an R error: no R error is raised from Rust frames and
//! no panic crosses into R.

mod convert;
mod joint;
mod rapi;
mod rstate;

use convert::{Attr, Rows};
use extendr_api::prelude::*;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use winch_core::symbolizer;
use winch_core::trace::{self, CaptureOptions};
use winch_core::unwind::Backend;

fn error_list(msg: String) -> Robj {
    List::from_pairs(vec![("error", Robj::from(msg))]).into()
}

fn guarded(f: impl FnOnce() -> std::result::Result<Robj, String>) -> Robj {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(x)) => x,
        Ok(Err(msg)) => error_list(msg),
        Err(_) => error_list(format!(
            "internal error in winch: {}",
            rstate::take_panic_message().unwrap_or_else(|| "panic".into())
        )),
    }
}

fn backend_arg(x: &Robj) -> std::result::Result<Backend, String> {
    match x.as_str() {
        Some("auto") | None => {
            Backend::best().ok_or_else(|| "no unwinding backend works on this platform".into())
        }
        Some(name) => match Backend::from_name(name) {
            Some(b) if b.is_available() => Ok(b),
            Some(b) => Err(format!("the {} backend is not available in this build", b.name())),
            None => Err(format!("unknown backend \"{name}\"")),
        },
    }
}

fn flag(x: &Robj) -> bool {
    x.as_bool().unwrap_or(false)
}

/// The attributes every frame table carries: the unwinder that walked the
/// stack and whether (and why) the walk stopped early.
fn trace_attrs(t: &trace::NativeTrace) -> Vec<(&'static std::ffi::CStr, Attr)> {
    vec![
        (c"backend", Attr::Str(Some(t.backend.name().into()))),
        (c"truncated", Attr::Lgl(t.truncated.is_some())),
        (c"truncation", Attr::Str(t.truncated.clone())),
    ]
}

/// For each frame of `t`, whether it is R's own code.
fn libr_flags(t: &trace::NativeTrace) -> Vec<bool> {
    let is_libr = rstate::libr_predicate(&t.map);
    t.frames.iter().map(|f| f.module.is_some_and(&is_libr)).collect()
}

/// The rows of frames `keep` of `t`, with their symbolization `resolved`;
/// `host` says which frames belong to the program running R (joint tables
/// only).
fn frame_rows(
    t: &trace::NativeTrace,
    keep: &[usize],
    resolved: &[std::sync::Arc<[winch_core::debuginfo::Resolved]>],
    libr: &[bool],
    joint: Option<(&winch_core::interleave::Placement, &dyn Fn(usize) -> bool)>,
) -> Rows {
    let mut rows = Rows::default();
    for (&i, r) in keep.iter().zip(resolved) {
        rows.push(t, i, r, libr[i], joint.map(|(p, host)| (p, host(i))));
    }
    rows
}

fn require_main_thread() -> std::result::Result<(), String> {
    if rstate::on_main_thread() {
        Ok(())
    } else {
        Err("winch can only capture R's stack from R's main thread".into())
    }
}

/// Tells the Rust side which R is running (`getRversion()` as integers),
/// from `.onLoad`.
#[extendr]
fn winch_rs_init(version: Robj) -> Robj {
    guarded(|| {
        let v = version.as_integer_slice().ok_or("expected an integer vector")?;
        match v {
            [major, minor, ..] if *major >= 0 && *minor >= 0 => {
                rstate::set_r_version((*major as u32, *minor as u32));
                Ok(().into())
            }
            _ => Err("expected R's version as c(major, minor, patch)".into()),
        }
    })
}

/// Whether some unwinding backend works here.
#[extendr]
fn winch_rs_available() -> bool {
    std::panic::catch_unwind(|| Backend::best().is_some()).unwrap_or(false)
}

/// Names of the working backends, preferred first.
#[extendr]
fn winch_rs_backends() -> Vec<String> {
    std::panic::catch_unwind(|| {
        Backend::ALL.into_iter().filter(|b| b.is_available()).map(|b| b.name().to_string()).collect()
    })
    .unwrap_or_default()
}

/// The native stack of the caller, innermost first.
#[extendr]
fn winch_rs_trace_back(backend: Robj, libr: Robj) -> Robj {
    guarded(|| {
        require_main_thread()?;
        let backend = backend_arg(&backend)?;
        let t =
            trace::capture(&CaptureOptions { backend, self_addr: rstate::self_addr(), main_thread: true })?;
        let keep_libr = flag(&libr);
        let libr_flags = libr_flags(&t);
        let keep: Vec<usize> = (0..t.frames.len()).filter(|&i| keep_libr || !libr_flags[i]).collect();
        let rows = frame_rows(&t, &keep, &t.symbolize_some(&keep), &libr_flags, None);
        Ok(rows.into_data_frame(&t.map, false, trace_attrs(&t)))
    })
}

fn pointers(x: &Robj) -> std::result::Result<Vec<usize>, String> {
    let list = x.as_list().ok_or("expected a list")?;
    // SAFETY: only the addresses of the elements are taken.
    Ok(list.values().map(|v| unsafe { v.get() } as usize).collect())
}

/// The native stack placed among the caller's R frames `frames` (its
/// `sys.frames()`) with calls `calls` (its `sys.calls()`).
#[extendr]
fn winch_rs_joint(
    backend: Robj,
    frames: Robj,
    calls: Robj,
    libr: Robj,
    use_contexts: Robj,
    view: Robj,
) -> Robj {
    guarded(|| {
        require_main_thread()?;
        let backend = backend_arg(&backend)?;
        let frame_ptrs = pointers(&frames)?;
        let call_ptrs = pointers(&calls)?;
        // SAFETY: the elements of `calls` are R objects.
        let heads: Vec<usize> =
            call_ptrs.iter().map(|&c| unsafe { rstate::call_head(c) }.unwrap_or(0)).collect();
        let j = joint::capture(backend, &frame_ptrs, &heads, flag(&use_contexts))?;
        let t = &j.trace;
        let keep_libr = flag(&libr);
        let libr_flags = libr_flags(t);
        let keep: Vec<usize> = (0..t.frames.len()).filter(|&i| keep_libr || !libr_flags[i]).collect();
        // Frames further out than R's interpreter belong to the program that
        // runs R (its main(), the C library's start code). Only a complete
        // stack shows where the interpreter ends.
        let interpreter = rstate::libr_module(&t.map);
        let outermost_libr = match t.truncated {
            None => t.frames.iter().rposition(|f| f.module.is_some() && f.module == interpreter),
            Some(_) => None,
        };
        // The joint view: foreign frames of R's evaluation only, outermost
        // first, the order in which they are spliced into R's calls.
        let keep: Vec<usize> = if flag(&view) {
            keep.into_iter()
                .rev()
                .filter(|&i| !libr_flags[i] && outermost_libr.is_none_or(|o| i <= o))
                .collect()
        } else {
            keep
        };
        let host = |i: usize| outermost_libr.is_some_and(|o| i > o);
        let rows = frame_rows(t, &keep, &t.symbolize_some(&keep), &libr_flags, Some((&j.placement, &host)));
        let mode = match (&j.fallback_reason, j.placement.is_approximate()) {
            (Some(_), _) => "fallback",
            (None, true) => "approximate",
            (None, false) => "exact",
        };
        let mut attrs = trace_attrs(t);
        attrs.push((c"placement", Attr::Str(Some(mode.into()))));
        attrs.push((c"fallback_reason", Attr::Str(j.fallback_reason.clone())));
        attrs.push((c"beyond_end", Attr::Int(j.placement.beyond_end as i32)));
        Ok(rows.into_data_frame(&t.map, true, attrs))
    })
}

fn usize_vec(x: &Robj) -> std::result::Result<Vec<usize>, String> {
    let v = x.as_integer_slice().ok_or("expected an integer vector")?;
    v.iter().map(|&k| usize::try_from(k).map_err(|_| "expected non-negative integers".to_string())).collect()
}

fn opt_usize_vec(x: &Robj) -> std::result::Result<Vec<Option<usize>>, String> {
    let v = x.as_integer_slice().ok_or("expected an integer vector")?;
    // NA_integer_ is i32::MIN: negative, so None.
    Ok(v.iter().map(|&k| usize::try_from(k).ok()).collect())
}

fn int_col(v: impl Iterator<Item = Option<usize>>) -> Robj {
    let v: Vec<Option<i32>> = v.map(|x| x.and_then(|k| i32::try_from(k).ok())).collect();
    v.into()
}

/// Where rows go when native frames (their R frames `r_frame`, outermost
/// first) are spliced into an rlang trace whose rows are R frames
/// `row_frames` with parents `parents`; see winch_core::splice.
#[extendr]
fn winch_rs_splice_trace(row_frames: Robj, parents: Robj, r_frame: Robj, first: Robj) -> Robj {
    guarded(|| {
        use winch_core::splice::{splice_trace, Row};
        let first = first.as_integer().unwrap_or(1).max(1) as usize;
        let s =
            splice_trace(&usize_vec(&row_frames)?, &usize_vec(&parents)?, &opt_usize_vec(&r_frame)?, first);
        let kind = s.rows.iter().map(|r| {
            Some(match r {
                Row::R(_) => 1,
                Row::Native(_) => 2,
                Row::UnplacedMarker => 3,
            })
        });
        let src = s.rows.iter().map(|r| if let Row::R(j) = r { Some(j + 1) } else { None });
        let native = s.rows.iter().map(|r| if let Row::Native(i) = r { Some(i + 1) } else { None });
        Ok(List::from_pairs(vec![
            ("kind", int_col(kind)),
            ("src", int_col(src)),
            ("native", int_col(native)),
            ("parent", int_col(s.parents.iter().map(|&p| Some(p)))),
        ])
        .into())
    })
}

/// The entry order of a joint sys.calls() for R frames 1..=n: positive k is
/// R call k, negative -i native frame i (1-based).
#[extendr]
fn winch_rs_splice_calls(n: Robj, r_frame: Robj) -> Robj {
    guarded(|| {
        let n = n.as_integer().unwrap_or(0).max(0) as usize;
        let order: Vec<i32> = winch_core::splice::splice_calls(n, &opt_usize_vec(&r_frame)?)
            .into_iter()
            .map(|e| match e {
                Ok(k) => k as i32,
                Err(i) => -(i as i32 + 1),
            })
            .collect();
        Ok(order.into())
    })
}

/// R's context chain, innermost first: callflag, whether the context is on
/// the C stack, and the native frame that owns it (a diagnostic).
#[extendr]
fn winch_rs_context_chain(backend: Robj) -> Robj {
    guarded(|| {
        require_main_thread()?;
        let backend = backend_arg(&backend)?;
        let chain = joint::chain_summary(backend)?;
        let frame = |f: Option<usize>| f.map(|i| i as i32 + 1);
        Ok(List::from_pairs(vec![
            ("callflag", Robj::from(chain.iter().map(|c| c.callflag).collect::<Vec<_>>())),
            ("on_stack", Robj::from(chain.iter().map(|c| c.on_stack).collect::<Vec<_>>())),
            ("on_node_stack", Robj::from(chain.iter().map(|c| c.on_node_stack).collect::<Vec<_>>())),
            ("native_frame", Robj::from(chain.iter().map(|c| frame(c.frame)).collect::<Vec<_>>())),
            ("runner_frame", Robj::from(chain.iter().map(|c| frame(c.runner_frame)).collect::<Vec<_>>())),
        ])
        .into())
    })
}

/// Captures and symbolizes on a new thread (no R API there); a test of
/// capture away from R's main thread.
#[extendr]
fn winch_rs_thread_capture(backend: Robj) -> Robj {
    guarded(|| {
        let backend = backend_arg(&backend)?;
        let self_addr = rstate::self_addr();
        let handle = std::thread::spawn(move || {
            let on_main = rstate::on_main_thread();
            let t = trace::capture(&CaptureOptions { backend, self_addr, main_thread: false });
            t.map(|t| {
                let all: Vec<usize> = (0..t.frames.len()).collect();
                let r = t.symbolize_some(&all);
                (on_main, t, r)
            })
        });
        let (on_main, t, resolved) = handle.join().map_err(|_| "capture thread panicked".to_string())??;
        let all: Vec<usize> = (0..t.frames.len()).collect();
        let rows = frame_rows(&t, &all, &resolved, &libr_flags(&t), None);
        let mut attrs = trace_attrs(&t);
        attrs.push((c"main_thread", Attr::Lgl(on_main)));
        Ok(rows.into_data_frame(&t.map, false, attrs))
    })
}

/// Nanoseconds per iteration of each stage of a capture at the caller's
/// depth, over `n` iterations: unwinding alone, unwinding plus module lookup
/// and checks, plus symbolization (warm caches). For profiling notes.
#[extendr]
fn winch_rs_stage_times(backend: Robj, n: Robj) -> Robj {
    guarded(|| {
        let backend = backend_arg(&backend)?;
        let n = n.as_integer().unwrap_or(100).max(1) as u32;
        let opts = CaptureOptions { backend, self_addr: rstate::self_addr(), main_thread: true };
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
            let _ = trace::capture(&opts);
        });
        let symbolize = time(&mut || {
            if let Ok(t) = trace::capture(&opts) {
                let _ = t.symbolize();
            }
        });
        Ok(List::from_pairs(vec![
            ("frames", Robj::from(frames as i32)),
            ("unwind", Robj::from(unwind)),
            ("assemble", Robj::from(assemble)),
            ("symbolize", Robj::from(symbolize)),
        ])
        .into())
    })
}

/// Figures about the symbol caches.
#[extendr]
fn winch_rs_cache_info() -> Robj {
    guarded(|| {
        let (s, per_module) =
            symbolizer::with_global(|s| (s.stats(), s.module_stats())).ok_or("winch's caches are in use")?;
        let status = |st: &winch_core::debuginfo::Status| -> String {
            use winch_core::debuginfo::Status::*;
            match st {
                Ok => "ok".into(),
                NoFile => "no file".into(),
                Unreadable(why) => format!("unreadable: {why}"),
                Mismatch(why) => format!("mismatch: {why}"),
            }
        };
        let modules = List::from_pairs(vec![
            ("path", Robj::from(per_module.iter().map(|m| m.path.clone()).collect::<Vec<_>>())),
            ("symbols", Robj::from(per_module.iter().map(|m| m.symbols as i32).collect::<Vec<_>>())),
            ("dwarf", Robj::from(per_module.iter().map(|m| m.has_dwarf).collect::<Vec<_>>())),
            ("bytes", Robj::from(per_module.iter().map(|m| m.heap_bytes as f64).collect::<Vec<_>>())),
            (
                "debug_file",
                Robj::from(
                    per_module
                        .iter()
                        .map(|m| m.debug_file.as_ref().map(|p| p.display().to_string()))
                        .collect::<Vec<_>>(),
                ),
            ),
            ("status", Robj::from(per_module.iter().map(|m| status(&m.status)).collect::<Vec<_>>())),
        ]);
        Ok(List::from_pairs(vec![
            ("modules", Robj::from(s.modules as i32)),
            ("modules_with_dwarf", Robj::from(s.modules_with_dwarf as i32)),
            ("addresses", Robj::from(s.addresses as i32)),
            ("bytes", Robj::from(s.heap_bytes as f64)),
            ("files_read", Robj::from(s.files_loaded as f64)),
            ("per_module", modules.into()),
        ])
        .into())
    })
}

/// Sets the directories searched for separate debug files.
#[extendr]
fn winch_rs_set_debug_dirs(dirs: Robj) -> Robj {
    guarded(|| {
        let dirs: Vec<PathBuf> = match dirs.as_str_vector() {
            Some(v) => v.into_iter().map(PathBuf::from).collect(),
            None => return Err("`dirs` must be a character vector".into()),
        };
        let old = symbolizer::with_global(|s| {
            let old: Vec<String> = s.debug_roots().iter().map(|p| p.display().to_string()).collect();
            s.set_debug_roots(dirs);
            old
        });
        Ok(old.ok_or("winch's caches are in use")?.into())
    })
}

extendr_module! {
    mod winch;
    fn winch_rs_init;
    fn winch_rs_available;
    fn winch_rs_backends;
    fn winch_rs_trace_back;
    fn winch_rs_joint;
    fn winch_rs_splice_trace;
    fn winch_rs_splice_calls;
    fn winch_rs_context_chain;
    fn winch_rs_thread_capture;
    fn winch_rs_cache_info;
    fn winch_rs_stage_times;
    fn winch_rs_set_debug_dirs;
}
