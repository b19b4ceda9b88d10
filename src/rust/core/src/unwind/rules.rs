//! DWARF call-frame information for x86_64, reduced to what a fast walk
//! needs: the rule at an address (where the CFA is, where the return address
//! and RBP were saved), computed from copies of a module's `.eh_frame_hdr`
//! and `.eh_frame`. Shared by the `cfi` backend and the profiler's
//! signal-handler walk; `Tables::rule` allocates nothing when given a
//! context with in-line storage.

use gimli::{CfaRule, RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection};

use crate::modules::ModuleMap;

/// The `Failed` message that asks the caller to fall back to libgcc.
pub const UNSUPPORTED: &str = "unwind rule not supported by the cfi backend";

const RBP: gimli::Register = gimli::X86_64::RBP;
const RSP: gimli::Register = gimli::X86_64::RSP;
const RA: gimli::Register = gimli::X86_64::RA;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    Sp,
    Bp,
    /// A PLT entry (`.plt`): the stack pointer, plus 8 more once the entry
    /// has pushed its relocation index, which it does at offset `threshold`
    /// and later of its 16 bytes (the linker's own CFI for `.plt` says this
    /// with an expression; see [`plt_threshold`]).
    Plt {
        threshold: u8,
    },
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

/// A module's unwind tables: copies (the default), or the loaded image's own
/// bytes read in place (`InPlace`, see [`tables_in_place`]).
pub(crate) use super::ehframe::{EhTables as Tables, InPlace};

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
            Ok(row) => rule_from_row(row, start, |e| self.plt_threshold(e)),
            Err(_) => Rule::Unsupported,
        }
    }

    /// The threshold of a CFA expression that is the linker's rule for
    /// `.plt` entries (see [`plt_threshold`]).
    fn plt_threshold(&self, e: &gimli::UnwindExpression<usize>) -> Option<u8> {
        let expr = e.get(&self.eh_frame).ok()?;
        let bytes = expr.0.to_slice().ok()?;
        plt_threshold(&bytes)
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
            let rule = rule_from_row(row, start, |e| self.plt_threshold(e));
            each(row.start_address() as usize, row.end_address() as usize, rule);
        }
        Some((start, fde.end_address() as usize))
    }
}

/// The unwind context of a walk that must not allocate.
pub(crate) type Context = UnwindContext<usize, InLine>;

/// Where a walk's rules come from: a module's unwind tables (copied or read
/// in place), or, in tests, rules made up for made-up code.
pub(crate) trait Source {
    /// The rule at `probe` (an address in this module).
    fn rule(&self, ctx: &mut Context, probe: usize) -> Rule;
    /// A key (never 0) of the function holding `probe`.
    fn fde_key(&self, probe: usize) -> Option<usize>;
    /// Calls `each(start, end, rule)` for every row of the function with key
    /// `fde`, in address order; returns the function's start and end.
    fn rows(
        &self,
        ctx: &mut Context,
        fde: usize,
        each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)>;
}

impl<R: gimli::Reader<Offset = usize>> Source for Tables<R> {
    fn rule(&self, ctx: &mut Context, probe: usize) -> Rule {
        Tables::rule(self, ctx, probe)
    }
    fn fde_key(&self, probe: usize) -> Option<usize> {
        Tables::fde_key(self, probe)
    }
    fn rows(
        &self,
        ctx: &mut Context,
        fde: usize,
        each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)> {
        Tables::rows(self, ctx, fde, each)
    }
}

/// The rule of one row of an unwind table (`start`: its function's start).
pub(crate) fn rule_from_row<S: UnwindContextStorage<usize>>(
    row: &gimli::UnwindTableRow<usize, S>,
    start: usize,
    plt: impl Fn(&gimli::UnwindExpression<usize>) -> Option<u8>,
) -> Rule {
    {
        let (cfa, cfa_offset) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } if *register == RSP => (Base::Sp, *offset),
            CfaRule::RegisterAndOffset { register, offset } if *register == RBP => (Base::Bp, *offset),
            CfaRule::Expression(e) => match plt(e) {
                Some(threshold) => (Base::Plt { threshold }, 8),
                None => return Rule::Unsupported,
            },
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

/// The linker's CFA rule for `.plt` entries, `rsp + 8 + ((rip & 15) >= K)
/// * 8` (GNU ld and lld write it for x86-64; `K` is 11, or 10 with IBT's
/// entries): K, if `expr` is exactly that expression.
pub(crate) fn plt_threshold(expr: &[u8]) -> Option<u8> {
    // DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
    // DW_OP_lit<K>; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
    match expr {
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22] if (0x30..0x40).contains(lit) => {
            Some(lit - 0x30)
        }
        _ => None,
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
        Base::Plt { threshold } => regs.sp + if (regs.ip & 15) as u8 >= threshold { 8 } else { 0 },
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

/// The unwind tables of module `index` of `map`.
pub(crate) fn tables_for(map: &ModuleMap, index: usize) -> Option<Tables> {
    Tables::of_loaded(map.module(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plt_entries_unwind_by_the_linkers_rule() {
        // ld's expression for .plt, with K = 11 (and 10 for IBT's entries).
        let expr = [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(plt_threshold(&expr), Some(11));
        let mut ibt = expr;
        ibt[6] = 0x3a;
        assert_eq!(plt_threshold(&ibt), Some(10));
        let mut other = expr;
        other[1] = 0x10;
        assert_eq!(plt_threshold(&other), None, "any other expression is not modelled");
        // At the entry's `jmp *slot` nothing is pushed: the return address
        // is at [rsp]; after its `push $index`, at [rsp + 8].
        let rule = Rule::Step {
            cfa: Base::Plt { threshold: 11 },
            cfa_offset: 8,
            ra_offset: -8,
            bp: SavedBp::Same,
            start: 0,
        };
        let stack = |a: usize| match a {
            0x7000 => Some(0xaaaa),
            0x7008 => Some(0xbbbb),
            _ => None,
        };
        let at_jmp = Regs { ip: 0x5030, sp: 0x7000, bp: Some(1) };
        assert_eq!(step(rule, at_jmp, stack), Step::Caller(Regs { ip: 0xaaaa, sp: 0x7008, bp: Some(1) }));
        let after_push = Regs { ip: 0x503b, sp: 0x7000, bp: Some(1) };
        assert_eq!(step(rule, after_push, stack), Step::Caller(Regs { ip: 0xbbbb, sp: 0x7010, bp: Some(1) }));
    }
}
