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

use crate::modules::Generation;
use crate::published::Published;
use crate::unwind::walk::Snapshot;
use std::sync::Mutex;

/// A session's snapshots: the one published to the handler, and those it
/// replaced, each numbered in order (see `published`).
pub struct Snapshots {
    published: Published<Box<Snapshot>>,
    /// An address in R's interpreter (what a snapshot is taken with).
    interpreter_addr: usize,
}

impl Snapshots {
    /// Starts with `first` as snapshot 0.
    pub fn new(first: Box<Snapshot>, interpreter_addr: usize) -> Snapshots {
        let published = Published::new();
        let (generation, exact) = (first.generation, first.exact);
        published.publish(first, generation, exact);
        Snapshots { published, interpreter_addr }
    }

    /// The published snapshot and its number (the handler's; one atomic
    /// load).
    #[inline]
    pub fn current(&self) -> Option<(&Snapshot, u32)> {
        let edition = self.published.current()?;
        Some((&edition.value, edition.number))
    }

    /// Takes a new snapshot if modules were loaded or unloaded (the
    /// loader's generation is now `generation`) and publishes it; its
    /// module map, for hooking the new modules (collector thread).
    pub fn refresh(&self, generation: Generation) -> Option<std::sync::Arc<crate::modules::ModuleMap>> {
        if self.published.current()?.exactly_at(generation) {
            return None;
        }
        let snapshot = Box::new(Snapshot::take(self.interpreter_addr));
        let map = snapshot.map.clone();
        let (g, exact) = (snapshot.generation, snapshot.exact);
        // The old one is retired, kept (see the module's comment).
        self.published.publish(snapshot, g, exact);
        Some(map)
    }

    /// Whether the samples of each snapshot, by number, are certain when
    /// the loader's generation is `generation` (see the module's comment).
    pub fn certain(&self, generation: Generation) -> Vec<bool> {
        self.published.keys().iter().map(|&(g, exact)| exact && g == generation).collect()
    }

    /// Every snapshot, by number, the last one last, taken out (none is
    /// published any more): once no handler can run. (Boxed: a snapshot
    /// stays where it was published, from then until it is recycled.)
    #[allow(clippy::vec_box)]
    pub fn take_all(&self) -> Vec<Box<Snapshot>> {
        // SAFETY: called when the session has stopped: it is withdrawn
        // from the handlers and none runs (see `active`), so no reader
        // holds a snapshot or takes one.
        unsafe { self.published.take_all() }.into_iter().map(|e| e.value).collect()
    }
}

/// The last session's snapshot, kept for the next session while no module
/// was loaded or unloaded: its caches (rules, functions' rows) are warm, and
/// a profile's first samples do not pay for what the last one computed.
static SPARE: Mutex<Option<Box<Snapshot>>> = Mutex::new(None);

/// Keeps a finished session's last snapshot for the next session.
#[allow(clippy::vec_box)] // (boxed as `take_all` hands them over)
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
        let other = Generation { adds: now.adds.wrapping_add(1), ..now };
        assert!(s.refresh(other).is_some());
        assert_eq!(s.current().unwrap().1, 1);
        assert!(!s.certain(other)[0], "samples of the old snapshot are uncertain now");
        let all = s.take_all();
        assert!(s.current().is_none() && s.take_all().is_empty(), "taken out");
        assert_eq!(all.len(), 2, "every snapshot used, by number");
        assert_eq!(all[0].generation, now);
    }
}
