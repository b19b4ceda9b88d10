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

    /// Checks what indices alone cannot: the interval, and that the samples
    /// could have been taken in the time the profile ran (the main thread's
    /// CPU time or wall-clock time is at most the duration; a profile of a
    /// second at 1 ms holds about 1,000 samples), so that a damaged profile
    /// is refused rather than written out at any size. Every index must be
    /// in range (the R side's reader checks that as it reads).
    pub fn check(&self) -> Result<(), String> {
        if self.period == 0 {
            return Err("its interval is not positive".into());
        }
        // Slack for timer expirations that land late and are counted
        // together, and for the clock readings around the profile.
        // Every thread is sampled on its own clock.
        let threads = self.threads.len().max(1) as f64;
        if self.event == Event::Alloc {
            return self.check_indices();
        }
        let possible = (self.duration_ns as f64 / self.period as f64) * 1.5 * threads + 1000.0 * threads;
        let samples = self.samples();
        if samples as f64 > possible {
            return Err(format!(
                "it counts {samples} samples, more than {} of {} s each fit in its {} s",
                possible.floor(),
                self.period as f64 / 1e9,
                self.duration_ns as f64 / 1e9
            ));
        }
        self.check_indices()
    }

    fn check_indices(&self) -> Result<(), String> {
        let (nl, nf, nfiles, nm) =
            (self.locations.len(), self.functions.len(), self.files.len(), self.modules.len());
        let bad_module = |m: Option<usize>| m.is_some_and(|m| m >= nm);
        let bad_file = |f: Option<usize>| f.is_some_and(|f| f >= nfiles);
        if self
            .stacks
            .iter()
            .any(|s| s.locations.iter().any(|&l| l >= nl) || s.thread >= self.threads.len().max(1))
            || self.functions.iter().any(|f| bad_module(f.module) || bad_file(f.file))
            || self
                .locations
                .iter()
                .any(|l| bad_module(l.module) || l.lines.iter().any(|x| x.function >= nf || bad_file(x.file)))
        {
            return Err("an index is out of range".into());
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
        assert_eq!(profile(0, 0.0).check(), Ok(()));
        let err = profile(1_000_000_000_000_000, 1.0).check().unwrap_err();
        assert!(err.contains("counts 1000000000000000 samples"), "{err}");
        assert!(profile(u64::MAX, 1.0).check().is_err());
        assert!(Profile { period: 0, ..profile(1, 1.0) }.check().unwrap_err().contains("interval"));
        let mut p = profile(1, 1.0);
        p.stacks[0].locations.push(5);
        assert!(p.check().unwrap_err().contains("out of range"));
        let mut p = profile(1, 1.0);
        p.locations[0].lines[0].file = Some(0);
        assert!(p.check().is_err(), "a file index with no files");
        let mut p = profile(1, 1.0);
        p.stacks[0].thread = 1;
        assert!(p.check().unwrap_err().contains("out of range"), "a thread that is not listed");
    }
}
