//! The bookkeeping of a tracer's threads (no system call here): what
//! `waitid` reports of a tracee ([`Report`]), where each seized thread is
//! ([`Tracees`]), which signal a stop held back, and why a thread that did
//! not stop did not ([`not_stopped`]). `ptrace` makes the calls.

use std::time::Duration;

/// What `waitid` said of a tracee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Report {
    /// A stop: `si_status`, the signal with the ptrace event above it
    /// (`PTRACE_EVENT_STOP << 8 | SIGTRAP` for ours).
    Stopped(i32),
    /// It exited, or was killed.
    Exited,
}

impl Report {
    /// The kind of report `si_code` is (the status not known yet).
    pub(super) fn of(code: i32) -> Option<Report> {
        Report::of_status(code, 0)
    }

    pub(super) fn of_status(code: i32, status: i32) -> Option<Report> {
        match code {
            libc::CLD_TRAPPED | libc::CLD_STOPPED => Some(Report::Stopped(status)),
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED => Some(Report::Exited),
            _ => None,
        }
    }
}

/// The signal a stop held back, to deliver when the thread goes on: a stop
/// for a signal on its way to the thread (no ptrace event) holds that
/// signal; ours and group-stops (`PTRACE_EVENT_STOP`) hold none.
pub(super) fn held_signal(status: i32) -> i32 {
    if (status >> 8) & 0xff == 0 {
        status & 0x7f
    } else {
        0
    }
}

/// Where a seized thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Asked to stop, not stopped (yet).
    Pending,
    /// Stopped; the signal to deliver when it goes on (0: none).
    Stopped(i32),
    /// Gone: it exited or was killed while traced.
    Ended,
    /// Detached: it went on.
    Released,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Tracee {
    pub(super) tid: i32,
    pub(super) state: State,
}

/// The threads seized, and what the kernel said of each.
#[derive(Debug)]
pub(super) struct Tracees {
    pid: i32,
    pub(super) list: Vec<Tracee>,
    /// The main thread's exit was reported: the process is gone.
    pub(super) main_ended: bool,
}

impl Tracees {
    pub(super) fn new(pid: i32) -> Tracees {
        Tracees { pid, list: Vec::new(), main_ended: false }
    }

    pub(super) fn has(&self, tid: i32) -> bool {
        self.list.iter().any(|t| t.tid == tid)
    }

    pub(super) fn add(&mut self, tid: i32) {
        self.list.push(Tracee { tid, state: State::Pending });
    }

    pub(super) fn state(&self, tid: i32) -> Option<State> {
        self.list.iter().find(|t| t.tid == tid).map(|t| t.state)
    }

    pub(super) fn pending(&self) -> usize {
        self.list.iter().filter(|t| t.state == State::Pending).count()
    }

    /// What the kernel reported of `tid`; whether it is a stop of a thread
    /// that was to stop.
    pub(super) fn report(&mut self, tid: i32, r: Report) -> bool {
        let main = tid == self.pid;
        let Some(t) = self.list.iter_mut().find(|t| t.tid == tid) else { return false };
        match (t.state, r) {
            (State::Pending, Report::Stopped(status)) => {
                t.state = State::Stopped(held_signal(status));
                true
            }
            (_, Report::Exited) => {
                t.state = State::Ended;
                self.main_ended |= main;
                false
            }
            // (A second stop of a stopped thread cannot come.)
            _ => false,
        }
    }

    /// Asks `stopped(tid)` of each stopped thread whether it still is: a
    /// thread that is not has been killed (it is marked ended). Whether all
    /// still were.
    pub(super) fn check(&mut self, mut stopped: impl FnMut(i32) -> bool) -> bool {
        let mut all = true;
        for t in &mut self.list {
            if matches!(t.state, State::Stopped(_)) && !stopped(t.tid) {
                t.state = State::Ended;
                all = false;
            }
        }
        all
    }

    /// Whether every thread seized has been let go (none asked to stop
    /// and not stopped, none that died while traced).
    pub(super) fn all_released(&self) -> bool {
        self.list.iter().all(|t| t.state == State::Released)
    }

    /// Detaches every stopped thread with `detach(tid, signal)`; whether
    /// each one went on.
    pub(super) fn release(&mut self, mut detach: impl FnMut(i32, i32) -> bool) -> bool {
        let mut all = true;
        for t in &mut self.list {
            if let State::Stopped(sig) = t.state {
                if detach(t.tid, sig) {
                    t.state = State::Released;
                } else {
                    t.state = State::Ended;
                    all = false;
                }
            }
        }
        all
    }
}

/// Why a thread did not stop within `waited`, from its state in `stat`
/// (None: no state, it has ended) and where in the kernel it waits
/// (`wchan`); None if it has ended.
pub(super) fn not_stopped(state: Option<char>, wchan: Option<&str>, waited: Duration) -> Option<String> {
    let why = match state? {
        'Z' | 'X' => return None,
        'R' => "it was runnable, waiting for a turn on a CPU (the machine's cores are busy)".to_string(),
        'D' => match wchan {
            Some(w) => format!("it is blocked in the kernel (uninterruptible, in {w})"),
            None => "it is blocked in the kernel (uninterruptible)".to_string(),
        },
        't' => "it stopped only after the wait ended".to_string(),
        c => format!("its state is {c}"),
    };
    Some(format!("not read: it did not stop within {:.1} s: {why}", waited.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRAP: i32 = libc::SIGTRAP | (libc::PTRACE_EVENT_STOP << 8);

    #[test]
    fn a_stop_holds_back_a_signal_on_its_way_only() {
        // Our PTRACE_INTERRUPT, and a group-stop seen by a seizing tracer.
        assert_eq!(held_signal(TRAP), 0);
        assert_eq!(held_signal(libc::SIGSTOP | (libc::PTRACE_EVENT_STOP << 8)), 0);
        // A signal on its way to the thread: delivered when it goes on.
        assert_eq!(held_signal(libc::SIGUSR1), libc::SIGUSR1);
        assert_eq!(held_signal(libc::SIGCHLD), libc::SIGCHLD);
        assert_eq!(Report::of_status(libc::CLD_TRAPPED, TRAP), Some(Report::Stopped(TRAP)));
        assert_eq!(Report::of_status(libc::CLD_STOPPED, 19), Some(Report::Stopped(19)));
        for code in [libc::CLD_EXITED, libc::CLD_KILLED, libc::CLD_DUMPED] {
            assert_eq!(Report::of_status(code, 9), Some(Report::Exited));
        }
        assert_eq!(Report::of(libc::CLD_CONTINUED), None);
    }

    #[test]
    fn tracees_follow_what_the_kernel_reports() {
        let mut t = Tracees::new(100);
        for tid in [100, 101, 102, 103] {
            t.add(tid);
        }
        assert!(t.has(102) && !t.has(104));
        assert_eq!(t.pending(), 4);
        assert!(t.report(100, Report::Stopped(TRAP)));
        assert!(t.report(101, Report::Stopped(libc::SIGUSR1)));
        // A thread that died before it stopped: gone, not a stop.
        assert!(!t.report(102, Report::Exited));
        // Not ours: ignored.
        assert!(!t.report(999, Report::Stopped(TRAP)));
        assert_eq!(t.state(100), Some(State::Stopped(0)));
        assert_eq!(t.state(101), Some(State::Stopped(libc::SIGUSR1)));
        assert_eq!(t.state(102), Some(State::Ended));
        assert_eq!(t.pending(), 1);
        assert!(!t.main_ended);
        // Killed after it stopped: its exit wins.
        assert!(!t.report(100, Report::Exited));
        assert!(t.main_ended, "the main thread's exit: the process is gone");
    }

    #[test]
    fn release_detaches_stopped_threads_with_their_signal_and_says_when_one_could_not_be() {
        let mut t = Tracees::new(100);
        for tid in [100, 101, 102, 103] {
            t.add(tid);
        }
        t.report(100, Report::Stopped(TRAP));
        t.report(101, Report::Stopped(libc::SIGUSR1));
        t.report(102, Report::Exited);
        // 103 never stopped: nothing to detach (its tracer's end releases it).
        let mut asked = Vec::new();
        assert!(t.release(|tid, sig| {
            asked.push((tid, sig));
            true
        }));
        assert_eq!(asked, [(100, 0), (101, libc::SIGUSR1)]);
        assert_eq!(t.state(100), Some(State::Released));
        // Released once: a second release (the drop after it) asks nothing.
        assert!(t.release(|_, _| panic!("detached twice")));
        // A stopped thread killed since cannot be detached.
        let mut t = Tracees::new(100);
        t.add(100);
        t.add(101);
        t.report(100, Report::Stopped(TRAP));
        t.report(101, Report::Stopped(TRAP));
        assert!(!t.release(|tid, _| tid != 101));
        assert_eq!(t.state(101), Some(State::Ended));
    }

    #[test]
    fn a_stopped_thread_that_is_not_stopped_any_more_was_killed() {
        let mut t = Tracees::new(100);
        for tid in [100, 101, 102] {
            t.add(tid);
        }
        t.report(100, Report::Stopped(TRAP));
        t.report(101, Report::Stopped(TRAP));
        // 102 never stopped: not asked.
        let mut asked = Vec::new();
        assert!(t.check(|tid| {
            asked.push(tid);
            true
        }));
        assert_eq!(asked, [100, 101]);
        assert!(!t.check(|tid| tid != 101));
        assert_eq!(t.state(101), Some(State::Ended));
        assert_eq!(t.state(100), Some(State::Stopped(0)));
        assert_eq!(t.state(102), Some(State::Pending));
    }

    #[test]
    fn a_thread_that_did_not_stop_says_why_from_its_state() {
        let waited = Duration::from_millis(2300);
        let runnable = not_stopped(Some('R'), None, waited).unwrap();
        assert!(runnable.contains("within 2.3 s") && runnable.contains("runnable"), "{runnable}");
        let blocked = not_stopped(Some('D'), Some("wait_for_vfork_done"), waited).unwrap();
        assert!(
            blocked.contains("blocked in the kernel") && blocked.contains("wait_for_vfork_done"),
            "{blocked}"
        );
        assert!(not_stopped(Some('D'), None, waited).unwrap().contains("blocked in the kernel"));
        assert!(not_stopped(Some('S'), None, waited).unwrap().contains("state is S"));
        // Ended: nothing to say (it is left out).
        assert_eq!(not_stopped(Some('Z'), None, waited), None);
        assert_eq!(not_stopped(None, None, waited), None);
    }
}
