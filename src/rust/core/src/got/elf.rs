//! Reading a loaded module's dynamic section: which GOT slots its
//! relocations fill with which function.
//!
//! A call to an imported function goes through a slot the dynamic loader
//! fills with the function's address: a `JUMP_SLOT` relocation (a call
//! through the PLT; bound at load time with `-z now`, else at the first
//! call, until which the slot holds the module's own PLT stub) or a
//! `GLOB_DAT` relocation (code that loads the address itself, as rustc emits
//! on x86_64 by default). Both are found from the module's dynamic section:
//! its relocation tables name a symbol, whose name and required version
//! (`.gnu.version` / `.gnu.version_r`) decide whether the slot is the
//! function wanted.
//!
//! Everything is read through [`Memory`], so it is tested on synthetic
//! images.

use crate::memory::Memory;

/// Dynamic section tags (elf.h).
const DT_NULL: u64 = 0;
const DT_PLTRELSZ: u64 = 2;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_RELAENT: u64 = 9;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_REL: u64 = 17;
const DT_RELSZ: u64 = 18;
const DT_RELENT: u64 = 19;
const DT_PLTREL: u64 = 20;
const DT_JMPREL: u64 = 23;
const DT_VERSYM: u64 = 0x6fff_fff0;
const DT_VERNEED: u64 = 0x6fff_fffe;
const DT_VERNEEDNUM: u64 = 0x6fff_ffff;

/// Entries of a dynamic section read at most (a real one has a few dozen).
const MAX_DYNAMIC: usize = 512;
/// Relocation tables larger than this are not read (damaged sizes).
const MAX_TABLE: usize = 64 << 20;

/// The relocation types that fill GOT slots of functions, for the target
/// architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelocTypes {
    pub glob_dat: u32,
    pub jump_slot: u32,
}

impl RelocTypes {
    /// This build's architecture, if supported.
    pub fn native() -> Option<RelocTypes> {
        if cfg!(target_arch = "x86_64") {
            Some(RelocTypes { glob_dat: 6, jump_slot: 7 })
        } else if cfg!(target_arch = "aarch64") {
            Some(RelocTypes { glob_dat: 1025, jump_slot: 1026 })
        } else {
            None
        }
    }
}

/// A function to find: its name and the version a slot may require of it
/// (slots requiring no version match too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub name: &'a str,
    pub version: &'a str,
}

/// How a slot is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    JumpSlot,
    GlobDat,
}

/// A GOT slot of a wanted function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Address of the slot (8 bytes).
    pub addr: usize,
    /// Index into the `wanted` list.
    pub wanted: usize,
    pub kind: Kind,
    /// The version the module requires, if any.
    pub version: Option<String>,
}

/// What the dynamic section says, with addresses made absolute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Dynamic {
    symtab: usize,
    syment: usize,
    strtab: usize,
    strsz: usize,
    versym: Option<usize>,
    verneed: Option<usize>,
    verneednum: usize,
    jmprel: Option<usize>,
    pltrelsz: usize,
    pltrel_rela: bool,
    rela: Option<usize>,
    relasz: usize,
    relaent: usize,
    rel: Option<usize>,
    relsz: usize,
    relent: usize,
}

fn word(mem: &dyn Memory, addr: usize) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
}

fn bytes(mem: &dyn Memory, addr: usize, len: usize) -> Option<Vec<u8>> {
    if len > MAX_TABLE {
        return None;
    }
    let mut v = vec![0u8; len];
    mem.read(addr, &mut v).then_some(v)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Reads the dynamic section at `dynamic`. Its pointers are file addresses
/// (`+ bias`), or already absolute where the loader relocated the section
/// in place (glibc does on most architectures): a value inside the module
/// (`in_module`) is taken as absolute.
fn read_dynamic(
    mem: &dyn Memory,
    dynamic: usize,
    bias: usize,
    in_module: &dyn Fn(usize) -> bool,
) -> Option<Dynamic> {
    let ptr = |v: u64| {
        let v = v as usize;
        if in_module(v) {
            v
        } else {
            v.wrapping_add(bias)
        }
    };
    let mut d = Dynamic { syment: 24, relaent: 24, relent: 16, pltrel_rela: true, ..Dynamic::default() };
    let mut have_symtab = false;
    for i in 0..MAX_DYNAMIC {
        let tag = word(mem, dynamic + 16 * i)?;
        let val = word(mem, dynamic + 16 * i + 8)?;
        match tag {
            DT_NULL => return have_symtab.then_some(d),
            DT_SYMTAB => {
                d.symtab = ptr(val);
                have_symtab = true;
            }
            DT_SYMENT => d.syment = val as usize,
            DT_STRTAB => d.strtab = ptr(val),
            DT_STRSZ => d.strsz = val as usize,
            DT_VERSYM => d.versym = Some(ptr(val)),
            DT_VERNEED => d.verneed = Some(ptr(val)),
            DT_VERNEEDNUM => d.verneednum = val as usize,
            DT_JMPREL => d.jmprel = Some(ptr(val)),
            DT_PLTRELSZ => d.pltrelsz = val as usize,
            DT_PLTREL => d.pltrel_rela = val == DT_RELA,
            DT_RELA => d.rela = Some(ptr(val)),
            DT_RELASZ => d.relasz = val as usize,
            DT_RELAENT => d.relaent = val as usize,
            DT_REL => d.rel = Some(ptr(val)),
            DT_RELSZ => d.relsz = val as usize,
            DT_RELENT => d.relent = val as usize,
            _ => {}
        }
    }
    None
}

/// One relocation: (slot offset, symbol index, type).
fn relocations(mem: &dyn Memory, at: usize, size: usize, entsize: usize) -> Vec<(u64, u32, u32)> {
    if entsize < 16 || size == 0 {
        return Vec::new();
    }
    let Some(b) = bytes(mem, at, size - size % entsize) else { return Vec::new() };
    b.chunks_exact(entsize)
        .map(|e| {
            let info = u64_at(e, 8);
            (u64_at(e, 0), (info >> 32) as u32, info as u32)
        })
        .collect()
}

/// Version names by version index, from `.gnu.version_r`.
fn version_needs(mem: &dyn Memory, d: &Dynamic, strings: &[u8]) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    let Some(mut at) = d.verneed else { return out };
    for _ in 0..d.verneednum.min(256) {
        let Some(vn) = bytes(mem, at, 16) else { break };
        let cnt = u16_at(&vn, 2);
        let (aux, next) = (u32_at(&vn, 8) as usize, u32_at(&vn, 12) as usize);
        let mut a = at.wrapping_add(aux);
        for _ in 0..cnt.min(256) {
            let Some(vna) = bytes(mem, a, 16) else { break };
            let other = u16_at(&vna, 6);
            if let Some(name) = c_string(strings, u32_at(&vna, 8) as usize) {
                out.push((other, name.to_string()));
            }
            let n = u32_at(&vna, 12) as usize;
            if n == 0 {
                break;
            }
            a = a.wrapping_add(n);
        }
        if next == 0 {
            break;
        }
        at = at.wrapping_add(next);
    }
    out
}

fn c_string(strings: &[u8], at: usize) -> Option<&str> {
    let rest = strings.get(at..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The entry of `wanted` a slot of `name` requiring `version` (None: no
/// version) stands for: the one with that name and version, or for a slot
/// requiring no version the first with that name. (A function may be
/// wanted in several versions: modules built against an older C library
/// require an older one.)
fn wanted_entry(wanted: &[Wanted], name: &str, version: Option<&str>) -> Option<usize> {
    match version {
        Some(v) => wanted.iter().position(|w| w.name == name && w.version == v),
        None => wanted.iter().position(|w| w.name == name),
    }
}

/// The GOT slots of the `wanted` functions in the module whose dynamic
/// section is at `dynamic` (load bias `bias`; `in_module` tells whether an
/// address lies in the module's mapped image). A slot requiring a version
/// is the entry wanted in that version; one whose version no entry wants
/// is left out (see `wanted_entry`).
pub fn find_slots(
    mem: &dyn Memory,
    dynamic: usize,
    bias: usize,
    in_module: &dyn Fn(usize) -> bool,
    types: RelocTypes,
    wanted: &[Wanted],
) -> Vec<Slot> {
    let Some(d) = read_dynamic(mem, dynamic, bias, in_module) else { return Vec::new() };
    if d.syment < 24 || d.strsz == 0 {
        return Vec::new();
    }
    let mut relocs = Vec::new();
    if let Some(at) = d.jmprel {
        let ent = if d.pltrel_rela { d.relaent } else { d.relent };
        relocs.extend(relocations(mem, at, d.pltrelsz, ent));
    }
    if let Some(at) = d.rela {
        relocs.extend(relocations(mem, at, d.relasz, d.relaent));
    }
    if let Some(at) = d.rel {
        relocs.extend(relocations(mem, at, d.relsz, d.relent));
    }
    relocs.retain(|&(_, sym, ty)| sym != 0 && (ty == types.glob_dat || ty == types.jump_slot));
    let Some(max_sym) = relocs.iter().map(|r| r.1 as usize).max() else { return Vec::new() };
    let Some(strings) = bytes(mem, d.strtab, d.strsz) else { return Vec::new() };
    let Some(symtab) = bytes(mem, d.symtab, (max_sym + 1) * d.syment) else { return Vec::new() };
    let versym = d.versym.and_then(|v| bytes(mem, v, (max_sym + 1) * 2));
    let needs = version_needs(mem, &d, &strings);

    let mut out = Vec::new();
    for (offset, sym, ty) in relocs {
        let sym = sym as usize;
        let Some(name) = c_string(&strings, u32_at(&symtab, sym * d.syment) as usize) else { continue };
        if !wanted.iter().any(|w| w.name == name) {
            continue;
        }
        // Index 0 (local) and 1 (global) carry no version; bit 15 marks a
        // hidden one.
        let index = versym.as_ref().map_or(1, |v| u16_at(v, sym * 2) & 0x7fff);
        let version = if index > 1 {
            match needs.iter().find(|(i, _)| *i == index) {
                Some((_, v)) => Some(v.clone()),
                None => continue, // a version we cannot read: not ours to judge
            }
        } else {
            None
        };
        let Some(w) = wanted_entry(wanted, name, version.as_deref()) else { continue };
        let kind = if ty == types.jump_slot { Kind::JumpSlot } else { Kind::GlobDat };
        // Relocation offsets are file addresses (the loader never rewrites
        // its relocation tables).
        let addr = (offset as usize).wrapping_add(bias);
        out.push(Slot { addr, wanted: w, kind, version });
    }
    out.sort_by_key(|s| s.addr);
    out.dedup_by_key(|s| s.addr);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Synthetic memory: byte runs at addresses.
    #[derive(Default)]
    struct Image(BTreeMap<usize, Vec<u8>>);

    impl Memory for Image {
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            let Some((&start, bytes)) = self.0.range(..=addr).next_back() else { return false };
            let off = addr - start;
            match bytes.get(off..off + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
    }

    const X86: RelocTypes = RelocTypes { glob_dat: 6, jump_slot: 7 };
    const RELATIVE: u32 = 8;

    /// Builds a module image at file address 0 loaded at `bias`: dynamic
    /// section, symbols, strings, version needs and two relocation tables.
    /// Symbols: 1 `_Unwind_RaiseException@GCC_3.0` (JUMP_SLOT at 0x3000),
    /// 2 `_Unwind_RaiseException` unversioned (GLOB_DAT at 0x3008),
    /// 3 `_Unwind_RaiseException@OTHER_1.0` (GLOB_DAT at 0x3010),
    /// 4 `malloc@GLIBC_2.2.5` (JUMP_SLOT at 0x3018),
    /// 5 `_Unwind_Resume_or_Rethrow@GCC_3.3` (JUMP_SLOT at 0x3020), plus a
    /// RELATIVE relocation. `absolute`: dynamic pointers already relocated.
    fn image(bias: usize, absolute: bool) -> Image {
        let rel = |v: usize| if absolute { v + bias } else { v };
        let mut strings = vec![0u8];
        let mut name = |s: &str| {
            let at = strings.len();
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            at as u32
        };
        let n_unwind = name("_Unwind_RaiseException");
        let n_malloc = name("malloc");
        let n_rethrow = name("_Unwind_Resume_or_Rethrow");
        let n_gcc30 = name("GCC_3.0");
        let n_gcc33 = name("GCC_3.3");
        let n_other = name("OTHER_1.0");
        let n_glibc = name("GLIBC_2.2.5");
        let n_libgcc = name("libgcc_s.so.1");

        let mut symtab = vec![0u8; 24]; // symbol 0
        for n in [n_unwind, n_unwind, n_unwind, n_malloc, n_rethrow] {
            let mut s = vec![0u8; 24];
            s[0..4].copy_from_slice(&n.to_le_bytes());
            symtab.extend(s);
        }
        // Version indices: 2 GCC_3.0, 3 OTHER_1.0, 4 GLIBC_2.2.5, 5 GCC_3.3.
        let versym: Vec<u8> = [0u16, 2, 1, 3, 4, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
        // One Verneed with four Vernaux entries.
        let mut verneed = Vec::new();
        verneed.extend(1u16.to_le_bytes());
        verneed.extend(4u16.to_le_bytes());
        verneed.extend(n_libgcc.to_le_bytes());
        verneed.extend(16u32.to_le_bytes()); // aux
        verneed.extend(0u32.to_le_bytes()); // next
        for (i, (other, n)) in [(2u16, n_gcc30), (3, n_other), (4, n_glibc), (5, n_gcc33)].iter().enumerate()
        {
            verneed.extend(0u32.to_le_bytes()); // hash
            verneed.extend(0u16.to_le_bytes()); // flags
            verneed.extend(other.to_le_bytes());
            verneed.extend(n.to_le_bytes());
            verneed.extend((if i < 3 { 16u32 } else { 0 }).to_le_bytes());
        }
        let rela = |offset: usize, sym: u64, ty: u32| {
            let mut r = Vec::new();
            r.extend((offset as u64).to_le_bytes());
            r.extend((sym << 32 | ty as u64).to_le_bytes());
            r.extend(0u64.to_le_bytes());
            r
        };
        let mut jmprel = Vec::new();
        jmprel.extend(rela(0x3000, 1, 7));
        jmprel.extend(rela(0x3018, 4, 7));
        jmprel.extend(rela(0x3020, 5, 7));
        let mut relatab = Vec::new();
        relatab.extend(rela(0x3100, 0, RELATIVE));
        relatab.extend(rela(0x3008, 2, 6));
        relatab.extend(rela(0x3010, 3, 6));

        let (dynamic, sym_at, str_at, versym_at, verneed_at, jmprel_at, rela_at) =
            (0x100, 0x200, 0x400, 0x600, 0x700, 0x800, 0x900);
        let mut dynsec = Vec::new();
        let mut entry = |tag: u64, val: u64| {
            dynsec.extend(tag.to_le_bytes());
            dynsec.extend(val.to_le_bytes());
        };
        entry(DT_SYMTAB, rel(sym_at) as u64);
        entry(DT_STRTAB, rel(str_at) as u64);
        entry(DT_STRSZ, strings.len() as u64);
        entry(DT_SYMENT, 24);
        entry(DT_VERSYM, rel(versym_at) as u64);
        entry(DT_VERNEED, rel(verneed_at) as u64);
        entry(DT_VERNEEDNUM, 1);
        entry(DT_JMPREL, rel(jmprel_at) as u64);
        entry(DT_PLTRELSZ, jmprel.len() as u64);
        entry(DT_PLTREL, DT_RELA);
        entry(DT_RELA, rel(rela_at) as u64);
        entry(DT_RELASZ, relatab.len() as u64);
        entry(DT_RELAENT, 24);
        entry(DT_NULL, 0);
        let mut img = Image::default();
        for (at, b) in [
            (dynamic, dynsec),
            (sym_at, symtab),
            (str_at, strings),
            (versym_at, versym),
            (verneed_at, verneed),
            (jmprel_at, jmprel),
            (rela_at, relatab),
        ] {
            img.0.insert(bias + at, b);
        }
        img
    }

    const WANTED: [Wanted; 2] = [
        Wanted { name: "_Unwind_RaiseException", version: "GCC_3.0" },
        Wanted { name: "_Unwind_Resume_or_Rethrow", version: "GCC_3.3" },
    ];

    #[test]
    fn finds_jump_slots_and_glob_dats_respecting_versions() {
        for absolute in [false, true] {
            let bias = 0x7f00_0000_0000;
            let img = image(bias, absolute);
            let inside = |a: usize| (bias..bias + 0x10000).contains(&a);
            let slots = find_slots(&img, bias + 0x100, bias, &inside, X86, &WANTED);
            let got: Vec<(usize, usize, Kind, Option<&str>)> =
                slots.iter().map(|s| (s.addr - bias, s.wanted, s.kind, s.version.as_deref())).collect();
            assert_eq!(
                got,
                vec![
                    (0x3000, 0, Kind::JumpSlot, Some("GCC_3.0")),
                    (0x3008, 0, Kind::GlobDat, None),
                    // 0x3010 requires OTHER_1.0: another provider's function.
                    (0x3020, 1, Kind::JumpSlot, Some("GCC_3.3")),
                ],
                "absolute: {absolute}"
            );
        }
    }

    #[test]
    fn a_function_wanted_in_two_versions_is_found_in_each() {
        // As `pthread_create@GLIBC_2.34` and `@GLIBC_2.2.5`: each slot is
        // the entry of its own version, an unversioned one the first entry.
        let bias = 0x7f00_0000_0000;
        let img = image(bias, false);
        let inside = |a: usize| (bias..bias + 0x10000).contains(&a);
        let two = [
            Wanted { name: "_Unwind_RaiseException", version: "OTHER_1.0" },
            Wanted { name: "_Unwind_RaiseException", version: "GCC_3.0" },
        ];
        let slots = find_slots(&img, bias + 0x100, bias, &inside, X86, &two);
        let got: Vec<(usize, usize, Option<&str>)> =
            slots.iter().map(|s| (s.addr - bias, s.wanted, s.version.as_deref())).collect();
        assert_eq!(
            got,
            vec![(0x3000, 1, Some("GCC_3.0")), (0x3008, 0, None), (0x3010, 0, Some("OTHER_1.0"))]
        );
        assert_eq!(wanted_entry(&two, "_Unwind_RaiseException", Some("NONE_9")), None);
        assert_eq!(wanted_entry(&two, "malloc", None), None);
    }

    #[test]
    fn a_module_loaded_at_zero_and_damaged_sections() {
        let img = image(0, false);
        let inside = |a: usize| a < 0x10000;
        assert_eq!(find_slots(&img, 0x100, 0, &inside, X86, &WANTED).len(), 3);
        // Nothing wanted, or another architecture's types: nothing found.
        assert!(find_slots(&img, 0x100, 0, &inside, X86, &[]).is_empty());
        let arm = RelocTypes { glob_dat: 1025, jump_slot: 1026 };
        assert!(find_slots(&img, 0x100, 0, &inside, arm, &WANTED).is_empty());
        // An unreadable or unterminated dynamic section: nothing, no panic.
        assert!(find_slots(&img, 0x5000, 0, &inside, X86, &WANTED).is_empty());
        let mut short = image(0, false);
        let d = short.0.get_mut(&0x100).unwrap();
        d.truncate(32);
        assert!(find_slots(&short, 0x100, 0, &inside, X86, &WANTED).is_empty());
        // A relocation table longer than the memory behind it: skipped.
        let mut big = image(0, false);
        let d = big.0.get_mut(&0x100).unwrap();
        // DT_PLTRELSZ is the 9th entry.
        d[8 * 16 + 8..8 * 16 + 16].copy_from_slice(&(1u64 << 20).to_le_bytes());
        let slots = find_slots(&big, 0x100, 0, &inside, X86, &WANTED);
        assert_eq!(slots.iter().map(|s| s.addr).collect::<Vec<_>>(), vec![0x3008]);
    }
}
