//! Stopping every thread of another process for as long as it is read, with
//! `ptrace`: `PTRACE_SEIZE` + `PTRACE_INTERRUPT` (the process sees no
//! signal, and a system call it was blocked in is restarted when it goes
//! on), the registers of each stopped thread, and a detach on every way
//! out ([`Stopped`]'s `Drop`).

use crate::error::{Error, Result};
use crate::procfs::{self, Proc};
use std::time::{Duration, Instant};

/// A thread of the target, stopped, with the registers the walk starts
/// from.
#[derive(Clone, Debug)]
pub struct Thread {
    pub tid: i32,
    /// Its name (`/proc/PID/task/TID/comm`).
    pub name: String,
    /// `(rip, rsp, rbp)`.
    pub regs: (usize, usize, usize),
}

/// Every thread of a process, stopped until this is dropped.
pub struct Stopped {
    pub pid: i32,
    pub threads: Vec<Thread>,
    /// Threads seized (each is detached on drop) and the signal each was
    /// stopped with that must be delivered when it goes on (0: none).
    seized: Vec<(i32, i32)>,
}

/// How long one thread may take to stop.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The thread ids of process `pid` now.
pub fn task_ids(pid: i32) -> Result<Vec<i32>> {
    let mut tids = procfs::task_ids(Proc::Pid(pid))
        .map_err(|e| Error::NoProcess(format!("no process {pid} to read ({e})")))?;
    tids.sort_unstable();
    // The main thread (tid == pid) first.
    if let Some(i) = tids.iter().position(|&t| t == pid) {
        tids[..=i].rotate_right(1);
    }
    Ok(tids)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Stopped {
    /// Stops every thread of `pid` (threads started meanwhile too) and reads
    /// their registers. On any error the threads stopped so far go on.
    pub fn stop(pid: i32) -> Result<Stopped> {
        let mut s = Stopped { pid, threads: Vec::new(), seized: Vec::new() };
        // New threads may start while others are being stopped: list
        // again until a listing finds none.
        for _round in 0..8 {
            let mut found = false;
            for tid in task_ids(pid)? {
                if s.seized.iter().any(|&(t, _)| t == tid) {
                    continue;
                }
                found = true;
                match s.seize(tid) {
                    Ok(()) => {}
                    // A thread that ended meanwhile is not an error; the
                    // process itself gone is.
                    Err(Gone) if tid != pid => {}
                    Err(Gone) => return Err(Error::NoProcess(format!("process {pid} has exited"))),
                    Err(Refused(e)) => return Err(e),
                }
            }
            if !found {
                break;
            }
        }
        for &(tid, _) in &s.seized {
            if let Some(regs) = registers(tid) {
                s.threads.push(Thread { tid, name: procfs::comm(Proc::Pid(pid), tid), regs });
            }
        }
        if s.threads.first().map(|t| t.tid) != Some(pid) {
            return Err(Error::Unreadable(format!("the main thread of process {pid} could not be stopped")));
        }
        Ok(s)
    }

    fn seize(&mut self, tid: i32) -> std::result::Result<(), SeizeError> {
        // SAFETY: PTRACE_SEIZE of a thread id; no memory is passed.
        let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => Gone,
                // An exiting thread cannot be traced either.
                Some(libc::EPERM) if exiting(tid) => Gone,
                Some(libc::EPERM) if tracer_of(tid).is_some_and(|t| t != 0) => Refused(Error::Busy(format!(
                    "process {} is already being traced by process {} (a debugger?): detach it first",
                    self.pid,
                    tracer_of(tid).unwrap_or(0)
                ))),
                Some(libc::EPERM) => Refused(Error::Permission(permission_advice(self.pid))),
                _ => Refused(Error::Io(format!("ptrace(PTRACE_SEIZE, {tid}): {e}"))),
            });
        }
        self.seized.push((tid, 0));
        // SAFETY: PTRACE_INTERRUPT of a thread we seized.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            return Err(Gone);
        }
        let deadline = Instant::now() + STOP_WAIT;
        let mut tries = 0u32;
        loop {
            let mut status = 0;
            // SAFETY: waits for our tracee `tid`; `status` is a valid int.
            let w = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
            if w == tid {
                if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    self.seized.retain(|&(t, _)| t != tid);
                    return Err(Gone);
                }
                if libc::WIFSTOPPED(status) {
                    // A stop for a signal on its way (not ours) must deliver
                    // that signal when the thread goes on.
                    let event = (status >> 16) & 0xff;
                    if event != libc::PTRACE_EVENT_STOP {
                        let sig = libc::WSTOPSIG(status);
                        if let Some(e) = self.seized.iter_mut().find(|e| e.0 == tid) {
                            e.1 = sig;
                        }
                    }
                    return Ok(());
                }
            } else if w < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return Err(Gone);
            }
            if Instant::now() > deadline {
                return Err(Refused(Error::Unreadable(format!(
                    "thread {tid} of process {} did not stop within {} s (blocked in the kernel?)",
                    self.pid,
                    STOP_WAIT.as_secs()
                ))));
            }
            // A running thread stops within microseconds: yield at first,
            // sleep only if it takes longer (a thread in the kernel).
            tries += 1;
            if tries < 20 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
impl Stopped {
    pub fn stop(_pid: i32) -> Result<Stopped> {
        Err(Error::Unavailable("reading another process is supported on x86_64 Linux only".into()))
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &(tid, sig) in &self.seized {
            #[cfg(target_os = "linux")]
            // SAFETY: detaches a thread we seized, delivering the signal it
            // was stopped with (0: none).
            unsafe {
                libc::ptrace(libc::PTRACE_DETACH, tid, 0, sig as libc::c_long)
            };
            #[cfg(not(target_os = "linux"))]
            let _ = (tid, sig);
        }
    }
}

enum SeizeError {
    Gone,
    Refused(Error),
}
use SeizeError::{Gone, Refused};

/// The registers of stopped tracee `tid`: `(rip, rsp, rbp)`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn registers(tid: i32) -> Option<(usize, usize, usize)> {
    // SAFETY: user_regs_struct is plain data; zeroed is a valid value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct to `regs`.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs as *mut libc::user_regs_struct) };
    (r == 0).then_some((regs.rip as usize, regs.rsp as usize, regs.rbp as usize))
}

/// Whether thread `tid` has ended or is ending (a zombie, or gone).
pub(super) fn exiting(tid: i32) -> bool {
    procfs::stat(Proc::Pid(tid), None).is_none_or(|s| s.exiting())
}

/// The tracer of thread `tid` (`TracerPid` of its status; 0: none).
fn tracer_of(tid: i32) -> Option<i32> {
    procfs::tracer_pid(Proc::Pid(tid))
}

/// What to do when the kernel refuses to let us trace `pid`.
pub fn permission_advice(pid: i32) -> String {
    let scope = procfs::ptrace_scope();
    let mut msg =
        format!("not allowed to read process {pid}: the kernel refused to let this process trace it.");
    match scope.as_deref() {
        Some("1") => msg.push_str(
            " Yama's ptrace_scope is 1 (only a parent may trace its children): run as root (sudo), or allow it with `sudo sysctl kernel.yama.ptrace_scope=0`.",
        ),
        Some("2") => msg.push_str(" Yama's ptrace_scope is 2 (admin only): run as root (sudo)."),
        Some("3") => msg.push_str(" Yama's ptrace_scope is 3: tracing is disabled on this system until reboot."),
        _ => msg.push_str(" Run as the same user as the process, or as root (sudo)."),
    }
    msg.push_str(" In a container, start it with `--cap-add SYS_PTRACE`.");
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_runs_is_not_exiting() {
        assert!(!exiting(std::process::id() as i32));
        assert!(exiting(i32::MAX), "a process that is not there has ended");
    }

    #[test]
    fn this_process_threads_main_thread_first() {
        let pid = std::process::id() as i32;
        let tids = task_ids(pid).unwrap();
        assert_eq!(tids[0], pid);
        assert!(tids[1..].windows(2).all(|w| w[0] < w[1]), "{tids:?}");
        assert!(matches!(task_ids(i32::MAX), Err(Error::NoProcess(_))));
    }
}
