//! Looking for a recorded process's workers (see `family`) in the
//! background: the kernel's connection tables take milliseconds to read,
//! too long for a recording's tick, so a thread of its own looks every
//! [`EVERY`] and publishes each process's workers; a tick takes what was
//! found last (a PSOCK cluster's workers live as long as it does).

use super::family::{self, Tables};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often workers are looked for.
pub const EVERY: Duration = Duration::from_millis(250);

pub(crate) type Found = HashMap<i32, Vec<i32>>;

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
        self.found.lock().unwrap_or_else(|e| e.into_inner()).get(&pid).cloned().unwrap_or_default()
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
        found.insert(p, workers.clone());
        workers
    });
    found
}
