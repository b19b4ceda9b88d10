//! Everything winch reads from `/proc`, for this process and for others:
//! the one place that knows the files' paths and how their text is laid
//! out. Lines of `maps`, the thread list of `task/`, `comm`, `stat`, the
//! `children` of threads, `schedstat`, the tracer in `status`, a variable
//! of `environ`, the executable's link, the `mem` file, the processes
//! there, and TCP connections with the sockets that hold them
//! ([`sockets`]).
//!
//! Each file has a pure parser over its text (tested on synthetic text
//! below) and a thin reader that reads the file of a process or thread and
//! calls it. The parsers allocate nothing (a [`MapsLine`] borrows its path
//! from the text; [`parse_maps`] and [`environ_value`] are the owned forms).
//! The readers allocate (a path and the file's text): none is for a signal
//! handler, except [`task_links`], one system call with nothing allocated.
//!
//! The `procfs` crate parses these files too; winch keeps its own small
//! parser because the crate allocates for every line and path (and has no
//! public parser of a line), and would add 8 crates to the vendored ones
//! and more than double their archive (see README, "Choices and why").

use std::io;

pub mod sockets;

/// Whose files: this process's (`/proc/self`) or process `pid`'s
/// (`/proc/PID`; a thread's id names its own directory there too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proc {
    This,
    Pid(i32),
}

impl Proc {
    /// The path of `file` of the process, or of its thread `tid`
    /// (`task/TID/file`).
    fn path(self, tid: Option<i32>, file: &str) -> String {
        let dir = match self {
            Proc::This => "/proc/self".to_string(),
            Proc::Pid(pid) => format!("/proc/{pid}"),
        };
        match tid {
            Some(tid) => format!("{dir}/task/{tid}/{file}"),
            None => format!("{dir}/{file}"),
        }
    }
}

// ---------------------------------------------------------------- maps

/// The permissions column of a `maps` line (`rwxp`, `r--s`, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Perms {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    /// `s`: a shared mapping (`p`: private).
    pub shared: bool,
}

impl Perms {
    /// Each letter at its place; any other character means "no".
    pub fn parse(field: &str) -> Perms {
        let b = field.as_bytes();
        Perms {
            read: b.first() == Some(&b'r'),
            write: b.get(1) == Some(&b'w'),
            exec: b.get(2) == Some(&b'x'),
            shared: b.get(3) == Some(&b's'),
        }
    }

    /// As `PROT_*` bits (what `mprotect` is given).
    pub fn prot(self) -> i32 {
        let mut prot = 0;
        if self.read {
            prot |= libc::PROT_READ;
        }
        if self.write {
            prot |= libc::PROT_WRITE;
        }
        if self.exec {
            prot |= libc::PROT_EXEC;
        }
        prot
    }
}

/// One line of `/proc/PID/maps`, borrowing its path from the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    pub start: usize,
    pub end: usize,
    pub perms: Perms,
    /// Offset in the file mapped (0 for anonymous mappings).
    pub offset: usize,
    /// The device of the file mapped, as `stat()`'s `st_dev` gives it.
    pub dev: u64,
    /// Its inode (0: no file).
    pub inode: u64,
    /// The file, or `[heap]`, `[stack]`, `[vdso]`, ...; empty for an
    /// anonymous mapping. A file deleted since keeps ` (deleted)` at the
    /// end, as the kernel writes it.
    pub path: &'a str,
}

impl<'a> MapsLine<'a> {
    /// `start-end perms offset major:minor inode [path]`: the five fields
    /// must be there and well formed, and the range not empty; the path is
    /// the rest of the line, spaces inside kept, around it trimmed.
    pub fn parse(line: &'a str) -> Option<MapsLine<'a>> {
        let mut rest = line;
        let mut next = || field(&mut rest);
        let (range, perms, offset, dev, inode) = (next()?, next()?, next()?, next()?, next()?);
        let (start, end) = range.split_once('-')?;
        let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
        let (major, minor) = dev.split_once(':')?;
        let dev = device(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
        (start < end).then_some(MapsLine {
            start,
            end,
            perms: Perms::parse(perms),
            offset: usize::from_str_radix(offset, 16).ok()?,
            dev,
            inode: inode.parse().ok()?,
            path: rest.trim(),
        })
    }

    /// This line, owning its path.
    pub fn to_mapping(self) -> Mapping {
        Mapping {
            start: self.start,
            end: self.end,
            perms: self.perms,
            offset: self.offset,
            dev: self.dev,
            inode: self.inode,
            path: self.path.to_string(),
        }
    }
}

/// The next field of `rest` (ASCII whitespace between fields), and `rest`
/// moved past it.
fn field<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let s = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let end = s.find(|c: char| c.is_ascii_whitespace()).unwrap_or(s.len());
    let (f, r) = s.split_at(end);
    *rest = r;
    (!f.is_empty()).then_some(f)
}

/// A device number from its major and minor numbers, as the C library
/// makes it (what `stat()` reports, and [`MapsLine::dev`] is compared with).
#[cfg(target_os = "linux")]
fn device(major: u32, minor: u32) -> u64 {
    libc::makedev(major, minor) as u64
}

/// (No `/proc/PID/maps` elsewhere: only kept apart.)
#[cfg(not(target_os = "linux"))]
fn device(major: u32, minor: u32) -> u64 {
    (u64::from(major) << 32) | u64::from(minor)
}

/// The well-formed lines of `maps` text, in order (others are skipped).
pub fn maps_lines(text: &str) -> impl Iterator<Item = MapsLine<'_>> {
    text.lines().filter_map(MapsLine::parse)
}

/// A [`MapsLine`] that owns its path (kept after the text is gone, or made
/// from elsewhere, as from a core file's notes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub perms: Perms,
    pub offset: usize,
    pub dev: u64,
    pub inode: u64,
    pub path: String,
}

/// The well-formed lines of `maps` text, owned.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    maps_lines(text).map(|l| l.to_mapping()).collect()
}

/// The text of a process's `maps`.
pub fn read_maps(of: Proc) -> io::Result<String> {
    std::fs::read_to_string(of.path(None, "maps"))
}

// ------------------------------------------------------- threads, comm

/// A thread's id from its entry's name in `task/` (None for anything
/// else).
pub fn task_id(name: &str) -> Option<i32> {
    name.parse().ok()
}

/// The ids of a process's threads now, in the directory's order.
pub fn task_ids(of: Proc) -> io::Result<Vec<i32>> {
    let dir = std::fs::read_dir(of.path(None, "task"))?;
    Ok(dir.filter_map(|e| task_id(e.ok()?.file_name().to_str()?)).collect())
}

/// The link count of `/proc/self/task`, which the kernel makes 2 plus the
/// number of threads: one system call, no directory to read, nothing
/// allocated (0 if unknown).
pub fn task_links() -> u64 {
    // SAFETY: a zeroed stat is a valid value to fill in.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a stat to fill in.
    let ok = unsafe { libc::stat(c"/proc/self/task".as_ptr(), &mut st) } == 0;
    if ok {
        st.st_nlink as u64
    } else {
        0
    }
}

/// A thread's name from the text of its `comm` (the kernel ends it with a
/// newline).
pub fn parse_comm(text: &str) -> &str {
    text.trim_end()
}

/// The name of thread `tid` of a process (empty if unreadable).
pub fn comm(of: Proc, tid: i32) -> String {
    std::fs::read_to_string(of.path(Some(tid), "comm"))
        .map(|s| parse_comm(&s).to_string())
        .unwrap_or_default()
}

/// A command line as `cmdline` holds it (arguments NUL-separated), as one
/// line: arguments joined by spaces.
pub fn parse_cmdline(bytes: &[u8]) -> String {
    let args: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.join(" ")
}

/// The command line of a process (empty if unreadable, or a kernel thread).
pub fn cmdline(of: Proc) -> String {
    std::fs::read(of.path(None, "cmdline")).map(|b| parse_cmdline(&b)).unwrap_or_default()
}

// ------------------------------------------------------ stat, schedstat

/// What winch uses of a `stat` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R` running (or ready to), `S` sleeping, `Z` zombie, `X` dead, ...
    pub state: char,
    /// The kernel's flags for the task (`PF_*`).
    pub flags: u64,
    /// Page faults that needed no I/O (minor) and that did (major).
    pub minflt: u64,
    pub majflt: u64,
    /// CPU time used in user and in system mode, in clock ticks, and by
    /// the children it waited for.
    pub utime: u64,
    pub stime: u64,
    pub cutime: u64,
    pub cstime: u64,
}

impl Stat {
    /// The fields after the command's name, which may hold spaces and
    /// parentheses (it ends at the last `)`): the state is the first,
    /// flags the 7th, minflt the 8th, majflt the 10th, utime the 12th and
    /// stime the 13th (fields 3, 9, 10, 12, 14 and 15 of the whole line).
    pub fn parse(text: &str) -> Option<Stat> {
        let mut f = text.rsplit_once(')')?.1.split_whitespace();
        let state = f.next()?.chars().next()?;
        let mut number = |skip: usize| f.nth(skip)?.parse::<u64>().ok();
        let flags = number(5)?;
        let minflt = number(0)?;
        let majflt = number(1)?;
        let utime = number(1)?;
        let stime = number(0)?;
        // (Signed in the kernel's format; never negative in practice.)
        let mut signed = || f.next()?.parse::<i64>().ok().map(|v| v.max(0) as u64);
        let (cutime, cstime) = (signed().unwrap_or(0), signed().unwrap_or(0));
        Some(Stat { state, flags, minflt, majflt, utime, stime, cutime, cstime })
    }

    /// A kernel thread (`PF_KTHREAD`): no user memory, no user stack.
    pub fn kernel_thread(&self) -> bool {
        self.flags & 0x0020_0000 != 0
    }

    /// CPU time used, user and system, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime + self.stime
    }

    /// On a CPU, or ready for one.
    pub fn running(&self) -> bool {
        self.state == 'R'
    }

    /// Ended or ending (a zombie, dead, or on its way: `PF_EXITING`, as
    /// soon as a killed thread runs again).
    pub fn exiting(&self) -> bool {
        matches!(self.state, 'Z' | 'X') || self.flags & 0x4 != 0
    }
}

/// A small procfs file's text (`stat`, `status`, `schedstat`, ...): read
/// into a buffer on the stack, without asking the file's size first as
/// `read_to_string` does (a `statx` per read; the profiler reads these
/// files at every sample of another process).
fn small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => return Some(String::from_utf8_lossy(&buf[..got]).into_owned()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    // Larger than the buffer: the rest as it comes.
    let mut rest = Vec::new();
    f.read_to_end(&mut rest).ok()?;
    let mut all = buf.to_vec();
    all.extend(rest);
    Some(String::from_utf8_lossy(&all).into_owned())
}

/// The `stat` of thread `tid` of a process (with `tid` None, the
/// process's own).
pub fn stat(of: Proc, tid: Option<i32>) -> Option<Stat> {
    Stat::parse(&small(&of.path(tid, "stat"))?)
}

/// When a process started, in clock ticks after boot: the 19th field after
/// the command's name (field 22 of the whole line).
pub fn parse_start(text: &str) -> Option<u64> {
    text.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// When process `pid` started (see [`parse_start`]).
pub fn start_ticks(pid: i32) -> Option<u64> {
    parse_start(&small(&Proc::Pid(pid).path(None, "stat"))?)
}

/// [`start_ticks`] and [`stat`] of process `pid` from one read.
pub fn start_and_stat(pid: i32) -> Option<(u64, Stat)> {
    let text = small(&Proc::Pid(pid).path(None, "stat"))?;
    Some((parse_start(&text)?, Stat::parse(&text)?))
}

/// A process's parent: the 2nd field after the command's name.
pub fn parse_parent(text: &str) -> Option<i32> {
    text.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The parent of process `pid` now (None: gone).
pub fn parent(pid: i32) -> Option<i32> {
    parse_parent(&small(&Proc::Pid(pid).path(None, "stat"))?)
}

/// Whether process `pid` descends from process `ancestor` now (its child,
/// its child's child, ...): its parents followed up to init (at most 64).
pub fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        match parent(p) {
            Some(q) if q == ancestor => return true,
            Some(q) if q > 1 && q != p => p = q,
            _ => return false,
        }
    }
    false
}

/// Now, in the unit of [`start_ticks`]: clock ticks after boot (the
/// kernel's boot-time clock, which the start times are read from).
pub fn now_ticks() -> Option<u64> {
    // SAFETY: a zeroed timespec is a valid value for the kernel to fill.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into `ts`.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let ns = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
    Some((ns * clock_ticks() as u128 / 1_000_000_000) as u64)
}

/// The processes there now (the numbered entries of `/proc`).
pub fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The pids in the text of a thread's `children` file (space-separated).
pub fn parse_children(text: &str) -> impl Iterator<Item = i32> + '_ {
    text.split_whitespace().filter_map(|p| p.parse().ok())
}

/// The children of a process that it has not waited for, living or ended
/// (zombies), from its threads' `children` files (a child is listed in
/// its starting thread's). None where the kernel has no such files.
pub fn children(of: Proc) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for tid in task_ids(of).ok()? {
        match std::fs::read_to_string(of.path(Some(tid), "children")) {
            Ok(text) => out.extend(parse_children(&text)),
            // The thread is there and its file is not: not in this kernel.
            Err(_) if std::fs::metadata(of.path(Some(tid), "stat")).is_ok() => return None,
            Err(_) => {} // a thread that ended since the listing
        }
    }
    Some(out)
}

/// The CPU seconds (user, system) of a process's children so far: those it
/// waited for (`waited`: its own account of them, `RUSAGE_CHILDREN` or
/// `stat`'s `cutime` and `cstime`) and those it has not waited for yet,
/// living or ended, their own time and their waited-for children's (what
/// waiting for them adds to the account). The difference of two readings
/// is what the children used in between, whenever they are waited for. The
/// account is read around the listing until it holds still (a child waited
/// for meanwhile would be counted twice or not at all). Without listed
/// children (see [`children`]): the account alone.
pub fn children_time(of: Proc, mut waited: impl FnMut() -> Option<(f64, f64)>) -> Option<(f64, f64)> {
    let ticks = clock_ticks() as f64;
    let mut account = waited()?;
    for _ in 0..3 {
        let Some(pids) = children(of) else { return Some(account) };
        let (mut user, mut system) = (0u64, 0u64);
        for pid in pids {
            if let Some(s) = stat(Proc::Pid(pid), None) {
                user += s.utime + s.cutime;
                system += s.stime + s.cstime;
            }
        }
        let after = waited()?;
        if after == account {
            return Some((account.0 + user as f64 / ticks, account.1 + system as f64 / ticks));
        }
        account = after;
    }
    Some(account)
}

/// The CPU seconds (user, system) of this process's children so far, waited
/// for (`getrusage(RUSAGE_CHILDREN)`, to the microsecond) or not yet (see
/// [`children_time`]). None if `getrusage` fails.
pub fn own_children_time() -> Option<(f64, f64)> {
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let waited = || {
        // SAFETY: a zeroed rusage is a valid value for getrusage to fill.
        let mut c: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut c) } == 0)
            .then(|| (secs(c.ru_utime), secs(c.ru_stime)))
    };
    children_time(Proc::This, waited)
}

/// A thread's `schedstat`: its time on a CPU and waiting on a run queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedstat {
    pub run_ns: u64,
    pub wait_ns: u64,
}

impl Schedstat {
    /// The first two numbers of the text (the third, time slices, is not
    /// used).
    pub fn parse(text: &str) -> Option<Schedstat> {
        let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
        Some(Schedstat { run_ns: f.next()??, wait_ns: f.next()?? })
    }
}

/// The `schedstat` of thread `tid` of a process.
pub fn schedstat(of: Proc, tid: i32) -> Option<Schedstat> {
    Schedstat::parse(&small(&of.path(Some(tid), "schedstat"))?)
}

// ------------------------------------------------------- other files

/// `TracerPid` from the text of a `status` file (0: not traced).
pub fn parse_tracer_pid(status: &str) -> Option<i32> {
    status.lines().find_map(|l| l.strip_prefix("TracerPid:")).and_then(|v| v.trim().parse().ok())
}

/// A number of `status` (`VmHWM:\t  1234 kB`: its first number; the unit
/// is the caller's to know).
pub fn status_number(status: &str, name: &str) -> Option<u64> {
    let value = status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?;
    value.split_whitespace().next()?.parse().ok()
}

/// What a process has used so far, as `getrusage()` tells a process of
/// itself (None where `/proc` has nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// CPU seconds in user and system mode.
    pub user: Option<f64>,
    pub system: Option<f64>,
    /// The same of its children, waited for or not (see [`children_time`]).
    pub children_user: Option<f64>,
    pub children_system: Option<f64>,
    /// The peak resident set, in bytes.
    pub max_rss: Option<f64>,
    pub minor_faults: Option<f64>,
    pub major_faults: Option<f64>,
    /// Context switches it made (waiting) and that were forced on it.
    pub voluntary_switches: Option<f64>,
    pub involuntary_switches: Option<f64>,
}

impl Usage {
    /// From the text of `stat` and `status` (either may be missing).
    pub(crate) fn parse(stat: Option<&str>, status: Option<&str>) -> Usage {
        let stat = stat.and_then(Stat::parse);
        let ticks = clock_ticks() as f64;
        let field = |name: &str| status.and_then(|s| status_number(s, name)).map(|v| v as f64);
        Usage {
            user: stat.map(|s| s.utime as f64 / ticks),
            system: stat.map(|s| s.stime as f64 / ticks),
            children_user: stat.map(|s| s.cutime as f64 / ticks),
            children_system: stat.map(|s| s.cstime as f64 / ticks),
            max_rss: field("VmHWM").map(|kib| kib * 1024.0),
            minor_faults: stat.map(|s| s.minflt as f64),
            major_faults: stat.map(|s| s.majflt as f64),
            voluntary_switches: field("voluntary_ctxt_switches"),
            involuntary_switches: field("nonvoluntary_ctxt_switches"),
        }
    }
}

/// What process `of` has used so far; its children's time counts those it
/// has not waited for yet (see [`children_time`]).
pub fn usage(of: Proc) -> Usage {
    let status = std::fs::read_to_string(of.path(None, "status")).ok();
    let mut text = None;
    let children = children_time(of, || {
        text = std::fs::read_to_string(of.path(None, "stat")).ok();
        let s = Stat::parse(text.as_deref()?)?;
        let ticks = clock_ticks() as f64;
        Some((s.cutime as f64 / ticks, s.cstime as f64 / ticks))
    });
    let mut usage = Usage::parse(text.as_deref(), status.as_deref());
    if let Some((user, system)) = children {
        usage.children_user = Some(user);
        usage.children_system = Some(system);
    }
    usage
}

/// Clock ticks per second, the unit of `stat`'s times (`USER_HZ`).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// Where in the kernel thread `tid` of a process waits (`wchan`: a kernel
/// function's name; None when unreadable or not waiting).
pub fn wchan(of: Proc, tid: i32) -> Option<String> {
    let text = std::fs::read_to_string(of.path(Some(tid), "wchan")).ok()?;
    let name = text.trim();
    (!name.is_empty() && name != "0").then(|| name.to_string())
}

/// The kilobytes of a process's executable file mappings, from the text of
/// its `status` (`VmExe` + `VmLib`): a library loaded or unloaded changes
/// them.
pub fn parse_exec_kb(status: &str) -> Option<u64> {
    let kb = |name: &str| -> Option<u64> {
        let v = status.lines().find_map(|l| l.strip_prefix(name))?;
        v.split_whitespace().next()?.parse().ok()
    };
    Some(kb("VmExe:")? + kb("VmLib:")?)
}

/// [`parse_exec_kb`] of a process now (the kernel keeps the figures
/// without walking the mappings, unlike `maps`).
pub fn exec_kb(of: Proc) -> Option<u64> {
    parse_exec_kb(&small(&of.path(None, "status"))?)
}

/// The tracer of a process (or of a thread, by its id).
pub fn tracer_pid(of: Proc) -> Option<i32> {
    parse_tracer_pid(&small(&of.path(None, "status"))?)
}

/// The value of `name` in `environ` bytes (`NAME=value`, NUL-separated).
pub fn environ_value(environ: &[u8], name: &str) -> Option<String> {
    environ.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
    })
}

/// The value of `name` in the environment a process started with.
pub fn environment_value(of: Proc, name: &str) -> Option<String> {
    environ_value(&std::fs::read(of.path(None, "environ")).ok()?, name)
}

/// The path of a process's executable (the target of its `exe` link).
pub fn exe(of: Proc) -> io::Result<String> {
    std::fs::read_link(of.path(None, "exe")).map(|p| p.to_string_lossy().into_owned())
}

/// Whether process `pid` is there (its directory is).
pub fn exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Process `pid`'s memory, as a file read at addresses.
pub fn open_mem(pid: i32) -> io::Result<std::fs::File> {
    std::fs::File::open(Proc::Pid(pid).path(None, "mem"))
}

/// Yama's `ptrace_scope` setting, if the system has one.
pub fn ptrace_scope() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").map(|s| s.trim().to_string()).ok()
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_size_of_executable_mappings_is_read_from_status() {
        let status =
            "Name:\tR\nVmPeak:\t  900 kB\nVmExe:\t       8 kB\nVmLib:\t   41234 kB\nVmPTE:\t 300 kB\n";
        assert_eq!(parse_exec_kb(status), Some(41242));
        assert_eq!(parse_exec_kb("Name:\tkthreadd\n"), None, "a kernel thread has no memory figures");
        let mine = exec_kb(Proc::This).expect("this process has executable mappings");
        assert!(mine > 0);
    }

    use super::*;

    const MAPS: &str = concat!(
        "55d0c0000000-55d0c0001000 r--p 00000000 08:01 1234                       /usr/lib/R/bin/exec/R\n",
        "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n",
        "7f1c2a000000-7f1c2a021000 r-xp 00001000 fd:01 1234567                    /tmp/a file.so\n",
        "7f1c2b000000-7f1c2b001000 rw-s 00000000 00:05 42                         /memfd:winch (deleted)\n",
        "7ffd1000-7ffd3000 r-xp 00000000 00:00 0                                  [vdso]\n",
    );

    #[test]
    fn maps_lines_with_and_without_paths() {
        let m: Vec<MapsLine> = maps_lines(MAPS).collect();
        assert_eq!(m.len(), 5);
        assert_eq!((m[0].start, m[0].end, m[0].offset), (0x55d0c0000000, 0x55d0c0001000, 0));
        assert_eq!(m[0].path, "/usr/lib/R/bin/exec/R");
        assert_eq!((m[0].dev, m[0].inode), (libc::makedev(8, 1) as u64, 1234));
        assert_eq!(m[0].perms, Perms { read: true, write: false, exec: false, shared: false });
        // Anonymous: no path (the kernel ends the line with a space).
        assert_eq!((m[1].path, m[1].inode, m[1].dev), ("", 0, 0));
        assert!(m[1].perms.write && !m[1].perms.exec);
        // A path with spaces in it, and an offset.
        assert_eq!((m[2].offset, m[2].path), (0x1000, "/tmp/a file.so"));
        assert_eq!(m[2].dev, libc::makedev(0xfd, 1) as u64);
        assert!(m[2].perms.exec && m[2].perms.read);
        // A file deleted since keeps the kernel's mark; a shared mapping.
        assert_eq!(m[3].path, "/memfd:winch (deleted)");
        assert!(m[3].perms.shared);
        assert_eq!(m[4].path, "[vdso]");
        // Owned, the same.
        let owned = parse_maps(MAPS);
        assert_eq!(owned.len(), 5);
        assert_eq!(owned[2], m[2].to_mapping());
        assert_eq!(owned[2].path, "/tmp/a file.so");
    }

    #[test]
    fn malformed_maps_lines_are_skipped() {
        for bad in [
            "",
            "garbage",
            "7f12a000-7f12c000",
            "7f12a000-7f12c000 rw-p 00000000 00:00",
            "7f12a000 rw-p 00000000 00:00 0",
            "7f12a000-zz rw-p 00000000 00:00 0",
            "7f12a000-7f12c000 rw-p 0000000g 00:00 0",
            "7f12a000-7f12c000 rw-p 00000000 0000 0",
            "7f12a000-7f12c000 rw-p 00000000 00:00 x",
            // An empty or inverted range.
            "2000-1000 rw-p 00000000 00:00 0",
            "2000-2000 rw-p 00000000 00:00 0",
        ] {
            assert_eq!(MapsLine::parse(bad), None, "{bad:?}");
        }
        // Between good lines, a bad one is skipped alone.
        let text = "1000-2000 r--p 00000000 00:00 0\nnonsense\n3000-4000 r-xp 00000000 00:00 0 /x\n";
        let ranges: Vec<(usize, usize)> = maps_lines(text).map(|l| (l.start, l.end)).collect();
        assert_eq!(ranges, [(0x1000, 0x2000), (0x3000, 0x4000)]);
        // An anonymous mapping's line, as the kernel ends it.
        let l = MapsLine::parse("7f12a000-7f12c000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((l.start, l.end, l.path), (0x7f12a000, 0x7f12c000, ""));
        // Extra spaces between the fields are allowed.
        let l = MapsLine::parse("7f12a000-7f12c000  rw-p 00000000 00:00 0").unwrap();
        assert_eq!((l.start, l.end, l.path), (0x7f12a000, 0x7f12c000, ""));
    }

    #[test]
    fn permissions_as_protection_bits() {
        let prot = |f: &str| Perms::parse(f).prot();
        assert_eq!(prot("r--p"), libc::PROT_READ);
        assert_eq!(prot("rw-p"), libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(prot("r-xp"), libc::PROT_READ | libc::PROT_EXEC);
        assert_eq!(prot("rwxs"), libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC);
        assert_eq!(prot("---p"), 0);
        // Short or odd fields: each letter only at its place.
        assert_eq!(prot("r"), libc::PROT_READ);
        assert_eq!(prot("xwr"), libc::PROT_WRITE);
        assert_eq!(Perms::parse(""), Perms::default());
    }

    #[test]
    fn this_process_maps_hold_its_code() {
        let text = read_maps(Proc::This).unwrap();
        let here = this_process_maps_hold_its_code as fn() as usize;
        let code = maps_lines(&text).find(|l| l.start <= here && here < l.end).expect("this code is mapped");
        assert!(code.perms.exec && code.perms.read, "{code:?}");
        assert!(code.path.starts_with('/') && code.inode != 0, "{code:?}");
        // By number, the same file.
        let by_pid = read_maps(Proc::Pid(std::process::id() as i32)).unwrap();
        assert!(maps_lines(&by_pid).any(|l| l.start == code.start && l.path == code.path));
        assert!(read_maps(Proc::Pid(i32::MAX)).is_err());
    }

    #[test]
    fn command_lines() {
        assert_eq!(
            parse_cmdline(b"/usr/lib/R/bin/exec/R\0--no-echo\0-e\0f(1)\0"),
            "/usr/lib/R/bin/exec/R --no-echo -e f(1)"
        );
        assert_eq!(parse_cmdline(b""), "");
        assert!(!cmdline(Proc::This).is_empty());
        assert_eq!(cmdline(Proc::Pid(i32::MAX)), "");
    }

    #[test]
    fn a_parent_is_read_and_descent_followed() {
        let line = "42 (a (b) c) S 7 42 42 0 -1 4194560";
        assert_eq!(parse_parent(line), Some(7));
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        assert_eq!(parent(pid), Some(me));
        assert!(descends_from(pid, me));
        assert!(!descends_from(me, pid));
        assert!(!descends_from(i32::MAX, me), "gone");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn small_files_read_as_read_to_string_reads_them() {
        // (Figures in them change between the two reads: their shape
        // does not. `maps` does, as other tests' threads start.)
        for f in ["/proc/self/stat", "/proc/self/status"] {
            let (a, b) = (small(f).unwrap(), std::fs::read_to_string(f).unwrap());
            assert_eq!(a.lines().count(), b.lines().count(), "{f}");
            assert_eq!(a.split_whitespace().count(), b.split_whitespace().count(), "{f}");
        }
        let cmdline = "/proc/self/cmdline";
        assert_eq!(small(cmdline).unwrap(), std::fs::read_to_string(cmdline).unwrap());
        // Past the stack buffer.
        let path = std::env::temp_dir().join(format!("winch-small-{}", std::process::id()));
        let text: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        assert_eq!(small(path.to_str().unwrap()).as_deref(), Some(text.as_str()));
        std::fs::remove_file(&path).unwrap();
        assert!(small("/proc/self/no-such-file").is_none());
    }

    #[test]
    fn paths_of_processes_and_threads() {
        assert_eq!(Proc::This.path(Some(5), "comm"), "/proc/self/task/5/comm");
        assert_eq!(Proc::Pid(7).path(None, "stat"), "/proc/7/stat");
        assert_eq!(Proc::Pid(7).path(Some(8), "schedstat"), "/proc/7/task/8/schedstat");
    }

    #[test]
    fn task_entries_and_this_process_threads() {
        assert_eq!(task_id("1234"), Some(1234));
        assert_eq!(task_id("."), None);
        assert_eq!(task_id(".."), None);
        assert_eq!(task_id("12a"), None);
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        assert!(task_ids(Proc::This).unwrap().contains(&me));
        assert!(task_ids(Proc::Pid(std::process::id() as i32)).unwrap().contains(&me));
        assert!(task_ids(Proc::Pid(i32::MAX)).is_err());
        // Two links and one a thread (this one at least).
        assert!(task_links() >= 3, "{}", task_links());
    }

    #[test]
    fn comm_text_and_a_named_thread() {
        assert_eq!(parse_comm("bash\n"), "bash");
        assert_eq!(parse_comm("my (odd) thread\n"), "my (odd) thread");
        assert_eq!(parse_comm(""), "");
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("winch-comm t".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                tx.send(unsafe { libc::gettid() }).unwrap();
                done_rx.recv().unwrap();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        assert_eq!(comm(Proc::This, tid), "winch-comm t");
        assert_eq!(comm(Proc::Pid(std::process::id() as i32), tid), "winch-comm t");
        done_tx.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(comm(Proc::This, i32::MAX), "", "unreadable: empty");
    }

    #[test]
    fn children_files_text() {
        assert_eq!(parse_children("12 345 6789 ").collect::<Vec<_>>(), vec![12, 345, 6789]);
        assert_eq!(parse_children("").count(), 0);
    }

    /// This process's CPU seconds, or its children's as `children_time`
    /// counts them.
    fn cpu_seconds(who: libc::c_int) -> f64 {
        // SAFETY: a zeroed rusage is a valid value for getrusage to fill.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrusage(who, &mut u) }, 0);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(u.ru_utime) + secs(u.ru_stime)
    }

    fn children_seconds() -> f64 {
        own_children_time().map(|(u, s)| u + s).unwrap()
    }

    /// Forks a child that burns `seconds` of CPU and leaves.
    fn burner(seconds: f64) -> i32 {
        // SAFETY: the child only reads its clock and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            while cpu_seconds(libc::RUSAGE_SELF) < seconds {}
            // SAFETY: leaves the child at once, nothing run at exit.
            unsafe { libc::_exit(0) };
        }
        pid
    }

    #[test]
    fn a_child_not_waited_for_counts_living_ended_and_waited_for() {
        if children(Proc::This).is_none() {
            eprintln!("skipped: this kernel has no task/*/children files");
            return;
        }
        // In a process of its own, whose only child is the burner (other
        // tests start children of this one). The steps report by exit
        // status: 0 all held, else the number of the one that failed.
        // SAFETY: the probe reads /proc and its clocks, forks, waits and
        // leaves with _exit; glibc's malloc is usable after fork.
        let probe = unsafe { libc::fork() };
        if probe == 0 {
            let step = || -> i32 {
                let before = children_seconds();
                let pid = burner(0.3);
                if pid <= 0 || children(Proc::This).is_none_or(|c| c != [pid]) {
                    return 1; // listed while it lives
                }
                while stat(Proc::Pid(pid), None).is_some_and(|s| s.state != 'Z') {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                let ended = children_seconds();
                if ended - before < 0.28 {
                    return 2; // ended, not waited for: its time counted
                }
                let mut status = 0;
                // SAFETY: the probe's own child.
                if unsafe { libc::waitpid(pid, &mut status, 0) } != pid
                    || children(Proc::This) != Some(vec![])
                {
                    return 3;
                }
                let waited = children_seconds();
                if (waited - ended).abs() > 0.02 {
                    return 4; // waited for: counted once, in the account
                }
                0
            };
            let code = step();
            // SAFETY: leaves the probe at once.
            unsafe { libc::_exit(code) };
        }
        assert!(probe > 0);
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(probe, &mut status, 0) }, probe);
        assert!(libc::WIFEXITED(status), "the probe did not leave normally: {status}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "the step that failed (see the test)");
    }

    /// A `stat` line: `comm`, then the state and the fields after it, with
    /// utime and stime at their places.
    fn stat_line(comm: &str, state: char, utime: u64, stime: u64) -> String {
        format!(
            "4242 ({comm}) {state} 1 4242 4242 34816 4242 4194560 1234 0 5 0 {utime} {stime} 0 0 20 0 3 0"
        )
    }

    #[test]
    fn start_time_after_the_name_and_the_processes_listed() {
        let line = format!("{} 99 12 0 0", stat_line("a) (b", 'S', 1, 2));
        assert_eq!(parse_start(&line), Some(99));
        assert_eq!(parse_start(&stat_line("R", 'R', 1, 2)), None);
        let me = std::process::id() as i32;
        assert!(pids().contains(&me));
        assert!(start_ticks(me).is_some_and(|t| t > 0));
        assert_eq!(start_ticks(i32::MAX), None);
        // This process started before now, and a process started now
        // starts no earlier than now was.
        let before = now_ticks().unwrap();
        assert!(start_ticks(me).unwrap() <= before);
        let mut child = std::process::Command::new("sleep").arg("0.1").spawn().unwrap();
        let started = start_ticks(child.id() as i32);
        child.wait().unwrap();
        assert!(started.unwrap() >= before, "{started:?} {before}");
    }

    #[test]
    fn stat_state_and_cpu_ticks() {
        let s = Stat::parse(&stat_line("R", 'R', 150, 25)).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'R',
                flags: 4194560,
                minflt: 1234,
                majflt: 5,
                utime: 150,
                stime: 25,
                cutime: 0,
                cstime: 0
            }
        );
        assert!(!s.kernel_thread());
        assert_eq!(s.cpu_ticks(), 175);
        assert!(s.running() && !s.exiting());
        // A name with spaces and parentheses ends at the last ')'.
        let s = Stat::parse(&stat_line("a) (b c) S 9 9 9", 'S', 7, 8)).unwrap();
        assert_eq!(
            s,
            Stat {
                state: 'S',
                flags: 4194560,
                minflt: 1234,
                majflt: 5,
                utime: 7,
                stime: 8,
                cutime: 0,
                cstime: 0
            }
        );
        assert!(!s.running());
        // A kernel thread.
        let k = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 31 0 0 20 0 1 0 9 0 0 18446744073709551615";
        let kt = Stat::parse(k).unwrap();
        assert_eq!(
            kt,
            Stat {
                state: 'S',
                flags: 2129984,
                minflt: 0,
                majflt: 0,
                utime: 0,
                stime: 31,
                cutime: 0,
                cstime: 0
            }
        );
        assert!(kt.kernel_thread());
        assert!(Stat::parse(&stat_line("z", 'Z', 0, 0)).unwrap().exiting());
        assert!(Stat::parse(&stat_line("x", 'X', 0, 0)).unwrap().exiting());
        let killed = stat_line("R", 'R', 0, 0).replace(" 4194560 ", " 4194564 ");
        assert!(Stat::parse(&killed).unwrap().exiting(), "PF_EXITING");
        // Malformed: no name's end, fields missing, a time not a number.
        assert_eq!(Stat::parse("4242 (R S 1 2 3"), None);
        assert_eq!(Stat::parse("4242 (R) S 1 4242 4242 34816 4242 4194560 1234 0 0 0 150"), None);
        assert_eq!(Stat::parse("4242 (R)"), None);
        assert_eq!(Stat::parse(&stat_line("R", 'R', 1, 2).replace(" 1 2 0 0 20", " 1 x 0 0 20")), None);
    }

    #[test]
    fn a_threads_stat_gives_its_state_and_cpu_time() {
        let pid = std::process::id() as i32;
        // Use 50 ms of CPU (of this thread's own clock): several ticks.
        let cpu_ms = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes one timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
        };
        let t0 = cpu_ms();
        let mut x = 0u64;
        while cpu_ms() - t0 < 50 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let me = stat(Proc::Pid(pid), Some(tid)).expect("this thread's stat");
        assert_eq!(me.state, 'R', "a thread reading its own stat runs");
        assert!(me.cpu_ticks() >= 1, "50 ms of CPU is several ticks (of 10 ms), {x} turns");
        assert!(stat(Proc::Pid(pid), None).is_some());
        assert!(stat(Proc::This, Some(tid)).is_some_and(|s| s.running()));
        assert!(stat(Proc::Pid(pid), Some(i32::MAX)).is_none());
    }

    #[test]
    fn schedstat_run_and_wait_times() {
        assert_eq!(Schedstat::parse("123456 7890 12\n"), Some(Schedstat { run_ns: 123456, wait_ns: 7890 }));
        assert_eq!(Schedstat::parse("5 6"), Some(Schedstat { run_ns: 5, wait_ns: 6 }));
        assert_eq!(Schedstat::parse("123456\n"), None);
        assert_eq!(Schedstat::parse("x 1 2"), None);
        assert_eq!(Schedstat::parse(""), None);
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        // Read where the kernel keeps the file (some count no run time).
        let there = std::path::Path::new(&Proc::This.path(Some(tid), "schedstat")).exists();
        assert_eq!(schedstat(Proc::This, tid).is_some(), there);
        assert_eq!(schedstat(Proc::This, i32::MAX), None);
    }

    #[test]
    fn usage_from_stat_and_status() {
        let status =
            "Name:\tR\nVmHWM:\t  2048 kB\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_number(status, "VmHWM"), Some(2048));
        assert_eq!(status_number(status, "VmRSS"), None);
        assert_eq!(status_number("VmHWM:\tlots kB\n", "VmHWM"), None);
        let hz = clock_ticks() as f64;
        let u = Usage::parse(Some(&stat_line("R", 'S', 150, 25)), Some(status));
        assert_eq!(u.user, Some(150.0 / hz));
        assert_eq!(u.system, Some(25.0 / hz));
        assert_eq!(u.max_rss, Some(2048.0 * 1024.0));
        assert_eq!((u.minor_faults, u.major_faults), (Some(1234.0), Some(5.0)));
        assert_eq!((u.voluntary_switches, u.involuntary_switches), (Some(17.0), Some(3.0)));
        // A process gone, or a file unreadable: what is missing is None.
        assert_eq!(Usage::parse(None, None), Usage::default());
        assert_eq!(Usage::parse(Some("garbage"), Some(status)).user, None);
        let me = usage(Proc::This);
        assert!(me.user.is_some() && me.max_rss.is_some_and(|b| b > 0.0));
        assert_eq!(usage(Proc::Pid(i32::MAX)), Usage::default());
    }

    #[test]
    fn tracer_from_status() {
        let status = "Name:\tR\nState:\tS (sleeping)\nTracerPid:\t 811\nUid:\t1000\n";
        assert_eq!(parse_tracer_pid(status), Some(811));
        assert_eq!(parse_tracer_pid("Name:\tR\nTracerPid:\t0\n"), Some(0));
        assert_eq!(parse_tracer_pid("Name:\tR\n"), None);
        assert_eq!(parse_tracer_pid("TracerPid:\tnone\n"), None);
        assert!(tracer_pid(Proc::This).is_some());
        assert_eq!(tracer_pid(Proc::Pid(i32::MAX)), None);
    }

    #[test]
    fn a_variable_of_environ() {
        let env = b"A=1\0R_HOME=/usr/lib/R\0RX=2\0BAD=\xff\0EMPTY=\0";
        assert_eq!(environ_value(env, "R_HOME").as_deref(), Some("/usr/lib/R"));
        assert_eq!(environ_value(env, "RX").as_deref(), Some("2"));
        assert_eq!(environ_value(env, "EMPTY").as_deref(), Some(""));
        // A name is matched whole; a value that is not UTF-8 is not read.
        assert_eq!(environ_value(env, "R"), None);
        assert_eq!(environ_value(env, "BAD"), None);
        assert_eq!(environ_value(b"", "A"), None);
        assert_eq!(environment_value(Proc::Pid(i32::MAX), "PATH"), None);
    }

    #[test]
    fn executable_and_existence() {
        let exe = exe(Proc::This).unwrap();
        assert_eq!(exe, std::env::current_exe().unwrap().to_string_lossy());
        assert!(exists(std::process::id() as i32));
        assert!(!exists(i32::MAX));
        assert!(self::exe(Proc::Pid(i32::MAX)).is_err());
    }
}
