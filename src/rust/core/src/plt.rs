//! Names of PLT entries: `sin@plt` for the stub through which a module
//! calls `sin`. A stub has no symbol of its own (tools like objdump make
//! these names up the same way), but which function it jumps to is certain:
//! its `jmp *slot(%rip)` reads a GOT slot, and the module's dynamic
//! relocation for that slot names the function. Stubs whose slot has no
//! named relocation (the lazy-binding stub PLT0, IFUNC slots) stay
//! unnamed.

use crate::fasthash::{FastMap, FastSet};
use crate::symbols::{demangle, Symbol};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget};
use std::sync::Arc;

/// Rank of PLT names: below every symbol table's (they never overlap a
/// real symbol anyway).
pub const RANK_PLT: u8 = 12;

/// The PLT sections and the size of their entries.
const SECTIONS: [(&str, u64); 3] = [(".plt", 16), (".plt.sec", 16), (".plt.got", 8)];

/// The GOT slot an x86-64 PLT entry at `addr` jumps through: the first
/// `jmp *disp32(%rip)` (`ff 25`, maybe after `endbr64` and a `bnd` prefix)
/// in its bytes.
pub fn slot_of(addr: u64, bytes: &[u8]) -> Option<u64> {
    let i = bytes.windows(2).position(|w| w == [0xff, 0x25])?;
    let disp = i32::from_le_bytes(bytes.get(i + 2..i + 6)?.try_into().ok()?);
    Some((addr + i as u64 + 6).wrapping_add_signed(disp as i64))
}

/// A symbol for each PLT entry of `obj` whose target is named.
pub fn symbols<'a, R: object::ReadRef<'a>>(obj: &object::File<'a, R>) -> Vec<Symbol> {
    if obj.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    // The stubs and the slots they jump through first: only those slots'
    // relocations are looked at (a library has thousands of others).
    let mut stubs: Vec<(u64, u64, u64)> = Vec::new();
    for (section, default_size) in SECTIONS {
        let Some(s) = obj.section_by_name(section) else { continue };
        let Ok(data) = s.data() else { continue };
        // `.plt.got` has 16-byte entries when built for IBT.
        let size = if section == ".plt.got" && data.len() >= 4 && data[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
            16
        } else {
            default_size
        };
        for (k, entry) in data.chunks(size as usize).enumerate() {
            let addr = s.address() + k as u64 * size;
            if let Some(slot) = slot_of(addr, entry) {
                stubs.push((addr, size, slot));
            }
        }
    }
    if stubs.is_empty() {
        return Vec::new();
    }
    let wanted: FastSet<u64> = stubs.iter().map(|s| s.2).collect();
    // GOT slot -> the function its relocation names.
    let mut targets: FastMap<u64, &str> = FastMap::default();
    let Some(table) = obj.dynamic_symbol_table() else { return Vec::new() };
    let mut name_slot = |slot: u64, index: usize| {
        if let Some(name) = table.symbol_by_index(object::SymbolIndex(index)).ok().and_then(|s| s.name().ok())
        {
            if !name.is_empty() {
                targets.insert(slot, name);
            }
        }
    };
    // The linkers' relocation sections read as the x86-64 records they
    // are (offset, symbol << 32 | type, addend): iterating them through
    // `object` parsed every one of a library's thousands of relocations.
    let mut raw = false;
    for name in [".rela.plt", ".rela.dyn"] {
        let Some(data) = obj.section_by_name(name).and_then(|s| s.data().ok()) else { continue };
        raw = true;
        for r in data.chunks_exact(24) {
            let slot = u64::from_le_bytes(r[..8].try_into().unwrap_or_default());
            if wanted.contains(&slot) {
                let info = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
                name_slot(slot, (info >> 32) as usize);
            }
        }
    }
    if let (false, Some(relocs)) = (raw, obj.dynamic_relocations()) {
        for (slot, r) in relocs {
            if !wanted.contains(&slot) {
                continue;
            }
            if let RelocationTarget::Symbol(index) = r.target() {
                name_slot(slot, index.0);
            }
        }
    }
    stubs
        .into_iter()
        .filter_map(|(addr, size, slot)| {
            let name = targets.get(&slot)?;
            Some(Symbol {
                start: addr,
                size,
                name: Arc::from(format!("{}@plt", demangle(name))),
                rank: RANK_PLT,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_jumps_through_the_slot_its_instruction_names() {
        // jmp *0x2fe2(%rip) at 0x1020: the slot is 0x1026 + 0x2fe2.
        let plain = [0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff];
        assert_eq!(slot_of(0x1020, &plain), Some(0x1026 + 0x2fe2));
        // endbr64; bnd jmp *-0x10(%rip) (IBT's .plt.sec).
        let ibt = [0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xf0, 0xff, 0xff, 0xff, 0x0f, 0x1f, 0x44, 0, 0];
        assert_eq!(slot_of(0x2000, &ibt), Some(0x2000 + 5 + 6 - 0x10));
        // PLT0 of IBT's lazy .plt: push, bnd jmp relative: no slot.
        assert_eq!(slot_of(0, &[0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xf2, 0xe9, 0, 0, 0, 0]), None);
    }

    #[test]
    fn a_real_librarys_stubs_are_named_after_their_targets() {
        let Some(path) = ["/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
        else {
            eprintln!("skipped: no libstdc++.so.6 to read");
            return;
        };
        let data = std::fs::read(path).unwrap();
        let obj = object::File::parse(&data[..]).unwrap();
        let syms = symbols(&obj);
        assert!(syms.len() > 10, "{} PLT names", syms.len());
        assert!(syms.iter().all(|s| s.name.ends_with("@plt") && s.rank == RANK_PLT));
        // Every name is one of its dynamic symbols (an import, or one of
        // its own exported functions, called through the PLT so that it
        // can be interposed), and imports are among them.
        let dynamic: Vec<(String, bool)> = obj
            .dynamic_symbols()
            .filter_map(|s| s.name().ok().map(|n| (format!("{}@plt", demangle(n)), s.is_undefined())))
            .collect();
        assert!(syms.iter().all(|s| dynamic.iter().any(|(n, _)| *n == *s.name)));
        assert!(syms.iter().any(|s| dynamic.iter().any(|(n, undefined)| *n == *s.name && *undefined)));
        // Entries do not overlap.
        let mut starts: Vec<u64> = syms.iter().map(|s| s.start).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), syms.len());
    }
}
