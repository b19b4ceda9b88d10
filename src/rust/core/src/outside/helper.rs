//! winch's tracer process: it stops this process's own descendants
//! (callr's R sessions, `system()`'s programs) for the moment a sample
//! reads them, on this process's behalf.
//!
//! ptrace reports a tracee's stops to its tracer's whole thread group, and
//! a tracee whose real parent is in the tracer's thread group has its
//! stops reported to its parent's `waitpid()` as its tracer's: processx's,
//! parallel's or R's own wait for a child could take, for its child's end,
//! a stop winch caused. So a process of its own traces them (`winch-tracer`,
//! installed in the package's `bin`; its `main` is [`main`]): it is asked
//! over a pipe to stop a process, says which threads stopped with their
//! registers, and lets the process go on when told (or when the pipe
//! closes, or when it ends: the kernel then lets its tracees go). This
//! process reads the stopped process's memory itself, as it reads any
//! other's.
//!
//! Each stop is made by a thread of the tracer process that ends after it
//! (`ptrace::traced_via`), as this process's own reads are, so that nothing is
//! held between two reads. The tracer runs while something keeps it
//! ([`keep`]: a recording, a profile's reading of processes), in a
//! process group of its own (a Ctrl-C to R is not one to it); it ends
//! when its pipe closes (let go, or this process ended however it ended)
//! and is waited for when let go.
//!
//! The protocol, one line each way at a time:
//! `winch-tracer 1` (the tracer, once started); `stop PID` (asked), then
//! `t\tTID\tRIP\tRSP\tRBP\tWAITING\tNAME` for each thread stopped,
//! `u\tTID\tNAME\tWHY` for each that did not stop, and `stopped`; or
//! `err\tCLASS\tMESSAGE`; `go` (asked), then `ok` or `err\t...`.

use super::ptrace::{Thread, Unstopped};
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The first line the tracer writes: its protocol's version.
const HELLO: &str = "winch-tracer 1";

/// The tracer process running, with its pipes.
struct Conn {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
}

/// The tracer processes not serving a stop now. Each serves one stop at
/// a time, from `stop` to `go` (see [`Lease`]); a stop asked while all
/// are serving starts another (a slow stop, of a process with a thread
/// blocked in the kernel, keeps its tracer seconds: no other waits for
/// it).
static IDLE: Mutex<Vec<Conn>> = Mutex::new(Vec::new());
/// How many keep the tracers running (see [`keep`]); counted with `IDLE`
/// locked.
static KEEPERS: AtomicUsize = AtomicUsize::new(0);
/// The pids of the tracer processes running: not among the processes
/// working for this one (see `relatives`).
static PIDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The pids of winch's tracer processes running now.
pub fn pids() -> Vec<i32> {
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn idle() -> std::sync::MutexGuard<'static, Vec<Conn>> {
    // (A panic while it was held left nothing half-done that matters: a
    // broken pipe is found at the next request.)
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps the tracer processes running (once started) while held: the
/// last one let go ends those idle (a tracer serving a stop ends when its
/// stop does).
pub struct Keep(());

/// See [`Keep`].
pub fn keep() -> Keep {
    let _idle = idle();
    KEEPERS.fetch_add(1, Ordering::AcqRel);
    Keep(())
}

impl Drop for Keep {
    fn drop(&mut self) {
        let mut idle = idle();
        if KEEPERS.fetch_sub(1, Ordering::AcqRel) == 1 {
            let all = std::mem::take(&mut *idle);
            drop(idle);
            all.into_iter().for_each(end);
        }
    }
}

/// Ends tracer process `conn`: its pipe closed, it lets go of anything it
/// holds and ends, and is waited for (it is this process's child; nobody
/// else waits for it).
fn end(conn: Conn) {
    let Conn { mut child, to, from } = conn;
    drop(to);
    drop(from);
    let pid = child.id() as i32;
    let _ = child.wait();
    PIDS.lock().unwrap_or_else(|e| e.into_inner()).retain(|&p| p != pid);
}

/// A tracer process holding a process stopped, until [`go`].
pub(super) struct Lease(Conn);

/// Back to the idle ones once its stop is over (ended if nothing keeps
/// the tracers, or if it no longer answers).
fn give_back(conn: Conn, broken_pipe: bool) {
    let mut idle = idle();
    if broken_pipe || KEEPERS.load(Ordering::Acquire) == 0 {
        drop(idle);
        end(conn);
    } else {
        idle.push(conn);
    }
}

/// Asks a tracer process (started if none is idle) to stop process
/// `pid`: its threads stopped and those that did not stop. It stays
/// stopped until [`go`].
pub(super) fn stop(pid: i32) -> Result<(Vec<Thread>, Vec<Unstopped>, Lease)> {
    let taken = idle().pop();
    let mut conn = match taken {
        Some(c) => c,
        None => start()?,
    };
    let got = ask(&mut conn, &format!("stop {pid}")).and_then(|()| {
        let mut threads = Vec::new();
        let mut unstopped = Vec::new();
        loop {
            let line = answer(&mut conn)?;
            if line == "stopped" {
                return Ok((threads, unstopped));
            }
            match parse_line(&line)? {
                Line::Thread(t) => threads.push(t),
                Line::Unstopped(u) => unstopped.push(u),
            }
        }
    });
    match got {
        Ok((threads, unstopped)) => Ok((threads, unstopped, Lease(conn))),
        Err(e) => {
            give_back(conn, broken(&e));
            Err(e)
        }
    }
}

/// Tells the tracer process of `lease` to let process `pid` go on (see
/// `ptrace::Stopped::finish`: an error if it ended, or ran another
/// program, while it was read).
pub(super) fn go(lease: Lease, pid: i32) -> Result<()> {
    let Lease(mut conn) = lease;
    let got = ask(&mut conn, "go").and_then(|()| match answer(&mut conn)?.as_str() {
        "ok" => Ok(()),
        other => Err(parse_error(other)),
    });
    let lost = got.as_ref().is_err_and(broken);
    give_back(conn, lost);
    // (A tracer that no longer answers has ended, and the kernel let its
    // tracee go then.)
    got.map_err(|e| match e {
        Error::Unavailable(why) => Error::NoProcess(format!("process {pid} was let go when {why}")),
        other => other,
    })
}

/// An error that says the tracer process is no longer there to talk to.
fn broken(e: &Error) -> bool {
    matches!(e, Error::Unavailable(_))
}

fn ask(conn: &mut Conn, line: &str) -> Result<()> {
    writeln!(conn.to, "{line}").and_then(|()| conn.to.flush()).map_err(|e| lost(&e))
}

fn answer(conn: &mut Conn) -> Result<String> {
    let mut line = String::new();
    match conn.from.read_line(&mut line) {
        Ok(0) => Err(lost(&std::io::Error::from(std::io::ErrorKind::UnexpectedEof))),
        Ok(_) => {
            let line = line.trim_end_matches('\n').to_string();
            if let Some(e) = line.strip_prefix("err\t") {
                return Err(parse_error(e));
            }
            Ok(line)
        }
        Err(e) => Err(lost(&e)),
    }
}

fn lost(e: &std::io::Error) -> Error {
    Error::Unavailable(format!("winch's tracer process stopped answering ({e})"))
}

/// Starts the tracer process and reads its greeting.
fn start() -> Result<Conn> {
    let mut cmd = command()?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    // (A Ctrl-C in R's terminal goes to R's process group, not to it.)
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // The fork handlers of a running profile do nothing for it (see
    // `crate::fork::quietly`), were it started with fork().
    let mut child = crate::fork::quietly(|| cmd.spawn())
        .map_err(|e| Error::Unavailable(format!("winch's tracer process could not be started: {e}")))?;
    let (Some(to), Some(out)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Error::Unavailable("winch's tracer process has no pipes".into()));
    };
    let mut conn = Conn { child, to, from: BufReader::new(out) };
    // (Lines before the greeting are not the tracer's: a test binary's.)
    for _ in 0..16 {
        match answer(&mut conn) {
            Ok(line) if line == HELLO => {
                PIDS.lock().unwrap_or_else(|e| e.into_inner()).push(conn.child.id() as i32);
                return Ok(conn);
            }
            Ok(_) => continue,
            Err(e) => {
                let _ = conn.child.kill();
                let _ = conn.child.wait();
                return Err(e);
            }
        }
    }
    let _ = conn.child.kill();
    let _ = conn.child.wait();
    Err(Error::Unavailable("winch's tracer process did not greet".into()))
}

/// How the tracer process is started: `WINCH_TRACER` when set, else the
/// package's `bin/winch-tracer` (next to the `libs` directory of the
/// library this code is in).
#[cfg(not(test))]
fn command() -> Result<Command> {
    let path = match std::env::var_os("WINCH_TRACER") {
        Some(p) => std::path::PathBuf::from(p),
        None => beside_library("bin/winch-tracer")?,
    };
    if !path.is_file() {
        return Err(Error::Unavailable(format!(
            "winch's tracer program ({}) is not there: reinstall winch",
            path.display()
        )));
    }
    Ok(Command::new(path))
}

/// In cargo's tests: this test binary, running [`tests::tracer_process`].
#[cfg(test)]
fn command() -> Result<Command> {
    let exe = std::env::current_exe().map_err(|e| Error::Unavailable(e.to_string()))?;
    let mut c = Command::new(exe);
    c.args(["--ignored", "--exact", "outside::helper::tests::tracer_process", "--nocapture"]);
    c.env("WINCH_TRACER_TEST", "1");
    Ok(c)
}

/// `rel` from the directory above the one holding the library this code
/// is in (`.../winch/libs/winch.so`: `.../winch/rel`).
#[cfg(not(test))]
fn beside_library(rel: &str) -> Result<std::path::PathBuf> {
    // SAFETY: Dl_info is plain data; dladdr fills it for an address of
    // this library's code and returns 0 when it knows none.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the address is a function of this library.
    let found = unsafe { libc::dladdr(beside_library as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return Err(Error::Unavailable("winch's library could not be found, nor its tracer program".into()));
    }
    // SAFETY: dladdr set dli_fname to a NUL-terminated path it keeps.
    let lib = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let lib =
        std::path::Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(lib.to_bytes()));
    let root = lib.parent().and_then(|d| d.parent()).unwrap_or(std::path::Path::new("."));
    Ok(root.join(rel))
}

/// A line of the tracer's answer to `stop`.
enum Line {
    Thread(Thread),
    Unstopped(Unstopped),
}

/// Text in a field of a line: no tab, no line end.
fn field(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

fn thread_line(t: &Thread) -> String {
    let (ip, sp, fp) = t.regs;
    format!("t\t{}\t{ip}\t{sp}\t{fp}\t{}\t{}", t.tid, u8::from(t.waiting), field(&t.name))
}

fn unstopped_line(u: &Unstopped) -> String {
    format!("u\t{}\t{}\t{}", u.tid, field(&u.name), field(&u.why))
}

fn error_line(e: &Error) -> String {
    format!("err\t{}\t{}", e.class(), field(&e.to_string()))
}

fn parse_line(line: &str) -> Result<Line> {
    let bad = || Error::Internal(format!("winch's tracer process answered {line:?}"));
    let f: Vec<&str> = line.split('\t').collect();
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<usize>().ok()).ok_or_else(bad);
    match f.first() {
        Some(&"t") if f.len() == 7 => Ok(Line::Thread(Thread {
            tid: num(1)? as i32,
            regs: (num(2)?, num(3)?, num(4)?),
            waiting: f[5] == "1",
            name: f[6].to_string(),
        })),
        Some(&"u") if f.len() == 4 => Ok(Line::Unstopped(Unstopped {
            tid: num(1)? as i32,
            name: f[2].to_string(),
            why: f[3].to_string(),
        })),
        _ => Err(bad()),
    }
}

/// The error an `err` line (without its `err\t`) stands for: of the kind
/// its class names (see `Error::from_class`). (An unavailable tracer is
/// one that stopped answering, see `broken`: the tracer saying so itself
/// is winch's defect.)
fn parse_error(rest: &str) -> Error {
    let (class, msg) = rest.split_once('\t').unwrap_or(("", rest));
    match Error::from_class(class, msg.to_string()) {
        Some(Error::Unavailable(m)) => Error::Internal(m),
        Some(e) => e,
        None => Error::Internal(msg.to_string()),
    }
}

/// The tracer process's work: answers requests from `input` on `output`
/// until `input` ends; 0 then, 1 when `output` breaks.
pub fn serve<I: BufRead + Send, O: Write + Send>(mut input: I, mut output: O) -> i32 {
    if writeln!(output, "{HELLO}").and_then(|()| output.flush()).is_err() {
        return 1;
    }
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let reply = match line.trim().strip_prefix("stop ").map(str::parse::<i32>) {
            Some(Ok(pid)) if pid > 0 => serve_stop(pid, &mut input, &mut output),
            _ => Err(Error::BadArgument(format!("not a request: {:?}", line.trim()))),
        };
        let text = match reply {
            Ok(()) => "ok".to_string(),
            Err(e) => error_line(&e),
        };
        if writeln!(output, "{text}").and_then(|()| output.flush()).is_err() {
            return 1;
        }
    }
}

/// One `stop`: the process stopped (by a thread that ends after it),
/// what stopped written, and the process let go at `go` (or when `input`
/// ends: it is let go then too).
fn serve_stop<I: BufRead + Send, O: Write + Send>(pid: i32, input: &mut I, output: &mut O) -> Result<()> {
    let io = |e: std::io::Error| Error::Io(format!("winch's tracer process's pipe: {e}"));
    let mut told = false;
    let got = super::ptrace::traced_via(pid, super::ptrace::Via::Thread, |tracer| {
        let stopped = tracer.stop()?;
        for t in &stopped.threads {
            writeln!(output, "{}", thread_line(t)).map_err(io)?;
        }
        for u in &stopped.unstopped {
            writeln!(output, "{}", unstopped_line(u)).map_err(io)?;
        }
        writeln!(output, "stopped").and_then(|()| output.flush()).map_err(io)?;
        told = true;
        let mut line = String::new();
        // (An ended pipe: `stopped` dropped lets the process go.)
        if input.read_line(&mut line).map_err(io)? == 0 {
            return Err(Error::Io("winch's tracer process's pipe closed".into()));
        }
        stopped.finish()
    });
    if let (false, Err(e)) = (told, &got) {
        // Not stopped: the answer to `stop` is the error itself.
        return Err(e.clone());
    }
    got
}

/// The tracer program's `main`: its pipes on standard input and output.
pub fn main() -> i32 {
    // SAFETY: closes the descriptors it inherited above its pipes (R's
    // files and sockets, which it must not keep open) and ignores SIGPIPE
    // (a closed pipe is an error, not its end); no memory is passed.
    // (Its end comes with its input's: when the process that started it
    // ends, however it ends, the pipe closes.)
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let input = std::io::BufReader::new(std::io::stdin());
    serve(input, std::io::stdout())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The tracer process the tests start (see `command`): not a test of
    /// its own.
    #[test]
    #[ignore = "the tracer process the tests start: not a test of its own"]
    fn tracer_process() {
        if std::env::var_os("WINCH_TRACER_TEST").is_none() {
            return;
        }
        std::process::exit(main());
    }

    #[test]
    fn a_child_is_stopped_by_a_tracer_process_and_its_parent_never_sees_the_stop() {
        use super::super::ptrace::{via_for, with_stopped, Via};
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert_eq!(via_for(pid), Via::Helper, "this process's child");
        assert_eq!(via_for(1), Via::Thread, "not its descendant");
        let seen = with_stopped(pid, |s| {
            // (The tracer is a thread of a tracer process.)
            let tracer = crate::procfs::tracer_pid(crate::procfs::Proc::Pid(pid)).and_then(|t| {
                let status = std::fs::read_to_string(format!("/proc/{t}/status")).ok()?;
                crate::procfs::status_number(&status, "Tgid").map(|g| g as i32)
            });
            // What this process, its parent, is told of it meanwhile:
            // nothing (a stop reported here is what R's waitpid() would
            // have taken for its child's end).
            let mut status = 0;
            // SAFETY: waitpid of our own child, WNOHANG: never blocks.
            let waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::WUNTRACED) };
            (s.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), tracer, pids(), waited)
        });
        let after = crate::procfs::tracer_pid(crate::procfs::Proc::Pid(pid));
        let _ = child.kill();
        let status = child.wait().unwrap();
        let (threads, tracer, tracers, waited) = seen.unwrap();
        assert_eq!(threads, vec![pid]);
        assert!(tracer.is_some_and(|t| tracers.contains(&t)), "{tracer:?} {tracers:?}");
        assert_eq!(waited, 0, "no news of the child while it was stopped");
        assert_eq!(after, Some(0), "let go");
        // Its end is its parent's to see, as a kill.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn lines_read_back_as_written() {
        let t = Thread { tid: 7, name: "a\tb\nc".into(), regs: (1, 2, usize::MAX), waiting: true };
        match parse_line(&thread_line(&t)).unwrap() {
            Line::Thread(back) => {
                assert_eq!((back.tid, back.regs, back.waiting), (7, (1, 2, usize::MAX), true));
                assert_eq!(back.name, "a b c");
            }
            _ => panic!("not a thread"),
        }
        let u = Unstopped { tid: 9, name: "w".into(), why: "blocked in the kernel (D)".into() };
        match parse_line(&unstopped_line(&u)).unwrap() {
            Line::Unstopped(back) => assert_eq!(back, u),
            _ => panic!("not an unstopped thread"),
        }
        assert!(matches!(parse_line("t\tx"), Err(Error::Internal(_))));
        let e = Error::Permission("not allowed\tto".into());
        let line = error_line(&e);
        assert_eq!(
            parse_error(line.strip_prefix("err\t").unwrap()),
            Error::Permission("not allowed to".into())
        );
        assert_eq!(parse_error("winch_error_no_process\tgone"), Error::NoProcess("gone".into()));
    }

    #[test]
    fn a_request_it_does_not_know_is_refused_and_it_ends_with_its_input() {
        let mut out = Vec::new();
        assert_eq!(serve("dance\nstop -3\n".as_bytes(), &mut out), 0);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HELLO);
        assert!(lines[1].starts_with("err\twinch_error_bad_argument\t"), "{text}");
        assert!(lines[2].starts_with("err\twinch_error_bad_argument\t"), "{text}");
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn a_process_that_is_not_there_is_an_error_of_its_kind() {
        let mut out = Vec::new();
        assert_eq!(serve(format!("stop {}\n", i32::MAX).as_bytes(), &mut out), 0);
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().nth(1).unwrap().starts_with("err\twinch_error_no_process\t"), "{text}");
    }
}
