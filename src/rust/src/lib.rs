//! extendr glue: the functions R reaches through `.Call` (registered in
//! `src/init.c`). Each returns its result or `list(error = "...")`, which the
//! R wrappers turn into an R error: no R error is raised from Rust frames and
//! no panic crosses into R.

mod convert;
mod joint;
mod rstate;

use convert::{opt_str, Rows};
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

fn require_main_thread() -> std::result::Result<(), String> {
    if rstate::on_main_thread() {
        Ok(())
    } else {
        Err("winch can only capture R's stack from R's main thread".into())
    }
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
        let is_libr = rstate::libr_predicate(&t.map);
        let libr_flags: Vec<bool> = t.frames.iter().map(|f| f.module.is_some_and(&is_libr)).collect();
        let keep: Vec<usize> = (0..t.frames.len()).filter(|&i| keep_libr || !libr_flags[i]).collect();
        let resolved = t.symbolize_some(&keep);
        let mut rows = Rows::default();
        for (&i, r) in keep.iter().zip(&resolved) {
            rows.push(&t, i, r, libr_flags[i], None);
        }
        Ok(rows.into_list(
            false,
            vec![("truncated", opt_str(t.truncated.as_deref())), ("backend", t.backend.name().into())],
        ))
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
fn winch_rs_joint(backend: Robj, frames: Robj, calls: Robj, libr: Robj, use_contexts: Robj) -> Robj {
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
        let is_libr = rstate::libr_predicate(&t.map);
        let libr_flags: Vec<bool> = t.frames.iter().map(|f| f.module.is_some_and(&is_libr)).collect();
        let keep: Vec<usize> = (0..t.frames.len()).filter(|&i| keep_libr || !libr_flags[i]).collect();
        // Frames further out than R's interpreter belong to the program that
        // runs R (its main(), the C library's start code). Only a complete
        // stack shows where the interpreter ends.
        let interpreter = rstate::libr_module(&t.map);
        let outermost_libr = match t.truncated {
            None => t.frames.iter().rposition(|f| f.module.is_some() && f.module == interpreter),
            Some(_) => None,
        };
        let resolved = t.symbolize_some(&keep);
        let mut rows = Rows::default();
        for (&i, r) in keep.iter().zip(&resolved) {
            let host = outermost_libr.is_some_and(|o| i > o);
            rows.push(t, i, r, libr_flags[i], Some((&j.placement, host)));
        }
        let mode = match (&j.fallback_reason, j.placement.is_approximate()) {
            (Some(_), _) => "fallback",
            (None, true) => "approximate",
            (None, false) => "exact",
        };
        Ok(rows.into_list(
            true,
            vec![
                ("truncated", opt_str(t.truncated.as_deref())),
                ("backend", t.backend.name().into()),
                ("placement", mode.into()),
                ("fallback_reason", opt_str(j.fallback_reason.as_deref())),
                ("beyond_end", (j.placement.beyond_end as i32).into()),
            ],
        ))
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
        let mut rows = Rows::default();
        for (i, r) in resolved.iter().enumerate() {
            rows.push(&t, i, r, false, None);
        }
        Ok(rows.into_list(
            false,
            vec![
                ("truncated", opt_str(t.truncated.as_deref())),
                ("backend", t.backend.name().into()),
                ("main_thread", on_main.into()),
            ],
        ))
    })
}

/// Figures about the symbol caches.
#[extendr]
fn winch_rs_cache_info() -> Robj {
    guarded(|| {
        let s = symbolizer::with_global(|s| s.stats());
        Ok(List::from_pairs(vec![
            ("modules", Robj::from(s.modules as i32)),
            ("modules_with_dwarf", Robj::from(s.modules_with_dwarf as i32)),
            ("addresses", Robj::from(s.addresses as i32)),
            ("bytes", Robj::from(s.heap_bytes as f64)),
            ("files_read", Robj::from(s.files_loaded as f64)),
        ])
        .into())
    })
}

/// Empties the symbol caches.
#[extendr]
fn winch_rs_cache_clear() -> Robj {
    guarded(|| {
        symbolizer::with_global(|s| s.clear());
        Ok(().into())
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
        Ok(old.into())
    })
}

extendr_module! {
    mod winch;
    fn winch_rs_available;
    fn winch_rs_backends;
    fn winch_rs_trace_back;
    fn winch_rs_joint;
    fn winch_rs_thread_capture;
    fn winch_rs_cache_info;
    fn winch_rs_cache_clear;
    fn winch_rs_set_debug_dirs;
}
