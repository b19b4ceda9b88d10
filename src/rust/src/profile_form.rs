//! The R form of a profile, written once: the parts of the list the
//! profiler returns (`rs_profile_stop()`, `rs_record_stop()`), which
//! R/profile.R makes a `winch_profile` of, and which the writers read back
//! (`rs_profile_write()`, from `profile_parts()` in R/profile.R). Each part
//! is a field of [`ProfileForm`] (or of one of its tables) with its R type
//! and what it holds: `profile.rs` fills the form to make a profile's R
//! form and reads the form back, and `rs_profile_form()` describes it, for
//! the tests to check that `profile_parts()` follows it.

// (Where the profiler does not exist, only the description is used.)
#![cfg_attr(not(all(target_arch = "x86_64", target_os = "linux")), allow(dead_code))]

use crate::args::Arg;
use crate::value::RValue;
use winch_core::error::Result;

/// Where a part is, in the profile's list.
#[derive(Clone, Copy)]
pub enum At {
    /// The list itself.
    Root,
    /// Its part `name`.
    Part(&'static str),
    /// Column `column` of its table `table`.
    Column { table: &'static str, column: &'static str },
}

impl At {
    /// Where part `name` of the list at `self` is.
    fn child(self, name: &'static str) -> At {
        match self {
            At::Root => At::Part(name),
            At::Part(table) => At::Column { table, column: name },
            // The form has no tables inside tables (a column that were one
            // would be read as if its columns were in "?").
            At::Column { .. } => At::Column { table: "?", column: name },
        }
    }

    /// The part's path, as R code would write it (`table$column`).
    fn path(self) -> String {
        match self {
            At::Root => String::new(),
            At::Part(name) => name.to_string(),
            At::Column { table, column } => format!("{table}${column}"),
        }
    }

    /// The part at `self` of `root`, if there is one.
    fn find(self, root: &Arg) -> Result<Option<Arg>> {
        match self {
            At::Root => Ok(Some(*root)),
            At::Part(name) => root.find(name),
            At::Column { table, column } => root.find_column(table, column),
        }
    }

    /// The part at `self` of `root`; an error naming it if it is missing.
    fn get(self, root: &Arg) -> Result<Arg> {
        self.find(root)?.ok_or_else(|| root.missing(self.path()))
    }
}

/// One line of the form's description.
pub struct Description {
    /// `part` or `table$column`.
    pub path: String,
    /// As `typeof()` names it.
    pub r_type: &'static str,
    /// Whether it may be absent.
    pub optional: bool,
    /// Whether the writers read it back (else it is only made).
    pub read_back: bool,
    pub holds: &'static str,
}

/// A part of the form: how it is made in R and read back.
pub trait Part: Sized {
    /// Its R type, as `typeof()` names it.
    const R_TYPE: &'static str;
    /// Whether it may be absent.
    const OPTIONAL: bool = false;
    /// Whether the writers read it back.
    const READ_BACK: bool = true;

    /// Its R value (None: left out of the list).
    fn into_r(self) -> Option<RValue>;

    /// Reads it at `at` of `root`.
    fn read(root: &Arg, at: At) -> Result<Self>;

    /// Describes its own parts (a table's columns) at `at`.
    fn describe_parts(_at: At, _out: &mut Vec<Description>) {}
}

/// One string (not NA).
impl Part for String {
    const R_TYPE: &'static str = "character";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::from(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.string()
    }
}

/// One number (not NA).
impl Part for f64 {
    const R_TYPE: &'static str = "double";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::from(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.number()
    }
}

/// One number, where NA or NaN stand for "not this kind of profile's".
pub struct NumberOrNan(pub f64);

impl Part for NumberOrNan {
    const R_TYPE: &'static str = "double";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::from(self.0))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.number_or_nan().map(NumberOrNan)
    }
}

/// `TRUE` or `FALSE`.
impl Part for bool {
    const R_TYPE: &'static str = "logical";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::from(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.flag()
    }
}

/// A character vector (NA as None).
impl Part for Vec<Option<String>> {
    const R_TYPE: &'static str = "character";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::Str(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.strings()
    }
}

/// An integer vector (NA as None).
impl Part for Vec<Option<i32>> {
    const R_TYPE: &'static str = "integer";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::Int(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.ints()
    }
}

/// A double vector.
impl Part for Vec<f64> {
    const R_TYPE: &'static str = "double";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::Dbl(self))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.doubles()
    }
}

/// A list of integer vectors.
impl Part for Vec<Vec<Option<i32>>> {
    const R_TYPE: &'static str = "list";
    fn into_r(self) -> Option<RValue> {
        Some(RValue::Unnamed(self.into_iter().map(RValue::Int).collect()))
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        at.get(root)?.elements()?.iter().map(|e| e.ints()).collect()
    }
}

/// A part that may be absent.
impl<T: Part> Part for Option<T> {
    const R_TYPE: &'static str = T::R_TYPE;
    const OPTIONAL: bool = true;
    fn into_r(self) -> Option<RValue> {
        self.and_then(T::into_r)
    }
    fn read(root: &Arg, at: At) -> Result<Self> {
        match at.find(root)? {
            Some(_) => T::read(root, at).map(Some),
            None => Ok(None),
        }
    }
    fn describe_parts(at: At, out: &mut Vec<Description>) {
        T::describe_parts(at, out)
    }
}

/// A part made for R but not read back (the writers need not have it).
pub struct Unread<T>(pub Option<T>);

impl<T: Part> Part for Unread<T> {
    const R_TYPE: &'static str = T::R_TYPE;
    const OPTIONAL: bool = true;
    const READ_BACK: bool = false;
    fn into_r(self) -> Option<RValue> {
        self.0.and_then(T::into_r)
    }
    fn read(_: &Arg, _: At) -> Result<Self> {
        Ok(Unread(None))
    }
    fn describe_parts(at: At, out: &mut Vec<Description>) {
        // Nothing in it is read back either.
        let first = out.len();
        T::describe_parts(at, out);
        out[first..].iter_mut().for_each(|d| d.read_back = false);
    }
}

/// Defines a struct whose fields are the parts of a named list, in the
/// list's order (each field's doc comment says what it holds), and makes
/// it a [`Part`].
macro_rules! r_list {
    (
        $(#[doc = $doc:literal])*
        pub struct $Name:ident {
            $( $(#[doc = $fdoc:literal])* $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[doc = $doc])*
        pub struct $Name {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        impl Part for $Name {
            const R_TYPE: &'static str = "list";
            fn into_r(self) -> Option<RValue> {
                let mut parts = Vec::new();
                $(
                    if let Some(v) = Part::into_r(self.$field) {
                        parts.push((stringify!($field), v));
                    }
                )*
                Some(RValue::List(parts))
            }
            fn read(root: &Arg, at: At) -> Result<Self> {
                // (In the list's order: the first part missing or wrong is
                // the one an error names.)
                Ok($Name { $( $field: <$ty as Part>::read(root, at.child(stringify!($field)))?, )* })
            }
            fn describe_parts(at: At, out: &mut Vec<Description>) {
                $(
                    let here = at.child(stringify!($field));
                    out.push(Description {
                        path: here.path(),
                        r_type: <$ty as Part>::R_TYPE,
                        optional: <$ty as Part>::OPTIONAL,
                        read_back: <$ty as Part>::READ_BACK,
                        holds: concat!($($fdoc),*).trim_ascii(),
                    });
                    <$ty as Part>::describe_parts(here, out);
                )*
            }
        }
    };
}

r_list! {
    /// A profile's R form (indices 1-based, addresses as hex strings).
    pub struct ProfileForm {
        /// What was sampled: "cpu", "elapsed" or "alloc".
        event: String,
        /// Seconds between samples (NaN in a memory profile).
        interval: NumberOrNan,
        /// A memory profile's mean bytes between samples (NaN in others).
        sample_bytes: NumberOrNan,
        /// When sampling started, in seconds since 1970.
        start: f64,
        /// How long it ran, in seconds.
        duration: f64,
        /// The functions of the stacks' frames.
        functions: Functions,
        /// The addresses of the stacks' frames.
        locations: Locations,
        /// The calls at each location, innermost first.
        lines: Lines,
        /// The distinct stacks and their samples.
        stacks: Stacks,
        /// The threads sampled.
        threads: Threads,
        /// The processes sampled (absent in profiles made before processes
        /// were: the profiled process alone).
        processes: Option<Processes>,
        /// The source files.
        files: Vec<Option<String>>,
        /// The modules the locations are in.
        modules: Modules,
        /// Figures about the session.
        stats: Unread<Stats>,
        /// A recording's ticks that read nothing.
        missed: Unread<f64>,
        /// A recording's note on why R's frames are missing (or NA).
        note: Unread<Vec<Option<String>>>,
    }
}

r_list! {
    /// The functions of a profile.
    pub struct Functions {
        /// Its name as pprof shows it.
        name: Vec<Option<String>>,
        /// Its label as Rprof writes it.
        label: Vec<Option<String>>,
        /// What kind of frame runs it.
        kind: Vec<Option<String>>,
        /// Its module.
        module: Vec<Option<i32>>,
        /// Its source file.
        file: Vec<Option<i32>>,
    }
}

r_list! {
    /// The locations of a profile's frames.
    pub struct Locations {
        /// The module.
        module: Vec<Option<i32>>,
        /// The address.
        address: Vec<Option<String>>,
    }
}

r_list! {
    /// The calls at each location (several where calls were inlined).
    pub struct Lines {
        /// The location.
        location: Vec<Option<i32>>,
        /// The function called.
        function: Vec<Option<i32>>,
        /// The source file.
        file: Vec<Option<i32>>,
        /// The source line.
        line: Vec<Option<i32>>,
    }
}

r_list! {
    /// The distinct stacks of a profile.
    pub struct Stacks {
        /// The samples of the stack.
        count: Vec<f64>,
        /// The thread it was sampled on.
        thread: Vec<Option<i32>>,
        /// The process it was sampled in (1: the profiled one; absent:
        /// that one alone).
        process: Option<Vec<Option<i32>>>,
        /// Its locations, innermost first.
        locations: Vec<Vec<Option<i32>>>,
        /// Memory profiles: the bytes allocated.
        alloc_bytes: Option<Vec<f64>>,
        /// Memory profiles: the allocations.
        alloc_count: Option<Vec<f64>>,
        /// Memory profiles: the bytes still in use at the end.
        inuse_bytes: Option<Vec<f64>>,
        /// Memory profiles: the allocations still in use at the end.
        inuse_count: Option<Vec<f64>>,
    }
}

r_list! {
    /// The threads of a profile.
    pub struct Threads {
        /// 0 for R's main thread, others from 1 by their first sample.
        number: Vec<Option<i32>>,
        /// The kernel's thread id (0: unknown).
        tid: Vec<f64>,
        /// The thread's name.
        name: Vec<Option<String>>,
        /// CPU seconds it used while the profile ran (NaN: not measured).
        cpu: Vec<f64>,
    }
}

r_list! {
    /// The processes of a profile.
    pub struct Processes {
        /// 0 for the profiled process, others from 1 by their first sample.
        number: Vec<Option<i32>>,
        /// The process id.
        pid: Vec<f64>,
        /// Its command line.
        command: Vec<Option<String>>,
        /// The machine it ran on.
        host: Vec<Option<String>>,
        /// CPU seconds it used while the profile ran (NaN: not measured).
        cpu: Vec<f64>,
        /// The samples taken of it.
        samples: Vec<f64>,
    }
}

r_list! {
    /// A profile's modules.
    pub struct Modules {
        /// The file.
        path: Vec<Option<String>>,
        /// Its build-id (NA: none).
        build_id: Vec<Option<String>>,
        /// Where it was mapped.
        start: Vec<Option<String>>,
        /// The end of its mapping.
        limit: Vec<Option<String>>,
        /// The file offset mapped at `start`.
        offset: Vec<Option<String>>,
    }
}

r_list! {
    /// Figures about a profiling session.
    pub struct Stats {
        /// Handler runs.
        samples: f64,
        /// The timer intervals they stand for.
        intervals: f64,
        /// Samples whose native stack or context chain was not read whole.
        truncated: f64,
        /// Intervals lost because the ring was full.
        dropped: f64,
        /// Intervals whose sample was the profiler's own, left out.
        outside: f64,
        /// Distinct stacks.
        distinct_stacks: f64,
        /// Seconds spent in the signal handler.
        handler_total: f64,
        /// The handler's median time per sample, in seconds.
        handler_median: f64,
        /// The handler's 99th percentile, in seconds.
        handler_p99: f64,
        /// Whether some frame's R label did not fit in the label table.
        labels_full: bool,
        /// Heap bytes held by the collected stacks at the end.
        memory: f64,
        /// Other threads' samples shown under R's main thread's stack.
        thread_joined: f64,
        /// Other threads' samples shown at the root.
        thread_alone: f64,
        /// Other threads' samples lost (no free sampling slot).
        thread_dropped: f64,
        /// Samples of R's main thread taken for other threads'.
        references: f64,
        /// `fork()`s the process made while the profile ran.
        forked: f64,
        /// Seconds of CPU time the profiler's collector thread used while
        /// sampling ran (its own cost: not the profiled code's; NaN from
        /// outside, where there is none in the process).
        collector_cpu: f64,
        /// Samples of worker processes read from outside (each stops its
        /// worker for a moment: see `capture::traced`).
        worker_stops: f64,
        /// Seconds those samples kept their workers stopped, in all.
        worker_stop_total: f64,
        /// Their median, in seconds.
        worker_stop_median: f64,
        /// Their 99th percentile, in seconds.
        worker_stop_p99: f64,
        /// A memory profile's allocations seen.
        allocations: f64,
        /// A memory profile's allocations sampled.
        sampled_allocations: f64,
        /// Sampled blocks whose freeing could not be followed.
        untracked: f64,
    }
}

/// The description of the form: each part's path, R type, whether it may
/// be absent and is read back, and what it holds (for the tests).
pub fn rs_profile_form() -> Result<RValue> {
    let mut d = Vec::new();
    ProfileForm::describe_parts(At::Root, &mut d);
    Ok(RValue::List(vec![
        ("path", RValue::Str(d.iter().map(|x| Some(x.path.clone())).collect())),
        ("type", RValue::Str(d.iter().map(|x| Some(x.r_type.to_string())).collect())),
        ("optional", RValue::Lgl(d.iter().map(|x| x.optional).collect())),
        ("read_back", RValue::Lgl(d.iter().map(|x| x.read_back).collect())),
        ("holds", RValue::Str(d.iter().map(|x| Some(x.holds.to_string())).collect())),
    ]))
}
