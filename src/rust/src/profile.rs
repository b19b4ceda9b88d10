//! The profiler's entry points: start and stop a session, and write a
//! profile (from its R form, read back and checked by `read`) in Rprof's
//! format or as pprof.

use crate::args::Arg;
use crate::profile_form::{
    self as form, Functions, Lines, Locations, Modules, NumberOrNan, Part, Processes, ProfileForm, Stacks,
    Threads, Unread,
};
use crate::rstate;
use crate::value::RValue;
use crate::ProfileStartArgs;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use winch_core::error::{Error, Result};
use winch_core::files;
use winch_core::joint;
use winch_core::profile::build::{self, Stats};
use winch_core::profile::capture::{self as session, Clock, Running, Scope, Trigger};
use winch_core::profile::model::{Bytes, Event, Line, Profile};
use winch_core::profile::{LineFacts, LoopSymbols, Options, RFacts, Region};
use winch_core::r::learn::{self, LoopKind};

mod read;

/// The running session, with what `stop` needs to know.
struct Current {
    running: Running,
    event: Event,
    /// The process's resource use when sampling began (see
    /// `rs_profile_stop`).
    usage_start: Option<RValue>,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// The running session of this process. In a `fork()` child, `CURRENT`
/// holds a copy of the parent's session, whose timer and collector thread
/// do not exist there: it is forgotten, and the child starts with none.
fn current() -> MutexGuard<'static, Option<Current>> {
    let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if current.as_ref().is_some_and(|c| c.running.inherited()) {
        if let Some(c) = current.take() {
            c.running.forget();
        }
    }
    current
}

/// Checks, before sampling, that what the handler will read is read right:
/// the context chain against `sys.frames()`/`sys.calls()`, and the layout
/// of R objects against labels R computed (`probes`: calls, `expected`:
/// their labels as `Rprof()` writes them).
fn check(frames: &Arg, calls: &Arg, probes: &Arg, expected: &Arg) -> Result<()> {
    joint::validate_chain(rstate::facts()?, &frames.element_addrs()?, &calls.element_addrs()?)?;
    joint::validate_labels(rstate::facts()?, &probes.element_addrs()?, &expected.strings()?)
}

/// Starts a session.
pub fn rs_profile_start(args: ProfileStartArgs) -> Result<RValue> {
    let ProfileStartArgs {
        interval,
        event,
        loops,
        region,
        lines,
        symbols,
        frames,
        calls,
        probes,
        expected,
        threads,
        options,
    } = args;
    if !rstate::on_main_thread() {
        return Err(Error::WrongThread);
    }
    let interval_ns = (interval.number()? * 1e9).round();
    if !(interval_ns > 0.0 && interval_ns <= 3600e9) {
        return Err(Error::BadArgument("`interval` must be a number of seconds in (0, 3600]".into()));
    }
    let (clock, event) = match event.string()?.as_str() {
        "cpu" => (Clock::Cpu, Event::Cpu),
        "elapsed" => (Clock::Elapsed, Event::Elapsed),
        "alloc" => (Clock::Cpu, Event::Alloc),
        _ => return Err(Error::BadArgument("`event` must be \"cpu\", \"elapsed\" or \"alloc\"".into())),
    };
    let all_threads = match threads.string()?.as_str() {
        "all" => true,
        "main" => false,
        _ => return Err(Error::BadArgument("`threads` must be \"all\" or \"main\"".into())),
    };
    let mut current = current();
    if current.is_some() || session::active() {
        return Err(Error::Busy("a winch profile is already running".into()));
    }
    check(&frames, &calls, &probes, &expected)?;
    let region = read_region(&region)?;
    // `for`, `while`, `repeat`, `srcfile` and `filename`.
    let (loop_symbols, files) = match symbols.element_addrs()?.as_slice() {
        &[for_, while_, repeat, srcfile_sym, filename_sym] => {
            (LoopSymbols { for_, while_, repeat }, LineFacts { srcfile_sym, filename_sym })
        }
        _ => return Err(Error::BadArgument("`symbols` must be five symbols".into())),
    };
    // `list(libr = , gc = )`.
    let options = options.renamed("options");
    let shown = Options {
        with_loops: loops.flag()?,
        loop_symbols: Some(loop_symbols),
        lines: lines.flag()?.then_some(files),
        keep_libr: options.field("libr")?.flag()?,
        region,
    };
    let facts = RFacts::of_this_process(*rstate::facts()?, shown, options.field("gc")?.flag()?)?;
    let scope = Scope { threads: all_threads, processes: options.field("processes")?.flag()? };
    let running = if event == Event::Alloc {
        // `list(..., sample_bytes = )`: the mean bytes between samples.
        let mean = options.field("sample_bytes")?.number()?;
        if !(1.0..=1e15).contains(&mean) {
            // (As R says it: check_profile_args() in R/profile.R.)
            return Err(Error::BadArgument(
                "`sample_bytes` must be one number, at least 1 and at most 1e+15 (bytes)".into(),
            ));
        }
        let trigger = Trigger::Allocations { mean_bytes: mean.round() as u64 };
        session::start(facts, rstate::libr_addr(), trigger, scope)?
    } else {
        let trigger = Trigger::Timer { clock, interval_ns: interval_ns as u64 };
        session::start(facts, rstate::libr_addr(), trigger, scope)?
    };
    // (Read once sampling runs: what starting it cost is not the profiled
    // code's.)
    let usage_start = crate::entries::rs_resource_usage().ok();
    *current = Some(Current { running, event, usage_start });
    Ok(true.into()) // NULL would read as "out of memory"
}

/// The profiled region: `list("all")`, `list("under", fun, env)` (what
/// runs under a call of `fun` made from `env`) or `list("outside", fun)`.
fn read_region(region: &Arg) -> Result<Region> {
    let parts = region.elements()?;
    let addrs = region.element_addrs()?;
    let kind = parts.first().map(|k| k.string()).transpose()?;
    match (kind.as_deref(), addrs.as_slice()) {
        (Some("all"), [_]) => Ok(Region::All),
        (Some("under"), [_, fun, env]) => Ok(Region::Under { callfun: *fun, sysparent: *env }),
        (Some("outside"), [_, fun]) => Ok(Region::Outside { callfun: *fun }),
        _ => Err(Error::BadArgument("`region` is not a profiled region".into())),
    }
}

/// Whether a session (of this process) is running.
pub fn rs_profile_active() -> Result<RValue> {
    Ok(current().is_some().into())
}

/// Stops the session and returns the profile (its R form) with, beside
/// it, `relatives`: the processes that worked for this one while it ran
/// (`pid`, `parent`, `relation`, `command`, `cpu`, the seconds each used
/// while watched, `ended`, whether it had ended by the last look, and
/// `why`, why a worker that could not be read was not (NA otherwise); NULL
/// when they were not watched), and `usage_start` and `usage_end`: the
/// process's resource use (as `rs_resource_usage`) once sampling had
/// begun and as it was stopped, so that what the profiler's start and
/// the profile's building cost is not counted as the profiled code's.
pub fn rs_profile_stop() -> Result<RValue> {
    let current = current().take();
    let Some(Current { running, event, usage_start }) = current else {
        return Err(Error::BadArgument("no winch profile is running".into()));
    };
    let period = running.trigger.period();
    let watched = running.watches_relatives();
    // (Read as sampling is stopped: stopping it, the last look at the
    // processes working for this one and building the profile are not the
    // profiled code's work either.)
    let usage_end = crate::entries::rs_resource_usage().ok();
    let finished = running.stop();
    let (profile, stats) = build::build(&finished, event, period);
    let relatives = watched.then(|| relatives_value(&finished.relatives));
    session::recycle(finished);
    let mut out = to_r(&profile, &stats);
    if let RValue::List(parts) = &mut out {
        if let Some(r) = relatives {
            parts.push(("relatives", r));
        }
        if let (Some(a), Some(b)) = (usage_start, usage_end) {
            parts.push(("usage_start", a));
            parts.push(("usage_end", b));
        }
    }
    Ok(out)
}

/// The R value of the processes a profile watched (see `rs_profile_stop`).
fn relatives_value(seen: &[winch_core::outside::Seen]) -> RValue {
    let relation = crate::outside::relation_name;
    RValue::List(vec![
        ("pid", RValue::Int(seen.iter().map(|s| Some(s.now.relative.pid)).collect())),
        ("parent", RValue::Int(seen.iter().map(|s| Some(s.now.relative.parent)).collect())),
        (
            "relation",
            RValue::Str(seen.iter().map(|s| Some(relation(s.now.relative.relation).to_string())).collect()),
        ),
        ("command", RValue::Str(seen.iter().map(|s| Some(s.now.command.clone())).collect())),
        ("cpu", RValue::Dbl(seen.iter().map(|s| s.cpu_s()).collect())),
        ("ended", RValue::Lgl(seen.iter().map(|s| s.ended).collect())),
        ("why", RValue::Str(seen.iter().map(|s| s.why.clone()).collect())),
    ])
}

/// Stops the session and throws its samples away, without building a
/// profile (no symbolization, no debug files, no network): for a session
/// abandoned by an interrupt, left running, or stopped because winch is
/// unloaded. TRUE if one was running.
pub fn rs_profile_discard() -> Result<RValue> {
    let Some(Current { running, .. }) = current().take() else {
        return Ok(false.into());
    };
    session::recycle(running.stop());
    Ok(true.into())
}

/// Learns which native function of R runs an AST loop of `kind` ("for",
/// "while", "repeat"), called from inside such a loop (see
/// `winch_core::joint::learn_loop`).
pub fn rs_profile_learn_loop(kind: Arg) -> Result<RValue> {
    let kind = match kind.string()?.as_str() {
        "for" => LoopKind::For,
        "while" => LoopKind::While,
        "repeat" => LoopKind::Repeat,
        _ => return Err(Error::BadArgument("`kind` must be \"for\", \"while\" or \"repeat\"".into())),
    };
    joint::learn_loop(rstate::facts()?, kind)?;
    Ok(true.into()) // NULL would read as "out of memory"
}

/// Learns where R's byte-code interpreter loop keeps its program counter,
/// called from byte code, and R's instructions from `opcodes`: a list of a
/// body whose code is every opcode in order, the operand counts, and the
/// opcodes of `GOTO` and `STEPFOR` (NULL: not known).
pub fn rs_profile_learn_bc(opcodes: Arg) -> Result<RValue> {
    let opcodes = if !learn::ops_known() && !opcodes.is_null() {
        let parts = opcodes.elements()?;
        let addrs = opcodes.element_addrs()?;
        let (Some(&body), [_, argc, goto, stepfor]) = (addrs.first(), parts.as_slice()) else {
            return Err(Error::BadArgument("`opcodes` must be a list of four".into()));
        };
        let argc: Vec<i32> = argc.ints()?.into_iter().map(|a| a.unwrap_or(-1)).collect();
        Some(learn::Opcodes { body, argc, goto: goto.int()?, stepfor: stepfor.int()? })
    } else {
        None
    };
    joint::learn_bc(rstate::facts()?, opcodes)?;
    Ok(true.into())
}

/// Whether AST loops can be named by kind.
pub fn rs_profile_loops_known() -> Result<RValue> {
    Ok(learn::loops_known().into())
}

/// The cost of taking one sample of the caller's stack, as the signal
/// handler takes it, measured `n` times in a row (no signal, no timer):
/// nanoseconds per sample (median, 99th percentile) and the entries a
/// sample had. For bench/profile.R.
pub fn rs_profile_sample_cost(n: Arg, thrash: Arg) -> Result<RValue> {
    if !rstate::on_main_thread() {
        return Err(Error::WrongThread);
    }
    let n = n.int()?.clamp(1, 1_000_000) as usize;
    let facts = RFacts::of_this_process(
        *rstate::facts()?,
        Options { with_loops: true, ..Options::default() },
        false,
    )?;
    let c = session::sample_cost(&facts, n, thrash.int()?.max(0) as usize);
    Ok(RValue::List(vec![
        ("median_ns", c.median_ns.into()),
        ("p99_ns", c.p99_ns.into()),
        ("entries", (c.entries as i32).into()),
    ]))
}

fn hex(x: u64) -> Option<String> {
    Some(format!("{x:#x}"))
}

fn index(x: Option<usize>) -> Option<i32> {
    x.and_then(|k| i32::try_from(k + 1).ok())
}

/// The R form of a profile (R/profile.R turns the tables into data
/// frames): see `profile_form.rs`.
pub(crate) fn to_form(p: &Profile, s: &Stats) -> ProfileForm {
    let f = &p.functions;
    let l = &p.locations;
    let all: Vec<(usize, &Line)> =
        l.iter().enumerate().flat_map(|(i, l)| l.lines.iter().map(move |x| (i, x))).collect();
    // A memory profile's values per stack.
    let bytes = |f: fn(&Bytes) -> u64| {
        (p.event == Event::Alloc)
            .then(|| p.stacks.iter().map(|s| s.bytes.as_ref().map_or(0.0, |b| f(b) as f64)).collect())
    };
    let m = &p.modules;
    let t = &p.threads;
    // A memory profile's interval is the mean bytes between samples.
    let (interval, sample_bytes) = match p.event {
        Event::Alloc => (f64::NAN, p.period as f64),
        _ => (p.period as f64 / 1e9, f64::NAN),
    };
    ProfileForm {
        event: p.event.name().to_string(),
        interval: NumberOrNan(interval),
        sample_bytes: NumberOrNan(sample_bytes),
        start: p.start_unix_ns as f64 / 1e9,
        duration: p.duration_ns as f64 / 1e9,
        functions: Functions {
            name: f.iter().map(|f| Some(f.name.clone())).collect(),
            label: f.iter().map(|f| Some(f.label.clone())).collect(),
            kind: f.iter().map(|f| Some(f.kind.name().to_string())).collect(),
            module: f.iter().map(|f| index(f.module)).collect(),
            file: f.iter().map(|f| index(f.file)).collect(),
        },
        locations: Locations {
            module: l.iter().map(|l| index(l.module)).collect(),
            address: l.iter().map(|l| hex(l.address)).collect(),
        },
        lines: Lines {
            location: all.iter().map(|(i, _)| index(Some(*i))).collect(),
            function: all.iter().map(|(_, x)| index(Some(x.function))).collect(),
            file: all.iter().map(|(_, x)| index(x.file)).collect(),
            line: all.iter().map(|(_, x)| x.line.and_then(|v| i32::try_from(v).ok())).collect(),
        },
        stacks: Stacks {
            count: p.stacks.iter().map(|s| s.count as f64).collect(),
            thread: p.stacks.iter().map(|s| index(Some(s.thread))).collect(),
            process: Some(p.stacks.iter().map(|s| index(Some(s.process))).collect()),
            locations: p
                .stacks
                .iter()
                .map(|s| s.locations.iter().map(|&k| index(Some(k))).collect())
                .collect(),
            alloc_bytes: bytes(|b| b.alloc_bytes),
            alloc_count: bytes(|b| b.alloc_count),
            inuse_bytes: bytes(|b| b.inuse_bytes),
            inuse_count: bytes(|b| b.inuse_count),
        },
        threads: Threads {
            number: t.iter().map(|t| Some(t.number as i32)).collect(),
            tid: t.iter().map(|t| t.tid as f64).collect(),
            name: t.iter().map(|t| Some(t.name.clone())).collect(),
            cpu: t.iter().map(|t| t.cpu_ns.map_or(f64::NAN, |c| c as f64 / 1e9)).collect(),
        },
        processes: Some(Processes {
            number: p.processes.iter().map(|x| Some(x.number as i32)).collect(),
            pid: p.processes.iter().map(|x| x.pid as f64).collect(),
            command: p.processes.iter().map(|x| Some(x.command.clone())).collect(),
            host: p.processes.iter().map(|x| Some(x.host.clone())).collect(),
            cpu: p.processes.iter().map(|x| x.cpu_ns.map_or(f64::NAN, |c| c as f64 / 1e9)).collect(),
            samples: p.processes.iter().map(|x| x.samples as f64).collect(),
        }),
        files: p.files.iter().map(|f| Some(f.clone())).collect(),
        modules: Modules {
            path: m.iter().map(|m| Some(m.path.clone())).collect(),
            build_id: m.iter().map(|m| m.build_id.clone()).collect(),
            start: m.iter().map(|m| hex(m.start)).collect(),
            limit: m.iter().map(|m| hex(m.limit)).collect(),
            offset: m.iter().map(|m| hex(m.offset)).collect(),
        },
        stats: Unread(Some(form::Stats {
            samples: s.samples as f64,
            intervals: s.weight as f64,
            truncated: s.truncated as f64,
            dropped: s.dropped as f64,
            outside: s.outside as f64,
            distinct_stacks: s.distinct_stacks as f64,
            handler_total: s.handler_total_ns as f64 / 1e9,
            handler_median: s.handler_median_ns as f64 / 1e9,
            handler_p99: s.handler_p99_ns as f64 / 1e9,
            labels_full: s.labels_full,
            memory: s.stack_bytes as f64,
            thread_joined: s.thread_joined as f64,
            thread_alone: s.thread_alone as f64,
            thread_dropped: s.thread_dropped as f64,
            references: s.references as f64,
            forked: s.forked as f64,
            collector_cpu: s.collector_cpu_ns.map_or(f64::NAN, |c| c as f64 / 1e9),
            worker_stops: s.worker_stops as f64,
            worker_stop_total: s.worker_stop_total_ns as f64 / 1e9,
            worker_stop_median: s.worker_stop_median_ns as f64 / 1e9,
            worker_stop_p99: s.worker_stop_p99_ns as f64 / 1e9,
            allocations: s.allocations as f64,
            sampled_allocations: s.sampled_allocations as f64,
            untracked: s.untracked as f64,
        })),
        missed: Unread(None),
        note: Unread(None),
    }
}

/// The R value of a profile's R form.
pub(crate) fn to_r(p: &Profile, s: &Stats) -> RValue {
    to_form(p, s).into_r().unwrap_or(RValue::Null)
}

/// Checks a profile (its R form) as the writers would read it: an error
/// says what is wrong.
pub fn rs_profile_check(parts: Arg) -> Result<RValue> {
    read::from_r(&parts)?;
    Ok(true.into()) // NULL would read as "out of memory"
}

/// Writes a profile to `path`: `format` "rprof" (with `lines`) or "pprof".
pub fn rs_profile_write(parts: Arg, path: Arg, format: Arg, lines: Arg) -> Result<RValue> {
    let p = read::from_r(&parts)?;
    let path = path.string()?;
    let io = |e: std::io::Error| Error::Io(format!("cannot write {path}: {e}"));
    match format.string()?.as_str() {
        "rprof" if p.event == Event::Alloc => {
            return Err(Error::BadArgument(
                "Rprof's format holds samples of time, not bytes: write a memory profile with winch_write_pprof() or winch_write_collapsed()".into(),
            ))
        }
        // A regular file or a new one only: nothing that could block (a
        // FIFO) or never end (a device); see winch_core::files.
        "rprof" => {
            let mut file = files::create_output(Path::new(&path))?;
            winch_core::profile::rprof::write(&p, lines.flag()?, &mut file).map_err(io)?;
        }
        "pprof" => {
            let mut file = files::create_output(Path::new(&path))?;
            file.write_all(&winch_core::profile::pprof::encode(&p)).map_err(io)?;
        }
        _ => return Err(Error::BadArgument("`format` must be \"rprof\" or \"pprof\"".into())),
    }
    Ok(true.into()) // NULL would read as "out of memory"
}
