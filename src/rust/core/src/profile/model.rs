//! A finished profile as plain data: what the writers (Rprof's format,
//! pprof) and the R object are made from.
//!
//! The model is pprof's: a sample's stack is a list of *locations*,
//! innermost first; a location is one physical native frame (an instruction
//! address in a module), one R frame, or one loop of an R function; each
//! location has one or more *lines* (several for a native frame with
//! inlined calls), innermost first, each naming a *function* and where that
//! function is at the moment of the sample (`file:line`, when known).
//!
//! Rprof's format is the same stack flattened: every line of every
//! location, innermost first, as a label (`Function::label`), followed
//! under line profiling by the position of the next (outer) entry, which is
//! where this one was called from.

/// What kind of frame a function stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// An R function (a function context).
    R,
    /// A native function (or an unnamed one, identified by its start).
    Native,
    /// A loop of an R function: `[for]`, `[while]`, `[repeat]`.
    Loop,
    /// Where another thread's own frames begin: `[thread N]`.
    Thread,
    /// Time in a parallel runtime's own code (OpenMP, TBB): `[wait]`.
    Wait,
    /// Where another process's own frames begin: `[process N]`.
    Process,
    /// A sample whose stack could not be read at all: `[no frames]`.
    NoFrames,
    /// A CPU sample that stands for the kernel's time: `[kernel]`.
    Kernel,
}

impl FrameKind {
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::R => "r",
            FrameKind::Native => "native",
            FrameKind::Loop => "loop",
            FrameKind::Thread => "thread",
            FrameKind::Wait => "wait",
            FrameKind::Process => "process",
            FrameKind::NoFrames => "none",
            FrameKind::Kernel => "kernel",
        }
    }

    pub fn from_name(name: &str) -> Option<FrameKind> {
        [
            FrameKind::R,
            FrameKind::Native,
            FrameKind::Loop,
            FrameKind::Thread,
            FrameKind::Wait,
            FrameKind::Process,
            FrameKind::NoFrames,
            FrameKind::Kernel,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }
}

/// One function (R, native or loop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its name as pprof shows it: the R label, the native function's full
    /// demangled name (`ns::f(int)`), `/module::+0x1a20` for an unnamed
    /// native function, `[for]` for a loop.
    pub name: String,
    /// Its label in Rprof's format, never containing a space or a double
    /// quote: the R label as `Rprof()` writes it, `/module::ns::f` for native
    /// functions (parameter lists dropped), `[for]`.
    pub label: String,
    pub kind: FrameKind,
    /// Index into `Profile::modules` (native functions).
    pub module: Option<usize>,
    /// Index into `Profile::files`: where the function is defined, when
    /// known.
    pub file: Option<usize>,
}

/// One entry of a location: a function and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Line {
    /// Index into `Profile::functions`.
    pub function: usize,
    /// Index into `Profile::files` and the line in it.
    pub file: Option<usize>,
    pub line: Option<u32>,
}

/// One frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// Index into `Profile::modules` (native frames).
    pub module: Option<usize>,
    /// The instruction address of a native frame (0 for R and loop frames).
    pub address: u64,
    /// Innermost first; a native frame lists its inlined calls before the
    /// function they were inlined into.
    pub lines: Vec<Line>,
}

/// A loaded module that native frames belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub path: String,
    /// GNU build-id in hex, when the module has one.
    pub build_id: Option<String>,
    /// The range of addresses the module occupies and the file offset that
    /// `start` corresponds to.
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
}

/// One distinct stack and how many samples had it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Indices into `Profile::locations`, innermost first.
    pub locations: Vec<usize>,
    pub count: u64,
    /// The thread sampled: an index into `Profile::threads` (0: R's main
    /// thread).
    pub thread: usize,
    /// The process sampled: an index into `Profile::processes` (0: the
    /// profiled process itself).
    pub process: usize,
    /// A memory profile's values (None in a time profile).
    pub bytes: Option<Bytes>,
}

/// What a stack's samples of a memory profile stand for: estimates of the
/// bytes and the allocations made there, and of those still allocated when
/// the profile ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bytes {
    pub alloc_bytes: u64,
    pub alloc_count: u64,
    pub inuse_bytes: u64,
    pub inuse_count: u64,
}

impl std::ops::AddAssign for Bytes {
    fn add_assign(&mut self, o: Bytes) {
        self.alloc_bytes += o.alloc_bytes;
        self.alloc_count += o.alloc_count;
        self.inuse_bytes += o.inuse_bytes;
        self.inuse_count += o.inuse_count;
    }
}

/// A thread of the profiled process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// 0 for R's main thread; others numbered from 1 in the order of their
    /// first sample (the `N` of their `[thread N]` frame).
    pub number: u32,
    /// The kernel's thread id (0: unknown).
    pub tid: i64,
    pub name: String,
    /// CPU time it used while the profile ran, from its own clock (None:
    /// not measured).
    pub cpu_ns: Option<u64>,
}

/// One process of a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// 0 for the profiled process; others numbered from 1 in the order of
    /// their first sample (the `N` of their `[process N]` frame).
    pub number: u32,
    pub pid: i64,
    /// Its command line, and the machine it ran on.
    pub command: String,
    pub host: String,
    /// CPU time it used while the profile ran (None: not measured), and
    /// the samples taken of it.
    pub cpu_ns: Option<u64>,
    pub samples: u64,
}

/// What was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// CPU time of R's main thread.
    Cpu,
    /// Wall-clock time.
    Elapsed,
    /// Allocations (a memory profile): the profile's `period` is the mean
    /// bytes between samples.
    Alloc,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Cpu => "cpu",
            Event::Elapsed => "elapsed",
            Event::Alloc => "alloc",
        }
    }
}

/// The sampling intervals a time profile can have, in nanoseconds: what
/// `winch_profile()`, `winch_rprof()` and `winch_record()` accept (1 ms to
/// an hour).
pub const INTERVAL_NS: std::ops::RangeInclusive<u64> = 1_000_000..=3_600_000_000_000;

/// The mean bytes between samples a memory profile can have: what
/// `winch_profile(event = "alloc", sample_bytes =)` accepts.
pub const SAMPLE_BYTES: std::ops::RangeInclusive<u64> = 1..=1_000_000_000_000_000;

/// The most frames (locations) a stack can have: what one sample records
/// at most (`compose::MAX_FRAMES` native frames, two entries per R context
/// for `compose::MAX_CONTEXTS` contexts), twice (another thread's sample
/// joined under a sample of R's main thread), and a few markers
/// (`[thread N]`, `[wait]`).
pub const MAX_STACK_DEPTH: usize = 2 * (4096 + 2 * 8192) + 16;

// The sampler's buffers and the bound above agree.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const _: () = {
    use super::compose::{MAX_CONTEXTS, MAX_FRAMES};
    assert!(MAX_STACK_DEPTH >= 2 * (MAX_FRAMES + 2 * MAX_CONTEXTS));
    assert!(MAX_STACK_DEPTH <= 2 * (MAX_FRAMES + 2 * MAX_CONTEXTS) + 64);
};

/// The most bytes one sample's line of Rprof's format can take: every line
/// of every location of its stack as a quoted label with its position
/// ([`ROW_ENTRY`] each beyond the label). A real sample of the deepest stack
/// takes a few MB; this bounds what a writer makes of one sample, so that
/// no profile is written at more than this many bytes per sample however
/// it was edited.
pub const MAX_ROW_BYTES: u64 = 16 << 20;

/// What an entry of Rprof's line takes beyond its label: two quotes, a
/// space and a position (`4294967295#4294967295 `), rounded up.
pub const ROW_ENTRY: u64 = 32;

/// A finished profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    pub event: Event,
    /// What one sample stands for: nanoseconds of the event's clock
    /// (`Cpu`, `Elapsed`: the sampling interval) or bytes allocated
    /// (`Alloc`: the mean bytes between samples).
    pub period: u64,
    /// When sampling started (nanoseconds since the Unix epoch) and for how
    /// long it ran.
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    pub functions: Vec<Function>,
    pub locations: Vec<Location>,
    pub stacks: Vec<Stack>,
    pub files: Vec<String>,
    pub modules: Vec<Module>,
    /// The threads sampled; the first is R's main thread. (Empty: R's main
    /// thread only, as profiles made before threads were sampled.)
    pub threads: Vec<ThreadInfo>,
    /// The processes sampled; the first is the profiled process. (Empty:
    /// that process only, as profiles made before processes were sampled.)
    pub processes: Vec<ProcessInfo>,
}

impl Profile {
    /// The number of samples.
    pub(crate) fn samples(&self) -> u64 {
        self.stacks.iter().fold(0u64, |n, s| n.saturating_add(s.count))
    }

    /// Checks every field against its meaning, so that a damaged profile
    /// is refused rather than shown wrong or written out at any size: the
    /// interval (or a memory profile's mean bytes between samples) within
    /// what the profiler accepts; a positive duration the samples could
    /// have been taken in (the main thread's CPU time or wall-clock time is
    /// at most the duration; a profile of a second at 1 ms holds about
    /// 1,000 samples); every index in range; no stack deeper than a sample
    /// can be ([`MAX_STACK_DEPTH`]) nor longer in Rprof's format than
    /// [`MAX_ROW_BYTES`]; source lines positive; a memory profile's bytes
    /// and allocations still in use at most those made; modules that start
    /// below their limit; threads numbered once each.
    ///
    /// The error names the field as the profile's R form does
    /// (`profile_form.rs` in the glue: the only way a profile reaches this
    /// check from outside) and says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        self.check_period()?;
        if self.duration_ns == 0 {
            return Err("`duration` must be a positive number of seconds (it is 0)".into());
        }
        self.check_indices()?;
        self.check_threads()?;
        self.check_samples()?;
        self.check_sizes()?;
        self.check_values()
    }

    fn check_period(&self) -> Result<(), String> {
        match self.event {
            Event::Alloc if !SAMPLE_BYTES.contains(&self.period) => Err(format!(
                "`sample_bytes` must be between {} and {} bytes (it is {})",
                SAMPLE_BYTES.start(),
                SAMPLE_BYTES.end(),
                self.period
            )),
            Event::Cpu | Event::Elapsed if !INTERVAL_NS.contains(&self.period) => Err(format!(
                "`interval` must be between {} and {} seconds, as winch_profile() samples (it is {} s)",
                *INTERVAL_NS.start() as f64 / 1e9,
                *INTERVAL_NS.end() as f64 / 1e9,
                self.period as f64 / 1e9
            )),
            _ => Ok(()),
        }
    }

    /// That the samples could have been taken in the profile's duration:
    /// every thread on its own clock, with slack for timer expirations that
    /// land late and are counted together, and for the clock readings
    /// around the profile. (A memory profile's samples follow bytes, not
    /// time.)
    fn check_samples(&self) -> Result<(), String> {
        if self.event == Event::Alloc {
            return Ok(());
        }
        // (Each other process samples its main thread on its own clock.)
        let threads = (self.threads.len().max(1) + self.processes.len().saturating_sub(1)) as f64;
        let possible = (self.duration_ns as f64 / self.period as f64) * 1.5 * threads + 10.0 * threads;
        let samples = self.samples();
        if samples as f64 > possible {
            return Err(format!(
                "`stacks$count` counts {samples} samples, more than {} of {} s each fit in its {} s",
                possible.floor(),
                self.period as f64 / 1e9,
                self.duration_ns as f64 / 1e9
            ));
        }
        Ok(())
    }

    fn check_indices(&self) -> Result<(), String> {
        let (nl, nf, nfiles, nm) =
            (self.locations.len(), self.functions.len(), self.files.len(), self.modules.len());
        let nt = self.threads.len().max(1);
        let np = self.processes.len().max(1);
        let bad_module = |m: Option<usize>| m.is_some_and(|m| m >= nm);
        let bad_file = |f: Option<usize>| f.is_some_and(|f| f >= nfiles);
        let out_of_range = |field: &str, at: usize| Err(format!("`{field}` [{}] is out of range", at + 1));
        for (k, s) in self.stacks.iter().enumerate() {
            if s.locations.iter().any(|&l| l >= nl) {
                return out_of_range("stacks$locations", k);
            }
            if s.thread >= nt {
                return out_of_range("stacks$thread", k);
            }
            if s.process >= np {
                return out_of_range("stacks$process", k);
            }
        }
        for (k, f) in self.functions.iter().enumerate() {
            if bad_module(f.module) {
                return out_of_range("functions$module", k);
            }
            if bad_file(f.file) {
                return out_of_range("functions$file", k);
            }
        }
        let mut line = 0;
        for (k, l) in self.locations.iter().enumerate() {
            if bad_module(l.module) {
                return out_of_range("locations$module", k);
            }
            for x in &l.lines {
                if x.function >= nf {
                    return out_of_range("lines$function", line);
                }
                if bad_file(x.file) {
                    return out_of_range("lines$file", line);
                }
                line += 1;
            }
        }
        Ok(())
    }

    /// Threads numbered once each (R's main thread 0, others from 1), and
    /// processes likewise (the profiled one 0).
    fn check_threads(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for (k, t) in self.threads.iter().enumerate() {
            if !seen.insert(t.number) {
                return Err(format!(
                    "`threads$number` [{}] is {}, a number another thread has",
                    k + 1,
                    t.number
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (k, p) in self.processes.iter().enumerate() {
            if !seen.insert(p.number) {
                return Err(format!(
                    "`processes$number` [{}] is {}, a number another process has",
                    k + 1,
                    p.number
                ));
            }
        }
        Ok(())
    }

    /// No stack deeper than a sample can be, nor longer in Rprof's format
    /// than [`MAX_ROW_BYTES`] (each location's length summed once, then
    /// per stack: no stack's entries are walked one by one).
    fn check_sizes(&self) -> Result<(), String> {
        let location_bytes: Vec<u64> = self
            .locations
            .iter()
            .map(|l| {
                l.lines.iter().fold(0u64, |n, x| {
                    let label = self.functions[x.function].label.len() as u64;
                    n.saturating_add(label.saturating_add(ROW_ENTRY))
                })
            })
            .collect();
        for (k, s) in self.stacks.iter().enumerate() {
            if s.locations.len() > MAX_STACK_DEPTH {
                return Err(format!(
                    "`stacks$locations` [{}] has {} frames, more than a sample can have ({MAX_STACK_DEPTH})",
                    k + 1,
                    s.locations.len()
                ));
            }
            let bytes = s.locations.iter().fold(0u64, |n, &l| n.saturating_add(location_bytes[l]));
            if bytes > MAX_ROW_BYTES {
                return Err(format!(
                    "`stacks$locations` [{}] would take {bytes} bytes per sample in Rprof's format, more than any \
                     sample can ({MAX_ROW_BYTES}): its frames' labels are too long or too many",
                    k + 1
                ));
            }
        }
        Ok(())
    }

    /// Values that must agree with what they stand for: source lines are
    /// positive; a memory profile's stacks say what was allocated there,
    /// and what is still in use is part of it; a module ends above its
    /// start.
    fn check_values(&self) -> Result<(), String> {
        let mut k = 0;
        for l in &self.locations {
            for x in &l.lines {
                if x.line == Some(0) {
                    return Err(format!(
                        "`lines$line` [{}] is 0 (source lines count from 1, or are NA)",
                        k + 1
                    ));
                }
                k += 1;
            }
        }
        for (k, s) in self.stacks.iter().enumerate() {
            match (self.event, &s.bytes) {
                (Event::Alloc, None) => {
                    return Err(format!("`stacks$alloc_bytes` [{}] is missing in a memory profile", k + 1))
                }
                (Event::Alloc, Some(b)) if b.inuse_bytes > b.alloc_bytes => {
                    return Err(format!(
                        "`stacks$inuse_bytes` [{}] is {}, more than the {} bytes allocated there (`alloc_bytes`)",
                        k + 1,
                        b.inuse_bytes,
                        b.alloc_bytes
                    ))
                }
                (Event::Alloc, Some(b)) if b.inuse_count > b.alloc_count => {
                    return Err(format!(
                        "`stacks$inuse_count` [{}] is {}, more than the {} allocations made there (`alloc_count`)",
                        k + 1,
                        b.inuse_count,
                        b.alloc_count
                    ))
                }
                (Event::Cpu | Event::Elapsed, Some(_)) => {
                    return Err(format!("`stacks$alloc_bytes` [{}] is given in a time profile", k + 1))
                }
                _ => {}
            }
        }
        for (k, m) in self.modules.iter().enumerate() {
            if m.start >= m.limit {
                return Err(format!(
                    "`modules$start` [{}] is {:#x}, not below its limit {:#x}",
                    k + 1,
                    m.start,
                    m.limit
                ));
            }
        }
        Ok(())
    }

    /// The entries of a stack flattened, innermost first: every line of
    /// every location.
    pub(crate) fn flat_lines<'a>(&'a self, stack: &'a Stack) -> impl Iterator<Item = &'a Line> + 'a {
        stack.locations.iter().flat_map(move |&l| self.locations[l].lines.iter())
    }
}

/// `name` without a trailing parameter list: the last top-level `(...)`
/// group that is not part of the name itself (`operator()` and
/// `(anonymous namespace)` are kept).
pub(crate) fn strip_parameters(name: &str) -> &str {
    let bytes = name.as_bytes();
    // Find the opening paren that matches the last closing one, scanning
    // from the end, ignoring what a template's angle brackets enclose.
    let Some(close) = name.rfind(')') else { return name };
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..=close).rev() {
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(open) = open else { return name };
    let head = &name[..open];
    if head.is_empty()
        || head.ends_with("operator")
        || head.ends_with("::")
        || &name[open..=close] == "(anonymous namespace)"
    {
        return name;
    }
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(count: u64, duration_s: f64) -> Profile {
        Profile {
            event: Event::Cpu,
            period: 1_000_000,
            start_unix_ns: 0,
            duration_ns: (duration_s * 1e9) as u64,
            functions: vec![Function {
                name: "f".into(),
                label: "f".into(),
                kind: FrameKind::R,
                module: None,
                file: None,
            }],
            locations: vec![Location {
                module: None,
                address: 0,
                lines: vec![Line { function: 0, file: None, line: None }],
            }],
            stacks: vec![Stack { locations: vec![0], count, thread: 0, process: 0, bytes: None }],
            files: Vec::new(),
            modules: Vec::new(),
            threads: Vec::new(),
            processes: Vec::new(),
        }
    }

    #[test]
    fn a_profile_holds_only_the_samples_its_duration_allows() {
        assert_eq!(profile(1000, 1.0).check(), Ok(()));
        assert_eq!(profile(0, 1e-6).check(), Ok(()));
        let err = profile(1_000_000_000_000_000, 1.0).check().unwrap_err();
        assert!(err.contains("`stacks$count` counts 1000000000000000 samples"), "{err}");
        assert!(profile(u64::MAX, 1.0).check().is_err());
        // A duration the samples do not fit in: none at all, or 1 ns for
        // 100 samples of 1 ms (allowed once by a slack of 1,000 samples).
        let err = profile(0, 0.0).check().unwrap_err();
        assert!(err.contains("`duration` must be a positive number of seconds"), "{err}");
        let err = profile(100, 1e-9).check().unwrap_err();
        assert!(err.contains("counts 100 samples"), "{err}");
        let mut p = profile(1, 1.0);
        p.stacks[0].locations.push(5);
        assert_eq!(p.check().unwrap_err(), "`stacks$locations` [1] is out of range");
        let mut p = profile(1, 1.0);
        p.locations[0].lines[0].file = Some(0);
        assert_eq!(p.check().unwrap_err(), "`lines$file` [1] is out of range", "a file index with no files");
        let mut p = profile(1, 1.0);
        p.stacks[0].thread = 1;
        assert_eq!(
            p.check().unwrap_err(),
            "`stacks$thread` [1] is out of range",
            "a thread that is not listed"
        );
    }

    #[test]
    fn the_interval_is_one_the_profiler_samples_at() {
        let err = Profile { period: 0, ..profile(1, 1.0) }.check().unwrap_err();
        assert!(err.contains("`interval` must be between 0.001 and 3600 seconds"), "{err}");
        // 1e308 s as the R form's reader makes it: nanoseconds saturated.
        let err = Profile { period: u64::MAX, ..profile(1, 1.0) }.check().unwrap_err();
        assert!(err.starts_with("`interval`"), "{err}");
        assert!(Profile { period: 999_999, ..profile(1, 1.0) }.check().is_err());
        assert_eq!(Profile { period: 3_600_000_000_000, ..profile(1, 4000.0) }.check(), Ok(()));
        // A memory profile's mean bytes between samples.
        let mut p = memory_profile(Bytes { alloc_bytes: 10, alloc_count: 1, inuse_bytes: 0, inuse_count: 0 });
        assert_eq!(p.check(), Ok(()));
        p.period = 0;
        assert!(p.check().unwrap_err().starts_with("`sample_bytes` must be between 1 and"));
        p.period = 2_000_000_000_000_000;
        assert!(p.check().unwrap_err().starts_with("`sample_bytes`"));
    }

    fn memory_profile(b: Bytes) -> Profile {
        let mut p = profile(3, 1.0);
        p.event = Event::Alloc;
        p.period = 512 * 1024;
        p.stacks[0].bytes = Some(b);
        p
    }

    #[test]
    fn a_stack_is_no_deeper_and_no_longer_than_a_sample_can_be() {
        let mut p = profile(1, 1.0);
        p.stacks[0].locations = vec![0; MAX_STACK_DEPTH];
        assert_eq!(p.check(), Ok(()));
        // One frame more, or the 1e6 frames of the issue's damaged profile
        // (2.77 GB of Rprof from 5 KB).
        for depth in [MAX_STACK_DEPTH + 1, 1_000_000] {
            p.stacks[0].locations = vec![0; depth];
            let err = p.check().unwrap_err();
            assert!(err.contains(&format!("`stacks$locations` [1] has {depth} frames, more than")), "{err}");
        }
        // A location of many lines with long labels: few frames, but more
        // bytes per sample than any sample takes.
        let mut p = profile(1, 1.0);
        p.functions[0].label = "x".repeat((1 << 20) - ROW_ENTRY as usize);
        p.stacks[0].locations = vec![0; 16];
        assert_eq!(p.check(), Ok(()));
        p.stacks[0].locations = vec![0; 17];
        let err = p.check().unwrap_err();
        assert!(err.contains("per sample in Rprof's format"), "{err}");
        let mut p = profile(1, 1.0);
        p.locations[0].lines = vec![Line { function: 0, file: None, line: None }; 600_000];
        assert!(p.check().unwrap_err().contains("per sample in Rprof's format"));
    }

    #[test]
    fn lines_bytes_modules_and_threads_mean_what_they_say() {
        let mut p = profile(1, 1.0);
        p.locations[0].lines[0].line = Some(0);
        assert_eq!(p.check().unwrap_err(), "`lines$line` [1] is 0 (source lines count from 1, or are NA)");
        p.locations[0].lines[0].line = Some(7);
        assert_eq!(p.check(), Ok(()));
        // In use, at most what was allocated.
        let b = Bytes { alloc_bytes: 100, alloc_count: 2, inuse_bytes: 100, inuse_count: 2 };
        assert_eq!(memory_profile(b).check(), Ok(()));
        let err = memory_profile(Bytes { inuse_bytes: 101, ..b }).check().unwrap_err();
        assert!(err.starts_with("`stacks$inuse_bytes` [1] is 101, more than the 100 bytes"), "{err}");
        let err = memory_profile(Bytes { inuse_count: 3, ..b }).check().unwrap_err();
        assert!(err.starts_with("`stacks$inuse_count` [1] is 3"), "{err}");
        let mut m = memory_profile(b);
        m.stacks[0].bytes = None;
        assert!(m.check().unwrap_err().contains("missing in a memory profile"));
        let mut t = profile(1, 1.0);
        t.stacks[0].bytes = Some(b);
        assert!(t.check().unwrap_err().contains("given in a time profile"));
        // A module ends above its start.
        let mut p = profile(1, 1.0);
        let module = |start, limit| Module { path: "/m.so".into(), build_id: None, start, limit, offset: 0 };
        p.modules = vec![module(0x1000, 0x2000)];
        assert_eq!(p.check(), Ok(()));
        p.modules = vec![module(0x2000, 0x1000)];
        assert_eq!(p.check().unwrap_err(), "`modules$start` [1] is 0x2000, not below its limit 0x1000");
        // Threads numbered once each.
        let mut p = profile(1, 1.0);
        let thread = |number| ThreadInfo { number, tid: 0, name: String::new(), cpu_ns: None };
        p.threads = vec![thread(0), thread(1)];
        assert_eq!(p.check(), Ok(()));
        p.threads = vec![thread(0), thread(0)];
        assert_eq!(p.check().unwrap_err(), "`threads$number` [2] is 0, a number another thread has");
    }
}
