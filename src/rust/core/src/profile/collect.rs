//! What the collector thread makes of the sampler's records: distinct
//! stacks with their counts (memory grows with distinct stacks, not with
//! samples), and how long the handler took.

use super::record::{self, Entry, Flags, Prefix};
use crate::unwind::walk::Snapshot;
use std::collections::HashMap;
use std::sync::Arc;

/// Counts of one distinct stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Timer intervals the stack stands for (samples weighted by timer
    /// overruns).
    pub weight: u64,
    /// Handler runs that found it.
    pub samples: u64,
    /// Of those, how many could not walk the whole native stack or read the
    /// whole context chain.
    pub truncated: u64,
}

/// Handler times in nanoseconds: 100 ns buckets below 100 µs, then 64
/// buckets per power of two (1.6% wide) up to the largest time a record
/// holds (32 bits of nanoseconds).
#[derive(Clone, Debug)]
pub struct Times {
    buckets: Vec<u64>,
    max: u64,
    pub total_ns: u64,
    pub count: u64,
}

const BUCKET_NS: u64 = 100;
const LINEAR: usize = 1000;
/// Sub-buckets per power of two, as a shift.
const SUB: u32 = 6;
/// Powers of two from 2^16 (below 100 µs) to 2^33.
const FIRST_POW: u32 = 16;
const POWS: usize = 18;

impl Default for Times {
    fn default() -> Times {
        Times { buckets: vec![0; LINEAR + (POWS << SUB)], max: 0, total_ns: 0, count: 0 }
    }
}

/// The bucket of `ns`.
fn bucket(ns: u64) -> usize {
    if ns < LINEAR as u64 * BUCKET_NS {
        return (ns / BUCKET_NS) as usize;
    }
    let pow = (63 - ns.leading_zeros()).clamp(FIRST_POW, FIRST_POW + POWS as u32 - 1);
    let sub = ((ns >> (pow - SUB)) & ((1 << SUB) - 1)) as usize;
    LINEAR + (((pow - FIRST_POW) as usize) << SUB) + sub
}

/// The upper end of bucket `i`.
fn upper(i: usize) -> u64 {
    if i < LINEAR {
        return (i as u64 + 1) * BUCKET_NS;
    }
    let pow = FIRST_POW + ((i - LINEAR) >> SUB) as u32;
    let sub = ((i - LINEAR) & ((1 << SUB) - 1)) as u64;
    ((1 << SUB) + sub + 1) << (pow - SUB)
}

impl Times {
    pub fn add(&mut self, ns: u64) {
        self.total_ns += ns;
        self.count += 1;
        self.max = self.max.max(ns);
        let i = bucket(ns).min(self.buckets.len() - 1);
        self.buckets[i] += 1;
    }

    /// The `q` quantile (0..=1), to the bucket's upper end (at most the
    /// largest time seen); None if empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &b) in self.buckets.iter().enumerate() {
            seen += b;
            if seen >= rank {
                return Some(upper(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

/// A sample of another thread waiting for the main thread's sample it is to
/// be shown under.
struct Pending {
    part: Box<[u64]>,
    link: u64,
    context: u64,
    weight: u64,
    truncated: bool,
    /// An allocation's sample number and bytes.
    alloc: Option<(u64, u64)>,
    /// Another process's sample: under the main thread's sample it names,
    /// or the nearest taken, whatever R's innermost record then (`build`
    /// keeps only the main thread's dispatching call, an outer frame that
    /// stays while inner calls come and go: future's polling).
    process: bool,
}

/// Everything collected from a session's records.
///
/// A sample of another thread than R's main thread is shown under the R
/// stack of the main thread's sample it names (its `link`), when that
/// sample was taken while R's innermost context record was the one the
/// other thread saw (its `context`): the main thread had not left the R
/// call since. Its key is then its own entries, `R | THREAD`, and the main
/// thread's sample's key; otherwise (R had moved on, or the main thread's
/// sample was not kept) its own entries and `R | THREAD` alone. `build`
/// decides which of the main thread's native frames to keep.
#[derive(Default)]
pub struct Collected {
    /// Distinct stacks (`[snapshot, entry...]`) with their counts.
    pub stacks: Vec<(Arc<[u64]>, Counts)>,
    index: HashMap<Arc<[u64]>, usize>,
    /// R's main thread's samples by number: (context, stack).
    mains: HashMap<u64, (u64, usize)>,
    /// The largest number of a main thread's sample collected.
    last_main: u64,
    pending: Vec<Pending>,
    pub samples: u64,
    pub weight: u64,
    pub truncated: u64,
    /// Samples taken for other threads' samples to be shown under.
    pub references: u64,
    /// Other threads' samples shown under R's main thread's stack, and at
    /// the root.
    pub joined: u64,
    pub alone: u64,
    /// Other threads by kernel id, in the order of their first sample.
    pub thread_order: Vec<u32>,
    /// Other processes by pid (forked children, see `capture::children`;
    /// workers read from outside, see `capture::traced`), in the order of
    /// their first sample, and what is known of each.
    pub process_order: Vec<u32>,
    pub processes: Vec<Process>,
    /// Children that were not sampled (no free slot).
    pub processes_missed: u64,
    /// Labels other processes' samples carry (forked children's, workers'),
    /// by id from `labels::EXTRA_BASE`.
    pub extra_labels: Vec<String>,
    pub times: Times,
    /// How long each sample of a worker read from outside kept it stopped
    /// (see `capture::traced`).
    pub worker_stops: Times,
    /// Allocation samples by number: (bytes allocated, stack).
    pub allocs: HashMap<u64, (u64, usize)>,
}

impl Collected {
    /// Adds one record (`[header, snapshot, link, context, entry...]`, see
    /// `record`).
    pub fn absorb(&mut self, record: &[u64]) {
        self.absorb_as(record, false);
    }

    fn add(&mut self, key: &[u64], weight: u64, truncated: bool) -> usize {
        let i = match self.index.get(key) {
            Some(&i) => i,
            None => {
                let key: Arc<[u64]> = key.into();
                self.stacks.push((key.clone(), Counts::default()));
                self.index.insert(key, self.stacks.len() - 1);
                self.stacks.len() - 1
            }
        };
        let c = &mut self.stacks[i].1;
        if weight > 0 {
            c.weight += weight;
            c.samples += 1;
            c.truncated += truncated as u64;
        }
        i
    }

    /// Adds one record, its snapshot word marked `UNCERTAIN` if
    /// `uncertain`.
    pub fn absorb_as(&mut self, record: &[u64], uncertain: bool) {
        self.absorb_with(record, uncertain, &|_| None);
    }

    /// [`absorb_as`](Collected::absorb_as), knowing the R call (its
    /// context record) that started each thread started while R's main
    /// thread was in an R call (`creator`, by kernel id; see
    /// `capture::spawn`): a sample of such a thread taken while R's
    /// innermost record was that one is marked `THREAD_HERE` (`build`
    /// shows it under that call whatever the main thread is doing in it),
    /// one taken while it was another `THREAD_ELSEWHERE` (the call that
    /// started it is over, or not the one running: `build` does not charge
    /// it to the call running now because they share a module).
    pub fn absorb_with(&mut self, record: &[u64], uncertain: bool, creator: &dyn Fn(u32) -> Option<u64>) {
        let Some((prefix, entries)) = record::split(record) else { return };
        let Prefix { header, origin, link, context } = prefix;
        let flags = header.flags;
        let weight = if flags.contains(Flags::REFERENCE) { 0 } else { header.weight.max(1) };
        let truncated = flags.truncated();
        if flags.contains(Flags::PROCESS | Flags::WORKER) {
            // How long a worker read from outside was stopped: not the
            // signal handler's time.
            self.worker_stops.add(header.handler_ns);
        } else {
            self.times.add(header.handler_ns);
        }
        if weight == 0 {
            self.references += 1;
        } else {
            self.samples += 1;
            self.weight += weight;
            self.truncated += truncated as u64;
        }
        // An allocation's number and bytes: its record's last two words.
        let (entries, alloc) = if flags.contains(Flags::ALLOC) {
            match record::split_alloc_tail(entries) {
                Some((stack, tail)) => (stack, Some(tail)),
                None => return,
            }
        } else {
            (entries, None)
        };
        let mut key = Vec::with_capacity(entries.len() + 2);
        key.push(origin.marked(uncertain).encode());
        key.extend_from_slice(entries);
        if flags.contains(Flags::PROCESS) {
            if !self.process_order.contains(&origin.tid) {
                self.process_order.push(origin.tid);
            }
            if !flags.contains(Flags::WORKER) {
                // A forked child's own sample: its stack holds its parent's
                // part already (see `compose`); its origin names the child.
                self.add(&key, weight, truncated);
                return;
            }
            // A sample of a worker process read from outside (see
            // `capture::traced`): joined to R's main thread's sample it
            // names as another thread's is, after `[process]`.
            key.push(Entry::r(super::labels::PROCESS));
            let p = Pending { part: key.into(), link, context, weight, truncated, alloc, process: true };
            if !self.settle(&p, false) {
                self.pending.push(p);
            }
            return;
        }
        if !flags.contains(Flags::WORKER) {
            let i = self.add(&key, weight, truncated);
            if let Some((number, bytes)) = alloc {
                self.allocs.insert(number, (bytes, i));
            }
            // (Other threads take the next one in the same record of R's
            // instead of one that cannot anchor them.)
            let joinable = if flags.anchors_threads() { context } else { 0 };
            self.mains.insert(link, (joinable, i));
            self.last_main = self.last_main.max(link);
            return;
        }
        let tid = origin.tid;
        if !self.thread_order.contains(&tid) {
            self.thread_order.push(tid);
        }
        let marker = match creator(tid) {
            Some(c) if c == context => super::labels::THREAD_HERE,
            Some(_) => super::labels::THREAD_ELSEWHERE,
            None => super::labels::THREAD,
        };
        key.push(Entry::r(marker));
        let p = Pending { part: key.into(), link, context, weight, truncated, alloc, process: false };
        if !self.settle(&p, false) {
            self.pending.push(p);
        }
    }

    /// Adds another thread's sample under its main thread's sample, or at
    /// the root; false if that sample may still come (and `last` is not
    /// set).
    fn settle(&mut self, p: &Pending, last: bool) -> bool {
        let parent = match self.mains.get(&p.link) {
            Some(&(_, i)) if p.process => Some(i),
            None if p.process && (p.link <= self.last_main || last) => self.nearest(p.link),
            Some(&(context, i)) if context == p.context && context != 0 => Some(i),
            Some(_) => self.next_in(p),
            None if p.link > self.last_main && !last => return false,
            // The sample asked for never came (the request was lost, or the
            // sample was not kept): one of the next few taken in the same
            // record of R's will do.
            None => self.next_in(p),
        };
        let i = match parent {
            Some(i) => {
                let key = [&p.part[..], &self.stacks[i].0[..]].concat();
                self.joined += 1;
                self.add(&key, p.weight, p.truncated)
            }
            None => {
                self.alone += 1;
                self.add(&p.part, p.weight, p.truncated)
            }
        };
        if let Some((number, bytes)) = p.alloc {
            self.allocs.insert(number, (bytes, i));
        }
        true
    }

    /// The main thread's sample nearest after sample `link` (or before it,
    /// if none of the next few was kept).
    fn nearest(&self, link: u64) -> Option<usize> {
        let at = |seq: u64| self.mains.get(&seq).map(|&(_, i)| i);
        (link + 1..=link + 64).find_map(at).or_else(|| (link.saturating_sub(64)..link).rev().find_map(at))
    }

    /// The first of R's main thread's next few samples after `p`'s link
    /// taken while R's innermost record was `p`'s.
    fn next_in(&self, p: &Pending) -> Option<usize> {
        if p.context == 0 {
            return None;
        }
        (p.link + 1..=p.link + 64).find_map(|seq| match self.mains.get(&seq) {
            Some(&(context, i)) if context == p.context => Some(i),
            _ => None,
        })
    }

    /// Settles the samples of other threads whose main thread's sample has
    /// come since; with `last`, every one (the session ended).
    pub fn settle_pending(&mut self, last: bool) {
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            if !self.settle(&p, last) {
                self.pending.push(p);
            }
        }
    }

    /// Gives the snapshot words of every stack the number `renumber` says
    /// (None: left as it is), keeping their other bits (see
    /// `capture::traced`).
    pub fn renumber_snapshots(&mut self, renumber: impl Fn(u32) -> Option<u32>) {
        for (key, _) in self.stacks.iter_mut() {
            let mut words = key.to_vec();
            let mut changed = false;
            for w in words.iter_mut() {
                if let Entry::Origin(o) = Entry::decode(*w) {
                    if let Some(k) = renumber(o.snapshot).filter(|&k| k != o.snapshot) {
                        *w = record::Origin { snapshot: k, ..o }.encode();
                        changed = true;
                    }
                }
            }
            if changed {
                *key = words.into();
            }
        }
        self.index = self.stacks.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
    }

    /// Approximate heap bytes held (for the memory report).
    pub fn heap_bytes(&self) -> usize {
        self.stacks.iter().map(|(k, _)| k.len() * 8 + 96).sum::<usize>()
            + self.mains.len() * 32
            + self.pending.iter().map(|p| p.part.len() * 8 + 48).sum::<usize>()
            + self.times.buckets.len() * 8
            + self.allocs.len() * 32
    }

    /// The counts of a stack (tests).
    #[cfg(test)]
    pub fn counts(&self, key: &[u64]) -> Option<Counts> {
        self.index.get(key).map(|&i| self.stacks[i].1)
    }
}

/// What a finished session hands back.
pub struct Finished {
    pub(crate) collected: Collected,
    pub(crate) labels: super::labels::Labels,
    /// Every snapshot used, by number (the samples name theirs), the last
    /// one last: for placing addresses in modules and function starts
    /// (boxed: each stays where it was published until it is recycled).
    #[allow(clippy::vec_box)]
    pub(crate) snapshots: Vec<Box<Snapshot>>,
    /// (Counted, and read by nothing yet.)
    #[allow(dead_code)]
    pub(crate) handler_runs: u64,
    pub(crate) dropped: u64,
    pub(crate) outside: u64,
    pub(crate) duration_ns: u64,
    pub(crate) started: std::time::SystemTime,
    /// Whether the other threads were sampled, and what is known of them
    /// (in the order they were found); R's main thread's kernel id and
    /// the CPU time it used.
    pub(crate) all_threads: bool,
    pub(crate) threads: Vec<Thread>,
    pub(crate) main_tid: i32,
    /// Its name (`comm`).
    pub(crate) main_name: String,
    pub(crate) main_cpu_ns: u64,
    /// The CPU time the profiler's collector thread, and the threads it
    /// reads workers with, used while sampling ran (None from outside).
    pub(crate) collector_cpu_ns: Option<u64>,
    /// The processes that worked for the profiled one while it ran, with
    /// what each used (see `relatives::watch`; none from outside).
    pub relatives: Vec<crate::relatives::watch::Seen>,
    /// Snapshots (by number) of processes other than the one profiled,
    /// read from outside while it ran (see `capture::traced`), with the
    /// modules loaded in each as last seen: their addresses are named
    /// through those.
    pub(crate) elsewhere: Vec<(std::ops::Range<usize>, Arc<crate::modules::ModuleMap>)>,
    /// Other threads' samples lost.
    pub(crate) thread_dropped: u64,
    /// `fork()`s the process made while the profile ran (0 from outside:
    /// not known).
    pub(crate) forked: u64,
    /// A memory profile's figures (None: a time profile).
    pub(crate) alloc: Option<AllocFigures>,
    /// The modules addresses are named through: None for this process's
    /// loaded now; another process's (a recording from outside) as last
    /// seen.
    pub modules_now: Option<Arc<crate::modules::ModuleMap>>,
    /// The profiled process and its command line.
    pub(crate) pid: i32,
    pub(crate) command: String,
    /// The module whose code starts the threads a profile saw start (its
    /// frames at the bottom of their stacks are plumbing, left out).
    pub(crate) launch_module: Option<String>,
}

/// What a memory profile adds to a finished session.
#[derive(Clone, Debug, Default)]
pub struct AllocFigures {
    /// The mean bytes between samples.
    pub mean: u64,
    /// The numbers of the samples whose blocks were not freed when the
    /// profile ended.
    pub live: Vec<u64>,
    /// Allocations seen, and sampled.
    pub allocations: u64,
    pub sampled: u64,
    /// Sampled blocks the table of live ones had no room for (counted as
    /// freed).
    pub untracked: u64,
}

/// What the profile keeps about one forked child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// Its command line (its parent's, as a fork has), from `/proc`.
    pub command: String,
    /// CPU time it used, from its own clock (its last sample's) or the
    /// kernel's account of it (`/proc/PID/stat`, while it ran), whichever
    /// is more.
    pub cpu_ns: u64,
    /// Samples it took, and timer intervals it lost (a full ring).
    pub samples: u64,
    pub dropped: u64,
}

impl Finished {
    /// How many of `snapshots` are of the profiled process (the snapshots
    /// of workers read from outside follow them, see `elsewhere`).
    pub(crate) fn own_snapshots(&self) -> usize {
        self.elsewhere.first().map_or(self.snapshots.len(), |r| r.0.start)
    }
}

/// What the profile keeps about one thread other than R's main thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    pub tid: i32,
    /// From `/proc/self/task/<tid>/comm`, read when found and again later
    /// (a thread often names itself after it starts).
    pub name: String,
    /// CPU time it used while the profile ran, from its own clock (up to
    /// the last poll that saw it alive).
    pub cpu_ns: u64,
    /// Whether it started while the profile ran.
    pub started: bool,
    /// Whether it ended while the profile ran.
    pub ended: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::record::{Header, Origin};

    fn header(flags: Flags, weight: u64, ns: u64) -> u64 {
        Header { flags, weight, handler_ns: ns }.encode()
    }

    /// An origin word: snapshot `snapshot` of thread `tid`.
    fn origin(snapshot: u32, tid: u32) -> u64 {
        Origin::thread(snapshot, tid).encode()
    }

    fn native(ip: usize) -> u64 {
        Entry::native(ip, false)
    }

    #[test]
    fn distinct_stacks_are_counted_not_stored_again() {
        let mut c = Collected::default();
        for i in 0..10_000u64 {
            let stack = if i % 4 == 0 { [1u64, 2] } else { [3, 4] };
            c.absorb(&[header(Flags::NONE, 1, 500), stack[0], i, 0, stack[1]]);
        }
        c.absorb(&[header(Flags::TRUNCATED_NATIVE, 3, 500), 1, 10_001, 0, 2]);
        assert_eq!(c.stacks.len(), 2);
        assert_eq!(c.samples, 10_001);
        assert_eq!(c.weight, 10_003);
        assert_eq!(c.truncated, 1);
        let a = c.counts(&[1u64, 2]).unwrap();
        assert_eq!((a.weight, a.samples, a.truncated), (2503, 2501, 1));
        assert!(c.heap_bytes() < 400_000);
    }

    #[test]
    fn allocation_samples_are_kept_by_number_with_their_size() {
        let mut c = Collected::default();
        let info = record::alloc_tail;
        let main = |seq: u64, n: u64, bytes: u64| {
            [
                &[header(Flags::ALLOC, 1, 900), origin(0, 0), seq, 0x7000, native(0x10), Entry::r(5)][..],
                &info(n, bytes)[..],
            ]
            .concat()
        };
        c.absorb(&main(1, 1, 4096));
        c.absorb(&main(2, 2, 100));
        // Another thread's, taken while R's innermost record was the main
        // thread's sample 2's: under that sample's stack, under [thread N].
        let other = origin(0, 77);
        assert_eq!(Origin::decode(other).unwrap().tid, 77);
        c.absorb(
            &[
                &[header(Flags::ALLOC | Flags::WORKER, 1, 900), other, 2, 0x7000, native(0x20)][..],
                &info(3, 64)[..],
            ]
            .concat(),
        );
        // One that moved on: at the root.
        c.absorb(
            &[
                &[header(Flags::ALLOC | Flags::WORKER, 1, 900), other, 2, 0x9000, native(0x20)][..],
                &info(4, 32)[..],
            ]
            .concat(),
        );
        c.settle_pending(true);
        let thread = Entry::r(crate::profile::labels::THREAD);
        let joined: Vec<u64> = vec![other, native(0x20), thread, origin(0, 0), native(0x10), Entry::r(5)];
        assert_eq!(c.allocs[&1], (4096, 0));
        assert_eq!(c.allocs[&2], (100, 0));
        assert_eq!(&c.stacks[c.allocs[&3].1].0[..], &joined[..]);
        assert_eq!(c.allocs[&3].0, 64);
        assert_eq!(&c.stacks[c.allocs[&4].1].0[..], &[other, native(0x20), thread][..]);
        assert_eq!(c.thread_order, vec![77]);
        assert_eq!((c.samples, c.joined, c.alone), (4, 1, 1));
        // A record without its two last words is not an allocation's.
        let before = c.samples;
        c.absorb(&[header(Flags::ALLOC, 1, 900), origin(0, 0), 9, 0, native(0x10)]);
        assert!(!c.allocs.contains_key(&9));
        assert_eq!(c.samples, before + 1);
    }

    #[test]
    fn a_worker_processs_samples_join_the_main_threads_and_are_renumbered() {
        use crate::profile::labels::PROCESS;
        let mut c = Collected::default();
        let worker = Origin::child(1 << 30, 4242).encode();
        let flags = Flags::PROCESS | Flags::WORKER;
        // Before the main thread's sample 3 came: pending, then under it.
        c.absorb(&[header(flags, 2, 900), worker, 3, 0x7000, native(0x20), Entry::r(40)]);
        assert_eq!(c.stacks.len(), 0);
        c.absorb(&[header(Flags::NONE, 1, 500), origin(0, 0), 3, 0x7000, Entry::r(12)]);
        c.settle_pending(false);
        // R's innermost record had changed (future polls its workers
        // through calls that come and go): under that sample all the
        // same (`build` keeps only its dispatching call).
        c.absorb(&[header(flags, 1, 900), worker, 3, 0x9000, native(0x20), Entry::r(40)]);
        // One naming a sample that was not kept (7): the nearest (8).
        c.absorb(&[header(Flags::NONE, 1, 500), origin(0, 0), 8, 0x7100, Entry::r(13)]);
        c.absorb(&[header(flags, 1, 900), worker, 7, 0x7100, native(0x20), Entry::r(40)]);
        // Before any main thread's sample, at the end: at the root.
        let mut d = Collected::default();
        d.absorb(&[header(flags, 1, 900), worker, 1, 0x7000, native(0x20), Entry::r(40)]);
        d.settle_pending(true);
        c.settle_pending(true);
        let process = Entry::r(PROCESS);
        let joined = vec![worker, native(0x20), Entry::r(40), process, origin(0, 0), Entry::r(12)];
        let later = vec![worker, native(0x20), Entry::r(40), process, origin(0, 0), Entry::r(13)];
        let alone = vec![worker, native(0x20), Entry::r(40), process];
        assert_eq!(c.counts(&joined).unwrap().weight, 3);
        assert_eq!(c.counts(&later).unwrap().weight, 1);
        assert_eq!(d.counts(&alone).unwrap().weight, 1);
        assert_eq!(c.process_order, vec![4242]);
        assert!(c.thread_order.is_empty());
        // The worker's snapshots come after this process's 5: its numbers
        // change, the main thread's do not.
        c.renumber_snapshots(|k| (k >= 1 << 30).then(|| k - (1 << 30) + 5));
        let moved = Origin::child(5, 4242).encode();
        let joined = vec![moved, native(0x20), Entry::r(40), process, origin(0, 0), Entry::r(12)];
        assert_eq!(c.counts(&joined).unwrap().weight, 3);
    }

    #[test]
    fn uncertain_samples_are_stacks_of_their_own() {
        let mut c = Collected::default();
        let rec = [header(Flags::NONE, 1, 500), origin(1, 0), 1, 0x10, native(0x1234)];
        c.absorb(&rec);
        c.absorb_as(&rec, true);
        c.absorb_as(&rec, false);
        assert_eq!(c.stacks.len(), 2);
        assert_eq!(c.counts(&[origin(1, 0), native(0x1234)]).unwrap().samples, 2);
        assert_eq!(c.counts(&[Origin::main(1).marked(true).encode(), native(0x1234)]).unwrap().samples, 1);
        assert_eq!(c.samples, 3);
    }

    #[test]
    fn other_threads_samples_join_the_main_threads_stack_while_r_stays_put() {
        use crate::profile::labels::THREAD;
        let mut c = Collected::default();
        let main = |seq: u64, ctx: u64, leaf: usize| {
            [header(Flags::NONE, 1, 500), origin(0, 0), seq, ctx, native(leaf), Entry::r(9)]
        };
        let worker = |tid: u64, seq: u64, ctx: u64| {
            [header(Flags::WORKER, 1, 500), origin(0, tid as u32), seq, ctx, native(0x77)]
        };
        c.absorb(&main(1, 0x100, 0x10));
        // Joins main sample 1 (same context), at the root when R moved on
        // (another context), waits for main sample 2 until it comes.
        c.absorb(&worker(5, 1, 0x100));
        c.absorb(&worker(6, 1, 0x200));
        c.absorb(&worker(5, 2, 0x300));
        assert_eq!((c.joined, c.alone), (1, 1));
        // A reference sample: not counted, but others join it.
        let mut reference = main(2, 0x300, 0x20);
        reference[0] = header(Flags::REFERENCE, 1, 500);
        c.absorb(&reference);
        c.settle_pending(false);
        assert_eq!((c.joined, c.alone, c.samples, c.references), (2, 1, 4, 1));
        let me = |tid: u64| [origin(0, tid as u32), native(0x77), Entry::r(THREAD)];
        let under =
            |tid: u64, leaf: usize| [&me(tid)[..], &[origin(0, 0), native(leaf), Entry::r(9)][..]].concat();
        assert_eq!(c.counts(&under(5, 0x10)).unwrap().weight, 1);
        assert_eq!(c.counts(&under(5, 0x20)).unwrap().weight, 1);
        assert_eq!(c.counts(&me(6)).unwrap().weight, 1);
        assert_eq!(
            c.counts(&[origin(0, 0), native(0x20), Entry::r(9)]).unwrap().weight,
            0,
            "a reference counts nothing"
        );
        // A main sample that never comes (dropped): at the end, at the root.
        c.absorb(&worker(5, 9, 0x300));
        c.settle_pending(false);
        assert_eq!(c.alone, 1);
        c.settle_pending(true);
        assert_eq!(c.alone, 2);
        assert_eq!(c.thread_order, vec![5, 6]);
        // The sample asked for never came, but one of the next ones was
        // taken in the same record of R's: under it.
        c.absorb(&worker(5, 11, 0x400));
        c.absorb(&main(12, 0x400, 0x30));
        c.settle_pending(false);
        assert_eq!((c.joined, c.alone), (3, 2));
        assert_eq!(c.counts(&under(5, 0x30)).unwrap().weight, 1);
        // The sample asked for came with its native walk cut short: not
        // joined to it, but to the next one in the same record.
        c.absorb(&worker(5, 13, 0x500));
        let mut cut = main(13, 0x500, 0x40);
        cut[0] = header(Flags::TRUNCATED_NATIVE, 1, 500);
        c.absorb(&cut);
        c.absorb(&main(14, 0x500, 0x50));
        c.settle_pending(false);
        assert_eq!((c.joined, c.alone), (4, 2));
        assert_eq!(c.counts(&under(5, 0x50)).unwrap().weight, 1);
        assert!(c.counts(&under(5, 0x40)).is_none());
    }

    #[test]
    fn another_threads_sample_is_marked_with_what_is_known_of_the_call_that_started_it() {
        use crate::profile::labels::{THREAD, THREAD_ELSEWHERE, THREAD_HERE};
        let mut c = Collected::default();
        // Thread 5 was started in the R call whose record is 0x100, thread
        // 6 before the profile (not known).
        let creator = |tid: u32| (tid == 5).then_some(0x100u64);
        let worker =
            |tid: u32, ctx: u64| [header(Flags::WORKER, 1, 500), origin(0, tid), 1, ctx, native(0x77)];
        c.absorb_with(&worker(5, 0x100), false, &creator);
        c.absorb_with(&worker(5, 0x200), false, &creator);
        c.absorb_with(&worker(6, 0x100), false, &creator);
        c.settle_pending(true);
        let alone = |tid: u32, marker: u32| [origin(0, tid), native(0x77), Entry::r(marker)];
        assert_eq!(
            c.counts(&alone(5, THREAD_HERE)).unwrap().weight,
            1,
            "sampled in the call that started it"
        );
        assert_eq!(c.counts(&alone(5, THREAD_ELSEWHERE)).unwrap().weight, 1, "in another call");
        assert_eq!(c.counts(&alone(6, THREAD)).unwrap().weight, 1, "its starting call not known");
    }

    #[test]
    fn handler_time_quantiles() {
        let mut t = Times::default();
        assert_eq!(t.quantile(0.5), None);
        for ns in [150, 250, 250, 350, 1_000_000] {
            t.add(ns);
        }
        assert_eq!(t.quantile(0.5), Some(300));
        assert_eq!(t.quantile(0.99), Some(1_000_000));
        assert_eq!(t.total_ns, 1_001_000);
    }

    #[test]
    fn long_handler_times_keep_their_quantiles() {
        // Beyond 100 µs: within 1.6% of the truth, the median apart from
        // the 99th percentile.
        let mut t = Times::default();
        for i in 0..1000u64 {
            t.add(200_000 + i * 1000); // 200 µs to 1.2 ms
        }
        let median = t.quantile(0.5).unwrap() as f64;
        let p99 = t.quantile(0.99).unwrap() as f64;
        assert!((median / 700_000.0 - 1.0).abs() < 0.02, "median {median}");
        assert!((p99 / 1_190_000.0 - 1.0).abs() < 0.02, "p99 {p99}");
        for ns in [99_999, 100_000, 131_071, 131_072, 5_000_000_000, u32::MAX as u64] {
            let i = bucket(ns);
            assert!(upper(i) > ns, "{ns} below its bucket's upper end");
            assert!(i == 0 || upper(i - 1) <= ns, "{ns} above the previous bucket");
        }
    }
}
