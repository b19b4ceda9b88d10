//! winch from outside (see winch_core::outside): dumps of another process
//! or of a core file, and recordings of another process, whose profile is
//! built and converted as in-process profiles are.

use crate::args::Arg;
use crate::frames::{FrameTable, PlacementInfo, PlacementMode};
use crate::profile_form::{Part, Unread};
use crate::value::RValue;
use std::sync::Mutex;
use winch_core::error::{Error, Result};
use winch_core::outside::recorder::Recorder;
use winch_core::outside::tree::{Settings, TreeRecorder};
use winch_core::outside::{Relation, Relative, Usage};
use winch_core::profile::build;
use winch_core::profile::model::Event;
use winch_core::symbolizer;
use winch_core::view::{self, View};

/// The joint stack of every thread of process `pid`, read from outside
/// (see winch_core::outside): per thread its id, name, native frames (a
/// joint frame table) and, for R's main thread, R's calls as source text
/// with their labels, and `notes`: what could not be read and why.
pub fn rs_dump(pid: Arg, libr: Arg) -> Result<RValue> {
    let pid = pid.int()?;
    let libr = libr.flag()?;
    Ok(dump_value(&winch_core::outside::dump::dump(pid)?, libr))
}

/// [`rs_dump`] of the process core file `path` was made of, `exe` (a
/// string, or NULL) the program it ran.
pub fn rs_dump_core(path: Arg, exe: Arg, libr: Arg) -> Result<RValue> {
    let path = path.string()?;
    let exe = if exe.is_null() { None } else { Some(exe.string()?) };
    let libr = libr.flag()?;
    Ok(dump_value(&winch_core::outside::dump::dump_core(&path, exe.as_deref())?, libr))
}

fn dump_value(d: &winch_core::outside::dump::Dump, libr: bool) -> RValue {
    // The names R's registration table gives that process's routines.
    symbolizer::with_global(|s| s.add_registered_in(&d.map, d.routines.clone()));
    let mut threads = Vec::with_capacity(d.threads.len());
    for t in &d.threads {
        let (view, placement) = match &t.r {
            Some(r) => (View::Joint { libr }, Some(&r.placement)),
            None => (View::TraceBack { libr: true }, None),
        };
        let mut shown = view::select(&t.classes, view);
        if t.r.is_none() {
            shown.reverse(); // outermost first, as joint tables are
        }
        let mut resolved = t.trace.symbolize_some(&shown);
        // Function starts the symbolizer could not find (it reads this
        // process's unwind tables) from the target's, as walked.
        for (k, &i) in shown.iter().enumerate() {
            let (start, module) = (t.starts[i], t.trace.frames[i].module);
            if let (Some(m), true) = (module, start != 0 && resolved[k].iter().any(|r| r.start.is_none())) {
                let rel = start.wrapping_sub(d.map.module(m).bias) as u64;
                let fixed: Vec<_> = resolved[k]
                    .iter()
                    .cloned()
                    .map(|mut r| {
                        r.start = r.start.or(Some(rel));
                        r
                    })
                    .collect();
                resolved[k] = fixed.into();
            }
        }
        let mut table = FrameTable::in_order(&t.trace, &shown, resolved, &t.classes, placement, true);
        if placement.is_none() {
            table.joint = true; // the same columns: no R frame to sit under
        }
        let (calls, labels, fallback) = match &t.r {
            Some(r) => (r.calls.clone(), r.labels.clone(), r.fallback.clone()),
            None => (Vec::new(), Vec::new(), None),
        };
        // (No count of R frames beyond the native ones here.)
        table.placement = Some(PlacementInfo {
            mode: PlacementMode::of(fallback.is_some(), placement.is_some_and(|p| p.is_approximate())),
            // (Or why the thread was not read.)
            fallback_reason: fallback.clone().or_else(|| t.note.clone()),
            beyond_end: None,
            throw: None,
        });
        threads.push(RValue::List(vec![
            ("tid", t.tid.into()),
            ("name", t.name.clone().into()),
            ("r", t.r.is_some().into()),
            ("calls", RValue::Str(calls)),
            ("labels", labels.into()),
            ("fallback", fallback.into()),
            ("frames", RValue::Built(Box::new(table))),
        ]));
    }
    let version = d.r_version_text().map(str::to_string);
    RValue::List(vec![
        ("pid", d.pid.into()),
        ("r_version", version.into()),
        ("notes", RValue::Str(d.notes.iter().cloned().map(Some).collect())),
        ("threads", RValue::Unnamed(threads)),
    ])
}

/// A recording in progress (of a process, and of its descendants when
/// asked), with what its profiles are built with.
struct Recording {
    tree: TreeRecorder,
    event: Event,
    interval_ns: u64,
}

/// The recording in progress.
static RECORDING: Mutex<Option<Recording>> = Mutex::new(None);

fn recording() -> std::sync::MutexGuard<'static, Option<Recording>> {
    RECORDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts recording process `pid` every `interval` seconds (the ticks are
/// R's to call): all threads or R's main thread (`threads`), idle threads
/// too or not (`idle`), and its descendants too or not (`children`).
pub fn rs_record_start(
    pid: Arg,
    interval: Arg,
    threads: Arg,
    idle: Arg,
    loops: Arg,
    lines: Arg,
    children: Arg,
) -> Result<RValue> {
    let pid = pid.int()?;
    let interval_ns = (interval.number()? * 1e9).round() as u64;
    let all = threads.string()? == "all";
    let idle = idle.flag()?;
    let how = (loops.flag()?, lines.flag()?);
    let follow = children.flag()?;
    let mut current = recording();
    if current.is_some() {
        return Err(Error::Busy("a recording is running already: stop it first".into()));
    }
    // What this session learnt about its own R holds for a target running
    // the same build (see `winch_core::r::learn::moved`).
    let settings = Settings { threads: (all, idle), how, own_r: crate::rstate::libr_addr(), interval_ns };
    let tree = TreeRecorder::start(pid, settings, follow)?;
    let event = if idle { Event::Elapsed } else { Event::Cpu };
    *current = Some(Recording { tree, event, interval_ns });
    Ok(true.into())
}

/// One sample of the recorded process; FALSE when it has ended.
pub fn rs_record_tick() -> Result<RValue> {
    let mut current = recording();
    let Some(Recording { tree, .. }) = current.as_mut() else {
        return Err(Error::BadArgument("no recording is running".into()));
    };
    match tree.tick() {
        Ok(()) => Ok(true.into()),
        Err(Error::NoProcess(_)) => Ok(false.into()),
        Err(e) => Err(e),
    }
}

/// Ends the recording and builds its profiles: `root`, the process's (as
/// `rs_profile_stop` returns one, with `missed`, ticks that read nothing,
/// and `note`, why R's frames are missing); `children`, each descendant or
/// worker recorded (`pid`, `parent`, `relation`, `ended`, `usage_start`,
/// `usage_end` and its `profile`); `not_recorded`, the others (`pid`,
/// `parent`, `relation`, `reason`).
pub fn rs_record_stop() -> Result<RValue> {
    let Some(Recording { tree, event, interval_ns }) = recording().take() else {
        return Err(Error::BadArgument("no recording is running".into()));
    };
    let root = recorded_profile(tree.root, event, interval_ns);
    let children = tree
        .children
        .into_iter()
        .map(|m| {
            RValue::List(vec![
                ("pid", m.pid.into()),
                ("parent", m.parent.into()),
                ("relation", relation_name(m.relation).to_string().into()),
                ("ended", m.ended.into()),
                ("usage_start", usage_value(&m.usage_start)),
                ("usage_end", usage_value(&m.usage_last)),
                ("profile", recorded_profile(m.recorder, event, interval_ns)),
            ])
        })
        .collect();
    let missed = &tree.not_recorded;
    Ok(RValue::List(vec![
        ("root", root),
        ("children", RValue::Unnamed(children)),
        (
            "not_recorded",
            RValue::List(vec![
                ("pid", RValue::Int(missed.iter().map(|n| Some(n.pid)).collect())),
                ("parent", RValue::Int(missed.iter().map(|n| Some(n.parent)).collect())),
                (
                    "relation",
                    RValue::Str(missed.iter().map(|n| Some(relation_name(n.relation).into())).collect()),
                ),
                ("reason", RValue::Str(missed.iter().map(|n| Some(n.reason.clone())).collect())),
            ]),
        ),
    ]))
}

/// The profile of one recorded process.
fn recorded_profile(r: Recorder, event: Event, interval_ns: u64) -> RValue {
    let (missed, note) = (r.missed, r.note.clone());
    let routines = r.routines.clone();
    let finished = r.finish();
    if let Some(map) = &finished.modules_now {
        symbolizer::with_global(|s| s.add_registered_in(map, routines));
    }
    let (profile, stats) = build::build(&finished, event, interval_ns);
    let mut form = crate::profile::to_form(&profile, &stats);
    form.missed = Unread(Some(missed as f64));
    form.note = Unread(Some(vec![note]));
    form.into_r().unwrap_or(RValue::Null)
}

/// Ends the recording without building anything; TRUE if one was running.
pub fn rs_record_discard() -> Result<RValue> {
    Ok(recording().take().is_some().into())
}

/// The processes working for process `pid` now, its descendants and its
/// workers (see `winch_core::outside::relatives`): `pid`, `parent`
/// (integer vectors) and `relation` (`"child"` or `"worker"`), each after
/// the process it works for.
pub fn rs_descendants(pid: Arg) -> Result<RValue> {
    let found = winch_core::outside::relatives(pid.int()?, true);
    let column = |f: fn(&Relative) -> i32| RValue::Int(found.iter().map(|r| Some(f(r))).collect());
    let relation = found.iter().map(|r| Some(relation_name(r.relation).to_string())).collect();
    Ok(RValue::List(vec![
        ("pid", column(|r| r.pid)),
        ("parent", column(|r| r.parent)),
        ("relation", RValue::Str(relation)),
    ]))
}

/// How R names a [`Relation`].
pub(crate) fn relation_name(r: Relation) -> &'static str {
    match r {
        Relation::Child => "child",
        Relation::Worker => "worker",
    }
}

/// What process `pid` has used so far, as `rs_resource_usage()` tells of
/// this process (NA where `/proc` has nothing: block I/O always).
pub fn rs_target_usage(pid: Arg) -> Result<RValue> {
    Ok(usage_value(&winch_core::outside::usage(pid.int()?)))
}

/// A process's resource use as R's list.
fn usage_value(u: &Usage) -> RValue {
    // SAFETY: R's NA_real_, set when R starts, read on R's main thread.
    let na = unsafe { crate::rapi::R_NaReal };
    let v = |x: Option<f64>| RValue::Dbl(vec![x.unwrap_or(na)]);
    RValue::List(vec![
        ("user", v(u.user)),
        ("system", v(u.system)),
        ("children_user", v(u.children_user)),
        ("children_system", v(u.children_system)),
        ("max_rss", v(u.max_rss)),
        ("minor_faults", v(u.minor_faults)),
        ("major_faults", v(u.major_faults)),
        ("block_input", v(None)),
        ("block_output", v(None)),
        ("voluntary_switches", v(u.voluntary_switches)),
        ("involuntary_switches", v(u.involuntary_switches)),
    ])
}
