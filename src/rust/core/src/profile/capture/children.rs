//! Forked children of a profiled process (`parallel::mclapply()`,
//! `mcparallel()`, future's `multicore`): each samples itself, from inside,
//! into a ring it shares with its parent, whose collector reads it.
//!
//! A child made by `fork()` while a session samples every process inherits
//! the session's memory (a copy), its signal handler and its hooked GOT
//! slots, but not its timers or its collector thread. Its `fork()` handler
//! (`fork`) claims one of a few slots the parent mapped shared before
//! sampling began, arms a timer on its own clock and keeps the session: its
//! samples are taken by the same handler, composed the same way (the R
//! frames it inherited from the parent at the fork are above a `[process]`
//! entry, see `compose`), and pushed to the slot's ring with its pid.
//! Labels the child makes that its parent does not know reach the parent
//! as label records before the samples that use them.
//!
//! A child's CPU-time timer may go without a signal for tens of
//! milliseconds on a busy machine (see `account`): the time is not lost
//! while the child runs on (its next sample stands for it), but what it
//! spends after its last signal is, when it ends. So a child also has a
//! watch: a one-shot timer on the monotonic clock, two intervals ahead,
//! whose signal takes a sample when the child's clock says one is owed
//! and the signal came on time (it found the child on a CPU: see
//! [`ON_TIME`]). A late one (the child had waited for a CPU and just
//! got one) arms the watch again half a millisecond ahead, inside the
//! slice the child was given ([`rewatch`]).
//! Each other signal of either timer re-arms it if the child's CPU clock moved
//! by a twentieth of that since the last arming (it runs, if slowly on a
//! busy machine); a child that sleeps is woken by it at most once.
//!
//! A slot is freed by the parent once the child has ended and its ring is
//! empty. A child finding no free slot is not sampled (counted: the
//! profile says how many were missed).

use super::ring::Ring;
use crate::profile::collect::{Collected, Process};
use crate::profile::labels::{self, EXTRA_BASE};
use crate::profile::record::{self, Entry, Origin, Owner};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Children sampled at once at most, and each one's ring words (256 KiB).
pub const SLOTS: usize = 32;
const RING_WORDS: usize = 1 << 15;

/// What a child and its parent share about one slot.
#[repr(C)]
struct Slot {
    /// The child's pid (0: free).
    pid: AtomicI32,
    /// The labels the child knew at the fork (its parent's then): labels
    /// with an id from here on are the child's own.
    fork_labels: AtomicU32,
    /// The child's CPU time at its last sample, and samples and intervals
    /// it took and lost.
    cpu_ns: AtomicU64,
    samples: AtomicU64,
    dropped: AtomicU64,
}

/// What the whole shared mapping starts with.
#[repr(C)]
struct Shared {
    /// The parent stopped sampling: children stop too.
    stopped: AtomicBool,
    /// Children that found no free slot.
    missed: AtomicU64,
    slots: [Slot; SLOTS],
}

/// The slots of a session, mapped before sampling began (so that every
/// child shares them), and their rings.
pub struct Children {
    shared: std::ptr::NonNull<Shared>,
    rings: Vec<Ring>,
}

// SAFETY: the mapping is accessed through atomics only; it is owned by
// this value and unmapped once when it is dropped.
unsafe impl Send for Children {}
// SAFETY: as above.
unsafe impl Sync for Children {}

impl Drop for Children {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; nothing refers
        // into it once the session is dropped. (A child keeps its own
        // mapping of the same pages.)
        unsafe { libc::munmap(self.shared.as_ptr() as *mut libc::c_void, std::mem::size_of::<Shared>()) };
    }
}

impl Children {
    /// The slots, shared with every child forked from now on; None if the
    /// memory could not be mapped.
    pub fn new() -> Option<Children> {
        // SAFETY: a fresh shared anonymous mapping, zero-filled: a valid
        // `Shared` (atomics at zero).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<Shared>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let shared = std::ptr::NonNull::new(p as *mut Shared)?;
        let rings: Option<Vec<Ring>> = (0..SLOTS).map(|_| Ring::shared(RING_WORDS)).collect();
        let Some(rings) = rings else {
            // SAFETY: the mapping made above, not handed to anyone.
            unsafe { libc::munmap(p, std::mem::size_of::<Shared>()) };
            return None;
        };
        Some(Children { shared, rings })
    }

    #[inline]
    fn shared(&self) -> &Shared {
        // SAFETY: the mapping holds a `Shared` and lives as long as `self`.
        unsafe { self.shared.as_ref() }
    }

    /// The parent stops sampling: children stop too (their timers fire on,
    /// and their handler does nothing, until they end).
    pub fn stop(&self) {
        self.shared().stopped.store(true, Ordering::SeqCst);
    }

    /// Children that found no free slot.
    pub fn missed(&self) -> u64 {
        self.shared().missed.load(Ordering::Acquire)
    }

    /// The parent's side: each claimed slot's pid, the labels its child
    /// knew at the fork, and its ring.
    pub fn claimed(&self) -> impl Iterator<Item = (usize, i32, u32, &Ring)> {
        self.shared().slots.iter().zip(&self.rings).enumerate().filter_map(|(i, (s, r))| {
            let pid = s.pid.load(Ordering::Acquire);
            (pid != 0).then(|| (i, pid, s.fork_labels.load(Ordering::Acquire), r))
        })
    }

    /// What slot `i`'s child reported: its CPU time at its last sample, its
    /// samples, and the intervals it lost.
    pub fn figures(&self, i: usize) -> (u64, u64, u64) {
        let s = &self.shared().slots[i];
        (
            s.cpu_ns.load(Ordering::Acquire),
            s.samples.load(Ordering::Acquire),
            s.dropped.load(Ordering::Acquire),
        )
    }

    /// Frees slot `i` (the parent's, once its child has ended and its ring
    /// is empty).
    pub fn free(&self, i: usize) {
        let s = &self.shared().slots[i];
        s.cpu_ns.store(0, Ordering::Relaxed);
        s.samples.store(0, Ordering::Relaxed);
        s.dropped.store(0, Ordering::Relaxed);
        s.pid.store(0, Ordering::Release);
    }
}

/// The parent's side of its children (the collector's, between polls):
/// what it knows of each claimed slot's child.
#[derive(Default)]
pub struct Parent {
    known: Vec<Option<Child>>,
    polls: u64,
}

/// A child as its parent follows it.
struct Child {
    pid: i32,
    fork_labels: u32,
    /// The child's labels (its ids) as the parent's extra labels.
    labels: crate::fasthash::FastMap<u32, u32>,
    command: String,
    /// The kernel's account of its CPU time at the last look.
    stat_cpu_ns: u64,
}

impl Parent {
    /// Takes every child's records into `c`: labels become `c`'s extra
    /// labels, samples name them; `certain` (by snapshot number) as for the
    /// parent's own samples. Children that ended and whose rings are empty
    /// are closed (their figures kept in `c`) and their slots freed.
    pub fn collect(&mut self, children: &Children, c: &mut Collected, certain: &[bool], buf: &mut Vec<u64>) {
        self.polls += 1;
        if self.known.len() < SLOTS {
            self.known.resize_with(SLOTS, || None);
        }
        let look = self.polls % 8 == 1; // the kernel's figures, every few polls
        let claimed: Vec<(usize, i32, u32)> = children.claimed().map(|(i, pid, l, _)| (i, pid, l)).collect();
        for (i, pid, fork_labels) in claimed {
            let known = match &mut self.known[i] {
                Some(k) if k.pid == pid => k,
                slot => slot.insert(Child {
                    pid,
                    fork_labels,
                    labels: Default::default(),
                    command: crate::procfs::cmdline(crate::procfs::Proc::Pid(pid)),
                    stat_cpu_ns: 0,
                }),
            };
            // Alive before the drain: a child that ends after it is drained
            // again at the next poll, with whatever it wrote last.
            let stat = crate::procfs::stat(crate::procfs::Proc::Pid(pid), None);
            let alive = stat.as_ref().is_some_and(|s| !s.exiting());
            if let (true, Some(st)) = (look || !alive, &stat) {
                known.stat_cpu_ns =
                    known.stat_cpu_ns.max(st.cpu_ticks() * 1_000_000_000 / crate::procfs::clock_ticks());
            }
            children.rings[i].drain(buf, |rec| absorb(known, c, certain, rec));
            if !alive {
                let (cpu_ns, samples, dropped) = children.figures(i);
                c.processes.push(Process {
                    pid: pid as u32,
                    command: std::mem::take(&mut known.command),
                    cpu_ns: cpu_ns.max(known.stat_cpu_ns),
                    samples,
                    dropped,
                });
                self.known[i] = None;
                children.free(i);
            }
        }
        c.processes_missed = children.missed();
    }

    /// At the end of the session: children still running are kept with
    /// what they reported so far (they stop sampling themselves).
    pub fn close(&mut self, children: &Children, c: &mut Collected) {
        for (i, pid, _, _) in children.claimed() {
            let Some(known) = self.known.get_mut(i).and_then(Option::take) else { continue };
            let (cpu_ns, samples, dropped) = children.figures(i);
            c.processes.push(Process {
                pid: pid as u32,
                command: known.command,
                cpu_ns: cpu_ns.max(known.stat_cpu_ns),
                samples,
                dropped,
            });
        }
        c.processes_missed = children.missed();
    }
}

/// One record of a child into `c`: a label it made, or a sample whose
/// labels are made the parent's.
fn absorb(known: &mut Child, c: &mut Collected, certain: &[bool], rec: &[u64]) {
    if let Some((id, text)) = record::split_label_record(rec) {
        let extra = EXTRA_BASE + c.extra_labels.len() as u32;
        c.extra_labels.push(String::from_utf8_lossy(&text).into_owned());
        known.labels.insert(id, extra);
        return;
    }
    let Some((prefix, _)) = record::split(rec) else { return };
    let mut rec = rec.to_vec();
    let own = |id: u32| id >= known.fork_labels && id < EXTRA_BASE;
    let map = |id: u32| known.labels.get(&id).copied().unwrap_or(labels::FULL);
    for w in rec[record::PREFIX..].iter_mut() {
        match Entry::decode(*w) {
            Entry::R { label, owner } if own(label) || matches!(owner, Owner::Frame(o) if own(o)) => {
                let label = if own(label) { map(label) } else { label };
                let owner = match owner {
                    Owner::Frame(o) if own(o) => Owner::Frame(map(o)),
                    other => other,
                };
                *w = Entry::r_owned(label, owner);
            }
            Entry::Pos { file, line } if own(file) => *w = Entry::pos(map(file), line),
            _ => {}
        }
    }
    let index = prefix.origin.snapshot;
    c.absorb_as(&rec, certain.get(index as usize) != Some(&true));
}

/// In a child: its slot (index + 1; 0 when this process is not a sampled
/// child), its pid, the context record innermost at the fork, the labels
/// already handed to the parent, and its timer.
static SLOT: AtomicUsize = AtomicUsize::new(0);
static PID: AtomicI32 = AtomicI32::new(0);
static EXPORTED: AtomicU32 = AtomicU32::new(0);
static TIMER: AtomicUsize = AtomicUsize::new(NO_TIMER);
static WATCH: AtomicUsize = AtomicUsize::new(NO_TIMER);
static WATCH_NS: AtomicU64 = AtomicU64::new(0);
static WATCHED_CPU_NS: AtomicU64 = AtomicU64::new(0);
/// When the watch was last armed to fire (the monotonic clock, ns).
static WATCH_DUE_NS: AtomicU64 = AtomicU64::new(0);

/// How late a watch's signal may reach the child and still be taken for
/// one that found it on a CPU (see `watches::on_time_ns`): a later one
/// waited for the child to get a CPU again, and would put the sample where
/// the scheduler had stopped it (a burn reading its CPU clock now and then
/// had 24 % to 51 % of its children's samples on `__vdso_clock_gettime`).
/// Such a signal takes no sample; the time stays owed to the next.
static ON_TIME: AtomicU64 = AtomicU64::new(super::watches::ON_TIME_NS);

/// `TIMER` (or `WATCH`) when the child has none (a kernel timer id may be
/// 0: a child's first timer is).
const NO_TIMER: usize = usize::MAX;

/// Records of R's chain a child remembers of its fork, at most.
pub const FORK_RECORDS: usize = 1024;

/// The records of R's chain at the fork (see `compose::Moment::fork`): in a
/// child, written once by its `fork()` handler before its timer is armed,
/// then only read, by its signal handler, on the same (only) thread.
struct ForkRecords {
    len: AtomicUsize,
    records: std::cell::UnsafeCell<[(usize, usize); FORK_RECORDS]>,
}

// SAFETY: written only by a child's fork handler before its timer exists
// (`become_child`), read only by that child's signal handler afterwards,
// on the same thread; `len` publishes the records.
unsafe impl Sync for ForkRecords {}

static FORK: ForkRecords =
    ForkRecords { len: AtomicUsize::new(0), records: std::cell::UnsafeCell::new([(0, 0); FORK_RECORDS]) };

/// This process as a sampled child: its slot's index.
#[inline]
pub fn current() -> Option<usize> {
    SLOT.load(Ordering::Acquire).checked_sub(1)
}

/// The records of R's chain this child remembers of its fork (empty: not
/// a child).
#[inline]
pub fn fork_records() -> &'static [(usize, usize)] {
    let len = FORK.len.load(Ordering::Acquire).min(FORK_RECORDS);
    // SAFETY: the first `len` records were written before `len` was
    // published and are not written again (see `ForkRecords`).
    unsafe { &(&*FORK.records.get())[..len] }
}

/// In a new child (its `fork()` handler, its only thread, before any
/// timer of its own exists): claims a slot of `children` for this process,
/// remembering the records of R's chain at the fork (written by `read`
/// into the buffer it is given; their count, None when the chain could not
/// be read) and the labels it knows (`labels`); None if no slot is free
/// (counted) or the parent stopped.
pub fn become_child(
    children: &Children,
    read: impl FnOnce(&mut [(usize, usize)]) -> Option<usize>,
    labels: u32,
) -> Option<usize> {
    let shared = children.shared();
    if shared.stopped.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let Some(i) = shared
        .slots
        .iter()
        .position(|s| s.pid.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        shared.missed.fetch_add(1, Ordering::Relaxed);
        return None;
    };
    shared.slots[i].fork_labels.store(labels, Ordering::Release);
    PID.store(pid, Ordering::Relaxed);
    // SAFETY: no timer of this child exists yet, and this is its only
    // thread: nothing reads the records while they are written.
    let n = read(unsafe { &mut *FORK.records.get() }).unwrap_or(0);
    FORK.len.store(n, Ordering::Release);
    EXPORTED.store(labels, Ordering::Relaxed);
    SLOT.store(i + 1, Ordering::Release);
    Some(i)
}

/// Keeps the child's timer, for [`leave`].
pub fn set_timer(timer: libc::timer_t) {
    TIMER.store(timer as usize, Ordering::Release);
}

/// Keeps the child's watch (see above) and arms it to fire `ns` from now.
pub fn set_watch(timer: libc::timer_t, ns: u64) {
    WATCH_NS.store(ns, Ordering::Relaxed);
    ON_TIME.store(super::watches::on_time_ns(), Ordering::Relaxed);
    arm_watch(timer, 0, ns);
    WATCH.store(timer as usize, Ordering::Release);
}

/// A signal of the child (its timer's or its watch's): the watch is armed
/// again if the child ran since it was last (see above). After a watch's
/// signal that came `late` (the child had waited for a CPU and just got
/// one), it is armed to fire again soon, while the child most likely still
/// holds that CPU, so that a sample on time takes the time owed. Without
/// that, what a busy machine left owed when the child ended was lost: the
/// kernel checks a thread's CPU timer only at its ticks, and a child
/// sharing a CPU with busy processes got one signal of it per 25 ms of CPU
/// time at 5 ms intervals, so most of its samples came from its watch.
/// Async-signal-safe.
pub fn rewatch(late: bool) {
    let timer = WATCH.load(Ordering::Acquire);
    // A child without a watch (sampling on elapsed time) reads no clock.
    if timer == NO_TIMER {
        return;
    }
    let Some(cpu_ns) = super::clock::read_clock(libc::CLOCK_THREAD_CPUTIME_ID) else { return };
    let ns = if late { soon_ns(ON_TIME.load(Ordering::Relaxed)) } else { WATCH_NS.load(Ordering::Relaxed) };
    if late || ran(WATCHED_CPU_NS.load(Ordering::Relaxed), cpu_ns, ns) {
        arm_watch(timer as libc::timer_t, cpu_ns, ns);
    }
}

/// Arms the watch to fire `ns` from now, keeping when that is and the
/// child's CPU clock (`cpu_ns`) as it was armed. Async-signal-safe.
fn arm_watch(timer: libc::timer_t, cpu_ns: u64, ns: u64) {
    WATCHED_CPU_NS.store(cpu_ns, Ordering::Relaxed);
    WATCH_DUE_NS.store(super::clock::now_ns() + ns, Ordering::Relaxed);
    super::clock::arm_once(timer, ns);
}

/// How soon a watch that came late fires again: well inside the slice of
/// CPU time the child was just given (a scheduler gives a busy task
/// milliseconds), yet later than a signal may be and still be on time.
fn soon_ns(on_time_ns: u64) -> u64 {
    (5 * on_time_ns).max(500_000)
}

/// Whether the child's watch's signal, handled at `now_ns` (the monotonic
/// clock), came on time: it found the child on a CPU (see
/// [`ON_TIME`]). Async-signal-safe.
pub fn watch_on_time(now_ns: u64) -> bool {
    super::watches::on_time(WATCH_DUE_NS.load(Ordering::Relaxed), now_ns, ON_TIME.load(Ordering::Relaxed))
}

/// Whether a child whose CPU clock read `then_ns` when its watch (of `ns`)
/// was armed and reads `now_ns` ran in between: by more than its signal
/// handler takes (a twentieth of `ns`; the handler takes tens of µs).
fn ran(then_ns: u64, now_ns: u64, ns: u64) -> bool {
    now_ns.saturating_sub(then_ns) >= ns / 20
}

/// In a new child (its `fork()` handler): not a sampled child yet, and no
/// timers; a parent that was one left its slot and timer ids here, none
/// of them this process's. Async-signal-safe.
pub fn reset_in_child() {
    SLOT.store(0, Ordering::Release);
    TIMER.store(NO_TIMER, Ordering::Release);
    WATCH.store(NO_TIMER, Ordering::Release);
    FORK.len.store(0, Ordering::Release);
}

/// A child stops sampling itself (it starts a session of its own, or winch
/// is unloaded): its timers are deleted; its slot stays its until it ends.
pub fn leave() {
    SLOT.store(0, Ordering::Release);
    for timer in [&TIMER, &WATCH] {
        let timer = timer.swap(NO_TIMER, Ordering::AcqRel);
        if timer != NO_TIMER {
            // SAFETY: a timer made for this child, deleted once.
            unsafe { libc::timer_delete(timer as libc::timer_t) };
        }
    }
}

/// A child's sample: pushes the labels it made since the last one (label
/// records), then `rec` (a composed record whose origin is rewritten to
/// this process), into slot `i`'s ring. Async-signal-safe. Whether the
/// sample was kept.
pub fn push_sample(
    children: &Children,
    i: usize,
    rec: &mut [u64],
    labels: &crate::profile::labels::Labels,
) -> bool {
    let shared = children.shared();
    let slot = &shared.slots[i];
    let ring = &children.rings[i];
    let Some((prefix, _)) = record::split(rec) else { return false };
    let weight = prefix.header.weight.max(1);
    // Labels first: a sample never names a label its parent has not seen.
    let mut buf = [0u64; 3 + 256];
    while EXPORTED.load(Ordering::Relaxed) < labels.len() as u32 {
        let id = EXPORTED.load(Ordering::Relaxed);
        let text = labels.bytes(id);
        let text = &text[..text.len().min(256 * 8)];
        let Some(n) = record::label_record(&mut buf, id, text) else { break };
        if !ring.push(&buf[..n]) {
            slot.dropped.fetch_add(weight, Ordering::Relaxed);
            return false;
        }
        EXPORTED.store(id + 1, Ordering::Relaxed);
    }
    let origin = Origin::child(prefix.origin.snapshot, PID.load(Ordering::Relaxed) as u32);
    rec[1] = origin.encode();
    if !ring.push(rec) {
        slot.dropped.fetch_add(weight, Ordering::Relaxed);
        return false;
    }
    slot.samples.fetch_add(1, Ordering::Relaxed);
    slot.cpu_ns.store(process_cpu_ns(), Ordering::Release);
    true
}

/// Whether the parent stopped sampling (a child's handler then does
/// nothing).
#[inline]
pub fn stopped(children: &Children) -> bool {
    children.shared().stopped.load(Ordering::Relaxed)
}

/// This process's CPU time (async-signal-safe).
fn process_cpu_ns() -> u64 {
    super::clock::read_clock(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::profile::labels::Labels;
    use crate::profile::record::{Flags, Header, Prefix};

    #[test]
    fn a_late_watch_fires_again_within_the_slice_it_found_and_after_lateness() {
        assert_eq!(soon_ns(super::super::watches::ON_TIME_NS), 500_000, "half a millisecond");
        // Timers of the kernel's tick: after what counts as on time.
        assert!(soon_ns(8_000_000) > 8_000_000);
    }

    #[test]
    fn a_watch_is_armed_again_while_the_child_runs_not_while_it_sleeps() {
        let ms = 1_000_000;
        // A watch of 10 ms: 0.5 ms of CPU since the last arming is running.
        assert!(ran(0, 3 * ms, 10 * ms), "at 30 % of a core");
        assert!(ran(100 * ms, 100 * ms + ms / 2, 10 * ms));
        assert!(!ran(100 * ms, 100 * ms + 60_000, 10 * ms), "asleep: only its handler ran");
        assert!(!ran(100 * ms, 90 * ms, 10 * ms));
    }

    #[test]
    fn a_forked_child_hands_its_samples_and_labels_to_its_parent() {
        let children = Children::new().unwrap();
        let mut labels = Labels::new();
        let known = labels.len() as u32;
        // SAFETY: the child only pushes to the shared rings and leaves with
        // _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = (|| {
                let i = become_child(
                    &children,
                    |r: &mut [(usize, usize)]| {
                        r[0] = (0x7000, 0xf1);
                        Some(1)
                    },
                    known,
                )?;
                (fork_records() == [(0x7000, 0xf1)]).then_some(())?;
                let mine = labels.intern(b"child_fn");
                let mut rec = Prefix {
                    header: Header { flags: Flags::PROCESS, weight: 2, handler_ns: 0 },
                    origin: Origin::main(0),
                    link: 1,
                    context: 0x7000,
                }
                .encode()
                .to_vec();
                rec.push(record::Entry::r(mine));
                push_sample(&children, i, &mut rec, &labels).then_some(())
            })();
            // SAFETY: ends the child.
            unsafe { libc::_exit(if ok.is_some() { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(status, 0);
        let claimed: Vec<_> = children.claimed().map(|(i, p, l, _)| (i, p, l)).collect();
        assert_eq!(claimed, vec![(0, pid, known)]);
        let (_, _, _, ring) = children.claimed().next().unwrap();
        let mut got = Vec::new();
        ring.drain(&mut Vec::new(), |r| got.push(r.to_vec()));
        assert_eq!(got.len(), 2, "the label, then the sample");
        assert_eq!(record::split_label_record(&got[0]), Some((known, b"child_fn".to_vec())));
        let (prefix, entries) = record::split(&got[1]).unwrap();
        assert_eq!(prefix.origin, Origin::child(0, pid as u32));
        assert_eq!(entries, &[record::Entry::r(known)]);
        let (_, samples, dropped) = children.figures(0);
        assert_eq!((samples, dropped), (1, 0));
        children.free(0);
        assert_eq!(children.claimed().count(), 0);
        // After the parent stopped, a child is not sampled.
        children.stop();
        assert!(become_child(&children, |_: &mut [(usize, usize)]| Some(0), known).is_none());
    }
}
