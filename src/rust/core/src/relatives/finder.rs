//! Looking for a recorded process's workers (see `family`) in the
//! background: the kernel's connection tables take milliseconds to read,
//! too long for a recording's tick, so a thread of its own looks every
//! [`EVERY`] and publishes each process's workers; a tick takes what was
//! found last (a PSOCK cluster's workers live as long as it does), each
//! only while its pid still names the process found (a pid freed by a
//! worker that ended may be taken by any process meanwhile).

use super::family::{self, Tables};
use crate::procfs;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often workers are looked for.
pub const EVERY: Duration = Duration::from_millis(250);

/// Each process's workers, by pid, with when each started (clock ticks
/// after boot).
pub(crate) type Found = HashMap<i32, Vec<(i32, u64)>>;

/// The workers of a process tree, as last looked for.
pub struct WorkerFinder {
    found: Arc<Mutex<Found>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerFinder {
    /// Looks once now, so that the first tick has them, then in the
    /// background until dropped (only once if no thread can be started).
    pub fn start(root: i32) -> WorkerFinder {
        let found = Arc::new(Mutex::new(look(root)));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s) = (found.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("winch-workers".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let since = Instant::now();
                    while since.elapsed() < EVERY {
                        if s.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let now = look(root);
                    *f.lock().unwrap_or_else(|e| e.into_inner()) = now;
                }
            })
            .ok();
        WorkerFinder { found, stop, thread }
    }

    /// The workers of process `pid` when last looked for.
    pub fn workers_of(&self, pid: i32) -> Vec<i32> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner()).get(&pid).cloned();
        still_there(found.as_deref().unwrap_or_default())
    }
}

impl Drop for WorkerFinder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The workers of every process working for `root`, by process.
pub(crate) fn look(root: i32) -> Found {
    let mut tables = Tables::default();
    let mut found = Found::new();
    family::relatives_by(root, |p| {
        let workers = family::workers_with(p, &mut tables);
        found.insert(p, workers.iter().filter_map(|&w| Some((w, procfs::start_ticks(w)?))).collect());
        workers
    });
    found
}

/// The workers of `found` (pids and start times) whose pids still name
/// the processes found.
pub(crate) fn still_there(found: &[(i32, u64)]) -> Vec<i32> {
    still_there_by(found, procfs::start_ticks)
}

fn still_there_by(found: &[(i32, u64)], start: impl Fn(i32) -> Option<u64>) -> Vec<i32> {
    found.iter().filter(|&&(pid, ticks)| start(pid) == Some(ticks)).map(|&(pid, _)| pid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_whose_pid_another_process_took_is_not_one() {
        // 11 still the process found; 12's pid now another's (a later
        // start); 13 ended.
        let now = |pid: i32| match pid {
            11 => Some(100),
            12 => Some(250),
            _ => None,
        };
        assert_eq!(still_there_by(&[(11, 100), (12, 120), (13, 130)], now), vec![11]);
        // This process, found now, is still itself.
        let me = std::process::id() as i32;
        let ticks = procfs::start_ticks(me).unwrap();
        assert_eq!(still_there(&[(me, ticks), (me, ticks + 1)]), vec![me]);
    }
}
