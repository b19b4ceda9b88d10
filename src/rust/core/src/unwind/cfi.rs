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
//! whole capture with libgcc's unwinder. Every stack read is bounds-checked
//! against the thread's stack.

use super::{RawFrame, StackEnd};
use crate::modules::{self, ModuleMap};
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection,
};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// The `Failed` message that asks the caller to fall back to libgcc.
pub const UNSUPPORTED: &str = "unwind rule not supported by the cfi backend";

type Slice = EndianSlice<'static, LittleEndian>;

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

// The tables point into loaded images; they are only used while the module
// map they were built for is current (see `sync`).
unsafe impl Send for State {}

static STATE: Mutex<Option<State>> = Mutex::new(None);

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

/// Parses a module's `.eh_frame_hdr` and locates its `.eh_frame`, both in
/// the loaded image.
fn tables_for(map: &ModuleMap, index: usize) -> Option<Tables> {
    let m = map.module(index);
    let (hdr_addr, hdr_len) = m.eh_frame_hdr?;
    let within = |addr: usize, len: usize| {
        m.segments.iter().find(|s| s.start <= addr && addr.checked_add(len).is_some_and(|e| e <= s.end))
    };
    within(hdr_addr, hdr_len)?;
    // SAFETY: the range lies inside a loaded segment of a module that stays
    // loaded while this map is current.
    let hdr_bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, hdr_len) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
    let hdr = EhFrameHdr::new(hdr_bytes, LittleEndian).parse(&bases, 8).ok()?;
    let eh_frame_addr = match hdr.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a as usize,
        gimli::Pointer::Indirect(_) => return None,
    };
    let seg = within(eh_frame_addr, 1)?;
    // SAFETY: as above; `.eh_frame` runs at most to the end of its segment.
    let eh_bytes: &'static [u8] =
        unsafe { std::slice::from_raw_parts(eh_frame_addr as *const u8, seg.end - eh_frame_addr) };
    let text = m.segments.iter().find(|s| s.exec).map_or(0, |s| s.start);
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr as u64)
        .set_eh_frame(eh_frame_addr as u64)
        .set_text(text as u64);
    Some(Tables { hdr, eh_frame: EhFrame::new(eh_bytes, LittleEndian), bases })
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
    let Some(stack_hi) = crate::stack::thread_stack_top() else {
        return StackEnd::Failed("the bounds of this thread's stack are unknown".into());
    };
    let stack_lo = sp;
    let read = |addr: usize| -> Option<usize> {
        if addr < stack_lo || addr % 8 != 0 || addr.checked_add(8).is_none_or(|e| e > stack_hi) {
            return None;
        }
        // SAFETY: an aligned word inside the live part of this thread's stack.
        Some(unsafe { std::ptr::read_volatile(addr as *const usize) })
    };
    let map = modules::current();
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
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
