//! R's table of registered native routines (`R_registerRoutines()`), read
//! from another process's memory (and, one `DllInfo` at a time, from this
//! process's, where R hands out the records' addresses): the names R calls the entry points of
//! packages' libraries by, which name frames of stripped libraries (as the
//! in-process table does, see `symbolizer`).
//!
//! R keeps its loaded libraries in two variables private to its library
//! (the count and the array of `DllInfo` pointers), with no exported
//! symbol. `R_getDllInfo()` reads both first, and so does
//! `R_getEmbeddingDllInfo()`, which calls it (inlined: R >= 4.5 exports only
//! the second): the candidates are the RIP-relative loads among their
//! first instructions, and a pair is
//! taken only when everything read through it checks out: a plausible
//! count, every library with a readable path and name, routine tables of
//! sane sizes, at least one path that is a loaded module's. A routine is
//! kept only where its address is code of a loaded module; a name is given
//! only to a function starting exactly there (see `symbolizer`).

use crate::memory::Memory;
use crate::modules::ModuleMap;

/// At most this many libraries (R's own limit is lower), routines per
/// table, and bytes in a name or path.
const MAX_DLLS: usize = 4096;
const MAX_ROUTINES: usize = 100_000;
const MAX_STRING: usize = 4096;

/// `DllInfo` fields: `path`, `name`, then four tables, `.C`, `.Call`,
/// `.Fortran`, `.External`: where the count is, where the pointer is, and
/// the size of an entry (each starts with the name and the address; `.C`
/// and `.Fortran` entries have argument types after the count).
const PATH: usize = 0;
const NAME: usize = 8;
const TABLES: [(usize, usize, usize); 4] = [(28, 32, 32), (40, 48, 24), (56, 64, 32), (72, 80, 24)];

/// The routines registered with the R of the process `mem` reads, by
/// absolute address: `functions` are the addresses of `R_getDllInfo` and
/// `R_getEmbeddingDllInfo` there (0: unknown), `libr` the index of R's
/// module in `map`. Empty where the table cannot be found or does not
/// check out.
pub(crate) fn routines(
    mem: &impl Memory,
    map: &ModuleMap,
    libr: usize,
    functions: [usize; 2],
) -> Vec<(usize, String)> {
    let data: Vec<(usize, usize)> =
        map.module(libr).segments.iter().filter(|s| s.write).map(|s| (s.start, s.end)).collect();
    let in_data = |a: usize| data.iter().any(|&(lo, hi)| a >= lo && a < hi);
    let mut candidates: Vec<usize> = Vec::new();
    for f in functions.into_iter().filter(|&f| f != 0) {
        let mut code = [0u8; 96];
        if mem.read(f, &mut code) {
            for a in rip_relative_loads(f, &code) {
                if in_data(a) && !candidates.contains(&a) {
                    candidates.push(a);
                }
            }
        }
    }
    for &count_at in &candidates {
        for &array_at in candidates.iter().filter(|&&a| a != count_at) {
            if let Some(found) = table_at(mem, map, count_at, array_at) {
                return found;
            }
        }
    }
    Vec::new()
}

/// The addresses that loads of the form `op reg, [rip + disp32]` (`mov`,
/// `movslq`, with or without a REX prefix) at each byte of `code` (at
/// `addr`) read from. Some are not instructions at all (decoded from the
/// middle of one): the caller checks what it finds there.
pub(crate) fn rip_relative_loads(addr: usize, code: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..code.len() {
        let rex = (0x40..=0x4f).contains(&code[i]);
        let at = if rex { i + 1 } else { i };
        let (Some(&op), Some(&modrm)) = (code.get(at), code.get(at + 1)) else { continue };
        if !(op == 0x8b || op == 0x63) || modrm & 0xc7 != 0x05 {
            continue;
        }
        let Some(disp) = code.get(at + 2..at + 6) else { continue };
        let disp = i32::from_le_bytes([disp[0], disp[1], disp[2], disp[3]]) as isize;
        let next = addr.wrapping_add(at + 6);
        let target = next.wrapping_add_signed(disp);
        if !out.contains(&target) {
            out.push(target);
        }
    }
    out
}

/// The table, if `count_at` holds the number of libraries and `array_at`
/// the pointer to their `DllInfo` pointers, and everything checks out.
fn table_at(
    mem: &impl Memory,
    map: &ModuleMap,
    count_at: usize,
    array_at: usize,
) -> Option<Vec<(usize, String)>> {
    let count = usize::try_from(mem.int(count_at)?).ok().filter(|&n| n > 0 && n <= MAX_DLLS)?;
    let array = mem.word(array_at)?;
    let mut ptrs = vec![0u8; count * 8];
    if !mem.read(array, &mut ptrs) {
        return None;
    }
    let mut a_module_path = false;
    let mut out = Vec::new();
    for p in ptrs.chunks_exact(8) {
        let info = usize::from_ne_bytes(p.try_into().ok()?);
        let (path, routines) = dll_routines(mem, map, info)?;
        a_module_path |= map.modules().iter().any(|m| m.has_file && m.path == path);
        out.extend(routines);
    }
    a_module_path.then_some(out)
}

/// The path of the library whose `DllInfo` is at `info`, and its
/// registered routines (address, name) whose addresses are code of a
/// loaded module of `map`; `None` if the record does not check out
/// (unreadable path or name, tables of insane sizes or unreadable).
pub(crate) fn dll_routines(
    mem: &impl Memory,
    map: &ModuleMap,
    info: usize,
) -> Option<(String, Vec<(usize, String)>)> {
    let is_code = |a: usize| map.lookup(a).is_some_and(|h| h.exec);
    let path = c_string(mem, mem.word(info + PATH)?)?;
    c_string(mem, mem.word(info + NAME)?)?;
    let mut out = Vec::new();
    for (count_off, table_off, entry) in TABLES {
        let n = usize::try_from(mem.int(info + count_off)?).ok().filter(|&n| n <= MAX_ROUTINES)?;
        if n == 0 {
            continue;
        }
        let table = mem.word(info + table_off)?;
        let mut entries = vec![0u8; n * entry];
        if !mem.read(table, &mut entries) {
            return None;
        }
        let word = |e: &[u8], k: usize| usize::from_ne_bytes(e[k..k + 8].try_into().unwrap_or([0; 8]));
        let pointers: Vec<usize> = entries.chunks_exact(entry).map(|e| word(e, 0)).collect();
        let names = c_strings(mem, &pointers);
        for (e, name) in entries.chunks_exact(entry).zip(names) {
            let name = name?;
            let fun = word(e, 8);
            if is_code(fun) && !name.is_empty() {
                out.push((fun, name));
            }
        }
    }
    Some((path, out))
}

/// The registered routines (address, name) of this process's libraries,
/// one per `DllInfo` record address in `infos` (the addresses R hands out),
/// read as `dll_routines` reads them; None for a null address or a record
/// that does not check out.
pub fn routines_of_this_process(infos: &[usize]) -> Vec<Option<Vec<(usize, String)>>> {
    let map = crate::modules::current();
    let mem = crate::memory::Paged::new(crate::memory::Own);
    infos.iter().map(|&p| (p != 0).then(|| dll_routines(&mem, &map, p)).flatten().map(|(_, r)| r)).collect()
}

/// The strings at `addrs`, as [`c_string`] reads them, with the first
/// chunk of every one read in one go (R copies routine names to the heap:
/// read one at a time, each was a system call, 2 ms for R's 700).
fn c_strings(mem: &impl Memory, addrs: &[usize]) -> Vec<Option<String>> {
    const CHUNK: usize = 64;
    let ranges: Vec<(usize, usize)> = addrs.iter().map(|&a| (a, CHUNK.min(4096 - a % 4096))).collect();
    let mut buf = vec![0u8; ranges.iter().map(|r| r.1).sum()];
    let mut ok = vec![false; ranges.len()];
    mem.read_scattered(&ranges, &mut buf, &mut ok);
    let mut at = 0;
    let mut out = Vec::with_capacity(addrs.len());
    for (i, &(addr, len)) in ranges.iter().enumerate() {
        let chunk = &buf[at..at + len];
        at += len;
        let whole = ok[i].then(|| chunk.iter().position(|&b| b == 0)).flatten();
        out.push(match whole {
            Some(end) => String::from_utf8(chunk[..end].to_vec()).ok(),
            // Unread, or longer than its chunk: the careful way.
            None => c_string(mem, addr),
        });
    }
    out
}

/// The NUL-terminated string at `addr`, if readable, short and UTF-8.
fn c_string(mem: &impl Memory, addr: usize) -> Option<String> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 64];
    while out.len() < MAX_STRING {
        // A chunk at a time, not past the page end (the next page may not
        // be mapped).
        let n = chunk.len().min(4096 - (addr + out.len()) % 4096);
        if !mem.read(addr.checked_add(out.len())?, &mut chunk[..n]) {
            return None;
        }
        match chunk[..n].iter().position(|&b| b == 0) {
            Some(end) => {
                out.extend_from_slice(&chunk[..end]);
                return String::from_utf8(out).ok();
            }
            None => out.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Image;
    use crate::modules::{Module, Segment};

    #[test]
    fn loads_relative_to_the_instruction_pointer_are_found() {
        // movslq 0x10(%rip),%rax ; test ; mov 0x20(%rip),%rbx ; mov 0x8(%rip),%eax
        let code = [
            0x48, 0x63, 0x05, 0x10, 0, 0, 0, 0x85, 0xc0, 0x48, 0x8b, 0x1d, 0x20, 0, 0, 0, 0x8b, 0x05, 8, 0,
            0, 0,
        ];
        let got = rip_relative_loads(0x1000, &code);
        assert!(got.contains(&(0x1007 + 0x10)), "{got:x?}");
        assert!(got.contains(&(0x1010 + 0x20)), "{got:x?}");
        assert!(got.contains(&(0x1016 + 8)), "{got:x?}");
    }

    fn module(path: &str, start: usize, end: usize, exec: bool, write: bool) -> Module {
        Module {
            segments: vec![Segment { start, end, exec, read: true, write }],
            ..Module::synthetic(path, start, end, false)
        }
    }

    /// A synthetic R: its code at 0x10000 (`R_getDllInfo` loading the
    /// count at 0x20000 and the array pointer at 0x20008), a package's
    /// code at 0x50000, the table's strings and entries at 0x30000.
    fn process(routine_at: usize) -> (Image, ModuleMap) {
        let mut m = Image::new();
        let code = {
            let mut c = vec![0x48, 0x63, 0x05];
            c.extend_from_slice(&(0x20000i32 - 0x10007).to_le_bytes());
            c.extend_from_slice(&[0x48, 0x8b, 0x1d]);
            c.extend_from_slice(&(0x20008i32 - 0x1000e).to_le_bytes());
            c.resize(96, 0x90);
            c
        };
        m.put(0x10000, code);
        m.put(0x20000, 1i32.to_ne_bytes().to_vec());
        m.put_word(0x20008, 0x30000);
        m.put_word(0x30000, 0x30100); // the one DllInfo
        let mut info = vec![0u8; 96];
        info[PATH..PATH + 8].copy_from_slice(&0x30400usize.to_ne_bytes());
        info[NAME..NAME + 8].copy_from_slice(&0x30500usize.to_ne_bytes());
        info[40..44].copy_from_slice(&2i32.to_ne_bytes()); // two .Call routines
        info[48..56].copy_from_slice(&0x30200usize.to_ne_bytes());
        m.put(0x30100, info);
        let mut entries = vec![0u8; 2 * 24];
        entries[0..8].copy_from_slice(&0x30600usize.to_ne_bytes());
        entries[8..16].copy_from_slice(&routine_at.to_ne_bytes());
        entries[24..32].copy_from_slice(&0x30680usize.to_ne_bytes());
        entries[32..40].copy_from_slice(&0x30000usize.to_ne_bytes()); // data: left out
        m.put(0x30200, entries);
        // (Strings are read 64 bytes at a time: as a page would be.)
        let string = |s: &[u8]| {
            let mut v = s.to_vec();
            v.resize(64, 0);
            v
        };
        m.put(0x30400, string(b"/lib/pkg.so"));
        m.put(0x30500, string(b"pkg"));
        m.put(0x30600, string(b"C_entry"));
        m.put(0x30680, string(b"C_data"));
        let mut libr = module("/usr/lib/R/lib/libR.so", 0x10000, 0x11000, true, false);
        libr.segments.push(Segment { start: 0x20000, end: 0x40000, exec: false, read: true, write: true });
        let map = ModuleMap::new(vec![libr, module("/lib/pkg.so", 0x50000, 0x51000, true, false)]);
        (m, map)
    }

    #[test]
    fn the_table_is_read_through_the_variables_r_get_dll_info_loads() {
        let (m, map) = process(0x50040);
        let got = routines(&m, &map, 0, [0, 0x10000]);
        assert_eq!(got, vec![(0x50040, "C_entry".to_string())]);
    }

    #[test]
    fn a_table_that_does_not_check_out_gives_nothing() {
        let (mut m, map) = process(0x50040);
        // A library whose path is unreadable: nothing, not a partial table.
        m.put_word(0x30100 + PATH, 0x9_0000);
        assert!(routines(&m, &map, 0, [0, 0x10000]).is_empty());
        // No path of a loaded module among the libraries: not R's table.
        let (mut m, map) = process(0x50040);
        m.put(0x30400, b"/elsewhere.so\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec());
        assert!(routines(&m, &map, 0, [0, 0x10000]).is_empty());
        // An absurd count.
        let (mut m, map) = process(0x50040);
        m.put(0x20000, 100_000i32.to_ne_bytes().to_vec());
        assert!(routines(&m, &map, 0, [0, 0x10000]).is_empty());
        // No R_getDllInfo.
        assert!(routines(&process(0x50040).0, &map, 0, [0, 0]).is_empty());
    }
}
