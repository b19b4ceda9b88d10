//! From a finished session to a [`Profile`]: native addresses symbolized
//! (with inlined calls), unnamed native functions identified by their start
//! from the unwind information, R labels looked up, loops named after the
//! function running them.

use super::collect::Finished;
use super::collect::Times;
use super::model::{Bytes, Event, ProcessInfo, Profile, Stack, ThreadInfo};
use crate::symbolizer;
use stacks::Builder;
use std::collections::HashMap;

mod names;
mod processes;
mod stacks;

/// Figures about the run, for `summary()`.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Handler runs, and the timer intervals they stand for.
    pub samples: u64,
    pub weight: u64,
    /// Samples whose native stack or context chain was not read whole.
    pub truncated: u64,
    /// Intervals lost because the ring was full.
    pub dropped: u64,
    /// Intervals whose sample was the profiler's own (starting or
    /// stopping), left out.
    pub outside: u64,
    pub distinct_stacks: usize,
    /// Time spent in the handler.
    pub handler_total_ns: u64,
    pub handler_median_ns: u64,
    pub handler_p99_ns: u64,
    /// Frames whose R label did not fit in the label table.
    pub labels_full: bool,
    /// Heap bytes held by the collected stacks at the end.
    pub stack_bytes: usize,
    /// Other threads' samples: shown under R's main thread's stack, at the
    /// root (R's main thread was running R code, or had moved on), lost
    /// (no free sampling slot); samples of the main thread taken for them.
    pub thread_joined: u64,
    pub thread_alone: u64,
    pub thread_dropped: u64,
    pub references: u64,
    /// `fork()`s the process made while the profile ran.
    pub forked: u64,
    /// The CPU time the profiler's collector thread used while sampling
    /// ran (None: not known, a recording from outside).
    pub collector_cpu_ns: Option<u64>,
    /// Samples of workers read from outside, and how long each kept its
    /// worker stopped (total, median, 99th percentile).
    pub worker_stops: u64,
    pub worker_stop_total_ns: u64,
    pub worker_stop_median_ns: u64,
    pub worker_stop_p99_ns: u64,
    /// A memory profile: allocations seen, sampled, and sampled blocks
    /// whose freeing could not be followed (counted as freed).
    pub allocations: u64,
    pub sampled_allocations: u64,
    pub untracked: u64,
}

/// A memory profile's values per collected stack (by index): each
/// sample's estimates (see `alloc::poisson::estimate`), and those of the
/// samples whose blocks were still allocated at the end. The estimates
/// are summed as they are and each stack's sums rounded once: a sample's
/// count is a fraction (8.51 allocations for a 4 KiB one at 32 KiB
/// between samples), and rounding each made counts 6 % too high there,
/// 26 % where blocks are as large as the mean gap.
fn alloc_values(c: &super::collect::Collected, a: &super::collect::AllocFigures) -> Vec<Bytes> {
    // (alloc_bytes, alloc_count, inuse_bytes, inuse_count) per stack.
    let mut sums = vec![[0.0f64; 4]; c.stacks.len()];
    let live: std::collections::HashSet<u64> = a.live.iter().copied().collect();
    for (n, &(size, i)) in &c.allocs {
        let (bytes, count) = super::poisson::estimate(size as usize, a.mean);
        let v = &mut sums[i];
        v[0] += bytes;
        v[1] += count;
        if live.contains(n) {
            v[2] += bytes;
            v[3] += count;
        }
    }
    // (A stack with a sample stands for one allocation at least: every
    // sample's count is 1 or more.)
    let whole = |x: f64| x.round() as u64;
    sums.iter()
        .map(|v| Bytes {
            alloc_bytes: whole(v[0]),
            alloc_count: whole(v[1]),
            inuse_bytes: whole(v[2]),
            inuse_count: whole(v[3]),
        })
        .collect()
}

/// Builds the profile.
pub fn build(f: &Finished, event: Event, period: u64) -> (Profile, Stats) {
    symbolizer::with_global(|s| s.start_capture());
    let mut b = Builder::new(&f.labels, f);
    // The program first: pprof presents its first mapping as the profiled
    // binary (R's executable, not the first library sampled, nor a
    // worker's).
    if let Some(last) = f.own_snapshots().checked_sub(1) {
        if let Some(main) = b.maps[last].modules().iter().position(|m| m.is_main && m.has_file) {
            b.module(last, main);
        }
    }
    let threads = thread_table(f);
    let processes = process_table(f);
    let bytes = f.alloc.as_ref().map(|a| alloc_values(&f.collected, a));
    let mut stacks: Vec<Stack> = f
        .collected
        .stacks
        .iter()
        .enumerate()
        .filter(|(_, (_, counts))| counts.weight > 0)
        .map(|(i, (entries, counts))| {
            let (locations, who) = b.stack(entries);
            let thread = match who.thread {
                0 => 0,
                t => threads.iter().position(|x| x.number > 0 && x.tid == t as i64).unwrap_or(0),
            };
            let process = match who.process {
                0 => 0,
                p => processes.iter().position(|x| x.number > 0 && x.pid == p as i64).unwrap_or(0),
            };
            let bytes = bytes.as_ref().map(|v| v.get(i).copied().unwrap_or_default());
            Stack { locations, count: counts.weight, thread, process, bytes }
        })
        .collect();
    // Samples whose frames came out the same (another thread's samples
    // joined to different samples of the main thread with the same frames
    // kept) are one stack.
    // By (locations, thread, process): count and bytes.
    type Shown = (Vec<usize>, usize, usize);
    let mut merged: HashMap<Shown, (u64, Option<Bytes>)> = HashMap::with_capacity(stacks.len());
    for st in stacks.drain(..) {
        let m = merged.entry((st.locations, st.thread, st.process)).or_default();
        m.0 += st.count;
        if let Some(b) = st.bytes {
            *m.1.get_or_insert_with(Bytes::default) += b;
        }
    }
    stacks.extend(merged.into_iter().map(|((locations, thread, process), (count, bytes))| Stack {
        locations,
        count,
        thread,
        process,
        bytes,
    }));
    // Heaviest first (in bytes allocated, for a memory profile): readers
    // that stop early see what matters.
    let weight = |s: &Stack| s.bytes.map_or(s.count, |b| b.alloc_bytes);
    stacks.sort_by(|a, b| weight(b).cmp(&weight(a)).then_with(|| a.locations.cmp(&b.locations)));
    let start_unix_ns =
        f.started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let c = &f.collected;
    let stats = Stats {
        samples: c.samples,
        weight: c.weight,
        truncated: c.truncated,
        dropped: f.dropped,
        outside: f.outside,
        distinct_stacks: stacks.len(),
        handler_total_ns: c.times.total_ns,
        handler_median_ns: quantile(&c.times, 0.5),
        handler_p99_ns: quantile(&c.times, 0.99),
        labels_full: b.labels_full,
        stack_bytes: c.heap_bytes(),
        thread_joined: c.joined,
        thread_alone: c.alone,
        thread_dropped: f.thread_dropped,
        forked: f.forked,
        collector_cpu_ns: f.collector_cpu_ns,
        worker_stops: c.worker_stops.count,
        worker_stop_total_ns: c.worker_stops.total_ns,
        worker_stop_median_ns: quantile(&c.worker_stops, 0.5),
        worker_stop_p99_ns: quantile(&c.worker_stops, 0.99),
        references: c.references,
        allocations: f.alloc.as_ref().map_or(0, |a| a.allocations),
        sampled_allocations: f.alloc.as_ref().map_or(0, |a| a.sampled),
        untracked: f.alloc.as_ref().map_or(0, |a| a.untracked),
    };
    let profile = Profile {
        event,
        period,
        start_unix_ns,
        duration_ns: f.duration_ns,
        functions: b.functions,
        locations: b.locations,
        stacks,
        files: b.files,
        modules: b.modules,
        threads,
        processes,
    };
    (profile, stats)
}

/// The processes of a profile: the profiled one first, then forked
/// children in the order of their first sample (numbered from 1), then
/// those that ran but were never sampled.
fn process_table(f: &Finished) -> Vec<ProcessInfo> {
    let host = hostname();
    let mut out = vec![ProcessInfo {
        number: 0,
        pid: f.pid as i64,
        command: f.command.clone(),
        host: host.clone(),
        cpu_ns: None,
        samples: f.collected.samples,
    }];
    let known = |pid: u32| f.collected.processes.iter().find(|p| p.pid == pid);
    let samples = |pid: u32| {
        let o = crate::profile::record::Origin::child(0, pid);
        f.collected
            .stacks
            .iter()
            .filter(|(k, _)| {
                k.first()
                    .and_then(|&w| crate::profile::record::Origin::decode(w))
                    .is_some_and(|x| x.process && x.tid == o.tid)
            })
            .map(|(_, c)| c.samples)
            .sum()
    };
    for &pid in &f.collected.process_order {
        let p = known(pid);
        out.push(ProcessInfo {
            number: out.len() as u32,
            pid: pid as i64,
            command: p.map(|p| p.command.clone()).unwrap_or_default(),
            host: host.clone(),
            cpu_ns: p.map(|p| p.cpu_ns),
            samples: samples(pid),
        });
    }
    for p in &f.collected.processes {
        if !f.collected.process_order.contains(&p.pid) && p.cpu_ns > 0 {
            out.push(ProcessInfo {
                number: out.len() as u32,
                pid: p.pid as i64,
                command: p.command.clone(),
                host: host.clone(),
                cpu_ns: Some(p.cpu_ns),
                samples: 0,
            });
        }
    }
    // The profiled process's own samples are the rest.
    let children: u64 = out.iter().skip(1).map(|p| p.samples).sum();
    out[0].samples = out[0].samples.saturating_sub(children);
    out
}

/// This machine's name.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    }
}

/// The threads of a profile: R's main thread first, then the others in the
/// order of their first sample (numbered from 1), then those found using
/// CPU but never sampled.
fn thread_table(f: &Finished) -> Vec<ThreadInfo> {
    let mut out = vec![ThreadInfo {
        number: 0,
        tid: f.main_tid as i64,
        name: f.main_name.clone(),
        cpu_ns: Some(f.main_cpu_ns),
    }];
    if !f.all_threads {
        return out;
    }
    let found = |tid: u32| f.threads.iter().find(|t| t.tid as u32 == tid);
    for &tid in &f.collected.thread_order {
        let t = found(tid);
        out.push(ThreadInfo {
            number: out.len() as u32,
            tid: tid as i64,
            name: t.map(|t| t.name.clone()).unwrap_or_default(),
            cpu_ns: t.map(|t| t.cpu_ns),
        });
    }
    for t in &f.threads {
        if t.cpu_ns > 0 && !f.collected.thread_order.contains(&(t.tid as u32)) {
            out.push(ThreadInfo {
                number: out.len() as u32,
                tid: t.tid as i64,
                name: t.name.clone(),
                cpu_ns: Some(t.cpu_ns),
            });
        }
    }
    out
}

fn quantile(t: &Times, q: f64) -> u64 {
    t.quantile(q).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::collect::{AllocFigures, Collected};

    /// A collection of `n` samples of `size`-byte allocations on one stack
    /// (numbered from 0).
    fn sampled(n: u64, size: u64) -> Collected {
        let mut c = Collected::default();
        c.stacks.push((std::sync::Arc::from(vec![0u64]), Default::default()));
        c.allocs = (0..n).map(|k| (k, (size, 0))).collect();
        c
    }

    #[test]
    fn a_stacks_allocation_count_is_the_sum_of_its_samples_estimates_rounded_once() {
        let mean = 32 * 1024;
        // 235 samples of 4 KiB blocks stand for about 2000 allocations
        // (each for 1 / (1 - exp(-1/8)) = 8.51 of them); rounding each
        // sample's count made it 235 * 9 = 2115.
        let c = sampled(235, 4096);
        let a = AllocFigures { mean, live: (0..100).collect(), ..Default::default() };
        let v = &alloc_values(&c, &a)[0];
        let (bytes, count) = crate::profile::poisson::estimate(4096, mean);
        assert_eq!(v.alloc_count, (235.0 * count).round() as u64);
        assert_eq!(v.alloc_count, 2000);
        assert_eq!(v.alloc_bytes, (235.0 * bytes).round() as u64);
        // The first 100 still allocated, likewise.
        assert_eq!(v.inuse_count, (100.0 * count).round() as u64);
        assert_eq!(v.inuse_bytes, (100.0 * bytes).round() as u64);
        // Blocks as large as the gap: 1.58 each, not 2.
        let c = sampled(100, mean);
        let a = AllocFigures { mean, ..Default::default() };
        assert_eq!(alloc_values(&c, &a)[0].alloc_count, 158);
        // One sample of a large block stands for one allocation.
        let c = sampled(1, 10 * mean);
        assert_eq!(alloc_values(&c, &a)[0].alloc_count, 1);
    }
}
