//! The profiler's entry points: start and stop a session, and write a
//! profile (from its R form) in Rprof's format or as pprof.

use crate::args::Arg;
use crate::joint;
use crate::rapi;
use crate::rstate;
use crate::value::RValue;
use std::sync::{Mutex, OnceLock};
use winch_core::error::{Error, Result};
use winch_core::profile::bcode::{BcSymbols, OpTable};
use winch_core::profile::build::{self, Stats};
use winch_core::profile::model::{Event, FrameKind, Function, Line, Location, Module, Profile, Stack};
use winch_core::profile::rheap::{self, LiveHeap, Symbols};
use winch_core::profile::sampler::{BcFacts, LineFacts, LoopStarts, RFacts, Ranges, Region};
use winch_core::profile::session::{self, Clock, Running};

/// The running session, with what `stop` needs to know.
struct Current {
    running: Running,
    event: Event,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);

/// Loop functions learnt by `rs_profile_learn_loop`.
static LOOPS: Mutex<Option<LoopStarts>> = Mutex::new(None);
/// Interpreter loop frames learnt by `rs_profile_learn_bc`.
static BC_FRAMES: Mutex<Option<[(usize, usize); 2]>> = Mutex::new(None);
/// R's instructions, learnt by `rs_profile_learn_bc` (once: they are fixed
/// for the life of the process).
static OPS: OnceLock<OpTable> = OnceLock::new();

fn symbols() -> Symbols {
    // SAFETY: reading exported symbol pointers of libR (set at start-up).
    unsafe {
        Symbols {
            double_colon: rapi::R_DoubleColonSymbol as usize,
            triple_colon: rapi::R_TripleColonSymbol as usize,
            dollar: rapi::R_DollarSymbol as usize,
            bracket2: rapi::R_Bracket2Symbol as usize,
        }
    }
}

/// What the handler needs to know about R.
fn facts(
    with_loops: bool,
    region: Region,
    loop_symbols: Option<[usize; 3]>,
    file_symbols: Option<(usize, usize)>,
) -> Result<RFacts> {
    let layout = rstate::context_layout()?;
    let stack = winch_core::stack::thread_stack_bounds()
        .ok_or_else(|| Error::Unavailable("the bounds of R's stack are unknown".into()))?;
    let mut data = [(0, 0); 4];
    for (slot, range) in data.iter_mut().zip(rstate::libr_data_ranges()) {
        *slot = range;
    }
    Ok(RFacts {
        layout,
        global_context: std::ptr::addr_of!(rapi::R_GlobalContext) as usize,
        ranges: Ranges { stack, node_stack: rstate::node_stack_range().unwrap_or((0, 0)), data },
        symbols: symbols(),
        loops: *LOOPS.lock().unwrap_or_else(|e| e.into_inner()),
        bc: match (loop_symbols, *BC_FRAMES.lock().unwrap_or_else(|e| e.into_inner())) {
            (Some([for_, while_, repeat]), Some(loop_frames)) => Some(BcFacts {
                // SAFETY: reading an exported symbol pointer of libR.
                syms: BcSymbols { for_, while_, repeat, class: unsafe { rapi::R_ClassSymbol } as usize },
                loop_frames,
                ops: OPS.get(),
            }),
            _ => None,
        },
        // SAFETY: reading exported variables of libR (set at start-up).
        lines: file_symbols.map(|(srcfile_sym, filename_sym)| unsafe {
            LineFacts {
                srcref_var: std::ptr::addr_of!(rapi::R_Srcref) as usize,
                in_bc: rapi::R_InBCInterpreter as usize,
                nil: rapi::R_NilValue as usize,
                srcfile_sym,
                filename_sym,
            }
        }),
        with_loops,
        region,
    })
}

/// Checks, before sampling, that what the handler will read is read right:
/// the context chain against `sys.frames()`/`sys.calls()`, and the layout
/// of R objects against labels R computed (`probes`: calls, `expected`:
/// their labels as `Rprof()` writes them).
fn check(frames: &Arg, calls: &Arg, probes: &Arg, expected: &Arg) -> Result<()> {
    joint::validate_chain(&frames.element_addrs()?, &calls.element_addrs()?)?;
    let probes = probes.element_addrs()?;
    let expected = expected.strings()?;
    let syms = symbols();
    for (call, want) in probes.iter().zip(&expected) {
        let mut buf = rheap::Buf::default();
        let head = match rheap::call_head(&LiveHeap, *call) {
            Some(rheap::Head::Symbol(s)) | Some(rheap::Head::Other(s)) => s,
            None => return Err(Error::Inconsistent("a probe call could not be read".into())),
        };
        rheap::label(&LiveHeap, &syms, head, &mut buf);
        if Some(String::from_utf8_lossy(buf.as_bytes()).as_ref()) != want.as_deref() {
            return Err(Error::Inconsistent(format!(
                "R objects are laid out differently than winch expects (label {:?}, expected {:?})",
                String::from_utf8_lossy(buf.as_bytes()),
                want
            )));
        }
    }
    Ok(())
}

/// Starts a session.
#[allow(clippy::too_many_arguments)]
pub fn rs_profile_start(
    interval: Arg,
    event: Arg,
    loops: Arg,
    region: Arg,
    lines: Arg,
    symbols: Arg,
    frames: Arg,
    calls: Arg,
    probes: Arg,
    expected: Arg,
) -> Result<RValue> {
    if !rstate::on_main_thread() {
        return Err(Error::WrongThread);
    }
    let interval_ns = (interval.number()? * 1e9).round();
    if !(interval_ns.is_finite() && interval_ns > 0.0) {
        return Err(Error::BadArgument("`interval` must be a positive number of seconds".into()));
    }
    let (clock, event) = match event.string()?.as_str() {
        "cpu" => (Clock::Cpu, Event::Cpu),
        "elapsed" => (Clock::Elapsed, Event::Elapsed),
        _ => return Err(Error::BadArgument("`event` must be \"cpu\" or \"elapsed\"".into())),
    };
    let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    if current.is_some() || session::active() {
        return Err(Error::Busy("a winch profile is already running".into()));
    }
    check(&frames, &calls, &probes, &expected)?;
    let region = read_region(&region)?;
    // `for`, `while`, `repeat`, `srcfile` and `filename`.
    let (syms, files) = match symbols.element_addrs()?.as_slice() {
        &[f, w, r, s, n] => (Some([f, w, r]), Some((s, n))),
        _ => return Err(Error::BadArgument("`symbols` must be five symbols".into())),
    };
    let facts = facts(loops.flag()?, region, syms, if lines.flag()? { files } else { None })?;
    let running = session::start(facts, rstate::libr_addr(), clock, interval_ns as u64)?;
    *current = Some(Current { running, event });
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

/// Whether a session is running.
pub fn rs_profile_active() -> Result<RValue> {
    Ok(CURRENT.lock().unwrap_or_else(|e| e.into_inner()).is_some().into())
}

/// Stops the session and returns the profile (its R form).
pub fn rs_profile_stop() -> Result<RValue> {
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(Current { running, event }) = current else {
        return Err(Error::BadArgument("no winch profile is running".into()));
    };
    let interval_ns = running.interval_ns;
    let finished = running.stop();
    let (profile, stats) = build::build(&finished, event, interval_ns);
    session::recycle(finished.snapshot);
    Ok(to_r(&profile, &stats))
}

/// Loop functions seen so far (for, while, repeat).
static LEARNT: Mutex<[usize; 3]> = Mutex::new([0; 3]);

/// Learns which native function of R runs an AST loop of `kind` ("for",
/// "while", "repeat"): called from inside such a loop (R/profile.R runs
/// one of each), it finds the frame that holds the loop's record. Once all
/// three are known and distinct, samples name AST loops by kind.
pub fn rs_profile_learn_loop(kind: Arg) -> Result<RValue> {
    let k = match kind.string()?.as_str() {
        "for" => 0,
        "while" => 1,
        "repeat" => 2,
        _ => return Err(Error::BadArgument("`kind` must be \"for\", \"while\" or \"repeat\"".into())),
    };
    let backend = winch_core::unwind::Backend::best()
        .ok_or_else(|| Error::Unavailable("no unwinding backend works here".into()))?;
    let ip = joint::innermost_loop_owner(backend)?;
    let snap = winch_core::profile::walk::Snapshot::take(rstate::libr_addr());
    let start = snap
        .function_start(ip - 1)
        .ok_or_else(|| Error::Inconsistent("a loop's frame has no unwind information".into()))?;
    let mut learnt = LEARNT.lock().unwrap_or_else(|e| e.into_inner());
    learnt[k] = start;
    let [f, w, r] = *learnt;
    if f != 0 && w != 0 && r != 0 {
        if f == w || f == r || w == r {
            return Err(Error::Inconsistent("R's loops did not run in distinct functions".into()));
        }
        *LOOPS.lock().unwrap_or_else(|e| e.into_inner()) = Some(LoopStarts { for_: f, while_: w, repeat: r });
    }
    Ok(true.into()) // NULL would read as "out of memory"
}

/// Learns where R's byte-code interpreter loop keeps its program counter:
/// called from byte code (R/profile.R), it looks at the records made while
/// byte code ran and at the native frames holding their loop slots. And
/// learns R's instructions from `opcodes`: a list of a body whose code is
/// every opcode in order, the operand counts, and the opcodes of `GOTO`
/// and `STEPFOR` (NULL: not known).
pub fn rs_profile_learn_bc(opcodes: Arg) -> Result<RValue> {
    if OPS.get().is_none() && !opcodes.is_null() {
        let parts = opcodes.elements()?;
        let addrs = opcodes.element_addrs()?;
        let (Some(&body), [_, argc, goto, stepfor]) = (addrs.first(), parts.as_slice()) else {
            return Err(Error::BadArgument("`opcodes` must be a list of four".into()));
        };
        let argc: Vec<i32> = argc.ints()?.into_iter().map(|a| a.unwrap_or(-1)).collect();
        let table = OpTable::learn(&LiveHeap, body, &argc, goto.int()?, stepfor.int()?)
            .ok_or_else(|| Error::Inconsistent("R's byte code is not laid out as winch expects".into()))?;
        let _ = OPS.set(table);
    }
    let backend = winch_core::unwind::Backend::best()
        .ok_or_else(|| Error::Unavailable("no unwinding backend works here".into()))?;
    let seen = joint::loop_slots(backend)?;
    let mut learnt: Vec<(usize, usize)> = Vec::new();
    for (start, offset) in seen {
        match learnt.iter().find(|(s, _)| *s == start) {
            Some(&(_, o)) if o != offset => {
                return Err(Error::Inconsistent(
                    "R's interpreter loop keeps its counter at different places".into(),
                ))
            }
            Some(_) => {}
            None => learnt.push((start, offset)),
        }
    }
    if learnt.is_empty() || learnt.len() > 2 {
        return Err(Error::Inconsistent("R's interpreter loop frames could not be told".into()));
    }
    let mut frames = [(0, 0); 2];
    frames[..learnt.len()].copy_from_slice(&learnt);
    *BC_FRAMES.lock().unwrap_or_else(|e| e.into_inner()) = Some(frames);
    Ok(true.into())
}

/// Whether AST loops can be named by kind.
pub fn rs_profile_loops_known() -> Result<RValue> {
    let known = LOOPS.lock().unwrap_or_else(|e| e.into_inner()).is_some()
        && BC_FRAMES.lock().unwrap_or_else(|e| e.into_inner()).is_some()
        && OPS.get().is_some();
    Ok(known.into())
}

/// The cost of taking one sample of the caller's stack, as the signal
/// handler takes it, measured `n` times in a row (no signal, no timer):
/// nanoseconds per sample (median, 99th percentile) and the entries a
/// sample had. For bench/profile.R.
#[inline(never)]
pub fn rs_profile_sample_cost(n: Arg, thrash: Arg) -> Result<RValue> {
    if !rstate::on_main_thread() {
        return Err(Error::WrongThread);
    }
    let n = n.int()?.clamp(1, 1_000_000) as usize;
    let facts = facts(true, Region::All, None, None)?;
    let snap = winch_core::profile::walk::Snapshot::take(rstate::libr_addr());
    let mut scratch = winch_core::profile::sampler::Scratch::default();
    let ring = winch_core::profile::ring::Ring::new(1 << 16);
    let mut buf = Vec::new();
    let mut times = Vec::with_capacity(n);
    let mut frames = 0;
    // Between samples, a workload evicts winch's data from the CPU caches:
    // `thrash` MB written between samples simulates that.
    let mut junk = vec![0u8; (thrash.int()?.max(0) as usize) << 20];
    let now = || {
        // SAFETY: clock_gettime writes into `ts`.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    for k in 0..n {
        for b in junk.iter_mut().step_by(64) {
            *b = b.wrapping_add(k as u8);
        }
        std::hint::black_box(&junk);
        let regs = winch_core::unwind::registers();
        let t0 = now();
        let out = winch_core::profile::sampler::sample(regs, 1, t0, now, &snap, &facts, &mut scratch, &ring);
        times.push(now() - t0);
        frames = out.frames;
        ring.drain(&mut buf, |_| {});
    }
    times.sort_unstable();
    let q = |p: f64| times[((p * n as f64).ceil() as usize).clamp(1, n) - 1] as f64;
    Ok(RValue::List(vec![
        ("median_ns", q(0.5).into()),
        ("p99_ns", q(0.99).into()),
        ("entries", (frames as i32).into()),
    ]))
}

fn hex(x: u64) -> Option<String> {
    Some(format!("{x:#x}"))
}

fn index(x: Option<usize>) -> Option<i32> {
    x.and_then(|k| i32::try_from(k + 1).ok())
}

/// The R form of a profile (R/profile.R turns the tables into data
/// frames): indices 1-based, addresses as hex strings. `from_r()` reads
/// the same fields by the same names.
fn to_r(p: &Profile, s: &Stats) -> RValue {
    let f = &p.functions;
    let functions = RValue::List(vec![
        ("name", RValue::Str(f.iter().map(|f| Some(f.name.clone())).collect())),
        ("label", RValue::Str(f.iter().map(|f| Some(f.label.clone())).collect())),
        ("kind", RValue::Str(f.iter().map(|f| Some(f.kind.name().to_string())).collect())),
        ("module", RValue::Int(f.iter().map(|f| index(f.module)).collect())),
        ("file", RValue::Int(f.iter().map(|f| index(f.file)).collect())),
    ]);
    let l = &p.locations;
    let locations = RValue::List(vec![
        ("module", RValue::Int(l.iter().map(|l| index(l.module)).collect())),
        ("address", RValue::Str(l.iter().map(|l| hex(l.address)).collect())),
    ]);
    let all: Vec<(usize, &Line)> =
        l.iter().enumerate().flat_map(|(i, l)| l.lines.iter().map(move |x| (i, x))).collect();
    let lines = RValue::List(vec![
        ("location", RValue::Int(all.iter().map(|(i, _)| index(Some(*i))).collect())),
        ("function", RValue::Int(all.iter().map(|(_, x)| index(Some(x.function))).collect())),
        ("file", RValue::Int(all.iter().map(|(_, x)| index(x.file)).collect())),
        ("line", RValue::Int(all.iter().map(|(_, x)| x.line.and_then(|v| i32::try_from(v).ok())).collect())),
    ]);
    let stacks = RValue::List(vec![
        ("count", RValue::Dbl(p.stacks.iter().map(|s| s.count as f64).collect())),
        (
            "locations",
            RValue::Unnamed(
                p.stacks
                    .iter()
                    .map(|s| RValue::Int(s.locations.iter().map(|&k| index(Some(k))).collect()))
                    .collect(),
            ),
        ),
    ]);
    let m = &p.modules;
    let modules = RValue::List(vec![
        ("path", RValue::Str(m.iter().map(|m| Some(m.path.clone())).collect())),
        ("build_id", RValue::Str(m.iter().map(|m| m.build_id.clone()).collect())),
        ("start", RValue::Str(m.iter().map(|m| hex(m.start)).collect())),
        ("limit", RValue::Str(m.iter().map(|m| hex(m.limit)).collect())),
        ("offset", RValue::Str(m.iter().map(|m| hex(m.offset)).collect())),
    ]);
    let stats = RValue::List(vec![
        ("samples", (s.samples as f64).into()),
        ("intervals", (s.weight as f64).into()),
        ("truncated", (s.truncated as f64).into()),
        ("dropped", (s.dropped as f64).into()),
        ("outside", (s.outside as f64).into()),
        ("distinct_stacks", (s.distinct_stacks as f64).into()),
        ("handler_total", (s.handler_total_ns as f64 / 1e9).into()),
        ("handler_median", (s.handler_median_ns as f64 / 1e9).into()),
        ("handler_p99", (s.handler_p99_ns as f64 / 1e9).into()),
        ("labels_full", s.labels_full.into()),
        ("memory", (s.stack_bytes as f64).into()),
    ]);
    RValue::List(vec![
        ("event", p.event.name().to_string().into()),
        ("interval", (p.interval_ns as f64 / 1e9).into()),
        ("start", (p.start_unix_ns as f64 / 1e9).into()),
        ("duration", (p.duration_ns as f64 / 1e9).into()),
        ("functions", functions),
        ("locations", locations),
        ("lines", lines),
        ("stacks", stacks),
        ("files", RValue::Str(p.files.iter().map(|f| Some(f.clone())).collect())),
        ("modules", modules),
        ("stats", stats),
    ])
}

fn parse_hex(s: &Option<String>, what: &str) -> Result<u64> {
    s.as_deref()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| Error::BadArgument(format!("`profile` has an invalid {what}")))
}

fn one_based(v: Option<i32>, n: usize, what: &str) -> Result<Option<usize>> {
    match v {
        None => Ok(None),
        Some(k) if k >= 1 && (k as usize) <= n => Ok(Some(k as usize - 1)),
        Some(_) => Err(Error::BadArgument(format!("`profile` has an out-of-range {what}"))),
    }
}

/// A profile from its R form: the named list of R/profile.R's
/// `profile_parts()`, with the fields `to_r()` makes (tables as lists of
/// columns), each looked up by name, in any order (other fields are
/// ignored); checked.
fn from_r(parts: &Arg) -> Result<Profile> {
    let p = parts.renamed("profile");
    let bad = |what: &str| Error::BadArgument(format!("`profile` has an invalid {what}"));
    let event = match p.field("event")?.string()?.as_str() {
        "cpu" => Event::Cpu,
        "elapsed" => Event::Elapsed,
        _ => return Err(bad("event")),
    };
    let ns = |x: f64| (x * 1e9).round().max(0.0) as u64;
    let (names, labels, kinds) = (
        p.field("functions$name")?.strings()?,
        p.field("functions$label")?.strings()?,
        p.field("functions$kind")?.strings()?,
    );
    let (fmod, ffile) = (p.field("functions$module")?.ints()?, p.field("functions$file")?.ints()?);
    let (lmod, laddr) = (p.field("locations$module")?.ints()?, p.field("locations$address")?.strings()?);
    let (xloc, xfun, xfile, xline) = (
        p.field("lines$location")?.ints()?,
        p.field("lines$function")?.ints()?,
        p.field("lines$file")?.ints()?,
        p.field("lines$line")?.ints()?,
    );
    let (scount, slocs) = (p.field("stacks$count")?.doubles()?, p.field("stacks$locations")?.elements()?);
    let files: Vec<String> =
        p.field("files")?.strings()?.into_iter().map(|f| f.unwrap_or_default()).collect();
    let (mpath, mbuild, mstart, mlimit, moffset) = (
        p.field("modules$path")?.strings()?,
        p.field("modules$build_id")?.strings()?,
        p.field("modules$start")?.strings()?,
        p.field("modules$limit")?.strings()?,
        p.field("modules$offset")?.strings()?,
    );
    let nm = mpath.len();
    let nf = names.len();
    let nl = lmod.len();
    if [labels.len(), kinds.len(), fmod.len(), ffile.len()].iter().any(|&n| n != nf)
        || laddr.len() != nl
        || [xfun.len(), xfile.len(), xline.len()].iter().any(|&n| n != xloc.len())
        || slocs.len() != scount.len()
        || [mbuild.len(), mstart.len(), mlimit.len(), moffset.len()].iter().any(|&n| n != nm)
    {
        return Err(bad("table (columns of different lengths)"));
    }
    let mut functions = Vec::with_capacity(nf);
    for i in 0..nf {
        functions.push(Function {
            name: names[i].clone().ok_or_else(|| bad("function name"))?,
            label: labels[i].clone().ok_or_else(|| bad("function label"))?,
            kind: kinds[i].as_deref().and_then(FrameKind::from_name).ok_or_else(|| bad("function kind"))?,
            module: one_based(fmod[i], nm, "module index")?,
            file: one_based(ffile[i], files.len(), "file index")?,
        });
    }
    let mut locations: Vec<Location> = (0..nl)
        .map(|i| {
            Ok(Location {
                module: one_based(lmod[i], nm, "module index")?,
                address: parse_hex(&laddr[i], "address")?,
                lines: Vec::new(),
            })
        })
        .collect::<Result<_>>()?;
    for k in 0..xloc.len() {
        let loc = one_based(xloc[k], nl, "location index")?.ok_or_else(|| bad("location index"))?;
        let function = one_based(xfun[k], nf, "function index")?.ok_or_else(|| bad("function index"))?;
        let line = xline[k].and_then(|v| u32::try_from(v).ok());
        locations[loc].lines.push(Line {
            function,
            file: one_based(xfile[k], files.len(), "file index")?,
            line,
        });
    }
    let mut stacks = Vec::with_capacity(scount.len());
    for (count, locs) in scount.iter().zip(&slocs) {
        let locations = locs
            .ints()?
            .into_iter()
            .map(|k| one_based(k, nl, "location index")?.ok_or_else(|| bad("location index")))
            .collect::<Result<Vec<usize>>>()?;
        if !count.is_finite() || *count < 0.0 {
            return Err(bad("count"));
        }
        stacks.push(Stack { locations, count: *count as u64 });
    }
    let modules = (0..nm)
        .map(|i| {
            Ok(Module {
                path: mpath[i].clone().ok_or_else(|| bad("module path"))?,
                build_id: mbuild[i].clone(),
                start: parse_hex(&mstart[i], "module start")?,
                limit: parse_hex(&mlimit[i], "module limit")?,
                offset: parse_hex(&moffset[i], "module offset")?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Profile {
        event,
        interval_ns: ns(p.field("interval")?.number()?),
        start_unix_ns: ns(p.field("start")?.number()?),
        duration_ns: ns(p.field("duration")?.number()?),
        functions,
        locations,
        stacks,
        files,
        modules,
    })
}

/// Writes a profile to `path`: `format` "rprof" (with `lines`) or "pprof".
pub fn rs_profile_write(parts: Arg, path: Arg, format: Arg, lines: Arg) -> Result<RValue> {
    let p = from_r(&parts)?;
    let path = path.string()?;
    let io = |e: std::io::Error| Error::BadArgument(format!("cannot write {path}: {e}"));
    match format.string()?.as_str() {
        "rprof" => {
            let mut file = std::fs::File::create(&path).map_err(io)?;
            winch_core::profile::rprof::write(&p, lines.flag()?, &mut file).map_err(io)?;
        }
        "pprof" => std::fs::write(&path, winch_core::profile::pprof::encode(&p)).map_err(io)?,
        _ => return Err(Error::BadArgument("`format` must be \"rprof\" or \"pprof\"".into())),
    }
    Ok(true.into()) // NULL would read as "out of memory"
}
