//! Which loaded module (executable or shared library) an address belongs to.
//!
//! The live list comes from `dl_iterate_phdr`, so it covers every module the
//! dynamic loader knows, including libraries R loaded with `dyn.load()`. It is
//! rebuilt only when the loader's add/remove counters change, which makes the
//! check on every capture a single callback.

#[cfg(target_os = "linux")]
use crate::procfs::MapsLine;
use crate::reentry::ReentryLock;
use std::sync::Arc;

/// One `PT_LOAD` segment, in absolute addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) exec: bool,
    pub(crate) read: bool,
    pub(crate) write: bool,
}

/// The file a module was mapped from, as `/proc/self/maps` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MappedFile {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
}

/// A loaded module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Full path of the file; for modules without a file (the vDSO) the
    /// loader's name.
    pub path: String,
    /// Load bias: file virtual address + bias = runtime address.
    pub bias: usize,
    pub(crate) segments: Vec<Segment>,
    /// GNU build-id read from the loaded image.
    pub build_id: Option<Vec<u8>>,
    pub(crate) is_main: bool,
    /// Whether `path` names a file (false for the vDSO).
    pub(crate) has_file: bool,
    /// Device and inode of the mapping, used to notice a file replaced on disk.
    pub(crate) mapped: Option<MappedFile>,
    /// Address and size of the loaded `.eh_frame_hdr` (PT_GNU_EH_FRAME).
    pub(crate) eh_frame_hdr: Option<(usize, usize)>,
    /// Address of the loaded dynamic section (PT_DYNAMIC).
    pub(crate) dynamic: Option<usize>,
}

impl Module {
    /// A module with one executable segment `[start, end)` and no build-id
    /// (tests build synthetic module maps from these).
    #[cfg(test)]
    pub(crate) fn synthetic(path: &str, start: usize, end: usize, is_main: bool) -> Module {
        Module {
            path: path.into(),
            bias: start,
            segments: vec![Segment { start, end, exec: true, read: true, write: false }],
            build_id: None,
            is_main,
            has_file: true,
            mapped: None,
            eh_frame_hdr: None,
            dynamic: None,
        }
    }

    /// The last path component.
    pub(crate) fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.segments.iter().any(|s| s.start <= addr && addr < s.end)
    }
}

/// An immutable set of modules with an address index.
#[derive(Debug)]
pub struct ModuleMap {
    modules: Vec<Module>,
    /// (start, end, module index, executable), sorted by start, non-overlapping.
    index: Vec<(usize, usize, usize, bool)>,
    /// Unique per map built in this process (caches keyed on a map use it).
    serial: u64,
    /// The modules of another process (or of a core file): their images
    /// are not in this process's memory, only their files are.
    foreign: bool,
}

/// Where an address falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub module: usize,
    /// Inside an executable segment.
    pub exec: bool,
}

impl ModuleMap {
    pub(crate) fn new(modules: Vec<Module>) -> ModuleMap {
        let mut index: Vec<(usize, usize, usize, bool)> = modules
            .iter()
            .enumerate()
            .flat_map(|(m, module)| {
                module.segments.iter().filter(|s| s.start < s.end).map(move |s| (s.start, s.end, m, s.exec))
            })
            .collect();
        index.sort_by_key(|&(start, end, _, _)| (start, end));
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ModuleMap { modules, index, serial, foreign: false }
    }

    /// The map of another process's (or a core file's) modules: see
    /// [`ModuleMap::is_foreign`].
    pub(crate) fn of_other_process(modules: Vec<Module>) -> ModuleMap {
        ModuleMap { foreign: true, ..ModuleMap::new(modules) }
    }

    /// Whether the modules are another process's: what is read of them
    /// comes from their files, never from this process's memory at their
    /// addresses.
    pub(crate) fn is_foreign(&self) -> bool {
        self.foreign
    }

    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    pub(crate) fn modules(&self) -> &[Module] {
        &self.modules
    }

    pub fn module(&self, i: usize) -> &Module {
        &self.modules[i]
    }

    /// What identifies the load of the module at `path` (the path the
    /// loader was given, or one naming the same file): its load bias and
    /// build-id, or without a build-id the file's device, inode, size and
    /// modification time. A module unloaded and loaded again elsewhere, or
    /// rebuilt, gets another identity; None when no module has that path.
    pub fn load_identity(&self, path: &str) -> Option<String> {
        let m = self.modules.iter().find(|m| m.has_file && m.path == path).or_else(|| {
            let want = std::fs::canonicalize(path).ok()?;
            self.modules
                .iter()
                .filter(|m| m.has_file && !m.path.is_empty())
                .find(|m| std::fs::canonicalize(&m.path).ok().as_ref() == Some(&want))
        })?;
        let id = match &m.build_id {
            Some(b) if !b.is_empty() => crate::debugfile::hex(b),
            _ => file_stamp(&m.path)?,
        };
        Some(format!("{:x}/{id}", m.bias))
    }

    pub(crate) fn lookup(&self, addr: usize) -> Option<Hit> {
        self.lookup_segment(addr).map(|(_, hit)| hit)
    }

    /// As [`ModuleMap::lookup`], with addresses around `addr` that have
    /// the same answer: the segment found, cut to where the search would
    /// go the same way (callers walking a stack try it first).
    pub(crate) fn lookup_segment(&self, addr: usize) -> Option<(std::ops::Range<usize>, Hit)> {
        let i = self.index.partition_point(|&(start, _, _, _)| start <= addr);
        // Segments do not overlap, but scan back a little in case a broken
        // module list makes them: the first containing segment wins.
        let (k, &(start, end, module, exec)) = self.index[..i]
            .iter()
            .enumerate()
            .rev()
            .take(4)
            .find(|&(_, &(start, end, _, _))| start <= addr && addr < end)?;
        // Up to the next segment's start the search ends at the same entry;
        // one found behind another (overlapping segments) holds for `addr`
        // alone.
        let (from, to) = if k + 1 == i {
            (start, self.index.get(i).map_or(end, |next| end.min(next.0)))
        } else {
            (addr, addr + 1)
        };
        Some((from..to, Hit { module, exec }))
    }

    /// The module containing `addr`, if any.
    pub(crate) fn module_of(&self, addr: usize) -> Option<usize> {
        self.lookup(addr).map(|h| h.module)
    }

    /// The index in `other` of the load of module `index` of this map: a
    /// module of the same file (path, build-id, the mapping's device and
    /// inode) at the same place (bias and segments). None when it is not
    /// loaded in `other`: an address of this module in `other` may belong
    /// to another library loaded there since.
    pub(crate) fn same_load(&self, index: usize, other: &ModuleMap) -> Option<usize> {
        let m = self.modules.get(index)?;
        if std::ptr::eq(self, other) {
            return Some(index);
        }
        let first = m.segments.iter().find(|s| s.start < s.end)?;
        let j = other.module_of(first.start)?;
        let o = other.module(j);
        let same = o.path == m.path
            && o.bias == m.bias
            && o.segments == m.segments
            && o.build_id == m.build_id
            && o.mapped == m.mapped
            && o.has_file == m.has_file
            && o.is_main == m.is_main;
        same.then_some(j)
    }
}

impl Module {
    /// A copy of a module that is no longer loaded, to show where a frame
    /// was (its path and load bias): without segments (no address finds
    /// it) and without anything read from its image or its file.
    pub(crate) fn unloaded(&self) -> Module {
        Module {
            path: self.path.clone(),
            bias: self.bias,
            segments: Vec::new(),
            build_id: None,
            is_main: false,
            has_file: false,
            mapped: None,
            eh_frame_hdr: None,
            dynamic: None,
        }
    }
}

/// Device, inode, size and modification time of the file at `path`.
#[cfg(unix)]
fn file_stamp(path: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(format!("{}:{}:{}:{}.{}", m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

#[cfg(not(unix))]
fn file_stamp(_path: &str) -> Option<String> {
    None
}

/// The dynamic loader's counters of modules loaded (`adds`) and unloaded
/// (`subs`): one pair per set of loaded modules, so a change of either
/// says that modules changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Generation {
    pub adds: u64,
    pub subs: u64,
}

impl Generation {
    /// What an old loader, whose callback gets no counters, gives.
    pub const UNKNOWN: Generation = Generation { adds: u64::MAX, subs: u64::MAX };

    /// Whether the counters are known.
    pub fn is_known(self) -> bool {
        self != Generation::UNKNOWN
    }
}

/// The loader's generation now.
#[cfg(not(target_os = "linux"))]
pub fn loader_generation() -> Generation {
    Generation::default()
}

/// The loaded modules (none: only Linux is supported).
#[cfg(not(target_os = "linux"))]
pub(crate) fn read_loaded_modules() -> Vec<Module> {
    Vec::new()
}

/// The loader's generation now (see [`Generation`]).
#[cfg(target_os = "linux")]
pub fn loader_generation() -> Generation {
    /// dl_iterate_phdr's callback: reads the counters from the first module
    /// into the `Generation` at `data`, then stops the iteration.
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `info` of `size` bytes for the
        // duration of the call; `data` is the `Generation` that
        // `loader_generation` passed.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Generation)) };
        // Old loaders pass a shorter struct without the counters.
        let need = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>();
        *out = if size >= need {
            Generation { adds: info.dlpi_adds, subs: info.dlpi_subs }
        } else {
            Generation::UNKNOWN
        };
        1
    }
    let mut out = Generation::default();
    // SAFETY: `first` has the callback's type and only uses `out`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut out as *mut _ as *mut libc::c_void) };
    out
}

/// Reads the current module list from the dynamic loader.
///
/// Program headers and notes are copied out of the loaded images with
/// `memory::copy_loaded`, never read in place where the kernel allows
/// copies: an image whose file was truncated on disk would raise SIGBUS
/// (see `memory`).
#[cfg(target_os = "linux")]
pub(crate) fn read_loaded_modules() -> Vec<Module> {
    /// dl_iterate_phdr's callback: appends the module `info` describes to
    /// the `Vec<Module>` at `data`.
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `info` for the duration of the
        // call; `data` is the Vec `read_loaded_modules` passed.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Module>)) };
        let first = out.is_empty();
        out.push(loaded_module(info, first));
        0
    }
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: `each` has the callback's type and only uses `modules`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut modules as *mut _ as *mut libc::c_void) };
    let text = crate::procfs::read_maps(crate::procfs::Proc::This).unwrap_or_default();
    let maps: Vec<MapsLine> = crate::procfs::maps_lines(&text).collect();
    for m in &mut modules {
        finish_module(m, &maps);
    }
    modules
}

/// A module as the loader describes it (`first`: the loader lists the
/// executable first, with an empty name).
#[cfg(target_os = "linux")]
fn loaded_module(info: &libc::dl_phdr_info, first: bool) -> Module {
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null name is a NUL-terminated string that the
        // loader keeps while the module is loaded.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let bias = info.dlpi_addr as usize;
    let phdrs = program_headers(info);
    let segments: Vec<Segment> = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| Segment {
            start: bias.wrapping_add(p.p_vaddr as usize),
            end: bias.wrapping_add(p.p_vaddr as usize).wrapping_add(p.p_memsz as usize),
            exec: p.p_flags & libc::PF_X != 0,
            read: p.p_flags & libc::PF_R != 0,
            write: p.p_flags & libc::PF_W != 0,
        })
        .collect();
    let build_id = loaded_build_id(&phdrs, bias, &segments);
    let eh_frame_hdr = phdrs
        .iter()
        .find(|p| p.p_type == libc::PT_GNU_EH_FRAME)
        .map(|p| (bias.wrapping_add(p.p_vaddr as usize), p.p_memsz as usize));
    let dynamic =
        phdrs.iter().find(|p| p.p_type == libc::PT_DYNAMIC).map(|p| bias.wrapping_add(p.p_vaddr as usize));
    Module {
        is_main: first && name.is_empty(),
        path: name,
        bias,
        segments,
        build_id,
        has_file: true,
        mapped: None,
        eh_frame_hdr,
        dynamic,
    }
}

/// Copies of the module's program headers.
#[cfg(target_os = "linux")]
fn program_headers(info: &libc::dl_phdr_info) -> Vec<libc::Elf64_Phdr> {
    if info.dlpi_phdr.is_null() {
        return Vec::new();
    }
    let size = std::mem::size_of::<libc::Elf64_Phdr>();
    let n = info.dlpi_phnum as usize;
    // SAFETY: the loader's headers lie in the loaded image (its first page),
    // mapped readable while the module is loaded.
    let Some(bytes) = (unsafe { crate::memory::copy_loaded(info.dlpi_phdr as usize, n * size) }) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(size)
        // SAFETY: each chunk holds `size` bytes; Elf64_Phdr is plain old data
        // and read_unaligned copes with the Vec's alignment.
        .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const libc::Elf64_Phdr) })
        .collect()
}

/// The GNU build-id in the module's loaded notes.
#[cfg(target_os = "linux")]
fn loaded_build_id(phdrs: &[libc::Elf64_Phdr], bias: usize, segments: &[Segment]) -> Option<Vec<u8>> {
    phdrs.iter().filter(|p| p.p_type == libc::PT_NOTE).find_map(|p| {
        let start = bias.wrapping_add(p.p_vaddr as usize);
        let len = p.p_memsz as usize;
        let inside =
            segments.iter().any(|s| s.read && s.start <= start && start.saturating_add(len) <= s.end);
        if !inside || len > 1 << 16 {
            return None;
        }
        // SAFETY: the notes lie inside a readable loaded segment (checked).
        let bytes = unsafe { crate::memory::copy_loaded(start, len) }?;
        gnu_build_id(&bytes, p.p_align as usize)
    })
}

/// Fills in what the loader does not say: the executable's path, absolute
/// paths, modules without a file, and the file each is mapped from.
#[cfg(target_os = "linux")]
fn finish_module(m: &mut Module, maps: &[MapsLine]) {
    if m.is_main {
        m.path = crate::procfs::exe(crate::procfs::Proc::This).unwrap_or_default();
    }
    if m.path.is_empty() || !m.path.starts_with('/') && !m.path.contains('/') {
        // The vDSO ("linux-vdso.so.1") and other file-less images.
        m.has_file = m.path.starts_with('/');
    }
    if m.has_file && !m.path.starts_with('/') {
        if let Ok(abs) = std::fs::canonicalize(&m.path) {
            m.path = abs.to_string_lossy().into_owned();
        }
    }
    if m.path.is_empty() {
        m.path = "[unknown]".into();
        m.has_file = false;
    }
    if let Some(seg) = m.segments.first() {
        m.mapped = maps
            .iter()
            .find(|e| e.start <= seg.start && seg.start < e.end && e.inode != 0)
            .map(|e| MappedFile { dev: e.dev, ino: e.inode });
    }
}

/// Extracts the GNU build-id from the bytes of an ELF note segment.
pub(crate) fn gnu_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    let align = if align == 8 { 8 } else { 4 };
    let round = |n: usize| n.div_ceil(align) * align;
    let word = |b: &[u8], at: usize| -> Option<usize> {
        b.get(at..at + 4).map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as usize)
    };
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = word(notes, at)?;
        let descsz = word(notes, at + 4)?;
        let kind = word(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(round(namesz))?;
        let next = desc_at.checked_add(round(descsz))?;
        if desc_at + descsz > notes.len() {
            return None;
        }
        if kind == 3 && namesz == 4 && &notes[name_at..name_at + 4] == b"GNU\0" && descsz > 0 {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = next;
    }
    None
}

/// The loaded modules at one moment, and which of the loader's
/// generations they are.
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    /// The loader's counters read before the modules were listed.
    pub generation: Generation,
    /// Whether the counters were the same after the modules were listed:
    /// `map` is then exactly the modules of `generation` (otherwise a
    /// module was loaded or unloaded meanwhile, and `map` may be newer).
    pub exact: bool,
    pub map: Arc<ModuleMap>,
}

impl Loaded {
    /// The generation `map` holds exactly, if it is known.
    pub(crate) fn exact_generation(&self) -> Option<Generation> {
        self.exact.then_some(self.generation)
    }
}

static LIVE: ReentryLock<Option<Loaded>> = ReentryLock::new(None);

/// The current module map, rebuilt only when modules were loaded or unloaded.
/// Never waits: if the cache is in use (re-entered), a fresh map is built.
pub fn current() -> Arc<ModuleMap> {
    current_at().map
}

/// [`current`], with the loader's generation it belongs to.
pub(crate) fn current_at() -> Loaded {
    let generation = loader_generation();
    let known = generation.is_known();
    let fresh = || {
        let map = Arc::new(ModuleMap::new(read_loaded_modules()));
        let exact = known && loader_generation() == generation;
        Loaded { generation, exact, map }
    };
    let Some(mut live) = LIVE.lock() else {
        // Re-entered on this thread: a fresh map, not cached.
        return fresh();
    };
    if let Some(l) = live.as_ref() {
        if l.generation == generation && known {
            return l.clone();
        }
    }
    let loaded = fresh();
    *live = Some(loaded.clone());
    loaded
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn module(path: &str, segs: &[(usize, usize, bool)]) -> Module {
        let mut m = Module::synthetic(path, segs[0].0, segs[0].1, false);
        m.segments = segs
            .iter()
            .map(|&(start, end, exec)| Segment { start, end, exec, read: true, write: false })
            .collect();
        m
    }

    #[test]
    fn a_load_is_identified_by_bias_and_build_id_or_by_its_file() {
        let dir = std::env::temp_dir().join(format!("winch-identity-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lib.so");
        std::fs::write(&file, b"one").unwrap();
        let path = file.to_str().unwrap().to_string();
        let with_id = |bias: usize, id: &[u8]| {
            let mut m = module("/x/a.so", &[(bias, bias + 0x1000, true)]);
            m.build_id = Some(id.to_vec());
            m
        };
        let a =
            ModuleMap::new(vec![with_id(0x10000, b"\xab\xcd"), module(&path, &[(0x50000, 0x51000, true)])]);
        assert_eq!(a.load_identity("/x/a.so").as_deref(), Some("10000/abcd"));
        assert_eq!(a.load_identity("/x/b.so"), None);
        // Loaded again elsewhere, or another build: another identity.
        let moved = ModuleMap::new(vec![with_id(0x20000, b"\xab\xcd")]);
        assert_ne!(moved.load_identity("/x/a.so"), a.load_identity("/x/a.so"));
        let rebuilt = ModuleMap::new(vec![with_id(0x10000, b"\xab\xce")]);
        assert_ne!(rebuilt.load_identity("/x/a.so"), a.load_identity("/x/a.so"));
        // Without a build-id: the file's stamp; a path naming the same file
        // through a symlink finds it.
        let first = a.load_identity(&path).unwrap();
        assert!(first.starts_with("50000/"));
        let link = dir.join("link.so");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(a.load_identity(link.to_str().unwrap()), Some(first.clone()));
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, b"rebuilt").unwrap();
        assert_ne!(a.load_identity(&path), Some(first));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_load_is_found_again_only_while_it_is_loaded() {
        let with_id = |path: &str, start: usize, id: &[u8]| {
            let mut m =
                module(path, &[(start, start + 0x1000, true), (start + 0x1000, start + 0x2000, false)]);
            m.build_id = Some(id.to_vec());
            m
        };
        let libr = module("/usr/lib/R/lib/libR.so", &[(0x100000, 0x200000, true)]);
        let then = ModuleMap::new(vec![libr.clone(), with_id("/tmp/a/rel.so", 0x10000, b"\x0a")]);
        // Still loaded (listed elsewhere in the map): found.
        let same = ModuleMap::new(vec![with_id("/tmp/a/rel.so", 0x10000, b"\x0a"), libr.clone()]);
        assert_eq!(then.same_load(1, &same), Some(0));
        assert_eq!(then.same_load(0, &same), Some(1));
        assert_eq!(then.same_load(1, &then), Some(1));
        // Another library at the same address; the same path rebuilt (as
        // pkgload::load_all() does); unloaded: not found.
        let other = ModuleMap::new(vec![libr.clone(), with_id("/tmp/b/rel.so", 0x10000, b"\x0b")]);
        assert_eq!(then.same_load(1, &other), None);
        let rebuilt = ModuleMap::new(vec![libr.clone(), with_id("/tmp/a/rel.so", 0x10000, b"\x0c")]);
        assert_eq!(then.same_load(1, &rebuilt), None);
        let mut moved_file = with_id("/tmp/a/rel.so", 0x10000, b"\x0a");
        moved_file.mapped = Some(MappedFile { dev: 1, ino: 2 });
        assert_eq!(then.same_load(1, &ModuleMap::new(vec![moved_file])), None);
        assert_eq!(then.same_load(1, &ModuleMap::new(vec![libr])), None);
        assert_eq!(then.same_load(7, &then), None);
        // An unloaded module's copy keeps its path and bias, and no address
        // finds it.
        let gone = then.module(1).unloaded();
        assert_eq!((gone.path.as_str(), gone.bias), ("/tmp/a/rel.so", 0x10000));
        assert_eq!(ModuleMap::new(vec![gone]).lookup(0x10010), None);
    }

    #[test]
    fn the_current_map_knows_its_generation() {
        let now = current_at();
        assert!(now.exact, "no module was loaded while the test read them");
        assert_eq!(now.exact_generation(), Some(loader_generation()));
        assert!(Arc::ptr_eq(&now.map, &current()));
    }

    #[test]
    fn lookup_finds_the_segment_and_respects_bounds() {
        let map = ModuleMap::new(vec![
            module("/usr/lib/R/lib/libR.so", &[(0x1000, 0x2000, false), (0x2000, 0x5000, true)]),
            module("/tmp/lidR.so", &[(0x9000, 0xa000, true)]),
        ]);
        assert_eq!(map.lookup(0x1000), Some(Hit { module: 0, exec: false }));
        assert_eq!(map.lookup(0x4fff), Some(Hit { module: 0, exec: true }));
        assert_eq!(map.lookup(0x5000), None);
        assert_eq!(map.lookup(0x9abc), Some(Hit { module: 1, exec: true }));
        assert_eq!(map.lookup(0xa000), None);
        assert_eq!(map.lookup(0), None);
        assert_eq!(map.module(1).basename(), "lidR.so");
    }

    #[test]
    fn every_address_in_a_found_range_has_the_same_answer() {
        // Normal segments, a gap, and a broken list whose segments overlap.
        let map = ModuleMap::new(vec![
            module("/a.so", &[(0x100, 0x200, false), (0x200, 0x500, true)]),
            module("/b.so", &[(0x400, 0x480, true), (0x900, 0xa00, true)]),
            module("/c.so", &[(0x300, 0x950, false)]),
        ]);
        for addr in 0..0xb00 {
            match map.lookup_segment(addr) {
                Some((range, hit)) => {
                    assert!(range.contains(&addr), "{addr:#x} outside {range:x?}");
                    for other in range.clone() {
                        assert_eq!(map.lookup(other), Some(hit), "{other:#x} in {range:x?} from {addr:#x}");
                    }
                }
                None => assert_eq!(map.lookup(addr), None),
            }
        }
    }

    #[test]
    fn build_id_note_is_parsed() {
        let mut note = Vec::new();
        let id = [0xde, 0xad, 0xbe, 0xef, 0x01];
        // An unrelated note first, then NT_GNU_BUILD_ID.
        for (kind, name, desc) in [(1u32, &b"GNU\0"[..], &[1u8, 2, 3, 4][..]), (3u32, &b"GNU\0"[..], &id[..])]
        {
            note.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            note.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            note.extend_from_slice(&kind.to_ne_bytes());
            note.extend_from_slice(name);
            note.extend_from_slice(desc);
            while note.len() % 4 != 0 {
                note.push(0);
            }
        }
        assert_eq!(gnu_build_id(&note, 4), Some(id.to_vec()));
        assert_eq!(gnu_build_id(&note[..10], 4), None);
        assert_eq!(gnu_build_id(&note[..30], 4), None);
    }

    #[test]
    fn live_map_covers_this_code_and_libc() {
        let map = current();
        let here = live_map_covers_this_code_and_libc as fn() as usize;
        let hit = map.lookup(here).expect("test binary not found");
        assert!(hit.exec);
        assert!(map.module(hit.module).is_main);
        let libc_fn = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize;
        let m = map.module(map.module_of(libc_fn).unwrap());
        assert!(m.basename().starts_with("libc.so"), "{}", m.path);
        assert!(m.build_id.is_some());
        assert!(m.mapped.is_some());
        // Unchanged loader state: the same map object is returned.
        assert!(Arc::ptr_eq(&map, &current()));
    }
}
