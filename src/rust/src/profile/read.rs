//! A profile read back from its R form (`profile_form.rs`) and checked
//! whole before anything is written or shown: every part against its
//! meaning, each error naming the part as R writes it (`threads$number`
//! [2]), so that a profile damaged or edited by hand is refused with the
//! reason (the model's own rules are `Profile::check`).

use crate::args::Arg;
use crate::profile_form::{
    At, Functions, Lines, Locations, Modules, Part, Processes, ProfileForm, Stacks, Threads,
};
use winch_core::error::{Error, Result};
use winch_core::profile::model::{
    Bytes, Event, FrameKind, Function, Line, Location, Module, ProcessInfo, Profile, Stack, ThreadInfo,
};

/// The error for a profile whose part `field` (its path in the R form) is
/// wrong: `what` says how.
fn damaged(field: &str, what: impl std::fmt::Display) -> Error {
    Error::BadArgument(format!("`profile` is damaged: `{field}` {what}"))
}

/// Element `k` (0-based) of column `field` is wrong: `what` says how (the
/// element numbered as R numbers it).
fn damaged_at(field: &str, k: usize, what: impl std::fmt::Display) -> Error {
    Error::BadArgument(format!("`profile` is damaged: `{field}` [{}] {what}", k + 1))
}

fn parse_hex(s: &Option<String>, field: &str, k: usize) -> Result<u64> {
    s.as_deref()
        .and_then(|s| u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok())
        .ok_or_else(|| damaged_at(field, k, "is not an address (a hexadecimal string such as \"0x7f00\")"))
}

/// A 1-based index into a table of `n` rows, 0-based (NA: None).
fn one_based(v: Option<i32>, n: usize, field: &str, k: usize) -> Result<Option<usize>> {
    match v {
        None => Ok(None),
        Some(i) if i >= 1 && (i as usize) <= n => Ok(Some(i as usize - 1)),
        Some(i) => Err(damaged_at(field, k, format_args!("is {i}, out of range (1 to {n})"))),
    }
}

/// [`one_based`] where NA is not allowed.
fn one_based_not_na(v: Option<i32>, n: usize, field: &str, k: usize) -> Result<usize> {
    one_based(v, n, field, k)?
        .ok_or_else(|| damaged_at(field, k, format_args!("is NA (an index from 1 to {n})")))
}

/// A number as R prints it: `1e+308`, `Inf`, `NaN` rather than 309 digits
/// or `inf`.
fn shown(x: f64) -> String {
    match x {
        _ if x.is_nan() => "NaN".into(),
        f64::INFINITY => "Inf".into(),
        f64::NEG_INFINITY => "-Inf".into(),
        _ if x != 0.0 && (x.abs() >= 1e15 || x.abs() < 1e-4) => {
            // R's exponent has a sign and at least two digits.
            let e = format!("{x:e}");
            let (m, exp) = e.split_once('e').unwrap_or((&e, "0"));
            let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        _ => format!("{x}"),
    }
}

/// Seconds as nanoseconds: a finite, non-negative number of seconds that
/// nanoseconds can count (about 584 years).
fn nanoseconds(x: f64, field: &str) -> Result<u64> {
    let ns = (x * 1e9).round();
    if !(ns >= 0.0 && ns < u64::MAX as f64) {
        return Err(damaged(
            field,
            format_args!("is {} seconds: it must be a finite number of seconds, not negative", shown(x)),
        ));
    }
    Ok(ns as u64)
}

/// A profile from its R form: the named list of R/profile.R's
/// `profile_parts()`, with the parts of [`ProfileForm`] (tables as lists of
/// columns), each looked up by name, in any order (other fields are
/// ignored); checked.
pub(super) fn from_r(parts: &Arg) -> Result<Profile> {
    let p = parts.renamed("profile");
    let form = ProfileForm::read(&p, At::Root)?;
    let columns_differ = |table: &str| damaged(table, "has columns of different lengths");
    // (`number()`'s error for an NA where a number is needed.)
    let number = |x: f64, name: &str| {
        if x.is_nan() {
            Err(Error::BadArgument(format!("`{name}` must be a single number")))
        } else {
            Ok(x)
        }
    };
    let event = match form.event.as_str() {
        "cpu" => Event::Cpu,
        "elapsed" => Event::Elapsed,
        "alloc" => Event::Alloc,
        other => {
            return Err(damaged(
                "event",
                format_args!("is \"{other}\": it must be \"cpu\", \"elapsed\" or \"alloc\""),
            ))
        }
    };
    let Functions { name: names, label: labels, kind: kinds, module: fmod, file: ffile } = form.functions;
    let Locations { module: lmod, address: laddr } = form.locations;
    let Lines { location: xloc, function: xfun, file: xfile, line: xline } = form.lines;
    let Stacks {
        count: scount,
        thread: sthread,
        process: sprocess,
        locations: slocs,
        alloc_bytes,
        alloc_count,
        inuse_bytes,
        inuse_count,
    } = form.stacks;
    // A memory profile's values per stack.
    let bytes_columns = match event {
        Event::Alloc => {
            let column =
                |c: Option<Vec<f64>>, name: &str| c.ok_or_else(|| p.missing(format!("stacks${name}")));
            Some([
                column(alloc_bytes, "alloc_bytes")?,
                column(alloc_count, "alloc_count")?,
                column(inuse_bytes, "inuse_bytes")?,
                column(inuse_count, "inuse_count")?,
            ])
        }
        _ => None,
    };
    let Threads { number: tnumber, tid: ttid, name: tname, cpu: tcpu } = form.threads;
    let nt = tnumber.len();
    if [ttid.len(), tname.len(), tcpu.len()].iter().any(|&n| n != nt) {
        return Err(columns_differ("threads"));
    }
    if sthread.len() != scount.len() {
        return Err(columns_differ("stacks"));
    }
    let threads = (0..nt)
        .map(|i| {
            let number = tnumber[i].filter(|&n| n >= 0).ok_or_else(|| {
                damaged_at("threads$number", i, "must be a whole number from 0 (R's main thread), not NA")
            })? as u32;
            let tid = ttid[i];
            if !(tid.is_finite() && tid >= 0.0 && tid.fract() == 0.0 && tid <= i64::MAX as f64) {
                return Err(damaged_at(
                    "threads$tid",
                    i,
                    format_args!("is {}: a thread id is a whole number from 0", shown(tid)),
                ));
            }
            let cpu = tcpu[i];
            // (NA: not measured.)
            if !(cpu.is_nan() || (cpu.is_finite() && cpu >= 0.0)) {
                return Err(damaged_at(
                    "threads$cpu",
                    i,
                    format_args!("is {}: CPU seconds are not negative (or NA)", shown(cpu)),
                ));
            }
            Ok(ThreadInfo {
                number,
                tid: tid as i64,
                name: tname[i].clone().unwrap_or_default(),
                cpu_ns: (!cpu.is_nan()).then(|| nanoseconds(cpu, "threads$cpu")).transpose()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let processes = match form.processes {
        Some(p) => read_processes(p)?,
        None => Vec::new(),
    };
    let np = processes.len();
    if sprocess.as_ref().is_some_and(|v| v.len() != scount.len()) {
        return Err(columns_differ("stacks"));
    }
    let files: Vec<String> = form.files.into_iter().map(|f| f.unwrap_or_default()).collect();
    let Modules { path: mpath, build_id: mbuild, start: mstart, limit: mlimit, offset: moffset } =
        form.modules;
    let nm = mpath.len();
    let nf = names.len();
    let nl = lmod.len();
    if [labels.len(), kinds.len(), fmod.len(), ffile.len()].iter().any(|&n| n != nf) {
        return Err(columns_differ("functions"));
    }
    if laddr.len() != nl {
        return Err(columns_differ("locations"));
    }
    if [xfun.len(), xfile.len(), xline.len()].iter().any(|&n| n != xloc.len()) {
        return Err(columns_differ("lines"));
    }
    if slocs.len() != scount.len() {
        return Err(columns_differ("stacks"));
    }
    if [mbuild.len(), mstart.len(), mlimit.len(), moffset.len()].iter().any(|&n| n != nm) {
        return Err(columns_differ("modules"));
    }
    let mut functions = Vec::with_capacity(nf);
    for i in 0..nf {
        let na = |field: &str| damaged_at(field, i, "is NA");
        functions.push(Function {
            name: names[i].clone().ok_or_else(|| na("functions$name"))?,
            label: labels[i].clone().ok_or_else(|| na("functions$label"))?,
            kind: kinds[i].as_deref().and_then(FrameKind::from_name).ok_or_else(|| {
                damaged_at(
                    "functions$kind",
                    i,
                    "is not one of \"r\", \"native\", \"loop\", \"thread\", \"wait\"",
                )
            })?,
            module: one_based(fmod[i], nm, "functions$module", i)?,
            file: one_based(ffile[i], files.len(), "functions$file", i)?,
        });
    }
    let mut locations: Vec<Location> = (0..nl)
        .map(|i| {
            Ok(Location {
                module: one_based(lmod[i], nm, "locations$module", i)?,
                address: parse_hex(&laddr[i], "locations$address", i)?,
                lines: Vec::new(),
            })
        })
        .collect::<Result<_>>()?;
    for k in 0..xloc.len() {
        let loc = one_based_not_na(xloc[k], nl, "lines$location", k)?;
        let function = one_based_not_na(xfun[k], nf, "lines$function", k)?;
        // (NA: no line known.)
        let line = match xline[k] {
            Some(v) if v < 1 => {
                return Err(damaged_at(
                    "lines$line",
                    k,
                    format_args!("is {v}: source lines count from 1 (or are NA)"),
                ))
            }
            v => v.map(|v| v as u32),
        };
        locations[loc].lines.push(Line {
            function,
            file: one_based(xfile[k], files.len(), "lines$file", k)?,
            line,
        });
    }
    if bytes_columns.as_ref().is_some_and(|c| c.iter().any(|v| v.len() != scount.len())) {
        return Err(columns_differ("stacks"));
    }
    let whole =
        |x: f64| (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < u64::MAX as f64).then_some(x as u64);
    let whole_at = |x: f64, field: &str, k: usize| {
        whole(x).ok_or_else(|| {
            damaged_at(field, k, format_args!("is {}: it must be a whole number from 0", shown(x)))
        })
    };
    let mut stacks = Vec::with_capacity(scount.len());
    for (k, ((&count, locs), &thread)) in scount.iter().zip(&slocs).zip(&sthread).enumerate() {
        let locations = locs
            .iter()
            .map(|&i| one_based_not_na(i, nl, "stacks$locations", k))
            .collect::<Result<Vec<usize>>>()?;
        let count = whole_at(count, "stacks$count", k)?;
        let thread = one_based_not_na(thread, nt.max(1), "stacks$thread", k)?;
        let process = match &sprocess {
            Some(v) => one_based_not_na(v[k], np.max(1), "stacks$process", k)?,
            None => 0,
        };
        let bytes = match &bytes_columns {
            Some([a, b, c, d]) => Some(Bytes {
                alloc_bytes: whole_at(a[k], "stacks$alloc_bytes", k)?,
                alloc_count: whole_at(b[k], "stacks$alloc_count", k)?,
                inuse_bytes: whole_at(c[k], "stacks$inuse_bytes", k)?,
                inuse_count: whole_at(d[k], "stacks$inuse_count", k)?,
            }),
            None => None,
        };
        stacks.push(Stack { locations, count, thread, process, bytes });
    }
    let modules = (0..nm)
        .map(|i| {
            Ok(Module {
                path: mpath[i].clone().ok_or_else(|| damaged_at("modules$path", i, "is NA"))?,
                build_id: mbuild[i].clone(),
                start: parse_hex(&mstart[i], "modules$start", i)?,
                limit: parse_hex(&mlimit[i], "modules$limit", i)?,
                offset: parse_hex(&moffset[i], "modules$offset", i)?,
            })
        })
        .collect::<Result<_>>()?;
    let period = match event {
        Event::Alloc => {
            let b = number(form.sample_bytes.0, "sample_bytes")?;
            whole(b).ok_or_else(|| {
                damaged("sample_bytes", format_args!("is {}: it must be a whole number of bytes", shown(b)))
            })?
        }
        _ => {
            let x = number(form.interval.0, "interval")?;
            let range = winch_core::profile::model::INTERVAL_NS;
            nanoseconds(x, "interval").map_err(|_| {
                damaged(
                    "interval",
                    format_args!(
                        "must be between {} and {} seconds, as winch_profile() samples (it is {})",
                        *range.start() as f64 / 1e9,
                        *range.end() as f64 / 1e9,
                        shown(x)
                    ),
                )
            })?
        }
    };
    let profile = Profile {
        event,
        period,
        start_unix_ns: nanoseconds(form.start, "start")?,
        duration_ns: nanoseconds(form.duration, "duration")?,
        functions,
        locations,
        stacks,
        files,
        modules,
        threads,
        processes,
    };
    profile.check().map_err(|why| Error::BadArgument(format!("`profile` is damaged: {why}")))?;
    Ok(profile)
}

/// The processes table of a profile's R form.
fn read_processes(p: Processes) -> Result<Vec<ProcessInfo>> {
    let Processes { number, pid, command, host, cpu, samples } = p;
    let n = number.len();
    if [pid.len(), command.len(), host.len(), cpu.len(), samples.len()].iter().any(|&m| m != n) {
        return Err(damaged("processes", "has columns of different lengths"));
    }
    (0..n)
        .map(|i| {
            let number = number[i].filter(|&x| x >= 0).ok_or_else(|| {
                damaged_at(
                    "processes$number",
                    i,
                    "must be a whole number from 0 (the profiled process), not NA",
                )
            })? as u32;
            let whole = |x: f64| x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= i64::MAX as f64;
            if !whole(pid[i]) {
                return Err(damaged_at(
                    "processes$pid",
                    i,
                    format_args!("is {}: a process id is a whole number from 0", shown(pid[i])),
                ));
            }
            if !whole(samples[i]) {
                return Err(damaged_at(
                    "processes$samples",
                    i,
                    format_args!("is {}: it must be a whole number from 0", shown(samples[i])),
                ));
            }
            let c = cpu[i];
            if !(c.is_nan() || (c.is_finite() && c >= 0.0)) {
                return Err(damaged_at(
                    "processes$cpu",
                    i,
                    format_args!("is {}: CPU seconds are not negative (or NA)", shown(c)),
                ));
            }
            Ok(ProcessInfo {
                number,
                pid: pid[i] as i64,
                command: command[i].clone().unwrap_or_default(),
                host: host[i].clone().unwrap_or_default(),
                cpu_ns: (!c.is_nan()).then(|| nanoseconds(c, "processes$cpu")).transpose()?,
                samples: samples[i] as u64,
            })
        })
        .collect()
}
