//! Where R's garbage collector starts, in this process or another: the
//! profiler shows a sample taken inside it as a `<GC>` frame.
//!
//! The collector (`R_gc_internal`) is a hidden function of R's library;
//! `R_gc` (exported) calls it first, so it is the target of `R_gc`'s first
//! call. The same reading serves this process and another one: only the
//! memory read and the modules differ.

use super::Facts;
use crate::memory::Memory;
use crate::unwind::walk::Snapshot;
use std::sync::OnceLock;

/// The start of R's garbage collector: the target of the first call in the
/// code of `R_gc` (at `r_gc` in `mem`; 0: unknown), if
/// `is_libr_function(target)` says it is a function start of R's library.
/// None when `R_gc`'s first instructions are not the few this reads (then
/// garbage collection is not shown).
pub fn gc_start(mem: &impl Memory, r_gc: usize, is_libr_function: impl Fn(usize) -> bool) -> Option<usize> {
    let mut code = [0u8; 48];
    if r_gc == 0 || !mem.read(r_gc, &mut code) {
        return None;
    }
    let target = first_call_target(r_gc, &code)?;
    is_libr_function(target).then_some(target)
}

/// Whether `addr` is a function start (by its unwind information) in
/// module `libr` of `snap`: the test [`gc_start`] is given.
pub fn function_start_in(snap: &Snapshot, libr: usize) -> impl Fn(usize) -> bool + '_ {
    move |addr| snap.map.module_of(addr) == Some(libr) && snap.function_start(addr) == Some(addr)
}

/// [`gc_start`] of this process's R (found once, then remembered).
pub fn own_gc_start(facts: &Facts) -> Option<usize> {
    static GC: OnceLock<Option<usize>> = OnceLock::new();
    *GC.get_or_init(|| {
        let r_gc = crate::got::versioned_symbol("R_gc", "")?;
        let snap = Snapshot::take(facts.interpreter_addr);
        gc_start(&crate::memory::Own, r_gc, function_start_in(&snap, snap.libr?))
    })
}

/// The target of the first `call rel32` in x86-64 code `code` at `addr`,
/// read through the instructions a short function like `R_gc` starts with
/// (`endbr64`, pushes, stack adjustments, register moves and clears, a
/// store of an immediate); None at any other instruction.
pub fn first_call_target(addr: usize, code: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let len = match rest {
            [0xe8, a, b, c, d, ..] => {
                let rel = i32::from_le_bytes([*a, *b, *c, *d]);
                return (addr + i + 5).checked_add_signed(rel as isize);
            }
            [0xf3, 0x0f, 0x1e, 0xfa, ..] => 4,        // endbr64
            [0x50..=0x57, ..] => 1,                   // push reg
            [0x41, 0x50..=0x57, ..] => 2,             // push r8-r15
            [0x48, 0x83, 0xec, _, ..] => 4,           // sub rsp, imm8
            [0x48, 0x81, 0xec, _, _, _, _, ..] => 7,  // sub rsp, imm32
            [0x31 | 0x33, m, ..] if m >> 6 == 3 => 2, // xor r32, r32
            [0x48 | 0x4c | 0x49 | 0x4d, 0x89 | 0x8b, m, ..] if m >> 6 == 3 => 3, // mov r64, r64
            [0x89 | 0x8b, m, ..] if m >> 6 == 3 => 2, // mov r32, r32
            [0xc7, 0x05, _, _, _, _, _, _, _, _, ..] => 10, // mov dword [rip+d], imm32
            [0xbf | 0xbe, _, _, _, _, ..] => 5,       // mov edi/esi, imm32
            _ => return None,
        };
        i += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Image;

    /// R_gc of Debian's R 4.2: sub rsp,8; xor edi,edi; movl $2,[rip+d];
    /// call R_gc_internal; add rsp,8; jmp R_RunPendingFinalizers@plt.
    const R_GC_4_2: [u8; 25] = [
        0x48, 0x83, 0xec, 0x08, 0x31, 0xff, 0xc7, 0x05, 0x14, 0x34, 0x1f, 0x00, 0x02, 0x00, 0x00, 0x00, 0xe8,
        0x6b, 0x85, 0xff, 0xff, 0x48, 0x83, 0xc4, 0x08,
    ];

    #[test]
    fn the_collector_is_found_from_r_gc_s_first_call() {
        assert_eq!(first_call_target(0x19b1f0, &R_GC_4_2), Some(0x193770));
        // With endbr64 and a push first.
        let mut ibt = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x53];
        ibt.extend_from_slice(&[0xe8, 0x10, 0x00, 0x00, 0x00]);
        assert_eq!(first_call_target(0x1000, &ibt), Some(0x1000 + 10 + 0x10));
        // Anything else before the call: not guessed.
        assert_eq!(first_call_target(0x1000, &[0x48, 0x8d, 0x05, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0]), None);
        assert_eq!(first_call_target(0x1000, &[0x31, 0xff]), None);
    }

    #[test]
    fn gc_start_reads_r_gc_through_any_memory() {
        // R_gc's code where a process has it (the rest of its 48 bytes
        // padding), and the collector a function of R's library there.
        let mut mem = Image::new();
        let mut code = R_GC_4_2.to_vec();
        code.resize(48, 0xcc);
        mem.put(0x19b1f0, code);
        let libr_functions = |a: usize| a == 0x193770;
        assert_eq!(gc_start(&mem, 0x19b1f0, libr_functions), Some(0x193770));
        // The target not a function start of R's library: not the collector.
        assert_eq!(gc_start(&mem, 0x19b1f0, |_| false), None);
        // R_gc unknown, or its code unreadable.
        assert_eq!(gc_start(&mem, 0, libr_functions), None);
        assert_eq!(gc_start(&mem, 0x50_0000, libr_functions), None);
    }
}
