//! The snapshots of loaded modules a session's samples are walked with.
//!
//! Which modules a sample's addresses belong to is the snapshot's the
//! handler used (it cannot ask the loader). The collector checks the
//! loader's generation before it takes the samples written so far: each is
//! certain when its snapshot still holds exactly the modules loaded then
//! (no module was loaded or unloaded since the snapshot was taken), and is
//! marked uncertain otherwise (see `record::Origin` and `build`). When
//! modules change, the collector publishes a new snapshot; the old one is
//! retired, not freed: a handler may still be walking it, and the samples
//! taken with it are named with it. Every snapshot used stays until the
//! profile is built, at its number.

use crate::unwind::walk::Snapshot;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

/// A snapshot as the handler uses it: with its number in the session,
/// which every sample taken with it carries.
struct Used {
    snapshot: Box<Snapshot>,
    index: u32,
}

/// A session's snapshots: the one published to the handler, and those it
/// replaced.
pub struct Snapshots {
    current: AtomicPtr<Used>,
    /// Snapshots replaced while sampling, in order. (Boxes: they came from
    /// `Box::into_raw` and must not move.)
    #[allow(clippy::vec_box)]
    retired: Mutex<Vec<Box<Used>>>,
    /// The generation and exactness of each snapshot, by its number.
    generations: Mutex<Vec<((u64, u64), bool)>>,
    /// An address in R's interpreter (what a snapshot is taken with).
    interpreter_addr: usize,
}

impl Snapshots {
    /// Starts with `first` as snapshot 0.
    pub fn new(first: Box<Snapshot>, interpreter_addr: usize) -> Snapshots {
        let generations = Mutex::new(vec![(first.generation, first.exact)]);
        let current = Box::into_raw(Box::new(Used { snapshot: first, index: 0 }));
        Snapshots {
            current: AtomicPtr::new(current),
            retired: Mutex::new(Vec::new()),
            generations,
            interpreter_addr,
        }
    }

    /// The published snapshot and its number (the handler's; lock-free).
    #[inline]
    pub fn current(&self) -> Option<(&Snapshot, u32)> {
        // SAFETY: the published pointer is a live Box owned by `self`
        // (retired ones stay until `self` is taken apart).
        let used = unsafe { self.current.load(Ordering::Acquire).as_ref() }?;
        Some((&used.snapshot, used.index))
    }

    /// Takes a new snapshot if modules were loaded or unloaded (the
    /// loader's generation is now `generation`) and publishes it; its
    /// module map, for hooking the new modules (collector thread).
    pub fn refresh(&self, generation: (u64, u64)) -> Option<std::sync::Arc<crate::modules::ModuleMap>> {
        let (current, _) = self.current()?;
        if generation == current.generation && current.exact {
            return None;
        }
        let snapshot = Box::new(Snapshot::take(self.interpreter_addr));
        let map = snapshot.map.clone();
        let index = {
            let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
            g.push((snapshot.generation, snapshot.exact));
            (g.len() - 1) as u32
        };
        let fresh = Box::into_raw(Box::new(Used { snapshot, index }));
        let old = self.current.swap(fresh, Ordering::AcqRel);
        // SAFETY: `old` came from Box::into_raw and is no longer published;
        // kept (see the module's comment).
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).push(unsafe { Box::from_raw(old) });
        Some(map)
    }

    /// Whether the samples of each snapshot, by number, are certain when
    /// the loader's generation is `generation` (see the module's comment).
    pub fn certain(&self, generation: (u64, u64)) -> Vec<bool> {
        let g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().map(|&(g, exact)| exact && g == generation).collect()
    }

    /// Every snapshot, by number, the last one last, taken out (none is
    /// published any more): once no handler can run.
    pub fn take_all(&self) -> Vec<Box<Snapshot>> {
        let last = self.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let mut used = std::mem::take(&mut *self.retired.lock().unwrap_or_else(|e| e.into_inner()));
        if !last.is_null() {
            // SAFETY: the last published snapshot, no longer reachable.
            used.push(unsafe { Box::from_raw(last) });
        }
        // Published in order of their numbers: each is at its number.
        used.sort_by_key(|u| u.index);
        used.into_iter().map(|u| u.snapshot).collect()
    }
}

impl Drop for Snapshots {
    fn drop(&mut self) {
        let last = self.current.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !last.is_null() {
            // SAFETY: the published snapshot, owned by `self`; nothing reads
            // it once `self` is dropped (the session is retracted first).
            drop(unsafe { Box::from_raw(last) });
        }
    }
}

/// The last session's snapshot, kept for the next session while no module
/// was loaded or unloaded: its caches (rules, functions' rows) are warm, and
/// a profile's first samples do not pay for what the last one computed.
static SPARE: Mutex<Option<Box<Snapshot>>> = Mutex::new(None);

/// Keeps a finished session's last snapshot for the next session.
pub fn recycle(mut snapshots: Vec<Box<Snapshot>>) {
    if let Some(last) = snapshots.pop() {
        *SPARE.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    }
}

/// The spare snapshot if it is still current, or a new one.
pub fn first(interpreter_addr: usize) -> Box<Snapshot> {
    let spare = SPARE.lock().unwrap_or_else(|e| e.into_inner()).take();
    spare
        .filter(|s| s.exact && s.generation == crate::modules::loader_generation())
        .unwrap_or_else(|| Box::new(Snapshot::take(interpreter_addr)))
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_replaced_only_when_modules_changed_and_kept_at_its_number() {
        let s = Snapshots::new(Box::new(Snapshot::take(0)), 0);
        let (first, index) = s.current().unwrap();
        assert_eq!(index, 0);
        let now = first.generation;
        let exact = first.exact;
        if exact {
            assert!(s.refresh(now).is_none(), "the same modules: no new snapshot");
            assert_eq!(s.certain(now), vec![true]);
        }
        // Another generation than the snapshot's: a new one is published
        // and numbered; the first is kept.
        let other = (now.0.wrapping_add(1), now.1);
        assert!(s.refresh(other).is_some());
        assert_eq!(s.current().unwrap().1, 1);
        assert!(!s.certain(other)[0], "samples of the old snapshot are uncertain now");
        let all = s.take_all();
        assert!(s.current().is_none() && s.take_all().is_empty(), "taken out");
        assert_eq!(all.len(), 2, "every snapshot used, by number");
        assert_eq!(all[0].generation, now);
    }
}
