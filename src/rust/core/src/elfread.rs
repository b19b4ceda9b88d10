//! Reading a module's ELF file for its names: the headers and every
//! section except the large ones of code and data (`.text`, `.rodata`,
//! `.data`, `.eh_frame`, ...), which naming never reads. The file is read
//! into a buffer of its full size, so offsets stay as they are; the parts
//! not read are zeros that cost no memory (fresh pages are mapped only
//! when written). For the C library and libR this reads a third of the
//! bytes a whole read did.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Sections smaller than this are read whatever they are.
const SMALL: u64 = 16 << 10;

const SHT_NOBITS: u32 = 8;
const SHF_ALLOC: u64 = 0x2;
const SHF_EXECINSTR: u64 = 0x4;

/// The file's bytes as described above, or None if it is not a 64-bit
/// little-endian ELF file whose headers check out (read it whole then).
pub fn read_needed(file: &File, len: u64) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?;
    let mut data = vec![0u8; len];
    let read = |data: &mut [u8], off: u64, size: u64| -> Option<()> {
        let (off, size) = (usize::try_from(off).ok()?, usize::try_from(size).ok()?);
        let part = data.get_mut(off..off.checked_add(size)?)?;
        file.read_exact_at(part, off as u64).ok()
    };
    read(&mut data, 0, 64.min(len as u64))?;
    // ELF64, little-endian, version 1.
    if data.get(..7)? != b"\x7fELF\x02\x01\x01" {
        return None;
    }
    let u16_at = |d: &[u8], o: usize| Some(u16::from_le_bytes(d.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |d: &[u8], o: usize| Some(u32::from_le_bytes(d.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |d: &[u8], o: usize| Some(u64::from_le_bytes(d.get(o..o + 8)?.try_into().ok()?));
    let (phoff, shoff) = (u64_at(&data, 0x20)?, u64_at(&data, 0x28)?);
    let (phentsize, phnum) = (u64::from(u16_at(&data, 0x36)?), u64::from(u16_at(&data, 0x38)?));
    let (shentsize, shnum, shstrndx) =
        (u64::from(u16_at(&data, 0x3a)?), u64::from(u16_at(&data, 0x3c)?), u64::from(u16_at(&data, 0x3e)?));
    if shentsize != 64 || shnum == 0 || (phnum > 0 && phentsize != 56) {
        return None;
    }
    read(&mut data, phoff, phnum * 56)?;
    read(&mut data, shoff, shnum * 64)?;
    let header = |i: u64| -> Option<(u32, u32, u64, u64, u64)> {
        let at = usize::try_from(shoff + i * 64).ok()?;
        Some((
            u32_at(&data, at)?,        // name
            u32_at(&data, at + 4)?,    // type
            u64_at(&data, at + 8)?,    // flags
            u64_at(&data, at + 0x18)?, // offset
            u64_at(&data, at + 0x20)?, // size
        ))
    };
    let sections: Vec<_> = (0..shnum).map(header).collect::<Option<_>>()?;
    let (_, _, _, names_off, names_size) = *sections.get(usize::try_from(shstrndx).ok()?)?;
    read(&mut data, names_off, names_size)?;
    let name_of = |n: u32| -> &[u8] {
        let start = names_off as usize + n as usize;
        let rest = data.get(start..(names_off + names_size) as usize).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    };
    let wanted: Vec<(u64, u64)> = sections
        .iter()
        .filter(|&&(name, kind, flags, _, size)| {
            if kind == SHT_NOBITS || size == 0 {
                return false;
            }
            if size < SMALL || flags & SHF_ALLOC == 0 {
                return true;
            }
            let name = name_of(name);
            let code = flags & SHF_EXECINSTR != 0 && !name.starts_with(b".plt");
            let bulk =
                [&b".rodata"[..], b".data", b".data.rel.ro", b".eh_frame", b".gcc_except_table", b".tdata"]
                    .contains(&name);
            !(code || bulk)
        })
        .map(|&(_, _, _, off, size)| (off, size))
        .collect();
    for (off, size) in wanted {
        read(&mut data, off, size)?;
    }
    Some(data)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSymbol};

    #[test]
    fn a_library_read_in_part_has_the_same_symbols_and_sections_as_read_whole() {
        let lib = crate::modules::current()
            .modules()
            .iter()
            .find(|m| m.path.contains("libc.so"))
            .map(|m| m.path.clone())
            .unwrap_or_else(|| "/lib/x86_64-linux-gnu/libc.so.6".into());
        let whole = std::fs::read(&lib).unwrap();
        let file = File::open(&lib).unwrap();
        let part = read_needed(&file, whole.len() as u64).expect("an ELF64 file");
        let (a, b) = (object::File::parse(&whole[..]).unwrap(), object::File::parse(&part[..]).unwrap());
        let names = |o: &object::File| -> Vec<(String, u64)> {
            o.symbols()
                .chain(o.dynamic_symbols())
                .map(|s| (s.name().unwrap_or("").to_string(), s.address()))
                .collect()
        };
        assert_eq!(names(&a), names(&b));
        assert!(!names(&a).is_empty());
        assert_eq!(a.build_id().unwrap(), b.build_id().unwrap());
        assert_eq!(crate::plt::symbols(&a).len(), crate::plt::symbols(&b).len());
        // The code was not read.
        let text = b.section_by_name(".text").unwrap();
        assert!(text.data().unwrap().iter().all(|&x| x == 0));
        assert!(a.section_by_name(".text").unwrap().data().unwrap().iter().any(|&x| x != 0));
        // Not an ELF file: None.
        let path = std::env::temp_dir().join(format!("winch-elfread-{}", std::process::id()));
        std::fs::write(&path, b"#!/bin/sh\necho not elf\n").unwrap();
        assert!(read_needed(&File::open(&path).unwrap(), 24).is_none());
        let _ = std::fs::remove_file(&path);
    }
}
