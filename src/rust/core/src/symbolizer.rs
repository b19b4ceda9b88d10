//! Caches in front of `debuginfo`: one `ModuleInfo` per loaded module image
//! and one resolution per (module, address), so a repeated capture reads no
//! file and parses nothing.
//!
//! A module image is identified by path, load bias, build-id and the inode
//! of its mapping: a library unloaded and loaded again after a rebuild gets a
//! fresh entry instead of its predecessor's names.
//!
//! What reads a module's files is a parameter ([`Loader`]), so the caching
//! is tested without files.

use crate::debuginfo::{self, ModuleInfo, Resolved, Status};
use crate::modules::{MappedFile, Module, ModuleMap};
use crate::reentry::ReentryLock;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModuleKey {
    path: String,
    bias: usize,
    build_id: Option<Vec<u8>>,
    mapped: Option<MappedFile>,
}

impl ModuleKey {
    fn of(m: &Module) -> ModuleKey {
        ModuleKey { path: m.path.clone(), bias: m.bias, build_id: m.build_id.clone(), mapped: m.mapped }
    }
}

/// Bound on cached address resolutions; past it the address cache restarts.
const MAX_CACHED_ADDRESSES: usize = 200_000;

/// Reads what the symbolizer needs from a module's files, looking for
/// separate debug files under the given roots.
pub type Loader = Box<dyn Fn(&Module, &[PathBuf]) -> ModuleInfo + Send>;

pub struct Symbolizer {
    loader: Loader,
    roots: Vec<PathBuf>,
    /// Cache id of each module image read so far, and what was read.
    ids: HashMap<ModuleKey, u32>,
    infos: HashMap<u32, Box<ModuleInfo>>,
    frames: HashMap<(u32, u64), Arc<[Resolved]>>,
    next_id: u32,
    /// The module map last seen (by serial) and, per module index in it,
    /// the module's cache id: the warm path hashes and copies no strings.
    map_seen: u64,
    by_index: Vec<Option<u32>>,
    /// Files read so far (a test hook for "the second capture reads nothing").
    pub files_loaded: u64,
}

/// What the cache holds for one module.
#[derive(Clone, Debug)]
pub struct ModuleStats {
    pub path: String,
    pub symbols: usize,
    pub has_dwarf: bool,
    pub heap_bytes: usize,
    pub debug_file: Option<PathBuf>,
    pub status: Status,
}

/// Cache figures for diagnostics and the memory report.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    pub modules: usize,
    pub modules_with_dwarf: usize,
    pub addresses: usize,
    pub heap_bytes: usize,
    pub files_loaded: u64,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new(Box::new(debuginfo::load), vec![PathBuf::from("/usr/lib/debug")])
    }
}

impl Symbolizer {
    pub fn new(loader: Loader, roots: Vec<PathBuf>) -> Symbolizer {
        Symbolizer {
            loader,
            roots,
            ids: HashMap::new(),
            infos: HashMap::new(),
            frames: HashMap::new(),
            next_id: 0,
            map_seen: 0,
            by_index: Vec::new(),
            files_loaded: 0,
        }
    }

    /// Directories searched for separate debug files; changing them empties the cache.
    pub fn set_debug_roots(&mut self, roots: Vec<PathBuf>) {
        if roots != self.roots {
            self.roots = roots;
            self.clear();
        }
    }

    pub fn debug_roots(&self) -> &[PathBuf] {
        &self.roots
    }

    pub fn clear(&mut self) {
        self.ids.clear();
        self.infos.clear();
        self.frames.clear();
        self.map_seen = 0;
        self.by_index.clear();
    }

    /// Loads `m`'s files on first use; returns its cache id.
    fn ensure(&mut self, m: &Module) -> u32 {
        let key = ModuleKey::of(m);
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        // A panic inside the file parsers (a bug they may have on a damaged
        // file) is remembered as an unreadable module, not retried.
        let (loader, roots) = (&self.loader, &self.roots);
        let info = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loader(m, roots)))
            .unwrap_or_else(|_| {
                debuginfo::ModuleInfo::unreadable(format!(
                    "{}: internal error while reading the file",
                    m.path
                ))
            });
        self.files_loaded += 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.ids.insert(key, id);
        self.infos.insert(id, Box::new(info));
        id
    }

    /// Forgets modules that are no longer loaded.
    pub fn retain_loaded(&mut self, map: &ModuleMap) {
        let live: HashSet<ModuleKey> = map.modules().iter().map(ModuleKey::of).collect();
        let before = self.ids.len();
        self.ids.retain(|k, _| live.contains(k));
        if self.ids.len() != before {
            let kept: HashSet<u32> = self.ids.values().copied().collect();
            self.infos.retain(|id, _| kept.contains(id));
            self.frames.retain(|(id, _), _| kept.contains(id));
        }
    }

    /// Resolves the file-relative address `probe` in module `index` of `map`.
    /// When `map` is not the one seen last, modules no longer loaded are
    /// forgotten first.
    pub fn resolve_in(&mut self, map: &ModuleMap, index: usize, probe: u64) -> Arc<[Resolved]> {
        if map.serial() != self.map_seen {
            self.retain_loaded(map);
            self.map_seen = map.serial();
            self.by_index = vec![None; map.modules().len()];
        }
        let id = match self.by_index[index] {
            Some(id) => id,
            None => {
                let id = self.ensure(map.module(index));
                self.by_index[index] = Some(id);
                id
            }
        };
        if let Some(r) = self.frames.get(&(id, probe)) {
            return r.clone();
        }
        let r: Arc<[Resolved]> = resolve_guarded(&self.infos[&id], probe).into();
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert((id, probe), r.clone());
        r
    }

    /// The symbol table of module `index` of `map` (read on first use), as
    /// a copy that shares the names.
    pub fn symbol_table(&mut self, map: &ModuleMap, index: usize) -> crate::symbols::SymbolTable {
        if map.serial() != self.map_seen {
            self.retain_loaded(map);
            self.map_seen = map.serial();
            self.by_index = vec![None; map.modules().len()];
        }
        let id = match self.by_index[index] {
            Some(id) => id,
            None => {
                let id = self.ensure(map.module(index));
                self.by_index[index] = Some(id);
                id
            }
        };
        self.infos[&id].symbols.clone()
    }

    pub fn module_stats(&self) -> Vec<ModuleStats> {
        let mut out: Vec<ModuleStats> = self
            .ids
            .iter()
            .map(|(k, id)| (k, &self.infos[id]))
            .map(|(k, info)| ModuleStats {
                path: k.path.clone(),
                symbols: info.symbols.len(),
                has_dwarf: info.has_dwarf(),
                heap_bytes: info.heap_bytes(),
                debug_file: info.debug_file.clone(),
                status: info.status.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    pub fn stats(&self) -> CacheStats {
        let frame_bytes: usize = self
            .frames
            .values()
            .map(|r| {
                48 + r
                    .iter()
                    .map(|f| std::mem::size_of::<Resolved>() + f.file.as_ref().map_or(0, |s| s.len()))
                    .sum::<usize>()
            })
            .sum();
        CacheStats {
            modules: self.infos.len(),
            modules_with_dwarf: self.infos.values().filter(|i| i.has_dwarf()).count(),
            addresses: self.frames.len(),
            heap_bytes: self.infos.values().map(|i| i.heap_bytes()).sum::<usize>() + frame_bytes,
            files_loaded: self.files_loaded,
        }
    }
}

/// `info.resolve(probe)`, with a panic in the DWARF reader turned into "no
/// name".
fn resolve_guarded(info: &ModuleInfo, probe: u64) -> Vec<Resolved> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| info.resolve(probe))).unwrap_or_else(|_| {
        vec![Resolved { func: None, file: None, line: None, column: None, inlined: false }]
    })
}

static GLOBAL: ReentryLock<Option<Symbolizer>> = ReentryLock::new(None);

/// Runs `f` with the process-wide symbolizer, or returns None if this thread
/// is already using it (a capture re-entered from a signal handler, say).
pub fn with_global<T>(f: impl FnOnce(&mut Symbolizer) -> T) -> Option<T> {
    let mut guard = GLOBAL.lock()?;
    Some(f(guard.get_or_insert_with(Symbolizer::default)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbol;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn module(path: &str, start: usize, ino: u64) -> Module {
        Module {
            mapped: Some(MappedFile { dev: 1, ino }),
            ..Module::synthetic(path, start, start + 0x1000, false)
        }
    }

    /// A symbolizer whose loader names one function per module, `<file>_f`
    /// covering offsets 0x100..0x200 (or panics for "/bad.so"), and counts
    /// its loads.
    fn counting() -> (Symbolizer, Arc<AtomicUsize>) {
        let loads = Arc::new(AtomicUsize::new(0));
        let counter = loads.clone();
        let loader: Loader = Box::new(move |m: &Module, _roots: &[PathBuf]| {
            counter.fetch_add(1, Ordering::SeqCst);
            assert!(m.path != "/bad.so", "a parser bug");
            let name = format!("{}_f{}", m.path.trim_start_matches('/'), m.mapped.map_or(0, |f| f.ino));
            ModuleInfo::from_symbols(vec![Symbol { start: 0x100, size: 0x100, name: name.into(), rank: 0 }])
        });
        (Symbolizer::new(loader, Vec::new()), loads)
    }

    fn name(r: &Arc<[Resolved]>) -> Option<&str> {
        r.last().and_then(|f| f.func.as_deref())
    }

    #[test]
    fn a_module_is_read_once_and_addresses_are_cached() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 2)]);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x150)), Some("a.so_f1"));
        assert_eq!(name(&s.resolve_in(&map, 0, 0x180)), Some("a.so_f1"));
        assert_eq!(name(&s.resolve_in(&map, 1, 0x150)), Some("b.so_f2"));
        assert_eq!(name(&s.resolve_in(&map, 1, 0x50)), None, "outside every symbol");
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        assert_eq!(s.stats().files_loaded, 2);
        assert_eq!(s.stats().addresses, 4);
        // The same modules in a new map (another library was loaded): no
        // file is read again.
        let map2 = ModuleMap::new(vec![
            module("/a.so", 0x10000, 1),
            module("/c.so", 0x30000, 3),
            module("/b.so", 0x20000, 2),
        ]);
        assert_eq!(name(&s.resolve_in(&map2, 2, 0x150)), Some("b.so_f2"));
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_unloaded_module_is_forgotten_and_a_rebuilt_one_is_read_afresh() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 2)]);
        s.resolve_in(&map, 0, 0x150);
        s.resolve_in(&map, 1, 0x150);
        // b.so unloaded, then rebuilt and loaded again at the same path and
        // address (another inode): its names come from the new file.
        let map2 = ModuleMap::new(vec![module("/a.so", 0x10000, 1)]);
        s.resolve_in(&map2, 0, 0x150);
        assert_eq!(s.stats().modules, 1);
        let map3 = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 9)]);
        assert_eq!(name(&s.resolve_in(&map3, 1, 0x150)), Some("b.so_f9"));
        assert_eq!(loads.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_loader_panic_is_remembered_as_unreadable() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/bad.so", 0x10000, 1)]);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x150)), None);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x160)), None);
        assert_eq!(loads.load(Ordering::SeqCst), 1, "not retried");
        assert!(matches!(s.module_stats()[0].status, Status::Unreadable(_)));
    }

    #[test]
    fn new_debug_roots_empty_the_cache() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1)]);
        s.resolve_in(&map, 0, 0x150);
        s.set_debug_roots(Vec::new());
        s.resolve_in(&map, 0, 0x150);
        assert_eq!(loads.load(Ordering::SeqCst), 1, "the same roots keep the cache");
        s.set_debug_roots(vec![PathBuf::from("/dbg")]);
        assert_eq!(s.debug_roots(), [PathBuf::from("/dbg")]);
        s.resolve_in(&map, 0, 0x150);
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
