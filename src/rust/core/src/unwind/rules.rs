//! DWARF call-frame information for x86_64, reduced to what a fast walk
//! needs: the rule at an address (where the CFA is, where the return address
//! and RBP were saved), computed from copies of a module's `.eh_frame_hdr`
//! and `.eh_frame`. Shared by the `cfi` backend and the profiler's
//! signal-handler walk; `Tables::rule` allocates nothing when given a
//! context with in-line storage.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext,
    UnwindContextStorage, UnwindSection,
};
use std::sync::Arc;

use crate::modules::ModuleMap;

pub(crate) type Slice = gimli::EndianArcSlice<LittleEndian>;

/// The `Failed` message that asks the caller to fall back to libgcc.
pub const UNSUPPORTED: &str = "unwind rule not supported by the cfi backend";

const RBP: gimli::Register = gimli::X86_64::RBP;
const RSP: gimli::Register = gimli::X86_64::RSP;
const RA: gimli::Register = gimli::X86_64::RA;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    Sp,
    Bp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SavedBp {
    Same,
    At(i64),
    Lost,
}

/// What to do at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
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
    pub(crate) fn start(&self) -> usize {
        match *self {
            Rule::Step { start, .. } | Rule::Outermost { start } => start,
            _ => 0,
        }
    }
}

/// Unwind storage on the stack (or in a preallocated box): no allocation.
pub(crate) struct InLine;

impl UnwindContextStorage<usize> for InLine {
    type Rules = [(gimli::Register, RegisterRule<usize>); 32];
    type Stack = [gimli::UnwindTableRow<usize, InLine>; 4];
}

/// A module's unwind tables: copies (`Slice`, the default), or the loaded
/// image's own bytes read in place (`InPlace`, see [`tables_in_place`]).
#[derive(Clone)]
pub(crate) struct Tables<R: gimli::Reader<Offset = usize> = Slice> {
    hdr: gimli::ParsedEhFrameHdr<R>,
    eh_frame: EhFrame<R>,
    bases: BaseAddresses,
}

/// Unwind tables read where the loader mapped them.
pub(crate) type InPlace = gimli::EndianSlice<'static, LittleEndian>;

impl<R: gimli::Reader<Offset = usize>> Tables<R> {
    /// The rule at `probe` (an address in this module).
    pub(crate) fn rule<S: UnwindContextStorage<usize>>(
        &self,
        ctx: &mut UnwindContext<usize, S>,
        probe: usize,
    ) -> Rule {
        let Some(table) = self.hdr.table() else { return Rule::Unsupported };
        let fde = match table
            .fde_for_address(&self.eh_frame, &self.bases, probe as u64, |s, b, o| s.cie_from_offset(b, o))
        {
            Ok(fde) => fde,
            Err(_) => return Rule::Unsupported,
        };
        let start = fde.initial_address() as usize;
        match fde.unwind_info_for_address(&self.eh_frame, &self.bases, ctx, probe as u64) {
            Ok(row) => rule_from_row(row, start),
            Err(_) => Rule::Unsupported,
        }
    }

    /// The key of the function (its unwind entry) holding `probe`: the
    /// address of its FDE, found by the header's binary search alone.
    pub(crate) fn fde_key(&self, probe: usize) -> Option<usize> {
        let table = self.hdr.table()?;
        match table.lookup(probe as u64, &self.bases).ok()? {
            gimli::Pointer::Direct(a) => Some(a as usize),
            gimli::Pointer::Indirect(_) => None,
        }
    }

    /// Calls `each(start, end, rule)` for every row of the unwind entry at
    /// FDE address `fde` (in address order); returns the function's start
    /// and end, or None if the entry cannot be read.
    pub(crate) fn rows<S: UnwindContextStorage<usize>>(
        &self,
        ctx: &mut UnwindContext<usize, S>,
        fde: usize,
        mut each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)> {
        let table = self.hdr.table()?;
        let offset = table.pointer_to_offset(gimli::Pointer::Direct(fde as u64)).ok()?;
        let fde =
            self.eh_frame.fde_from_offset(&self.bases, offset, |s, b, o| s.cie_from_offset(b, o)).ok()?;
        let start = fde.initial_address() as usize;
        let mut table = fde.rows(&self.eh_frame, &self.bases, ctx).ok()?;
        while let Ok(Some(row)) = table.next_row() {
            each(row.start_address() as usize, row.end_address() as usize, rule_from_row(row, start));
        }
        Some((start, fde.end_address() as usize))
    }
}

/// The rule of one row of an unwind table (`start`: its function's start).
pub(crate) fn rule_from_row<S: UnwindContextStorage<usize>>(
    row: &gimli::UnwindTableRow<usize, S>,
    start: usize,
) -> Rule {
    {
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

impl<R: gimli::Reader<Offset = usize>> Tables<R> {
    /// The start of the function containing `addr`, from the unwind
    /// information, if an entry covers it.
    pub(crate) fn function_start(&self, addr: usize) -> Option<usize> {
        let table = self.hdr.table()?;
        table
            .fde_for_address(&self.eh_frame, &self.bases, addr as u64, |s, b, o| s.cie_from_offset(b, o))
            .ok()
            .map(|fde| fde.initial_address() as usize)
    }
}

/// The registers a step needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Regs {
    pub ip: usize,
    pub sp: usize,
    pub bp: Option<usize>,
}

/// What one step of a walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The caller's registers.
    Caller(Regs),
    /// This frame is the outermost.
    Outermost,
    /// The walk cannot go on; why.
    Stop(&'static str),
}

/// Applies `rule` (the rule at the frame `regs` describes) to find the
/// caller's registers; `read` reads a saved word from the stack.
pub(crate) fn step(rule: Rule, regs: Regs, read: impl Fn(usize) -> Option<usize>) -> Step {
    let (cfa, cfa_offset, ra_offset, saved_bp) = match rule {
        Rule::Step { cfa, cfa_offset, ra_offset, bp, .. } => (cfa, cfa_offset, ra_offset, bp),
        Rule::Outermost { .. } => return Step::Outermost,
        Rule::Unsupported => return Step::Stop(UNSUPPORTED),
        Rule::NotCode => return Step::Stop("the address is not code of any loaded module"),
    };
    let base = match cfa {
        Base::Sp => regs.sp,
        Base::Bp => match regs.bp {
            Some(bp) => bp,
            None => return Step::Stop(UNSUPPORTED),
        },
    };
    let Some(cfa) = base.checked_add_signed(cfa_offset as isize) else {
        return Step::Stop("CFA out of range");
    };
    if cfa <= regs.sp {
        return Step::Stop("the stack did not grow towards its top");
    }
    let Some(ra) = cfa.checked_add_signed(ra_offset as isize).and_then(&read) else {
        return Step::Stop("return address outside the stack");
    };
    let bp = match saved_bp {
        SavedBp::Same => regs.bp,
        SavedBp::At(o) => cfa.checked_add_signed(o as isize).and_then(&read),
        SavedBp::Lost => None,
    };
    if ra == 0 {
        return Step::Outermost;
    }
    Step::Caller(Regs { ip: ra, sp: cfa, bp })
}

/// Copies a module's `.eh_frame_hdr` and `.eh_frame` out of the loaded image
/// and parses the header's search table.
pub(crate) fn tables_for(map: &ModuleMap, index: usize) -> Option<Tables> {
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

/// A module's unwind tables read in place: `.eh_frame_hdr` at `hdr_addr`
/// (`hdr_len` bytes) and the `.eh_frame` it points to, up to the end of the
/// readable segment holding it (`segment_end` of its address); `text` is the
/// start of its code. Reading
/// parses nothing beyond the header and allocates nothing.
///
/// # Safety
/// Both ranges must stay mapped and readable for as long as the tables are
/// used (a loaded module's own tables, used while it stays loaded).
pub(crate) unsafe fn tables_in_place(
    hdr_addr: usize,
    hdr_len: usize,
    segment_end: &dyn Fn(usize) -> Option<usize>,
    text: usize,
) -> Option<Tables<InPlace>> {
    // SAFETY: the caller's contract.
    let hdr_bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, hdr_len) };
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr_addr as u64);
    let hdr = EhFrameHdr::new(hdr_bytes, LittleEndian).parse(&bases, 8).ok()?;
    let eh_frame_addr = match hdr.eh_frame_ptr() {
        gimli::Pointer::Direct(a) => a as usize,
        gimli::Pointer::Indirect(_) => return None,
    };
    let len = segment_end(eh_frame_addr)?.checked_sub(eh_frame_addr)?;
    // SAFETY: the caller's contract (`.eh_frame` lies in the segment ending
    // at `eh_end`).
    let eh: &'static [u8] = unsafe { std::slice::from_raw_parts(eh_frame_addr as *const u8, len) };
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_addr as u64)
        .set_eh_frame(eh_frame_addr as u64)
        .set_text(text as u64);
    Some(Tables { hdr, eh_frame: EhFrame::new(eh, LittleEndian), bases })
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
