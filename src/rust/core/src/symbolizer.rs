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
//!
//! Two things come from the loaded image rather than the files: the start
//! of each frame's function (from `.eh_frame`, which stripping keeps) and,
//! through it, the names of R's registered native routines, given only to a
//! function that starts exactly at a registered address.

use crate::debuginfo::{self, ModuleInfo, Resolved, Status};
use crate::debuginfod::{Config, Debuginfod, Fetcher};
use crate::modules::{MappedFile, Module, ModuleMap};
use crate::reentry::ReentryLock;
use crate::symbols::Source;
use crate::unwind::ehframe::EhTables;
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
    /// Unwind tables of each module image, for function starts.
    starts: HashMap<u32, Option<EhTables>>,
    frames: HashMap<(u32, u64), Arc<[Resolved]>>,
    /// R's registered native routines: absolute address to name.
    registered: HashMap<usize, Arc<str>>,
    /// debuginfod: the session's state (kept while turned off, so that
    /// misses stay remembered), whether it is on, and the modules still to
    /// try (their capture's time ran out before their turn).
    debuginfod: Option<Debuginfod>,
    debuginfod_on: bool,
    pending: HashSet<u32>,
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
            starts: HashMap::new(),
            frames: HashMap::new(),
            registered: HashMap::new(),
            debuginfod: None,
            debuginfod_on: false,
            pending: HashSet::new(),
            next_id: 0,
            map_seen: 0,
            by_index: Vec::new(),
            files_loaded: 0,
        }
    }

    /// Directories searched for separate debug files; changing them empties the cache.
    /// Sets the directories searched for debug files (the first
    /// [`crate::debugfile::MAX_ROOTS`] distinct ones).
    pub fn set_debug_roots(&mut self, roots: Vec<PathBuf>) {
        let roots = crate::debugfile::roots(roots);
        if roots != self.roots {
            self.roots = roots;
            self.clear();
        }
    }

    pub fn debug_roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Sets R's registered native routines (absolute address, name); a
    /// change forgets the resolutions made with the old table.
    pub fn set_registered(&mut self, routines: Vec<(usize, String)>) {
        let new: HashMap<usize, Arc<str>> =
            routines.into_iter().filter(|(a, _)| *a != 0).map(|(a, n)| (a, Arc::from(n))).collect();
        if new != self.registered {
            self.registered = new;
            self.frames.clear();
        }
    }

    /// Turns fetching from debuginfod servers on or off; `fetcher` is used
    /// from the first time it is turned on. Modules read before without
    /// DWARF are tried at their next use.
    pub fn set_debuginfod(&mut self, on: bool, fetcher: impl FnOnce() -> Box<dyn Fetcher>) {
        if on && self.debuginfod.is_none() {
            self.debuginfod = Some(Debuginfod::new(fetcher()));
        }
        if on && !self.debuginfod_on {
            self.pending = self.infos.iter().filter(|(_, i)| !i.has_dwarf()).map(|(&id, _)| id).collect();
        }
        if !on {
            self.pending.clear();
        }
        self.debuginfod_on = on;
    }

    /// The session's debuginfod state, if it was ever turned on.
    pub fn debuginfod(&self) -> Option<&Debuginfod> {
        self.debuginfod.as_ref()
    }

    /// A capture starts: fetches it needs get a time budget of their own.
    pub fn start_capture(&mut self) {
        if let Some(d) = self.debuginfod.as_mut() {
            d.start_capture();
        }
    }

    /// Whether module `index` of `map` was read with DWARF (None: not read).
    pub fn module_has_dwarf(&self, map: &ModuleMap, index: usize) -> Option<bool> {
        let id = self.ids.get(&ModuleKey::of(map.module(index)))?;
        Some(self.infos.get(id)?.has_dwarf())
    }

    /// Tries debuginfod for module `id` (`m`) when it is on and the module
    /// has a build-id but no DWARF. A file that is not the module's debug
    /// file is rejected.
    fn try_debuginfod(&mut self, id: u32, m: &Module) {
        self.pending.remove(&id);
        let (Some(d), true, Some(build_id)) =
            (self.debuginfod.as_mut(), self.debuginfod_on, m.build_id.as_deref())
        else {
            return;
        };
        let Some(info) = self.infos.get_mut(&id) else { return };
        if info.has_dwarf() || info.status != Status::Ok {
            return;
        }
        let config = Config::from_env();
        match d.debug_file(build_id, &config, std::time::Instant::now()) {
            Some(path) => {
                let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    debuginfo::add_debug_file(info, m, &path, Source::Debuginfod)
                }))
                .unwrap_or_else(|_| Err("internal error while reading the file".into()));
                match added {
                    Ok(()) => self.frames.retain(|(i, _), _| *i != id),
                    Err(why) => d.reject(build_id, &config, &why),
                }
            }
            None if d.outcome(build_id).is_none() && config.has_servers() => {
                self.pending.insert(id);
            }
            None => {}
        }
    }

    pub fn registered_count(&self) -> usize {
        self.registered.len()
    }

    pub fn clear(&mut self) {
        self.ids.clear();
        self.infos.clear();
        self.starts.clear();
        self.pending.clear();
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
        if self.debuginfod_on {
            self.try_debuginfod(id, m);
        }
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
            self.starts.retain(|id, _| kept.contains(id));
            self.pending.retain(|id| kept.contains(id));
            self.frames.retain(|(id, _), _| kept.contains(id));
        }
    }

    /// The id of module `index` of `map` (its files read on first use).
    /// When `map` is not the one seen last, modules no longer loaded are
    /// forgotten first.
    fn id_in(&mut self, map: &ModuleMap, index: usize) -> u32 {
        if map.serial() != self.map_seen {
            self.retain_loaded(map);
            self.map_seen = map.serial();
            self.by_index = vec![None; map.modules().len()];
        }
        match self.by_index[index] {
            Some(id) => id,
            None => {
                let id = self.ensure(map.module(index));
                self.by_index[index] = Some(id);
                id
            }
        }
    }

    /// Resolves the file-relative address `probe` in module `index` of `map`.
    pub fn resolve_in(&mut self, map: &ModuleMap, index: usize, probe: u64) -> Arc<[Resolved]> {
        let id = self.id_in(map, index);
        if self.pending.contains(&id) {
            self.try_debuginfod(id, map.module(index));
        }
        if let Some(r) = self.frames.get(&(id, probe)) {
            return r.clone();
        }
        let mut r = resolve_guarded(&self.infos[&id], probe);
        let module = map.module(index);
        let tables = self.starts.entry(id).or_insert_with(|| EhTables::of_loaded(module));
        let start =
            tables.as_ref().and_then(|t| t.function_start((probe as usize).wrapping_add(module.bias)));
        name_registered(&mut r, start, &self.registered);
        for f in r.iter_mut() {
            f.start = start.map(|s| s.wrapping_sub(module.bias) as u64);
        }
        let r: Arc<[Resolved]> = r.into();
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert((id, probe), r.clone());
        r
    }

    /// The symbol table of module `index` of `map` (read on first use), as
    /// a copy that shares the names.
    pub fn symbol_table(&mut self, map: &ModuleMap, index: usize) -> crate::symbols::SymbolTable {
        let id = self.id_in(map, index);
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

/// Names the physical frame of `r` (its last entry) after the registered
/// routine whose address is `start`, the absolute start of its function,
/// when nothing else named it. An address inside a function is never named
/// after the entry point that called it: only an exact start matches.
fn name_registered(r: &mut [Resolved], start: Option<usize>, registered: &HashMap<usize, Arc<str>>) {
    let (Some(last), Some(start)) = (r.last_mut(), start) else { return };
    if last.func.is_none() {
        if let Some(name) = registered.get(&start) {
            last.func = Some(name.clone());
            last.source = Some(Source::Registration);
        }
    }
}

/// `info.resolve(probe)`, with a panic in the DWARF reader turned into "no
/// name".
fn resolve_guarded(info: &ModuleInfo, probe: u64) -> Vec<Resolved> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| info.resolve(probe)))
        .unwrap_or_else(|_| vec![Resolved::unnamed()])
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
    fn registered_names_only_at_an_exact_start() {
        let registered: HashMap<usize, Arc<str>> = [(0x5000usize, Arc::from("entry"))].into_iter().collect();
        let mut r = vec![Resolved::unnamed()];
        name_registered(&mut r, Some(0x5000), &registered);
        assert_eq!(r[0].func.as_deref(), Some("entry"));
        assert_eq!(r[0].source, Some(Source::Registration));
        // A helper the entry point called (another start), or an address no
        // unwind entry covers: no name.
        for start in [Some(0x5100), None] {
            let mut r = vec![Resolved::unnamed()];
            name_registered(&mut r, start, &registered);
            assert_eq!(r[0].func, None);
        }
        // A name from the symbol tables is kept.
        let mut r =
            vec![Resolved { func: Some("real".into()), source: Some(Source::Dynsym), ..Resolved::unnamed() }];
        name_registered(&mut r, Some(0x5000), &registered);
        assert_eq!(r[0].func.as_deref(), Some("real"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn live_frames_get_their_function_start_and_registered_names() {
        #[inline(never)]
        fn target(x: u64) -> u64 {
            std::hint::black_box(x).wrapping_add(7)
        }
        let f = target as fn(u64) -> u64 as usize;
        let _ = target(1);
        let map = crate::modules::current();
        let index = map.module_of(f).unwrap();
        let bias = map.module(index).bias;
        // Names from a loader that knows none, so registration can name it.
        let loader: Loader = Box::new(|_: &Module, _: &[PathBuf]| ModuleInfo::from_symbols(Vec::new()));
        let mut s = Symbolizer::new(loader, Vec::new());
        let probe = (f + 3 - bias) as u64;
        let r = s.resolve_in(&map, index, probe);
        assert_eq!(r.last().unwrap().start, Some((f - bias) as u64));
        assert_eq!(r.last().unwrap().func, None);
        s.set_registered(vec![(f + 1, "off_by_one".into())]);
        assert_eq!(s.resolve_in(&map, index, probe).last().unwrap().func, None);
        s.set_registered(vec![(f, "target_entry".into())]);
        assert_eq!(s.registered_count(), 1);
        let r = s.resolve_in(&map, index, probe);
        assert_eq!(r.last().unwrap().func.as_deref(), Some("target_entry"));
        assert_eq!(r.last().unwrap().source, Some(Source::Registration));
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
