//! The state a running session shares between the handler (through
//! `handler::ACTIVE`), the collector thread and the thread that started
//! it, and what starts its samples.

use super::super::collect::Collected;
use super::super::compose::{RFacts, Scratch};
use super::clock::Clock;
use super::ring::Ring;
use super::slots::Slots;
use super::snapshots::Snapshots;
use crate::unwind::walk::Snapshot;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// What starts a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A timer on each thread's `clock`, every `interval_ns`.
    Timer { clock: Clock, interval_ns: u64 },
    /// Allocations: one sampled per `mean_bytes` allocated, on average.
    Allocations { mean_bytes: u64 },
}

impl Trigger {
    /// The timers' interval (None: no timer).
    pub(crate) fn interval_ns(self) -> Option<u64> {
        match self {
            Trigger::Timer { interval_ns, .. } => Some(interval_ns),
            Trigger::Allocations { .. } => None,
        }
    }

    pub(crate) fn is_allocations(self) -> bool {
        matches!(self, Trigger::Allocations { .. })
    }

    /// What one sample's weight stands for: nanoseconds of the clock, or
    /// bytes allocated.
    pub fn period(self) -> u64 {
        match self {
            Trigger::Timer { interval_ns, .. } => interval_ns,
            Trigger::Allocations { mean_bytes } => mean_bytes,
        }
    }
}

/// A running session. Shared by the handler (through `handler::ACTIVE`),
/// the collector thread and the thread that started it.
pub struct Session {
    pub(super) facts: RFacts,
    pub(super) trigger: Trigger,
    pub(super) ring: Ring,
    /// R's main thread's buffers: used by one sample at a time (see
    /// `main_busy`).
    pub(super) scratch: UnsafeCell<Option<Box<Scratch>>>,
    pub(super) snapshots: Snapshots,
    pub(super) main_thread: libc::pthread_t,
    pub(super) main_tid: i32,
    pub(super) pid: libc::pid_t,
    pub(super) signal: libc::c_int,
    /// The slots of forked children sampling themselves (None: children
    /// are not sampled).
    pub(super) children: Option<super::children::Children>,
    /// The processes working for this one, looked at by the collector
    /// (None: not watched; taken when the session stops).
    pub(super) relatives: Mutex<Option<crate::relatives::watch::Watch>>,
    /// What the collector knows of them (the collector's; at the end, the
    /// stopping thread's).
    pub(super) parent: Mutex<super::children::Parent>,
    /// Sampling slots of the other threads (none: R's main thread only).
    pub(super) slots: Slots,
    /// R's main thread's last sample, for other threads' samples to be
    /// shown under (see `handler::link_to_main`).
    pub(super) main_ref: super::main_ref::MainRef,
    /// Another thread asked the main thread for a sample (not yet taken),
    /// and when the last such request was made.
    pub(super) requested: AtomicBool,
    pub(super) requested_ns: AtomicU64,
    /// Other threads' samples lost (no free slot, or a full ring).
    pub(super) thread_dropped: AtomicU64,
    /// `fork()`s this process made while the session ran.
    pub(super) forked: AtomicU64,
    pub(super) handler_runs: AtomicU64,
    /// R's main thread's samples lost to a full ring.
    pub(super) dropped: AtomicU64,
    /// Timer intervals whose sample was outside the profiled code.
    pub(super) outside: AtomicU64,
    pub(super) stop: AtomicBool,
    pub(super) collected: Mutex<Collected>,
    /// A memory profile: the last allocation sample's number, and the code
    /// of winch's own library (the hook's frames, left out of samples).
    pub(super) alloc_seq: AtomicU64,
    pub(super) own_code: (usize, usize),
    /// A memory profile's sample of R's main thread is using `scratch`:
    /// the signal handler (a reference sample another thread asked for)
    /// leaves it alone then.
    pub(super) main_busy: AtomicBool,
    /// A CPU profile: each thread's account of its CPU time (what its
    /// samples stand for).
    pub(super) accounts: Option<super::account::Accounts>,
    /// A CPU profile: each thread's watch (where its samples are taken on
    /// a busy machine).
    pub(super) watches: Option<super::watches::Watches>,
}

// SAFETY: `scratch` is touched only by R's main thread's samples, one at a
// time (the signal is blocked in its own handler; an allocation's sample
// sets `main_busy`, which the handler respects), and by `finish` after
// sampling stopped (no handler runs: see `active`); the slots guard their
// own buffers; everything else is atomics, mutexes or immutable.
unsafe impl Sync for Session {}
// SAFETY: as above; the snapshots are owned.
unsafe impl Send for Session {}

impl Session {
    /// Whether the calling thread is R's main thread (async-signal-safe).
    #[inline]
    pub(super) fn on_main_thread(&self) -> bool {
        // SAFETY: pthread_self reads the thread pointer; pthread_equal compares.
        unsafe { libc::pthread_equal(libc::pthread_self(), self.main_thread) != 0 }
    }

    /// The snapshot samples are walked with now, and its number.
    #[inline]
    pub(super) fn snapshot(&self) -> Option<(&Snapshot, u32)> {
        self.snapshots.current()
    }
}
