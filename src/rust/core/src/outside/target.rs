//! What another process has loaded, read from `/proc/PID/maps` and from the
//! loaded images in its memory (ELF header, program headers, build-id
//! note), and where its R keeps what winch reads: `R_GlobalContext` and
//! friends from the dynamic symbol table of R's library on disk, trusted
//! only when its build-id is the loaded image's.

use crate::error::{Error, Result};
use crate::memory::Memory;
use crate::modules::{MappedFile, Module, Segment};
use crate::procfs::Mapping;
use crate::r::layout::{Layout, RVersion};

/// The name the dynamic loader gives the vDSO.
pub const VDSO_NAME: &str = "linux-vdso.so.1";

/// The modules of a process: every ELF image mapped from offset 0 of a
/// file (and the vDSO), described from its headers in `mem`. `exe` is the
/// process's executable (`/proc/PID/exe`).
pub fn modules(maps: &[Mapping], mem: &impl Memory, exe: &str) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        let vdso = m.path == "[vdso]";
        if m.offset != 0 || !m.perms.read || !(vdso || m.path.starts_with('/')) {
            continue;
        }
        // A file mapped again at offset 0 by the same image (rare) or data
        // files: only ELF images with program headers count.
        let Some(mut module) = image_at(mem, m.start) else { continue };
        if out.iter().any(|o| o.bias == module.bias && o.path == m.path) {
            continue;
        }
        // (The vDSO under the loader's name, as in-process.)
        module.path = if vdso { VDSO_NAME.to_string() } else { m.path.clone() };
        module.has_file = !vdso;
        module.is_main = !vdso && m.path == exe;
        module.mapped = (m.inode != 0).then_some(MappedFile { dev: m.dev, ino: m.inode });
        // The image's segments as mapped, not only as declared: keep the
        // declared ones, checked against the mappings of this file.
        let same_file = |l: &Mapping| l.path == m.path && l.inode == m.inode;
        if !maps[i..].iter().any(same_file) {
            continue;
        }
        out.push(module);
    }
    // The executable first, as the loader lists it.
    if let Some(i) = out.iter().position(|m| m.is_main) {
        out[..=i].rotate_right(1);
    }
    out
}

/// The module whose ELF header is at `base` in `mem`, path left empty.
fn image_at(mem: &impl Memory, base: usize) -> Option<Module> {
    let mut ehdr = [0u8; 64];
    if !mem.read(base, &mut ehdr) || &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(&ehdr, 32), u16_at(&ehdr, 54), u16_at(&ehdr, 56));
    if phentsize != 56 || phnum == 0 || phnum > 256 {
        return None;
    }
    let mut ph = vec![0u8; phentsize * phnum];
    if !mem.read(base.checked_add(phoff)?, &mut ph) {
        return None;
    }
    // (type, flags, offset, vaddr, memsz, align)
    let phdrs: Vec<(u32, u32, usize, usize, usize, usize)> = ph
        .chunks_exact(56)
        .map(|p| {
            (
                u32_at(p, 0) as u32,
                u32_at(p, 4) as u32,
                u64_at(p, 8),
                u64_at(p, 16),
                u64_at(p, 40),
                u64_at(p, 48),
            )
        })
        .collect();
    let first = phdrs.iter().find(|p| p.0 == libc::PT_LOAD)?;
    // The first loadable segment maps the file's start (offset 0 here).
    let bias = base.wrapping_sub(first.3 & !0xfff).wrapping_add(first.2 & !0xfff);
    let segments: Vec<Segment> = phdrs
        .iter()
        .filter(|p| p.0 == libc::PT_LOAD)
        .map(|p| Segment {
            start: bias.wrapping_add(p.3),
            end: bias.wrapping_add(p.3).wrapping_add(p.4),
            exec: p.1 & libc::PF_X != 0,
            read: p.1 & libc::PF_R != 0,
            write: p.1 & libc::PF_W != 0,
        })
        .collect();
    let build_id = phdrs.iter().filter(|p| p.0 == libc::PT_NOTE && p.4 <= 1 << 16).find_map(|p| {
        let mut notes = vec![0u8; p.4];
        mem.read(bias.wrapping_add(p.3), &mut notes).then_some(())?;
        crate::modules::gnu_build_id(&notes, p.5)
    });
    let eh_frame_hdr =
        phdrs.iter().find(|p| p.0 == libc::PT_GNU_EH_FRAME).map(|p| (bias.wrapping_add(p.3), p.4));
    let dynamic = phdrs.iter().find(|p| p.0 == libc::PT_DYNAMIC).map(|p| bias.wrapping_add(p.3));
    Some(Module {
        path: String::new(),
        bias,
        segments,
        build_id,
        is_main: false,
        has_file: true,
        mapped: None,
        eh_frame_hdr,
        dynamic,
    })
}

/// Where the target's R keeps what a dump reads.
#[derive(Clone, Debug)]
pub struct TargetR {
    pub version: RVersion,
    /// The version as R writes it (`"4.2.2"`).
    pub version_text: String,
    pub layout: Layout,
    /// The module of R's library (or of the executable, R linked
    /// statically).
    pub libr: usize,
    /// Addresses of the variables `R_GlobalContext`, `R_NilValue`.
    pub global_context: usize,
    pub nil_var: usize,
    /// The variables holding the symbols labels are made with
    /// (`R_DoubleColonSymbol`, `R_TripleColonSymbol`, `R_DollarSymbol`,
    /// `R_Bracket2Symbol`; 0 where absent).
    pub symbol_vars: [usize; 4],
    /// The function `R_gc` (0: not found): its first call is the start of
    /// R's garbage collector (see `r::gc::gc_start`).
    pub r_gc: usize,
    /// The variables `R_Srcref`, `R_InBCInterpreter`, `R_ClassSymbol` and
    /// `R_SrcfileSymbol` (0 where absent).
    pub srcref_var: usize,
    pub in_bc_var: usize,
    pub class_var: usize,
    pub srcfile_var: usize,
    /// The functions `R_getDllInfo` and `R_getEmbeddingDllInfo` (0: not
    /// found; R >= 4.5 exports only the second): see `registration`.
    pub dll_info_fns: [usize; 2],
}

impl TargetR {
    /// The symbols labels are made with, read from their variables in
    /// `mem` (0 for one that cannot be read).
    pub fn symbols(&self, mem: &impl Memory) -> crate::r::heap::Symbols {
        let sym = |k: usize| mem.word(self.symbol_vars[k]).unwrap_or(0);
        crate::r::heap::Symbols {
            double_colon: sym(0),
            triple_colon: sym(1),
            dollar: sym(2),
            bracket2: sym(3),
        }
    }

    /// The facts a sample of R's main thread is read with (see
    /// `profile::compose`), read from `mem`: the target's own addresses of
    /// R's variables and symbols. What only the running R can give (its
    /// thread, its stack's bounds, winch's own library) is left 0.
    pub fn facts(&self, mem: &impl Memory) -> crate::r::Facts {
        let value = |var: usize| if var == 0 { 0 } else { mem.word(var).unwrap_or(0) };
        crate::r::Facts {
            version: self.version,
            layout: self.layout,
            main_thread: 0,
            interpreter_addr: 0,
            own_addr: 0,
            global_context: self.global_context,
            cstack_vars: [0; 3],
            node_stack: None,
            data: [(0, 0); 4],
            symbols: self.symbols(mem),
            nil: value(self.nil_var),
            srcref_var: self.srcref_var,
            in_bc: value(self.in_bc_var),
            class_symbol: value(self.class_var),
        }
    }
}

/// The variables a dump reads, by name, from the dynamic symbol table.
const VARIABLES: [&str; 13] = [
    "R_GlobalContext",
    "R_NilValue",
    "R_DoubleColonSymbol",
    "R_TripleColonSymbol",
    "R_DollarSymbol",
    "R_Bracket2Symbol",
    "R_gc",
    "R_Srcref",
    "R_InBCInterpreter",
    "R_ClassSymbol",
    "R_SrcfileSymbol",
    "R_getDllInfo",
    "R_getEmbeddingDllInfo",
];

/// Finds R in the target: the module exporting `R_GlobalContext` (libR, or
/// the executable), its file's build-id checked against the loaded
/// image's, and R's version from `Rversion.h` of its R home. An Err says
/// why the process's R frames cannot be read (not R at all: Ok(None)).
pub fn find_r(modules: &[Module], r_home: Option<&str>) -> Result<Option<TargetR>> {
    let candidates = modules.iter().enumerate().filter(|(_, m)| {
        m.has_file && (m.basename() == "libR.so" || m.is_main) && !m.path.ends_with(" (deleted)")
    });
    for (i, m) in candidates {
        // Only the parts parsing asks for are read (a regular file only:
        // see `crate::files`).
        let Ok(input) =
            crate::files::open_input(std::path::Path::new(&m.path), "module", crate::files::MAX_ELF)
        else {
            continue;
        };
        let cache = object::ReadCache::new(input.file);
        let Ok(file) = object::File::parse(&cache) else { continue };
        use object::{Object, ObjectSymbol};
        let mut found = [0usize; VARIABLES.len()];
        for sym in file.dynamic_symbols() {
            if let Some(k) = sym.name().ok().and_then(|n| VARIABLES.iter().position(|v| *v == n)) {
                if sym.is_definition() {
                    found[k] = m.bias.wrapping_add(sym.address() as usize);
                }
            }
        }
        if found[0] == 0 {
            continue;
        }
        let on_disk = file.build_id().ok().flatten().map(|b| b.to_vec());
        if on_disk.is_none() || on_disk != m.build_id {
            return Err(Error::Inconsistent(format!(
                "R's library {} on disk is not the one the process loaded (build-ids differ: replaced since?)",
                m.path
            )));
        }
        let (version, version_text) = r_version(&m.path, r_home).ok_or_else(|| {
            Error::Unavailable(format!(
                "the version of the process's R could not be told (no Rversion.h near {})",
                m.path
            ))
        })?;
        let layout = Layout::for_r(version)
            .ok_or_else(|| Error::Unavailable(format!("R {}.{} is not supported", version.0, version.1)))?;
        return Ok(Some(TargetR {
            version,
            version_text,
            layout,
            libr: i,
            global_context: found[0],
            nil_var: found[1],
            symbol_vars: [found[2], found[3], found[4], found[5]],
            r_gc: found[6],
            srcref_var: found[7],
            in_bc_var: found[8],
            class_var: found[9],
            srcfile_var: found[10],
            dll_info_fns: [found[11], found[12]],
        }));
    }
    Ok(None)
}

/// R's version from `Rversion.h` (`R_MAJOR`, `R_MINOR`) of the R home that
/// holds `libr` (`R_HOME/lib/libR.so`; Debian keeps the headers in
/// `/usr/share/R/include`), or of `r_home` (the process's `R_HOME`): as
/// numbers and as R writes it.
fn r_version(libr: &str, r_home: Option<&str>) -> Option<(RVersion, String)> {
    let lib_dir = std::path::Path::new(libr).parent()?;
    let mut places = vec![lib_dir.join("../include/Rversion.h")];
    if let Some(h) = r_home {
        places.push(std::path::Path::new(h).join("include/Rversion.h"));
    }
    if lib_dir.ends_with("usr/lib/R/lib") {
        places.push("/usr/share/R/include/Rversion.h".into());
    }
    // (A header of a few KB: more is not that file.)
    let read = |p: &std::path::Path| crate::files::read_input(p, "header", 1 << 20).ok();
    places.iter().find_map(|p| parse_rversion(&String::from_utf8_lossy(&read(p)?)))
}

/// `(major, minor)` from the text of `Rversion.h`, and the whole version
/// (`R_MAJOR.R_MINOR`: `"4.5.1"`).
pub fn parse_rversion(text: &str) -> Option<(RVersion, String)> {
    let value = |name: &str| {
        text.lines()
            .find_map(|l| {
                l.trim().strip_prefix("#define")?.trim().strip_prefix(name)?.trim().strip_prefix('"')
            })
            .and_then(|v| v.split('"').next())
            .map(str::to_string)
    };
    let (major_text, minor_text) = (value("R_MAJOR")?, value("R_MINOR")?);
    let major: u32 = major_text.parse().ok()?;
    let minor: u32 = minor_text.split('.').next()?.parse().ok()?;
    // (What R writes: digits and dots only, or the numbers alone.)
    let plain = |t: &str| !t.is_empty() && t.len() <= 16 && t.chars().all(|c| c.is_ascii_digit() || c == '.');
    let text = if plain(&minor_text) { format!("{major}.{minor_text}") } else { format!("{major}.{minor}") };
    Some(((major, minor), text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{self, Proc};

    #[test]
    fn rversion_h_gives_major_and_minor() {
        let h = "#define R_VERSION 262658\n#define R_MAJOR  \"4\"\n#define R_MINOR  \"5.1\"\n";
        assert_eq!(parse_rversion(h), Some(((4, 5), "4.5.1".to_string())));
        let odd = "#define R_MAJOR  \"4\"\n#define R_MINOR  \"6.0 devel\"\n";
        assert_eq!(parse_rversion(odd), Some(((4, 6), "4.6".to_string())), "only what R writes");
        assert_eq!(parse_rversion("#define R_MAJOR \"4\"\n"), None);
    }

    #[test]
    fn this_process_modules_read_through_memory_match_the_loaders() {
        let pid = std::process::id() as i32;
        let maps = procfs::parse_maps(&procfs::read_maps(Proc::This).unwrap());
        let exe = procfs::exe(Proc::This).unwrap();
        let mods = modules(&maps, &crate::memory::Process { pid }, &exe);
        assert!(mods[0].is_main, "{:?}", mods[0].path);
        let loader = crate::modules::read_loaded_modules();
        for l in loader.iter().filter(|l| l.has_file && l.path.starts_with('/')) {
            let m = mods.iter().find(|m| m.bias == l.bias).unwrap_or_else(|| panic!("{} missing", l.path));
            assert_eq!(m.segments, l.segments, "{}", l.path);
            assert_eq!(m.build_id, l.build_id, "{}", l.path);
            assert_eq!(m.eh_frame_hdr, l.eh_frame_hdr, "{}", l.path);
        }
    }
}
