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

use super::{RawFrame, StackEnd};
use crate::modules::{self, ModuleMap};
use crate::reentry::ReentryLock;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// The `Failed` message that asks the caller to fall back to libgcc.
pub const UNSUPPORTED: &str = "unwind rule not supported by the cfi backend";

type Slice = gimli::EndianArcSlice<LittleEndian>;

const RBP: gimli::Register = gimli::X86_64::RBP;
const RSP: gimli::Register = gimli::X86_64::RSP;
const RA: gimli::Register = gimli::X86_64::RA;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Sp,
    Bp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SavedBp {
    Same,
    At(i64),
    Lost,
}

/// What to do at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Step {
        cfa: Base,
        cfa_offset: i64,
        ra_offset: i64,
        bp: SavedBp,
        start: usize,
    },
    /// The return address is undefined: the outermost frame.
    Outermost {
        start: usize,
    },
    /// No usable rule here (see module docs).
    Unsupported,
    /// Not in the code of any loaded module.
    NotCode,
}

impl Rule {
    fn start(&self) -> usize {
        match *self {
            Rule::Step { start, .. } | Rule::Outermost { start } => start,
            _ => 0,
        }
    }
}

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

struct Tables {
    hdr: gimli::ParsedEhFrameHdr<Slice>,
    eh_frame: EhFrame<Slice>,
    bases: BaseAddresses,
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
        let Some(Some(t)) = &self.tables[hit.module] else { return Rule::Unsupported };
        let Some(table) = t.hdr.table() else { return Rule::Unsupported };
        let fde = match table
            .fde_for_address(&t.eh_frame, &t.bases, probe as u64, |s, b, o| s.cie_from_offset(b, o))
        {
            Ok(fde) => fde,
            Err(_) => return Rule::Unsupported,
        };
        let start = fde.initial_address() as usize;
        let row = match fde.unwind_info_for_address(&t.eh_frame, &t.bases, &mut self.ctx, probe as u64) {
            Ok(row) => row,
            Err(_) => return Rule::Unsupported,
        };
        let (cfa, cfa_offset) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if *register == RSP => (Base::Sp, *offset),
            CfaRule::RegisterAndOffset { register, offset } if *register == RBP => (Base::Bp, *offset),
            _ => return Rule::Unsupported,
        };
        let ra_offset = match row.register(RA) {
            Some(RegisterRule::Offset(o)) => o,
            Some(RegisterRule::Undefined) => return Rule::Outermost { start },
            _ => return Rule::Unsupported,
        };
        let bp = match row.register(RBP) {
            None | Some(RegisterRule::SameValue) => SavedBp::Same,
            Some(RegisterRule::Offset(o)) => SavedBp::At(o),
            Some(RegisterRule::Undefined) => SavedBp::Lost,
            _ => return Rule::Unsupported,
        };
        Rule::Step { cfa, cfa_offset, ra_offset, bp, start }
    }
}

/// Copies a module's `.eh_frame_hdr` and `.eh_frame` out of the loaded image
/// and parses the header's search table.
fn tables_for(map: &ModuleMap, index: usize) -> Option<Tables> {
    let m = map.module(index);
    let (hdr_addr, hdr_len) = m.eh_frame_hdr?;
    let readable = |addr: usize, len: usize| {
        m.segments
            .iter()
            .find(|s| s.read && s.start <= addr && addr.checked_add(len).is_some_and(|e| e <= s.end))
    };
    readable(hdr_addr, hdr_len)?;
    // SAFETY: checked to lie in a readable segment of a loaded module.
    let hdr_bytes: Arc<[u8]> = unsafe { crate::memory::copy_loaded(hdr_addr, hdr_len)? }.into();
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
    let hdr = EhFrameHdr::from(Slice::new(hdr_bytes, LittleEndian)).parse(&bases, 8).ok()?;
    let eh_frame_addr = match hdr.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a as usize,
        gimli::Pointer::Indirect(_) => return None,
    };
    // `.eh_frame` has no recorded size: copy to the end of its segment, then
    // keep what precedes its zero terminator.
    let seg = readable(eh_frame_addr, 4)?;
    // SAFETY: as above (up to the end of the same readable segment).
    let mut eh = unsafe { crate::memory::copy_loaded(eh_frame_addr, seg.end - eh_frame_addr)? };
    eh.truncate(eh_frame_len(&eh));
    let text = m.segments.iter().find(|s| s.exec).map_or(0, |s| s.start);
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr as u64)
        .set_eh_frame(eh_frame_addr as u64)
        .set_text(text as u64);
    let eh: Arc<[u8]> = eh.into();
    Some(Tables { hdr, eh_frame: EhFrame::from(Slice::new(eh, LittleEndian)), bases })
}

/// Length of an `.eh_frame` section: its entries up to the zero terminator.
fn eh_frame_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    loop {
        let Some(word) = bytes.get(at..at + 4) else { return bytes.len() };
        let len = u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize;
        let next = if len == 0 {
            return at + 4;
        } else if len == 0xffff_ffff {
            let Some(long) = bytes.get(at + 4..at + 12) else { return bytes.len() };
            let mut b = [0u8; 8];
            b.copy_from_slice(long);
            (at + 12).checked_add(u64::from_le_bytes(b) as usize)
        } else {
            (at + 4).checked_add(len)
        };
        match next {
            Some(n) if n <= bytes.len() => at = n,
            _ => return bytes.len(),
        }
    }
}

/// Registers of the calling code: (rip, rsp, rbp).
#[inline(always)]
fn registers() -> (usize, usize, usize) {
    let (ip, sp, bp): (usize, usize, usize);
    // SAFETY: reads three registers; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (ip, sp, bp)
}

#[inline(never)]
pub(super) fn walk(out: &mut Vec<RawFrame>, max: usize, want_start: bool) -> StackEnd {
    let (mut ip, mut sp, bp0) = registers();
    let mut bp = Some(bp0);
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

    let mut first = true;
    loop {
        if out.len() >= max {
            return StackEnd::Limit;
        }
        let probe = if first { ip } else { ip.wrapping_sub(1) };
        let rule = state.rule(&map, probe);
        out.push(RawFrame { ip, stack: sp, start: if want_start { rule.start() } else { 0 }, signal: false });
        first = false;
        let (cfa, cfa_offset, ra_offset, saved_bp) = match rule {
            Rule::Step { cfa, cfa_offset, ra_offset, bp, .. } => (cfa, cfa_offset, ra_offset, bp),
            Rule::Outermost { .. } => return StackEnd::Outermost,
            Rule::Unsupported => return StackEnd::Failed(UNSUPPORTED.into()),
            Rule::NotCode => {
                return StackEnd::Failed(format!("address {ip:#x} is not code of any loaded module"))
            }
        };
        let base = match cfa {
            Base::Sp => sp,
            Base::Bp => match bp {
                Some(bp) => bp,
                None => return StackEnd::Failed(UNSUPPORTED.into()),
            },
        };
        let Some(cfa) = base.checked_add_signed(cfa_offset as isize) else {
            return StackEnd::Failed("CFA out of range".into());
        };
        if cfa <= sp {
            return StackEnd::Failed("the stack did not grow towards its top".into());
        }
        let Some(ra) = cfa.checked_add_signed(ra_offset as isize).and_then(read) else {
            return StackEnd::Failed("return address outside the stack".into());
        };
        bp = match saved_bp {
            SavedBp::Same => bp,
            SavedBp::At(o) => cfa.checked_add_signed(o as isize).and_then(read),
            SavedBp::Lost => None,
        };
        sp = cfa;
        ip = ra;
        if ip == 0 {
            return StackEnd::Outermost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eh_frame_length_stops_at_the_terminator() {
        let mut b = Vec::new();
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&[1; 8]);
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&[2; 4]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&[9; 100]); // whatever follows in the segment
        assert_eq!(eh_frame_len(&b), 24);
        // A length running past the data: keep everything.
        assert_eq!(eh_frame_len(&[0xff, 0, 0, 0, 1]), 5);
        assert_eq!(eh_frame_len(&[]), 0);
    }
}
