//! The other threads of the process, as the collector thread keeps track of
//! them while a profile of every thread runs: found by listing
//! `/proc/self/task`, each given a POSIX timer on its own CPU clock (or the
//! monotonic clock) that sends the sampling signal to that thread only, so
//! that it is sampled in proportion to its own CPU time and no thread is
//! ever stopped for another's sample. A thread is found within one poll of
//! its start (a thread that lives shorter than that is not sampled: its
//! CPU time is in the share the profile did not see, which `summary()`
//! prints). Timers of threads that ended are deleted at the next poll;
//! the kernel delivers nothing for an ended thread meanwhile (a timer
//! refers to the thread itself, not to its number, which may be reused).

use super::clock::{cpu_clock, read_clock, timer, Clock};
use crate::procfs::{self, Proc};
use crate::profile::collect::Thread;
use std::collections::HashMap;

struct Known {
    thread: Thread,
    timer: Option<libc::timer_t>,
    clock: libc::clockid_t,
    cpu_first: u64,
}

/// The threads found so far (collector thread).
pub struct Threads {
    known: Vec<Known>,
    by_tid: HashMap<i32, usize>,
    /// Threads never sampled: R's main thread (its own timer), the
    /// collector.
    skip: Vec<i32>,
    signal: libc::c_int,
    clock: Clock,
    interval_ns: u64,
    polls: u64,
    scans: u64,
    /// The thread count the last poll saw (see `poll`).
    count: u64,
    /// Threads for which no timer could be made.
    pub failed: u64,
}

// SAFETY: timer ids are process-wide kernel handles, valid on any thread.
unsafe impl Send for Threads {}

impl Threads {
    pub fn new(signal: libc::c_int, clock: Clock, interval_ns: u64, skip: Vec<i32>) -> Threads {
        Threads {
            known: Vec::new(),
            by_tid: HashMap::new(),
            skip,
            signal,
            clock,
            interval_ns,
            polls: 0,
            scans: 0,
            count: 0,
            failed: 0,
        }
    }

    /// Finds threads started and ended since the last poll: gives each new
    /// one a timer, deletes the timers of those that ended, reads each
    /// one's CPU clock. Cheap when nothing changed: the directory of
    /// threads is listed only when the kernel's thread count moved, and
    /// every tenth poll (a thread that ended while another started).
    pub fn poll(&mut self) {
        let first = self.polls == 0;
        self.polls += 1;
        for (tid, timer) in super::spawn::take_new() {
            self.adopt(tid, timer);
        }
        let count = procfs::task_links();
        if !first && count == self.count && count != 0 && !self.polls.is_multiple_of(10) {
            // Nothing started or ended: the CPU clocks only.
            for k in self.known.iter_mut().filter(|k| !k.thread.ended) {
                if let Some(t) = read_clock(k.clock) {
                    k.thread.cpu_ns = t.saturating_sub(k.cpu_first);
                }
            }
            return;
        }
        self.count = count;
        self.scans += 1;
        let now = procfs::task_ids(Proc::This).unwrap_or_default();
        for &tid in &now {
            if self.skip.contains(&tid) || self.by_tid.contains_key(&tid) {
                continue;
            }
            let clock = cpu_clock(tid);
            // A thread that existed before the profile counts from now; one
            // started since, from its start.
            let cpu_first = if first { read_clock(clock).unwrap_or(0) } else { 0 };
            let timer_clock = match self.clock {
                Clock::Cpu => clock,
                Clock::Elapsed => libc::CLOCK_MONOTONIC,
            };
            let timer = timer(self.signal, timer_clock, tid, self.interval_ns);
            if timer.is_none() && read_clock(clock).is_some() {
                self.failed += 1;
            }
            self.know(tid, timer, !first, cpu_first);
        }
        for k in self.known.iter_mut().filter(|k| !k.thread.ended) {
            match read_clock(k.clock) {
                Some(t) if now.contains(&k.thread.tid) => {
                    k.thread.cpu_ns = t.saturating_sub(k.cpu_first);
                    // Names are set by threads after they start: read again
                    // on the next polls.
                    if self.scans <= 3 || self.scans.is_multiple_of(64) {
                        let name = procfs::comm(Proc::This, k.thread.tid);
                        if !name.is_empty() {
                            k.thread.name = name;
                        }
                    }
                }
                _ => {
                    k.thread.ended = true;
                    if let Some(t) = k.timer.take() {
                        // SAFETY: our timer, deleted once.
                        unsafe { libc::timer_delete(t) };
                    }
                }
            }
        }
    }

    /// Starts keeping track of thread `tid`, sampled by `timer`: `started`
    /// while the profile ran, its CPU clock counted from `cpu_first`.
    fn know(&mut self, tid: i32, timer: Option<libc::timer_t>, started: bool, cpu_first: u64) {
        self.by_tid.insert(tid, self.known.len());
        let thread = Thread { tid, name: procfs::comm(Proc::This, tid), cpu_ns: 0, started, ended: false };
        self.known.push(Known { thread, timer, clock: cpu_clock(tid), cpu_first });
    }

    /// Takes on a thread that armed its own timer as it started (see
    /// `spawn`). A thread found by listing first keeps that timer: two
    /// would sample it twice.
    pub fn adopt(&mut self, tid: i32, timer: super::spawn::Timer) {
        let timer = timer.0;
        if self.by_tid.contains_key(&tid) || self.skip.contains(&tid) {
            // SAFETY: the thread's own timer, not kept.
            unsafe { libc::timer_delete(timer) };
            return;
        }
        let clock = cpu_clock(tid);
        self.know(tid, Some(timer), true, 0);
        if read_clock(clock).is_none() {
            // Ended already: its timer goes at the next scan.
            self.count = 0;
        }
    }

    /// The threads found and not ended, with their CPU clocks.
    pub fn live(&self) -> impl Iterator<Item = (i32, libc::clockid_t)> + '_ {
        self.known.iter().filter(|k| !k.thread.ended).map(|k| (k.thread.tid, k.clock))
    }

    /// Deletes every timer (sampling stops) and returns what is known of
    /// the threads, in the order they were found.
    pub fn stop(mut self) -> Vec<Thread> {
        for k in self.known.iter_mut() {
            if let Some(t) = k.timer.take() {
                // SAFETY: our timer, deleted once.
                unsafe { libc::timer_delete(t) };
            }
            if !k.thread.ended {
                // A thread that ended since the last scan (one that ended
                // while another started leaves the thread count as it was)
                // has no clock left to read.
                match read_clock(k.clock) {
                    Some(t) => k.thread.cpu_ns = t.saturating_sub(k.cpu_first),
                    None => k.thread.ended = true,
                }
            }
        }
        std::mem::take(&mut self.known).into_iter().map(|k| k.thread).collect()
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        for k in self.known.iter_mut() {
            if let Some(t) = k.timer.take() {
                // SAFETY: our timer, deleted once.
                unsafe { libc::timer_delete(t) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::capture::clock::gettid;

    #[test]
    fn a_thread_cpu_clock_is_glibcs() {
        // SAFETY: the calling thread's own clock id.
        let mut mine: libc::clockid_t = 0;
        // SAFETY: as above.
        assert_eq!(unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut mine) }, 0);
        assert_eq!(cpu_clock(gettid()), mine);
        assert!(read_clock(cpu_clock(gettid())).is_some());
    }

    #[test]
    fn threads_are_found_with_their_names_and_cpu_time() {
        use std::sync::mpsc::channel;
        let (tid_tx, tid_rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let (spun_tx, spun_rx) = channel();
        let (stop_tx, stop_rx) = channel::<()>();
        // The thread spins for 30 ms of its own CPU time once told to (a
        // loaded machine gives it that much later, never less).
        let h = std::thread::Builder::new()
            .name("winch-test-spin".into())
            .spawn(move || {
                tid_tx.send(gettid()).unwrap();
                go_rx.recv().unwrap();
                let t0 = read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
                let mut x = 0u64;
                while read_clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap() - t0 < 30_000_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                spun_tx.send(x).unwrap();
                stop_rx.recv().unwrap();
            })
            .unwrap();
        let tid = tid_rx.recv().unwrap();
        // A signal nobody sends here: the timers are made, never fire.
        let mut t = Threads::new(0, Clock::Cpu, 3_600_000_000_000, vec![gettid()]);
        t.poll(); // found: its CPU time counts from here
        go_tx.send(()).unwrap();
        spun_rx.recv().unwrap();
        t.poll();
        stop_tx.send(()).unwrap();
        h.join().unwrap();
        // Another thread starts as it ends: the thread count is as the last
        // poll saw it, so this poll reads clocks only; `stop` still finds
        // that the spinning thread ended.
        let (hold_tx, hold_rx) = channel::<()>();
        let other = std::thread::spawn(move || hold_rx.recv().unwrap());
        t.poll();
        let all = t.stop();
        hold_tx.send(()).unwrap();
        other.join().unwrap();
        let spin = all.iter().find(|x| x.tid == tid).expect("the spinning thread is found");
        assert_eq!(spin.name, "winch-test-spin");
        assert!(spin.ended && !spin.started);
        assert!(spin.cpu_ns >= 30_000_000, "it spun for 30 ms of CPU after it was found: {}", spin.cpu_ns);
        assert!(!all.iter().any(|x| x.tid == gettid()), "skipped threads are not listed");
    }
}
