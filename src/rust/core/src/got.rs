//! Finding and rewriting entries of loaded modules' global offset tables
//! (GOT): the slots through which a module calls a function of another
//! module.
//!
//! [`elf`] reads which slots a module's relocations fill with which
//! function; this file rewrites slots and puts them back; `hookset` is the
//! one machinery every family of GOT hooks installs through.
//!
//! With full RELRO the slots lie in pages the loader made read-only after
//! relocating; [`write_slots`] makes such a page writable for the writes
//! and restores its protection.

use crate::memory::Memory;

pub mod elf;
#[cfg(target_os = "linux")]
pub mod hookset;

pub use elf::{find_slots, Kind, RelocTypes, Slot, Wanted};

/// The protection of the page holding `addr` (`PROT_*` bits), from the
/// text of `/proc/self/maps`.
#[cfg(all(unix, test))]
pub fn page_protection(maps: &str, addr: usize) -> Option<i32> {
    Protections::parse(maps).of(addr)
}

/// The protection of each mapping of this process, parsed once from the
/// text of `/proc/self/maps` (a rewrite of many slots looks each up).
pub struct Protections(Vec<(usize, usize, i32)>);

impl Protections {
    pub fn parse(maps: &str) -> Protections {
        let mut v: Vec<(usize, usize, i32)> =
            crate::procfs::maps_lines(maps).map(|l| (l.start, l.end, l.perms.prot())).collect();
        v.sort_unstable();
        Protections(v)
    }

    /// This process's, now.
    pub fn read() -> Protections {
        Protections::parse(&crate::procfs::read_maps(crate::procfs::Proc::This).unwrap_or_default())
    }

    /// The protection of the mapping holding `addr`.
    pub fn of(&self, addr: usize) -> Option<i32> {
        let i = self.0.partition_point(|&(lo, _, _)| lo <= addr).checked_sub(1)?;
        let (lo, hi, prot) = self.0[i];
        (addr >= lo && addr < hi).then_some(prot)
    }
}

/// Writes `value` into the slot at `addr`, whose page has protection `prot`
/// (see [`page_protection`]): a read-only page is made writable for the
/// write and given back its protection. The store is a single aligned word
/// (atomic for threads that call through the slot meanwhile).
///
/// # Safety
/// `addr` must be a mapped, 8-byte aligned GOT slot of a loaded module, and
/// `value` an address callers of that slot may jump to.
#[cfg(all(unix, test))]
pub unsafe fn write_slot(addr: usize, value: usize, prot: i32) -> crate::error::Result<()> {
    // SAFETY: the caller's contract, for one slot.
    match unsafe { write_slots(&[(addr, value, prot)]) }.pop() {
        Some(r) => r,
        None => Ok(()),
    }
}

/// Writes each of `writes` (slot, value, protection of its page) as
/// `write_slot` (tests) writes one, one result each: slots sharing a
/// read-only page are written while the page is made writable once (two
/// system calls a page, not a slot).
///
/// # Safety
/// Every slot must be a mapped, 8-byte aligned GOT slot of a loaded module,
/// and its value an address callers of that slot may jump to.
#[cfg(unix)]
pub unsafe fn write_slots(writes: &[(usize, usize, i32)]) -> Vec<crate::error::Result<()>> {
    use crate::error::Error;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // SAFETY: sysconf is always safe to call.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let mut out: Vec<crate::error::Result<()>> = Vec::with_capacity(writes.len());
    let mut i = 0;
    while i < writes.len() {
        let (addr, _, prot) = writes[i];
        let start = addr & !(page - 1);
        // The run of entries on this page with the same protection.
        let mut end = i + 1;
        while end < writes.len() && writes[end].0 & !(page - 1) == start && writes[end].2 == prot {
            end += 1;
        }
        let writable = prot & libc::PROT_WRITE != 0;
        let opened = writable || {
            // SAFETY: the page is a mapped page of a loaded module (the
            // caller's contract); adding write access changes no content.
            unsafe { libc::mprotect(start as *mut libc::c_void, page, prot | libc::PROT_WRITE) == 0 }
        };
        if !opened {
            let why = std::io::Error::last_os_error();
            for _ in i..end {
                out.push(Err(Error::Unavailable(format!(
                    "mprotect refused to make the GOT page at {start:#x} writable ({why})"
                ))));
            }
            i = end;
            continue;
        }
        for &(addr, value, _) in &writes[i..end] {
            if !addr.is_multiple_of(std::mem::align_of::<usize>()) {
                out.push(Err(Error::Inconsistent(format!("misaligned GOT slot at {addr:#x}"))));
                continue;
            }
            // SAFETY: an aligned, mapped and (now) writable word (see above).
            unsafe { (*(addr as *const AtomicUsize)).store(value, Ordering::SeqCst) };
            out.push(Ok(()));
        }
        if !writable {
            // SAFETY: restores the protection the page had.
            unsafe { libc::mprotect(start as *mut libc::c_void, page, prot) };
        }
        i = end;
    }
    out
}

/// The memory of a loaded module, read through the kernel where it allows
/// (a file truncated on disk would make direct reads fault), else in place
/// within the module's readable segments.
pub struct LoadedMemory<'a> {
    pub module: &'a crate::modules::Module,
}

impl Memory for LoadedMemory<'_> {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if crate::memory::available() {
            return crate::memory::read(addr, buf);
        }
        let Some(end) = addr.checked_add(buf.len()) else { return false };
        let inside = self.module.segments.iter().any(|s| s.read && s.start <= addr && end <= s.end);
        if inside {
            // SAFETY: a readable segment of a loaded module (checked).
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        }
        inside
    }
}

/// A slot winch rewrote, and what it held before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patched {
    pub addr: usize,
    pub original: usize,
    pub value: usize,
    /// The module: path and load bias (to check it is still loaded).
    pub module: (String, usize),
}

/// The word at `addr`, read without risking a fault where the kernel
/// allows.
#[cfg(target_os = "linux")]
fn read_word(module: &crate::modules::Module, addr: usize) -> Option<usize> {
    let mut b = [0u8; 8];
    LoadedMemory { module }.read(addr, &mut b).then(|| usize::from_ne_bytes(b))
}

/// A module load whose slots were found: path, load bias, dynamic
/// section, build-id and the functions wanted (names and versions).
type LoadKey = (String, usize, usize, Vec<u8>, String);

/// Slots found, by module load: a module's relocation tables never change
/// while it is loaded, and a memory profile hooks every module at each
/// start (walking the tables again cost about 2 ms of a profile's start).
/// Only modules with a build-id are kept (a rebuilt library loaded at the
/// same address is then told apart).
#[cfg(target_os = "linux")]
static FOUND: std::sync::Mutex<Vec<(LoadKey, Vec<Slot>)>> = std::sync::Mutex::new(Vec::new());
/// Loads kept at most (the oldest go first).
#[cfg(target_os = "linux")]
const FOUND_KEPT: usize = 1024;

/// The slots of the `wanted` functions in a loaded module, found once per
/// load (see `FOUND`).
#[cfg(target_os = "linux")]
fn slots_of(
    module: &crate::modules::Module,
    dynamic: usize,
    types: RelocTypes,
    wanted: &[Wanted],
) -> Vec<Slot> {
    let key = module.build_id.as_ref().map(|id| {
        let names: Vec<String> = wanted.iter().map(|w| format!("{}@{}", w.name, w.version)).collect();
        (module.path.clone(), module.bias, dynamic, id.clone(), names.join(" "))
    });
    if let Some(key) = &key {
        let found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, slots)) = found.iter().find(|(k, _)| k == key) {
            return slots.clone();
        }
    }
    // (The tables are walked entry by entry: a page at a time, each page
    // once, saves a system call per entry.)
    let mem = crate::memory::Paged::new(LoadedMemory { module });
    let inside = |a: usize| module.contains(a);
    let slots = find_slots(&mem, dynamic, module.bias, &inside, types, wanted);
    if let Some(key) = key {
        let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
        if found.len() >= FOUND_KEPT {
            found.remove(0);
        }
        found.push((key, slots.clone()));
    }
    slots
}

/// Points the slots of the `wanted` functions in `module` to `values`
/// (one per wanted function): slots bound to `targets` (the function a slot
/// should reach, one per wanted function), or not bound yet (a lazy
/// `JUMP_SLOT` still holding the module's own PLT stub). Slots bound to
/// anything else (another provider of the name, someone else's hook) are
/// left alone, as are slots already holding `values`. `maps` is the text of
/// `/proc/self/maps`, parsed.
#[cfg(target_os = "linux")]
pub fn patch_module(
    module: &crate::modules::Module,
    wanted: &[Wanted],
    targets: &[usize],
    values: &[usize],
    maps: &Protections,
) -> Vec<Patched> {
    let (Some(types), Some(dynamic)) = (RelocTypes::native(), module.dynamic) else { return Vec::new() };
    let mut chosen = Vec::new();
    for slot in slots_of(module, dynamic, types, wanted) {
        let Some(current) = read_word(module, slot.addr) else { continue };
        let (target, value) = (targets[slot.wanted], values[slot.wanted]);
        let lazy = slot.kind == Kind::JumpSlot
            && module.segments.iter().any(|s| s.exec && s.start <= current && current < s.end);
        if current == value || !(current == target || lazy) {
            continue;
        }
        let Some(prot) = maps.of(slot.addr) else { continue };
        chosen.push((slot.addr, current, value, prot));
    }
    let writes: Vec<(usize, usize, i32)> = chosen.iter().map(|c| (c.0, c.2, c.3)).collect();
    // SAFETY: GOT slots of a loaded module found from its own relocations
    // (sorted by address); each value is a function with the wanted
    // function's signature (the caller's contract through `values`).
    let written = unsafe { write_slots(&writes) };
    chosen
        .into_iter()
        .zip(written)
        .filter(|(_, w)| w.is_ok())
        .map(|((addr, original, value, _), _)| Patched {
            addr,
            original,
            value,
            module: (module.path.clone(), module.bias),
        })
        .collect()
}

/// Puts back what `patched` slots held, where the module is still loaded
/// and the slot still holds winch's value. Returns how many were restored.
#[cfg(target_os = "linux")]
pub fn restore(patched: &[Patched], map: &crate::modules::ModuleMap, maps: &Protections) -> usize {
    let mut writes = Vec::new();
    for p in patched {
        let Some(m) =
            map.modules().iter().find(|m| m.path == p.module.0 && m.bias == p.module.1 && m.contains(p.addr))
        else {
            continue;
        };
        if read_word(m, p.addr) != Some(p.value) {
            continue;
        }
        let Some(prot) = maps.of(p.addr) else { continue };
        writes.push((p.addr, p.original, prot));
    }
    writes.sort_by_key(|w| w.0);
    // SAFETY: the same slots of the same loaded modules, holding winch's
    // values; each `original` is what the loader had put there.
    let written = unsafe { write_slots(&writes) };
    written.iter().filter(|w| w.is_ok()).count()
}

/// The address of version `version` of the function `name` among the
/// loaded modules (`dlvsym`), or of its default version when `version` is
/// empty.
#[cfg(target_os = "linux")]
pub fn versioned_symbol(name: &str, version: &str) -> Option<usize> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: plain lookups in the global scope with NUL-terminated names.
    let p = unsafe {
        if version.is_empty() {
            libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr())
        } else {
            let version = std::ffi::CString::new(version).ok()?;
            libc::dlvsym(libc::RTLD_DEFAULT, name.as_ptr(), version.as_ptr())
        }
    };
    (!p.is_null()).then_some(p as usize)
}

/// `versioned_symbol` in the library `soname` if it is loaded (without
/// loading it).
#[cfg(target_os = "linux")]
pub fn versioned_symbol_in(soname: &str, name: &str, version: &str) -> Option<usize> {
    let lib = std::ffi::CString::new(soname).ok()?;
    let name = std::ffi::CString::new(name).ok()?;
    let version = std::ffi::CString::new(version).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded
    // library (taking a reference, given back by dlclose).
    unsafe {
        let h = libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return None;
        }
        let p = libc::dlvsym(h, name.as_ptr(), version.as_ptr());
        libc::dlclose(h);
        (!p.is_null()).then_some(p as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_protections_from_maps() {
        let maps = "7f0000000000-7f0000002000 r--p 00000000 fd:01 12 /usr/lib/libx.so\n\
                    7f0000002000-7f0000003000 rw-p 00002000 fd:01 12 /usr/lib/libx.so\n\
                    7f0000003000-7f0000004000 r-xp 00003000 fd:01 12 /usr/lib/libx.so\n";
        assert_eq!(page_protection(maps, 0x7f0000001008), Some(libc::PROT_READ));
        assert_eq!(page_protection(maps, 0x7f0000002000), Some(libc::PROT_READ | libc::PROT_WRITE));
        assert_eq!(page_protection(maps, 0x7f0000003fff), Some(libc::PROT_READ | libc::PROT_EXEC));
        assert_eq!(page_protection(maps, 0x7f0000004000), None);
        assert_eq!(page_protection("garbage", 1), None);
        // Parsed once, looked up by address (the lines in any order).
        let p = Protections::parse(&maps.lines().rev().collect::<Vec<_>>().join("\n"));
        assert_eq!(p.of(0x7f0000001008), Some(libc::PROT_READ));
        assert_eq!(p.of(0x7f0000003fff), Some(libc::PROT_READ | libc::PROT_EXEC));
        assert_eq!(p.of(0x7f0000004000), None);
        assert_eq!(p.of(0), None);
    }

    #[test]
    fn writes_a_read_only_page_and_restores_its_protection() {
        // SAFETY: a fresh anonymous page, read-only after the first write.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(page, libc::MAP_FAILED);
            let slot = (page as usize) + 64;
            *(slot as *mut usize) = 1;
            libc::mprotect(page, 4096, libc::PROT_READ);
            write_slot(slot, 0xdead_beef, libc::PROT_READ).unwrap();
            assert_eq!(*(slot as *const usize), 0xdead_beef);
            let maps = crate::procfs::read_maps(crate::procfs::Proc::This).unwrap();
            assert_eq!(page_protection(&maps, slot), Some(libc::PROT_READ));
            assert!(write_slot(slot + 1, 0, libc::PROT_READ).is_err());
            libc::munmap(page, 4096);
        }
    }
}
