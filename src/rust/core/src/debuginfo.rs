//! Everything winch reads from a module's file: its symbol tables and DWARF,
//! including separate debug files found through the build-id directory layout
//! or `.gnu_debuglink`.
//!
//! Files are read (through `object::ReadCache`, only the parts needed), never
//! memory-mapped: a library truncated on disk while mapped would turn every
//! later access into SIGBUS. A file that no longer matches the loaded image
//! (replaced on disk, different build-id) is not used at all; its frames keep
//! their module and offset but get no name.

use crate::debugfile::{self, Candidate, Hints};
use crate::modules::Module;
use crate::scopes;
use crate::symbols::{demangle, Symbol, SymbolTable, RANK_DYNSYM, RANK_MINIDEBUGINFO, RANK_SYMTAB};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dwarf::{LazyDwarf, Section};
pub(crate) use crate::dwarf::{Reader, SectionData};
/// Where a frame's name came from.
pub use crate::symbols::Source;

/// What happened when the module's file was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// The module has no file (the vDSO).
    NoFile,
    /// The file could not be opened or parsed.
    Unreadable(String),
    /// The file on disk is not the one that is loaded.
    Mismatch(String),
}

/// One resolved frame: a physical frame resolves to one or more of these,
/// innermost inlined call first, the physical function last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub func: Option<Arc<str>>,
    pub file: Option<Arc<str>>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inlined: bool,
    /// Where `func` came from (None when there is no name).
    pub source: Option<Source>,
    /// Start of the physical function holding the address, relative to the
    /// module (file virtual address), from the unwind information; None
    /// where no unwind entry covers it. The same for every inlined call of
    /// one frame.
    pub start: Option<u64>,
}

impl Resolved {
    /// A frame about which nothing is known.
    pub(crate) fn unnamed() -> Resolved {
        Resolved {
            func: None,
            file: None,
            line: None,
            column: None,
            inlined: false,
            source: None,
            start: None,
        }
    }
}

pub(crate) struct ModuleInfo {
    pub status: Status,
    pub symbols: SymbolTable,
    /// The separate debug file that was used, if any.
    pub debug_file: Option<PathBuf>,
    dwarf: Option<LazyDwarf>,
    /// Heap bytes measured as held by this module's information (see
    /// [`crate::symbolizer::heap`]): what reading its files left allocated,
    /// plus what resolving addresses in it read since (the units, lines and
    /// functions an address needs are read when it is first looked up).
    held: usize,
    /// Where the DWARF came from: the module or a local file, or debuginfod.
    pub dwarf_source: Source,
}

impl ModuleInfo {
    fn empty(status: Status) -> ModuleInfo {
        ModuleInfo {
            status,
            symbols: SymbolTable::default(),
            debug_file: None,
            dwarf: None,
            held: 0,
            dwarf_source: Source::Dwarf,
        }
    }

    /// A module known by its symbols only (tests of the caches).
    #[cfg(test)]
    pub(crate) fn from_symbols(symbols: Vec<Symbol>) -> ModuleInfo {
        ModuleInfo { symbols: SymbolTable::new(symbols), ..ModuleInfo::empty(Status::Ok) }
    }

    pub(crate) fn unreadable(why: String) -> ModuleInfo {
        ModuleInfo::empty(Status::Unreadable(why))
    }

    pub(crate) fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// Heap bytes held: as measured when the symbolizer read the module
    /// and resolved addresses in it, at least the symbol tables and DWARF
    /// sections it keeps.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.held.max(self.known_bytes())
    }

    /// The bytes known without measuring: the symbol tables, and the DWARF
    /// sections as read (decompressed).
    pub(crate) fn known_bytes(&self) -> usize {
        self.symbols.heap_bytes() + self.dwarf_section_bytes()
    }

    /// Bytes of DWARF sections held (inflated, and compressed where they
    /// are inflated only in part).
    pub(crate) fn dwarf_section_bytes(&self) -> usize {
        self.dwarf.as_ref().map_or(0, LazyDwarf::section_bytes)
    }

    /// What the DWARF reader has read so far (None without DWARF).
    pub(crate) fn dwarf_counts(&self) -> Option<crate::dwarf::Counts> {
        self.dwarf.as_ref().map(LazyDwarf::counts)
    }

    /// Adds `delta` (measured) to the bytes held.
    pub(crate) fn add_held(&mut self, delta: isize) {
        self.held = self.held.saturating_add_signed(delta);
    }

    /// Resolves a file-relative address (already adjusted for return
    /// addresses). Never fails: what cannot be known is `None`.
    pub(crate) fn resolve(&mut self, probe: u64) -> Vec<Resolved> {
        let mut out = Vec::new();
        if let Some(dwarf) = &mut self.dwarf {
            for frame in dwarf.frames(probe) {
                let func = frame.name.as_deref().map(|raw| {
                    let name = demangle_in(raw, frame.lang);
                    // C++ names that need their scopes get them from the unit.
                    if scopes::is_cpp(frame.lang) && scopes::needs_scope(&name) {
                        if let Some(q) = frame
                            .die
                            .and_then(|die| dwarf.with_unit(frame.unit, |u| scopes::qualified(u, die, &name)))
                            .flatten()
                        {
                            return Arc::<str>::from(q);
                        }
                    }
                    Arc::<str>::from(name)
                });
                let (file, line, column) = match frame.location {
                    Some(loc) => (loc.file, loc.line, loc.column.filter(|&c| c > 0)),
                    None => (None, None, None),
                };
                let source = func.as_ref().map(|_| self.dwarf_source);
                out.push(Resolved { func, file, line, column, inlined: true, source, start: None });
                if out.len() > 256 {
                    break; // corrupt DWARF could loop
                }
            }
        }
        let symbol = self.symbols.lookup(probe).map(|s| (s.name.clone(), s.source()));
        match out.last_mut() {
            Some(last) => {
                last.inlined = false;
                if last.func.is_none() {
                    (last.func, last.source) = symbol.unzip();
                }
            }
            None => {
                let (func, source) = symbol.unzip();
                out.push(Resolved { func, source, ..Resolved::unnamed() })
            }
        }
        out
    }
}

/// A name from DWARF demangled by its unit's language (by its shape when
/// the unit gives none), as addr2line does.
fn demangle_in(raw: &str, lang: Option<gimli::DwLang>) -> String {
    let rust = || rustc_demangle::try_demangle(raw).ok().map(|d| format!("{d:#}"));
    let cpp = || {
        let sym = cpp_demangle::Symbol::new(raw).ok()?;
        sym.demangle_with_options(&cpp_demangle::DemangleOptions::default()).ok()
    };
    let demangled = match lang {
        Some(gimli::DW_LANG_Rust) => rust(),
        Some(l) if scopes::is_cpp(Some(l)) => cpp(),
        Some(_) => None,
        None => rust().or_else(cpp),
    };
    demangled.unwrap_or_else(|| raw.to_string())
}

/// Adds the separate debug file at `path` (fetched from a debuginfod
/// server) to what is known of `module`, if it is the module's debug file:
/// its build-id must be the module's. Otherwise returns why not.
pub(crate) fn add_debug_file(
    info: &mut ModuleInfo,
    module: &Module,
    path: &Path,
    source: Source,
) -> Result<(), String> {
    if module.build_id.is_none() {
        return Err("the module has no build-id".into());
    }
    let candidate = Candidate { path: path.to_path_buf(), crc: None };
    let mut syms: Vec<Symbol> = info.symbols.iter().cloned().collect();
    let dwarf = open_debug_file(&candidate, module, &mut syms).ok_or_else(|| {
        format!("{} is not the debug file of {} (build-id or DWARF)", path.display(), module.path)
    })?;
    info.dwarf = Some(dwarf);
    info.dwarf_source = source;
    info.debug_file = Some(candidate.path);
    info.symbols = SymbolTable::new(syms);
    Ok(())
}

/// Reads what winch needs from `module`'s file, looking for separate debug
/// files under `debug_roots` (normally `/usr/lib/debug`).
pub(crate) fn load(module: &Module, debug_roots: &[PathBuf]) -> ModuleInfo {
    if !module.has_file {
        // The vDSO has no file, but its image is this process's own vDSO
        // where the build-ids agree (one kernel: every process's is the
        // same), and its symbols name its functions.
        return match own_vdso().filter(|_| module.build_id.is_some()) {
            Some((image, id)) if Some(id) == module.build_id.as_ref() => {
                match object::File::parse(&image[..]) {
                    Ok(obj) => load_parsed(module, &[], obj, None),
                    Err(_) => ModuleInfo::empty(Status::NoFile),
                }
            }
            _ => ModuleInfo::empty(Status::NoFile),
        };
    }
    let path = Path::new(&module.path);
    // A regular file only (a module's path can name a FIFO or a device by
    // now, or in a core's list of mappings): see `crate::files`.
    let (file, size) = match crate::files::open_input(path, "module file", u64::MAX) {
        Ok(i) => (i.file, i.size),
        Err(e) => return ModuleInfo::empty(Status::Unreadable(e.to_string())),
    };
    let inode = file_id(&file).map(|(_, ino)| ino);
    // Files of ordinary size are read whole (far faster than many small reads
    // when walking symbol tables); huge ones through a cache of the parts
    // used. Either way the data is a private copy, never a mapping.
    if size <= WHOLE_FILE_LIMIT {
        // The headers and the sections naming reads (not the code): see
        // `elfread`; a file that is not plain ELF64 is read whole (no
        // further than its size when opened).
        let data = match crate::elfread::read_needed(&file, size) {
            Some(d) => d,
            None => match crate::files::read_opened(file, size) {
                Ok(d) => d,
                Err(e) => return ModuleInfo::empty(Status::Unreadable(format!("{}: {e}", module.path))),
            },
        };
        match object::File::parse(&data[..]) {
            Ok(obj) => load_parsed(module, debug_roots, obj, inode),
            Err(e) => ModuleInfo::empty(Status::Unreadable(format!("{}: {e}", module.path))),
        }
    } else {
        let cache = object::ReadCache::new(file);
        match object::File::parse(&cache) {
            Ok(obj) => load_parsed(module, debug_roots, obj, inode),
            Err(e) => ModuleInfo::empty(Status::Unreadable(format!("{}: {e}", module.path))),
        }
    }
}

/// A copy of this process's vDSO image and its build-id (read once).
fn own_vdso() -> Option<&'static (Vec<u8>, Vec<u8>)> {
    static VDSO: std::sync::OnceLock<Option<(Vec<u8>, Vec<u8>)>> = std::sync::OnceLock::new();
    VDSO.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: getauxval has no preconditions.
            let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
            if base == 0 {
                return None;
            }
            let (lo, hi) = crate::memory::mapping_containing(base)?;
            let image = crate::memory::copy(base, hi.checked_sub(base).filter(|_| lo <= base)?)?;
            let id = object::File::parse(&image[..]).ok()?.build_id().ok()??.to_vec();
            Some((image, id))
        }
        #[cfg(not(target_os = "linux"))]
        None
    })
    .as_ref()
}

/// Files up to this size are read into memory whole.
const WHOLE_FILE_LIMIT: u64 = 64 << 20;

fn load_parsed<'a, R: object::ReadRef<'a>>(
    module: &Module,
    debug_roots: &[PathBuf],
    obj: object::File<'a, R>,
    inode: Option<u64>,
) -> ModuleInfo {
    // Is the file on disk the loaded image? With a build-id in the image, the
    // file's must be the same (and is then enough: the device numbers that
    // /proc/self/maps and stat() report differ on overlayfs and btrfs).
    // Without one, the inode must be the one that is mapped.
    let file_build_id = obj.build_id().ok().flatten();
    match &module.build_id {
        Some(loaded) if file_build_id != Some(loaded.as_slice()) => {
            return ModuleInfo::empty(Status::Mismatch(format!(
                "the build-id of {} differs from the loaded image",
                module.path
            )));
        }
        Some(_) => {}
        None => {
            if let (Some(mapped), Some(ino)) = (module.mapped, inode) {
                if ino != mapped.ino {
                    return ModuleInfo::empty(Status::Mismatch(format!(
                        "{} was replaced on disk after it was loaded",
                        module.path
                    )));
                }
            }
        }
    }

    let mut info = ModuleInfo::empty(Status::Ok);
    let mut syms = Vec::new();
    collect_symbols(&obj, &mut syms);
    collect_minidebuginfo(&obj, &mut syms);
    // PLT stubs, named after the function each jumps to (`sin@plt`).
    syms.extend(crate::plt::symbols(&obj));

    if has_dwarf(&obj) {
        // Unusable DWARF (damaged): names come from the symbol tables.
        info.dwarf = load_dwarf(&obj, None::<&object::File<&[u8]>>);
    } else {
        for candidate in debug_candidates(module, &obj, debug_roots) {
            // A candidate that is not the module's debug file, or is damaged,
            // is skipped.
            if let Some(dwarf) = open_debug_file(&candidate, module, &mut syms) {
                info.dwarf = Some(dwarf);
                info.debug_file = Some(candidate.path);
                break;
            }
        }
    }
    info.symbols = SymbolTable::new(syms);
    info
}

/// Device and inode of an open file.
#[cfg(unix)]
fn file_id(file: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(_file: &File) -> Option<(u64, u64)> {
    None
}

fn collect_symbols<'a, R: object::ReadRef<'a>>(obj: &object::File<'a, R>, out: &mut Vec<Symbol>) {
    collect_symbols_ranked(obj, out, RANK_SYMTAB, RANK_DYNSYM);
}

/// `collect_symbols` with the ranks given to `.symtab` and `.dynsym`.
fn collect_symbols_ranked<'a, R: object::ReadRef<'a>>(
    obj: &object::File<'a, R>,
    out: &mut Vec<Symbol>,
    symtab_rank: u8,
    dynsym_rank: u8,
) {
    // Which sections hold code, by index: looked up once, not per symbol.
    let mut text = Vec::new();
    for section in obj.sections() {
        let i = section.index().0;
        if text.len() <= i {
            text.resize(i + 1, false);
        }
        text[i] = section.kind() == SectionKind::Text;
    }
    for (table_rank, symbols) in [(symtab_rank, obj.symbols()), (dynsym_rank, obj.dynamic_symbols())] {
        for s in symbols {
            let in_text = s.section_index().is_some_and(|i| text.get(i.0).copied().unwrap_or(false));
            let is_code = match s.kind() {
                SymbolKind::Text => true,
                SymbolKind::Unknown => in_text,
                _ => false,
            };
            if !is_code || s.is_undefined() || s.size() == 0 {
                continue;
            }
            let Ok(name) = s.name() else { continue };
            if name.is_empty() {
                continue;
            }
            let binding = if s.is_global() {
                0
            } else if s.is_weak() {
                1
            } else {
                2
            };
            out.push(Symbol {
                start: s.address(),
                size: s.size(),
                name: Arc::from(demangle(name)),
                rank: table_rank + binding,
            });
        }
    }
}

/// Decompressed MiniDebugInfo is at most this large (real ones are a few
/// hundred KB): a damaged or hostile section cannot exhaust memory.
const MINIDEBUGINFO_LIMIT: u64 = 64 << 20;

/// Adds the function symbols of `.gnu_debugdata` (MiniDebugInfo: an
/// xz-compressed ELF file holding the `.symtab` entries that stripping
/// removed, as Fedora and RHEL build their binaries). A section that does
/// not decompress to an ELF file adds nothing.
fn collect_minidebuginfo<'a, R: object::ReadRef<'a>>(obj: &object::File<'a, R>, out: &mut Vec<Symbol>) {
    let Some(section) = obj.section_by_name(".gnu_debugdata") else { return };
    let Ok(compressed) = section.data() else { return };
    let Some(elf) = unxz(compressed, MINIDEBUGINFO_LIMIT) else { return };
    if let Ok(inner) = object::File::parse(&elf[..]) {
        collect_symbols_ranked(&inner, out, RANK_MINIDEBUGINFO, RANK_MINIDEBUGINFO);
    }
}

/// The contents of an xz stream, if it decodes whole (checksum included)
/// to at most `limit` bytes.
pub(crate) fn unxz(data: &[u8], limit: u64) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let reader = lzma_rust2::XzReader::new_mem_limit(data, false, 256 << 10);
    let mut out = Vec::new();
    reader.take(limit + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= limit).then_some(out)
}

fn has_dwarf<'a, R: object::ReadRef<'a>>(obj: &object::File<'a, R>) -> bool {
    obj.section_by_name(".debug_info").map(|s| s.size() > 0 && s.file_range().is_some()).unwrap_or(false)
}

/// One DWARF section of `obj`: the large ones that are read at offsets
/// kept compressed and inflated as far as they are read (see
/// [`crate::dwarf`]), the others copied out whole (decompressed). A missing
/// or unreadable section is empty; `lazy` false reads every section whole.
fn section<'a, R: object::ReadRef<'a>>(
    obj: &object::File<'a, R>,
    id: gimli::SectionId,
    lazy: bool,
) -> Section {
    let Some(s) = obj.section_by_name(id.name()).filter(|s| s.file_range().is_some()) else {
        return Section::empty();
    };
    if lazy && crate::dwarf::LAZY.contains(&id) {
        if let Ok(c) = s.compressed_data() {
            if c.format == object::CompressionFormat::Zlib {
                if let Ok(size) = usize::try_from(c.uncompressed_size) {
                    return Section::zlib(c.data.to_vec(), size);
                }
            }
        }
    }
    match s.uncompressed_data() {
        Ok(std::borrow::Cow::Owned(v)) => Section::whole(v),
        Ok(std::borrow::Cow::Borrowed(b)) => Section::whole(b.to_vec()),
        Err(_) => Section::empty(),
    }
}

fn endian_of<'a, R: object::ReadRef<'a>>(obj: &object::File<'a, R>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// The DWARF of `obj` and, for a debug file that has one, its
/// supplementary (dwz) file (read whole: units refer into it anywhere).
pub(crate) fn load_dwarf<'a, 'b, R: object::ReadRef<'a>, S: object::ReadRef<'b>>(
    obj: &object::File<'a, R>,
    sup: Option<&object::File<'b, S>>,
) -> Option<LazyDwarf> {
    let sections = crate::dwarf::READ.iter().map(|&id| (id, section(obj, id, true))).collect();
    let sup = sup.map(|sup| {
        let endian = endian_of(sup);
        let Ok(dwarf) = gimli::Dwarf::load(|id| {
            let data = if crate::dwarf::READ.contains(&id) {
                section(sup, id, false).data().clone()
            } else {
                SectionData::empty()
            };
            Ok::<Reader, std::convert::Infallible>(gimli::EndianReader::new(data, endian))
        });
        dwarf
    });
    let mut dwarf = LazyDwarf::new(sections, sup, endian_of(obj));
    dwarf.plausible().then_some(dwarf)
}

/// The existing files among the places the module's debug file may be.
fn debug_candidates<'a, R: object::ReadRef<'a>>(
    module: &Module,
    obj: &object::File<'a, R>,
    roots: &[PathBuf],
) -> Vec<Candidate> {
    let debuglink = match obj.gnu_debuglink() {
        Ok(Some((name, crc))) => Some((String::from_utf8_lossy(name).into_owned(), crc)),
        _ => None,
    };
    let loaded = PathBuf::from(&module.path);
    let resolved = std::fs::canonicalize(&loaded).ok().filter(|p| *p != loaded);
    let hints = Hints {
        build_id: module.build_id.as_deref(),
        debuglink: debuglink.as_ref().map(|(n, c)| (n.as_str(), *c)),
        loaded: &loaded,
        resolved: resolved.as_deref(),
    };
    let mut out = debugfile::candidates(&hints, roots);
    out.retain(|c| c.path.is_file());
    out
}

/// Reads `candidate` if it is the module's debug file: its DWARF, and its
/// symbols added to `syms`. None if it is not (or is damaged).
fn open_debug_file(candidate: &Candidate, module: &Module, syms: &mut Vec<Symbol>) -> Option<LazyDwarf> {
    // A regular file only, read no further than its size (`crate::files`).
    let crate::files::Input { file, size } =
        crate::files::open_input(&candidate.path, "debug file", u64::MAX).ok()?;
    // Identity: the build-ids must agree when the module has one (checked in
    // `finish_debug_file`); otherwise the debuglink CRC must match the file.
    let crc = candidate.crc.filter(|_| module.build_id.is_none());
    if crc.is_some() || size <= WHOLE_FILE_LIMIT {
        let data = crate::files::read_opened(file, size).ok()?;
        if crc.is_some_and(|crc| crc32fast::hash(&data) != crc) {
            return None;
        }
        let obj = object::File::parse(&data[..]).ok()?;
        finish_debug_file(obj, candidate, module, syms)
    } else {
        let cache = object::ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        finish_debug_file(obj, candidate, module, syms)
    }
}

fn finish_debug_file<'b, S: object::ReadRef<'b>>(
    obj: object::File<'b, S>,
    candidate: &Candidate,
    module: &Module,
    syms: &mut Vec<Symbol>,
) -> Option<LazyDwarf> {
    if let Some(loaded) = &module.build_id {
        if obj.build_id().ok().flatten() != Some(loaded.as_slice()) {
            return None;
        }
    }
    if !has_dwarf(&obj) {
        return None;
    }
    // dwz: a supplementary file shared between debug files, used only if its
    // build-id is the one the debug file names.
    let (sup_path, sup_id) = match obj.gnu_debugaltlink() {
        Ok(Some((name, id))) => {
            let name = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            let path = if name.is_absolute() {
                name
            } else {
                candidate.path.parent().unwrap_or(Path::new("/")).join(name)
            };
            (Some(path), id.to_vec())
        }
        _ => (None, Vec::new()),
    };
    let sup_file = sup_path
        .and_then(|p| crate::files::open_input(&p, "debug file", u64::MAX).ok())
        .map(|i| object::ReadCache::new(i.file));
    let sup_obj = sup_file
        .as_ref()
        .and_then(|c| object::File::parse(c).ok())
        .filter(|o| o.build_id().ok().flatten() == Some(sup_id.as_slice()));
    let result = load_dwarf(&obj, sup_obj.as_ref())?;
    collect_symbols(&obj, syms);
    Some(result)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::modules::{self, MappedFile};

    fn libc_module() -> Module {
        let map = modules::current();
        let addr = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize;
        map.module(map.module_of(addr).unwrap()).clone()
    }

    /// `data` compressed by the xz tool, or None (with a note) without it.
    fn xz(data: &[u8], args: &[&str]) -> Option<Vec<u8>> {
        use std::io::Write;
        let child = std::process::Command::new("xz")
            .args(args)
            .args(["-c", "-z"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            eprintln!("skipped: the xz tool is not installed");
            return None;
        };
        child.stdin.take().unwrap().write_all(data).unwrap();
        Some(child.wait_with_output().unwrap().stdout)
    }

    #[test]
    fn xz_streams_decode_whole_or_not_at_all() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        // The default (LZMA2, CRC64), several blocks as `xz -T0` writes
        // them, SHA-256 checks, and the x86 BCJ filter.
        for args in
            [&[][..], &["--block-size=100000"][..], &["--check=sha256"][..], &["--x86", "--lzma2"][..]]
        {
            let Some(packed) = xz(&data, args) else { return };
            assert_eq!(unxz(&packed, 1 << 30).as_deref(), Some(&data[..]), "{args:?}");
        }
        let packed = xz(&data, &[]).unwrap();
        assert!(unxz(&packed, data.len() as u64 - 1).is_none(), "over the limit");
        assert!(unxz(&packed[..packed.len() / 2], 1 << 30).is_none(), "truncated");
        let mut bad = packed.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        assert!(unxz(&bad, 1 << 30).is_none(), "corrupt");
        assert!(unxz(b"not xz at all", 1 << 30).is_none());
    }

    #[test]
    fn a_matching_build_id_is_trusted_over_device_numbers() {
        // On overlayfs and btrfs, /proc/self/maps and stat() disagree on the
        // device of the same file.
        let mut m = libc_module();
        assert!(m.build_id.is_some());
        let real = m.mapped.unwrap();
        m.mapped = Some(MappedFile { dev: real.dev ^ 0xffff, ino: real.ino });
        let info = load(&m, &[]);
        assert_eq!(info.status, Status::Ok);
        assert!(!info.symbols.is_empty());
    }

    #[test]
    fn without_a_build_id_the_inode_decides() {
        let mut m = libc_module();
        m.build_id = None;
        let real = m.mapped.unwrap();
        m.mapped = Some(MappedFile { dev: real.dev ^ 0xffff, ino: real.ino });
        assert_eq!(load(&m, &[]).status, Status::Ok);
        m.mapped = Some(MappedFile { dev: real.dev, ino: real.ino ^ 1 });
        assert!(matches!(load(&m, &[]).status, Status::Mismatch(_)));
        // A different build-id than the loaded image: never used.
        let mut m = libc_module();
        m.build_id = Some(vec![1, 2, 3]);
        assert!(matches!(load(&m, &[]).status, Status::Mismatch(_)));
    }
}
