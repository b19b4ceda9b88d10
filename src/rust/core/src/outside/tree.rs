//! Recording a process and, when asked, the processes working for it (its
//! descendants and its workers, see `family`): one [`Recorder`] per
//! process, ticked in turn. Descendants are looked for at every tick (a
//! short-lived worker is seen if it lives through one), workers as the
//! `finder` found them last (every quarter of a second). Each is started
//! on first sight and kept when it ends: its samples stay in
//! the recording. Each process is stopped only while it is read, one
//! after another, never two at once.

use super::recorder::Recorder;
pub use super::recorder::Settings;
use super::{Relation, Usage};
use crate::error::{Error, Result};
use crate::relatives::finder::WorkerFinder;
use std::collections::HashSet;

/// A descendant being recorded.
pub struct Member {
    pub pid: i32,
    pub parent: i32,
    pub relation: Relation,
    pub recorder: Recorder,
    /// It ended (or could no longer be read) during the recording.
    pub ended: bool,
    /// What it had used when first seen, and when last read.
    pub usage_start: Usage,
    pub usage_last: Usage,
}

/// A descendant not recorded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotRecorded {
    pub pid: i32,
    pub parent: i32,
    pub relation: Relation,
    pub reason: String,
}

pub struct TreeRecorder {
    pub root: Recorder,
    root_pid: i32,
    pub children: Vec<Member>,
    pub not_recorded: Vec<NotRecorded>,
    follow: bool,
    settings: Settings,
    seen: HashSet<i32>,
    /// Looking for workers, with `follow`.
    finder: Option<WorkerFinder>,
}

impl TreeRecorder {
    /// Starts recording process `pid`, and its descendants with `follow`.
    pub fn start(pid: i32, settings: Settings, follow: bool) -> Result<TreeRecorder> {
        let root = Recorder::start(pid, settings)?;
        let mut tree = TreeRecorder {
            root,
            root_pid: pid,
            children: Vec::new(),
            not_recorded: Vec::new(),
            follow,
            settings,
            seen: HashSet::from([pid]),
            finder: follow.then(|| WorkerFinder::start(pid)),
        };
        tree.look_for_descendants();
        Ok(tree)
    }

    /// One sample of the process, then of each descendant still running
    /// (new ones started first). An error when the process itself can no
    /// longer be read (it ended): the recording is over.
    pub fn tick(&mut self) -> Result<()> {
        self.root.tick()?;
        self.look_for_descendants();
        for m in self.children.iter_mut().filter(|m| !m.ended) {
            match m.recorder.tick() {
                Ok(()) => m.usage_last = super::usage(m.pid),
                // Ended, or no longer readable (its samples so far are kept).
                Err(_) => m.ended = true,
            }
        }
        Ok(())
    }

    fn look_for_descendants(&mut self) {
        if !self.follow {
            return;
        }
        // SAFETY: getpid has no preconditions.
        let own = unsafe { libc::getpid() };
        let finder = self.finder.as_ref();
        let found = crate::relatives::family::relatives_by(self.root_pid, |p| {
            finder.map(|f| f.workers_of(p)).unwrap_or_default()
        });
        for super::Relative { pid, parent, relation } in found {
            if !self.seen.insert(pid) {
                continue;
            }
            let not = |reason: &str| NotRecorded { pid, parent, relation, reason: reason.to_string() };
            if pid == own {
                self.not_recorded.push(not("it is the recording R process"));
                continue;
            }
            match Recorder::start(pid, self.settings) {
                // (Its use from here: what it used while its recorder
                // started, reading what it loaded, cannot be sampled.)
                Ok(recorder) => {
                    let usage_start = super::usage(pid);
                    self.children.push(Member {
                        pid,
                        parent,
                        relation,
                        recorder,
                        ended: false,
                        usage_start,
                        usage_last: usage_start,
                    })
                }
                Err(Error::NoProcess(_)) => self.not_recorded.push(not("it ended before it was first read")),
                Err(e) => self.not_recorded.push(not(&e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { threads: (true, false), how: (false, false), own_r: 0, interval_ns: 10_000_000 }
    }

    #[test]
    fn a_process_and_its_children_are_recorded_and_kept_when_they_end() {
        // sh starts a sleeping child and a short one, then waits.
        let mut sh =
            std::process::Command::new("sh").args(["-c", "sleep 30 & sleep 0.3; wait"]).spawn().unwrap();
        let pid = sh.id() as i32;
        let listed = || super::super::descendants(pid).len();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while listed() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let started = TreeRecorder::start(pid, settings(), true);
        let alone = TreeRecorder::start(pid, settings(), false);
        let result = (|| -> Result<(usize, usize, bool, usize)> {
            let mut tree = started?;
            let before = tree.children.len();
            // The short child ends: it stays, marked ended.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while tree.children.iter().all(|m| !m.ended) && std::time::Instant::now() < deadline {
                tree.tick()?;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let ended = tree.children.iter().any(|m| m.ended);
            Ok((before, tree.children.len(), ended, alone?.children.len()))
        })();
        // (Its children first: once it is gone they are no longer its.)
        let _ = std::process::Command::new("pkill").args(["-P", &pid.to_string()]).status();
        sh.kill().ok();
        sh.wait().ok();
        match result {
            Err(Error::Permission(why)) => eprintln!("skipped: tracing is not allowed here ({why})"),
            Err(e) => panic!("{e}"),
            Ok((before, after, ended, alone)) => {
                if crate::procfs::children(crate::procfs::Proc::This).is_none() {
                    eprintln!("skipped: this kernel has no task/*/children files");
                    return;
                }
                assert_eq!(before, 2, "both children recorded from the start");
                assert_eq!(after, 2, "an ended child is kept");
                assert!(ended, "the short child was seen to end");
                assert_eq!(alone, 0, "without follow, no child");
            }
        }
    }
}
