//! winch's own unwinder for x86_64 Linux: DWARF call-frame information read
//! from the loaded images (`.eh_frame_hdr` and `.eh_frame`, via gimli), with
//! the rule of every return address cached after its first use. A warm walk
//! costs a hash lookup and two stack reads per frame, no system call and no
//! lock of the dynamic loader (libunwind 1.6 masks signals twice per step).
//!
//! Only the rules compilers emit for ordinary code are modelled: the CFA is
//! RSP or RBP plus an offset, the return address and RBP are saved at offsets
//! from the CFA. Anything else (signal trampolines, CFA expressions, stack
//! realignment) makes the walk report `UNSUPPORTED`, and the caller redoes the
//! whole capture with libgcc's unwinder; so does a walk that starts off the
//! thread's own stack (a signal handler's alternate stack) or finds the
//! tables busy. Every stack read is bounds-checked against the thread's
//! stack, and the unwind tables are copies (see `crate::memory`), not the
//! mapped images.

use super::rules::{self, tables_for, Regs, Rule, Step, Tables};
use super::{RawFrame, StackEnd};
use crate::modules::{self, ModuleMap};
use crate::reentry::ReentryLock;
use gimli::UnwindContext;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub use super::rules::UNSUPPORTED;

/// Multiplicative hashing for address keys.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 ^ (n as u64 >> 29)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

struct State {
    serial: u64,
    tables: Vec<Option<Option<Tables>>>,
    rules: HashMap<usize, Rule, BuildHasherDefault<AddrHasher>>,
    ctx: Box<UnwindContext<usize>>,
}

static STATE: ReentryLock<Option<State>> = ReentryLock::new(None);

/// Bound on cached rules.
const MAX_RULES: usize = 1 << 16;

impl State {
    fn new() -> State {
        State {
            serial: 0,
            tables: Vec::new(),
            rules: HashMap::default(),
            ctx: Box::new(UnwindContext::new()),
        }
    }

    /// Forgets everything learnt from a module map that is no longer current.
    fn sync(&mut self, map: &ModuleMap) {
        if self.serial != map.serial() {
            self.serial = map.serial();
            self.tables = (0..map.modules().len()).map(|_| None).collect();
            self.rules.clear();
        }
    }

    fn rule(&mut self, map: &ModuleMap, probe: usize) -> Rule {
        if let Some(r) = self.rules.get(&probe) {
            return *r;
        }
        let r = self.compute(map, probe);
        if self.rules.len() >= MAX_RULES {
            self.rules.clear();
        }
        self.rules.insert(probe, r);
        r
    }

    fn compute(&mut self, map: &ModuleMap, probe: usize) -> Rule {
        let Some(hit) = map.lookup(probe).filter(|h| h.exec) else { return Rule::NotCode };
        if self.tables[hit.module].is_none() {
            self.tables[hit.module] = Some(tables_for(map, hit.module));
        }
        match &self.tables[hit.module] {
            Some(Some(t)) => t.rule(&mut self.ctx, probe),
            _ => Rule::Unsupported,
        }
    }
}

#[inline(never)]
pub(super) fn walk(out: &mut Vec<RawFrame>, max: usize, want_start: bool) -> StackEnd {
    let (ip, sp, bp) = super::registers();
    let bp = Some(bp);
    // Off the thread's own stack (an alternate signal stack, a coroutine),
    // the bounds are unknown: let libgcc walk.
    let Some((stack_lo, stack_hi)) = crate::stack::live_range(sp) else {
        return StackEnd::Failed(UNSUPPORTED.into());
    };
    let read = |addr: usize| -> Option<usize> {
        if addr < stack_lo || !addr.is_multiple_of(8) || addr.checked_add(8).is_none_or(|e| e > stack_hi) {
            return None;
        }
        // SAFETY: an aligned word inside the live part of this thread's stack.
        Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
    };
    let map = modules::current();
    // A walk re-entered on this thread (from a signal handler, say) while
    // it holds the tables falls back to libgcc instead of waiting forever.
    let Some(mut guard) = STATE.lock() else {
        return StackEnd::Failed(UNSUPPORTED.into());
    };
    let state = guard.get_or_insert_with(State::new);
    state.sync(&map);

    let mut regs = Regs { ip, sp, bp };
    let mut first = true;
    loop {
        if out.len() >= max {
            return StackEnd::Limit;
        }
        let probe = if first { regs.ip } else { regs.ip.wrapping_sub(1) };
        let rule = state.rule(&map, probe);
        out.push(RawFrame {
            ip: regs.ip,
            stack: regs.sp,
            start: if want_start { rule.start() } else { 0 },
            signal: false,
        });
        first = false;
        match rules::step(rule, regs, read) {
            Step::Caller(next) => regs = next,
            Step::Outermost => return StackEnd::Outermost,
            Step::Stop(why) if rule == Rule::NotCode => {
                let _ = why;
                return StackEnd::Failed(format!("address {:#x} is not code of any loaded module", regs.ip));
            }
            Step::Stop(why) => return StackEnd::Failed(why.into()),
        }
    }
}
